"""SIGTERM to a real `nodewright worker` in the middle of a launch (a VM create the emulated Azure takes its
time over): within the grace period the activity finishes and the process exits 0; past a short grace period
the activity is cancelled and handed back to Temporal, which schedules it again, and the process still exits 0.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.kube import nodeclaim_object
from core.messages import ActivityName, LifecycleInput, LifecycleSettings
from simulator.aks import AksSettings
from simulator.arm import ArmSettings
from tests.cluster import apply_examples, fresh_aks
from tests.workers.component import Component, until
from tests.workflows.conftest import claim_requirements, fresh_name, offering, planned_claim
from workers.azure import emulator_environment
from workers.controlplane.run import ControlPlane
from workers.simulated_aks import SimulatedAks
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import nodeclaim_id

POLL_SECONDS = 0.2
"""Between the worker's polls of a long-running Azure operation."""
CREATE_POLLS = 20
"""`InProgress` answers to a create: the NIC's and the VM's each take about 4 s of polls."""
SLOW = LifecycleSettings(registration_ttl_seconds=120, poll_seconds=1, launch_timeout_seconds=120)


@pytest_asyncio.fixture(loop_scope="session")
async def slow_aks(control_plane: ControlPlane) -> AsyncIterator[SimulatedAks]:
    settings = AksSettings(seed=3, arm=ArmSettings(seed=3, create_polls=CREATE_POLLS))
    async with fresh_aks(control_plane, settings) as aks:
        await apply_examples(aks.kube)
        yield aks


def worker(
    tmp_path: Path, aks: SimulatedAks, env: WorkflowEnvironment, task_queue: str, grace: float
) -> Component:
    return Component(
        "worker",
        tmp_path / "worker.log",
        {
            **emulator_environment(aks.emulated.info, poll_seconds=POLL_SECONDS),
            "NODEWRIGHT_KUBECONFIG": str(aks.plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "NODEWRIGHT_TASK_QUEUE": task_queue,
            "NODEWRIGHT_CLUSTER_NAME": aks.azure.settings.cluster_name,
            "NODEWRIGHT_SHUTDOWN_GRACE_SECONDS": f"{grace:g}",
        },
    )


async def launching(
    aks: SimulatedAks, env: WorkflowEnvironment, task_queue: str, process: Component
) -> WorkflowHandle[NodeClaimWorkflow, object]:
    """A NodeClaim's lifecycle, once the worker process has started its launch activity."""
    claim = planned_claim(fresh_name("shutdown"), [offering("eastus-1")])
    await aks.kube.create_nodeclaim(nodeclaim_object(claim, "default", claim_requirements(claim)))
    handle = await env.client.start_workflow(
        NodeClaimWorkflow.run,
        LifecycleInput(cluster=aks.azure.settings.cluster_name, nodeclaim=claim, settings=SLOW),
        id=nodeclaim_id(claim.name),
        task_queue=task_queue,
    )

    async def launch_started() -> bool:
        process.check_alive()
        pending = (await handle.describe()).raw_description.pending_activities
        return any(
            activity.activity_type.name == ActivityName.LAUNCH_NODECLAIM
            and activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for activity in pending
        )

    await until(launch_started, 60, "the worker started the launch activity", process)
    return handle


async def launch_completions(handle: WorkflowHandle[NodeClaimWorkflow, object]) -> list[int]:
    """The attempt of each completed launch activity in the history."""
    events = (await handle.fetch_history()).events
    started = {
        event.event_id: event.activity_task_started_event_attributes.attempt
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    }
    return [
        started[event.activity_task_completed_event_attributes.started_event_id]
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]


async def test_a_stopping_worker_finishes_its_running_activity_then_exits_0(
    tmp_path: Path, temporal_env: WorkflowEnvironment, slow_aks: SimulatedAks, task_queue: str
) -> None:
    process = worker(tmp_path, slow_aks, temporal_env, task_queue, grace=60).start()
    try:
        await until(process.ready, 90, "the worker ready", process)
        handle = await launching(slow_aks, temporal_env, task_queue, process)
        assert await launch_completions(handle) == []
        process.signal(signal.SIGTERM)
        assert await process.wait(timeout=60) == 0, process.log_tail()
        assert await launch_completions(handle) == [1], "the launch did not finish in its first attempt"
        assert (await slow_aks.emulator.counters()).vms_created == 1
    finally:
        process.stop()


async def test_an_activity_outliving_the_grace_period_is_handed_back(
    tmp_path: Path, temporal_env: WorkflowEnvironment, slow_aks: SimulatedAks, task_queue: str
) -> None:
    await slow_aks.emulator.update_settings({"arm": {"create_polls": 500}})  # a launch of minutes
    process = worker(tmp_path, slow_aks, temporal_env, task_queue, grace=1).start()
    try:
        await until(process.ready, 90, "the worker ready", process)
        handle = await launching(slow_aks, temporal_env, task_queue, process)
        process.signal(signal.SIGTERM)
        assert await process.wait(timeout=30) == 0, process.log_tail()

        async def scheduled_again() -> object:
            pending = (await handle.describe()).raw_description.pending_activities
            return [activity for activity in pending if activity.attempt >= 2]

        await until(scheduled_again, 30, "the launch activity scheduled again", process)
        [again] = (await handle.describe()).raw_description.pending_activities
        assert again.activity_type.name == ActivityName.LAUNCH_NODECLAIM
        assert again.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        print(f"\nhanded back: attempt {again.attempt} scheduled after: {again.last_failure.message}")
        assert await launch_completions(handle) == []
    finally:
        process.stop()
