"""The Nodes of the process kubelet: a system node pool, as an AKS cluster has one before any autoscaler runs.

Each Node is registered as a kubelet registers its own, with the labels AKS puts on a system pool's nodes (zone,
region, instance type, `kubernetes.azure.com/mode: system`, agent pool), its taints, its pod CIDR and an
InternalIP on the pods' bridge, and kept alive by renewing its Lease in `kube-node-lease` (kube-controller-manager
marks a Node whose Lease stops being renewed Unknown, and removes the `not-ready` taint from a Node that is
Ready). These Nodes carry no `karpenter.sh/nodepool` label and no kwok annotation: neither nodewright nor kwok
manages them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.kubeapi import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeApi, KubeApiError, node_path

Json = dict[str, Any]
LEASE_SECONDS = 40
RENEW_SECONDS = 10.0
STATUS_SECONDS = 60.0
LEASE_NAMESPACE = "kube-node-lease"
POOL = "system"
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class NodeSpec:
    """One Node of the system pool: its name and zone (`<region>-<n>`), size and taints."""

    name: str
    zone: str
    region: str
    cpu: str = "4"
    memory: str = "16Gi"
    pods: int = 110
    instance_type: str = "Standard_D4ds_v5"
    taints: tuple[Mapping[str, str], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_object(spec: NodeSpec, pod_cidr: str) -> Json:
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": ARCHITECTURES.get(platform.machine(), platform.machine()),
        "node.kubernetes.io/instance-type": spec.instance_type,
        "topology.kubernetes.io/region": spec.region,
        "topology.kubernetes.io/zone": spec.zone,
        "kubernetes.azure.com/mode": POOL,
        "kubernetes.azure.com/agentpool": POOL,
        "agentpool": POOL,
        **spec.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "taints": [dict(taint) for taint in spec.taints],
        },
    }


def node_status(spec: NodeSpec, address: str, version: str, since: str) -> Json:
    """The Node's status as of now; its conditions have held `since` (RFC 3339)."""
    stamp = now()

    def condition(kind: str, status: str, reason: str, message: str) -> Json:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": since,
        }

    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods), "ephemeral-storage": "128Gi"}
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition(
                "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
            ),
            condition(
                "Ready", "True", "KubeletReady", "the process kubelet runs this node's pods as processes"
            ),
        ],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": spec.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": platform.release(),
            "osImage": "nodewright process kubelet",
            "containerRuntimeVersion": "process://0.1.0",
            "kubeletVersion": version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": ARCHITECTURES.get(platform.machine(), platform.machine()),
        },
    }


class Nodes:
    """Registers the Nodes, renews their Leases and re-posts their status until stopped; deletes them at the end."""

    def __init__(self, api: KubeApi, specs: list[NodeSpec]) -> None:
        self.api = api
        self.specs = {spec.name: spec for spec in specs}
        self.addresses: dict[str, str] = {}
        self._version = ""
        self._since = now()

    async def register(self, addresses: Mapping[str, str], pod_cidrs: Mapping[str, str]) -> None:
        self.addresses = dict(addresses)
        version = await self.api.request("GET", "/version")
        self._version = str(version.get("gitVersion", ""))
        self._since = now()
        for name, spec in self.specs.items():
            with contextlib.suppress(KubeApiError):
                await self.api.request("DELETE", node_path(name))
            node = await self._create(node_path(""), node_object(spec, pod_cidrs[name]))
            await self.api.patch(
                node_path(name, "status"), {"status": self._status(name)}, STRATEGIC_MERGE_PATCH
            )
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                    ],
                },
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": _micro_now(),
                },
            }
            with contextlib.suppress(KubeApiError):
                await self.api.request("DELETE", self._lease(name))
            await self._create(self._lease(""), lease)

    async def _create(self, collection: str, body: Json) -> Json:
        # A Node just deleted may still be finishing (its finalizers): try again for a few seconds.
        for _ in range(50):
            try:
                return await self.api.create(collection.rstrip("/"), body)
            except KubeApiError as error:
                if error.status != 409:
                    raise
                await asyncio.sleep(0.1)
        return await self.api.create(collection.rstrip("/"), body)

    def _status(self, name: str) -> Json:
        return node_status(self.specs[name], self.addresses[name], self._version, self._since)

    @staticmethod
    def _lease(name: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"

    async def heartbeat(self) -> None:
        """Renew every Lease every RENEW_SECONDS and post every status every STATUS_SECONDS, until cancelled."""
        posted = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            for name in self.specs:
                with contextlib.suppress(KubeApiError):
                    await self.api.patch(
                        self._lease(name), {"spec": {"renewTime": _micro_now()}}, MERGE_PATCH
                    )
                    if asyncio.get_running_loop().time() - posted >= STATUS_SECONDS:
                        await self.api.patch(
                            node_path(name, "status"), {"status": self._status(name)}, STRATEGIC_MERGE_PATCH
                        )
            if asyncio.get_running_loop().time() - posted >= STATUS_SECONDS:
                posted = asyncio.get_running_loop().time()

    async def delete(self) -> None:
        for name in self.specs:
            with contextlib.suppress(KubeApiError):
                await self.api.request("DELETE", node_path(name))
