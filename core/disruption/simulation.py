"""Karpenter's disruption simulation, made cheap enough to try every node of a large cluster.

Karpenter asks one question per candidate set: if these nodes went away, where would their pods go? It
answers with a fresh provisioning simulation each time, over the whole cluster. Building that simulation
is what costs (compiling every bound pod, counting topology domains); placing a node's ten pods is cheap.
So the sandbox builds the provisioning simulation once, with every pod that might move already counted
where it runs, and each trial only detaches the candidates (their rows refuse every pod, their pods leave
the topology counts), places their pods with the scheduler's own loop, and then either keeps the result
(`commit`) or puts back exactly what the trial changed (`rollback`).

The trial is the scheduler's: same queue order, same first-fit over existing nodes (initialized first,
then by name), same NodeClaims from NodePools in weight order with DaemonSet overhead, limits and topology.
Nodes a committed command launches are not added as capacity: Karpenter will not count on a node that is
not initialized yet, and neither does a later trial.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from core import labels
from core.api.kube import Pod, pod_key
from core.scheduling.instancetypeset import BoolArray, InstanceTypeSet, IntArray
from core.scheduling.nodes import ExistingNode, Rejection, untolerated_taint
from core.scheduling.pods import Constraints, InvalidPodConstraint, PodInfo, compile_pod
from core.scheduling.requirements import Requirements
from core.scheduling.results import NewNodeClaim
from core.scheduling.scheduler import Scheduler, SchedulingOptions, _Simulation
from core.scheduling.snapshot import SchedulingSnapshot
from core.scheduling.topology import TopologyGroup, TopologyType

REFUSE_ALL = -1
"""What a detached node has left of every resource: less than any pod asks for."""


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


@dataclass(slots=True)
class _Trial:
    nodes: tuple[str, ...]
    pods: list[PodInfo]
    free: IntArray
    groups: list[tuple[TopologyGroup, dict[str, int]]]
    """Copies of the counts of every group the trial's pods count in."""
    hostnames: list[tuple[TopologyGroup, int]]
    """How many domains each hostname group had: new NodeClaims add theirs at the end."""


class _TooManyNodeClaims(Exception):
    """A trial needs more new NodeClaims than its caller accepts; finishing it would be wasted work."""


def _identity(pod: Pod) -> str:
    return pod.metadata.uid or pod_key(pod)


class Sandbox:
    """One provisioning simulation over the cluster in which removing nodes is tried, kept or undone."""

    def __init__(
        self,
        snapshot: SchedulingSnapshot,
        movable: Mapping[str, Sequence[Pod]],
        options: SchedulingOptions,
    ) -> None:
        """`movable` holds, per node, the pods that would need a new place if the node went."""
        self._pods: dict[str, list[PodInfo]] = {}
        self._invalid: dict[str, list[tuple[str, str]]] = {}
        for node, pods in movable.items():
            for pod in pods:
                try:
                    self._pods.setdefault(node, []).append(compile_pod(pod, options.respect_preferences))
                except InvalidPodConstraint as error:
                    self._invalid.setdefault(node, []).append((pod_key(pod), f"ignoring pod: {error}"))
        # The scheduler sees the movable pods as pods to place, not as bound ones: they are compiled once,
        # here, and put back on their nodes below. Pods it cannot compile stay bound, holding their room.
        moving = {info.uid for infos in self._pods.values() for info in infos}
        staying = [
            replace(node, pods=tuple(pod for pod in node.pods if _identity(pod) not in moving))
            for node in snapshot.nodes
        ]
        scheduler = Scheduler(
            snapshot.nodepools, snapshot.instance_types, staying, snapshot.daemonsets, options
        )
        self._sim = _Trials(scheduler, [pod for pods in self._pods.values() for pod in pods])
        self._row = {node.name: row for row, node in enumerate(self._sim.existing)}
        self._uninitialized = frozenset(node.name for node in self._sim.existing if not node.initialized)
        for node, compiled in self._pods.items():
            self._sim.put_back(self._row[node], compiled)
        self._limits = _copy_limits(self._sim.remaining)
        self._trial: _Trial | None = None
        self.received: set[str] = set()
        """Existing nodes that committed trials moved pods onto."""
        self.removed: set[str] = set()
        """Nodes that committed trials took away."""

    def instance_types(self) -> dict[str, InstanceTypeSet]:
        """Each NodePool's instance types as the simulation holds them."""
        return {template.nodepool: template.instance_types for template in self._sim.templates}

    def can_try(self, node: str) -> bool:
        """Whether the node's removal can be simulated: it is a node of the cluster not yet removed."""
        return node in self._row and node not in self.removed

    def simulate(self, nodes: Sequence[str], max_nodeclaims: int | None = None) -> Outcome:
        """Where the pods of `nodes` would go without them. The trial stays open until `commit` or
        `rollback`. With `max_nodeclaims`, the trial stops as soon as it needs more new NodeClaims."""
        if self._trial is not None:
            raise RuntimeError("a trial is already open: commit or roll it back first")
        unknown = [node for node in nodes if not self.can_try(node)]
        if unknown:
            raise ValueError(f"cannot simulate removing {', '.join(unknown)}: not a node, or already removed")
        sim = self._sim
        pods = [pod for node in nodes for pod in self._pods.get(node, ())]
        touched = {id(group): group for pod in pods for group in sim.counting(pod)}
        self._trial = _Trial(
            nodes=tuple(nodes),
            pods=pods,
            free=sim.existing_free.copy(),
            groups=[(group, dict(group.domains)) for group in touched.values()],
            hostnames=[(group, len(group.domains)) for group in sim.topology.hostname_groups()],
        )
        for node in nodes:
            row = self._row[node]
            for pod in self._pods.get(node, ()):
                sim.count(pod, sim.existing[row], -1)
            sim.existing_free[row] = REFUSE_ALL
        sim.reset(pods, _copy_limits(self._limits), max_nodeclaims)
        try:
            results = sim.solve()
        except _TooManyNodeClaims:
            return Outcome((), (), exceeded=len(sim.claims))
        failures = {entry.pod: entry.reasons for entry in results.unschedulable}
        return self._outcome(nodes, results.nodeclaims, failures)

    def _outcome(
        self, nodes: Sequence[str], nodeclaims: list[NewNodeClaim], failures: Mapping[str, list[str]]
    ) -> Outcome:
        sim = self._sim
        claim_index = {claim.hostname: index for index, claim in enumerate(sim.claims)}
        placements: list[Placement] = []
        for node in nodes:
            for pod in self._pods.get(node, ()):
                destination = sim.placements.get(pod.uid)
                if destination is None:
                    reasons = failures.get(pod.key) or ["no place found"]
                    placements.append(Placement(pod.key, node, None, None, "; ".join(reasons)))
                elif destination in self._uninitialized:
                    problem = f"would schedule against uninitialized node {destination}"
                    placements.append(Placement(pod.key, node, destination, None, problem))
                else:
                    placements.append(Placement(pod.key, node, destination, claim_index.get(destination)))
            for key, error in self._invalid.get(node, ()):
                placements.append(Placement(key, node, None, None, error))
        return Outcome(tuple(placements), tuple(nodeclaims))

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
                # The scheduler lists a node's placed pods in every result: keep only a trial's there.
                sim.existing[self._row[destination]].pods.clear()

    def _close(self) -> _Trial:
        if self._trial is None:
            raise RuntimeError("no trial is open")
        trial, self._trial = self._trial, None
        return trial


def _copy_limits(limits: Mapping[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {pool: dict(remaining) for pool, remaining in limits.items()}


class _Trials(_Simulation):
    """The scheduler's simulation, reset between trials, with one shortcut: before its first-fit loop
    tries existing nodes one by one, the nodes it would certainly refuse are masked out (taints and
    labels that never change, topology domains that are full or not among the allowed ones). A trial
    places a few pods on a cluster of hundreds of nodes, so without the masks most of its time goes into
    refusals. A pod with topology or host ports is still checked by the node itself (`try_add`); for
    any other pod the masks are exactly those checks. Either way the answer is the scheduler's."""

    def __init__(self, scheduler: Scheduler, pods: list[PodInfo]) -> None:
        super().__init__(scheduler, pods)
        # Nodes with the same labels (but their hostname) and taints accept the same pods.
        kinds: dict[tuple[object, ...], int] = {}
        representatives: list[ExistingNode] = []
        kind_of = []
        for node in self.existing:
            signature = (
                frozenset((k, v) for k, v in node.node_labels.items() if k != labels.HOSTNAME),
                tuple(taint.model_dump_json() for taint in node.taints),
            )
            if signature not in kinds:
                kinds[signature] = len(representatives)
                representatives.append(node)
            kind_of.append(kinds[signature])
        self._representatives = representatives
        self._kind_of = np.array(kind_of, dtype=np.int64)
        self._admitted: dict[tuple[object, ...], BoolArray] = {}
        self._domain_ids: dict[str, tuple[dict[str, int], IntArray]] = {}
        self._selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
        self._inverse_selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
        self._max_nodeclaims: int | None = None

    def put_back(self, row: int, pods: Sequence[PodInfo]) -> None:
        """Bind pods the scheduler was built without to the existing node at `row`, as its constructor
        binds a node's pods: their requests taken from what is left, their ports and topology counted."""
        node = self.existing[row]
        available = node.available
        for pod in pods:
            available = available - self.vectors[pod.uid]
            node.host_ports.update(pod.host_ports)
            self.count(pod, node, 1)
        node.available = np.maximum(available, 0) if node.initialized else available
        self.existing_free[row] = node.available

    def reset(
        self, pods: list[PodInfo], limits: dict[str, dict[str, int]], max_nodeclaims: int | None
    ) -> None:
        """Forget the NodeClaims and placements of the last trial, to place `pods` next."""
        self.pods = pods
        self.claims = []
        self.claim_free[:] = 0
        self.claim_pods[:] = 0
        self._refused = {}
        self._hostname_counts = {}
        self._claim_bits = {}
        self.placements = {}
        self.remaining = limits
        self._max_nodeclaims = max_nodeclaims

    def _add_new(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, requests: IntArray
    ) -> list[str] | None:
        reasons = super()._add_new(pod, constraints, pod_requirements, requests)
        # NodeClaims are never taken back, so once there are too many the answer is settled.
        if reasons is None and self._max_nodeclaims is not None and len(self.claims) > self._max_nodeclaims:
            raise _TooManyNodeClaims
        return reasons

    def selecting(self, pod: PodInfo) -> list[TopologyGroup]:
        """The groups whose selector picks the pod (pods with equal namespace and labels share them)."""
        signature = (pod.namespace, frozenset(pod.labels.items()))
        found = self._selecting.get(signature)
        if found is None:
            groups = self.topology._groups.values()
            found = self._selecting[signature] = [g for g in groups if g.selects(pod.namespace, pod.labels)]
        return found

    def counting(self, pod: PodInfo) -> list[TopologyGroup]:
        """Every group whose counts change when the pod is placed or removed: those selecting it, and
        the inverse anti-affinity groups it owns."""
        return [*self.selecting(pod), *self.topology._inverse_owned.get(pod.uid, ())]

    def count(self, pod: PodInfo, node: ExistingNode, delta: int) -> None:
        """Add (or take away) the pod on an existing node in every topology group that counts it there,
        as `Topology.record` counts a placed pod (an existing node has one domain per key)."""
        requirements = node.requirements
        for group in self.selecting(pod):
            if requirements.has(group.key) and group.counts(pod, node.taints, requirements):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta
        for group in self.topology._inverse_owned.get(pod.uid, ()):
            if requirements.has(group.key):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta

    def _constraining(self, pod: PodInfo, constraints: Constraints) -> list[TopologyGroup]:
        """`Topology.groups_for`, with the inverse anti-affinities that select the pod looked up once per
        namespace and labels instead of once per node tried."""
        signature = (pod.namespace, frozenset(pod.labels.items()))
        inverse = self._inverse_selecting.get(signature)
        if inverse is None:
            groups = self.topology._inverse.values()
            inverse = self._inverse_selecting[signature] = [
                g for g in groups if g.selects(pod.namespace, pod.labels)
            ]
        owned = self.topology._owned.get(pod.uid, {})
        terms = [*constraints.spread, *constraints.affinity_terms(), *constraints.anti_affinity_terms()]
        return [*(owned[id(term)] for term in terms if id(term) in owned), *inverse]

    def _admits(self, constraints: Constraints, pod_requirements: Requirements) -> BoolArray:
        """Existing nodes whose taints the pod tolerates and whose labels satisfy its requirements."""
        key = (
            pod_requirements.signature(),
            tuple(id(t) for t in constraints.tolerations),
            constraints.tolerate_prefer_no_schedule,
        )
        admitted = self._admitted.get(key)
        if admitted is None:
            verdicts = np.array(
                [
                    untolerated_taint(node.taints, constraints) is None
                    and node.requirements.compatible(pod_requirements, frozenset()) is None
                    for node in self._representatives
                ],
                dtype=np.bool_,
            )
            admitted = self._admitted[key] = verdicts[self._kind_of]
        return admitted

    def _domains_of(self, key: str) -> tuple[dict[str, int], IntArray]:
        """Each existing node's domain of `key` as an index into a table (-1 when it has none)."""
        found = self._domain_ids.get(key)
        if found is None:
            table: dict[str, int] = {}
            ids = [
                table.setdefault(node.requirements.get(key).any(), len(table))
                if node.requirements.has(key)
                else -1
                for node in self.existing
            ]
            found = self._domain_ids[key] = (table, np.array(ids, dtype=np.int64))
        return found

    def _possible(self, group: TopologyGroup, pod: PodInfo, strict: Requirements) -> BoolArray | None:
        """Existing nodes the group does not certainly refuse the pod, or None when not worth asking.

        Only domains the group knows are ruled out (full for anti-affinity, not among the allowed ones
        otherwise). Hostname groups are left to the loop: they refuse the few nodes already holding the
        pod's peers, not whole zones."""
        if group.key == labels.HOSTNAME:
            return None
        table, ids = self._domains_of(group.key)
        selects_self = group.selects(pod.namespace, pod.labels)
        if group.type is TopologyType.ANTI_AFFINITY:
            refused = [table[d] for d, count in group.domains.items() if count > 0 and d in table]
        else:
            allowed, _ = group.allowed(selects_self, strict.get(group.key))
            refused = [table[d] for d in group.domains if d not in allowed and d in table]
        return ~np.isin(ids, refused)

    def _add_existing(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, requests: IntArray
    ) -> bool:
        if not self.existing:
            return False
        mask = np.all(self.existing_free >= requests, axis=1) & self._admits(constraints, pod_requirements)
        strict = constraints.strict_requirements()
        groups = self._constraining(pod, constraints)
        for group in groups:
            possible = self._possible(group, pod, strict)
            if possible is not None:
                mask &= possible
        # Without topology or host ports, the masks are the whole of `try_add`: the first node left takes it.
        unconstrained = not groups and not pod.host_ports
        for index in np.flatnonzero(mask).tolist():
            node = self.existing[index]
            if unconstrained:
                requirements = node.requirements
            else:
                try:
                    requirements = node.try_add(pod, constraints, pod_requirements, requests, self.topology)
                except Rejection:
                    continue
            node.commit(pod, requests, requirements)
            self.existing_free[index] = node.available
            self.count(pod, node, 1)
            self.placements[pod.uid] = node.name
            return True
        return False
