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

from core import labels
from core.api.kube import Pod, TopologySpreadConstraint, UnsatisfiableConstraintAction, pod_key
from core.instancetypes.types import InstanceType
from core.resources import Resources
from core.scheduling.inputs import NodePoolSpec, NodeSnapshot, SchedulingOptions
from core.scheduling.instancetypeset import BoolArray, InstanceTypeSet, IntArray
from core.scheduling.nodes import NodeClaimTemplate, untolerated_taint
from core.scheduling.pods import InvalidPodConstraint, PodInfo, compile_pod
from core.scheduling.requirements import Requirements
from core.scheduling.results import NewNodeClaim
from core.scheduling.simulation import Directions, Simulation, TooManyNodeClaims
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


@dataclass(frozen=True, slots=True)
class PlannedNodeClaim:
    """A NodeClaim a directed trial opens for the pods directed to it: its NodePool, and the instance types it
    may be (the trial keeps those that fit its pods, as any NodeClaim's)."""

    nodepool: str
    instance_types: frozenset[str]
    zone: str | None = None
    """The zone it is pinned to (a solver that counted zonal topology spread chose it); None: any."""


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """What a NodePool can launch, as the simulation sees it."""

    nodepool: str
    names: tuple[str, ...]
    """Its instance types (the rows of `headroom`)."""
    headroom: IntArray
    """Per instance type, allocatable less the DaemonSet pods that would run on it (columns: `Capacity.axes`)."""
    launchable: BoolArray
    """The types compatible with the NodePool's requirements that have an offering."""
    requirements: Requirements
    """The NodePool's requirements (its labels and `karpenter.sh/nodepool` included), as new NodeClaims start."""


@dataclass(frozen=True, slots=True)
class PodFit:
    """One movable pod: what it asks for, and the places whose labels and taints admit it (a solver's view: the
    trial still checks topology, host ports, volume topology and everything else)."""

    key: str
    node: str
    """Where it runs now."""
    requests: IntArray
    nodes: BoolArray
    """The existing nodes (rows of `Capacity.nodes`) that admit it."""
    types: dict[str, BoolArray]
    """Per NodePool, the instance types a new NodeClaim for it could be."""
    zones: frozenset[str] | None = None
    """The zones its DoNotSchedule zonal topology spread constraints let it go to, counted as they stand with
    this pod alone taken away; None when it has no such constraint."""
    spreads: tuple[int, ...] = ()
    """The DoNotSchedule zonal spread groups whose counts it is in (numbered per simulation): moving two pods
    of one group at once changes counts that `zones` took as fixed."""


@dataclass(frozen=True, slots=True)
class Capacity:
    """The cluster as a solver needs it: what is left on each node, what each NodePool can launch, and where
    each movable pod may go."""

    axes: tuple[str, ...]
    nodes: tuple[str, ...]
    nodepools: tuple[str | None, ...]
    """Each node's NodePool, if it has one."""
    free: IntArray
    """Per existing node, what is left of each resource now (negative on a node that was removed)."""
    open: BoolArray
    """Nodes that may take pods: initialized, not removed, not closed to them."""
    live: BoolArray
    """Nodes kube-scheduler may put pods on: initialized and not removed (closed ones too)."""
    pools: tuple[PoolCapacity, ...]
    pods: tuple[PodFit, ...]
    allocatable: IntArray
    """Per existing node, its allocatable (columns: `axes`), what kube-scheduler's scores divide by."""
    zones: tuple[str | None, ...]
    """Each node's zone label, if it has one."""
    avoided: IntArray
    """Per existing node, how many PreferNoSchedule taints it carries."""

    def pool(self, nodepool: str) -> PoolCapacity:
        """What that NodePool can launch (KeyError when it is not one of `pools`)."""
        for pool in self.pools:
            if pool.nodepool == nodepool:
                return pool
        raise KeyError(nodepool)


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


def _zonal_terms(pod: PodInfo) -> list[TopologySpreadConstraint]:
    """The pod's DoNotSchedule topology spread constraints on the zone."""
    return [
        term
        for term in pod.constraints.spread
        if term.topology_key == labels.ZONE
        and term.when_unsatisfiable == UnsatisfiableConstraintAction.DO_NOT_SCHEDULE
    ]


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
        by_name = {node.name: node for node in nodes}
        ordered = [by_name[node.name] for node in self._sim.existing]
        self._allocatable = (
            np.stack([self._sim.axes.vector(node.allocatable) for node in ordered])
            if ordered
            else np.zeros((0, len(self._sim.axes.names)), dtype=np.int64)
        )
        self._zones = tuple(node.labels.get(labels.ZONE) for node in ordered)
        self._avoided = np.array(
            [sum(t.effect == "PreferNoSchedule" for t in node.taints) for node in ordered], dtype=np.int64
        )
        for node, compiled in self._pods.items():
            self._sim.bind(self._row[node], compiled)
        self._limits = _copy_limits(self._sim.remaining)
        self._zonal: dict[int, int] = {}
        """The DoNotSchedule zonal spread groups of the movable pods, numbered (by `id`)."""
        topology = self._sim.topology
        for infos in self._pods.values():
            for info in infos:
                for term in _zonal_terms(info):
                    group = topology.owned(info, term)
                    if group is not None:
                        self._zonal.setdefault(id(group), len(self._zonal))
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

    def capacity(self, nodes: Sequence[str], closed: Collection[str] = ()) -> Capacity:
        """The cluster as it stands (after the committed trials), with the movable pods of `nodes`; the
        `closed` nodes take no pods."""
        sim = self._sim
        live = np.array(
            [node.initialized and node.name not in self.removed for node in sim.existing], dtype=np.bool_
        )
        open_rows = live.copy()
        for node in closed:
            if node in self._row:
                open_rows[self._row[node]] = False
        index = sim._index
        cache: dict[tuple[object, ...], BoolArray] = {}
        fits = []
        for node in nodes:
            for pod in self._pods.get(node, ()):
                constraints = pod.constraints
                strict = constraints.strict_requirements()
                fits.append(
                    PodFit(
                        key=pod.key,
                        node=node,
                        requests=sim.vectors[pod.uid],
                        nodes=index.admits(constraints, strict),
                        types={
                            template.nodepool: _launchable_for(template, pod, cache)
                            for template in sim.templates
                        },
                        zones=self._spread_zones(pod, node),
                        spreads=tuple(
                            self._zonal[id(group)]
                            for group in sim.topology.selecting(pod)
                            if id(group) in self._zonal
                        ),
                    )
                )
        return Capacity(
            axes=sim.axes.names,
            nodes=tuple(node.name for node in sim.existing),
            nodepools=tuple(node.nodepool for node in sim.existing),
            free=sim.existing_free.copy(),
            open=open_rows,
            live=live,
            pools=tuple(
                PoolCapacity(
                    template.nodepool,
                    tuple(template.instance_types.names),
                    template.headroom,
                    template.base_mask,
                    template.requirements,
                )
                for template in sim.templates
            ),
            pods=tuple(fits),
            allocatable=self._allocatable,
            zones=self._zones,
            avoided=self._avoided,
        )

    def _spread_zones(self, pod: PodInfo, node: str) -> frozenset[str] | None:
        """The zones the pod's DoNotSchedule zonal spread constraints allow it, as the counts stand with it
        taken away from `node` (None without such a constraint)."""
        terms = _zonal_terms(pod)
        if not terms:
            return None
        topology = self._sim.topology
        existing = self._sim.existing[self._row[node]]
        pod_domains = pod.constraints.strict_requirements().get(labels.ZONE)
        allowed: set[str] | None = None
        for term in terms:
            group = topology.owned(pod, term)
            if group is None:
                continue
            counted = existing.requirements.has(labels.ZONE) and group.counts(
                pod, existing.taints, existing.requirements
            )
            zone = existing.requirements.get(labels.ZONE).any() if counted else None
            if zone is not None:
                group.domains[zone] -= 1
            try:
                valid, _ = group.allowed(group.selects(pod.namespace, pod.labels), pod_domains)
            finally:
                if zone is not None:
                    group.domains[zone] += 1
            allowed = valid if allowed is None else allowed & valid
        return None if allowed is None else frozenset(allowed)

    def simulate(
        self,
        nodes: Sequence[str],
        max_nodeclaims: int | None = None,
        closed: Collection[str] = (),
        directions: Mapping[str, str | int] | None = None,
        planned: Sequence[PlannedNodeClaim] = (),
    ) -> Removal:
        """Where the pods of `nodes` would go without them. The trial stays open until `commit` or
        `rollback`. With `max_nodeclaims`, the trial stops as soon as it needs more new NodeClaims. The
        `closed` nodes stay but take none of the moving pods (Karpenter's consolidation will not move pods
        onto a node whose pods changed within its NodePool's consolidateAfter).

        With `directions` (pod `namespace/name` -> an existing node's name, or an index into `planned`), each
        pod is tried only there, with every check the scheduler makes there, in the scheduler's order: a
        solver's proposal, verified (a pod that does not fit where it was sent is unplaced, with why)."""
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
        sim.reset(
            pods,
            _copy_limits(self._limits),
            max_nodeclaims,
            refusing,
            self._directions(pods, directions, planned),
        )
        try:
            results = sim.solve()
        except TooManyNodeClaims as exceeded:
            return Removal((), (), exceeded=exceeded.count)
        failures = {entry.pod: entry.reasons for entry in results.unschedulable}
        return self._removal(nodes, results.nodeclaims, failures)

    def _directions(
        self,
        pods: Sequence[PodInfo],
        directions: Mapping[str, str | int] | None,
        planned: Sequence[PlannedNodeClaim],
    ) -> Directions | None:
        if directions is None:
            return None
        sim = self._sim
        templates = {template.nodepool: position for position, template in enumerate(sim.templates)}
        existing: dict[str, int] = {}
        claims: dict[str, int] = {}
        for pod in pods:
            where = directions.get(pod.key)
            if isinstance(where, int):
                claims[pod.uid] = where
            elif where is not None and where in self._row:
                existing[pod.uid] = self._row[where]
        opened = []
        for claim in planned:
            position = templates.get(claim.nodepool)
            if position is None:
                raise ValueError(f'NodePool "{claim.nodepool}" has no template in this simulation')
            names = sim.templates[position].instance_types.names
            opened.append((position, np.isin(np.array(names, dtype=object), list(claim.instance_types))))
        return Directions(existing, claims, opened, [claim.zone for claim in planned])

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


def _launchable_for(
    template: NodeClaimTemplate, pod: PodInfo, cache: dict[tuple[object, ...], BoolArray]
) -> BoolArray:
    """The template's instance types a NodeClaim holding the pod could be (its taints tolerated, its strict
    requirements met, an offering left), memoized per pod shape."""
    constraints = pod.constraints
    strict = constraints.strict_requirements()
    key = (id(template), strict.signature(), tuple(id(t) for t in constraints.tolerations))
    found = cache.get(key)
    if found is None:
        types = template.instance_types
        if (
            untolerated_taint(template.taints, constraints) is not None
            or template.requirements.compatible(strict, template.allowed_undefined) is not None
        ):
            found = np.zeros(len(types), dtype=np.bool_)
        else:
            merged = template.requirements.copy()
            merged.add(*strict)
            found = template.base_mask & types.compatible(merged) & types.has_offering(merged)
        cache[key] = found
    return found


__all__ = ["Capacity", "Move", "PlannedNodeClaim", "PodFit", "PoolCapacity", "Removal", "RemovalSimulation"]
