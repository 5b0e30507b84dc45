"""NodeClaim (`karpenter.sh/v1`): one node Karpenter decided to launch, from request to termination.

The spec is what the NodePool template allowed, narrowed by the pods that triggered the launch (requirements
with the chosen instance types, capacity types and zones, the summed resource requests). The status follows
the node's lifecycle through the condition types below, and records the instance (providerID, imageID), its
node, and the capacity and allocatable the provider promised.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import Field

from core import labels
from core.api.conditions import ConditionSet
from core.api.kube import ResourceList
from core.api.meta import ObjectMeta, StrictKubeModel, Taint
from core.api.nodepool import ConditionedStatus, NodeClaimSpecFields, NodeClassReference, parse_manifest
from core.resources import Resources, parse_resources
from core.scheduling.requirements import Requirements


class NodeClaimConditionType(StrEnum):
    """Karpenter's NodeClaim condition types; Ready is Launched, Registered and Initialized together."""

    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    READY = "Ready"
    CONSOLIDATABLE = "Consolidatable"
    DRIFTED = "Drifted"
    DISRUPTION_REASON = "DisruptionReason"
    DRAINED = "Drained"
    VOLUMES_DETACHED = "VolumesDetached"
    INSTANCE_TERMINATING = "InstanceTerminating"
    CONSISTENT_STATE_FOUND = "ConsistentStateFound"


class NodeClaimResources(StrictKubeModel):
    requests: ResourceList = Field(default_factory=dict)


class NodeClaimSpec(NodeClaimSpecFields):
    """The NodePool template's spec plus the resources the scheduled pods and daemons request."""

    resources: NodeClaimResources = Field(default_factory=NodeClaimResources)


class NodeClaimStatus(ConditionedStatus):
    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: ResourceList = Field(default_factory=dict)
    allocatable: ResourceList = Field(default_factory=dict)
    last_pod_event_time: datetime | None = None


class NodeClaim(StrictKubeModel):
    """A `karpenter.sh/v1` NodeClaim; build one with `NodeClaim.parse(manifest)`."""

    api_version: Literal["karpenter.sh/v1"] = "karpenter.sh/v1"
    kind: Literal["NodeClaim"] = "NodeClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeClaimSpec
    status: NodeClaimStatus = Field(default_factory=NodeClaimStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest; raises `InvalidObjectError` naming every broken rule with its field path."""
        return parse_manifest(cls, "NodeClaim", raw)

    @property
    def name(self) -> str:
        """The NodeClaim's name (`metadata.name`), `<nodepool>-<suffix>` when Karpenter made it."""
        return self.metadata.name

    @property
    def labels(self) -> dict[str, str]:
        """The NodeClaim's labels, which its Node will carry."""
        return self.metadata.labels

    @property
    def nodepool_name(self) -> str | None:
        """The NodePool that launched this NodeClaim (its `karpenter.sh/nodepool` label)."""
        return self.metadata.labels.get(labels.NODEPOOL)

    @property
    def taints(self) -> list[Taint]:
        """Taints the node gets at registration; pods must tolerate them."""
        return self.spec.taints

    @property
    def startup_taints(self) -> list[Taint]:
        """Taints some agent removes after start; the node is not initialized until they are gone."""
        return self.spec.startup_taints

    @property
    def node_class_ref(self) -> NodeClassReference:
        """The NodeClass the node is built from."""
        return self.spec.node_class_ref

    @property
    def provider_id(self) -> str | None:
        """The instance's provider ID (`azure:///subscriptions/...`), once launched."""
        return self.status.provider_id

    @property
    def node_name(self) -> str | None:
        """The name of the registered Node, once it registered."""
        return self.status.node_name

    @property
    def requests(self) -> Resources:
        """`spec.resources.requests` as integers (cpu in millicores)."""
        return parse_resources(self.spec.resources.requests)

    @property
    def capacity(self) -> Resources:
        """`status.capacity` as integers; empty until the NodeClaim is launched."""
        return parse_resources(self.status.capacity)

    @property
    def allocatable(self) -> Resources:
        """`status.allocatable` as integers; empty until the NodeClaim is launched."""
        return parse_resources(self.status.allocatable)

    def requirements(self) -> Requirements:
        """`spec.requirements` in the scheduler's algebra."""
        return self.spec.requirement_set()

    def is_true(self, condition_type: NodeClaimConditionType) -> bool:
        """Whether the status condition of this type is set and True."""
        return self.status.is_true(condition_type)


LAUNCH_FAILED = "LaunchFailed"
"""Karpenter's reason on the Launched condition of a launch that failed (Unknown while it is retried)."""
INSUFFICIENT_CAPACITY_ERROR = "InsufficientCapacityError"
"""Karpenter's warning on a NodeClaim whose launch found no capacity (or quota) for an offering."""
CREDENTIAL_REFUSED = "CredentialRefused"
"""nodewright's warning on a NodeClaim whose launch Azure refused for the worker's identity (retried meanwhile)."""
NODE_NOT_FOUND = "NodeNotFound"
"""The reason of `Registered=Unknown` (and `Initialized=Unknown`) while the NodeClaim has no Node."""
NODE_NOT_READY = "NodeNotReady"
"""The reason of `Initialized=Unknown` while the Node is not Ready."""
KNOWN_EPHEMERAL_TAINTS_EXIST = "KnownEphemeralTaintsExist"
"""The reason of `Initialized=Unknown` while one of Kubernetes' not-ready taints is on the Node."""


NODECLAIM_CONDITIONS = ConditionSet(
    root=NodeClaimConditionType.READY,
    dependents=(
        NodeClaimConditionType.LAUNCHED,
        NodeClaimConditionType.REGISTERED,
        NodeClaimConditionType.INITIALIZED,
    ),
)
"""A NodeClaim is Ready when it is Launched, Registered and Initialized (Karpenter's condition set)."""
