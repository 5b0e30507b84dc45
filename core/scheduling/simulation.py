"""The engine of a provisioning simulation: place pods on existing nodes, then on NodeClaims made earlier in
the simulation, then on new NodeClaims from NodePools in weight order, relaxing preferences when a pod cannot
be placed.

The loop is first-fit-decreasing over a queue sorted by CPU, memory, creation time and UID, and a pod that
fails goes to the back until a whole pass makes no progress, as in Karpenter. What makes it fast in Python:
instance types are filtered as arrays (`InstanceTypeSet`); existing nodes that certainly refuse a pod (taints
and labels that never change, full or disallowed topology domains) are masked out before the first-fit loop
tries them one by one; NodeClaims that cannot take a pod's requests or that hold a pod its hostname
constraints exclude are skipped with one vector comparison; and a refusal that can only get worse
(requirements, taints, host ports) is remembered per pod shape.

`core.scheduling.scheduler` (one solve over pending pods) and `core.scheduling.removal` (trials of removing
nodes) drive it; nothing outside this package does.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core import labels
from core.api.kube import Pod
from core.api.meta import Taint
from core.instancetypes.overlay import overlay_annotations
from core.instancetypes.types import InstanceType
from core.resources import NODES, PODS, Resources
from core.scheduling.inputs import NodePoolSpec, NodeSnapshot, SchedulingOptions
from core.scheduling.instancetypeset import NO_PRICE, BoolArray, InstanceTypeSet, IntArray, ResourceAxes
from core.scheduling.nodes import (
    MONOTONE_STAGES,
    DaemonOverhead,
    ExistingNode,
    NodeClaimTemplate,
    Rejection,
    SimNodeClaim,
    Stage,
    unmet_min_values,
    untolerated_taint,
)
from core.scheduling.pods import BoundPods, Constraints, PodInfo, compile_bound_pod
from core.scheduling.requirements import Operator, Requirement, Requirements
from core.scheduling.results import (
    ExistingPlacement,
    NewNodeClaim,
    SchedulingResults,
    Unschedulable,
    launch_order,
)
from core.scheduling.topology import BoundPod, DomainSource, Topology, TopologyGroup, TopologyType

MAX_INSTANCE_TYPES = 600


@dataclass(frozen=True, slots=True)
class Directions:
    """Where a directed solve must put each pod, instead of choosing: an existing node, or a NodeClaim of a
    given NodePool whose instance types are limited to some (opened by the first pod directed to it)."""

    existing: Mapping[str, int]
    """Pod UID -> row of the existing node."""
    claims: Mapping[str, int]
    """Pod UID -> index into `planned`."""
    planned: Sequence[tuple[int, BoolArray]]
    """Per planned NodeClaim: the index of its template and the instance types it may be."""
    zones: Sequence[str | None] = ()
    """Per planned NodeClaim, the zone it is pinned to (None or missing: any its pods allow)."""


class TooManyNodeClaims(Exception):
    """A solve needs more new NodeClaims than its caller accepts; finishing it would be wasted work."""

    def __init__(self, count: int) -> None:
        self.count = count
        super().__init__(f"needs at least {count} new NodeClaims")


UNSEEN_DOMAIN = 1 << 62
"""The bit that stands for every domain outside a key's known ones."""


class DomainBits:
    """The known domains of one topology key as bits, so that 'may this claim still take one of these
    domains' is one AND over all claims."""

    def __init__(self, domains: Sequence[str]) -> None:
        known = sorted(set(domains))[:62]
        self.bit = {domain: 1 << position for position, domain in enumerate(known)}

    def bits(self, domains: set[str]) -> int:
        total = 0
        for domain in domains:
            total |= self.bit.get(domain, UNSEEN_DOMAIN)
        return total

    def admitted(self, requirement: Requirement) -> int:
        """The bits of the known domains the requirement admits, plus the unseen bit if it may admit others."""
        total = 0
        for domain, bit in self.bit.items():
            if requirement.has(domain):
                total |= bit
        if requirement.complement or any(value not in self.bit for value in requirement.values):
            total |= UNSEEN_DOMAIN
        return total


def _queue_order(pod: PodInfo) -> tuple[int, int, float, str]:
    return (-pod.cpu, -pod.memory, pod.creation.timestamp() if pod.creation.year > 1970 else 0.0, pod.uid)


class Simulation:
    """The mutable state of one provisioning simulation: existing nodes with what is left on them,
    NodeClaims made so far, NodePool limits left, topology counts and where each pod went.

    `solve` places the pods it was made with. Between solves, `reset` gives it other pods to place (from
    those it was made with) and forgets the NodeClaims and placements of the last one, so that callers
    can try removing nodes without rebuilding it (see `core.scheduling.removal`)."""

    def __init__(
        self,
        nodepools: Sequence[NodePoolSpec],
        instance_types: Mapping[str, Sequence[InstanceType]],
        nodes: Sequence[NodeSnapshot],
        daemonsets: Sequence[PodInfo],
        options: SchedulingOptions,
        pods: list[PodInfo],
        bound_pods: BoundPods | None = None,
    ) -> None:
        """`nodepools` in the order new NodeClaims try them (weight, then name, descending); `bound_pods` keeps
        the nodes' pods compiled from one simulation to the next."""
        self.options = options
        self.pods = pods
        names: list[str] = ["cpu", "memory", PODS]
        for pod in [*pods, *daemonsets]:
            names.extend(pod.requests)
        for pool in nodepools:
            for instance_type in instance_types.get(pool.name, ()):
                names.extend(instance_type.capacity)
        for node in nodes:
            names.extend(node.allocatable)
        self.axes = ResourceAxes(names)
        self.daemonsets = list(daemonsets)
        self.vectors = {pod.uid: self.axes.vector(pod.requests) for pod in pods}
        self.templates = [self._template(pool, instance_types.get(pool.name, ())) for pool in nodepools]
        self.pool_limits: dict[str, Resources | None] = {pool.name: pool.limits for pool in nodepools}
        self.remaining: dict[str, Resources] = {}
        # Each node's bound pods compiled, and its labels as requirements, once: the existing nodes, the bound pods
        # of the topology and its domains all read them (a plan at 1,000 nodes did each twice).
        if bound_pods is not None:
            bound_pods.begin()
        compile_bound = bound_pods.compiled if bound_pods is not None else compile_bound_pod
        prepared = [
            (self._compile_bound(node, compile_bound), Requirements.from_labels(_with_hostname(node)))
            for node in nodes
        ]
        self.existing = [
            self._existing(node, compiled, requirements)
            for node, (compiled, requirements) in zip(nodes, prepared, strict=True)
        ]
        self.existing.sort(key=lambda node: (not node.initialized, node.name))
        for pool in nodepools:
            if pool.limits is not None:
                used: Resources = {}
                for node in nodes:
                    if node.nodepool == pool.name:
                        for name, amount in node.capacity.items():
                            used[name] = used.get(name, 0) + amount
                        used[NODES] = used.get(NODES, 0) + 1
                self.remaining[pool.name] = {
                    name: limit - used.get(name, 0) for name, limit in pool.limits.items()
                }
        self.prefer_no_schedule = any(
            t.effect == "PreferNoSchedule" for tpl in self.templates for t in tpl.taints
        )
        bound = [
            BoundPod(compiled, node.labels, node.taints)
            for node, (pods_on_node, _) in zip(nodes, prepared, strict=True)
            for compiled in pods_on_node
        ]
        self.topology = Topology(
            functools.partial(self._universe, nodes, [requirements for _, requirements in prepared]),
            pods,
            bound,
        )
        self.claims: list[SimNodeClaim] = []
        self._claim_capacity = 64
        width = len(self.axes.names)
        self.claim_free = np.zeros((self._claim_capacity, width), dtype=np.int64)
        self.claim_pods = np.zeros(self._claim_capacity, dtype=np.int64)
        self.existing_free = (
            np.stack([node.available for node in self.existing])
            if self.existing
            else np.zeros((0, width), dtype=np.int64)
        )
        self._refused: dict[tuple[object, ...], BoolArray] = {}
        self._hostname_counts: dict[int, IntArray] = {}
        self._domains = {
            key: DomainBits([source.domain for source in sources])
            for key, sources in self.topology.universe().items()
            if key != labels.HOSTNAME and key in self.topology.topology_keys()
        }
        self._claim_bits: dict[str, IntArray] = {}
        self.placements: dict[str, str] = {}
        """Where each placed pod went (by UID): an existing node's name or a new NodeClaim's hostname."""
        self.max_nodeclaims: int | None = None
        """When set, `solve` raises `TooManyNodeClaims` as soon as it needs more new NodeClaims."""
        self._open: BoolArray | None = None
        """Existing nodes (rows) that may take pods in this solve; None when all may."""
        self._directions: Directions | None = None
        """When set, each pod goes only where it says (`Directions`)."""
        self._planned: dict[int, SimNodeClaim] = {}
        """The planned NodeClaims of a directed solve opened so far, by their index in `Directions.planned`."""
        self._index = _ExistingIndex(self.existing)

    # ----------------------------------------------------------------------------------------------- setup

    def _compile_bound(self, node: NodeSnapshot, compile_bound: Callable[[Pod], PodInfo]) -> list[PodInfo]:
        compiled = []
        for pod in node.pods:
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                continue
            if pod.metadata.deletion_timestamp is not None:
                continue
            compiled.append(compile_bound(pod))
        return compiled

    def _template(self, pool: NodePoolSpec, instance_types: Sequence[InstanceType]) -> NodeClaimTemplate:
        requirements = pool.requirements.copy()
        requirements.add(Requirement.new(labels.NODEPOOL, Operator.IN, [pool.name]))
        for key, value in pool.labels.items():
            requirements.add(Requirement.new(key, Operator.IN, [value]))
        types = InstanceTypeSet(instance_types, self.axes)
        base = types.compatible(requirements) & types.has_offering(requirements)
        overhead = np.zeros((len(types), len(self.axes.names)), dtype=np.int64)
        ports = []
        daemon_requirements = requirements.copy()
        daemon_requirements.add(Requirement.new(labels.REGISTERED, Operator.IN, ["true"]))
        daemon_requirements.add(Requirement.new(labels.INITIALIZED, Operator.IN, ["true"]))
        for daemon in self.daemonsets:
            lands = self._daemon_mask(daemon, pool.taints, daemon_requirements, types)
            if lands.any():
                overhead[lands] += self.axes.vector(daemon.requests)
                if daemon.host_ports:
                    ports.append((lands, daemon.host_ports))
        return NodeClaimTemplate(
            nodepool=pool.name,
            weight=pool.weight,
            requirements=requirements,
            labels={**pool.labels, labels.NODEPOOL: pool.name},
            taints=pool.taints,
            startup_taints=pool.startup_taints,
            instance_types=types,
            daemons=DaemonOverhead(overhead, ports),
            base_mask=base,
            headroom=types.allocatable - overhead,
            min_values_best_effort=self.options.min_values_best_effort,
        )

    @staticmethod
    def _daemon_mask(
        daemon: PodInfo, taints: Sequence[Taint], requirements: Requirements, types: InstanceTypeSet
    ) -> BoolArray:
        lands = np.zeros(len(types), dtype=np.bool_)
        constraints = daemon.constraints
        # A DaemonSet pod lands wherever it tolerates the taints (PreferNoSchedule included) and one of its
        # node affinity terms is compatible with the template and the type.
        if untolerated_taint(taints, constraints) is not None:
            return lands
        for term in constraints.node_terms:
            if requirements.compatible(term) is not None:
                continue
            merged = requirements.copy()
            merged.add(*term)
            lands |= types.compatible(merged)
        return lands

    def _existing(
        self, node: NodeSnapshot, compiled: list[PodInfo], requirements: Requirements
    ) -> ExistingNode:
        """`compiled`: its bound pods (`_compile_bound`); `requirements`: its labels (`_with_hostname`)."""
        available = self.axes.vector(node.allocatable)
        host_ports: set[tuple[str, str, int]] = set()
        present_owners: set[str] = set()
        for pod in compiled:
            available = available - self.axes.vector(pod.requests)
            host_ports.update(pod.host_ports)
            for owner in pod.pod.metadata.owner_references:
                present_owners.add(owner.uid or owner.name)
        node_labels = _with_hostname(node)
        for daemon in self.daemonsets:
            owners = {owner.uid or owner.name for owner in daemon.pod.metadata.owner_references}
            if owners & present_owners:
                continue
            if untolerated_taint(node.taints, daemon.constraints) is not None:
                continue
            if any(requirements.compatible(term) is None for term in daemon.constraints.node_terms):
                available = available - self.axes.vector(daemon.requests)
        return ExistingNode(
            name=node.name,
            node_labels=node_labels,
            requirements=requirements,
            taints=node.taints,
            available=np.maximum(available, 0) if node.initialized else available,
            nodepool=node.nodepool,
            initialized=node.initialized,
            host_ports=host_ports,
        )

    def _universe(
        self, nodes: Sequence[NodeSnapshot], requirements: Sequence[Requirements], keys: Collection[str]
    ) -> dict[str, list[DomainSource]]:
        """The domains of `keys` (the topology keys of the pods' groups; no other key is ever looked up), from
        the templates and the nodes. `requirements`: each node's labels (`_with_hostname`), in the order of
        `nodes`."""
        universe: dict[str, list[DomainSource]] = {}
        wanted = set(keys)
        if not wanted:
            return universe
        for template in self.templates:
            types = template.instance_types
            for key in wanted & {
                labels.ZONE,
                labels.CAPACITY_TYPE,
                *types.defined_keys(),
                *template.requirements.keys(),
            }:
                if key == labels.HOSTNAME:
                    continue
                values: set[str] = set()
                pool_requirement = template.requirements.get(key)
                for row in np.flatnonzero(template.base_mask).tolist():
                    type_requirements = types.types[row].requirements
                    if type_requirements.has(key):
                        values.update(v for v in type_requirements.get(key).values if pool_requirement.has(v))
                if pool_requirement.operator() is Operator.IN:
                    values.update(pool_requirement.values)
                for value in sorted(values):
                    universe.setdefault(key, []).append(
                        DomainSource(value, template.requirements, template.taints)
                    )
        for node, with_hostname in zip(nodes, requirements, strict=True):
            node_labels = _with_hostname(node)
            domains = [(key, node_labels[key]) for key in wanted if key in node_labels]
            if not domains:
                continue
            # A node without the hostname label counts in no hostname domain by its labels.
            node_requirements = (
                with_hostname if labels.HOSTNAME in node.labels else Requirements.from_labels(node.labels)
            )
            for key, value in domains:
                universe.setdefault(key, []).append(DomainSource(value, node_requirements, node.taints))
        return universe

    # ----------------------------------------------------------------------------------------------- trials

    def bind(self, row: int, pods: Sequence[PodInfo]) -> None:
        """Bind pods the simulation was made with (as pods to place) to the existing node at `row`, as its
        constructor binds a node's pods: their requests taken from what is left, their host ports and
        topology counted."""
        node = self.existing[row]
        available = node.available
        for pod in pods:
            available = available - self.vectors[pod.uid]
            node.host_ports.update(pod.host_ports)
            self.topology.count(pod, node.taints, node.requirements, 1)
        node.available = np.maximum(available, 0) if node.initialized else available
        self.existing_free[row] = node.available

    def reset(
        self,
        pods: list[PodInfo],
        remaining: dict[str, Resources],
        max_nodeclaims: int | None = None,
        closed: BoolArray | None = None,
        directions: Directions | None = None,
    ) -> None:
        """Forget the NodeClaims and placements of the last solve, to place `pods` next with `remaining`
        NodePool limits, at most `max_nodeclaims` new NodeClaims and the `closed` rows taking no pod; with
        `directions`, each pod only where they say."""
        self.pods = pods
        self.claims = []
        self.claim_free[:] = 0
        self.claim_pods[:] = 0
        self._refused = {}
        self._hostname_counts = {}
        self._claim_bits = {}
        self.placements = {}
        self.remaining = remaining
        self.max_nodeclaims = max_nodeclaims
        self._open = ~closed if closed is not None and closed.any() else None
        self._directions = directions
        self._planned = {}

    # ------------------------------------------------------------------------------------------------ solve

    def solve(self) -> SchedulingResults:
        """Place the pods: on existing nodes first, then on NodeClaims made so far, then on new ones."""
        queue = deque(sorted(self.pods, key=_queue_order))
        last_length: dict[str, int] = {}
        failures: dict[str, list[str]] = {}
        while queue:
            pod = queue[0]
            if last_length.get(pod.uid) == len(queue):
                break
            queue.popleft()
            reasons = self._schedule(pod)
            if reasons is None:
                failures.pop(pod.uid, None)
                continue
            failures[pod.uid] = reasons
            queue.append(pod)
            last_length[pod.uid] = len(queue)
        return self._results(failures)

    def _schedule(self, pod: PodInfo) -> list[str] | None:
        """Try the pod, relaxing one preference at a time; None when placed, else the last attempt's reasons."""
        constraints = pod.constraints
        while True:
            reasons = self._add(pod, constraints)
            if reasons is None:
                return None
            relaxed = constraints.relax(self.prefer_no_schedule)
            if relaxed is None:
                return reasons
            constraints = relaxed[0]

    def _add(self, pod: PodInfo, constraints: Constraints) -> list[str] | None:
        pod_requirements = constraints.requirements(self.options.respect_preferences)
        requests = self.vectors[pod.uid]
        if self._directions is not None:
            return self._add_directed(pod, constraints, pod_requirements, requests, self._directions)
        if self._add_existing(pod, constraints, pod_requirements, requests):
            return None
        if self._add_in_flight(pod, constraints, pod_requirements, requests):
            return None
        return self._add_new(pod, constraints, pod_requirements, requests)

    def _add_existing(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, requests: IntArray
    ) -> bool:
        if not self.existing:
            return False
        index = self._index
        mask = np.all(self.existing_free >= requests, axis=1) & index.admits(constraints, pod_requirements)
        if self._open is not None:
            mask &= self._open
        strict = constraints.strict_requirements()
        groups = self.topology.groups_for(pod, constraints)
        for group in groups:
            possible = index.possible(group, pod, strict)
            if possible is not None:
                mask &= possible
        # Without topology or host ports, the masks are the whole of `try_add`: the first node left takes it.
        unconstrained = not groups and not pod.host_ports
        for row in np.flatnonzero(mask).tolist():
            node = self.existing[row]
            if unconstrained:
                requirements = node.requirements
            else:
                try:
                    requirements = node.try_add(pod, constraints, pod_requirements, requests, self.topology)
                except Rejection:
                    continue
            self._commit_existing(row, pod, requests, requirements)
            return True
        return False

    def _commit_existing(
        self, row: int, pod: PodInfo, requests: IntArray, requirements: Requirements
    ) -> None:
        node = self.existing[row]
        node.commit(pod, requests, requirements)
        self.existing_free[row] = node.available
        self.topology.count(pod, node.taints, node.requirements, 1)
        self.placements[pod.uid] = node.name

    def _add_directed(
        self,
        pod: PodInfo,
        constraints: Constraints,
        pod_requirements: Requirements,
        requests: IntArray,
        directions: Directions,
    ) -> list[str] | None:
        """Place the pod where the directions say, with every check the undirected solve makes there."""
        row = directions.existing.get(pod.uid)
        if row is not None:
            node = self.existing[row]
            if self._open is not None and not self._open[row]:
                return [f'node "{node.name}" takes no pods in this simulation']
            try:
                requirements = node.try_add(pod, constraints, pod_requirements, requests, self.topology)
            except Rejection as rejection:
                return [f'incompatible with node "{node.name}": {rejection.message}']
            self._commit_existing(row, pod, requests, requirements)
            return None
        index = directions.claims.get(pod.uid)
        if index is None:
            return ["no destination planned"]
        claim = self._planned.get(index)
        if claim is not None:
            try:
                merged, mask = claim.try_add(pod, constraints, pod_requirements, requests, self.topology)
            except Rejection as rejection:
                return [self._explain(claim.template, rejection)]
            self._commit_claim(claim, pod, requests, merged, mask)
            return None
        position, allowed = directions.planned[index]
        template = self.templates[position]
        limit_mask, limit_reason = self._limit_mask(template)
        claim = self._new_claim(template)
        claim.mask = claim.mask & allowed
        zone = directions.zones[index] if index < len(directions.zones) else None
        if zone is not None:
            claim.requirements.add(Requirement.new(labels.ZONE, Operator.IN, [zone]))
        try:
            merged, mask = claim.try_add(
                pod, constraints, pod_requirements, requests, self.topology, limit_mask
            )
        except Rejection as rejection:
            return [self._explain(template, rejection)]
        if limit_reason is not None:
            return [limit_reason]
        self._grow()
        self.claims.append(claim)
        self._planned[index] = claim
        self._commit_claim(claim, pod, requests, merged, mask)
        self._charge_limits(template, mask)
        return None

    def _shape(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements
    ) -> tuple[object, ...]:
        return (
            pod.namespace,
            frozenset(pod.labels.items()),
            pod_requirements.signature(),
            tuple(id(t) for t in constraints.tolerations),
            constraints.tolerate_prefer_no_schedule,
            pod.host_ports,
        )

    def _topology_blocked(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, count: int
    ) -> BoolArray | None:
        """NodeClaims this pod's topology refuses for certain, as a mask (None when it has no topology).

        Hostname groups are checked against each claim's own count; other keys (zone, capacity type)
        against a bitmask of the domains each claim may still take."""
        blocked: BoolArray | None = None
        for group in self.topology.groups_for(pod, constraints):
            selects_self = group.selects(pod.namespace, pod.labels)
            if group.key == labels.HOSTNAME:
                counts = self._hostname_counts.get(id(group))
                if counts is None:
                    continue
                counts = counts[:count]
                if group.type is TopologyType.SPREAD:
                    mask = counts + (1 if selects_self else 0) > group.max_skew
                elif group.type is TopologyType.ANTI_AFFINITY:
                    mask = counts > 0
                else:
                    continue
            else:
                domains = self._domains.get(group.key)
                if domains is None:
                    continue
                allowed, unseen_allowed = group.allowed(selects_self, pod_requirements.get(group.key))
                bits = domains.bits(allowed) | (UNSEEN_DOMAIN if unseen_allowed else 0)
                mask = (self._claim_bits[group.key][:count] & bits) == 0
            blocked = mask if blocked is None else blocked | mask
        return blocked

    def _add_in_flight(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, requests: IntArray
    ) -> bool:
        count = len(self.claims)
        if count == 0:
            return False
        eligible = np.all(self.claim_free[:count] >= requests, axis=1)
        shape = self._shape(pod, constraints, pod_requirements)
        refused = self._refused.get(shape)
        if refused is not None:
            eligible &= ~refused[:count]
        blocked = self._topology_blocked(pod, constraints, pod_requirements, count)
        if blocked is not None:
            eligible &= ~blocked
        candidates = np.flatnonzero(eligible)
        if candidates.size == 0:
            return False
        order = candidates[np.argsort(self.claim_pods[candidates], kind="stable")].tolist()
        for index in order:
            claim = self.claims[index]
            try:
                requirements, mask = claim.try_add(
                    pod, constraints, pod_requirements, requests, self.topology
                )
            except Rejection as rejection:
                if rejection.stage in MONOTONE_STAGES:
                    self._refuse(shape, index)
                continue
            self._commit_claim(claim, pod, requests, requirements, mask)
            return True
        return False

    def _refuse(self, shape: tuple[object, ...], index: int) -> None:
        refused = self._refused.get(shape)
        if refused is None or refused.size < self._claim_capacity:
            grown = np.zeros(self._claim_capacity, dtype=np.bool_)
            if refused is not None:
                grown[: refused.size] = refused
            refused = self._refused[shape] = grown
        refused[index] = True

    def _commit_claim(
        self,
        claim: SimNodeClaim,
        pod: PodInfo,
        requests: IntArray,
        requirements: Requirements,
        mask: BoolArray,
    ) -> None:
        claim.commit(pod, requests, requirements, mask)
        template = claim.template
        self.claim_free[claim.index] = template.headroom[mask].max(axis=0) - claim.requests
        self.claim_pods[claim.index] = len(claim.pods)
        self.topology.record(pod, template.taints, requirements)
        self._track_hostnames(claim)
        self._track_domains(claim)
        self.placements[pod.uid] = claim.hostname

    def _track_hostnames(self, claim: SimNodeClaim) -> None:
        for group in self.topology.hostname_groups():
            counts = self._hostname_counts.get(id(group))
            if counts is None or counts.size < self._claim_capacity:
                grown = np.zeros(self._claim_capacity, dtype=np.int64)
                if counts is not None:
                    grown[: counts.size] = counts
                counts = self._hostname_counts[id(group)] = grown
            counts[claim.index] = group.domains.get(claim.hostname, 0)

    def _track_domains(self, claim: SimNodeClaim) -> None:
        for key, domains in self._domains.items():
            bits = self._claim_bits.get(key)
            if bits is None or bits.size < self._claim_capacity:
                grown = np.zeros(self._claim_capacity, dtype=np.int64)
                if bits is not None:
                    grown[: bits.size] = bits
                bits = self._claim_bits[key] = grown
            bits[claim.index] = domains.admitted(claim.requirements.get(key))

    def _limit_mask(self, template: NodeClaimTemplate) -> tuple[BoolArray | None, str | None]:
        remaining = self.remaining.get(template.nodepool)
        if remaining is None:
            return None, None
        if remaining.get(NODES, 1) <= 0:
            return None, f'nodepool "{template.nodepool}" has reached its nodes limit'
        mask = np.ones(len(template.instance_types), dtype=np.bool_)
        for name, left in remaining.items():
            position = self.axes.index.get(name)
            if position is not None:
                mask &= template.instance_types.capacity[:, position] <= left
        if not (mask & template.base_mask).any():
            return None, f'all available instance types exceed limits for nodepool "{template.nodepool}"'
        return mask, None

    def _add_new(
        self, pod: PodInfo, constraints: Constraints, pod_requirements: Requirements, requests: IntArray
    ) -> list[str] | None:
        if not self.templates:
            return ["no nodepools found"]
        reasons: list[str] = []
        for template in self.templates:
            if not template.base_mask.any():
                reasons.append(f'nodepool "{template.nodepool}" has no compatible instance types')
                continue
            limit_mask, limit_reason = self._limit_mask(template)
            claim = self._new_claim(template)
            try:
                merged, mask = claim.try_add(
                    pod, constraints, pod_requirements, requests, self.topology, limit_mask
                )
            except Rejection as rejection:
                reasons.append(self._explain(template, rejection))
                continue
            if limit_reason is not None:
                # The pod would fit a new node, but the pool's limits leave no room for one.
                reasons.append(limit_reason)
                continue
            self._grow()
            self.claims.append(claim)
            self._commit_claim(claim, pod, requests, merged, mask)
            self._charge_limits(template, mask)
            # NodeClaims are never taken back, so once there are too many the answer is settled.
            if self.max_nodeclaims is not None and len(self.claims) > self.max_nodeclaims:
                raise TooManyNodeClaims(len(self.claims))
            return None
        return reasons

    def _new_claim(self, template: NodeClaimTemplate) -> SimNodeClaim:
        index = len(self.claims)
        hostname = f"hostname-placeholder-{index:04d}"
        requirements = template.requirements.copy()
        requirements.add(Requirement.new(labels.HOSTNAME, Operator.IN, [hostname]))
        self.topology.register_hostname(hostname)
        return SimNodeClaim(
            index=index,
            template=template,
            hostname=hostname,
            requirements=requirements,
            mask=template.base_mask,
            requests=np.zeros(len(self.axes.names), dtype=np.int64),
        )

    @staticmethod
    def _explain(template: NodeClaimTemplate, rejection: Rejection) -> str:
        if rejection.stage is Stage.INSTANCE_TYPES:
            return f'incompatible with nodepool "{template.nodepool}", {rejection.message}'
        return f'incompatible with nodepool "{template.nodepool}": {rejection.message}'

    def _charge_limits(self, template: NodeClaimTemplate, mask: BoolArray) -> None:
        remaining = self.remaining.get(template.nodepool)
        if remaining is None:
            return
        largest = template.instance_types.capacity[mask].max(axis=0)
        for name in remaining:
            position = self.axes.index.get(name)
            if position is not None:
                remaining[name] -= int(largest[position])
        if NODES in remaining:
            remaining[NODES] -= 1

    def _grow(self) -> None:
        if len(self.claims) < self._claim_capacity:
            return
        self._claim_capacity *= 2
        free = np.zeros((self._claim_capacity, len(self.axes.names)), dtype=np.int64)
        free[: self.claim_free.shape[0]] = self.claim_free
        self.claim_free = free
        pods = np.zeros(self._claim_capacity, dtype=np.int64)
        pods[: self.claim_pods.size] = self.claim_pods
        self.claim_pods = pods

    # ---------------------------------------------------------------------------------------------- results

    def _results(self, failures: dict[str, list[str]]) -> SchedulingResults:
        nodeclaims = [self._finalize(claim) for claim in self.claims]
        existing = [
            ExistingPlacement(node.name, [pod.key for pod in node.pods])
            for node in self.existing
            if node.pods
        ]
        by_uid = {pod.uid: pod for pod in self.pods}
        unschedulable = [Unschedulable(by_uid[uid].key, reasons) for uid, reasons in failures.items()]
        return SchedulingResults(
            nodeclaims=nodeclaims,
            existing=existing,
            unschedulable=unschedulable,
        )

    def _finalize(self, claim: SimNodeClaim) -> NewNodeClaim:
        template = claim.template
        types = template.instance_types
        requirements = Requirements(r for r in claim.requirements if r.key != labels.HOSTNAME)
        rows = np.flatnonzero(claim.mask)
        prices = types.cheapest_prices(requirements)[rows]
        order = sorted(range(rows.size), key=lambda i: (int(prices[i]), types.names[int(rows[i])]))
        ordered = [int(rows[i]) for i in order if prices[i] != NO_PRICE][:MAX_INSTANCE_TYPES]
        daemon = template.daemons.requests[ordered].min(axis=0) if ordered else np.zeros(len(self.axes.names))
        annotations = {}
        if any(requirement.min_values is not None for requirement in requirements):
            relaxed = bool(unmet_min_values(types, claim.mask, requirements))
            annotations[labels.MIN_VALUES_RELAXED] = "true" if relaxed else "false"
        annotations.update(overlay_annotations([types.types[row] for row in ordered]))
        launches = launch_order(types, ordered, requirements)
        offered = types.offering_mask(requirements) & np.isin(types.offering_type, ordered)
        capacity_types = sorted(
            {types.offerings[column].capacity_type for column in np.flatnonzero(offered).tolist()}
        )
        requirements.add(
            Requirement.new(labels.INSTANCE_TYPE, Operator.IN, [types.names[row] for row in ordered])
        )
        if capacity_types:
            requirements.add(Requirement.new(labels.CAPACITY_TYPE, Operator.IN, capacity_types))
        return NewNodeClaim.build(
            template=template,
            requirements=requirements,
            options=[types.names[row] for row in ordered],
            launches=launches,
            pods=[pod.key for pod in claim.pods],
            annotations=annotations,
            requests=self.axes.resources(claim.requests + daemon.astype(np.int64)),
        )


class _ExistingIndex:
    """The existing nodes as rows, with masks of the rows that certainly refuse a pod, so that the
    first-fit loop over hundreds of nodes tries only the few that might take it. For a pod without
    topology or host ports the masks are exactly `ExistingNode.try_add`'s checks."""

    def __init__(self, nodes: Sequence[ExistingNode]) -> None:
        self.nodes = nodes
        # Nodes with the same labels (but their hostname) and taints accept the same pods.
        kinds: dict[tuple[object, ...], int] = {}
        representatives: list[ExistingNode] = []
        kind_of = []
        for node in nodes:
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

    def admits(self, constraints: Constraints, pod_requirements: Requirements) -> BoolArray:
        """Rows whose taints the pod tolerates and whose labels satisfy its requirements."""
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
        """Each row's domain of `key` as an index into a table (-1 when it has none)."""
        found = self._domain_ids.get(key)
        if found is None:
            table: dict[str, int] = {}
            ids = [
                table.setdefault(node.requirements.get(key).any(), len(table))
                if node.requirements.has(key)
                else -1
                for node in self.nodes
            ]
            found = self._domain_ids[key] = (table, np.array(ids, dtype=np.int64))
        return found

    def possible(self, group: TopologyGroup, pod: PodInfo, strict: Requirements) -> BoolArray | None:
        """Rows the group does not certainly refuse the pod, or None when not worth asking.

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


def _with_hostname(node: NodeSnapshot) -> dict[str, str]:
    """A node's labels, with its name as the hostname label when it has none."""
    node_labels = dict(node.labels)
    node_labels.setdefault(labels.HOSTNAME, node.name)
    return node_labels
