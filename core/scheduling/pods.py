"""A pod as the scheduler sees it: requests, node requirements, tolerations and topology terms, and the
order in which Karpenter relaxes its preferences when it cannot be placed.

Preferences (preferred affinities, ScheduleAnyway spread) are treated as hard until relaxed, one step at
a time, in Karpenter's order; the current step lives in an immutable `Constraints` value so that a failed
attempt can start over from the original pod.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime

from core import labels
from core.api.kube import (
    Pod,
    PodAffinityTerm,
    Toleration,
    TopologySpreadConstraint,
    pod_host_ports,
    pod_requests,
)
from core.api.meta import NodeSelectorRequirement
from core.resources import PODS, Resources
from core.scheduling.requirements import Requirement, Requirements

SUPPORTED_POD_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})

_EPOCH = datetime(1970, 1, 1)


class InvalidPodConstraint(ValueError):
    """A pod constraint Karpenter refuses to simulate (unsupported operator, restricted label, matchFields)."""


def _requirement(expression: NodeSelectorRequirement, where: str) -> Requirement:
    if expression.operator not in SUPPORTED_POD_OPERATORS:
        raise InvalidPodConstraint(f"{where}: unsupported operator {expression.operator!r}")
    key = labels.normalize_key(expression.key)
    if key in labels.RESTRICTED_LABELS:
        raise InvalidPodConstraint(f"{where}: label {key!r} is restricted")
    try:
        return Requirement.new(key, expression.operator, expression.values)
    except ValueError as error:
        raise InvalidPodConstraint(f"{where}: {error}") from error


def _node_selector_requirements(pod: Pod) -> Requirements:
    requirements = Requirements()
    for key, value in (pod.spec.node_selector or {}).items():
        normalized = labels.normalize_key(key)
        if normalized in labels.RESTRICTED_LABELS:
            raise InvalidPodConstraint(f"spec.nodeSelector: label {normalized!r} is restricted")
        requirements.add(Requirement.new(normalized, "In", [value]))
    return requirements


def _term_requirements(
    base: Requirements, expressions: list[NodeSelectorRequirement], where: str
) -> Requirements:
    requirements = base.copy()
    for index, expression in enumerate(expressions):
        requirements.add(_requirement(expression, f"{where}.matchExpressions[{index}]"))
    return requirements


@dataclass(frozen=True, slots=True)
class Constraints:
    """The pod's constraints at one relaxation step."""

    node_terms: tuple[Requirements, ...]
    """Required node affinity OR-terms, each merged with the node selector; the first one is in force."""
    preferred_node_terms: tuple[tuple[int, Requirements], ...]
    """Preferred node affinity, heaviest first; the heaviest is treated as required."""
    required_affinity: tuple[PodAffinityTerm, ...]
    required_anti_affinity: tuple[PodAffinityTerm, ...]
    preferred_affinity: tuple[tuple[int, PodAffinityTerm], ...]
    preferred_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...]
    spread: tuple[TopologySpreadConstraint, ...]
    tolerations: tuple[Toleration, ...]
    tolerate_prefer_no_schedule: bool = False

    def strict_requirements(self) -> Requirements:
        """Node selector and the required node affinity term in force, without preferences."""
        return self.node_terms[0]

    def requirements(self, respect_preferences: bool = True) -> Requirements:
        """What the node must satisfy now: the strict requirements plus the heaviest node preference."""
        if not respect_preferences or not self.preferred_node_terms:
            return self.node_terms[0]
        merged = self.node_terms[0].copy()
        merged.add(*self.preferred_node_terms[0][1])
        return merged

    def affinity_terms(self) -> tuple[PodAffinityTerm, ...]:
        """Required affinity terms plus the preferred ones not yet relaxed."""
        return self.required_affinity + tuple(term for _, term in self.preferred_affinity)

    def anti_affinity_terms(self) -> tuple[PodAffinityTerm, ...]:
        """Required anti-affinity terms plus the preferred ones not yet relaxed."""
        return self.required_anti_affinity + tuple(term for _, term in self.preferred_anti_affinity)

    def relax(self, prefer_no_schedule_taints_exist: bool) -> tuple[Constraints, str] | None:
        """The next relaxation in Karpenter's order, with what was relaxed, or None when nothing is left."""
        if len(self.node_terms) > 1:
            return replace(self, node_terms=self.node_terms[1:]), "removed required node affinity term"
        if self.preferred_affinity:
            return replace(
                self, preferred_affinity=self.preferred_affinity[1:]
            ), "removed preferred pod affinity"
        if self.preferred_anti_affinity:
            return (
                replace(self, preferred_anti_affinity=self.preferred_anti_affinity[1:]),
                "removed preferred pod anti-affinity",
            )
        if self.preferred_node_terms:
            return (
                replace(self, preferred_node_terms=self.preferred_node_terms[1:]),
                "removed preferred node affinity",
            )
        for index, constraint in enumerate(self.spread):
            if constraint.when_unsatisfiable == "ScheduleAnyway":
                spread = self.spread[:index] + self.spread[index + 1 :]
                return replace(self, spread=spread), "removed ScheduleAnyway topology spread"
        if prefer_no_schedule_taints_exist and not self.tolerate_prefer_no_schedule:
            return replace(self, tolerate_prefer_no_schedule=True), "tolerated PreferNoSchedule taints"
        return None


@dataclass(slots=True)
class PodInfo:
    """A pending pod compiled once: identity, requests (with `pods: 1`) and its original constraints."""

    pod: Pod
    key: str
    uid: str
    namespace: str
    labels: dict[str, str]
    requests: Resources
    host_ports: tuple[tuple[str, str, int], ...]
    constraints: Constraints
    creation: datetime

    @property
    def cpu(self) -> int:
        return self.requests.get("cpu", 0)

    @property
    def memory(self) -> int:
        return self.requests.get("memory", 0)


def compile_constraints(pod: Pod, respect_preferences: bool = True) -> Constraints:
    """The pod's constraints at relaxation step zero (raises `InvalidPodConstraint`)."""
    spec = pod.spec
    base = _node_selector_requirements(pod)
    affinity = spec.affinity
    node_affinity = affinity.node_affinity if affinity else None
    node_terms: list[Requirements] = []
    preferred_node: list[tuple[int, Requirements]] = []
    if node_affinity is not None:
        required = node_affinity.required_during_scheduling_ignored_during_execution
        if required is not None:
            for index, term in enumerate(required.node_selector_terms):
                where = f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{index}]"
                if term.match_fields:
                    raise InvalidPodConstraint(f"{where}.matchFields: not supported")
                node_terms.append(_term_requirements(base, term.match_expressions or [], where))
        if respect_preferences:
            preferred = node_affinity.preferred_during_scheduling_ignored_during_execution or []
            for index, weighted in enumerate(preferred):
                where = f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{index}].preference"
                if weighted.preference.match_fields:
                    raise InvalidPodConstraint(f"{where}.matchFields: not supported")
                terms = _term_requirements(Requirements(), weighted.preference.match_expressions or [], where)
                preferred_node.append((weighted.weight, terms))
    if not node_terms:
        node_terms.append(base)
    preferred_node.sort(key=lambda pair: -pair[0])

    pod_affinity = affinity.pod_affinity if affinity else None
    pod_anti_affinity = affinity.pod_anti_affinity if affinity else None

    def required_terms(block: object) -> tuple[PodAffinityTerm, ...]:
        terms = getattr(block, "required_during_scheduling_ignored_during_execution", None) if block else None
        return tuple(terms or ())

    def preferred_terms(block: object) -> tuple[tuple[int, PodAffinityTerm], ...]:
        if not respect_preferences or block is None:
            return ()
        weighted = getattr(block, "preferred_during_scheduling_ignored_during_execution", None) or []
        return tuple(sorted(((w.weight, w.pod_affinity_term) for w in weighted), key=lambda pair: -pair[0]))

    spread = tuple(
        constraint
        for constraint in spec.topology_spread_constraints or ()
        if respect_preferences or constraint.when_unsatisfiable != "ScheduleAnyway"
    )
    return Constraints(
        node_terms=tuple(node_terms),
        preferred_node_terms=tuple(preferred_node),
        required_affinity=required_terms(pod_affinity),
        required_anti_affinity=required_terms(pod_anti_affinity),
        preferred_affinity=preferred_terms(pod_affinity),
        preferred_anti_affinity=preferred_terms(pod_anti_affinity),
        spread=spread,
        tolerations=tuple(spec.tolerations or ()),
    )


def compile_bound_pod(pod: Pod) -> PodInfo:
    """A pod already on a node: its requests and labels always count; its constraints only when they compile
    (a bound pod may use what a pending one may not, e.g. a hostname node selector)."""
    try:
        return compile_pod(pod, respect_preferences=False)
    except InvalidPodConstraint:
        return _compiled(
            pod, Constraints((Requirements(),), (), (), (), (), (), (), tuple(pod.spec.tolerations or ()))
        )


class BoundPods:
    """Bound pods compiled once for the simulations of one planner. A planner simulates every few seconds against
    the same thousands of bound pods, which the informer's snapshot hands over as the same parsed objects while
    they are unchanged: those are compiled once, by object identity (a changed pod is a new object, compiled
    anew). A pod no simulation has asked for since the one before the last is forgotten. Thread-safe: plans run
    in threads."""

    def __init__(self) -> None:
        self._current: dict[int, tuple[Pod, PodInfo]] = {}
        self._previous: dict[int, tuple[Pod, PodInfo]] = {}
        self._lock = threading.Lock()

    def begin(self) -> None:
        """A simulation starts: what the last two did not ask for goes."""
        with self._lock:
            self._previous, self._current = self._current, {}

    def compiled(self, pod: Pod) -> PodInfo:
        """`compile_bound_pod(pod)`, from memory when this object was compiled before."""
        key = id(pod)  # the entry holds the pod, so no other object takes its id while it is there
        with self._lock:
            entry = self._current.get(key) or self._previous.get(key)
            if entry is not None and entry[0] is pod:
                self._current[key] = entry
                return entry[1]
        info = compile_bound_pod(pod)
        with self._lock:
            self._current[key] = (pod, info)
        return info


def compile_pod(pod: Pod, respect_preferences: bool = True) -> PodInfo:
    """Compile a pod for scheduling (raises `InvalidPodConstraint` for constraints Karpenter rejects)."""
    return _compiled(pod, compile_constraints(pod, respect_preferences))


def _compiled(pod: Pod, constraints: Constraints) -> PodInfo:
    namespace = pod.metadata.namespace or "default"
    requests = pod_requests(pod)
    requests[PODS] = requests.get(PODS, 0) + 1
    return PodInfo(
        pod=pod,
        key=f"{namespace}/{pod.metadata.name}",
        uid=pod.metadata.uid or f"{namespace}/{pod.metadata.name}",
        namespace=namespace,
        labels=dict(pod.metadata.labels),
        requests=requests,
        host_ports=tuple(pod_host_ports(pod)),
        constraints=constraints,
        creation=(pod.metadata.creation_timestamp or _EPOCH).replace(tzinfo=None),
    )
