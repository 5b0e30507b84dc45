"""`nodewright worker --role`: a workflows-only and an activities-only process share one task queue and bring a
NodeClaim's lifecycle to Running between them, each taking only its own kind of task; both are ready, serve
metrics and exit 0 on SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.kube import nodeclaim_object
from core.messages import ActivityName, LifecycleInput, LifecycleSettings, Phase
from tests.cluster import apply_examples
from tests.workers.component import Component, until
from tests.workflows.conftest import (
    CATALOG,
    claim_requirements,
    fresh_name,
    in_phase,
    local_activity,
    offering,
    planned_claim,
)
from workers.azure import cloud_provider, emulator_environment
from workers.simulated_aks import SimulatedAks
from workers.worker import ACTIVITY_SLOTS, WORKFLOWS, WorkerRole, build_worker
from workflows.nodeclaim import LOCAL_ACTIVITIES, NodeClaimWorkflow
from workflows.provisioner import nodeclaim_id

SETTINGS = LifecycleSettings(registration_ttl_seconds=120, poll_seconds=1, launch_timeout_seconds=120)


def worker(
    tmp_path: Path, aks: SimulatedAks, env: WorkflowEnvironment, task_queue: str, role: str
) -> Component:
    return Component(
        "worker",
        tmp_path / f"worker-{role}.log",
        {
            **emulator_environment(aks.emulated.info),
            "NODEWRIGHT_KUBECONFIG": str(aks.plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "NODEWRIGHT_TASK_QUEUE": task_queue,
            "NODEWRIGHT_CLUSTER_NAME": aks.azure.settings.cluster_name,
            "NODEWRIGHT_SHUTDOWN_GRACE_SECONDS": "5",
        },
        args=("--role", role),
    )


async def test_each_role_registers_only_its_own_tasks(
    temporal_env: WorkflowEnvironment, aks: SimulatedAks, task_queue: str
) -> None:
    async with cloud_provider(aks.kube, aks.azure, CATALOG) as cloud:

        def registered(role: WorkerRole) -> tuple[set[str], set[str], bool]:
            # A client takes one worker of each kind of task per queue: a queue of its own for each role.
            queue = f"{task_queue}-{role}"
            built = build_worker(temporal_env.client, queue, aks.kube, cloud, CATALOG, role=role)
            config = built.config()
            activities = {activity.__name__ for activity in config.get("activities", [])}
            workflows = {workflow.__name__ for workflow in config.get("workflows", [])}
            return workflows, activities, bool(config.get("no_remote_activities"))

        every = {workflow.__name__ for workflow in WORKFLOWS}
        everything = registered(WorkerRole.ALL)
        assert everything[0] == every and set(LOCAL_ACTIVITIES) < everything[1] and not everything[2]
        assert registered(WorkerRole.WORKFLOWS) == (every, set(LOCAL_ACTIVITIES), True)

        # The NodeClaim lifecycle runs outside the sandbox by default; the tests' workers put it back in.
        def lifecycle_runner(sandboxed: bool) -> object:
            worker = build_worker(
                temporal_env.client,
                f"{task_queue}-sandbox-{sandboxed}",
                aks.kube,
                cloud,
                CATALOG,
                sandbox_lifecycles=sandboxed,
            )
            return worker.config().get("unsandboxed_workflow_runner")

        assert isinstance(lifecycle_runner(False), UnsandboxedWorkflowRunner)
        assert isinstance(lifecycle_runner(True), SandboxedWorkflowRunner)
        assert not workflow._Definition.must_from_class(NodeClaimWorkflow).sandboxed
        assert registered(WorkerRole.ACTIVITIES) == (set(), everything[1], False)

        # A launch holds its activity slot while its VM is created: NODEWRIGHT_WORKER_ACTIVITIES sizes them.
        def activity_slots(**slots: int) -> object:
            queue = f"{task_queue}-slots-{slots}"
            worker = build_worker(temporal_env.client, queue, aks.kube, cloud, CATALOG, **slots)
            return worker.config().get("max_concurrent_activities")

        assert (activity_slots(), activity_slots(activity_slots=1000)) == (ACTIVITY_SLOTS, 1000)


async def test_a_workflows_worker_and_an_activities_worker_run_a_lifecycle_between_them(
    tmp_path: Path, temporal_env: WorkflowEnvironment, aks: SimulatedAks, task_queue: str
) -> None:
    await apply_examples(aks.kube)
    workflows = worker(tmp_path, aks, temporal_env, task_queue, "workflows").start()
    activities = worker(tmp_path, aks, temporal_env, task_queue, "activities").start()
    try:
        for process in (workflows, activities):
            await until(process.ready, 90, f"the {process.args[1]} worker ready", workflows, activities)
            assert (await process.get("/metrics", process.metrics_port) or (0, ""))[0] == 200
        claim = planned_claim(fresh_name("roles"), [offering("eastus-1")])
        await aks.kube.create_nodeclaim(nodeclaim_object(claim, "default", claim_requirements(claim)))
        handle = await temporal_env.client.start_workflow(
            NodeClaimWorkflow.run,
            LifecycleInput(cluster=aks.azure.settings.cluster_name, nodeclaim=claim, settings=SETTINGS),
            id=nodeclaim_id(claim.name),
            task_queue=task_queue,
        )
        await until(
            lambda: in_phase(handle, Phase.RUNNING), 90, "the lifecycle Running", workflows, activities
        )

        events = (await handle.fetch_history()).events
        workflow_tasks = {
            event.workflow_task_started_event_attributes.identity
            for event in events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
        }
        activity_tasks = {
            event.activity_task_started_event_attributes.identity
            for event in events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        }
        scheduled = [
            event.activity_task_scheduled_event_attributes.activity_type.name
            for event in events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        local = [name for event in events if (name := local_activity(event)) is not None]
        assert {identity.partition("@")[0] for identity in workflow_tasks} == {str(workflows.pid)}
        assert {identity.partition("@")[0] for identity in activity_tasks} == {str(activities.pid)}
        assert ActivityName.LAUNCH_NODECLAIM in scheduled
        assert set(local) == set(LOCAL_ACTIVITIES), (
            "registration and initialization ran in the workflows worker"
        )

        for process in (workflows, activities):
            process.signal(signal.SIGTERM)
        for process in (workflows, activities):
            assert await process.wait(timeout=60) == 0, process.log_tail()
    finally:
        workflows.stop()
        activities.stop()
