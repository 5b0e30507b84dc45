"""Fuzz, small: the fuzz benchmark (benchmarks/fuzz.py) at a few hundred seeded objects of every kind, valid and
invalid, through the API server, nodewright's models, `schedule` and `plan-disruption`, and a handful of them into
the running worker and controller. Nothing may crash, no loop or workflow may stop, and every accepted object
nodewright cannot honour must be reported by an event or a condition naming it and the field."""

from __future__ import annotations

from benchmarks.fuzz import Options, problems, run

KINDS = {"AKSNodeClass", "CapacityBuffer", "CapacityWindow", "NodeClaim", "NodeOverlay", "NodePool", "Pod"}


async def test_fuzzed_objects_crash_nothing_stop_nothing_and_are_reported() -> None:
    row = await run(Options(objects=150, seed=3, sample=10, settle=3.0))

    assert problems(row) == [], row
    assert set(row["by_kind"]) == KINDS, row
    totals = {key: sum(kind.get(key, 0) for kind in row["by_kind"].values()) for key in ("valid", "accepted")}
    assert 0 < totals["valid"] < row["objects"], "valid and invalid objects"
    assert 0 < totals["accepted"] < row["objects"], "some accepted by the API server, some refused"
    assert row["sampled"] >= 5, row
    assert row["canary_seconds"] is not None, row
