"""How nodewright's long-running commands run and end: children that die with their parent, SIGINT/SIGTERM that
stop the main coroutine so every `async with` unwinds and stops what it started, and full garbage collections
kept short.

A process started in the background by a non-interactive shell inherits SIGINT as ignored; installing our own
handlers for both signals makes `kill -INT` and `kill -TERM` (what Kubernetes sends) stop it either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
LONG_COLLECTION_SECONDS = 1.0
"""A full garbage collection that holds the process this long is logged."""
THAW_SECONDS = 600.0
"""How often one full garbage collection scans the frozen objects too, and frees the reference cycles that died
frozen. Each NodeClaim lifecycle's cached workflow lives for minutes, so it is frozen; once it completes and leaves
the cache it is a cycle nobody refers to, which only a collection that scans frozen objects frees: 400 short
workflows left 35,000 such objects frozen (docs/benchmarks.md, bench-soak)."""

MALLOC_ARENAS = 2
"""glibc malloc arenas a long-running process may use (`M_ARENA_MAX`; glibc's default is 8 per core). Every thread
that allocates while another holds an arena gets one of its own, and an arena returns memory to the system only
from its top: in a worker at 200 nodes (listing and watching threads, the planning pool) 16 arenas held 256 MB of
which 112 MB was in use (bench-soak, docs/benchmarks.md). Python runs one thread at a time, so two arenas cost
next to no contention."""
_M_ARENA_MAX = -8

logger = logging.getLogger("nodewright")
GcCallback = Callable[[str, dict[str, int]], None]


@functools.cache
def _libc() -> Any:
    """The C library (Linux's glibc), or None where there is no libc.so.6; a call it lacks raises AttributeError."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (call it before threads start: an arena, once made, stays);
    False where the C library is not glibc."""
    mallopt = getattr(_libc(), "mallopt", None)
    return mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1


def release_free_memory() -> None:
    """Give the system back the free pages malloc holds in every arena (glibc's `malloc_trim`)."""
    if (trim := getattr(_libc(), "malloc_trim", None)) is not None:
        trim(0)


def die_with_parent() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: the child gets SIGKILL when the process that started it dies,
    even by SIGKILL, so nothing is left behind (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


async def until_signalled(main: Coroutine[Any, Any, T]) -> T | None:
    """Run `main` until it returns or SIGINT/SIGTERM arrives; on a signal it is cancelled (its cleanup runs)
    and None is returned."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await task
    except asyncio.CancelledError:
        if not received:
            raise
        return None
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


def freeze_after_full_collections(
    warn_after: float = LONG_COLLECTION_SECONDS,
    thaw_every: float = THAW_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> GcCallback:
    """Keep Python's full garbage collections short in a long-running process; returns the installed callback.

    A worker holds a million container objects or more (the informer's objects and their parsed models, the
    cached workflows), nearly all alive for minutes. Python collects its oldest generation whenever a quarter as
    many objects again have survived into it, and scans every object there with the GIL held: at 1,000
    NodeClaims that took 1.5 to 3.8 s every 15 to 25 s, during which no workflow task ran (the SDK fails an
    activation that has not finished within 2 s) and no lifecycle moved. After each full collection the objects
    that survived it are frozen (`gc.freeze`), so the next one scans only what was allocated since. A frozen
    object is still freed when nothing refers to it; only a reference cycle among frozen objects that dies is not
    reclaimed, and the worker's full collections found next to none (0 to 144 objects each) while they scanned
    everything. Yet such cycles come with every workflow a worker caches (the workflow instance, its event loop and
    its tasks refer to each other), so once every `thaw_every` seconds the objects are unfrozen after a full
    collection instead, and the next one scans them all and frees the cycles that died frozen (one long collection
    per period, not one every few seconds). A full collection that still takes `warn_after` seconds is logged."""
    started = 0.0
    thawed = clock()

    def callback(phase: str, info: dict[str, int]) -> None:
        nonlocal started, thawed
        if info.get("generation") != 2:
            return
        if phase == "start":
            started = time.perf_counter()
            return
        took = time.perf_counter() - started
        if clock() - thawed >= thaw_every:
            gc.unfreeze()
            release_free_memory()  # once a period: the pages the collections since the last one freed
            thawed = clock()
        else:
            gc.freeze()
        if took >= warn_after:
            logger.warning(
                "a full garbage collection held the process for %.1f s (%d objects frozen)",
                took,
                gc.get_freeze_count(),
            )

    gc.callbacks.append(callback)
    return callback
