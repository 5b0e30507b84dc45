"""Heartbeats for activities that wait on something slow (Azure, a large plan): the server then notices a worker
that died, or lost the activity, within the activity's heartbeat timeout instead of its whole start-to-close
timeout, and retries it elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import ParamSpec, TypeVar

from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.service import RPCError

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


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


def heartbeats(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """An activity that heartbeats all the while it runs (`heartbeating`): put it under `@activity.defn`."""

    @functools.wraps(function)
    async def beating(*args: P.args, **kwargs: P.kwargs) -> R:
        async with heartbeating():
            return await function(*args, **kwargs)

    return beating


class AttemptGivenUpError(Exception):
    """The server no longer counts this activity attempt as running: it timed out (a heartbeat that never
    reached the server) and a later attempt runs or waits. Whatever this attempt still does competes with it."""


class AttemptFence:
    """Asks the server whether this activity attempt is still the one it runs, at most every `interval` s.

    A plan attempt given up by the server keeps running on its worker until the SDK hears of it, a heartbeat
    throttle later; meanwhile its retry plans the same pods, and both created NodeClaims for them. The planning
    activity checks the fence before each NodeClaim it creates. Outside an activity, or when the server cannot
    answer, the attempt counts as current: an unreachable server is no reason to stop."""

    def __init__(self, interval: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._checked_at: float | None = None
        self._given_up: AttemptGivenUpError | None = None
        self._lock = asyncio.Lock()

    async def check(self) -> None:
        """Raise `AttemptGivenUpError` once the server has moved on from this attempt."""
        if not activity.in_activity():
            return
        async with self._lock:  # one describe at a time, however many creations wait on it
            if self._given_up is None and (
                self._checked_at is None or self._clock() - self._checked_at >= self.interval
            ):
                self._checked_at = self._clock()
                info = activity.info()
                running = await _server_attempt(info)
                if running is not None and running != info.attempt:
                    self._given_up = AttemptGivenUpError(
                        f"activity {info.activity_type} {info.activity_id} of {info.workflow_id}: attempt"
                        f" {info.attempt} was given up by the server, which now counts attempt {running}"
                    )
        if self._given_up is not None:
            raise self._given_up


async def _server_attempt(info: activity.Info) -> int | None:
    """The attempt the server runs (or will run) for this activity, 0 when it no longer has it pending; None
    when the server could not be asked."""
    try:
        handle = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        description = await handle.describe(rpc_timeout=timedelta(seconds=5))
    except (RPCError, RuntimeError, TimeoutError) as error:
        logger.debug("could not ask the server about activity %s: %s", info.activity_id, error)
        return None
    for pending in description.raw_description.pending_activities:
        if pending.activity_id == info.activity_id:
            started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            # A timed-out attempt waiting for its retry is SCHEDULED under the next attempt's number.
            return pending.attempt if started else pending.attempt + (pending.attempt == info.attempt)
    return 0
