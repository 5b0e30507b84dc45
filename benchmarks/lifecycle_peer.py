"""The lifecycle benchmark's peer and floor (`--peer karpenter`): the same pods on a control plane of their own,
their nodes made by Karpenter's kwok controller or by this process (no autoscaler).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import subprocess
from pathlib import Path
from typing import Any

from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from benchmarks.karpenter import KWOK_NODECLASS, karpenter_nodepool, running_karpenter
from benchmarks.lifecycle_measure import CONTROL_PLANE, OBSERVER_QPS, measure, side_figures
from benchmarks.nodewright import examples
from benchmarks.observed import Observed, latency_figures, nominations, since
from benchmarks.workload import APP, PINNED_INSTANCE_TYPE
from workers.controlplane.build import KARPENTER_VERSION
from workers.controlplane.run import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE, ControlPlane

FLOOR_CONCURRENCY = 32
FLOOR_NODE_CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110"}
"""A Standard_D2s_v5's size: what the floor's Nodes report."""


def without_autoscaler_objects() -> list[dict[str, Any]]:
    """deploy/examples/ without its NodePool and AKSNodeClass: the same DaemonSet and workloads on every side."""
    return [document for document in examples() if document["kind"] not in ("NodePool", "AKSNodeClass")]


def karpenter_objects() -> list[dict[str, Any]]:
    """A KWOKNodeClass and deploy/examples/' NodePool pointed at it (its AKS-only requirements left out), then
    the examples' other objects."""
    nodepool = next(document for document in examples() if document["kind"] == "NodePool")
    return [KWOK_NODECLASS, karpenter_nodepool(nodepool), *without_autoscaler_objects()]


def floor_node(name: str) -> dict[str, Any]:
    """A Node the plane's kwok keeps Ready, with the labels the bench pods need (a Standard_D2s_v5's)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": PINNED_INSTANCE_TYPE,
                "type": "kwok",
            },
        },
        "status": {"capacity": FLOOR_NODE_CAPACITY, "allocatable": FLOOR_NODE_CAPACITY},
    }


async def make_floor_nodes(kube: KubernetesCluster, seen: Observed, count: int, made: dict[str, str]) -> None:
    """One Node for each pod, created the moment the pod is seen pending (up to `FLOOR_CONCURRENCY` at once):
    no planning, no cloud, no lifecycle. A pod created after the first Nodes can run on a Node made for another
    pod without ever being pending; seen Running, it counts as one more pod to make a Node for, so the pod it
    displaced gets one too. `made` maps each pod to its Node's name."""
    semaphore = asyncio.Semaphore(FLOOR_CONCURRENCY)

    async def create(name: str) -> None:
        async with semaphore:
            await kube.apply([floor_node(name)])

    creating = []
    while len(made) < count:
        for pod in [*seen.pod_pending, *seen.pod_running]:
            if pod not in made:
                made[pod] = name = f"floor-{len(made)}"
                creating.append(asyncio.create_task(create(name)))
        await asyncio.sleep(0.05)
    await asyncio.gather(*creating)


async def nominations_or_placements(kube: KubernetesCluster) -> dict[str, list[str]]:
    """The pods of each NodeClaim: from its Nominated events, and for a pod without one (Karpenter records at
    most 5 a second, in bursts of 10) the NodeClaim of the Node it runs on."""
    pods_of = await nominations(kube)
    nominated = {pod for pods in pods_of.values() for pod in pods}
    claim_of = {
        str((claim.get("status") or {}).get("nodeName")): claim["metadata"]["name"]
        for claim in await kube.list_objects("NodeClaim")
    }
    for pod in await kube.list_objects("Pod", "default", label_selector=f"app={APP}"):
        key = f"default/{pod['metadata']['name']}"
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if key not in nominated and node in claim_of:
            pods_of.setdefault(claim_of[node], []).append(key)
    return pods_of


async def run_without_nodewright(
    plane: ControlPlane, directory: Path, logs: Path, count: int, shape: str, timeout: float, side: str
) -> dict[str, Any]:
    """A run whose nodes come from Karpenter's kwok controller (`karpenter`) or from this process (`floor`), on
    a control plane of its own started as nodewright's is; the same pods, watched and timed the same way."""
    kube = load_cluster(str(plane.kubeconfig), qps=OBSERVER_QPS, burst=int(2 * OBSERVER_QPS))
    async with kube, contextlib.AsyncExitStack() as stack:
        pids = {name: plane.processes[name].pid for name in CONTROL_PLANE} | {"bench": os.getpid()}
        processes: dict[str, subprocess.Popen[bytes]] = {}
        if side == "karpenter":
            await kube.apply(karpenter_objects())
            karpenter = await stack.enter_async_context(running_karpenter(plane, directory, logs, kube))
            processes["karpenter"] = karpenter
            pids["karpenter"] = karpenter.pid
        else:
            await kube.apply(without_autoscaler_objects())
        daemonset = await kube.get_object("DaemonSet", "log-agent", "kube-system")
        version = int((daemonset or {}).get("metadata", {}).get("resourceVersion") or 0)
        seen = Observed()
        made: dict[str, str] = {}
        # Without Temporal: until `count` pods are Running (and, for Karpenter, `count` NodeClaims Initialized).
        claims = count if side == "karpenter" else 0
        phase = await measure(
            kube,
            plane,
            version,
            seen,
            pids,
            count,
            shape,
            timeout,
            processes,
            claims=claims,
            label=f"{side} ",
            alongside=functools.partial(make_floor_nodes, kube, seen, count, made)
            if side == "floor"
            else None,
        )
        pods_of = await nominations_or_placements(kube) if side == "karpenter" else {}

    if side == "floor":
        pods_of = {node: [pod] for pod, node in made.items()}
    created_at = seen.nodes if side == "floor" else seen.claim_created
    first_pending = min(seen.pod_pending.values(), default=phase.started)
    return {
        "side": side,
        **side_figures(side, seen, first_pending, phase.cpu),
        "version": KARPENTER_VERSION if side == "karpenter" else None,
        "pods": count,
        "shape": shape,
        "finished": not phase.failure,
        "failure": phase.failure,
        **seen.reached(),
        "nominated_pods": sum(len(pods) for pods in pods_of.values()),
        "pods_deleted": len(seen.pods_deleted),
        "nodeclaims_deleted": len(seen.claims_deleted),
        "apiserver_requests": phase.requests,
        **latency_figures(seen, pods_of, created_at),
        "first_pending_to_last_initialized": since(
            first_pending, max(seen.claim_initialized.values(), default=None)
        ),
        "first_pending_to_last_running": since(first_pending, max(seen.pod_running.values(), default=None)),
        "peak_mb": phase.rss,
        **phase.figures(),
    }
