"""Karpenter's disruption simulation: where the pods of candidate nodes would go, through the scheduler's
`RemovalSimulation` (built once per plan, trials kept or undone as commands are chosen).

What disruption adds is Karpenter's rule for what a simulation may count on: a pod that finds a place only
on a node that is not initialized yet is a problem, as is a pod that finds none. Everything else (where pods
go, which NodeClaims are needed) is the scheduler's answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from core.api.kube import Pod
from core.scheduling.instancetypeset import InstanceTypeSet
from core.scheduling.removal import Capacity, PlannedNodeClaim, Removal, RemovalSimulation
from core.scheduling.results import NewNodeClaim
from core.scheduling.scheduler import Scheduler, SchedulingOptions
from core.scheduling.snapshot import SchedulingSnapshot


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a trial put one pod of a detached node; `problem` says why it found no place."""

    pod: str
    source: str
    destination: str | None
    """An existing node's name, or the placeholder hostname of a new NodeClaim."""
    nodeclaim: int | None
    """The index of the new NodeClaim in `Outcome.nodeclaims` when the pod goes to one."""
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What removing some nodes would take: where their pods go and which NodeClaims must be launched."""

    placements: tuple[Placement, ...]
    nodeclaims: tuple[NewNodeClaim, ...]
    exceeded: int | None = None
    """Set when the trial stopped as soon as it needed this many new NodeClaims, more than it was allowed
    (placements and NodeClaims are then incomplete)."""

    @property
    def problems(self) -> list[Placement]:
        """Pods that found no place, or only one on a node that is not initialized yet."""
        return [placement for placement in self.placements if placement.problem is not None]

    @property
    def scheduled(self) -> bool:
        """Whether every pod found a place Karpenter would count on."""
        return self.exceeded is None and not self.problems

    def describe_problems(self) -> str:
        """The first problem as a sentence, with how many more there are."""
        problems = self.problems
        if not problems:
            return ""
        first = problems[0]
        text = f"pod {first.pod} cannot be rescheduled: {first.problem}"
        if len(problems) > 1:
            text += f" (and {len(problems) - 1} more pods)"
        return text


class Sandbox:
    """The cluster in which a plan tries removing nodes: a `RemovalSimulation` whose answers are read with
    Karpenter's disruption rules."""

    def __init__(
        self,
        snapshot: SchedulingSnapshot,
        movable: Mapping[str, Sequence[Pod]],
        options: SchedulingOptions,
    ) -> None:
        """`movable` holds, per node, the pods that would need a new place if the node went."""
        scheduler = Scheduler(
            snapshot.nodepools, snapshot.instance_types, snapshot.nodes, snapshot.daemonsets, options
        )
        self._removals: RemovalSimulation = scheduler.removals(movable)

    @property
    def received(self) -> set[str]:
        """Existing nodes that committed trials moved pods onto."""
        return self._removals.received

    @property
    def removed(self) -> set[str]:
        """Nodes that committed trials took away."""
        return self._removals.removed

    def instance_types(self) -> dict[str, InstanceTypeSet]:
        """Each NodePool's instance types as the simulation holds them."""
        return self._removals.instance_types()

    def can_try(self, node: str) -> bool:
        """Whether the node's removal can be simulated: it is a node of the cluster not yet removed."""
        return self._removals.can_remove(node)

    def capacity(self, nodes: Sequence[str], closed: Collection[str] = ()) -> Capacity:
        """The cluster as a solver sees it, with the movable pods of `nodes` (`RemovalSimulation.capacity`)."""
        return self._removals.capacity(nodes, closed)

    def simulate(
        self,
        nodes: Sequence[str],
        max_nodeclaims: int | None = None,
        closed: Collection[str] = (),
        directions: Mapping[str, str | int] | None = None,
        planned: Sequence[PlannedNodeClaim] = (),
    ) -> Outcome:
        """Where the pods of `nodes` would go without them (see `RemovalSimulation.simulate`; with
        `directions`, only where they say); the trial stays open until `commit` or `rollback`."""
        return self._outcome(self._removals.simulate(nodes, max_nodeclaims, closed, directions, planned))

    def _outcome(self, removal: Removal) -> Outcome:
        uninitialized = self._removals.uninitialized
        placements = []
        for move in removal.moves:
            problem: str | None = None
            if move.destination is None:
                problem = "; ".join(move.reasons)
            elif move.destination in uninitialized:
                problem = f"would schedule against uninitialized node {move.destination}"
            placements.append(Placement(move.pod, move.source, move.destination, move.nodeclaim, problem))
        return Outcome(tuple(placements), removal.nodeclaims, removal.exceeded)

    def rollback(self) -> None:
        """Undo the open trial: the nodes are back with their pods, as if it never ran."""
        self._removals.rollback()

    def commit(self, replacement_names: Sequence[str]) -> None:
        """Keep the open trial (see `RemovalSimulation.commit`)."""
        self._removals.commit(replacement_names)
