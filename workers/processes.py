"""How nodewright's long-running commands end: children that die with their parent, and SIGINT/SIGTERM that
stop the main coroutine so every `async with` unwinds and stops what it started.

A process started in the background by a non-interactive shell inherits SIGINT as ignored; installing our own
handlers for both signals makes `kill -INT` and `kill -TERM` (what Kubernetes sends) stop it either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: the child gets SIGKILL when the process that started it dies,
    even by SIGKILL, so nothing is left behind (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


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
