"""What a provisioning simulation is given: the NodePools (as the scheduler needs them), the nodes of the
cluster with their pods, and the policies that change its answers."""

from __future__ import annotations

from dataclasses import dataclass

from core import labels
from core.api.kube import Pod
from core.api.meta import Taint
from core.resources import Resources
from core.scheduling.requirements import Requirements


@dataclass(frozen=True, slots=True)
class NodePoolSpec:
    """What the scheduler needs of a NodePool, already validated."""

    name: str
    weight: int
    requirements: Requirements
    labels: dict[str, str]
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    limits: Resources | None = None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A node of the cluster (or a NodeClaim still launching) with the pods bound to it."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    capacity: Resources
    pods: tuple[Pod, ...] = ()
    initialized: bool = True

    @property
    def nodepool(self) -> str | None:
        """The NodePool the node belongs to (its `karpenter.sh/nodepool` label), if any."""
        return self.labels.get(labels.NODEPOOL)


@dataclass(frozen=True, slots=True)
class SchedulingOptions:
    """The operator settings that change what the simulation decides."""

    respect_preferences: bool = True
    """Karpenter's PREFERENCE_POLICY=Respect; False ignores preferred affinities and ScheduleAnyway spread."""
    min_values_best_effort: bool = False
    """Karpenter's MIN_VALUES_POLICY=BestEffort."""
