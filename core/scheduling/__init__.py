"""Karpenter's provisioning simulation: requirement algebra, topology, and the solve loop."""
