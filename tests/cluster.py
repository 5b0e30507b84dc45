"""Helpers for tests that share one real control plane per test process: wipe what a test made, so the next one
starts from an empty cluster (no NodePools, NodeClaims, Nodes, workloads or rotated bootstrap tokens), give it an
emulated Azure of its own, apply `deploy/examples/`, wait until kube-scheduler has marked pods unschedulable (as
the controller waits for before it signals the provisioner), read the events Karpenter recorded, and run
activities under a workflow run id of their own (NodeClaim names derive from it; events outlive a test on the
shared API server); and run the process kubelet, whose Nodes run pods as processes (`simulator.kubelet`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.testing import ActivityEnvironment

from activities.kubeclient.cluster import KubernetesCluster
from core.api.kube import Pod
from core.bootstrap_tokens import MANAGED_BY, MANAGED_BY_LABEL
from core.bootstrap_tokens import NAMESPACE as TOKEN_NAMESPACE
from simulator.aks import AksSettings
from workers.controlplane.run import ControlPlane
from workers.simulated_aks import SimulatedAks, simulated_aks

WORKLOAD_KINDS = (
    "CapacityBuffer",
    "Deployment",
    "ReplicaSet",
    "DaemonSet",
    "StatefulSet",
    "PodDisruptionBudget",
    "PodTemplate",
)
CLUSTER_KINDS = ("NodePool", "AKSNodeClass", "NodeOverlay", "CapacityWindow")
WORKLOAD_NAMESPACES = ("default", "kube-system")
"""Where tests put workloads (the examples' DaemonSet runs in kube-system; the control plane runs none there)."""

T = TypeVar("T")


def record_calls(
    monkeypatch: Any,
    owner: object,
    method: str,
    calls: list[Any],
    entry: Callable[[tuple[Any, ...]], Any] = tuple,
) -> Callable[..., Any]:
    """Make `owner.method` append `entry(args)` to `calls` before it runs (undone with `monkeypatch`); the original
    method, for a test that also calls it directly."""
    original: Callable[..., Any] = getattr(owner, method)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(entry(args))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, method, recorded)
    return original


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float = 10.0, what: str = "") -> T:
    """The first truthy result of `check`, polled every 50 ms until `timeout` (then the test fails)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what or 'condition'} not reached within {timeout} s; last: {result!r}")
        await asyncio.sleep(0.05)


async def _delete_nodes(kube: KubernetesCluster) -> None:
    for node in await kube.list_nodes():
        if node.metadata.finalizers:
            await kube.patch_node(node.metadata.name, remove_finalizers=list(node.metadata.finalizers))
        await kube.delete_node(node.metadata.name)


async def reset_cluster(kube: KubernetesCluster, timeout: float = 30.0) -> None:
    """Delete every workload and pod the tests' namespaces hold and every NodeClaim, Node, NodePool and
    AKSNodeClass, with their finalizers removed (no controller is left to honour them), and wait until they are
    gone."""
    for namespace in WORKLOAD_NAMESPACES:
        for kind in WORKLOAD_KINDS:
            for item in await kube.list_objects(kind, namespace):
                await kube.delete_object(kind, item["metadata"]["name"], namespace)
    for claim in await kube.list_nodeclaims():
        if claim.metadata.finalizers:
            await kube.patch_nodeclaim_metadata(claim.name, remove_finalizers=list(claim.metadata.finalizers))
        await kube.delete_nodeclaim(claim.name)
    await _delete_nodes(kube)
    for kind in CLUSTER_KINDS:
        for item in await kube.list_objects(kind):
            await kube.delete_object(kind, item["metadata"]["name"])
    rotated = f"{MANAGED_BY_LABEL}={MANAGED_BY}"  # launches would join with a rotated bootstrap token
    for item in await kube.list_objects("Secret", TOKEN_NAMESPACE, label_selector=rotated):
        await kube.delete_object("Secret", item["metadata"]["name"], TOKEN_NAMESPACE)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pods = [pod for namespace in WORKLOAD_NAMESPACES for pod in await kube.list_pods(namespace)]
        for pod in pods:
            await kube.delete_pod(
                pod.metadata.namespace or "default", pod.metadata.name, grace_period_seconds=0
            )
        # A VM the last test's emulated AKS still ran may register its Node again after the first delete.
        await _delete_nodes(kube)
        left = [f"{len(pods)} pods"] if pods else []
        left += [f"{kind}s" for kind in ("NodeClaim", "Node") if await kube.list_objects(kind)]
        if not left:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the cluster was not clean within {timeout:g} s: {', '.join(left)} left")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def fresh_aks(plane: ControlPlane, settings: AksSettings | None = None) -> AsyncIterator[SimulatedAks]:
    """The control plane wiped clean (before and after), and an emulated Azure of the test's own around it (instant boots unless
    `settings` say otherwise). Its cluster name is new: workflow ids (`provisioner/<cluster>`, ...) outlive a
    test on the shared dev server."""
    settings = settings or AksSettings.instant(seed=3)
    settings.cluster_name = f"c-{uuid.uuid4().hex[:10]}"
    async with simulated_aks(plane, settings, poll_interval=timedelta(0)) as aks:
        await reset_cluster(aks.kube)
        try:
            yield aks
        finally:
            # Also afterwards, for the tests of this process that use the control plane without this.
            await reset_cluster(aks.kube)


EXAMPLES = Path(__file__).parents[1] / "deploy" / "examples"
SCHEDULING_TIMEOUT = 30.0
"""How long kube-scheduler may take to try a new pod (it tries at once; this is for a loaded machine)."""


WINDOWS_EXAMPLE = "windows.yaml"


def example_paths(windows: bool = False) -> list[Path]:
    """deploy/examples' files: a Linux cluster's, and with `windows` its Windows NodePool, AKSNodeClass and
    deployment too (`docs/windows.md`)."""
    return [path for path in sorted(EXAMPLES.glob("*.yaml")) if windows or path.name != WINDOWS_EXAMPLE]


async def apply_examples(kube: KubernetesCluster, windows: bool = False) -> None:
    """`deploy/examples/` (`example_paths`), with the AKSNodeClass status the image controller would write."""
    for path in example_paths(windows):
        await kube.apply(path.read_text())


def is_unschedulable(pod: Pod) -> bool:
    """Whether kube-scheduler tried the pod and found no node for it (`PodScheduled=False`, `Unschedulable`)."""
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions
    )


async def unschedulable(kube: KubernetesCluster, app: str, count: int) -> list[str]:
    """The keys (`default/<name>`) of the app's pods once all `count` exist and kube-scheduler has marked every
    one unschedulable."""

    async def marked() -> list[str]:
        pods = await kube.list_pods("default", label_selector=f"app={app}")
        if len(pods) != count or not all(is_unschedulable(pod) for pod in pods):
            return []
        return sorted(f"default/{pod.metadata.name}" for pod in pods)

    return await eventually(marked, timeout=SCHEDULING_TIMEOUT, what=f"{count} unschedulable {app} pods")


async def scale_pending(kube: KubernetesCluster, app: str, replicas: int) -> list[str]:
    """Scale the deployment and wait until its pods are unschedulable; their keys."""
    await kube.scale("Deployment", "default", app, replicas)
    return await unschedulable(kube, app, replicas)


def activity_environment(run_id: str | None = None, attempt: int = 1) -> ActivityEnvironment:
    """An activity environment whose workflow run (and so every NodeClaim name a plan derives) is new."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, workflow_run_id=run_id or uuid.uuid4().hex, attempt=attempt
    )
    return environment


async def events(
    kube: KubernetesCluster, reason: str, regarding: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The `events.k8s.io/v1` Events in `default` with this reason, about the named objects when given."""
    return [
        event
        for event in await kube.list_objects("Event", "default")
        if event.get("reason") == reason
        and (regarding is None or (event.get("regarding") or {}).get("name") in regarding)
    ]


@contextlib.asynccontextmanager
async def process_kubelet(plane: ControlPlane, directory: Path, *flags: str) -> AsyncIterator[Path]:
    """`python -m simulator.kubelet` with `flags` on the control plane, its state in `directory`, from the moment
    its Nodes are registered to the block's end (then SIGTERM: its pods stop, its Nodes go); the directory, where
    its pods' logs are (`pods/<namespace>_<pod>_<uid>/<container>/<restart>.log`; its own is `kubelet.log`)."""
    directory.mkdir(parents=True)
    with (directory / "kubelet.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "simulator.kubelet",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--directory",
            str(directory),
            *flags,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(60):
            line = await process.stdout.readline()
        assert line.decode().strip() == "ready", (directory / "kubelet.log").read_text()
        yield directory
    finally:
        if process.returncode is None:
            process.terminate()
        async with asyncio.timeout(30):
            await process.wait()
