"""The provisioner on the real dev server: batching signals into one plan, not provisioning pods twice while
their NodeClaims are in flight, the unavailable-offerings cache, and continue-as-new carrying its state."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.kubeclient.cluster import KubernetesCluster
from activities.planning import LifecycleStarter, PlanningActivities
from core.cloudprovider import CloudProvider
from core.messages import (
    ActivityName,
    PlanInput,
    PlanResult,
    PodsPending,
    ProvisionerInput,
    UnavailableOffering,
)
from tests.workflows.conftest import (
    CATALOG,
    INSTANCE_TYPE,
    System,
    activity_calls,
    decode,
    deployment,
    eventually,
    pinned,
    running_system,
    small_delays,
)
from workers.controlplane.run import ControlPlane
from workers.worker import WORKFLOWS, activities_for, lifecycle_starter
from workflows.provisioner import ProvisionerWorkflow


async def plans(
    system: System, handle: WorkflowHandle[Any, Any] | None = None
) -> list[tuple[PlanInput, PlanResult]]:
    """The completed planning activities of the provisioner's run, with their inputs and results."""
    found = []
    for call in await activity_calls(handle or system.provisioner()):
        if call.name == ActivityName.PLAN_PROVISIONING and call.result is not None:
            found.append(
                (
                    await decode(system.client, call.input, PlanInput),
                    await decode(system.client, call.result, PlanResult),
                )
            )
    return found


async def _at_least(system: System, count: int) -> list[tuple[PlanInput, PlanResult]] | None:
    found = await plans(system)
    return found if len(found) >= count else None


async def test_signals_within_the_idle_window_become_one_plan(system: System) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("web", 3)])
    pods = await system.unschedulable("web", 3)

    await system.start_provisioner(pods[:1], batch_idle_seconds=1, batch_max_seconds=10)
    for pod in pods[1:]:
        await system.signal_pods([pod])

    await eventually(lambda: system.running("web", 3), timeout=60, what="web running")
    [(_, plan)] = await plans(system)
    assert plan.pods == 3
    assert sum(claim.pod_count for claim in plan.nodeclaims) == 3
    assert len(await system.nodeclaims()) == len(plan.nodeclaims)


async def test_the_maximum_window_closes_a_batch_that_keeps_growing(system: System) -> None:
    await system.start_provisioner(["default/pod-0"], batch_idle_seconds=1, batch_max_seconds=2)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 3.5
    sent = 1
    while loop.time() < deadline:
        await asyncio.sleep(0.3)
        await system.signal_pods([f"default/pod-{sent}"])
        sent += 1

    planned = await eventually(lambda: _planned_at(system), what="a plan")
    last_signal = await _last_signal_at(system)
    # Signals never paused for the idle second, yet a plan ran before the last one: the window closed at
    # its maximum.
    assert planned < last_signal


async def _planned_at(system: System) -> datetime | None:
    history = await system.provisioner().fetch_history()
    scheduled = [
        event.event_time.ToDatetime(UTC)
        for event in history.events
        if event.event_type == HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return scheduled[0] if scheduled else None


async def _last_signal_at(system: System) -> datetime:
    history = await system.provisioner().fetch_history()
    return max(
        event.event_time.ToDatetime(UTC)
        for event in history.events
        if event.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )


async def test_pods_on_nodeclaims_in_flight_are_not_provisioned_twice(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> None:
    # VMs take 3 s to boot, so the pods stay pending while their NodeClaims are in flight.
    async with running_system(temporal_env, task_queue, control_plane, small_delays(boot=3)) as system:
        await system.apply_examples()
        await system.kube.apply([deployment("web", 3)])
        pods = await system.unschedulable("web", 3)
        await system.start_provisioner(pods)
        [(_, first)] = await eventually(lambda: plans(system), what="the first plan")
        claims = await eventually(system.nodeclaims, what="NodeClaims created")

        await system.signal_pods(pods)
        await system.signal_pods(pods)

        [_, (_, second)] = await eventually(lambda: _at_least(system, 2), what="the second plan")
        assert first.nodeclaims and len(claims) == len(first.nodeclaims)
        # Nominated to the NodeClaims in flight: left to them, not simulated again.
        assert (second.pods, second.nominated, second.nodeclaims) == (0, 3, [])
        assert sorted(claim.name for claim in await system.nodeclaims()) == sorted(c.name for c in claims)
        await eventually(lambda: system.running("web", 3), timeout=60, what="web running")
        assert (await system.aks.counters()).vms_created == len(claims)


def unavailable(zone: str, until: datetime, instance_type: str = INSTANCE_TYPE) -> UnavailableOffering:
    return UnavailableOffering(
        instance_type=instance_type, zone=zone, capacity_type="on-demand", until=until, reason="test"
    )


async def test_unavailable_offerings_are_left_out_of_the_next_plan(system: System) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    [pod] = await system.unschedulable("pinned", 1)
    handle = await system.start_provisioner()
    until = datetime.now(UTC) + timedelta(hours=1)
    for zone in ("eastus-1", "eastus-2", "eastus-3", "0"):
        await handle.signal(ProvisionerWorkflow.offering_unavailable, unavailable(zone, until))
    await handle.signal(
        ProvisionerWorkflow.offering_unavailable,
        unavailable("eastus-1", datetime.now(UTC), "Standard_D4s_v5"),
    )

    await system.signal_pods([pod])

    [(request, plan)] = await eventually(lambda: plans(system), what="a plan")
    assert sorted(u.zone for u in request.unavailable) == ["0", "eastus-1", "eastus-2", "eastus-3"]
    assert all(u.instance_type == INSTANCE_TYPE for u in request.unavailable)  # the expired one is dropped
    assert (plan.pods, plan.nodeclaims, plan.unschedulable_count) == (1, [], 1)
    assert await system.nodeclaims() == []


class GatedPlanning:
    """The planning activity, held until the test lets it finish."""

    def __init__(self, kube: KubernetesCluster, starter: LifecycleStarter) -> None:
        self.planning = PlanningActivities(kube, CATALOG, starter)
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name=ActivityName.PLAN_PROVISIONING)
    async def plan_provisioning(self, request: PlanInput) -> PlanResult:
        self.started.set()
        await self.release.wait()
        return await self.planning.plan_provisioning(request)


async def test_continue_as_new_carries_the_pending_pods_and_the_unavailable_offerings(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> None:
    gates: list[GatedPlanning] = []

    def worker(client: Client, queue: str, kube: KubernetesCluster, cloud: CloudProvider) -> Worker:
        starter = lifecycle_starter(client, queue)
        gates.append(GatedPlanning(kube, starter))
        others = [
            a for a in activities_for(kube, cloud, CATALOG, starter) if a.__name__ != "plan_provisioning"
        ]
        return Worker(
            client,
            task_queue=queue,
            workflows=list(WORKFLOWS),
            activities=[gates[0].plan_provisioning, *others],
            unsandboxed_workflow_runner=SandboxedWorkflowRunner(),
        )

    async with running_system(temporal_env, task_queue, control_plane, worker=worker) as system:
        [gate] = gates
        started = await system.start_provisioner(["default/a"], batches_before_continue_as_new=1)
        first = system.client.get_workflow_handle(started.id, run_id=started.first_execution_run_id)
        await asyncio.wait_for(gate.started.wait(), 10)
        # While the first batch is being planned: a pod and an unavailable offering arrive.
        until = datetime.now(UTC) + timedelta(hours=1)
        await first.signal(ProvisionerWorkflow.offering_unavailable, unavailable("eastus-2", until))
        await first.signal(ProvisionerWorkflow.pods_pending, PodsPending(pods=["default/b"]))
        gate.release.set()

        carried = await eventually(lambda: _continued_with(system.client, first), what="continue-as-new")
        assert carried.pending == ["default/b"]
        assert [(u.instance_type, u.zone) for u in carried.unavailable] == [(INSTANCE_TYPE, "eastus-2")]
        # The next run plans the carried pod, still excluding the offering.
        second = system.client.get_workflow_handle(first.id, run_id=await _next_run(first))
        [(request, _)] = await eventually(lambda: plans(system, second), what="the second run's plan")
        assert [(u.instance_type, u.zone) for u in request.unavailable] == [(INSTANCE_TYPE, "eastus-2")]
        latest = await system.provisioner().query(ProvisionerWorkflow.unavailable_offerings)
        assert [(u.instance_type, u.zone) for u in latest] == [(INSTANCE_TYPE, "eastus-2")]


async def _continued_with(client: Client, handle: WorkflowHandle[Any, Any]) -> ProvisionerInput | None:
    history = await handle.fetch_history()
    last = history.events[-1]
    if last.event_type != HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return None
    return await decode(
        client, last.workflow_execution_continued_as_new_event_attributes.input.payloads, ProvisionerInput
    )


async def _next_run(handle: WorkflowHandle[Any, Any]) -> str:
    history = await handle.fetch_history()
    return history.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
