"""What removing nodes from the cluster would take: the public way to ask the provisioning simulation where
the pods of some nodes would go without them, and which new NodeClaims they would need.

Karpenter asks this once per disruption candidate set, each time with a fresh simulation of the whole
cluster. Building that simulation is what costs (compiling every bound pod, counting topology domains);
placing a node's ten pods is cheap. So a `RemovalSimulation` is built once, with every pod that might move
already counted where it runs, and each trial only detaches the nodes it removes (they refuse every pod,
their pods leave the topology counts), places their pods with the scheduler's own loop, and then either
keeps the result (`commit`) or puts back exactly what the trial changed (`rollback`).

The trial is the scheduler's: same queue order, same first-fit over existing nodes (initialized first,
then by name), same NodeClaims from NodePools in weight order with DaemonSet overhead, limits and topology.
A trial answers exactly as `Scheduler.solve` would on the cluster without the removed nodes, given their
pods. Nodes a committed trial launches are not added as capacity: Karpenter will not count on a node
that is not initialized yet, and neither does a later trial.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from core.api.kube import Pod, pod_key
from core.instancetypes.types import InstanceType
from core.resources import Resources
from core.scheduling.inputs import NodePoolSpec, NodeSnapshot, SchedulingOptions
from core.scheduling.instancetypeset import InstanceTypeSet, IntArray
from core.scheduling.pods import InvalidPodConstraint, PodInfo, compile_pod
from core.scheduling.results import NewNodeClaim
from core.scheduling.simulation import Simulation, TooManyNodeClaims
from core.scheduling.topology import TopologyGroup

REFUSE_ALL = -1
"""What a removed node has left of every resource: less than any pod asks for."""


@dataclass(frozen=True, slots=True)
class Move:
    """Where a trial put one pod of a removed node, or why it found no place (`reasons`)."""

    pod: str
    """`namespace/name`."""
    source: str
    destination: str | None
    """An existing node's name, or the placeholder hostname of a new NodeClaim; None when unplaced."""
    nodeclaim: int | None
    """The index of the new NodeClaim in `Removal.nodeclaims` when the pod goes to one."""
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Removal:
    """What removing some nodes takes: where their pods go and which NodeClaims must be launched."""

    moves: tuple[Move, ...]
    nodeclaims: tuple[NewNodeClaim, ...]
    exceeded: int | None = None
    """Set when the trial stopped as soon as it needed this many new NodeClaims, more than it was allowed
    (moves and NodeClaims are then incomplete)."""

    @property
    def unplaced(self) -> list[Move]:
        """The pods that found no place, each with why."""
        return [move for move in self.moves if move.destination is None]


@dataclass(slots=True)
class _Trial:
    nodes: tuple[str, ...]
    pods: list[PodInfo]
    free: IntArray
    groups: list[tuple[TopologyGroup, dict[str, int]]]
    """Copies of the counts of every group the trial's pods count in."""
    hostnames: list[tuple[TopologyGroup, int]]
    """How many domains each hostname group had: new NodeClaims add theirs at the end."""


def _identity(pod: Pod) -> str:
    return pod.metadata.uid or pod_key(pod)


def _copy_limits(limits: Mapping[str, Resources]) -> dict[str, Resources]:
    return {pool: dict(remaining) for pool, remaining in limits.items()}


class RemovalSimulation:
    """One provisioning simulation over the cluster in which removing nodes is tried, kept or undone.

    Made by `Scheduler.removals`; one trial is open at a time."""

    def __init__(
        self,
        nodepools: Sequence[NodePoolSpec],
        instance_types: Mapping[str, Sequence[InstanceType]],
        nodes: Sequence[NodeSnapshot],
        daemonsets: Sequence[PodInfo],
        options: SchedulingOptions,
        movable: Mapping[str, Sequence[Pod]],
    ) -> None:
        """`nodepools` in weight order; `movable` holds, per node, the pods that need a new place if the
        node goes (the others stay where they are, holding their room and counting in topology)."""
        self._pods: dict[str, list[PodInfo]] = {}
        self._invalid: dict[str, list[tuple[str, str]]] = {}
        for node, pods in movable.items():
            for pod in pods:
                try:
                    self._pods.setdefault(node, []).append(compile_pod(pod, options.respect_preferences))
                except InvalidPodConstraint as error:
                    self._invalid.setdefault(node, []).append((pod_key(pod), f"ignoring pod: {error}"))
        # The simulation sees the movable pods as pods to place, not as bound ones: they are compiled once,
        # here, and bound back to their nodes below. Pods it cannot compile stay bound, holding their room.
        moving = {info.uid for infos in self._pods.values() for info in infos}
        staying = [
            replace(node, pods=tuple(pod for pod in node.pods if _identity(pod) not in moving))
            for node in nodes
        ]
        everyone = [pod for pods in self._pods.values() for pod in pods]
        self._sim = Simulation(nodepools, instance_types, staying, daemonsets, options, everyone)
        self._row = {node.name: row for row, node in enumerate(self._sim.existing)}
        for node, compiled in self._pods.items():
            self._sim.bind(self._row[node], compiled)
        self._limits = _copy_limits(self._sim.remaining)
        self._trial: _Trial | None = None
        self.uninitialized = frozenset(node.name for node in nodes if not node.initialized)
        """Existing nodes that are not initialized yet (Karpenter's disruption will not count on them)."""
        self.received: set[str] = set()
        """Existing nodes that committed trials moved pods onto."""
        self.removed: set[str] = set()
        """Nodes that committed trials took away."""

    def instance_types(self) -> dict[str, InstanceTypeSet]:
        """Each NodePool's instance types as the simulation holds them."""
        return {template.nodepool: template.instance_types for template in self._sim.templates}

    def can_remove(self, node: str) -> bool:
        """Whether the node's removal can be simulated: it is a node of the cluster not yet removed."""
        return node in self._row and node not in self.removed

    def simulate(
        self, nodes: Sequence[str], max_nodeclaims: int | None = None, closed: Collection[str] = ()
    ) -> Removal:
        """Where the pods of `nodes` would go without them. The trial stays open until `commit` or
        `rollback`. With `max_nodeclaims`, the trial stops as soon as it needs more new NodeClaims. The
        `closed` nodes stay but take none of the moving pods (Karpenter's consolidation will not move pods
        onto a node whose pods changed within its NodePool's consolidateAfter)."""
        if self._trial is not None:
            raise RuntimeError("a trial is already open: commit or roll it back first")
        unknown = [node for node in nodes if not self.can_remove(node)]
        if unknown:
            raise ValueError(f"cannot simulate removing {', '.join(unknown)}: not a node, or already removed")
        sim = self._sim
        topology = sim.topology
        pods = [pod for node in nodes for pod in self._pods.get(node, ())]
        touched = {id(group): group for pod in pods for group in topology.counting(pod)}
        self._trial = _Trial(
            nodes=tuple(nodes),
            pods=pods,
            free=sim.existing_free.copy(),
            groups=[(group, dict(group.domains)) for group in touched.values()],
            hostnames=[(group, len(group.domains)) for group in topology.hostname_groups()],
        )
        for node in nodes:
            row = self._row[node]
            existing = sim.existing[row]
            for pod in self._pods.get(node, ()):
                topology.count(pod, existing.taints, existing.requirements, -1)
            sim.existing_free[row] = REFUSE_ALL
        refusing = None
        rows = [self._row[node] for node in closed if node in self._row]
        if rows:
            refusing = np.zeros(len(sim.existing), dtype=np.bool_)
            refusing[rows] = True
        sim.reset(pods, _copy_limits(self._limits), max_nodeclaims, refusing)
        try:
            results = sim.solve()
        except TooManyNodeClaims as exceeded:
            return Removal((), (), exceeded=exceeded.count)
        failures = {entry.pod: entry.reasons for entry in results.unschedulable}
        return self._removal(nodes, results.nodeclaims, failures)

    def _removal(
        self, nodes: Sequence[str], nodeclaims: list[NewNodeClaim], failures: Mapping[str, list[str]]
    ) -> Removal:
        sim = self._sim
        claim_index = {claim.hostname: index for index, claim in enumerate(sim.claims)}
        moves: list[Move] = []
        for node in nodes:
            for pod in self._pods.get(node, ()):
                destination = sim.placements.get(pod.uid)
                if destination is None:
                    reasons = tuple(failures.get(pod.key) or ["no place found"])
                    moves.append(Move(pod.key, node, None, None, reasons))
                else:
                    moves.append(Move(pod.key, node, destination, claim_index.get(destination)))
            for key, error in self._invalid.get(node, ()):
                moves.append(Move(key, node, None, None, (error,)))
        return Removal(tuple(moves), tuple(nodeclaims))

    def rollback(self) -> None:
        """Undo the open trial: the nodes are back with their pods, as if it never ran."""
        trial = self._close()
        sim = self._sim
        placed: dict[int, list[PodInfo]] = {}
        for pod in trial.pods:
            row = self._row.get(sim.placements.get(pod.uid, ""))
            if row is not None:
                placed.setdefault(row, []).append(pod)
        for row, pods in placed.items():
            node = sim.existing[row]
            node.available = trial.free[row].copy()
            del node.pods[len(node.pods) - len(pods) :]
            for pod in pods:
                node.host_ports.difference_update(pod.host_ports)
        sim.existing_free = trial.free
        for group, domains in trial.groups:
            group.domains.clear()
            group.domains.update(domains)
        for group, size in trial.hostnames:
            for hostname in list(group.domains)[size:]:
                del group.domains[hostname]

    def commit(self, replacement_names: Sequence[str]) -> None:
        """Keep the open trial: the nodes are gone, their pods placed, and the new NodeClaims (named
        `replacement_names`, in order) hold their pods in topology counts but take no other pods."""
        trial = self._close()
        sim = self._sim
        if len(replacement_names) != len(sim.claims):
            raise ValueError(f"{len(sim.claims)} new NodeClaims to name, got {len(replacement_names)} names")
        names = {claim.hostname: name for claim, name in zip(sim.claims, replacement_names, strict=True)}
        for group, size in trial.hostnames:
            for hostname in list(group.domains)[size:]:
                count = group.domains.pop(hostname)
                if hostname in names:
                    group.domains[names[hostname]] = count
                elif hostname in self._row:
                    group.domains[hostname] = count
        self._limits = _copy_limits(sim.remaining)
        self.removed.update(trial.nodes)
        for pod in trial.pods:
            destination = sim.placements.get(pod.uid, "")
            if destination in self._row:
                # The pod now runs there: removing that node later moves it again.
                self._pods.setdefault(destination, []).append(pod)
                self.received.add(destination)
                # The simulation lists a node's placed pods in every result: keep only a trial's there.
                sim.existing[self._row[destination]].pods.clear()

    def _close(self) -> _Trial:
        if self._trial is None:
            raise RuntimeError("no trial is open")
        trial, self._trial = self._trial, None
        return trial


__all__ = ["Move", "Removal", "RemovalSimulation"]
