"""Instance types and their offerings: the Azure catalog with AKS formulas, and user-supplied catalogs."""
