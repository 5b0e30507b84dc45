"""Helpers for tests that share one real control plane per test process: wipe what a test made, so the next one
starts from an empty cluster (no NodePools, NodeClaims, Nodes, or workloads in `default`)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

from activities.kubeclient import KubernetesCluster
from simulator.aks import AksSettings
from workers.controlplane.run import ControlPlane
from workers.simulated_aks import SimulatedAks, simulated_aks

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "PodDisruptionBudget")
CLUSTER_KINDS = ("NodePool", "AKSNodeClass")


async def reset_cluster(kube: KubernetesCluster, namespace: str = "default", timeout: float = 30.0) -> None:
    """Delete every workload and pod in `namespace` and every NodeClaim, Node, NodePool and AKSNodeClass, with
    their finalizers removed (no controller is left to honour them), and wait until they are gone."""
    for kind in WORKLOAD_KINDS:
        for item in await kube.list_objects(kind, namespace):
            await kube.delete_object(kind, item["metadata"]["name"], namespace)
    for claim in await kube.list_nodeclaims():
        if claim.metadata.finalizers:
            await kube.patch_nodeclaim_metadata(claim.name, remove_finalizers=list(claim.metadata.finalizers))
        await kube.delete_nodeclaim(claim.name)
    for node in await kube.list_nodes():
        if node.metadata.finalizers:
            await kube.patch_node(node.metadata.name, remove_finalizers=list(node.metadata.finalizers))
        await kube.delete_node(node.metadata.name)
    for kind in CLUSTER_KINDS:
        for item in await kube.list_objects(kind):
            await kube.delete_object(kind, item["metadata"]["name"])
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pods = await kube.list_pods(namespace)
        for pod in pods:
            await kube.delete_pod(namespace, pod.metadata.name, grace_period_seconds=0)
        left = [f"{len(pods)} pods"] if pods else []
        left += [f"{kind}s" for kind in ("NodeClaim", "Node") if await kube.list_objects(kind)]
        if not left:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the cluster was not clean within {timeout:g} s: {', '.join(left)} left")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def fresh_aks(plane: ControlPlane, settings: AksSettings | None = None) -> AsyncIterator[SimulatedAks]:
    """The control plane wiped clean, and an emulated Azure of the test's own around it (instant boots unless
    `settings` say otherwise). Its cluster name is new: workflow ids (`provisioner/<cluster>`, ...) outlive a
    test on the shared dev server."""
    settings = settings or AksSettings.instant(seed=3)
    settings.cluster_name = f"c-{uuid.uuid4().hex[:10]}"
    async with simulated_aks(plane, settings, poll_interval=timedelta(0)) as aks:
        await reset_cluster(aks.kube)
        yield aks
