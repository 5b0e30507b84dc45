"""Durability: NodeClaims survive a worker killed with SIGKILL mid-launch, and a Temporal server restart.

The system runs as `nodewright demo` runs it, except that the worker is a real `nodewright worker` process
(configured through the environment as on AKS: a kubeconfig for the real API server of the test process's
control plane, its Azure provider pointed at the emulated ARM; SIGKILL loses whatever it held in memory,
including a VM create it was polling) and the dev server keeps its state in a database file (so it can
die and come back). The emulated Azure and the controller run in the test process: they are the cloud and
the cluster's watch, which outlive any worker. A deployment whose pods refuse to share a node makes one NodeClaim per
replica; while they launch, a process dies. Afterwards every NodeClaim must be Initialized with its workflow
Running, with exactly one instance each and no instance without a NodeClaim.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from activities.kubeclient.cluster import KubernetesCluster
from core.api.nodeclaim import NodeClaim
from core.cloudprovider import CloudProvider
from core.messages import LifecycleSettings, LifecycleStatus, Phase, ProvisionerInput
from simulator.aks import AksSettings
from simulator.aks_client import AksEmulatorClient
from simulator.arm import ArmSettings, Counters
from simulator.nodeagent import NodeAgentSettings
from tests.cluster import fresh_aks
from tests.workflows.conftest import PAUSE
from workers.azure import cloud_provider, emulator_environment
from workers.controller import Controller
from workers.controlplane.run import ControlPlane
from workers.settings import env_var
from workers.temporal_server import DevServer
from workers.worker import connect
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import nodeclaim_id

NODEWRIGHT = Path(sys.executable).parent / "nodewright"
APP = "spread"
REPLICAS = 10
STEP_TIMEOUT = 45.0
"""Seconds a step may take when nothing was interrupted (each needs one or two; the first also waits for the
worker process to start, which on 2 busy cores can take ten)."""
RECOVERY_TIMEOUT = 60.0
"""Seconds for every NodeClaim to be Initialized after the interruption: a launch that died with the worker is
retried after its heartbeat timeout (15 s, the default), far within its start-to-close timeout (300 s)."""

OUTAGE_SECONDS = 2.0

T = TypeVar("T")


def aks_settings() -> AksSettings:
    """A cloud slow enough to interrupt between a launch and its node turning Ready, fast enough for CI: VM
    creates take a few polls of the worker's provider (0.1 s apart), then the VM boots and its node joins."""
    delay = timedelta(seconds=0.5)
    return AksSettings(
        seed=3,
        arm=ArmSettings(seed=3, create_polls=3, delete_polls=3),
        agent=NodeAgentSettings(boot_delay=delay, registration_delay=delay),
    )


def provisioner_input(cluster: str) -> ProvisionerInput:
    """Short batches and polls; a launch keeps the production timeouts (5 minutes to finish, retried 15 s after
    its last heartbeat), so a launch lost with its worker is retried by its heartbeat timeout; a plan after 3 s
    without a heartbeat."""
    return ProvisionerInput(
        cluster=cluster,
        batch_idle_seconds=1,
        batch_max_seconds=3,
        plan_heartbeat_seconds=3,
        lifecycle=LifecycleSettings(
            registration_ttl_seconds=120,
            poll_seconds=1,
            drain_retry_seconds=1,
            activity_timeout_seconds=5,
        ),
    )


def nodepool() -> list[dict[str, Any]]:
    """A NodePool without limits, so one plan makes every NodeClaim (under a CPU limit the scheduler holds back
    NodeClaims whose largest instance-type option could exceed it, as Karpenter does), and its node class."""
    requirements = [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]},
    ]
    node_class_ref = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}
    return [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": node_class_ref, "requirements": requirements}}},
        },
        {
            "apiVersion": "karpenter.azure.com/v1beta1",
            "kind": "AKSNodeClass",
            "metadata": {"name": "default"},
        },
    ]


def one_pod_per_node(name: str, replicas: int) -> dict[str, Any]:
    """A Deployment whose pods may not share a node (required anti-affinity on the hostname)."""
    selector = {"matchLabels": {"app": name}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": PAUSE,
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
                            ]
                        }
                    },
                },
            },
        },
    }


# ------------------------------------------------------------------------------------------------ the system


@dataclass
class WorkerProcess:
    """`nodewright worker` as a child process; its output goes to a log file that failure messages quote."""

    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> None:
        assert NODEWRIGHT.exists(), f"{NODEWRIGHT} is missing: install the project (`make test` does)"
        assert self.process is None or self.process.poll() is not None, "a worker is already running"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by kill)
        self._log.write(b"----- worker started -----\n")
        self._log.flush()
        self.process = subprocess.Popen(
            [str(NODEWRIGHT), "worker"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would end it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def check_alive(self) -> None:
        if self.process is not None and (code := self.process.poll()) is not None:
            raise AssertionError(f"the worker exited on its own with code {code}\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "worker log (end):\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class System:
    temporal: DevServer
    client: Client
    kube: KubernetesCluster
    aks: AksEmulatorClient
    cloud: CloudProvider
    """The Azure provider on the emulated ARM, in this process: to list what the worker made."""
    worker: WorkerProcess
    controller: asyncio.Task[None]

    def check_processes(self) -> None:
        """Fail at once, with the reason, when the worker or the controller died on its own."""
        self.worker.check_alive()
        if self.controller.done() and not self.controller.cancelled():
            raise AssertionError(f"the controller stopped: {self.controller.exception()!r}")

    async def wait(self, what: str, check: Callable[[], Awaitable[T]], timeout: float = STEP_TIMEOUT) -> T:
        """The first truthy result of `check`, polled until `timeout`; then fail saying what did not happen,
        with the state of every NodeClaim and its workflow."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_processes()
            if result := await check():
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not reached within {timeout:g} s\n{await self.report()}\n{self.worker.log_tail()}"
                )
            await asyncio.sleep(0.1)

    async def report(self) -> str:
        """Each NodeClaim's conditions and what its workflow waits for (pending activities)."""
        lines = [f"ARM: {await self.aks.counters()}", "NodeClaims:"]
        for claim in sorted(await self.kube.list_nodeclaims(), key=lambda c: c.name):
            description = await self.client.get_workflow_handle(nodeclaim_id(claim.name)).describe()
            pending = [
                f"{activity.activity_type.name} attempt {activity.attempt} "
                f"{PendingActivityState.Name(activity.state).removeprefix('PENDING_ACTIVITY_STATE_')}"
                for activity in description.raw_description.pending_activities
            ]
            lines.append(
                f"  {claim.name}: {_conditions(claim)}; workflow {description.status.name if description.status else '?'}"
                f", pending activities: {', '.join(pending) or 'none'}"
            )
        return "\n".join(lines)


@contextlib.asynccontextmanager
async def running_system(tmp_path: Path, plane: ControlPlane) -> AsyncIterator[System]:
    """Dev server on a database file, emulated Azure and controller in this process, a worker subprocess."""
    task_queue = f"durability-{uuid.uuid4().hex[:8]}"
    async with (
        DevServer(db_filename=tmp_path / "temporal.db", log_path=tmp_path / "temporal.log") as temporal,
        fresh_aks(plane, aks_settings()) as aks,
        cloud_provider(aks.kube, aks.azure) as cloud,
    ):
        cluster = aks.azure.settings.cluster_name
        worker = WorkerProcess(
            env={
                **os.environ,
                **emulator_environment(aks.emulated.info),
                env_var("temporal_address"): temporal.target,
                env_var("kubeconfig"): str(plane.kubeconfig),
                env_var("task_queue"): task_queue,
                env_var("cluster_name"): cluster,
                # No /metrics or probes: ports 8080 and 8081 may be taken on a test machine.
                env_var("metrics_port"): "0",
                env_var("health_probe_port"): "0",
            },
            log_path=tmp_path / "worker.log",
        )
        client = await connect(temporal.target)
        controller = asyncio.create_task(
            Controller(client, aks.kube, provisioner_input(cluster), task_queue).run()
        )
        try:
            worker.start()
            await aks.kube.apply(nodepool())
            yield System(temporal, client, aks.kube, aks.emulator, cloud, worker, controller)
        finally:
            worker.kill()
            controller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await controller


# ------------------------------------------------------------------------------------------- the scenario


async def launch_and_interrupt(system: System, interrupt: Callable[[], Awaitable[None]]) -> None:
    """Scale to REPLICAS one-pod-per-node pods, interrupt as soon as the first instance exists (the other
    launches are under way or yet to come), then check that the system ends as if nothing had happened."""
    await system.kube.apply([one_pod_per_node(APP, REPLICAS)])

    async def launching() -> bool:
        return (await system.aks.counters()).vms_created >= 1

    await system.wait("the first VM created", launching)
    claims = await system.kube.list_nodeclaims()
    assert not all(_initialized(claim) for claim in claims), "every NodeClaim was Initialized already"
    await interrupt()
    await assert_end_state(system)


async def assert_end_state(system: System) -> None:
    async def all_initialized() -> list[NodeClaim] | None:
        claims = await system.kube.list_nodeclaims()
        return claims if len(claims) >= REPLICAS and all(_initialized(claim) for claim in claims) else None

    claims = await system.wait(f"{REPLICAS} NodeClaims Initialized", all_initialized, RECOVERY_TIMEOUT)
    names = sorted(claim.name for claim in claims)
    assert len(names) == REPLICAS, f"one NodeClaim per pod expected, got {len(names)}: {names}"

    async def all_running() -> bool:
        pods = await system.kube.list_pods("default", label_selector=f"app={APP}")
        return len(pods) == REPLICAS and all(pod.status and pod.status.phase == "Running" for pod in pods)

    await system.wait(f"{REPLICAS} pods Running", all_running)
    for name in names:
        handle = system.client.get_workflow_handle(nodeclaim_id(name))

        async def in_phase_running(handle: Any = handle) -> LifecycleStatus | None:
            status: LifecycleStatus = await handle.query(NodeClaimWorkflow.status)
            return status if status.phase is Phase.RUNNING else None

        await system.wait(f"workflow {nodeclaim_id(name)} in phase Running", in_phase_running)

    counters: Counters = await system.aks.counters()
    assert counters.vms_created == REPLICAS, (
        f"{counters.vms_created} VMs created for {REPLICAS} NodeClaims, one twice: {counters}"
    )
    assert counters.vms_deleted == 0, f"a VM was deleted: {counters}"
    instances = sorted(instance.name for instance in await system.cloud.list())
    assert instances == names, f"instances {instances} are not the NodeClaims {names}: one leaked"
    nodes = sorted(node.spec.provider_id or "" for node in await system.kube.list_nodes())
    assert nodes == sorted(claim.status.provider_id or "" for claim in claims), (
        f"the Nodes {nodes} are not those of the NodeClaims"
    )


def _initialized(claim: NodeClaim) -> bool:
    condition = claim.status.condition("Initialized")
    return condition is not None and condition.status == "True"


def _conditions(claim: NodeClaim) -> str:
    return ", ".join(f"{c.type}={c.status}" for c in claim.status.conditions) or "no conditions"


# ------------------------------------------------------------------------------------------------------ tests


async def test_worker_killed_mid_launch_then_replaced(tmp_path: Path, control_plane: ControlPlane) -> None:
    async with running_system(tmp_path, control_plane) as system:

        async def kill_and_replace_worker() -> None:
            system.worker.kill()
            system.worker.start()

        await launch_and_interrupt(system, kill_and_replace_worker)


async def test_temporal_server_restarted_mid_launch(tmp_path: Path, control_plane: ControlPlane) -> None:
    async with running_system(tmp_path, control_plane) as system:

        async def restart_server() -> None:
            await system.temporal.kill()
            await asyncio.sleep(OUTAGE_SECONDS)  # long enough for the worker's calls to fail, not just stall
            await system.temporal.start()

        await launch_and_interrupt(system, restart_server)
