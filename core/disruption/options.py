"""What a disruption plan may do: which methods, which NodePools, spot-to-spot, and what drift compares to."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from core.disruption.commands import Method
from core.disruption.drift import DriftInputs
from core.disruption.repair import RepairPolicy
from core.messages import RepackSettings
from core.repack_defaults import (
    DEFAULT_DEADLINE_SECONDS,
    DEFAULT_MAX_PODS_MOVED,
    DEFAULT_MIN_SAVINGS_MICROS,
    DEFAULT_MIN_SAVINGS_PERCENT,
)
from core.scheduling.scheduler import SchedulingOptions


@dataclass(frozen=True, slots=True)
class RepackOptions:
    """The repack (`core.disruption.repack`): whether it runs, what a command must be worth, and how long it may
    search."""

    enabled: bool = True
    """False: Karpenter's methods alone (the plan still states its cost and bound)."""
    min_savings_micros: int = DEFAULT_MIN_SAVINGS_MICROS
    """A repack command must save at least this per hour."""
    min_savings_percent: float = DEFAULT_MIN_SAVINGS_PERCENT
    """And at least this share (in percent) of the price of the nodes it retires, so that what a command is worth
    does not shrink with the size of the nodes it moves pods off."""
    max_pods_moved: int = DEFAULT_MAX_PODS_MOVED
    """A repack command evicts at most this many pods."""
    window: int = 8
    """Candidates one solve considers together."""
    deadline: timedelta = timedelta(seconds=DEFAULT_DEADLINE_SECONDS)
    """How long the repack may search, by `clock`, counted from the plan's start (`started`), so that the whole
    plan stays within Karpenter's methods' time plus this (the bound and the commands found by then are kept)."""
    clock: Callable[[], float] | None = None
    """Seconds from any fixed origin (`time.monotonic`); None: no deadline, only the solver's node limits."""
    started: float | None = None
    """When the plan began, by `clock` (`plan_disruption` sets it); None: when the repack begins."""
    hint: frozenset[str] = frozenset()
    """The candidates of a repack command being validated: tried first, together, as they were planned."""
    settling: bool = True
    """Refuse packings the steered drain could not carry out (`repack.steering`: kube-scheduler, evicted pod by pod
    with the new nodes held back, would leave a pod without room); False trusts the pods to land where the plan
    sends them (what an evaluation that applies plans as written measures)."""
    eventual_bound: bool = False
    """The plan's bound covers any sequence of passes, not this one: the budgets' and PDBs' per-pass limits left
    out (a PDB that allows no eviction now still keeps its pods), what a disruption loop could reach pass after
    pass (the disruption benchmark's rounds compare against it)."""

    @classmethod
    def from_settings(
        cls, settings: RepackSettings, clock: Callable[[], float] | None, hint: frozenset[str] = frozenset()
    ) -> RepackOptions:
        """The options the settings a user gives (chart values, `NODEWRIGHT_REPACK_*`) ask for; the disruption
        loop and the what-if commands both read them through this."""
        return cls(
            enabled=settings.enabled,
            min_savings_micros=settings.min_savings_micros,
            min_savings_percent=settings.min_savings_percent,
            max_pods_moved=settings.max_pods_moved,
            deadline=timedelta(seconds=settings.deadline_seconds),
            clock=clock,
            hint=hint,
        )


def required_savings(retired_micros: int, min_savings_micros: int, min_savings_percent: float) -> int:
    """What a repack command that retires nodes costing `retired_micros` per hour must save per hour: the absolute
    minimum, and the share of what it retires (rounded up to a whole micro-dollar)."""
    return max(min_savings_micros, math.ceil(retired_micros * min_savings_percent / 100))


@dataclass(frozen=True, slots=True)
class DisruptionOptions:
    spot_to_spot_consolidation: bool = False
    """Karpenter's SpotToSpotConsolidation feature gate (off by default, as in Karpenter)."""
    methods: frozenset[Method] = frozenset(Method)
    """The methods the plan runs (manual consolidation runs only the consolidation methods, for example)."""
    nodepools: frozenset[str] | None = None
    """Only disrupt nodes of these NodePools; None for every pool."""
    drift: DriftInputs = field(default_factory=DriftInputs)
    scheduling: SchedulingOptions = field(default_factory=SchedulingOptions)
    """How the simulation places the candidates' pods (preference and minValues policies)."""
    repair: tuple[RepairPolicy, ...] | None = None
    """Node repair with these policies (`aks_repair_policies()`); None: no repair (Karpenter's NodeRepair gate)."""
    repack: RepackOptions | None = None
    """The repack after Karpenter's methods, and the plan's cost and lower bound; None: neither."""
