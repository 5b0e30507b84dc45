"""The trivial workflow: what the Temporal server and one worker do for three no-op activities, the yardstick the
lifecycle benchmark sets its NodeClaims/s against.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

# The workflow sandbox runs this module again for the trivial workflow: what it imports of nodewright passes through.
with workflow.unsafe.imports_passed_through():
    from workers.worker import STICKY_SECONDS, WORKFLOW_TASKS


TRIVIAL_QUEUE = "bench-trivial"


@activity.defn(name="bench_noop")
async def noop(step: int) -> int:
    return step


@workflow.defn(name="BenchTrivial")
class TrivialWorkflow:
    @workflow.run
    async def run(self) -> None:
        for step in range(3):
            await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30))


async def trivial_rate(client: Client, count: int) -> float:
    """Workflows/s for `count` trivial workflows started at once, from the first start to the last close."""
    # build_worker's options, so that both rates come from the same worker setup, but its activity slots as they
    # were when this measure began (64): no-op activities never wait, and the pace stays comparable across runs.
    worker = Worker(
        client,
        task_queue=TRIVIAL_QUEUE,
        workflows=[TrivialWorkflow],
        activities=[noop],
        sticky_queue_schedule_to_start_timeout=STICKY_SECONDS,
        graceful_shutdown_timeout=timedelta(seconds=5),
        max_concurrent_activities=64,
        max_concurrent_workflow_tasks=WORKFLOW_TASKS,
    )
    query = 'WorkflowType="BenchTrivial"'
    async with worker:
        await asyncio.gather(
            *(
                client.start_workflow(TrivialWorkflow.run, id=f"trivial/{i}", task_queue=TRIVIAL_QUEUE)
                for i in range(count)
            )
        )
        while (await client.count_workflows(query + ' AND ExecutionStatus="Completed"')).count < count:
            await asyncio.sleep(0.2)
    starts, closes = [], []
    async for execution in client.list_workflows(query):
        starts.append(execution.start_time.timestamp())
        closes.append(execution.close_time.timestamp() if execution.close_time else time.time())
    return count / (max(closes) - min(starts))
