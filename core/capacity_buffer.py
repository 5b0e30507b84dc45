"""Karpenter's CapacityBuffer rules: what a buffer resolves to, how many chunks it keeps, its virtual pods.

The buffer controller resolves a buffer's pod template (from its PodTemplate, or from the Deployment,
StatefulSet or ReplicaSet it scales with) and counts its chunks: for `podTemplateRef`, `replicas`, or as many as
fit in `limits`, the smaller of the two; for `scalableRef`, the larger of `replicas` and `percentage` of the
target's replicas (rounded up, at least one), capped by `limits`. It writes them to the status with the
`ReadyForProvisioning` condition. The provisioner then adds one virtual pod per chunk to the pending pods, shaped
by the template and marked with the buffer's annotations, and writes the `Provisioning` condition from where
they went: all on existing capacity (FitsExistingCapacity) or some needing new capacity (RequiresNewCapacity).
Virtual pods are scheduled like real ones but never nominated and never get events; a node that holds some is
not empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from core.api.capacitybuffer import ACTIVE_CAPACITY, SCALABLE_GROUP, SCALABLE_KINDS, CapacityBuffer
from core.api.kube import (
    Condition,
    Pod,
    PodSpec,
    PodStatus,
    PodTemplate,
    PodTemplateSpec,
    Workload,
    pod_key,
    pod_requests,
)
from core.api.meta import ObjectMeta
from core.api.nodepool import StatusCondition
from core.quantity import QuantityError
from core.resources import parse_resources

FAKE_POD_ANNOTATION = "karpenter.sh/capacity-buffer-fake-pod"
"""On every virtual pod, "true"."""
BUFFER_NAME_ANNOTATION = "karpenter.sh/capacity-buffer-name"
BUFFER_NAMESPACE_ANNOTATION = "karpenter.sh/capacity-buffer-namespace"
VIRTUAL_POD_PRIORITY = -(2**31)
"""The lowest priority there is: a virtual pod is worth less than any real one."""

READY_FOR_PROVISIONING = "ReadyForProvisioning"
PROVISIONING = "Provisioning"
MAX_CHUNKS = 2**31 - 1


class Reason(StrEnum):
    """Karpenter's reasons on the two conditions."""

    RESOLVED = "Resolved"
    POD_TEMPLATE_NOT_FOUND = "PodTemplateNotFound"
    SCALABLE_REF_NOT_FOUND = "ScalableRefNotFound"
    RESOLUTION_FAILED = "ResolutionFailed"
    FITS_EXISTING_CAPACITY = "FitsExistingCapacity"
    REQUIRES_NEW_CAPACITY = "RequiresNewCapacity"
    NOT_READY_FOR_PROVISIONING = "NotReadyForProvisioning"
    BUFFER_EMPTY = "BufferEmpty"


Target = tuple[str, str, str]
"""(kind, namespace, name) of an object a buffer reads: a PodTemplate, Deployment, StatefulSet or ReplicaSet."""


def target_of(buffer: CapacityBuffer) -> Target | None:
    """The object the buffer's template comes from, or None when it names none nodewright can read."""
    spec = buffer.spec
    if spec.pod_template_ref is not None:
        return ("PodTemplate", buffer.namespace, spec.pod_template_ref.name)
    ref = spec.scalable_ref
    if ref is not None and ref.group == SCALABLE_GROUP and ref.kind in SCALABLE_KINDS:
        return (ref.kind, buffer.namespace, ref.name)
    return None


@dataclass(frozen=True, slots=True)
class Targets:
    """The objects buffers may read, by `Target`."""

    pod_templates: Mapping[tuple[str, str], PodTemplate]
    workloads: Mapping[Target, Workload]

    @classmethod
    def of(cls, pod_templates: Iterable[PodTemplate], workloads: Iterable[tuple[str, Workload]]) -> Targets:
        """From PodTemplates and (kind, workload) pairs, namespaces defaulted."""
        return cls(
            {(t.metadata.namespace or "default", t.metadata.name): t for t in pod_templates},
            {(kind, w.metadata.namespace or "default", w.metadata.name): w for kind, w in workloads},
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the buffer controller makes of a buffer: its template and chunks, or why it has none."""

    ready: bool
    reason: Reason
    message: str
    template: PodTemplateSpec | None = None
    replicas: int | None = None
    """Chunks (None when not resolved: the status keeps what it had)."""
    pod_template: str | None = None
    pod_template_generation: int | None = None
    field: str | None = None
    """The field at fault when not ready, for the event that says so."""


def limit_replicas(limits: Mapping[str, Any], requests: Mapping[str, int]) -> int | None:
    """How many chunks of `requests` fit in `limits`: the smallest floor(limit / request) over the resources
    both name with a request above zero, or None when no such resource limits them."""
    bounded = parse_resources(limits)
    counts = [bounded[name] // amount for name, amount in requests.items() if amount > 0 and name in bounded]
    return min(min(counts), MAX_CHUNKS) if counts else None


def percentage_replicas(scalable_replicas: int, percentage: int) -> int:
    """ceil(replicas * percentage / 100), at least one when both are above zero."""
    chunks = -(-scalable_replicas * percentage // 100)
    return max(chunks, 1) if scalable_replicas > 0 and percentage > 0 else chunks


def chunk_count(buffer: CapacityBuffer, requests: Mapping[str, int], scalable_replicas: int | None) -> int:
    """The chunks a buffer keeps: the larger of `replicas` and the percentage of the scalable target's
    replicas (for a `scalableRef` with some), capped by what fits in `limits`; `limits` alone when neither is
    set; zero when nothing says how many."""
    spec = buffer.spec
    wanted = [spec.replicas] if spec.replicas is not None else []
    if spec.percentage is not None and scalable_replicas:
        wanted.append(percentage_replicas(scalable_replicas, spec.percentage))
    fit = limit_replicas(spec.limits, requests) if spec.limits else None
    if fit is None:
        return max(wanted, default=0)
    return min(max(wanted), fit) if wanted else fit


def _failed(reason: Reason, message: str, field: str) -> Resolution:
    return Resolution(False, reason, message, field=field)


def resolve(buffer: CapacityBuffer, targets: Targets) -> Resolution:
    """The buffer's template and chunk count from the objects it names, or the reason it has none."""
    spec = buffer.spec
    if spec.provisioning_strategy != ACTIVE_CAPACITY:
        return _failed(
            Reason.RESOLUTION_FAILED,
            f"provisioningStrategy {spec.provisioning_strategy!r} is not supported; "
            f"only {ACTIVE_CAPACITY} is provisioned",
            "spec.provisioningStrategy",
        )
    if spec.pod_template_ref is None and spec.scalable_ref is None:
        return _failed(
            Reason.RESOLUTION_FAILED, "Neither podTemplateRef nor scalableRef is set", "spec.podTemplateRef"
        )
    if spec.pod_template_ref is not None:
        name = spec.pod_template_ref.name
        template = targets.pod_templates.get((buffer.namespace, name))
        if template is None:
            return _failed(
                Reason.POD_TEMPLATE_NOT_FOUND,
                f'podtemplates "{name}" not found',
                "spec.podTemplateRef.name",
            )
        return _resolved(buffer, template.template, None, name, template.metadata.generation or 0)
    ref = spec.scalable_ref
    assert ref is not None
    if ref.group != SCALABLE_GROUP:
        return _failed(
            Reason.RESOLUTION_FAILED,
            f"unsupported scalableRef API group {ref.api_group!r}",
            "spec.scalableRef.apiGroup",
        )
    if ref.kind not in SCALABLE_KINDS:
        return _failed(
            Reason.RESOLUTION_FAILED,
            f"unsupported kind {ref.kind!r} (one of {', '.join(SCALABLE_KINDS)})",
            "spec.scalableRef.kind",
        )
    workload = targets.workloads.get((ref.kind, buffer.namespace, ref.name))
    if workload is None:
        plural = ref.kind.lower() + "s"
        return _failed(
            Reason.SCALABLE_REF_NOT_FOUND,
            f'{plural}.apps "{ref.name}" not found',
            "spec.scalableRef.name",
        )
    return _resolved(buffer, workload.spec.template, workload.spec.replicas, None, None)


def _resolved(
    buffer: CapacityBuffer,
    template: PodTemplateSpec,
    scalable_replicas: int | None,
    pod_template: str | None,
    generation: int | None,
) -> Resolution:
    try:
        requests = pod_requests(Pod(spec=template.spec))
        replicas = chunk_count(buffer, requests, scalable_replicas)
    except QuantityError as error:
        return _failed(Reason.RESOLUTION_FAILED, f"limits: {error}", "spec.limits")
    return Resolution(
        True,
        Reason.RESOLVED,
        "Pod template resolved successfully",
        template=template,
        replicas=replicas,
        pod_template=pod_template,
        pod_template_generation=generation,
    )


def set_condition(
    conditions: Sequence[StatusCondition],
    condition_type: str,
    status: bool,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The conditions (as JSON) with one set: its lastTransitionTime moves only when its status changes."""
    value = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for condition in conditions:
        entry = condition.model_dump(mode="json", by_alias=True, exclude_none=True)
        if condition.type == condition_type:
            found = True
            same = condition.status.value == value and condition.last_transition_time is not None
            entry.update(status=value, reason=reason, message=message)
            if generation is not None:
                entry["observedGeneration"] = generation
            if not same:
                entry["lastTransitionTime"] = _timestamp(now)
        out.append(entry)
    if not found:
        entry = {
            "type": condition_type,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": _timestamp(now),
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        out.append(entry)
    return out


def _timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def resolved_status(buffer: CapacityBuffer, resolution: Resolution, now: datetime) -> dict[str, Any]:
    """The status the buffer controller writes: the resolved template and chunks, the spec's strategy, and
    ReadyForProvisioning (an unresolved buffer keeps the chunks it had)."""
    status = buffer.status
    replicas = resolution.replicas if resolution.ready else status.replicas
    pod_template: dict[str, str] | None = None
    generation: int | None = None
    if resolution.ready:
        pod_template = {"name": resolution.pod_template} if resolution.pod_template else None
        generation = resolution.pod_template_generation
    else:
        pod_template = {"name": status.pod_template_ref.name} if status.pod_template_ref else None
        generation = status.pod_template_generation
    return {
        "podTemplateRef": pod_template,
        "replicas": replicas,
        "podTemplateGeneration": generation,
        "provisioningStrategy": buffer.spec.provisioning_strategy,
        "conditions": set_condition(
            status.conditions,
            READY_FOR_PROVISIONING,
            resolution.ready,
            resolution.reason,
            resolution.message,
            buffer.metadata.generation,
            now,
        ),
    }


def status_changed(buffer: CapacityBuffer, status: Mapping[str, Any]) -> bool:
    """Whether writing `status` would change the buffer's (a status equal to the current one is not written)."""
    current = buffer.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    wanted = {key: value for key, value in status.items() if value is not None}
    current_conditions = current.pop("conditions", [])
    wanted_conditions = wanted.pop("conditions", [])
    return current != wanted or _conditions(current_conditions) != _conditions(wanted_conditions)


def _conditions(conditions: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
        for c in conditions
    )


# --- virtual pods ----------------------------------------------------------------------------------------


def virtual_pods(buffer: CapacityBuffer, template: PodTemplateSpec, replicas: int) -> list[Pod]:
    """`replicas` placeholder pods shaped by the template, as Karpenter builds them: the template's labels
    (so affinities and topology spread see them), the buffer's annotations, the lowest priority, unbound and
    without the volumes that would need a claim that will never exist."""
    spec = _sanitized(template.spec)
    return [
        Pod(
            metadata=ObjectMeta(
                name=f"capacity-buffer-{buffer.name}-{index}",
                namespace=buffer.namespace,
                uid=f"{buffer.metadata.uid or buffer.key}-{index}",
                labels=dict(template.metadata.labels),
                annotations={
                    FAKE_POD_ANNOTATION: "true",
                    BUFFER_NAME_ANNOTATION: buffer.name,
                    BUFFER_NAMESPACE_ANNOTATION: buffer.namespace,
                },
            ),
            spec=spec,
            status=PodStatus(
                phase=None,
                conditions=[Condition(type="PodScheduled", status="False", reason="Unschedulable")],
            ),
        )
        for index in range(1, replicas + 1)
    ]


def _sanitized(spec: PodSpec) -> PodSpec:
    """The template's spec with no node name, the lowest priority, and no claim-backed volumes."""
    dropped = {
        str(volume.get("name"))
        for volume in spec.volumes
        if "persistentVolumeClaim" in volume or "ephemeral" in volume
    }
    return spec.model_copy(
        update={
            "node_name": None,
            "priority": VIRTUAL_POD_PRIORITY,
            "volumes": [volume for volume in spec.volumes if str(volume.get("name")) not in dropped],
        }
    )


def is_virtual(pod: Pod) -> bool:
    """Whether the pod is a CapacityBuffer's placeholder, not a pod of the cluster."""
    return pod.metadata.annotations.get(FAKE_POD_ANNOTATION) == "true"


def buffer_of(pod: Pod) -> str | None:
    """`namespace/name` of the buffer a virtual pod stands for, or None for a real pod."""
    if not is_virtual(pod):
        return None
    name = pod.metadata.annotations.get(BUFFER_NAME_ANNOTATION)
    namespace = pod.metadata.annotations.get(BUFFER_NAMESPACE_ANNOTATION)
    return f"{namespace}/{name}" if name and namespace else None


@dataclass(frozen=True, slots=True)
class BufferPods:
    """One buffer as a scheduling pass sees it: its resolution and its virtual pods' keys."""

    buffer: CapacityBuffer
    resolution: Resolution
    pods: tuple[str, ...] = ()

    @property
    def replicas(self) -> int:
        return (self.resolution.replicas or 0) if self.resolution.ready else 0


def buffer_pods(buffers: Iterable[CapacityBuffer], targets: Targets) -> tuple[list[BufferPods], list[Pod]]:
    """Each buffer with its resolution, and the virtual pods of those ready for provisioning."""
    out: list[BufferPods] = []
    pods: list[Pod] = []
    for buffer in sorted(buffers, key=lambda b: b.key):
        resolution = resolve(buffer, targets)
        made: list[Pod] = []
        if resolution.ready and resolution.template is not None and resolution.replicas:
            made = virtual_pods(buffer, resolution.template, resolution.replicas)
        pods.extend(made)
        out.append(BufferPods(buffer, resolution, tuple(pod_key(pod) for pod in made)))
    return out, pods


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a buffer's virtual pods went in one scheduling pass."""

    existing: int = 0
    new: int = 0
    failed: int = 0


def provisioning_condition(entry: BufferPods, placement: Placement | None) -> tuple[bool, Reason, str] | None:
    """The Provisioning condition (status, reason, message) the provisioner writes after a pass, or None to
    leave it: not ready, no chunks, some needing new capacity or failing, or all on existing capacity."""
    if not entry.resolution.ready:
        return False, Reason.NOT_READY_FOR_PROVISIONING, "Buffer is not ReadyForProvisioning"
    desired = entry.replicas
    if desired == 0:
        return False, Reason.BUFFER_EMPTY, "Buffer has zero desired replicas"
    if placement is None:
        return None
    if placement.new > 0 or placement.failed > 0:
        return (
            False,
            Reason.REQUIRES_NEW_CAPACITY,
            f"{placement.new}/{desired} virtual pods required new capacity, {placement.failed} failed",
        )
    if placement.existing == desired:
        return True, Reason.FITS_EXISTING_CAPACITY, f"All {desired} virtual pods fit on existing capacity"
    return None


def placements(
    entries: Sequence[BufferPods],
    existing: Iterable[Sequence[str]],
    new: Iterable[Sequence[str]],
    failed: Iterable[str],
) -> dict[str, Placement]:
    """Per buffer (`namespace/name`), how many of its virtual pods a pass put on existing capacity, on new
    NodeClaims, or nowhere; `existing` and `new` are the pod keys of each node and new NodeClaim."""
    owner = {pod: entry.buffer.key for entry in entries for pod in entry.pods}
    counts: dict[str, list[int]] = {}

    def count(pods: Iterable[str], slot: int) -> None:
        for pod in pods:
            key = owner.get(pod)
            if key is not None:
                counts.setdefault(key, [0, 0, 0])[slot] += 1

    for pods in existing:
        count(pods, 0)
    for pods in new:
        count(pods, 1)
    count(failed, 2)
    return {key: Placement(*values) for key, values in counts.items()}


def destinations(
    existing: Iterable[tuple[str, Sequence[str]]],
    new: Iterable[tuple[str, Sequence[str]]],
    failed: Iterable[tuple[str, Sequence[str]]],
) -> dict[str, str]:
    """Where each pod went, in words: `node/<name>` for existing capacity (a node, or a NodeClaim still
    launching), `new NodeClaim <label>` for one a plan would create, `unschedulable: <reasons>`."""
    where: dict[str, str] = {}
    for node, pods in existing:
        where.update((pod, f"node/{node}") for pod in pods)
    for label, pods in new:
        where.update((pod, f"new NodeClaim {label}") for pod in pods)
    for pod, reasons in failed:
        where[pod] = "unschedulable: " + "; ".join(reasons)
    return where


def buffer_report(entries: Sequence[BufferPods], where: Mapping[str, str]) -> list[dict[str, object]]:
    """The `buffers` section of the what-if commands: each buffer, whether it resolved (and why not), its
    chunks, and where each of its virtual pods goes (`destinations`; absent: not simulated)."""
    return [
        {
            "buffer": entry.buffer.key,
            "ready": entry.resolution.ready,
            "reason": entry.resolution.reason.value,
            "message": entry.resolution.message,
            "replicas": entry.replicas,
            "pods": {pod: where.get(pod) for pod in entry.pods},
        }
        for entry in entries
    ]
