"""The kinds nodewright reads and writes, with where each lives in the REST API."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from core.api.kube import Deployment, ReplicaSet, StatefulSet


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind nodewright reads, with where it lives in the REST API."""

    kind: str
    api_version: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def custom(self) -> tuple[str, str, str]:
        """Group, version and plural, as `CustomObjectsApi` takes them."""
        group, _, version = self.api_version.rpartition("/")
        return group, version, self.plural


POD = Resource("Pod", "v1", "pods")
NODE = Resource("Node", "v1", "nodes")
DAEMONSET = Resource("DaemonSet", "apps/v1", "daemonsets")
PDB = Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets")
NODEPOOL = Resource("NodePool", "karpenter.sh/v1", "nodepools")
NODECLAIM = Resource("NodeClaim", "karpenter.sh/v1", "nodeclaims")
NODECLASS = Resource("AKSNodeClass", "karpenter.azure.com/v1beta1", "aksnodeclasses")
NODEOVERLAY = Resource("NodeOverlay", "karpenter.sh/v1alpha1", "nodeoverlays")
"""Read only with the NodeOverlay feature gate on (`KubernetesCluster.node_overlays`)."""
CAPACITYWINDOW = Resource("CapacityWindow", "nodewright.io/v1alpha1", "capacitywindows")
"""nodewright's own extension (`core.api.capacitywindow`); listed by the controller, never watched, so a cluster
without its CRD runs as before."""
CAPACITYBUFFER = Resource("CapacityBuffer", "autoscaling.x-k8s.io/v1beta1", "capacitybuffers")
"""Read and watched only with the CapacityBuffer feature gate on (`KubernetesCluster.capacity_buffers`)."""
PODTEMPLATE = Resource("PodTemplate", "v1", "podtemplates")
DEPLOYMENT = Resource("Deployment", "apps/v1", "deployments")
STATEFULSET = Resource("StatefulSet", "apps/v1", "statefulsets")
REPLICASET = Resource("ReplicaSet", "apps/v1", "replicasets")
BUFFER_KINDS = (CAPACITYBUFFER, PODTEMPLATE, DEPLOYMENT, STATEFULSET, REPLICASET)
"""What the controller also watches with the CapacityBuffer gate on: buffers and what their templates come from."""
LEASE = Resource("Lease", "coordination.k8s.io/v1", "leases")
VOLUME_ATTACHMENT = Resource("VolumeAttachment", "storage.k8s.io/v1", "volumeattachments")

SNAPSHOT_KINDS = (NODEPOOL, NODECLAIM, NODECLASS, POD, NODE, DAEMONSET, PDB)
"""What the scheduler reads (`core.api.manifests.Manifests`)."""
WATCHED_KINDS = (POD, NODE, NODECLAIM, NODEPOOL, NODECLASS)
"""What the controller watches."""

API_VERSIONS = {
    **{resource.kind: resource.api_version for resource in SNAPSHOT_KINDS},
    "Secret": "v1",
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "Event": "events.k8s.io/v1",
    "Lease": "coordination.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    CAPACITYWINDOW.kind: CAPACITYWINDOW.api_version,
    "PodTemplate": "v1",
    "CapacityBuffer": CAPACITYBUFFER.api_version,
}
"""The API version the administration helpers use for a kind named alone (others are looked up by discovery)."""
SCALABLE_MODELS: dict[str, type[Deployment | StatefulSet | ReplicaSet]] = {
    "Deployment": Deployment,
    "StatefulSet": StatefulSet,
    "ReplicaSet": ReplicaSet,
}
"""The models of what a CapacityBuffer's scalableRef may name."""


def as_manifest(model: BaseModel) -> dict[str, Any]:
    """A model as the camelCase JSON the API server takes."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def with_kind(resource: Resource, items: Iterable[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """List items with their apiVersion and kind, which a list response leaves out."""
    return [{**item, "apiVersion": resource.api_version, "kind": resource.kind} for item in items]


def namespaced(resource: Resource, namespace: str) -> tuple[str, str, str, str]:
    """Group, version, namespace and plural, as `CustomObjectsApi`'s namespaced methods take them."""
    group, version, plural = resource.custom
    return group, version, namespace, plural
