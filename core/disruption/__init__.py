"""Karpenter's disruption planner: candidates, budgets, drift, emptiness, consolidation and expiration.

`plan_disruption` is the entry point; everything here is pure and deterministic (pass `now`)."""

from core.disruption.commands import (
    EXPIRED,
    Blocked,
    BlockReason,
    Command,
    Decision,
    Disrupted,
    Method,
    PodMove,
    Reason,
    Replacement,
)
from core.disruption.drift import DriftInputs
from core.disruption.options import DisruptionOptions
from core.disruption.plan import DisruptionPlan, plan_disruption

__all__ = [
    "EXPIRED",
    "BlockReason",
    "Blocked",
    "Command",
    "Decision",
    "Disrupted",
    "DisruptionOptions",
    "DisruptionPlan",
    "DriftInputs",
    "Method",
    "PodMove",
    "Reason",
    "Replacement",
    "plan_disruption",
]
