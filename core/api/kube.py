"""The Kubernetes objects the scheduler reads: Pod, Node, workloads, DaemonSet and PodDisruptionBudget.

Only the fields that scheduling and disruption look at are modelled; everything else in a manifest (or in
`kubectl get -o yaml` output, with its status and managedFields) is ignored. Attribute names follow the
official Kubernetes Python client, so `pod.spec.topology_spread_constraints[0].max_skew` reads as usual.

Resource quantities stay as written (`"100m"`, `2`, `"1Gi"`) but are checked when a model is built, so a
Pod that exists is a Pod whose requests can be computed. The checks are cached by value: building the
20,000 Pods of a large simulation costs no more than building the models themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainValidator, model_validator

from core.api.meta import KubeModel, NodeSelectorRequirement, ObjectMeta, Taint, TaintEffect
from core.quantity import QuantityError, parse_quantity
from core.resources import CPU, MEMORY, Resources, max_each, merge, parse_resources


@lru_cache(maxsize=4096, typed=True)
def _check_quantity(value: str | int | float) -> None:
    parse_quantity(value)


def _quantity(value: Any) -> str | int | float:
    # YAML turns `cpu: true` into a boolean, which pydantic would quietly read as 1; Kubernetes rejects it.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"quantity {value!r} is not a string or a number")
    try:
        _check_quantity(value)
    except QuantityError as error:
        raise ValueError(str(error)) from None
    return value


Quantity = Annotated[str | int | float, PlainValidator(_quantity)]
"""A Kubernetes quantity as written (`"250m"`, `"1Gi"`, `2`), checked against the quantity grammar."""

ResourceList = dict[str, Quantity]


def _int_or_percent(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isascii() and value[:-1].isdigit():
        return value
    raise ValueError(f'{value!r} is not a non-negative integer or a percentage like "50%"')


IntOrPercent = Annotated[int | str, PlainValidator(_int_or_percent)]
"""A count or a percentage of a count (`3`, `"25%"`), as PodDisruptionBudgets write them."""


# --- label selectors -------------------------------------------------------------------------------------


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: LabelSelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        takes_values = self.operator in (LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN)
        if takes_values and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if not takes_values and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a set of labels satisfies this expression (NotIn holds when the label is absent)."""
        match self.operator:
            case LabelSelectorOperator.IN:
                return self.key in labels and labels[self.key] in self.values
            case LabelSelectorOperator.NOT_IN:
                return self.key not in labels or labels[self.key] not in self.values
            case LabelSelectorOperator.EXISTS:
                return self.key in labels
            case LabelSelectorOperator.DOES_NOT_EXIST:
                return self.key not in labels


class LabelSelector(KubeModel):
    """A label query. An empty selector selects everything.

    Where Kubernetes allows the selector itself to be absent (affinity terms, spread constraints, PDBs), the
    field is `None`, and an absent selector selects nothing: use `selects` there.
    """

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether the labels satisfy every label and every expression of the selector."""
        return all(labels.get(key) == value for key, value in self.match_labels.items()) and all(
            expression.matches(labels) for expression in self.match_expressions
        )


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether an optional selector selects the labels: an absent (null) selector selects nothing."""
    return selector is not None and selector.matches(labels)


# --- affinity --------------------------------------------------------------------------------------------


class NodeSelectorTerm(KubeModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(KubeModel):
    """Terms that are ORed; the requirements inside one term are ANDed."""

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class PreferredSchedulingTerm(KubeModel):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list
    )


class PodAffinityTerm(KubeModel):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = Field(default_factory=list)
    topology_key: str
    namespace_selector: LabelSelector | None = None
    match_label_keys: list[str] = Field(default_factory=list)
    mismatch_label_keys: list[str] = Field(default_factory=list)


class WeightedPodAffinityTerm(KubeModel):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(KubeModel):
    """Pod affinity or anti-affinity: Kubernetes gives both the same shape."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(default_factory=list)
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list
    )


class Affinity(KubeModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# --- tolerations and topology spread ---------------------------------------------------------------------


def _blank_means(default: Any) -> BeforeValidator:
    """Kubernetes reads an empty string in these enum fields as the field being unset."""
    return BeforeValidator(lambda value: default if value == "" else value)


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


class Toleration(KubeModel):
    """An empty key with operator Exists tolerates every taint; an absent effect matches every effect."""

    key: str = ""
    operator: Annotated[TolerationOperator, _blank_means(TolerationOperator.EQUAL)] = TolerationOperator.EQUAL
    value: str = ""
    effect: Annotated[TaintEffect | None, _blank_means(None)] = None
    toleration_seconds: int | None = None


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of the tolerations tolerates the taint (Kubernetes `ToleratesTaint`)."""
    for toleration in tolerations:
        if toleration.effect is not None and toleration.effect != taint.effect:
            continue
        if toleration.key and toleration.key != taint.key:
            continue
        if toleration.operator == TolerationOperator.EXISTS or toleration.value == (taint.value or ""):
            return True
    return False


class UnsatisfiableConstraintAction(StrEnum):
    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class NodeInclusionPolicy(StrEnum):
    HONOR = "Honor"
    IGNORE = "Ignore"


class TopologySpreadConstraint(KubeModel):
    """A spread constraint; the two inclusion policies default to what Kubernetes does when they are unset."""

    max_skew: int = Field(ge=1)
    topology_key: str
    when_unsatisfiable: UnsatisfiableConstraintAction
    label_selector: LabelSelector | None = None
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: NodeInclusionPolicy = NodeInclusionPolicy.HONOR
    node_taints_policy: NodeInclusionPolicy = NodeInclusionPolicy.IGNORE
    match_label_keys: list[str] = Field(default_factory=list)


# --- containers and pods ---------------------------------------------------------------------------------

SIDECAR_RESTART_POLICY = "Always"
"""The restart policy that makes an init container a sidecar, running for the whole life of the pod."""


class ResourceRequirements(KubeModel):
    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)


class ContainerPort(KubeModel):
    container_port: int = Field(ge=1, le=65535)
    host_port: int | None = Field(default=None, ge=0, le=65535)
    protocol: str = "TCP"
    host_ip: str = Field(default="", alias="hostIP")


class Container(KubeModel):
    name: str = ""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = Field(default_factory=list)
    restart_policy: str | None = None


class PodSpec(KubeModel):
    node_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(default_factory=list)
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    overhead: ResourceList = Field(default_factory=dict)
    resources: ResourceRequirements | None = None
    """Pod-level requests and limits (the PodLevelResources feature): CPU, memory and hugepages for the pod as a
    whole, in place of what its containers add up to."""
    priority: int | None = None
    priority_class_name: str | None = None
    scheduler_name: str = "default-scheduler"
    volumes: list[dict[str, Any]] = Field(default_factory=list)


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """A pod or node condition (`Ready`, `PodScheduled`, `MemoryPressure` ...)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None


class PodStatus(KubeModel):
    phase: PodPhase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    nominated_node_name: str | None = None


class Pod(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class PodTemplateSpec(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class PodTemplate(KubeModel):
    """A core/v1 PodTemplate: a pod shape on its own, as a CapacityBuffer's `podTemplateRef` names it."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


# --- nodes -----------------------------------------------------------------------------------------------


class NodeSpec(KubeModel):
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False
    provider_id: str = Field(default="", alias="providerID")


class NodeSystemInfo(KubeModel):
    kubelet_version: str = ""
    kernel_version: str = ""
    os_image: str = ""
    container_runtime_version: str = ""
    operating_system: str = ""
    architecture: str = ""


class NodeStatus(KubeModel):
    capacity: ResourceList = Field(default_factory=dict)
    allocatable: ResourceList = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)
    node_info: NodeSystemInfo = Field(default_factory=NodeSystemInfo)


class Node(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class Secret(KubeModel):
    """A Secret with its `data` base64-decoded, as `ClusterAPI.read_secret` returns it. Its values stay out of every
    log line, error message and workflow payload (`repr` leaves them out)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    type: str = ""
    data: dict[str, str] = Field(default_factory=dict, repr=False)


# --- workloads and disruption budgets --------------------------------------------------------------------


class WorkloadSpec(KubeModel):
    replicas: int = Field(default=1, ge=0)
    selector: LabelSelector | None = None
    template: PodTemplateSpec


class JobSpec(WorkloadSpec):
    """A Job runs `parallelism` pods at once, never more than the `completions` it still needs."""

    parallelism: int = Field(default=1, ge=0)
    completions: int | None = Field(default=None, ge=0)


class Workload(KubeModel):
    """What every pod-owning controller shares: metadata and a pod template."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: WorkloadSpec


class Deployment(Workload):
    """Runs its replicas through a ReplicaSet named after the template."""


class ReplicaSet(Workload):
    """Keeps `replicas` interchangeable pods running."""


class StatefulSet(Workload):
    """Runs `replicas` pods with stable ordinal names."""


class DaemonSet(Workload):
    """Kept as a template: the scheduler decides per node which daemon pods would run there."""


class Job(Workload):
    spec: JobSpec


class UnhealthyPodEvictionPolicy(StrEnum):
    IF_HEALTHY_BUDGET = "IfHealthyBudget"
    ALWAYS_ALLOW = "AlwaysAllow"


class PodDisruptionBudgetSpec(KubeModel):
    """policy/v1: an absent selector selects no pods, an empty one every pod of the namespace."""

    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None
    selector: LabelSelector | None = None
    unhealthy_pod_eviction_policy: UnhealthyPodEvictionPolicy = UnhealthyPodEvictionPolicy.IF_HEALTHY_BUDGET


class PodDisruptionBudget(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodDisruptionBudgetSpec = Field(default_factory=PodDisruptionBudgetSpec)


# --- storage (what a terminating node waits for) ---------------------------------------------------------


class VolumeAttachmentSource(KubeModel):
    persistent_volume_name: str | None = None


class VolumeAttachmentSpec(KubeModel):
    attacher: str = ""
    node_name: str = ""
    source: VolumeAttachmentSource = Field(default_factory=VolumeAttachmentSource)


class VolumeAttachment(KubeModel):
    """`storage.k8s.io/v1` VolumeAttachment: a volume attached to a node, until the attach-detach controller
    detaches it and deletes the object."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: VolumeAttachmentSpec = Field(default_factory=VolumeAttachmentSpec)


class PersistentVolumeClaimSpec(KubeModel):
    volume_name: str | None = None


class PersistentVolumeClaim(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = Field(default_factory=PersistentVolumeClaimSpec)


# --- what the scheduler asks of a pod --------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _parsed(items: tuple[tuple[str, str | int | float], ...]) -> Resources:
    # Shared between callers: read it, never change it.
    return parse_resources(dict(items))


def _container_requests(container: Container) -> Resources:
    """A container's requests, with its limit standing in for each resource it limits but does not request."""
    resources = container.resources
    requests = _parsed(tuple(resources.requests.items()))
    if not resources.limits:
        return requests
    return {**_parsed(tuple(resources.limits.items())), **requests}


HUGEPAGES_PREFIX = "hugepages-"


def is_pod_level_resource(name: str) -> bool:
    """Whether a resource can be set at pod level (`spec.resources`): CPU, memory and hugepages."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _containers_requests(spec: PodSpec) -> Resources:
    """What the containers need together (Kubernetes' `AggregateContainerRequests`).

    App containers and sidecars (init containers with restartPolicy Always) run together for the pod's life;
    each ordinary init container runs alone beside the sidecars declared before it. The pod needs the larger
    of the two.
    """
    running = merge(*(_container_requests(container) for container in spec.containers))
    sidecars: Resources = {}
    initializing: Resources = {}
    for container in spec.init_containers:
        requests = _container_requests(container)
        if container.restart_policy == SIDECAR_RESTART_POLICY:
            sidecars = merge(sidecars, requests)
            running = merge(running, requests)
        else:
            initializing = max_each((initializing, merge(requests, sidecars)))
    return max_each((running, initializing))


def _pod_level_requests(resources: ResourceRequirements, containers: Resources) -> Resources:
    """The pod-level requests after the API server's defaulting: a resource with a pod-level limit and no
    pod-level request is requested at its limit, unless the containers request it (CPU and memory; hugepages
    cannot be overcommitted, so they take the limit)."""
    requests = {
        name: amount
        for name, amount in _parsed(tuple(resources.requests.items())).items()
        if is_pod_level_resource(name)
    }
    for name, limit in _parsed(tuple(resources.limits.items())).items():
        if name in requests or not is_pod_level_resource(name):
            continue
        if name in containers and not name.startswith(HUGEPAGES_PREFIX):
            continue
        requests[name] = limit
    return requests


def pod_requests(pod: Pod) -> Resources:
    """The resources a pod reserves on its node (Kubernetes' `PodRequests`), without the pod itself.

    What the containers need together (`_containers_requests`), except for each resource set at pod level
    (`spec.resources`, CPU, memory and hugepages), whose pod-level request is the pod's; plus its runtime
    overhead. The scheduler adds `pods: 1` itself.
    """
    spec = pod.spec
    needed = _containers_requests(spec)
    if spec.resources is not None and (spec.resources.requests or spec.resources.limits):
        needed = {**needed, **_pod_level_requests(spec.resources, needed)}
    return merge(needed, _parsed(tuple(spec.overhead.items()))) if spec.overhead else needed


UNSPECIFIED_HOST_IP = "0.0.0.0"


def pod_host_ports(pod: Pod) -> list[tuple[str, str, int]]:
    """The `(host IP, protocol, port)` triples a pod occupies on its node.

    Sidecars hold their ports for the pod's whole life, so they count as kube-scheduler counts them; ordinary
    init containers have exited before the app starts. An unset host IP means every address.
    """
    running = [c for c in pod.spec.init_containers if c.restart_policy == SIDECAR_RESTART_POLICY]
    running.extend(pod.spec.containers)
    return [
        (port.host_ip or UNSPECIFIED_HOST_IP, port.protocol or "TCP", host_port)
        for container in running
        for port in container.ports
        if (host_port := port.host_port)
    ]


def owner_kind(pod: Pod) -> str:
    """The kind of the pod's controller (`ReplicaSet`, `DaemonSet`, `Node` for static pods), or "" if none.

    A controller reference wins; manifests written by hand sometimes omit `controller: true`, so the first
    owner stands in for it.
    """
    owners = pod.metadata.owner_references
    for owner in owners:
        if owner.controller:
            return owner.kind
    return owners[0].kind if owners else ""


def is_daemonset_pod(pod: Pod) -> bool:
    """Whether a DaemonSet runs this pod (it follows its node rather than being scheduled onto one)."""
    return owner_kind(pod) == "DaemonSet"


def _condition_true(conditions: list[Condition], kind: str) -> bool:
    return any(condition.type == kind and condition.status == "True" for condition in conditions)


def is_pod_ready(pod: Pod) -> bool:
    """Whether the pod's Ready condition is True."""
    return _condition_true(pod.status.conditions, "Ready")


def is_node_ready(node: Node) -> bool:
    """Whether the node's Ready condition is True."""
    return _condition_true(node.status.conditions, "Ready")


def is_terminal(pod: Pod) -> bool:
    """Whether the pod has finished (Succeeded or Failed) and holds no resources any more."""
    return pod.status.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)


def is_pending(pod: Pod) -> bool:
    """Whether the pod still waits for a node: not bound and not finished."""
    return not pod.spec.node_name and not is_terminal(pod)


DEFAULT_NAMESPACE = "default"


def pod_key(pod: Pod) -> str:
    """`namespace/name`, the pod's identity in the cluster (an unset namespace is "default")."""
    return f"{pod.metadata.namespace or DEFAULT_NAMESPACE}/{pod.metadata.name}"


# --- events ----------------------------------------------------------------------------------------------


class ObjectReference(KubeModel):
    api_version: str | None = None
    kind: str = ""
    name: str = ""
    namespace: str | None = None
    uid: str | None = None


class EventSource(KubeModel):
    component: str = ""


class Event(KubeModel):
    """A core/v1 Event: what happened to an object, with Karpenter's reasons (Nominated, FailedScheduling, ...)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    involved_object: ObjectReference
    reason: str
    message: str = ""
    type: str = "Normal"
    count: int = 1
    source: EventSource = Field(default_factory=lambda: EventSource(component="karpenter"))
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
