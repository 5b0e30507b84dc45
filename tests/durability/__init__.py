"""Durability: the system survives killed workers and a restarted Temporal server."""
