"""Workflow ids, in a module of their own: the lifecycle's sandbox imports this afresh for every NodeClaim it
starts or replays, and importing the provisioner's module for them cost a fifth of that."""

from __future__ import annotations


def provisioner_id(cluster: str) -> str:
    return f"provisioner/{cluster}"


def nodeclaim_id(name: str) -> str:
    return f"nodeclaim/{name}"


def static_id(cluster: str, nodepool: str) -> str:
    return f"static/{cluster}/{nodepool}"


def capacity_window_id(cluster: str, window: str) -> str:
    """The id of a CapacityWindow's Temporal Schedule, and the prefix of its runs' workflow ids (Temporal appends
    the time each run was scheduled for)."""
    return f"capacity-window/{cluster}/{window}"
