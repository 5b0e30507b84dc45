"""NodePool (`karpenter.sh/v1`) and the NodeClaim template pieces NodeClaims share with it.

A NodePool says which nodes may be launched (requirements with minValues, labels, taints, the NodeClass) and
how they may be disrupted (consolidation policy, budgets, expiry). Parsing a manifest enforces every rule of
Karpenter's CRD schema, its CEL expressions and its admission checks, and reports every broken rule of the
object at once, each as "<field path>: <rule>", so a bad NodePool is rejected the way `kubectl apply` would
reject it and never reaches the scheduler.

The shared pieces (requirements, taints, nodeClassRef, durations, status conditions) live here because the
NodePool defines them first; `core.api.nodeclaim` and `core.api.aksnodeclass` import them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from core import labels
from core.api.kube import ResourceList
from core.api.meta import (
    InvalidObjectError,
    NodeSelectorOperator,
    ObjectMeta,
    StrictKubeModel,
    Taint,
    object_name,
    problems_of,
)
from core.cron import CronError, Schedule, as_utc
from core.resources import NODES, Resources, parse_resources
from core.scheduling.requirements import Requirement, Requirements

# --- reporting every broken rule ------------------------------------------------------------------------

Location = tuple[str | int, ...]
"""Where a rule is broken, relative to the model that checks it, in the manifest's (camelCase) names."""

Problem = tuple[Location, str]

_Model = TypeVar("_Model", bound=BaseModel)


def raise_problems(model: str, problems: Sequence[Problem]) -> None:
    """Raise all `problems` of a model at once, each at its own location.

    Called from a model validator: pydantic nests the locations under the model's own, so the final error
    names the full field path of each problem, and sibling objects keep being checked.
    """
    if problems:
        raise ValidationError.from_exception_data(
            model,
            [
                InitErrorDetails(
                    type=PydanticCustomError("rule", "{rule}", {"rule": rule}), loc=loc, input=None
                )
                for loc, rule in problems
            ],
        )


def parse_manifest(model: type[_Model], kind: str, raw: Mapping[str, Any]) -> _Model:
    """Validate a manifest; on failure raise `InvalidObjectError` listing every problem and its field path."""
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise InvalidObjectError(kind, object_name(raw), problems_of(error)) from None


# --- label keys and values -----------------------------------------------------------------------------

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
_MAX_LABELS = 100

# Outside these exceptions the CRD keeps the kubernetes.io and k8s.io domains for Kubernetes itself.
_KUBERNETES_KEYS = frozenset({labels.ARCH, labels.OS, labels.ZONE, labels.REGION, labels.WINDOWS_BUILD})
_KUBERNETES_SUBDOMAINS = ("node.kubernetes.io", "node-restriction.kubernetes.io")
_NODECLASS_LABEL = "karpenter.azure.com/aksnodeclass"
"""The label Karpenter puts on nodes naming their AKSNodeClass; the Azure CRD lets NodePools use it."""

_BOUND_OPERATORS = frozenset(
    {NodeSelectorOperator.GT, NodeSelectorOperator.LT, NodeSelectorOperator.GTE, NodeSelectorOperator.LTE}
)
_VALUELESS_OPERATORS = frozenset({NodeSelectorOperator.EXISTS, NodeSelectorOperator.DOES_NOT_EXIST})
_NON_NEGATIVE_INTEGER = re.compile(r"\+?[0-9]+")
_CLOSED_VALUES: dict[str, frozenset[str]] = {labels.CAPACITY_TYPE: frozenset(labels.CAPACITY_TYPES)}
"""Well-known keys whose values Karpenter knows in advance: an `In` requirement must keep one of them."""


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes qualified name (`[prefix/]name`), or None when it is."""
    parts = key.split("/")
    if len(parts) > 2:
        return f'"{key}" is not a valid label key: it has more than one "/"'
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return (
                f'"{key}" is not a valid label key: the prefix must be a lowercase DNS subdomain '
                "of at most 253 characters (e.g. example.com)"
            )
    if not name:
        return f'"{key}" is not a valid label key: the name part must not be empty'
    if len(name) > 63:
        return f'"{key}" is not a valid label key: the name part must be 63 characters or less'
    if not _LABEL_NAME.fullmatch(name):
        return f'"{key}" is not a valid label key: the name part must consist of {_NAME_RULE}'
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value (empty is valid), or None when it is."""
    if len(value) > 63:
        return f'"{value}" is not a valid label value: it must be 63 characters or less'
    if value and not _LABEL_NAME.fullmatch(value):
        return f'"{value}" is not a valid label value: it must be empty or consist of {_NAME_RULE}'
    return None


def _in_domain(domain: str, parent: str) -> bool:
    return domain == parent or domain.endswith("." + parent)


def restricted_label_problem(key: str) -> str | None:
    """Why a NodePool or NodeClaim may not use `key`, or None when it may.

    `karpenter.sh/nodepool` is allowed here: NodeClaims carry it, and only NodePool templates forbid it.
    """
    key = labels.normalize_key(key)
    if key == labels.NODEPOOL:
        return None
    if labels.is_restricted_nodepool_label(key):
        return f'label "{key}" is restricted'
    domain = labels.label_domain(key)
    if (
        _in_domain(domain, "kubernetes.io")
        and key not in _KUBERNETES_KEYS
        and not any(_in_domain(domain, allowed) for allowed in _KUBERNETES_SUBDOMAINS)
    ):
        return 'label domain "kubernetes.io" is restricted'
    if _in_domain(domain, "k8s.io") and not _in_domain(domain, "kops.k8s.io"):
        return 'label domain "k8s.io" is restricted'
    if _in_domain(domain, labels.AZURE_DOMAIN) and key not in labels.WELL_KNOWN_LABELS | {_NODECLASS_LABEL}:
        return f'label domain "{labels.AZURE_DOMAIN}" is restricted'
    return None


def _nodepool_key_problem(key: str) -> str | None:
    if labels.normalize_key(key) == labels.NODEPOOL:
        return f'label "{labels.NODEPOOL}" is restricted (Karpenter sets it to the NodePool name)'
    return None


# --- durations --------------------------------------------------------------------------------------------

NEVER = "Never"
"""The value of `expireAfter` and `consolidateAfter` that turns the behaviour off."""

_DURATION = re.compile(r"(?:[0-9]+[hms])+")
_DURATION_PART = re.compile(r"([0-9]+)([hms])")
_BUDGET_DURATION = re.compile(r"(?:[0-9]+[hm]|[0-9]+h[0-9]+m)(?:0s)?")
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}
_MAX_SECONDS = (2**63 - 1) // 10**9
"""Go durations are 64-bit nanosecond counts: about 292 years."""


def duration_timedelta(text: str) -> timedelta | None:
    """A duration as Karpenter writes it ("720h", "1h30m", "90s") as a timedelta; None for "Never".

    Raises ValueError for anything else; models only hold strings that pass.
    """
    if text == NEVER:
        return None
    if not _DURATION.fullmatch(text):
        raise ValueError(
            f'"{text}" is not a duration of hours, minutes and seconds such as "720h" or "1h30m"'
        )
    seconds = sum(int(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(text))
    if seconds > _MAX_SECONDS:
        raise ValueError(f'"{text}" is longer than the longest duration Kubernetes accepts (about 292 years)')
    return timedelta(seconds=seconds)


def _duration(text: str) -> str:
    if text == NEVER:
        raise ValueError(f'"{NEVER}" is not allowed here; give a duration such as "48h"')
    duration_timedelta(text)
    return text


def _nillable_duration(text: str) -> str:
    if text != NEVER and not _DURATION.fullmatch(text):
        raise ValueError(f'"{text}" is not a duration such as "720h" or "1h30m", nor "{NEVER}"')
    duration_timedelta(text)
    return text


def _budget_duration(text: str) -> str:
    if not _BUDGET_DURATION.fullmatch(text):
        raise ValueError(f'"{text}" is not a duration in hours and minutes such as "8h", "30m" or "1h30m"')
    duration_timedelta(text)
    return text


Duration = Annotated[str, AfterValidator(_duration)]
"""Hours, minutes and seconds ("48h", "1h30m"); `duration_timedelta` reads it."""

NillableDuration = Annotated[str, AfterValidator(_nillable_duration)]
"""A `Duration` or "Never"."""

BudgetDuration = Annotated[str, AfterValidator(_budget_duration)]
"""Hours and minutes only, since cron schedules fire on whole minutes."""


# --- status conditions --------------------------------------------------------------------------------


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class StatusCondition(StrictKubeModel):
    """One entry of `status.conditions` on a Karpenter object."""

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class ConditionedStatus(StrictKubeModel):
    """A status with conditions, and the two questions everyone asks of them."""

    conditions: list[StatusCondition] = Field(default_factory=list)

    def condition(self, condition_type: str) -> StatusCondition | None:
        """The condition of this type, or None when it was never set."""
        return next((condition for condition in self.conditions if condition.type == condition_type), None)

    def is_true(self, condition_type: str) -> bool:
        """Whether the condition of this type is set and True."""
        condition = self.condition(condition_type)
        return condition is not None and condition.status is ConditionStatus.TRUE


# --- the NodeClaim template -------------------------------------------------------------------------


class NodeSelectorRequirementWithMinValues(StrictKubeModel):
    """A node-selector requirement, optionally asking for at least `minValues` distinct values of its key."""

    key: str = Field(max_length=316)
    operator: NodeSelectorOperator
    values: list[str] = Field(default_factory=list)
    min_values: int | None = Field(default=None, ge=1, le=50)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        raise_problems("requirement", self._rule_problems())
        return self

    def _rule_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        key_problem = label_key_problem(self.key) or restricted_label_problem(self.key)
        if key_problem:
            problems.append((("key",), key_problem))
        operator, values, min_values = self.operator, self.values, self.min_values
        if operator in _BOUND_OPERATORS:
            if len(values) != 1 or not _NON_NEGATIVE_INTEGER.fullmatch(values[0]):
                rule = f"operator {operator} needs exactly one non-negative integer value, got {values}"
                problems.append((("values",), rule))
        else:
            problems.extend(
                (("values", index), problem)
                for index, value in enumerate(values)
                if (problem := label_value_problem(value))
            )
        if operator is NodeSelectorOperator.IN and not values:
            problems.append((("values",), "operator In needs at least one value"))
        if operator in _VALUELESS_OPERATORS and values:
            problems.append((("values",), f"operator {operator} takes no values, got {values}"))
        if operator is NodeSelectorOperator.IN and min_values is not None and min_values > len(values):
            problems.append((("minValues",), f"({min_values}) exceeds the number of values ({len(values)})"))
        problems.extend(self._closed_value_problems())
        return problems

    def _closed_value_problems(self) -> list[Problem]:
        key = labels.normalize_key(self.key)
        known = _CLOSED_VALUES.get(key)
        if known is None or self.operator is not NodeSelectorOperator.IN or not self.values:
            return []
        valid = [value for value in self.values if value in known]
        expected = ", ".join(sorted(known))
        if not valid:
            return [(("values",), f"no valid value for {key} in {self.values}: expected one of {expected}")]
        if self.min_values is not None and len(valid) < self.min_values:
            rule = (
                f"{self.min_values} exceeds the number of valid values ({len(valid)}); {key} takes {expected}"
            )
            return [(("minValues",), rule)]
        return []

    def to_requirement(self) -> Requirement:
        """This requirement in the scheduler's algebra (deprecated beta keys become their current names)."""
        return Requirement.new(self.key, self.operator, self.values, self.min_values)


SUPPORTED_NODECLASS = ("karpenter.azure.com", "AKSNodeClass")
"""The group and kind of the one NodeClass this provider launches with (Karpenter's `GetSupportedNodeClasses`)."""


def is_managed_reference(reference: Any) -> bool:
    """Whether a nodeClassRef (a model or the raw mapping) names the supported NodeClass. A NodePool or NodeClaim
    naming another is another provider's: Karpenter leaves it alone (`IsManaged`), neither provisioning, disrupting
    nor scaling it, nor writing its status, and says nothing of it."""
    if isinstance(reference, NodeClassReference):
        return (reference.group, reference.kind) == SUPPORTED_NODECLASS
    if not isinstance(reference, Mapping):
        return False
    return (reference.get("group"), reference.get("kind")) == SUPPORTED_NODECLASS


def is_managed_manifest(manifest: Mapping[str, Any]) -> bool:
    """`is_managed_reference` of a NodePool's or NodeClaim's manifest, as read from the API server."""
    spec = manifest.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if manifest.get("kind") == "NodePool" or "template" in spec:
        template = spec.get("template")
        spec = template.get("spec") if isinstance(template, Mapping) else None
        spec = spec if isinstance(spec, Mapping) else {}
    return is_managed_reference(spec.get("nodeClassRef"))


class NodeClassReference(StrictKubeModel):
    """The provider NodeClass a NodeClaim launches with, e.g. karpenter.azure.com / AKSNodeClass / default."""

    group: str
    kind: str
    name: str

    @property
    def is_managed(self) -> bool:
        """Whether this is the NodeClass this provider launches with (`is_managed_reference`)."""
        return is_managed_reference(self)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = [
            ((field,), f"{field} may not be empty")
            for field in ("group", "kind", "name")
            if not getattr(self, field)
        ]
        if "/" in self.group:
            problems.append((("group",), f'"{self.group}" is an API group and may not contain "/"'))
        raise_problems("nodeClassRef", problems)
        return self


class NodeClaimSpecFields(StrictKubeModel):
    """What a NodePool template and a NodeClaim both specify."""

    taints: list[Taint] = Field(default_factory=list)
    startup_taints: list[Taint] = Field(default_factory=list)
    requirements: list[NodeSelectorRequirementWithMinValues] = Field(max_length=100)
    node_class_ref: NodeClassReference
    termination_grace_period: Duration | None = None
    expire_after: NillableDuration = "720h"

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        raise_problems(type(self).__name__, self._rule_problems())
        return self

    def _rule_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        seen: set[tuple[str, str]] = set()
        for field, taints in (("taints", self.taints), ("startupTaints", self.startup_taints)):
            for index, taint in enumerate(taints):
                if key_problem := label_key_problem(taint.key):
                    problems.append(((field, index, "key"), key_problem))
                if taint.value and (value_problem := label_value_problem(taint.value)):
                    problems.append(((field, index, "value"), value_problem))
                if (taint.key, taint.effect) in seen:
                    problems.append(
                        (
                            (field, index),
                            f"duplicate taint {taint.key}:{taint.effect} across taints and startupTaints",
                        )
                    )
                seen.add((taint.key, taint.effect))
        return problems

    @property
    def expire_after_duration(self) -> timedelta | None:
        """How long a node may live before it is replaced; None when it never expires."""
        return duration_timedelta(self.expire_after)

    @property
    def termination_grace_period_duration(self) -> timedelta | None:
        """How long draining may take before pods are deleted regardless; None to wait forever."""
        return (
            None
            if self.termination_grace_period is None
            else duration_timedelta(self.termination_grace_period)
        )

    def requirement_set(self) -> Requirements:
        """The requirements field in the scheduler's algebra (keys normalized, same keys intersected)."""
        return Requirements(requirement.to_requirement() for requirement in self.requirements)


class NodeClaimTemplateSpec(NodeClaimSpecFields):
    """The NodeClaim spec a NodePool stamps out; unlike a NodeClaim it may not pin `karpenter.sh/nodepool`."""

    def _rule_problems(self) -> list[Problem]:
        problems = super()._rule_problems()
        problems.extend(
            (("requirements", index, "key"), problem)
            for index, requirement in enumerate(self.requirements)
            if (problem := _nodepool_key_problem(requirement.key))
        )
        return problems


class TemplateMetadata(StrictKubeModel):
    """Labels and annotations copied onto every NodeClaim and Node of the pool."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if len(self.labels) > _MAX_LABELS:
            problems.append(
                (("labels",), f"at most {_MAX_LABELS} labels are allowed, got {len(self.labels)}")
            )
        for key, value in self.labels.items():
            key_problem = (
                label_key_problem(key) or _nodepool_key_problem(key) or restricted_label_problem(key)
            )
            if key_problem:
                problems.append((("labels",), key_problem))
            if value_problem := label_value_problem(value):
                problems.append((("labels",), f"label {key}: {value_problem}"))
        raise_problems("metadata", problems)
        return self


class NodeClaimTemplate(StrictKubeModel):
    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: NodeClaimTemplateSpec


# --- disruption -------------------------------------------------------------------------------------------


class ConsolidationPolicy(StrEnum):
    WHEN_EMPTY = "WhenEmpty"
    WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
    BALANCED = "Balanced"


class DisruptionReason(StrEnum):
    """Why a node is voluntarily disrupted; budgets may be limited to some reasons."""

    UNDERUTILIZED = "Underutilized"
    EMPTY = "Empty"
    DRIFTED = "Drifted"


_BUDGET_NODES = re.compile(r"(?:100|[0-9]{1,2})%|[0-9]+")


class Budget(StrictKubeModel):
    """At most `nodes` of the pool may be disrupting at once, while the budget is active.

    Without a schedule the budget is always active; with one, it is active for `duration` after each time
    the schedule fires (UTC).
    """

    reasons: list[DisruptionReason] | None = Field(default=None, max_length=50)
    nodes: str = "10%"
    schedule: str | None = None
    duration: BudgetDuration | None = None

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if not _BUDGET_NODES.fullmatch(self.nodes):
            problems.append(
                (("nodes",), f'"{self.nodes}" is neither a node count nor a percentage from 0% to 100%')
            )
        if self.schedule is not None:
            try:
                schedule = Schedule.parse(self.schedule)
            except CronError as error:
                problems.append((("schedule",), str(error)))
            else:
                if not schedule.fires():
                    problems.append((("schedule",), f'"{self.schedule}" never fires: no such date exists'))
        if (self.schedule is None) != (self.duration is None):
            problems.append(((), "schedule and duration must be set together"))
        if self.reasons is not None:
            duplicates = sorted({reason for reason in self.reasons if self.reasons.count(reason) > 1})
            if duplicates:
                problems.append((("reasons",), f"duplicate reasons: {', '.join(duplicates)}"))
        raise_problems("budget", problems)
        return self

    @property
    def window(self) -> timedelta | None:
        """How long the budget stays active after each time its schedule fires; None without a schedule."""
        return None if self.duration is None else duration_timedelta(self.duration)

    def cron(self) -> Schedule | None:
        """The parsed schedule, or None for an always-active budget."""
        return None if self.schedule is None else Schedule.parse(self.schedule)

    def is_active(self, now: datetime) -> bool:
        """Whether the schedule fired within the last `duration` (the window includes its last minute)."""
        schedule, window = self.cron(), self.window
        if schedule is None or window is None:
            return True
        hit = schedule.next_after(as_utc(now) - window)
        return hit is not None and hit <= as_utc(now)

    def applies_to(self, reason: DisruptionReason) -> bool:
        """Whether this budget limits disruptions for `reason` (a budget without reasons limits all)."""
        return not self.reasons or reason in self.reasons

    def node_limit(self, total_nodes: int) -> int:
        """`nodes` as a count: the number itself, or the percentage of `total_nodes` rounded up."""
        if self.nodes.endswith("%"):
            return -(-int(self.nodes[:-1]) * total_nodes // 100)
        return int(self.nodes)

    def allowed_disruptions(self, now: datetime, total_nodes: int) -> int | None:
        """How many of `total_nodes` may be disrupting at `now`; None when the budget is inactive."""
        return self.node_limit(total_nodes) if self.is_active(now) else None


class Disruption(StrictKubeModel):
    consolidate_after: NillableDuration = "0s"
    consolidation_policy: ConsolidationPolicy = ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    budgets: list[Budget] = Field(default_factory=lambda: [Budget()], max_length=50)

    @property
    def consolidate_after_duration(self) -> timedelta | None:
        """The quiet time after a pod event before a node may be consolidated; None disables consolidation."""
        return duration_timedelta(self.consolidate_after)


# --- the NodePool ------------------------------------------------------------------------------------------


class NodePoolConditionType(StrEnum):
    READY = "Ready"
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    NODE_CLASS_READY = "NodeClassReady"
    NODE_REGISTRATION_HEALTHY = "NodeRegistrationHealthy"


class NodePoolSpec(StrictKubeModel):
    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: ResourceList | None = None
    weight: int | None = Field(default=None, ge=1, le=100)
    replicas: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if self.replicas is not None:
            if self.weight is not None:
                problems.append(
                    (("weight",), "weight is not supported on static NodePools (replicas is set)")
                )
            if set(self.limits or {}) - {NODES}:
                problems.append(
                    (("limits",), "only limits.nodes is supported on static NodePools (replicas is set)")
                )
        raise_problems("spec", problems)
        return self


class NodePoolStatus(ConditionedStatus):
    resources: ResourceList = Field(default_factory=dict)
    nodes: int | None = None
    node_class_observed_generation: int | None = None


class NodePool(StrictKubeModel):
    """A `karpenter.sh/v1` NodePool; build one with `NodePool.parse(manifest)`."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodePool"] = "NodePool"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodePoolSpec
    status: NodePoolStatus = Field(default_factory=NodePoolStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest; raises `InvalidObjectError` naming every broken rule with its field path."""
        return parse_manifest(cls, "NodePool", raw)

    @property
    def name(self) -> str:
        """The NodePool's name (`metadata.name`)."""
        return self.metadata.name

    @property
    def taints(self) -> list[Taint]:
        """Taints every node of the pool gets; pods must tolerate them."""
        return self.spec.template.spec.taints

    @property
    def startup_taints(self) -> list[Taint]:
        """Taints removed by some agent after start; pods need not tolerate them."""
        return self.spec.template.spec.startup_taints

    @property
    def weight_or_zero(self) -> int:
        """The scheduling priority; a pool without a weight counts as 0."""
        return self.spec.weight or 0

    @property
    def node_class_ref(self) -> NodeClassReference:
        """The NodeClass its nodes are built from."""
        return self.spec.template.spec.node_class_ref

    @property
    def is_static(self) -> bool:
        """Whether the pool keeps a fixed node count (`replicas`) instead of following pending pods."""
        return self.spec.replicas is not None

    @property
    def resource_limits(self) -> Resources:
        """`spec.limits` as integers (cpu in millicores); empty when the pool has no limits."""
        return parse_resources(self.spec.limits)

    def requirements(self) -> Requirements:
        """What every node of the pool satisfies, as the scheduler reads it.

        Template labels (and `karpenter.sh/nodepool` set to the pool's name, which Karpenter labels every
        NodeClaim with) become `In` requirements, intersected with the template's requirements.
        """
        pool_labels = dict(self.spec.template.metadata.labels)
        if self.name:
            pool_labels[labels.NODEPOOL] = self.name
        requirements = Requirements.from_labels(pool_labels)
        requirements.add(*self.spec.template.spec.requirement_set())
        return requirements

    def allowed_disruptions(self, reason: DisruptionReason, now: datetime, total_nodes: int) -> int | None:
        """The most restrictive active budget for `reason` over `total_nodes`; None when none limits it.

        This is the budget value; the caller subtracts the nodes already disrupting.
        """
        limits = [
            allowed
            for budget in self.spec.disruption.budgets
            if budget.applies_to(reason)
            and (allowed := budget.allowed_disruptions(now, total_nodes)) is not None
        ]
        return min(limits, default=None)

    def validate_update(self, old: NodePool) -> None:
        """Raise `InvalidObjectError` if replacing `old` with this NodePool changes what may not change."""
        problems = []
        new_ref, old_ref = self.spec.template.spec.node_class_ref, old.spec.template.spec.node_class_ref
        for field in ("group", "kind"):
            if getattr(new_ref, field) != getattr(old_ref, field):
                problems.append(
                    f"spec.template.spec.nodeClassRef.{field}: is immutable"
                    f" (was {getattr(old_ref, field)!r}, now {getattr(new_ref, field)!r})"
                )
        if self.is_static != old.is_static:
            problems.append(
                "spec.replicas: a NodePool cannot switch between static (replicas set) and dynamic pools"
            )
        if problems:
            raise InvalidObjectError("NodePool", self.name, problems)
