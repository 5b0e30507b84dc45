"""A workflow thread stopped mid-log by the Temporal SDK's deadlock interruption (an exception raised in that
thread when an activation holds it for 2 s) must not leave the process unable to log: with a locked handler, the
thread that waited for the lock while another wrote gets the exception right after it acquires the lock, never
releases it, and every later log line of the process (the event loop's too) waits forever."""

from __future__ import annotations

import ctypes
import io
import logging
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from workers.logs import UnlockedStreamHandler

HANG = 5.0
"""Seconds after which a log call that has not returned counts as hung (it would wait forever)."""
# The interrupted thread ends with the exception, as the SDK's workflow thread does.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Interrupted(Exception):
    """What the SDK raises in a deadlocked workflow thread (its _InterruptDeadlockError)."""


class SlowStream(io.StringIO):
    """A stream whose first write waits until `go` is set: another thread's line being written."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()
        self.go = threading.Event()

    def write(self, text: str) -> int:
        if not self.writing.is_set():
            self.writing.set()
            self.go.wait(HANG)
        return super().write(text)


def interrupt(thread: threading.Thread) -> None:
    """Raise `Interrupted` in the thread the next time it runs Python code, as the SDK does."""
    assert thread.ident is not None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(Interrupted))


def blocked_on_a_lock_or_done(thread: threading.Thread) -> None:
    """Wait until the thread waits for a handler's lock (its innermost Python frame is `Handler.acquire`) or has
    ended: the moment the SDK's interruption does harm, whatever the machine's load."""
    deadline = time.monotonic() + HANG
    while thread.is_alive() and time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or 0)
        if frame is not None and frame.f_code.co_name == "acquire":
            return
        time.sleep(0.001)


def logs_within(logger: logging.Logger, message: str) -> bool:
    """Whether `logger.warning(message)` returns (in a thread of its own) before HANG."""
    done = threading.Thread(target=logger.warning, args=(message,), daemon=True)
    done.start()
    done.join(HANG)
    return not done.is_alive()


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("nodewright.test.interrupted")
    logger.propagate = False
    yield logger
    logger.handlers = []


def run_the_race(logger: logging.Logger, stream: SlowStream) -> None:
    writer = threading.Thread(target=logger.warning, args=("a slow line",), daemon=True)
    writer.start()
    assert stream.writing.wait(HANG)
    interrupted = threading.Thread(target=lambda: logger.warning("a line of a workflow"), daemon=True)
    interrupted.start()
    blocked_on_a_lock_or_done(interrupted)
    interrupt(interrupted)
    stream.go.set()
    writer.join(HANG)
    interrupted.join(HANG)


def test_a_thread_interrupted_while_it_logs_leaves_the_others_logging(logger: logging.Logger) -> None:
    stream = SlowStream()
    logger.handlers = [UnlockedStreamHandler(stream)]
    run_the_race(logger, stream)
    assert logs_within(logger, "the event loop's next line"), "logging hangs after the interruption"
    lines = stream.getvalue().splitlines()
    assert "a slow line" in lines and "the event loop's next line" in lines
