"""CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`, behind Karpenter's `CapacityBuffer` feature gate).

A CapacityBuffer asks for spare room in the cluster: `replicas` chunks shaped like a pod template (a PodTemplate
named by `podTemplateRef`, or the template of the Deployment, StatefulSet or ReplicaSet named by `scalableRef`),
so that pods of that shape start without waiting for a node. Karpenter's buffer controller resolves the
template and the number of chunks into the status (`core.capacity_buffer`); its provisioner then schedules one
virtual pod per chunk beside the real pending pods. The API is the Cluster Autoscaler's, as Karpenter v1.14
carries it; parsing enforces the rules of its CRD schema and CEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from core.api.kube import DEFAULT_NAMESPACE, ResourceList
from core.api.meta import ObjectMeta, StrictKubeModel
from core.api.nodepool import ConditionedStatus, Problem, parse_manifest, raise_problems

GROUP = "autoscaling.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta1"
KIND = "CapacityBuffer"

ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"
"""The one provisioning strategy Karpenter acts on (and the default): the buffer's room is kept provisioned."""

SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
"""What `scalableRef` may name (in the `apps` group, which an empty `apiGroup` means)."""
SCALABLE_GROUP = "apps"


class LocalObjectRef(StrictKubeModel):
    """An object in the buffer's own namespace, by name."""

    name: str = Field(min_length=1)


class ScalableRef(StrictKubeModel):
    """A workload with a scale subresource, in the buffer's namespace."""

    api_group: str = ""
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)

    @property
    def group(self) -> str:
        """The API group the reference means: an empty one is `apps`, as Karpenter reads it."""
        return self.api_group or SCALABLE_GROUP


class CapacityBufferSpec(StrictKubeModel):
    provisioning_strategy: str = ACTIVE_CAPACITY
    pod_template_ref: LocalObjectRef | None = None
    scalable_ref: ScalableRef | None = None
    replicas: int | None = Field(default=None, ge=0)
    """The chunks wanted; with `percentage`, the larger of the two; `limits` cap either."""
    percentage: int | None = Field(default=None, ge=0)
    """Chunks as a percentage of the scalable target's replicas, rounded up, at least 1 (scalableRef only)."""
    limits: ResourceList | None = None
    """The most the chunks may request together; alone, as many chunks as fit in them."""

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if self.pod_template_ref is not None and self.replicas is None and self.limits is None:
            problems.append(((), "If podTemplateRef is set, replicas or limits must also be set"))
        if self.pod_template_ref is not None and self.scalable_ref is not None:
            problems.append(((), "You must define either PodTemplateRef or ScalableRef, but not both"))
        raise_problems("spec", problems)
        return self


class CapacityBufferStatus(ConditionedStatus):
    pod_template_ref: LocalObjectRef | None = None
    """The PodTemplate the chunks were resolved from (podTemplateRef only)."""
    replicas: int | None = None
    """The chunks the provisioner keeps room for."""
    pod_template_generation: int | None = None
    provisioning_strategy: str | None = None


class CapacityBuffer(StrictKubeModel):
    """An `autoscaling.x-k8s.io/v1beta1` CapacityBuffer; build one with `CapacityBuffer.parse(manifest)`."""

    api_version: Literal["autoscaling.x-k8s.io/v1beta1"] = "autoscaling.x-k8s.io/v1beta1"
    kind: Literal["CapacityBuffer"] = "CapacityBuffer"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: CapacityBufferSpec
    status: CapacityBufferStatus = Field(default_factory=CapacityBufferStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest (namespace defaulted); raises `InvalidObjectError` naming every broken rule."""
        buffer = parse_manifest(cls, KIND, raw)
        buffer.metadata.namespace = buffer.metadata.namespace or DEFAULT_NAMESPACE
        return buffer

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or DEFAULT_NAMESPACE

    @property
    def key(self) -> str:
        """`namespace/name`, as Karpenter names a buffer in its annotations and messages."""
        return f"{self.namespace}/{self.name}"
