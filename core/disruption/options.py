"""What a disruption plan may do: which methods, which NodePools, spot-to-spot, and what drift compares to."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.disruption.commands import Method
from core.disruption.drift import DriftInputs
from core.disruption.repair import RepairPolicy
from core.scheduling.scheduler import SchedulingOptions


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
