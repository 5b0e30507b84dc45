"""The whole system for workflow tests: the test process's real control plane (wiped before each test), an
emulated Azure of the test's own around it, a worker on the test's task queue of the shared dev server,
optionally the controller, and readers for what happened (a watch of the API server, workflow histories,
NodeClaim conditions).

Every wait in the lifecycle is shrunk (`FAST`): registration TTL 3 s, polls every 1 to 4 s, drain retries every second.
Temporal timers have a 1 s resolution, so nothing here can be shorter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import pytest_asyncio
import yaml
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.kube import nodeclaim_object
from activities.kubeclient.cluster import KubernetesCluster
from activities.metrics import Metrics
from core import labels, summaries
from core.api.kube import Node, Pod
from core.api.nodeclaim import NodeClaim
from core.cloudprovider import CloudProvider
from core.cluster import WatchEvent
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import (
    LifecycleInput,
    LifecycleSettings,
    LifecycleStatus,
    OfferingChoice,
    Phase,
    PlannedNodeClaim,
    PodsPending,
    ProvisionerInput,
)
from simulator.aks import AksSettings
from simulator.aks_client import AksEmulatorClient
from tests.cluster import events, eventually, example_paths, fresh_aks, unschedulable
from workers.azure import cloud_provider
from workers.controller import Controller, lifecycle_adoption
from workers.controlplane.run import ControlPlane
from workers.worker import build_worker
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import ProvisionerWorkflow, nodeclaim_id, provisioner_id

PAUSE = "mcr.microsoft.com/oss/kubernetes/pause:3.6"
"""The image of every test pod (kwok runs no containers, but the API server requires an image)."""
CATALOG = load_shipped_catalog("eastus")
FAST = LifecycleSettings(
    registration_ttl_seconds=3,
    poll_seconds=1,
    poll_max_seconds=4,
    drain_retry_seconds=1,
    min_drain_seconds=1,
    launch_timeout_seconds=120,
    launch_attempt_timeout_seconds=30,
)
INSTANCE_TYPE = "Standard_D2s_v5"
"""A small amd64 size the example NodePool allows, on-demand in eastus-1..3 and without a zone ("0")."""

T = TypeVar("T")


def small_delays(seed: int = 1, boot: float = 0.0, registration: float = 0.0) -> AksSettings:
    """Instant, except for the VM boot and the node agent's registration (seconds)."""
    settings = AksSettings.instant(seed)
    settings.agent.boot_delay = timedelta(seconds=boot)
    settings.agent.registration_delay = timedelta(seconds=registration)
    return settings


# --- manifests ---------------------------------------------------------------------------------------------


def deployment(
    name: str, replicas: int, cpu: str = "500m", node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Deployment whose pods request `cpu` and carry `app: <name>`."""
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": PAUSE, "resources": {"requests": {"cpu": cpu}}}]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def pdb(app: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": min_available},
    }


def pinned(instance_type: str = INSTANCE_TYPE) -> dict[str, str]:
    """A node selector for one instance type, on-demand (its launch candidates are its on-demand zones)."""
    return {labels.INSTANCE_TYPE: instance_type, labels.CAPACITY_TYPE: labels.CAPACITY_TYPE_ON_DEMAND}


def example_manifests(windows: bool = False, **nodepool_template_spec: Any) -> str:
    """`deploy/examples/` as one YAML text (its Windows NodePool too with `windows`: `tests.cluster.example_paths`);
    keyword arguments are added to every NodePool's template spec."""
    documents = [
        document
        for path in example_paths(windows)
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]
    for document in documents:
        if document["kind"] == "NodePool":
            document["spec"]["template"]["spec"].update(nodepool_template_spec)
    return yaml.safe_dump_all(documents)


def planned_claim(
    name: str, candidates: Sequence[OfferingChoice], nodepool: str = "default"
) -> PlannedNodeClaim:
    """A NodeClaim as the provisioner would plan it, launching one of `candidates` in their order."""
    types = sorted({candidate.instance_type for candidate in candidates})
    return PlannedNodeClaim(
        name=name,
        nodepool=nodepool,
        launch_candidates=list(candidates),
        labels={labels.NODEPOOL: nodepool},
        requests={"cpu": "500m"},
        instance_types=", ".join(types),
    )


def claim_requirements(claim: PlannedNodeClaim) -> list[dict[str, object]]:
    """What the planning activity would have written on the NodeClaim for these candidates."""
    types = sorted({candidate.instance_type for candidate in claim.launch_candidates})
    return [
        {"key": labels.NODEPOOL, "operator": "In", "values": [claim.nodepool]},
        {"key": labels.INSTANCE_TYPE, "operator": "In", "values": types},
    ]


def fresh_name(prefix: str) -> str:
    """A NodeClaim name no other test uses (workflow ids live as long as the shared dev server)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def offering(
    zone: str, instance_type: str = INSTANCE_TYPE, capacity_type: str = "on-demand"
) -> OfferingChoice:
    return OfferingChoice(instance_type=instance_type, zone=zone, capacity_type=capacity_type, price_micros=1)


# --- reading what happened ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActivityCall:
    """One activity the workflow scheduled, with its input and (once completed) its result, still encoded; a
    local activity's history records no input (empty here)."""

    name: str
    input: Sequence[Any]
    result: Sequence[Any] | None


async def activity_calls(handle: WorkflowHandle[Any, Any]) -> list[ActivityCall]:
    """The activities of the handle's run (local ones included), in the order the workflow scheduled them."""
    history = await handle.fetch_history()
    scheduled: dict[int, tuple[str, Sequence[Any]]] = {}
    results: dict[int, Sequence[Any]] = {}
    for event in history.events:
        if (local := local_activity(event)) is not None:
            scheduled[event.event_id] = (local, [])
            results[event.event_id] = list(event.marker_recorded_event_attributes.details["result"].payloads)
        elif event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = (attributes.activity_type.name, list(attributes.input.payloads))
        elif event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            results[completed.scheduled_event_id] = list(completed.result.payloads)
    return [
        ActivityCall(name, payloads, results.get(event_id))
        for event_id, (name, payloads) in scheduled.items()
    ]


LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity(event: Any) -> str | None:
    """The activity type of a local activity's marker event; None for any other event."""
    if event.event_type != HistoryEventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER:
        return None
    return str(json.loads(marker.details["data"].payloads[0].data)["activity_type"])


TIMER = "timer"


async def step_summaries(client: Client, handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    """(activity name, or `TIMER`; its summary) of every activity and timer of the handle's run, in the order
    the workflow scheduled them: what the Temporal UI shows in place of the bare names ("" without one)."""
    history = await handle.fetch_history()
    steps = []
    for event in history.events:
        if (local := local_activity(event)) is not None:
            kind = local
        elif event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == HistoryEventType.EVENT_TYPE_TIMER_STARTED:
            kind = TIMER
        else:
            continue
        summary = ""
        if event.HasField("user_metadata") and event.user_metadata.HasField("summary"):
            summary = await decode(client, [event.user_metadata.summary], str)
        steps.append((kind, summary))
    return steps


async def signals(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, Sequence[Any]]]:
    """Signals the handle's run received (including a signal-with-start's), by name with their payloads."""
    history = await handle.fetch_history()
    return [
        (
            event.workflow_execution_signaled_event_attributes.signal_name,
            list(event.workflow_execution_signaled_event_attributes.input.payloads),
        )
        for event in history.events
        if event.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]


async def decode(client: Client, payloads: Sequence[Any], kind: type[T]) -> T:
    """One value of an activity's or signal's payloads."""
    [value] = await client.data_converter.decode(list(payloads), [kind])
    return value  # type: ignore[no-any-return]


async def started(handle: WorkflowHandle[Any, T]) -> WorkflowHandle[Any, T]:
    """The handle, once its workflow exists (a child starts a moment after the provisioner creates its
    NodeClaim)."""

    async def exists() -> bool:
        try:
            await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    await eventually(exists, what=f"workflow {handle.id} started")
    return handle


async def start_input(client: Client, handle: WorkflowHandle[Any, Any], kind: type[T]) -> T:
    """The input the handle's run started with (after a continue-as-new: what the last run carried over)."""
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    return await decode(client, started.input.payloads, kind)


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """What the workflow last said it is doing (`workflow.set_current_details`), as the UI shows it."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def in_phase(
    handle: WorkflowHandle[NodeClaimWorkflow, LifecycleStatus], phase: Phase
) -> LifecycleStatus | None:
    """The lifecycle's status once it is in `phase`, else None."""
    status = await handle.query(NodeClaimWorkflow.status)
    return status if status.phase is phase else None


async def assert_fell_back(
    system: System, name: str, status: LifecycleStatus, first: OfferingChoice, second: OfferingChoice
) -> None:
    """NodeClaim `name`'s first offering had no capacity (Azure's `ZonalAllocationFailed`), which a warning on the
    NodeClaim names as Karpenter's `InsufficientCapacityError` does, and it runs on its second."""
    assert [(f.instance_type, f.zone, f.capacity_type, f.kind) for f in status.launch_failures] == [
        (first.instance_type, first.zone, first.capacity_type, "InsufficientCapacity")
    ]
    assert (status.instance_type, status.zone, status.capacity_type) == (
        second.instance_type,
        second.zone,
        second.capacity_type,
    )
    [warning] = await events(system.kube, "InsufficientCapacityError", {name})
    assert warning["type"] == "Warning"
    offering = summaries.offering_text(first)
    assert warning["note"].startswith(f"NodeClaim {name} event: {offering}: "), warning["note"]
    assert "ZonalAllocationFailed" in warning["note"], warning["note"]


def condition(claim: NodeClaim, kind: str) -> tuple[str, str] | None:
    """(status, reason) of a NodeClaim condition, None when it is not set."""
    found = claim.status.condition(kind)
    return None if found is None else (found.status, found.reason)


# --- the system under test ---------------------------------------------------------------------------------


@dataclass
class System:
    """One test's cluster and emulated Azure, its Temporal client and task queue, and a record of every watch
    event."""

    client: Client
    kube: KubernetesCluster
    aks: AksEmulatorClient
    task_queue: str
    cluster: str
    cloud: CloudProvider
    """The Azure provider on the emulated ARM, as the worker uses it."""
    events: list[WatchEvent] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    # --- starting things ---

    def provisioner_input(self, **fields: Any) -> ProvisionerInput:
        return ProvisionerInput(cluster=self.cluster, **{"lifecycle": FAST, **fields})

    def provisioner(self) -> WorkflowHandle[ProvisionerWorkflow, None]:
        return self.client.get_workflow_handle_for(ProvisionerWorkflow.run, provisioner_id(self.cluster))

    async def start_provisioner(
        self, pods: Sequence[str] = (), **fields: Any
    ) -> WorkflowHandle[ProvisionerWorkflow, None]:
        """Start the provisioner (as the controller would, with the pods as its first signal when given)."""
        extra: dict[str, Any] = {}
        if pods:
            extra = {"start_signal": "pods_pending", "start_signal_args": [PodsPending(pods=list(pods))]}
        return await self.client.start_workflow(
            ProvisionerWorkflow.run,
            self.provisioner_input(**fields),
            id=provisioner_id(self.cluster),
            task_queue=self.task_queue,
            **extra,
        )

    async def signal_pods(self, pods: Sequence[str]) -> None:
        await self.provisioner().signal(ProvisionerWorkflow.pods_pending, PodsPending(pods=list(pods)))

    async def start_nodeclaim(
        self,
        claim: PlannedNodeClaim,
        settings: LifecycleSettings = FAST,
    ) -> WorkflowHandle[NodeClaimWorkflow, LifecycleStatus]:
        """Create the NodeClaim object and start its lifecycle, as the provisioner does."""
        await self.kube.create_nodeclaim(nodeclaim_object(claim, "default", claim_requirements(claim)))
        return await self.client.start_workflow(
            NodeClaimWorkflow.run,
            LifecycleInput(cluster=self.cluster, nodeclaim=claim, settings=settings),
            id=nodeclaim_id(claim.name),
            task_queue=self.task_queue,
        )

    async def nodeclaim_workflow(self, name: str) -> WorkflowHandle[NodeClaimWorkflow, LifecycleStatus]:
        """The lifecycle of a NodeClaim, once it has started."""
        return await started(self.client.get_workflow_handle_for(NodeClaimWorkflow.run, nodeclaim_id(name)))

    def start_controller(
        self,
        metrics: Metrics | None = None,
        adoption_grace: float | None = None,
        capacity_buffers: bool = False,
        requeue_seconds: float = 30.0,
        **provisioner: Any,
    ) -> Controller:
        """Run the controller until the test ends. Its periodic requeue is out of the way (30 s unless
        `requeue_seconds` says otherwise), so every signal a test sees comes from a change the controller
        watched. With `adoption_grace` it also starts the lifecycle of a NodeClaim left without one that long
        after its creation (`workers.controller.adoption`); with `capacity_buffers` (the gate), the controller and
        the worker's plans read CapacityBuffers."""
        self.kube.capacity_buffers = capacity_buffers
        adoption = (
            lifecycle_adoption(
                self.client, self.kube, self.task_queue, grace_seconds=adoption_grace, check_seconds=0.2
            )
            if adoption_grace is not None
            else None
        )
        controller = Controller(
            self.client,
            self.kube,
            self.provisioner_input(**provisioner),
            self.task_queue,
            debounce_seconds=0.05,
            requeue_seconds=requeue_seconds,
            metrics=metrics,
            adoption=adoption,
            capacity_buffers=capacity_buffers,
        )
        self._tasks.append(asyncio.create_task(controller.run()))
        return controller

    async def apply_examples(self, **nodepool_template_spec: Any) -> None:
        await self.kube.apply(example_manifests(**nodepool_template_spec))

    # --- reading state ---

    async def nodeclaims(self) -> list[NodeClaim]:
        return await self.kube.list_nodeclaims()

    async def nodeclaim(self, name: str) -> NodeClaim | None:
        return await self.kube.get_nodeclaim(name)

    async def pods(self, app: str) -> list[Pod]:
        return await self.kube.list_pods("default", label_selector=f"app={app}")

    async def running(self, app: str, count: int) -> list[Pod]:
        """The app's pods when all `count` run on a node, else an empty list."""
        pods = await self.pods(app)
        bound = [p for p in pods if p.spec.node_name and p.status.phase == "Running"]
        return bound if len(pods) == count and len(bound) == count else []

    async def unschedulable(self, app: str, count: int) -> list[str]:
        """The app's pod keys, once kube-scheduler has marked all `count` of them unschedulable."""
        return await unschedulable(self.kube, app, count)

    async def node(self, name: str) -> Node | None:
        return await self.kube.get_node(name)

    async def claim_of(self, node: str) -> str:
        """The name of the NodeClaim whose Node this is (Nodes are named after their VMs, `aks-<nodeclaim>`)."""

        async def find() -> str | None:
            return next((c.name for c in await self.nodeclaims() if c.status.node_name == node), None)

        return await eventually(find, what=f"the NodeClaim of node {node}")

    async def instance_names(self) -> list[str]:
        return [instance.name for instance in await self.cloud.list()]

    async def gone(self, claim: str, node: str | None = None) -> bool:
        """Whether the NodeClaim, its instance and (when given) its Node are all gone."""
        return (
            await self.nodeclaim(claim) is None
            and claim not in await self.instance_names()
            and (node is None or await self.node(node) is None)
        )

    def deleted_claim(self, name: str) -> NodeClaim | None:
        """The NodeClaim's last state, as the watch reported its deletion; None while it exists."""
        last = [e for e in self.events if e.kind == "NodeClaim" and e.name == name and e.type == "DELETED"]
        return NodeClaim.parse(last[-1].object) if last else None

    async def _record(self) -> None:
        async for event in self.kube.watch(0):
            self.events.append(event)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def running_system(
    env: WorkflowEnvironment,
    task_queue: str,
    plane: ControlPlane,
    settings: AksSettings | None = None,
    worker: Callable[[Client, str, KubernetesCluster, CloudProvider], Worker] | None = None,
) -> AsyncIterator[System]:
    """An emptied cluster, an emulated Azure (instant unless `settings` say otherwise) around it, the Azure
    provider on its ARM, and a worker, until the block ends."""
    async with (
        fresh_aks(plane, settings or AksSettings.instant(seed=1)) as aks,
        cloud_provider(aks.kube, aks.azure, CATALOG) as cloud,
    ):
        cluster = aks.azure.settings.cluster_name
        system = System(env.client, aks.kube, aks.emulator, task_queue, cluster=cluster, cloud=cloud)
        system._tasks.append(asyncio.create_task(system._record()))
        make = worker or (
            lambda client, queue, kube, cloud: build_worker(
                client, queue, kube, cloud, CATALOG, sandbox_lifecycles=True
            )
        )
        try:
            async with make(env.client, task_queue, aks.kube, cloud):
                yield system
        finally:
            await system.stop()


@pytest_asyncio.fixture
async def system(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> AsyncIterator[System]:
    """The whole system on an instant emulated Azure (no boot or registration delays)."""
    async with running_system(temporal_env, task_queue, control_plane) as running:
        yield running
