"""Reads that many launches make at once, shared: what `read` returned for a key within the last few seconds.

A thousand launches in a minute each need their NodePool, its AKSNodeClass and the bootstrap token Secret. Read
through `Recent`, they cost one GET per object every few seconds instead of three GETs per launch; a change to
one of them reaches launches that many seconds later at most (Karpenter reads them from an informer's cache,
which lags too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

READS_KEPT_SECONDS = 2.0
"""How long a launch's NodePool, AKSNodeClass and bootstrap Secret are read once for all launches."""
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """What `read(key)` returned, kept for `seconds`; concurrent calls for one key share one read. A read that
    raises or finds nothing (None) is not kept: the next call reads again. Each new read first lets go of what is
    older than `seconds`, so a worker that runs for days keeps only the keys read lately (a deleted NodePool's
    name goes with its last read)."""

    def __init__(
        self,
        read: Callable[[K], Awaitable[V]],
        seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._seconds = seconds
        self._clock = clock
        self._kept: dict[K, tuple[float, asyncio.Future[V]]] = {}

    async def __call__(self, key: K) -> V:
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and now - kept[0] < self._seconds:
            return await asyncio.shield(kept[1])
        for old in [k for k, (read_at, _) in self._kept.items() if now - read_at >= self._seconds]:
            del self._kept[old]
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._kept[key] = (now, future)
        try:
            value = await self._read(key)
        except BaseException as error:
            self._kept.pop(key, None)
            future.set_exception(error)
            future.exception()  # retrieved: the waiters, if any, raise it; none is fine
            raise
        future.set_result(value)
        if value is None:
            self._kept.pop(key, None)
        return value
