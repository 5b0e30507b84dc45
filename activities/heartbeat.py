"""Heartbeats for activities that wait on something slow (Azure, a large plan): the server then notices a worker
that died, or lost the activity, within the activity's heartbeat timeout instead of its whole start-to-close
timeout, and retries it elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity


@contextlib.asynccontextmanager
async def heartbeating(interval: float = 1.0) -> AsyncIterator[None]:
    """Heartbeat while the block runs (the scheduler runs in a thread, so the event loop stays free)."""
    if not activity.in_activity():
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
