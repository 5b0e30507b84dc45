"""The attempt fence, on a real Temporal server: an activity attempt the server gave up on (its heartbeat timed
out, so its retry runs) learns so before it acts again; the attempt the server runs does not stop."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.heartbeat import AttemptFence, AttemptGivenUpError

pytestmark = pytest.mark.asyncio(loop_scope="session")

HEARTBEAT_SECONDS = 1.0


class Attempts:
    """What each attempt of the activity saw at its fence."""

    def __init__(self) -> None:
        self.outcomes: dict[int, str] = {}
        self.second_started = asyncio.Event()

    @activity.defn(name="fenced")
    async def fenced(self) -> int:
        attempt = activity.info().attempt
        fence = AttemptFence(interval=0)
        if attempt == 1:
            await fence.check()  # current: the server runs this attempt
            # No heartbeat for longer than the timeout: the server gives this attempt up and retries it.
            await asyncio.wait_for(self.second_started.wait(), timeout=30)
        else:
            self.second_started.set()
        try:
            await fence.check()
        except AttemptGivenUpError as error:
            self.outcomes[attempt] = f"given up: {error}"
            raise
        self.outcomes[attempt] = "current"
        if attempt > 1:
            await asyncio.sleep(HEARTBEAT_SECONDS / 2)  # attempt 1 answers while this one still runs
        return attempt


@workflow.defn(name="fenced-workflow", sandboxed=False)
class FencedWorkflow:
    @workflow.run
    async def run(self) -> int:
        return await workflow.execute_activity(
            "fenced",
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=HEARTBEAT_SECONDS),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
            result_type=int,
        )


async def test_an_attempt_the_server_gave_up_on_is_stopped_by_its_fence(
    temporal_env: WorkflowEnvironment,
) -> None:
    attempts = Attempts()
    queue = f"fence-{uuid.uuid4()}"
    async with Worker(
        temporal_env.client,
        task_queue=queue,
        workflows=[FencedWorkflow],
        activities=[attempts.fenced],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        result = await temporal_env.client.execute_workflow(
            FencedWorkflow.run, id=f"fence-{uuid.uuid4()}", task_queue=queue
        )
        for _ in range(50):  # attempt 1 wakes when attempt 2 starts; give it its moment to look
            if 1 in attempts.outcomes:
                break
            await asyncio.sleep(0.1)
    assert result == 2
    assert attempts.outcomes[2] == "current"
    assert attempts.outcomes[1].startswith("given up: ")
    assert "attempt 1 was given up by the server, which now counts attempt 2" in attempts.outcomes[1]


async def test_outside_an_activity_the_fence_never_stops_anything() -> None:
    fence = AttemptFence(interval=0)
    await fence.check()
    await fence.check()
