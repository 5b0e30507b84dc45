"""Karpenter's provisioning simulation, as callers use it: `Scheduler(...).solve(pods)` places pending pods
on existing nodes, then on NodeClaims made earlier in the simulation, then on new NodeClaims from NodePools in
weight order; `Scheduler(...).removals(movable)` answers, trial after trial, where the pods of nodes would go
if those nodes were removed (what Karpenter's disruption asks). Both run the engine in
`core.scheduling.simulation`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.api.kube import Pod
from core.instancetypes.types import InstanceType
from core.scheduling.inputs import NodePoolSpec, NodeSnapshot, SchedulingOptions
from core.scheduling.pods import BoundPods, InvalidPodConstraint, PodInfo, compile_pod
from core.scheduling.removal import RemovalSimulation
from core.scheduling.results import SchedulingResults, Unschedulable
from core.scheduling.simulation import MAX_INSTANCE_TYPES, Simulation
from core.scheduling.topology import TopologyGroup

DEFAULT_OPTIONS = SchedulingOptions()
"""Karpenter's defaults: preferences respected, minValues strict."""


class Scheduler:
    """Provisioning simulations over a fixed snapshot: NodePools, their instance types, the cluster's nodes
    with their pods, and DaemonSets."""

    def __init__(
        self,
        nodepools: Sequence[NodePoolSpec],
        instance_types: Mapping[str, Sequence[InstanceType]],
        nodes: Sequence[NodeSnapshot] = (),
        daemonsets: Sequence[Pod] = (),
        options: SchedulingOptions = DEFAULT_OPTIONS,
        bound_pods: BoundPods | None = None,
    ) -> None:
        """`bound_pods`: the planner's memory of compiled bound pods, for a planner that solves again and again
        against mostly the same cluster (`core.scheduling.pods.BoundPods`)."""
        self.options = options
        self._bound_pods = bound_pods
        self.nodepools = sorted(nodepools, key=lambda pool: pool.name, reverse=True)
        self.nodepools.sort(key=lambda pool: pool.weight, reverse=True)
        self._instance_types = instance_types
        self._nodes = nodes
        self._daemonsets: list[PodInfo] = []
        for daemonset in daemonsets:
            try:
                self._daemonsets.append(compile_pod(daemonset, respect_preferences=False))
            except InvalidPodConstraint:
                continue

    def solve(self, pods: Sequence[Pod]) -> SchedulingResults:
        """Place the pods; every pod ends up on an existing node, on a new NodeClaim, or unschedulable with reasons."""
        compiled: list[PodInfo] = []
        invalid: list[Unschedulable] = []
        for pod in pods:
            try:
                compiled.append(compile_pod(pod, self.options.respect_preferences))
            except InvalidPodConstraint as error:
                namespace = pod.metadata.namespace or "default"
                invalid.append(Unschedulable(f"{namespace}/{pod.metadata.name}", [f"ignoring pod: {error}"]))
        run = Simulation(
            self.nodepools,
            self._instance_types,
            self._nodes,
            self._daemonsets,
            self.options,
            compiled,
            self._bound_pods,
        )
        results = run.solve()
        results.unschedulable.extend(invalid)
        return results

    def removals(self, movable: Mapping[str, Sequence[Pod]]) -> RemovalSimulation:
        """A simulation in which removing nodes is tried: `simulate(nodes)` says where their pods would go
        (existing nodes, new NodeClaims, or nowhere with reasons), as `solve` would on the cluster without
        them; `rollback` undoes a trial and `commit` keeps it for the next. `movable` holds, per node, the
        pods that need a new place when it goes (bound pods not listed stay, holding their room)."""
        return RemovalSimulation(
            self.nodepools, self._instance_types, self._nodes, self._daemonsets, self.options, movable
        )


__all__ = [
    "MAX_INSTANCE_TYPES",
    "NodePoolSpec",
    "NodeSnapshot",
    "RemovalSimulation",
    "Scheduler",
    "SchedulingOptions",
    "SchedulingResults",
    "TopologyGroup",
]
