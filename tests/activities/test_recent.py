"""Reads shared by many launches: kept for a few seconds, one read for concurrent callers, nothing kept that
failed or found nothing, and nothing kept long after its seconds."""

from __future__ import annotations

import asyncio

import pytest

from activities.recent import Recent


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_read_is_kept_for_its_seconds_and_shared_by_concurrent_callers() -> None:
    reads: list[str] = []
    value = {"pool": 1}

    async def read(key: str) -> int:
        reads.append(key)
        await asyncio.sleep(0.01)
        return value[key]

    clock = Clock()
    recent = Recent(read, 2.0, clock)
    assert await asyncio.gather(*(recent("pool") for _ in range(50))) == [1] * 50
    assert reads == ["pool"], "fifty launches at once: one GET"

    value["pool"] = 2
    clock.now = 1.9
    assert await recent("pool") == 1, "within the window: the kept value"
    clock.now = 2.0
    assert await recent("pool") == 2, "after it: read again"
    assert reads == ["pool", "pool"]


async def test_a_failed_or_empty_read_is_not_kept() -> None:
    answers: list[object] = [RuntimeError("API server down"), None, "found"]

    async def read(key: str) -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    recent = Recent(read, 60.0, Clock())
    with pytest.raises(RuntimeError, match="API server down"):
        await recent("secret")
    assert await recent("secret") is None
    assert await recent("secret") == "found"
    assert await recent("secret") == "found", "kept now"
    assert answers == []


async def test_what_was_read_long_ago_is_let_go_at_the_next_read() -> None:
    async def read(key: str) -> str:
        return key.upper()

    clock = Clock()
    recent = Recent(read, 2.0, clock)
    for day in range(100):
        clock.now = day * 10.0
        assert await recent(f"pool-{day}") == f"POOL-{day}"
        assert await recent("default") == "DEFAULT"
    assert len(recent._kept) == 2, (
        "a hundred NodePools came and went: only the last one and `default` are kept"
    )
