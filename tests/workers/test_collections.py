"""`freeze_after_full_collections`: what survives a full garbage collection is frozen, so the next one scans only
what came since; a frozen object is still freed when nothing refers to it; a long full collection is logged."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from workers.processes import freeze_after_full_collections


class Thing:
    pass


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Nothing frozen, no automatic collection (the test's allocations could start a full one, which freezes
    too), and no callback but the test's."""
    others = gc.callbacks[:]
    gc.callbacks.clear()
    gc.disable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()
    gc.callbacks[:] = others


def test_a_full_collection_freezes_what_survived_it_and_a_long_one_is_logged(
    unfrozen: None, caplog: pytest.LogCaptureFixture
) -> None:
    callback = freeze_after_full_collections(warn_after=0.0)
    try:
        kept = [Thing() for _ in range(10_000)]
        gc.collect(1)
        assert gc.get_freeze_count() == 0  # a young collection freezes nothing
        with caplog.at_level(logging.WARNING, logger="nodewright"):
            gc.collect()
        assert gc.get_freeze_count() >= len(kept)
        assert "a full garbage collection held the process for" in caplog.text

        last = weakref.ref(kept[-1])
        del kept
        assert last() is None  # frozen, yet freed once nothing refers to it
    finally:
        gc.callbacks.remove(callback)


def test_a_quick_full_collection_is_not_logged(unfrozen: None, caplog: pytest.LogCaptureFixture) -> None:
    callback = freeze_after_full_collections(warn_after=60.0)
    try:
        with caplog.at_level(logging.WARNING, logger="nodewright"):
            gc.collect()
        assert gc.get_freeze_count() > 0
        assert "garbage collection" not in caplog.text
    finally:
        gc.callbacks.remove(callback)


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_cycle_that_dies_frozen_is_freed_by_the_collection_after_a_thaw(unfrozen: None) -> None:
    now = [0.0]
    callback = freeze_after_full_collections(warn_after=60.0, thaw_every=600.0, clock=lambda: now[0])
    try:
        cycle = Cycle()
        gc.collect()  # it survives, and is frozen
        dead = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert dead() is not None  # a frozen cycle is not scanned: it outlives its last reference
        assert gc.get_freeze_count() > 0

        now[0] = 600.0
        gc.collect()  # the period is over: this collection unfreezes instead of freezing
        assert gc.get_freeze_count() == 0
        gc.collect()  # and the next scans every object
        assert dead() is None
        assert gc.get_freeze_count() > 0  # then freezes again until the next period ends
    finally:
        gc.callbacks.remove(callback)


ARENAS = """
import sys, threading
from workers.processes import _libc, limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas()
barrier = threading.Barrier(8)
def churn():
    barrier.wait()  # all at once, so that threads contend for arenas
    for _ in range(2000):
        blocks = [bytearray(1000) for _ in range(50)]
        del blocks
threads = [threading.Thread(target=churn) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
_libc().malloc_stats()  # one "Arena N:" paragraph per arena, on stderr
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_malloc_arenas_are_limited_for_threads_that_allocate_at_once() -> None:
    def arenas(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", ARENAS, mode], capture_output=True, text=True, check=True, timeout=60
        )
        return done.stderr.count("Arena ")

    assert arenas("limited") <= 2
    assert arenas("default") > 2
