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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.api.kube import Pod, pod_key
from core.scheduling.instancetypeset import IntArray
from core.scheduling.nodes import ExistingNode
from core.scheduling.pods import InvalidPodConstraint, PodInfo, compile_pod
from core.scheduling.results import NewNodeClaim
from core.scheduling.scheduler import Scheduler, SchedulingOptions, _Simulation
from core.scheduling.snapshot import SchedulingSnapshot
from core.scheduling.topology import TopologyGroup

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

    @property
    def problems(self) -> list[Placement]:
        """Pods that found no place, or only one on a node that is not initialized yet."""
        return [placement for placement in self.placements if placement.problem is not None]

    @property
    def scheduled(self) -> bool:
        """Whether every pod found a place Karpenter would count on."""
        return not self.problems

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
        scheduler = Scheduler(
            snapshot.nodepools, snapshot.instance_types, snapshot.nodes, snapshot.daemonsets, options
        )
        everything = [pod for pods in self._pods.values() for pod in pods]
        self._sim = _Simulation(scheduler, everything)
        self._row = {node.name: row for row, node in enumerate(self._sim.existing)}
        self._uninitialized = frozenset(node.name for node in self._sim.existing if not node.initialized)
        topology = self._sim.topology
        self._selecting = _selecting_groups(list(topology._groups.values()), everything)
        self._inverse = {pod.uid: list(topology._inverse_owned.get(pod.uid, ())) for pod in everything}
        # The simulation counted only the pods that stay; count the movable ones where they run now.
        for node, compiled in self._pods.items():
            existing = self._sim.existing[self._row[node]]
            for info in compiled:
                self._count(info, existing, 1)
        self._limits = _copy_limits(self._sim.remaining)
        self._trial: _Trial | None = None
        self.received: set[str] = set()
        """Existing nodes that committed trials moved pods onto."""
        self.removed: set[str] = set()
        """Nodes that committed trials took away."""

    def _count(self, pod: PodInfo, node: ExistingNode, delta: int) -> None:
        """Add (or take away) the pod on the node in every topology group that counts it there."""
        requirements = node.requirements
        for group in self._selecting[pod.uid]:
            if requirements.has(group.key) and group.counts(pod, node.taints, requirements):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta
        for group in self._inverse[pod.uid]:
            if requirements.has(group.key):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta

    def can_try(self, node: str) -> bool:
        """Whether the node's removal can be simulated: it is a node of the cluster not yet removed."""
        return node in self._row and node not in self.removed

    def simulate(self, nodes: Sequence[str]) -> Outcome:
        """Where the pods of `nodes` would go without them. The trial stays open until `commit` or
        `rollback`."""
        if self._trial is not None:
            raise RuntimeError("a trial is already open: commit or roll it back first")
        unknown = [node for node in nodes if not self.can_try(node)]
        if unknown:
            raise ValueError(f"cannot simulate removing {', '.join(unknown)}: not a node, or already removed")
        sim = self._sim
        pods = [pod for node in nodes for pod in self._pods.get(node, ())]
        touched = {id(group): group for pod in pods for group in self._groups_of(pod)}
        self._trial = _Trial(
            nodes=tuple(nodes),
            pods=pods,
            free=sim.existing_free.copy(),
            groups=[(group, dict(group.domains)) for group in touched.values()],
        )
        for node in nodes:
            row = self._row[node]
            for pod in self._pods.get(node, ()):
                self._count(pod, sim.existing[row], -1)
            sim.existing_free[row] = REFUSE_ALL
        sim.claims = []
        sim.claim_free[:] = 0
        sim.claim_pods[:] = 0
        sim._refused = {}
        sim._hostname_counts = {}
        sim._claim_bits = {}
        sim.placements = {}
        sim.remaining = _copy_limits(self._limits)
        sim.pods = pods
        results = sim.solve()
        return self._outcome(
            nodes, results.nodeclaims, {entry.pod: entry.reasons for entry in results.unschedulable}
        )

    def _groups_of(self, pod: PodInfo) -> Iterable[TopologyGroup]:
        yield from self._selecting[pod.uid]
        yield from self._inverse[pod.uid]

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
        for claim in sim.claims:
            for group in sim.topology.hostname_groups():
                group.domains.pop(claim.hostname, None)
        for group, domains in trial.groups:
            group.domains.clear()
            group.domains.update(domains)

    def commit(self, replacement_names: Sequence[str]) -> None:
        """Keep the open trial: the nodes are gone, their pods placed, and the new NodeClaims (named
        `replacement_names`, in order) hold their pods in topology counts but take no other pods."""
        trial = self._close()
        sim = self._sim
        if len(replacement_names) != len(sim.claims):
            raise ValueError(f"{len(sim.claims)} new NodeClaims to name, got {len(replacement_names)} names")
        for claim, name in zip(sim.claims, replacement_names, strict=True):
            for group in sim.topology.hostname_groups():
                if claim.hostname in group.domains:
                    group.domains[name] = group.domains.pop(claim.hostname)
        self._limits = _copy_limits(sim.remaining)
        self.removed.update(trial.nodes)
        for pod in trial.pods:
            destination = sim.placements.get(pod.uid, "")
            if destination in self._row:
                # The pod now runs there: removing that node later moves it again.
                self._pods.setdefault(destination, []).append(pod)
                self.received.add(destination)

    def _close(self) -> _Trial:
        if self._trial is None:
            raise RuntimeError("no trial is open")
        trial, self._trial = self._trial, None
        return trial


def _copy_limits(limits: Mapping[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {pool: dict(remaining) for pool, remaining in limits.items()}


def _selecting_groups(groups: list[TopologyGroup], pods: Iterable[PodInfo]) -> dict[str, list[TopologyGroup]]:
    """For each pod, the groups whose selector picks it (pods with equal namespace and labels share one
    answer, which keeps this linear in the number of distinct label sets)."""
    by_labels: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
    selecting: dict[str, list[TopologyGroup]] = {}
    for pod in pods:
        signature = (pod.namespace, frozenset(pod.labels.items()))
        found = by_labels.get(signature)
        if found is None:
            found = by_labels[signature] = [
                group for group in groups if group.selects(pod.namespace, pod.labels)
            ]
        selecting[pod.uid] = found
    return selecting
