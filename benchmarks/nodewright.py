"""nodewright as the benchmarks run it on a control plane of their own: the emulated Azure
(`python -m simulator --instant`, whose VMs join the cluster), and the `nodewright worker` and `nodewright
controller` processes pointed at it, at a Temporal dev server and at the control plane, each on ports of its own
as each would be its own pod. Shared by the lifecycle, chaos and consolidation benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from benchmarks.processes import (
    ROOT,
    STARTUP_SECONDS,
    child_process,
    connections,
    log_path,
    tail,
    until,
)
from core.errors import TransientError
from simulator.aks_client import AksEmulatorClient
from simulator.arm_tls import CA_FILE_NAME
from workers.azure import emulator_environment
from workers.controlplane.run import ControlPlane
from workers.temporal_server import free_port
from workflows.disruption import disruption_id

CLUSTER = "bench"
WORKER = "worker"
"""The name of a run's one worker process, and the prefix of each of several."""
ARM_RETRY_AFTER_SECONDS = 3.0
"""With `vm_create_seconds`: how long the SDK waits between two reads of an operation's status (the
Retry-After the emulator sends; the AKS provider polls VM creates every 3 s)."""
CONTROLLER_WATCHES = 5
"""The connections a ready controller holds to the API server: it lists and watches five kinds, each on one."""


def examples(root: Path = ROOT) -> list[dict[str, Any]]:
    """deploy/examples/ of this tree (or another: a release's), its Linux cluster (not windows.yaml, which
    Karpenter's side has no counterpart of), without the NodePool's CPU limit so that every benchmark node fits."""
    documents = []
    for path in sorted((root / "deploy" / "examples").glob("*.yaml")):
        if path.name == "windows.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if not document:
                continue
            if document.get("kind") == "NodePool":
                document["spec"].pop("limits", None)
            documents.append(document)
    return documents


@contextlib.asynccontextmanager
async def emulated_azure(
    plane: ControlPlane,
    directory: Path,
    logs: Path,
    seed: int = 0,
    vm_create_seconds: float = 0.0,
    boot_seconds: float = 0.0,
) -> AsyncIterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """`python -m simulator --instant` around the control plane, in its own process, for the block; yields the
    process and the `NODEWRIGHT_*` variables that point a worker at it (from its `GET /_emulator/aks`). With
    `vm_create_seconds`, each VM's create takes that long, and every long-running operation answers with
    `Retry-After: ARM_RETRY_AFTER_SECONDS`, as Azure's do (the worker polls at 0.1 s otherwise); with
    `boot_seconds`, each node's agent starts that long after its VM's create ended (an AKS node's kubelet
    registers some seconds after the VM is made)."""
    port, ca_dir = free_port(), directory / "emulated-aks"
    command = [
        *(sys.executable, "-m", "simulator", "--instant", "--kubeconfig", str(plane.kubeconfig)),
        *("--bootstrap-token-secret", plane.bootstrap_token_secret, "--cluster-name", CLUSTER),
        *("--port", str(port), "--ca-dir", str(ca_dir), "--seed", str(seed)),
    ]
    async with child_process(command, logs / "azure.log") as process:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the emulated Azure exited:\n{tail(logs / 'azure.log')}")
            if (ca_dir / CA_FILE_NAME).is_file():
                async with AksEmulatorClient(f"https://127.0.0.1:{port}", ca_dir / CA_FILE_NAME) as emulator:
                    with contextlib.suppress(TransientError):
                        info = await emulator.cluster_info()
                        if vm_create_seconds:
                            await emulator.update_settings(
                                {
                                    "arm": {
                                        "vm_create_seconds": vm_create_seconds,
                                        "poll_retry_after": ARM_RETRY_AFTER_SECONDS,
                                    }
                                }
                            )
                        if boot_seconds:
                            await emulator.update_settings({"agent": {"boot_delay": boot_seconds}})
                        break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the emulated Azure did not answer within {STARTUP_SECONDS:g} s")
            await asyncio.sleep(0.2)
        yield process, emulator_environment(info)


def worker_roles(workers: int, split: bool) -> dict[str, str]:
    """The worker processes of a run by name, with the `--role` each runs: one `all` (`worker`), `workers` of
    them (`worker 1`, ...), or, split, `worker workflows` and `worker activities`."""
    if split:
        return {f"{WORKER} {role}": role for role in ("workflows", "activities")}
    if workers == 1:
        return {WORKER: "all"}
    return {f"{WORKER} {index}": "all" for index in range(1, workers + 1)}


def is_worker(name: str) -> bool:
    return name == WORKER or name.startswith(WORKER + " ")


def settings(
    plane: ControlPlane, temporal_target: str, task_queue: str, azure_environment: dict[str, str]
) -> dict[str, str]:
    """The environment every nodewright process of a run shares: the control plane, Temporal, the emulated
    Azure, and a longer leader-election lease than the default."""
    return {
        "NODEWRIGHT_KUBECONFIG": str(plane.kubeconfig),
        "NODEWRIGHT_TEMPORAL_ADDRESS": temporal_target,
        "NODEWRIGHT_TASK_QUEUE": task_queue,
        "NODEWRIGHT_CLUSTER_NAME": CLUSTER,
        # On a loaded machine the API server can take longer than the default 8 s renew deadline to
        # answer the Lease's update; the (only) controller then exits by design and the run is lost.
        "NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS": "60",
        "NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS": "50",
        **azure_environment,
    }


async def has_pollers(client: Client, task_queue: str) -> bool:
    """Whether some worker polls the task queue for both workflow and activity tasks."""
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace, task_queue=TaskQueue(name=task_queue), task_queue_type=kind
            )
        )
        if not response.pollers:
            return False
    return True


async def workflow_exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except Exception:
        return False
    return True


@contextlib.asynccontextmanager
async def running_nodewright(
    plane: ControlPlane,
    logs: Path,
    environment: dict[str, str],
    workers: dict[str, str],
    client: Client,
    watched: dict[str, subprocess.Popen[bytes]],
) -> AsyncIterator[dict[str, subprocess.Popen[bytes]]]:
    """The worker processes (`workers`: name to `--role`) and the controller, with `environment` (`settings`
    and more), for the block; yields them by name once a worker polls the task queue and the controller has
    started the disruption loop and watches the API server. Waiting fails, with the end of its log, if one of
    them or of the `watched` processes exits."""
    nodewright = (sys.executable, "-m", "workers.cli")
    api_port = int(plane.server.rpartition(":")[2])

    # Each process serves /metrics and its probes on ports of its own, as each is its own pod in a cluster
    # (free ones: nothing to collide with other runs on this machine).
    def own_ports() -> dict[str, str]:
        return {
            **environment,
            "NODEWRIGHT_METRICS_PORT": str(free_port()),
            "NODEWRIGHT_HEALTH_PROBE_PORT": str(free_port()),
        }

    async with contextlib.AsyncExitStack() as stack:
        ours: dict[str, subprocess.Popen[bytes]] = {}
        for name, role in workers.items():
            ours[name] = await stack.enter_async_context(
                child_process((*nodewright, "worker", "--role", role), log_path(logs, name), own_ports())
            )
        controller = await stack.enter_async_context(
            child_process((*nodewright, "controller"), logs / "controller.log", own_ports())
        )
        ours["controller"] = controller
        everything = {**watched, **ours}
        task_queue = environment["NODEWRIGHT_TASK_QUEUE"]
        await until(
            "the worker did not poll its task queue",
            lambda: has_pollers(client, task_queue),
            everything,
            logs,
        )

        async def controller_ready() -> bool:
            # It starts the disruption loop, then lists and watches five kinds, each on a connection.
            return await workflow_exists(client, disruption_id(CLUSTER)) and (
                connections(controller.pid, api_port) >= CONTROLLER_WATCHES
            )

        await until("the controller did not watch the API server", controller_ready, everything, logs)
        yield ours
