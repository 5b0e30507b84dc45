"""Chaos, small: the chaos benchmark (benchmarks/chaos.py) at a few dozen NodeClaims, each kind of fault once
(worker, second worker, controller leader, Temporal server, kube-apiserver and etcd killed and started again,
node agents crashed, a NodeClaim and a Node deleted by hand) under a fifth of Azure's requests failing; then a
scale to zero. Nothing may leak, no NodeClaim may get two VMs, none may be stuck."""

from __future__ import annotations

from benchmarks.chaos import KINDS, Options, problems, run

PODS = 50
"""NodeClaims; the benchmark's N."""


async def test_chaos_leaves_nothing_behind_and_makes_nothing_twice() -> None:
    row = await run(Options(pods=PODS, seed=7, rounds=1, gap=3.0, timeout=600.0, drain_timeout=600.0))

    assert problems(row) == [], row
    assert {kind: row["faults"].get(kind) for kind in KINDS} == dict.fromkeys(KINDS, 1), row
    assert all(row["faults"][label] >= 1 for label in row["faults"] if label.startswith("Azure")), row
    assert (row["vms_left"], row["nics_left"], row["disks_left"]) == (0, 0, 0), row
    assert (row["nodes_left"], row["nodeclaims_left"]) == (0, 0), row
    assert row["vms_created_twice"] == [], row
    assert row["stuck_launching"] == row["stuck_deleting"] == [], row
    assert row["peak_pods_running"] == PODS, row
