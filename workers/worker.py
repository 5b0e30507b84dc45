"""The worker: hosts every workflow (provisioner, NodeClaim lifecycles, disruption, maintenance) and their
activities on one task queue, all in one process or split by role between processes (`WorkerRole`)."""

from __future__ import annotations

import compileall
import logging
from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import workflows
from activities.azure.prices import PriceSettings
from activities.azure.provider import AzureCloudProvider
from activities.capacity_window import CapacityWindowActivities
from activities.catalog_source import CatalogSource
from activities.cloud import CloudActivities
from activities.disruption import DisruptionActivities
from activities.kube import KubeActivities
from activities.lifecycle import LifecycleActivities
from activities.metrics import Metrics, default_metrics
from activities.planning import LifecycleStarter
from activities.static import StaticActivities
from core import summaries
from core.cloudprovider import CloudProvider
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog
from core.messages import LifecycleInput, Phase
from workers.metrics import MeteredCloudProvider
from workers.schedules import maintenance_activities, maintenance_workflows
from workers.settings import TemporalConnection
from workflows import search_attributes as attributes
from workflows.capacity_window import CapacityWindowWorkflow
from workflows.disruption import DisruptionWorkflow
from workflows.nodeclaim import LOCAL_ACTIVITIES, NodeClaimWorkflow
from workflows.provisioner import ProvisionerWorkflow, nodeclaim_id
from workflows.static import StaticNodePoolWorkflow

logger = logging.getLogger("nodewright.worker")

MAX_CACHED_WORKFLOWS = 5000
"""Workflows a worker keeps in memory between their tasks (the SDK's default is 1,000)."""
ACTIVITY_SLOTS = 256
"""Activities one worker process runs at once (the SDK's default is 100). A launch holds its slot until its VM's
create ends, tens of seconds on Azure, and a drain until its pods are gone. At 64, 1,000 NodeClaims whose VMs
took 30 s each launched 64 at a time, and half of them outlasted the 5-minute launch timeout; at 1,000, one
event loop polling every VM's create fell behind, and each launch took four times its VM (docs/benchmarks.md)."""
WORKFLOW_TASKS = 16
"""Workflow tasks one worker process holds at once (the SDK's default is 100). A task's 10 s timeout runs from
the moment the worker takes it; Python works on one at a time, so a task taken behind 99 others on a busy worker
timed out, and the worker replayed its workflow from the whole history, which cost more time than the task.
Tasks it has not taken wait in Temporal, where nothing times out against it."""
STICKY_SECONDS = timedelta(seconds=30)
"""How long a cached workflow's next task waits for this worker before any worker may take it (and replay its
whole history). At 2 s, a worker busy with a thousand launches let a third of its workflow tasks time out to the
shared queue, and replayed them; at the SDK's 10 s, 74 of 1,000 lifecycles' tasks still did on an idle 2-core
machine. A worker that died is not waited for: the server stops using a sticky queue nobody polls."""


class WorkerRole(StrEnum):
    """What one worker process polls its task queue for (`nodewright worker --role`). Python runs one thread at a
    time: a process that hosts both spends its one core on workflow tasks, whose 10 s timeout runs while they
    wait, and on the activities' API calls alike. Split, each role gets a process (and a core) of its own."""

    ALL = "all"
    """Workflow and activity tasks."""
    WORKFLOWS = "workflows"
    """Workflow tasks, and the lifecycle's local activities, which run inside them."""
    ACTIVITIES = "activities"
    """Activity tasks: planning, launches, terminations, disruption's steps, maintenance."""

    @property
    def runs_workflows(self) -> bool:
        return self is not WorkerRole.ACTIVITIES

    @property
    def runs_activities(self) -> bool:
        return self is not WorkerRole.WORKFLOWS


WORKFLOWS: Sequence[type] = (
    ProvisionerWorkflow,
    NodeClaimWorkflow,
    DisruptionWorkflow,
    StaticNodePoolWorkflow,
    CapacityWindowWorkflow,
    *maintenance_workflows(),
)


async def start_lifecycle(
    client: Client,
    task_queue: str,
    request: LifecycleInput,
    start_signal: str | None = None,
    signal_argument: object = None,
) -> None:
    """Start a NodeClaim's lifecycle workflow, with the summary the Temporal UI lists it by; starting one that
    already runs is a no-op (a retried plan). `start_signal` is delivered with the start (signal-with-start)."""
    await client.start_workflow(
        NodeClaimWorkflow.run,
        request,
        id=nodeclaim_id(request.nodeclaim.name),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        # The planning activity runs on a worker of this queue: the start's answer carries the first
        # workflow task to it, one trip through the server's matching fewer per lifecycle. (A signal-with-start
        # cannot start eagerly.)
        request_eager_start=start_signal is None,
        search_attributes=attributes.lifecycle_start(
            request.nodeclaim.name, request.nodeclaim.nodepool, Phase.LAUNCHING.value
        ),
        static_summary=summaries.lifecycle_summary(request.nodeclaim),
        static_details=summaries.lifecycle_details(request.nodeclaim),
        **({"start_signal": start_signal, "start_signal_args": [signal_argument]} if start_signal else {}),
    )


def lifecycle_starter(client: Client, task_queue: str) -> LifecycleStarter:
    """`start_lifecycle` on this client and queue, as the planning activities call it."""

    async def start(request: LifecycleInput) -> None:
        await start_lifecycle(client, task_queue, request)

    return start


def activities_for(
    cluster: ClusterAPI,
    cloud: CloudProvider,
    catalog: AzureCatalog | CatalogSource,
    start_lifecycle: LifecycleStarter,
    prices: PriceSettings | None = None,
    metrics: Metrics | None = None,
) -> list[Any]:
    """Every activity, bound to the cluster and cloud they act on and to one catalog that refreshes replace,
    counting into `metrics` (the process's by default).

    The maintenance activities (catalog refresh, garbage collection) need the Azure provider itself, so only
    the lifecycle's and termination's cloud calls are timed."""
    metrics = metrics or default_metrics()
    catalogs = CatalogSource.of(catalog)
    metered = MeteredCloudProvider(cloud, metrics)
    kube = KubeActivities(cluster, metrics)
    lifecycle = LifecycleActivities(cluster, metered, catalogs, metrics)
    planning = StaticActivities(cluster, catalogs, start_lifecycle, metrics)
    maintenance = (
        maintenance_activities(cluster, cloud, catalogs, prices)
        if isinstance(cloud, AzureCloudProvider)
        else []
    )
    windows = CapacityWindowActivities(cluster)  # type: ignore[arg-type]
    return [
        planning.plan_provisioning,
        planning.reconcile_static_nodepool,
        lifecycle.launch_nodeclaim,
        lifecycle.register_nodeclaim,
        lifecycle.initialize_nodeclaim,
        kube.update_nodeclaim,
        kube.taint_for_termination,
        kube.begin_termination,
        kube.drain_node,
        kube.await_volume_detachment,
        kube.delete_node,
        kube.delete_unregistered_node,
        kube.delete_nodeclaim,
        CloudActivities(metered, cluster).delete_instance,
        *disruption_activities(DisruptionActivities(cluster, catalogs, start_lifecycle, metrics)),
        windows.raise_window_replicas,
        windows.restore_window_replicas,
        *maintenance,
    ]


def disruption_activities(disruption: DisruptionActivities) -> list[Any]:
    return [
        disruption.plan_disruption,
        disruption.taint_candidates,
        disruption.untaint_candidates,
        disruption.launch_replacements,
        disruption.replacement_progress,
        disruption.steer_drain,
        disruption.release_held,
        disruption.record_events,
    ]


def compile_workflows() -> None:
    """Write the bytecode of the workflow modules if it is missing. The sandbox imports a workflow's module
    afresh for every run it starts or replays; without bytecode (PYTHONDONTWRITEBYTECODE set and none shipped)
    each import compiles the source again, 12 ms for the NodeClaim lifecycle's on this machine (when it runs
    sandboxed: `build_worker(sandbox_lifecycles=True)`). A directory we
    may not write to (an image that ships bytecode, or does not) only costs that time."""
    if not compileall.compile_dir(Path(workflows.__file__).parent, quiet=2):
        logger.info("could not write the workflow modules' bytecode: the sandbox compiles them at each run")


def build_worker(
    client: Client,
    task_queue: str,
    cluster: ClusterAPI,
    cloud: CloudProvider,
    catalog: AzureCatalog | CatalogSource,
    prices: PriceSettings | None = None,
    shutdown_grace: timedelta = timedelta(seconds=5),
    role: WorkerRole = WorkerRole.ALL,
    workflow_tasks: int = WORKFLOW_TASKS,
    sandbox_lifecycles: bool = False,
    activity_slots: int = ACTIVITY_SLOTS,
) -> Worker:
    """A worker for our workflows and activities, or for the ones its `role` takes.

    `shutdown_grace` applies when `shutdown()` is called: polling stops at once, running activities get that
    long to finish, then they are cancelled and Temporal retries them elsewhere. The NodeClaim lifecycle runs
    outside the SDK's sandbox unless `sandbox_lifecycles` (the tests' workers); the others run in it."""
    activities = activities_for(cluster, cloud, catalog, lifecycle_starter(client, task_queue), prices)
    if role is WorkerRole.WORKFLOWS:
        activities = [activity for activity in activities if activity.__name__ in LOCAL_ACTIVITIES]
    if role.runs_workflows:
        compile_workflows()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS) if role.runs_workflows else [],
        activities=activities,
        no_remote_activities=not role.runs_activities,
        sticky_queue_schedule_to_start_timeout=STICKY_SECONDS,
        graceful_shutdown_timeout=shutdown_grace,
        max_concurrent_activities=activity_slots,
        max_concurrent_workflow_tasks=workflow_tasks,
        # Every node's lifecycle stays open while the node lives, plus the provisioner: with the SDK's 1,000
        # a worker of a cluster of 1,000 nodes evicts workflows and replays their whole history at each task.
        max_cached_workflows=MAX_CACHED_WORKFLOWS,
        unsandboxed_workflow_runner=SandboxedWorkflowRunner()
        if sandbox_lifecycles
        else UnsandboxedWorkflowRunner(),
    )


async def connect(target: str | TemporalConnection, namespace: str = "default") -> Client:
    """A Temporal client that speaks pydantic payloads, to an address (plain gRPC, as the dev server serves
    it) or as a `TemporalConnection` says (mTLS, a server CA and name, a Temporal Cloud API key)."""
    connection = target if isinstance(target, TemporalConnection) else TemporalConnection(target, namespace)
    tls: TLSConfig | bool = False
    if connection.tls:
        tls = TLSConfig(
            server_root_ca_cert=connection.server_root_ca,
            domain=connection.server_name,
            client_cert=connection.client_cert,
            client_private_key=connection.client_key,
        )
    return await Client.connect(
        connection.address,
        namespace=connection.namespace,
        api_key=connection.api_key,
        tls=tls,
        data_converter=pydantic_data_converter,
    )


class TemporalUnreachableError(RuntimeError):
    """The configured Temporal cannot be reached; the message names the address and the variable."""


async def connect_configured(target: str | TemporalConnection, namespace: str = "default") -> Client:
    """`connect` for the CLI's commands: an unreachable server is one clear line, not a transport traceback."""
    address = target.address if isinstance(target, TemporalConnection) else target
    try:
        return await connect(target, namespace)
    except RuntimeError as error:
        raise TemporalUnreachableError(
            f"cannot reach Temporal at {address} (NODEWRIGHT_TEMPORAL_ADDRESS): {error}"
        ) from None
