"""Topology spread, pod affinity and pod anti-affinity during a provisioning simulation.

Every constraint of every pending pod becomes a topology group: the pods it selects and a count per domain
(zone, hostname, capacity type...). Groups start from the pods already bound in the cluster and are updated
as the simulation places pods. When a pod is tried on a node, each group it owns (and each inverse
anti-affinity group that selects it) narrows the node's requirement on the group's key to the domains it may
use, following Karpenter's rules: spread picks the least-loaded domain within maxSkew, affinity picks domains
that already hold a matching pod (or bootstraps one when the pod selects itself), anti-affinity only empty
domains. Ties between equal domains are broken by name, so the outcome is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from core import labels
from core.api.kube import LabelSelector, PodAffinityTerm, Toleration, TopologySpreadConstraint, tolerates
from core.api.meta import Taint
from core.scheduling.pods import Constraints, PodInfo
from core.scheduling.requirements import Operator, Requirement, Requirements


class TopologyType(StrEnum):
    SPREAD = "topology spread"
    AFFINITY = "pod affinity"
    ANTI_AFFINITY = "pod anti-affinity"


@dataclass(frozen=True, slots=True)
class DomainSource:
    """A domain value for a key and what would produce it (a NodePool's requirements and taints, or a node)."""

    domain: str
    requirements: Requirements
    taints: tuple[Taint, ...]


@dataclass(slots=True)
class NodeFilter:
    """Which nodes count for a spread constraint (nodeAffinityPolicy and nodeTaintsPolicy)."""

    requirements: Requirements | None
    tolerations: tuple[Toleration, ...] | None

    def matches(self, taints: Sequence[Taint], requirements: Requirements) -> bool:
        if self.requirements is not None and requirements.compatible(self.requirements) is not None:
            return False
        if self.tolerations is not None:
            blocking = (t for t in taints if t.effect in ("NoSchedule", "NoExecute"))
            return all(tolerates(self.tolerations, taint) for taint in blocking)
        return True


@dataclass(eq=False, slots=True)
class TopologyGroup:
    """Pods selected by one constraint, counted per domain of one key."""

    type: TopologyType
    key: str
    namespaces: frozenset[str] | None
    selector: LabelSelector | None
    match_labels: tuple[tuple[str, str], ...]
    max_skew: int = 1
    min_domains: int | None = None
    node_filter: NodeFilter | None = None
    domains: dict[str, int] = field(default_factory=dict)
    owners: set[str] = field(default_factory=set)

    def identity(self) -> tuple[object, ...]:
        """What makes two constraints the same group, so that pods of one deployment share it."""
        node_filter = self.node_filter
        return (
            self.type,
            self.key,
            self.namespaces,
            _selector_signature(self.selector),
            self.match_labels,
            self.max_skew,
            self.min_domains,
            None
            if node_filter is None or node_filter.requirements is None
            else node_filter.requirements.signature(),
            None
            if node_filter is None or node_filter.tolerations is None
            else tuple(t.model_dump_json() for t in node_filter.tolerations),
        )

    def selects(self, namespace: str, pod_labels: dict[str, str]) -> bool:
        """Whether a pod is one this group counts."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        if self.selector is None or not self.selector.matches(pod_labels):
            return False
        return all(pod_labels.get(key) == value for key, value in self.match_labels)

    def counts(self, pod: PodInfo, taints: Sequence[Taint], requirements: Requirements) -> bool:
        """Whether placing this pod on a node with these taints and requirements changes this group's counts."""
        if not self.selects(pod.namespace, pod.labels):
            return False
        return self.node_filter is None or self.node_filter.matches(taints, requirements)

    def record(self, domains: Iterable[str]) -> None:
        for domain in domains:
            self.domains[domain] = self.domains.get(domain, 0) + 1

    def register(self, domain: str) -> None:
        self.domains.setdefault(domain, 0)

    def next_domains(
        self, selects_self: bool, pod_domains: Requirement, node_domains: Requirement
    ) -> Requirement:
        """The domains a pod may use under this group, as a requirement on the group's key."""
        if self.type is TopologyType.SPREAD:
            return self._next_spread(selects_self, pod_domains, node_domains)
        if self.type is TopologyType.AFFINITY:
            return self._next_affinity(selects_self, pod_domains, node_domains)
        return self._next_anti_affinity(pod_domains, node_domains)

    def _candidates(self, node_domains: Requirement) -> list[str]:
        if node_domains.operator() is Operator.IN:
            return sorted(domain for domain in node_domains.values if domain in self.domains)
        return sorted(domain for domain in self.domains if node_domains.has(domain))

    def _global_min(self, pod_domains: Requirement) -> int:
        # A new node can always be made, so a hostname domain with zero pods always exists.
        if self.key == labels.HOSTNAME:
            return 0
        eligible = [count for domain, count in self.domains.items() if pod_domains.has(domain)]
        if not eligible or (self.min_domains is not None and len(eligible) < self.min_domains):
            return 0
        return min(eligible)

    def _next_spread(
        self, selects_self: bool, pod_domains: Requirement, node_domains: Requirement
    ) -> Requirement:
        global_min = self._global_min(pod_domains)
        best: str | None = None
        best_count = 0
        for domain in self._candidates(node_domains):
            count = self.domains[domain] + (1 if selects_self else 0)
            if count - global_min <= self.max_skew and (best is None or count < best_count):
                best, best_count = domain, count
        if best is None:
            return Requirement.new(self.key, Operator.DOES_NOT_EXIST)
        return Requirement.new(self.key, Operator.IN, [best])

    def _next_affinity(
        self, selects_self: bool, pod_domains: Requirement, node_domains: Requirement
    ) -> Requirement:
        occupied = [domain for domain, count in self.domains.items() if count > 0 and pod_domains.has(domain)]
        if occupied:
            return Requirement.new(self.key, Operator.IN, occupied)
        if selects_self:
            # No matching pod anywhere yet: the pod may start the group, preferably where the node already is.
            for domain in self._candidates(node_domains):
                if pod_domains.has(domain):
                    return Requirement.new(self.key, Operator.IN, [domain])
            for domain in sorted(self.domains):
                if pod_domains.has(domain):
                    return Requirement.new(self.key, Operator.IN, [domain])
        return Requirement.new(self.key, Operator.DOES_NOT_EXIST)

    def _next_anti_affinity(self, pod_domains: Requirement, node_domains: Requirement) -> Requirement:
        if node_domains.operator() is Operator.IN:
            candidates: Iterable[str] = node_domains.values
        else:
            candidates = [domain for domain in self.domains if node_domains.has(domain)]
        empty = [
            domain for domain in candidates if self.domains.get(domain, 0) == 0 and pod_domains.has(domain)
        ]
        if not empty:
            return Requirement.new(self.key, Operator.DOES_NOT_EXIST)
        return Requirement.new(self.key, Operator.IN, empty)

    def allowed(self, selects_self: bool, pod_domains: Requirement) -> tuple[set[str], bool]:
        """The domains this group would let the pod use on any node, and whether a domain it has never seen
        would do; a node whose requirement admits none of them is certain to be refused."""
        if self.type is TopologyType.SPREAD:
            global_min = self._global_min(pod_domains)
            extra = 1 if selects_self else 0
            valid = {
                domain
                for domain, count in self.domains.items()
                if count + extra - global_min <= self.max_skew and pod_domains.has(domain)
            }
            return valid, False
        if self.type is TopologyType.AFFINITY:
            occupied = {
                domain for domain, count in self.domains.items() if count > 0 and pod_domains.has(domain)
            }
            if occupied or not selects_self:
                return occupied, False
            return {domain for domain in self.domains if pod_domains.has(domain)}, False
        empty = {domain for domain, count in self.domains.items() if count == 0 and pod_domains.has(domain)}
        return empty, True

    def describe_counts(self, limit: int = 8) -> str:
        items = sorted(self.domains.items())
        shown = ", ".join(f"{domain}={count}" for domain, count in items[:limit])
        return shown + (f", ... {len(items) - limit} more" if len(items) > limit else "")


class TopologyError(Exception):
    """No domain satisfies one of the pod's topology constraints on this node."""

    def __init__(self, group: TopologyGroup, pod_domains: Requirement, node_domains: Requirement) -> None:
        self.group = group
        self.pod_domains = pod_domains
        self.node_domains = node_domains
        super().__init__(group.key)

    def __str__(self) -> str:
        # Formatted lazily: the simulation raises this far more often than anyone reads it.
        group = self.group
        return (
            f"unsatisfiable {group.type} constraint, key={group.key} "
            f"(counts = {{{group.describe_counts()}}}, podDomains = {self.pod_domains}, "
            f"nodeDomains = {self.node_domains})"
        )


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod already running on a node, as topology counting needs it."""

    pod: PodInfo
    node_labels: dict[str, str]
    node_taints: tuple[Taint, ...]


def _selector_signature(selector: LabelSelector | None) -> str:
    return "null" if selector is None else json.dumps(selector.model_dump(mode="json"), sort_keys=True)


class Topology:
    """All topology groups of a simulation and the domains each key can take."""

    def __init__(
        self,
        universe: Callable[[set[str]], dict[str, list[DomainSource]]],
        pending: Sequence[PodInfo],
        bound: Sequence[BoundPod],
    ) -> None:
        """`universe(keys)`: the domains each of these topology keys can take (asked once, when the groups are
        known: a cluster's nodes carry many labels no group is keyed on)."""
        self._universe: dict[str, list[DomainSource]] = {}
        self._groups: dict[tuple[object, ...], TopologyGroup] = {}
        self._inverse: dict[tuple[object, ...], TopologyGroup] = {}
        self._owned: dict[str, dict[int, TopologyGroup]] = {}
        self._inverse_owned: dict[str, list[TopologyGroup]] = {}
        self._hostname_groups: list[TopologyGroup] = []
        # Groups are all made here, so which of them select a pod depends only on its namespace and labels.
        self._selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
        self._inverse_selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
        pending_uids = {pod.uid for pod in pending}
        for pod in pending:
            self._register_owner(pod)
        for bound_pod in bound:
            if bound_pod.pod.uid not in pending_uids:
                self._register_inverse(bound_pod.pod, inverse_only=True)
        self._universe = universe(self.topology_keys())
        for group in [*self._groups.values(), *self._inverse.values()]:
            self._seed_domains(group)
        self._count_bound(bound, pending_uids)

    @staticmethod
    def _namespaces(owner: PodInfo, term: PodAffinityTerm) -> frozenset[str] | None:
        if (
            term.namespace_selector is not None
            and not term.namespace_selector.match_labels
            and not (term.namespace_selector.match_expressions)
        ):
            return None  # an empty namespace selector selects every namespace
        return frozenset(term.namespaces or [owner.namespace])

    def _new_group(self, kind: TopologyType, owner: PodInfo, term: object) -> TopologyGroup:
        if isinstance(term, TopologySpreadConstraint):
            match_keys = tuple(
                sorted((k, owner.labels[k]) for k in term.match_label_keys or () if k in owner.labels)
            )
            affinity_honored = term.node_affinity_policy in (None, "Honor")
            taints_honored = term.node_taints_policy == "Honor"
            node_filter = NodeFilter(
                requirements=owner.constraints.strict_requirements() if affinity_honored else None,
                tolerations=owner.constraints.tolerations if taints_honored else None,
            )
            return TopologyGroup(
                type=kind,
                key=labels.normalize_key(term.topology_key),
                namespaces=frozenset({owner.namespace}),
                selector=term.label_selector,
                match_labels=match_keys,
                max_skew=term.max_skew,
                min_domains=term.min_domains,
                node_filter=node_filter,
            )
        assert isinstance(term, PodAffinityTerm)
        return TopologyGroup(
            type=kind,
            key=labels.normalize_key(term.topology_key),
            namespaces=self._namespaces(owner, term),
            selector=term.label_selector,
            match_labels=tuple(
                sorted((k, owner.labels[k]) for k in term.match_label_keys or () if k in owner.labels)
            ),
        )

    def _get_or_create(
        self, table: dict[tuple[object, ...], TopologyGroup], kind: TopologyType, owner: PodInfo, term: object
    ) -> TopologyGroup:
        candidate = self._new_group(kind, owner, term)
        key = candidate.identity()
        group = table.get(key)
        if group is None:
            group = table[key] = candidate
            if group.key == labels.HOSTNAME:
                self._hostname_groups.append(group)
        group.owners.add(owner.uid)
        return group

    def _register_owner(self, pod: PodInfo) -> None:
        constraints = pod.constraints
        owned: dict[int, TopologyGroup] = {}
        for spread in constraints.spread:
            owned[id(spread)] = self._get_or_create(self._groups, TopologyType.SPREAD, pod, spread)
        for term in constraints.affinity_terms():
            owned[id(term)] = self._get_or_create(self._groups, TopologyType.AFFINITY, pod, term)
        for term in constraints.anti_affinity_terms():
            owned[id(term)] = self._get_or_create(self._groups, TopologyType.ANTI_AFFINITY, pod, term)
        self._owned[pod.uid] = owned
        self._register_inverse(pod, inverse_only=False)

    def _register_inverse(self, pod: PodInfo, inverse_only: bool) -> None:
        # Required anti-affinity is symmetric: pods it selects must also stay out of its owner's domains.
        terms = pod.constraints.required_anti_affinity
        if terms:
            groups = [self._get_or_create(self._inverse, TopologyType.ANTI_AFFINITY, pod, t) for t in terms]
            self._inverse_owned[pod.uid] = groups

    def _seed_domains(self, group: TopologyGroup) -> None:
        for source in self._universe.get(group.key, ()):
            if group.node_filter is None or group.node_filter.matches(source.taints, source.requirements):
                group.register(source.domain)

    def _count_bound(self, bound: Sequence[BoundPod], pending_uids: set[str]) -> None:
        groups = list(self._groups.values())
        for bound_pod in bound:
            pod = bound_pod.pod
            if pod.uid in pending_uids:
                continue
            node_requirements = Requirements.from_labels(bound_pod.node_labels)
            for group in groups:
                domain = bound_pod.node_labels.get(group.key)
                if domain is not None and group.counts(pod, bound_pod.node_taints, node_requirements):
                    group.record([domain])
            for group in self._inverse_owned.get(pod.uid, ()):
                domain = bound_pod.node_labels.get(group.key)
                if domain is not None:
                    group.record([domain])

    def register_hostname(self, hostname: str) -> None:
        """Make a new node's hostname a domain of every hostname-keyed group."""
        for group in self._hostname_groups:
            group.register(hostname)

    def universe(self) -> dict[str, list[DomainSource]]:
        """Every domain each key can take, and where it comes from."""
        return self._universe

    def topology_keys(self) -> set[str]:
        """The topology keys some group uses."""
        return {group.key for group in [*self._groups.values(), *self._inverse.values()]}

    def owned(self, pod: PodInfo, term: object) -> TopologyGroup | None:
        """The group of one of the pod's own constraints (a spread constraint or an affinity term)."""
        return self._owned.get(pod.uid, {}).get(id(term))

    def hostname_groups(self) -> list[TopologyGroup]:
        """Groups keyed on the hostname, whose counts the scheduler mirrors per NodeClaim."""
        return self._hostname_groups

    def groups_for(self, pod: PodInfo, constraints: Constraints) -> list[TopologyGroup]:
        """The groups that constrain this pod: those it owns and the inverse anti-affinities that select it."""
        return self._matching_groups(pod, constraints)

    def _matching_groups(self, pod: PodInfo, constraints: Constraints) -> list[TopologyGroup]:
        signature = (pod.namespace, frozenset(pod.labels.items()))
        inverse = self._inverse_selecting.get(signature)
        if inverse is None:
            inverse = self._inverse_selecting[signature] = [
                group for group in self._inverse.values() if group.selects(pod.namespace, pod.labels)
            ]
        owned = self._owned.get(pod.uid)
        if not owned:
            return inverse
        terms = [*constraints.spread, *constraints.affinity_terms(), *constraints.anti_affinity_terms()]
        return [*(owned[id(term)] for term in terms if id(term) in owned), *inverse]

    def selecting(self, pod: PodInfo) -> list[TopologyGroup]:
        """The (non-inverse) groups whose selector picks the pod: those that count it where it runs."""
        signature = (pod.namespace, frozenset(pod.labels.items()))
        found = self._selecting.get(signature)
        if found is None:
            found = self._selecting[signature] = [
                group for group in self._groups.values() if group.selects(pod.namespace, pod.labels)
            ]
        return found

    def counting(self, pod: PodInfo) -> list[TopologyGroup]:
        """Every group whose counts change when the pod comes or goes: those selecting it, and the inverse
        anti-affinity groups it owns."""
        return [*self.selecting(pod), *self._inverse_owned.get(pod.uid, ())]

    def count(self, pod: PodInfo, taints: Sequence[Taint], requirements: Requirements, delta: int) -> None:
        """Add (`delta` 1) or take away (-1) a pod on a node that exists, whose labels give one domain per
        key, in every group that counts it there (as `record` counts a placed pod)."""
        for group in self.selecting(pod):
            if requirements.has(group.key) and group.counts(pod, taints, requirements):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta
        for group in self._inverse_owned.get(pod.uid, ()):
            if requirements.has(group.key):
                domain = requirements.get(group.key).any()
                group.domains[domain] = group.domains.get(domain, 0) + delta

    def add_requirements(
        self,
        pod: PodInfo,
        constraints: Constraints,
        pod_requirements: Requirements,
        node_requirements: Requirements,
    ) -> Requirements:
        """The node's requirements narrowed by the pod's topology groups (raises `TopologyError`)."""
        narrowed: Requirements | None = None
        for group in self._matching_groups(pod, constraints):
            pod_domains = pod_requirements.get(group.key)
            current = narrowed if narrowed is not None else node_requirements
            node_domains = current.get(group.key)
            selects_self = group.selects(pod.namespace, pod.labels)
            domains = group.next_domains(selects_self, pod_domains, node_domains)
            if domains.is_empty():
                raise TopologyError(group, pod_domains, node_domains)
            if narrowed is None:
                narrowed = node_requirements.copy()
            narrowed.add(domains)
            if narrowed.get(group.key).is_empty():
                raise TopologyError(group, pod_domains, node_domains)
        return narrowed if narrowed is not None else node_requirements

    def record(self, pod: PodInfo, taints: Sequence[Taint], requirements: Requirements) -> None:
        """Count a placed pod in every group that selects it."""
        for group in self.selecting(pod):
            if not group.counts(pod, taints, requirements) or not requirements.has(group.key):
                continue
            domains = requirements.get(group.key)
            if domains.operator() is not Operator.IN:
                continue
            if group.type is TopologyType.ANTI_AFFINITY:
                # The pod could be in any of these domains until the node is launched: block them all.
                group.record(domains.values)
            elif len(domains.values) == 1:
                group.record(domains.values)
        for group in self._inverse_owned.get(pod.uid, ()):
            if requirements.has(group.key) and requirements.get(group.key).operator() is Operator.IN:
                group.record(requirements.get(group.key).values)
