"""Temporal workflows: orchestration only (provisioner, NodeClaim lifecycle, disruption)."""
