"""The steered drain of a repack: in which order to evict a command's pods, and which of its new nodes to hold
back at each eviction, so that kube-scheduler puts each pod where the plan counts on room for it.

A repack's plan packs pods tightly: its new nodes and the room it uses on nodes that stay hold its pods only if
each pod lands where the plan put it, or somewhere that leaves room for the rest. Drained all at once,
kube-scheduler places the evicted pods by its own scores (the least allocated node first), which fill the new,
empty nodes with pods the plan sent elsewhere and leave a pod pending; the provisioner then launches a node the
plan did not pay for. So a repack's candidates are drained one pod at a time, each eviction waiting until the
pod's replacement is scheduled, in an order chosen here, and the command's new nodes are cordoned except the one
the next pod should go to: a cordoned node takes no pod (DaemonSet pods tolerate it), and nothing but the
command's own new nodes is ever touched, so other workloads see the cluster as it is. After each landing the
rest is planned again from the cluster as it is, so a pod that lands elsewhere changes where the others go, not
whether they fit.

The choice rests on a model of kube-scheduler's default profile (Kubernetes v1.36, the control plane the tests
run). Filters: the node admits the pod (labels, taints, node affinity: the scheduling simulation's masks), has
room for its requests, and is not held back. Scores, each 0-100 and weighted as the default profile weighs them:
NodeResourcesFit least allocated (weight 1: the mean over CPU and memory of the share left after the pod),
NodeResourcesBalancedAllocation (1: one less half the difference of the two shares used), PodTopologySpread (2:
the system's default constraints of a pod without constraints of its own and owned by a ReplicaSet or
StatefulSet, hostname with maxSkew 3 and zone with maxSkew 5, counting the pods of the same owner; normalised
as kube-scheduler does) and TaintToleration (3: PreferNoSchedule taints, normalised in reverse). Not modelled:
InterPodAffinity's scores, NodeAffinity's preferred terms, ImageLocality (images nodes already hold), a pod's own
ScheduleAnyway constraints, and in clusters above 100 nodes the sample of nodes kube-scheduler scores; where
those decide, a pod lands elsewhere and the rest is planned again. A tie is read as a landing elsewhere
(kube-scheduler draws among equal nodes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from core.api.kube import Pod, is_terminal, pod_key, tolerates
from core.api.manifests import Manifests
from core.disruption.candidates import is_reschedulable
from core.disruption.simulation import Sandbox
from core.scheduling.inputs import SchedulingOptions
from core.scheduling.instancetypeset import BoolArray, IntArray
from core.scheduling.snapshot import InstanceTypeProvider, build_snapshot
from core.volumes import DISRUPTED

MAX_SCORE = 100
FIT_WEIGHT = 1
BALANCED_WEIGHT = 1
SPREAD_WEIGHT = 2
TAINT_WEIGHT = 3
HOSTNAME_SKEW = 3
ZONE_SKEW = 5
"""The system default spread constraints' maxSkew (kube-scheduler's `systemDefaultConstraints`)."""
SPREAD_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})
"""Controllers whose selector the system's default spread constraints count a pod's siblings with."""


def spread_owner(pod: Pod) -> str | None:
    """The controller whose pods the system's default spread constraints count with this pod (a pod with
    constraints of its own is scored by those instead, which the model leaves out)."""
    if pod.spec.topology_spread_constraints:
        return None
    for owner in pod.metadata.owner_references:
        if owner.controller and owner.kind in SPREAD_OWNERS:
            return owner.uid or f"{owner.kind}/{pod.metadata.namespace}/{owner.name}"
    return None


def owner_counts(
    pods_by_node: Mapping[str, Sequence[Pod]],
    places: Sequence[str],
    zones: Mapping[str, str | None],
    owners: set[str],
) -> tuple[dict[str, IntArray], dict[str, dict[str, int]]]:
    """For each of `owners`: its running pods on each place, and in each zone of the cluster (terminating pods
    left out, as kube-scheduler leaves them out)."""
    row = {name: index for index, name in enumerate(places)}
    on_place = {owner: np.zeros(len(places), dtype=np.int64) for owner in owners}
    in_zone: dict[str, dict[str, int]] = {owner: {} for owner in owners}
    for node, pods in pods_by_node.items():
        zone = zones.get(node)
        for pod in pods:
            if pod.metadata.deletion_timestamp is not None:
                continue
            owner = spread_owner(pod)
            if owner not in owners:
                continue
            assert owner is not None
            if node in row:
                on_place[owner][row[node]] += 1
            if zone is not None:
                in_zone[owner][zone] = in_zone[owner].get(zone, 0) + 1
    return on_place, in_zone


@dataclass(frozen=True, slots=True)
class Places:
    """The nodes the command's pods may land on: nodes that stay and the command's new nodes."""

    names: tuple[str, ...]
    free: IntArray
    """(places, axes): what is left for pods of every resource axis."""
    allocatable: IntArray
    """(places, 2): allocatable CPU (millicores) and memory (bytes)."""
    zones: tuple[str | None, ...]
    held: BoolArray
    """The command's new nodes, which the drain keeps cordoned until a pod should go there."""
    avoided: IntArray
    """PreferNoSchedule taints on each place (TaintToleration's score)."""


@dataclass(frozen=True, slots=True)
class Mover:
    """A pod of a candidate: what it asks for, where it may go, and where the plan sends it."""

    key: str
    requests: IntArray
    """(axes,) its requests, as `Places.free` counts them."""
    admits: BoolArray
    """(places,) the places whose labels, taints and affinity admit it."""
    destination: int | None
    """The place the plan sends it to (None: the plan did not say, it is placed anew)."""
    owner: str | None = None
    """Its ReplicaSet or StatefulSet, when the system's default spread constraints score its placement."""


@dataclass(frozen=True, slots=True)
class Step:
    """One eviction: the pod, the held node opened for it (the others stay held), and where it should land."""

    pod: str
    opened: str | None
    expected: str
    planned: str
    """Where the plan sent it; `expected` differs when the plan's place would lose to another node."""


@dataclass(frozen=True, slots=True)
class Steering:
    """The order of a steered drain, or why it cannot put the pods where the nodes hold them all."""

    steps: tuple[Step, ...]
    problem: str | None = None

    @property
    def complete(self) -> bool:
        return self.problem is None


@dataclass(slots=True)
class _State:
    """The cluster as the drain goes: room left, requests, pods of each owner per place."""

    free: IntArray
    used: IntArray
    owners: dict[str, IntArray]
    zone_counts: dict[str, dict[str, int]]
    destination: list[int | None] = field(default_factory=list)


class SteeringModel:
    """kube-scheduler's choice for each pod of a command (see the module), and the order that steers them."""

    def __init__(
        self,
        places: Places,
        movers: Sequence[Mover],
        axes: Sequence[str],
        owners: Mapping[str, IntArray] | None = None,
        zone_counts: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        """`owners`: per owner, its pods on each place now; `zone_counts`: per owner, its pods in each zone of the
        whole cluster now (the candidates' pods included: they leave the count as they are evicted)."""
        self.places = places
        self.movers = list(movers)
        self.cpu = list(axes).index("cpu")
        self.memory = list(axes).index("memory")
        allocatable = np.maximum(places.allocatable, 0)
        used = allocatable - places.free[:, [self.cpu, self.memory]]
        self.state = _State(
            free=places.free.copy(),
            used=np.maximum(used, 0),
            owners={owner: counts.copy() for owner, counts in (owners or {}).items()},
            zone_counts={owner: dict(zones) for owner, zones in (zone_counts or {}).items()},
            destination=[mover.destination for mover in self.movers],
        )

    # ------------------------------------------------------------------------------------------- scoring

    def feasible(self, mover: int, opened: int | None) -> BoolArray:
        """The places kube-scheduler may put the pod on, with only `opened` of the held places open."""
        places = self.places
        open_ = ~places.held
        if opened is not None:
            open_ = open_.copy()
            open_[opened] = True
        fits = np.all(self.state.free >= self.movers[mover].requests, axis=1)
        result: BoolArray = self.movers[mover].admits & fits & open_
        return result

    def scores(self, mover: int, feasible: BoolArray) -> IntArray:
        """kube-scheduler's total score of each feasible place (others: -1)."""
        rows = np.flatnonzero(feasible)
        total = np.full(len(self.places.names), -1, dtype=np.int64)
        if rows.size == 0:
            return total
        allocatable = self.places.allocatable[rows]
        request = self.movers[mover].requests[[self.cpu, self.memory]]
        after = self.state.used[rows] + request
        safe = np.maximum(allocatable, 1)
        # NodeResourcesFit, LeastAllocated: integer shares left, averaged with equal weights.
        left = np.where(after > allocatable, 0, (allocatable - after) * MAX_SCORE // safe)
        fit = left.sum(axis=1) // 2
        # NodeResourcesBalancedAllocation: one less the standard deviation of the two shares used.
        shares = np.minimum(after / safe, 1.0)
        balanced = ((1.0 - np.abs(shares[:, 0] - shares[:, 1]) / 2.0) * MAX_SCORE).astype(np.int64)
        score = FIT_WEIGHT * fit + BALANCED_WEIGHT * balanced
        score += SPREAD_WEIGHT * self._spread(mover, rows)
        score += TAINT_WEIGHT * _reverse_normalized(self.places.avoided[rows])
        total[rows] = score
        return total

    def _spread(self, mover: int, rows: IntArray) -> IntArray:
        """PodTopologySpread with the system's default constraints (hostname maxSkew 3, zone maxSkew 5)."""
        owner = self.movers[mover].owner
        if owner is None:
            return np.full(rows.size, MAX_SCORE, dtype=np.int64) if rows.size else rows
        on_node = self.state.owners.get(owner)
        host = on_node[rows] if on_node is not None else np.zeros(rows.size, dtype=np.int64)
        zones = [self.places.zones[row] for row in rows.tolist()]
        present = {zone for zone in zones if zone is not None}
        host_weight = math.log(rows.size + 2)
        zone_weight = math.log(len(present) + 2)
        counts = self.state.zone_counts.get(owner, {})
        raw = np.array(
            [
                round(
                    float(count) * host_weight
                    + (HOSTNAME_SKEW - 1)
                    + (counts.get(zone, 0) * zone_weight + (ZONE_SKEW - 1) if zone is not None else 0.0)
                )
                for count, zone in zip(host.tolist(), zones, strict=True)
            ],
            dtype=np.int64,
        )
        highest, lowest = int(raw.max()), int(raw.min())
        if highest == 0:
            return np.full(rows.size, MAX_SCORE, dtype=np.int64)
        result: IntArray = MAX_SCORE * (highest + lowest - raw) // highest
        return result

    def landing(self, mover: int, opened: int | None) -> tuple[int | None, int]:
        """Where kube-scheduler would put the pod, and by how much its choice beats the next place (0: a tie,
        read as a landing on a place other than the plan's)."""
        feasible = self.feasible(mover, opened)
        scores = self.scores(mover, feasible)
        if not feasible.any():
            return None, 0
        best = int(scores.max())
        tied = np.flatnonzero(scores == best).tolist()
        planned = self.state.destination[mover]
        if len(tied) > 1:
            others = [row for row in tied if row != planned]
            return others[0], 0
        runner_up = np.partition(scores, -2)[-2] if scores.size > 1 else -1
        return tied[0], best - int(max(runner_up, -1))

    # --------------------------------------------------------------------------------------------- moves

    def land(self, mover: int, place: int) -> None:
        """The pod now runs on `place`: its room and counts move there."""
        state = self.state
        request = self.movers[mover].requests
        state.free[place] = state.free[place] - request
        state.used[place] = state.used[place] + request[[self.cpu, self.memory]]
        owner = self.movers[mover].owner
        if owner is not None:
            counts = state.owners.setdefault(owner, np.zeros(len(self.places.names), dtype=np.int64))
            counts[place] += 1
            zone = self.places.zones[place]
            if zone is not None:
                zones = state.zone_counts.setdefault(owner, {})
                zones[zone] = zones.get(zone, 0) + 1

    def leave(self, mover: int, zone: str | None) -> None:
        """The pod is evicted from its candidate (in `zone`): it leaves its owner's zone count."""
        owner = self.movers[mover].owner
        if owner is not None and zone is not None:
            zones = self.state.zone_counts.get(owner)
            if zones is not None and zones.get(zone, 0) > 0:
                zones[zone] -= 1

    def reassign(self, remaining: Sequence[int]) -> list[int | None] | None:
        """Destinations for the pods not moved yet that all fit the room left: the plan's where it still fits,
        else the first place with room (biggest pods first); None when some pod has no room left."""
        free = self.state.free.copy()
        destination = list(self.state.destination)
        order = sorted(remaining, key=lambda m: -int(self.movers[m].requests[[self.cpu, self.memory]].sum()))
        unplaced = []
        for mover in order:
            planned = destination[mover]
            request = self.movers[mover].requests
            if (
                planned is not None
                and self.movers[mover].admits[planned]
                and np.all(free[planned] >= request)
            ):
                free[planned] = free[planned] - request
            else:
                unplaced.append(mover)
        for mover in unplaced:
            request = self.movers[mover].requests
            room = self.movers[mover].admits & np.all(free >= request, axis=1)
            if not room.any():
                return None
            place = int(np.flatnonzero(room)[0])
            free[place] = free[place] - request
            destination[mover] = place
        return destination

    def plan(self, sources: Sequence[str | None] = ()) -> Steering:
        """The steered order of every pod (see the module); `sources` gives each pod's zone now. The model's
        state follows the steps, so a model plans once."""
        names = self.places.names
        remaining = list(range(len(self.movers)))
        fixed = self.reassign(remaining)
        if fixed is None:
            return Steering((), "the pods do not all fit the room the command counts on")
        self.state.destination = fixed
        steps: list[Step] = []
        opened_last: int | None = None
        while remaining:
            choice = self._planned_choice(remaining, opened_last) or self._other_choice(remaining)
            if choice is None:
                stuck = self.movers[remaining[0]].key
                return Steering(
                    tuple(steps),
                    f"kube-scheduler would leave pod {stuck} without the room the command counts on",
                )
            mover, opened, place, destination = choice
            planned = self.state.destination[mover]
            self.leave(mover, sources[mover] if mover < len(sources) else None)
            self.land(mover, place)
            if destination is not None:
                self.state.destination = destination
            remaining.remove(mover)
            opened_last = opened
            steps.append(
                Step(
                    pod=self.movers[mover].key,
                    opened=names[opened] if opened is not None else None,
                    expected=names[place],
                    planned=names[planned] if planned is not None else names[place],
                )
            )
        return Steering(tuple(steps))

    def _planned_choice(
        self, remaining: Sequence[int], opened_last: int | None
    ) -> tuple[int, int | None, int, None] | None:
        """The pod kube-scheduler surely puts where it is planned: pods for nodes that stay first, then the held
        node opened last, then any; the widest margin first."""
        held = self.places.held
        best: tuple[tuple[int, int, int], int, int | None] | None = None
        for mover in remaining:
            destination = self.state.destination[mover]
            if destination is None:
                continue
            opened = destination if held[destination] else None
            place, margin = self.landing(mover, opened)
            if place != destination or margin <= 0:
                continue
            rank = 0 if opened is None else (1 if opened == opened_last else 2)
            key = (rank, -margin, mover)
            if best is None or key < best[0]:
                best = (key, mover, opened)
        if best is None:
            return None
        _, mover, opened = best
        destination = self.state.destination[mover]
        assert destination is not None
        return mover, opened, destination, None

    def _other_choice(self, remaining: Sequence[int]) -> tuple[int, int | None, int, list[int | None]] | None:
        """A pod whose landing elsewhere still leaves room for every other pod, with their new destinations."""
        held = self.places.held
        for mover in remaining:
            destination = self.state.destination[mover]
            options: list[int | None] = [None]
            if destination is not None and held[destination]:
                options.insert(0, destination)
            for opened in options:
                place, _ = self.landing(mover, opened)
                if place is None:
                    continue
                saved = (self.state.free[place].copy(), self.state.used[place].copy(), self.state.destination)
                self.land(mover, place)
                rest = [m for m in remaining if m != mover]
                self.state.destination = [*saved[2]]
                self.state.destination[mover] = place
                found = self.reassign(rest)
                self._unland(mover, place, saved[0], saved[1])
                self.state.destination = saved[2]
                if found is not None:
                    found[mover] = place
                    return mover, opened, place, found
        return None

    def _unland(self, mover: int, place: int, free: IntArray, used: IntArray) -> None:
        state = self.state
        state.free[place] = free
        state.used[place] = used
        owner = self.movers[mover].owner
        if owner is not None:
            state.owners[owner][place] -= 1
            zone = self.places.zones[place]
            if zone is not None:
                state.zone_counts[owner][zone] -= 1


def _reverse_normalized(counts: IntArray) -> IntArray:
    """kube-scheduler's default normalisation, reversed: the fewest counted gets 100."""
    highest = int(counts.max()) if counts.size else 0
    if highest == 0:
        return np.full(counts.size, MAX_SCORE, dtype=np.int64)
    result: IntArray = MAX_SCORE - MAX_SCORE * counts // highest
    return result


def steered(pod: Pod) -> bool:
    """Whether the steered drain moves the pod: one the candidate's drain would evict and that needs a place
    elsewhere (pods that tolerate the disrupted taint stay with their node, as Karpenter's drain leaves them)."""
    return (
        pod.metadata.deletion_timestamp is None
        and not is_terminal(pod)
        and is_reschedulable(pod)
        and not tolerates(pod.spec.tolerations or [], DISRUPTED)
    )


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
"""The taint the node lifecycle controller puts on a cordoned node."""


def _released(manifests: Manifests, held: set[str]) -> Manifests:
    """The cluster with the held nodes as they will be once released: not cordoned, without the taint their
    cordon brought."""
    nodes = [
        node.model_copy(
            update={
                "spec": node.spec.model_copy(
                    update={
                        "unschedulable": False,
                        "taints": [t for t in node.spec.taints if t.key != UNSCHEDULABLE_TAINT],
                    }
                )
            }
        )
        if node.metadata.name in held
        else node
        for node in manifests.nodes
    ]
    return replace(manifests, nodes=nodes)


def steer_from(
    manifests: Manifests,
    provider: InstanceTypeProvider,
    candidates: Sequence[str],
    held: Sequence[str],
    destinations: Mapping[str, str],
) -> Steering:
    """The steered order of the pods still on `candidates`, from the cluster as it stands: `held` are the
    command's new nodes (Node names), `destinations` where the plan sent each pod (a Node's name). Other
    cordoned nodes take no pod; every other node kube-scheduler could use is a place."""
    pods_by_node: dict[str, list[Pod]] = {}
    for pod in manifests.pods:
        if pod.spec.node_name and not is_terminal(pod):
            pods_by_node.setdefault(pod.spec.node_name, []).append(pod)
    leaving = set(candidates)
    moving = {node: [pod for pod in pods_by_node.get(node, ()) if steered(pod)] for node in candidates}
    movable = {node: pods for node, pods in moving.items() if pods}
    if not movable:
        return Steering(())
    holding = set(held)
    scheduling = build_snapshot(_released(manifests, holding), provider)
    known = {node.name for node in scheduling.nodes}
    movable = {node: pods for node, pods in movable.items() if node in known}
    capacity = Sandbox(scheduling, movable, SchedulingOptions()).capacity(list(movable))
    nodes = {node.metadata.name: node for node in manifests.nodes}
    cordoned = {name for name, node in nodes.items() if node.spec.unschedulable and name not in holding}
    fits = list(capacity.pods)
    if not fits:
        return Steering(())
    requests = np.array([fit.requests for fit in fits], dtype=np.int64)
    admitted = np.zeros(len(capacity.nodes), dtype=np.bool_)
    for fit in fits:
        admitted |= fit.nodes
    smallest = requests.min(axis=0)
    rows = [
        row
        for row in np.flatnonzero(
            capacity.live & admitted & np.all(capacity.free >= smallest, axis=1)
        ).tolist()
        if capacity.nodes[row] not in leaving and capacity.nodes[row] not in cordoned
    ]
    cpu, memory = capacity.axes.index("cpu"), capacity.axes.index("memory")
    names = tuple(capacity.nodes[row] for row in rows)
    places = Places(
        names=names,
        free=capacity.free[rows],
        allocatable=capacity.allocatable[rows][:, [cpu, memory]],
        zones=tuple(capacity.zones[row] for row in rows),
        held=np.array([name in holding for name in names], dtype=np.bool_),
        avoided=capacity.avoided[rows],
    )
    index = {name: i for i, name in enumerate(names)}
    pods = {pod_key(pod): pod for pods in movable.values() for pod in pods}
    movers = [
        Mover(
            fit.key,
            requests[i],
            fit.nodes[rows],
            index.get(destinations.get(fit.key, "")),
            spread_owner(pods[fit.key]),
        )
        for i, fit in enumerate(fits)
    ]
    owners = {mover.owner for mover in movers if mover.owner is not None}
    zones = dict(zip(capacity.nodes, capacity.zones, strict=True))
    on_place, in_zone = owner_counts(pods_by_node, names, zones, owners)
    model = SteeringModel(places, movers, capacity.axes, on_place, in_zone)
    return model.plan([zones.get(fit.node) for fit in fits])
