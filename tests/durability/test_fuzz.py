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
    totals = {
        key: sum(kind.get(key, 0) for kind in row["by_kind"].values())
        for key in ("valid", "accepted", "valid, refused")
    }
    assert 0 < totals["valid"] < row["objects"], "valid and invalid objects"
    assert 0 < totals["accepted"] < row["objects"], "some accepted by the API server, some refused"
    # The objects meant to be valid meet the rules the schema cannot say (the CRDs' CEL, pod validation): the API
    # server takes them, of every kind.
    assert totals["valid, refused"] <= totals["valid"] // 10, row["by_kind"]
    assert all(counts.get("accepted", 0) >= counts["objects"] // 4 for counts in row["by_kind"].values()), row
    assert row["sampled"] >= 5, row
    assert row["canary_seconds"] is not None, row
