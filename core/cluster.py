"""The narrow interface to the Kubernetes API that activities and the controller use.

A real cluster (through the Kubernetes client) and the simulated AKS both implement it; objects are the
models of `core.api`. Deleting an object with finalizers marks it for deletion, as the API server does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel

from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Event, Node, PersistentVolumeClaim, Pod, Secret, VolumeAttachment
from core.api.manifests import Manifests
from core.api.meta import OwnerReference, Taint
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class WatchEvent(BaseModel):
    """One change, as a watch reports it: the object's kind, name, and its manifest after the change."""

    type: EventType
    kind: str
    name: str
    namespace: str | None = None
    resource_version: int
    object: dict[str, Any]


class ClusterAPI(Protocol):
    async def snapshot(self, *, fresh: bool = False) -> Manifests:
        """Every object the scheduler reads, at one resource version. Its objects may be shared with the next
        snapshot's (those that did not change): read them, do not change them. A cluster may answer from a
        cache its watches keep; `fresh` asks for the objects as they stand on the server. NodePools and
        NodeClaims of another provider's NodeClass are not among them (`Manifests.leave_other_providers`)."""
        ...

    async def get_node(self, name: str) -> Node | None: ...

    def node_seen(self, name: str) -> Node | None:
        """The Node as this client saw it without a request: its own write's answer of a moment ago (once; the
        look that follows registration's patch may take it instead of a read), else its watch's copy, which may
        lag the server (as a controller's cache does). None when it holds neither."""
        ...

    async def find_node_by_provider_id(self, provider_id: str) -> Node | None: ...

    async def get_nodeclaim(self, name: str, *, cached: bool = False) -> NodeClaim | None:
        """The NodeClaim; `cached` takes the copy a watch of this process holds when it holds one (a moment behind
        the server at most), and asks the server otherwise."""
        ...

    async def list_pods_on_node(self, node_name: str) -> list[Pod]: ...

    async def list_volume_attachments(self, node_name: str) -> list[VolumeAttachment]:
        """The `storage.k8s.io/v1` VolumeAttachments whose spec.nodeName is the node."""
        ...

    async def get_persistent_volume_claim(
        self, namespace: str, name: str
    ) -> PersistentVolumeClaim | None: ...

    async def create_nodeclaim(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Create it, or return the existing one with the same name."""
        ...

    async def change_nodeclaim_status(
        self, name: str, change: Callable[[NodeClaim], None]
    ) -> NodeClaim | None:
        """Edit the status with `change` (made again on the latest version after a conflict); None when the
        NodeClaim is gone."""
        ...

    async def patch_nodeclaim_metadata(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        remove_finalizers: list[str] | None = None,
    ) -> NodeClaim | None: ...

    async def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> bool:
        """Set these annotations on the NodePool or AKSNodeClass of this name; False when it is gone."""
        ...

    async def list_nodeclaims(self) -> list[NodeClaim]: ...

    async def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None] | None = None,
        add_taints: list[Taint] | None = None,
        remove_taint_keys: list[str] | None = None,
        add_finalizers: list[str] | None = None,
        remove_finalizers: list[str] | None = None,
        unschedulable: bool | None = None,
        add_owner: OwnerReference | None = None,
    ) -> Node | None:
        """Change labels (a None value removes one), taints, finalizers, cordon; `add_owner` is added to the
        ownerReferences unless one of the same kind and uid is there. None when the Node is gone."""
        ...

    async def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the eviction API; `PDBViolationError` when a budget forbids it now."""
        ...

    async def delete_pod(
        self, namespace: str, name: str, grace_period_seconds: int | None = None
    ) -> None: ...

    async def delete_node(self, name: str) -> None: ...

    async def delete_nodeclaim(self, name: str) -> None: ...

    async def record_event(self, event: Event) -> None:
        """Publish a Kubernetes Event (best effort: losing one must never fail a caller)."""
        ...

    def watch(self, since: int = 0) -> AsyncIterator[WatchEvent]:
        """Changes after resource version `since`, forever."""
        ...

    async def read_secret(self, namespace: str, name: str) -> Secret | None:
        """The Secret with its data base64-decoded (None when there is none). Callers keep the values out of every
        log line, error message and workflow payload."""
        ...

    async def get_nodepool(self, name: str) -> NodePool | None: ...

    async def patch_nodeclass_status(self, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into the AKSNodeClass's status (e.g. `localDNSState`); nothing if it is gone."""
        ...

    async def get_nodeclass(self, name: str) -> AKSNodeClass | None:
        """The AKSNodeClass with its status (the images and Kubernetes version its controller resolved)."""
        ...

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: dict[str, Any],
        resource_version: str,
        namespace: str | None = None,
    ) -> bool:
        """Merge `status` into the status of the NodePool, AKSNodeClass, NodeOverlay or (with its `namespace`)
        CapacityBuffer `name`, if it is still at `resource_version`; False when it changed meanwhile or is gone
        (whoever wrote it recomputes from the newer version)."""
        ...

    async def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """Any object's manifest (a CapacityBuffer's PodTemplate or workload), or None when there is none."""
        ...

    async def list_objects(
        self, kind: str, namespace: str | None = None, field_selector: str = "", label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Manifests of a kind, in one namespace or all."""
        ...
