"""What every disruption command respects holds for a repack: the spot rules (the SpotToSpotConsolidation gate,
and Karpenter's 15 cheaper instance types for every spot replacement, launched from the 15 cheapest), WhenEmpty
pools, do-not-disrupt on pods (with durations) and nodes, budgets per reason and on schedules, PDBs and
consolidateAfter.

One Catalog D node (16 vCPUs, 16 GiB, $3.318/h) holds a CPU-heavy pod (7 vCPUs) and a memory-heavy one (7.5 GiB):
it is the cheapest type that holds both, so Karpenter's methods find nothing, while an 8-vCPU/1-GiB node and a
2-vCPU/8-GiB node hold them for $1.352/h less. Each plan takes a fraction of a second."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core import labels as wk
from core.disruption import DisruptionPlan, Method
from core.disruption.commands import BlockReason, Decision
from core.disruption.consolidation import MIN_SPOT_TO_SPOT_OPTIONS
from core.disruption.options import RepackOptions
from tests.core.disruption.fixtures import (
    NOW,
    ZONES,
    bound,
    catalog_type,
    cluster,
    codes,
    node_pair,
    nodepool,
    only_command,
    pdb,
    plan,
)

SAVED = 1_351_620
"""$3.317987/h less $0.906571/h (8 vCPUs, 1 GiB) and $1.059796/h (2 vCPUs, 8 GiB)."""
ONE_ZONE = (
    {"key": wk.ZONE, "operator": "In", "values": [ZONES[0]]},
    {"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
    {"key": wk.OS, "operator": "In", "values": ["linux"]},
)
"""A pool that offers each size once: three types at most as dear as the repack may pay for each new node."""


def _plan(
    capacity_type: str = wk.CAPACITY_TYPE_ON_DEMAND,
    *,
    pod_annotations: dict[str, str] | None = None,
    pod_created: datetime | None = None,
    node_annotations: dict[str, str] | None = None,
    pdbs: tuple[Any, ...] = (),
    repack: RepackOptions | None = None,
    **options: Any,
) -> DisruptionPlan:
    pool = {
        key: options.pop(key)
        for key in ("policy", "budgets", "requirements", "consolidate_after")
        if key in options
    }
    pair = node_pair(
        "a",
        catalog_type(16, 16, capacity_type),
        allocatable={"cpu": "16", "memory": "16Gi", "pods": "100"},
        node_labels={wk.ARCH: "amd64", wk.OS: "linux"},
        node_annotations=node_annotations,
        last_pod_event=NOW,
    )
    pods = [
        bound(
            "a",
            "heavy-cpu",
            app="cpu",
            cpu="7",
            memory="900Mi",
            annotations=pod_annotations,
            created=pod_created,
        ),
        bound("a", "heavy-memory", app="memory", cpu="1", memory="7680Mi"),
    ]
    return plan(cluster([nodepool(**pool)], [pair], pods, pdbs), repack=repack or RepackOptions(), **options)


def test_an_on_demand_node_is_repacked_onto_two_spot_nodes_where_karpenter_finds_nothing() -> None:
    """A replacement that may be spot or on-demand is made spot, as Karpenter makes a consolidation's; without
    the repack, nothing."""
    assert _plan(repack=RepackOptions(enabled=False)).commands == ()
    result = _plan()
    command = only_command(result)
    assert (command.method, command.decision, command.reason) == (
        Method.REPACK,
        Decision.REPLACE,
        "Underutilized",
    )
    assert command.savings_micros == SAVED
    assert sorted(r.instance_type or "" for r in command.replacements) == [
        "2-cpu-8-mem-amd64-linux-test-zone-1-spot",
        "8-cpu-1-mem-amd64-linux-test-zone-1-spot",
    ]
    assert all(r.capacity_types == (wk.CAPACITY_TYPE_SPOT,) for r in command.replacements)
    assert result.cost is not None and result.cost.after_micros == result.cost.bound_micros


def test_spot_nodes_are_not_repacked_onto_spot_without_the_spot_to_spot_gate() -> None:
    """Without the gate the pool, which may launch spot, offers the repack no new node at all."""
    result = _plan(wk.CAPACITY_TYPE_SPOT)
    assert result.commands == ()
    assert codes(result, "a") == [BlockReason.SPOT_TO_SPOT_DISABLED]
    assert result.cost is not None and result.cost.bound_micros < result.cost.now_micros


def test_every_spot_replacement_of_a_spot_to_spot_repack_needs_fifteen_cheaper_types() -> None:
    """With the gate, each new node of a spot-to-spot repack has at least 15 types within its share of the
    saving and launches from the 15 cheapest; a pool that offers fewer gets no repack."""
    command = only_command(_plan(wk.CAPACITY_TYPE_SPOT, spot_to_spot_consolidation=True))
    assert command.method is Method.REPACK and command.savings_micros == SAVED
    assert len(command.replacements) == 2
    for replacement in command.replacements:
        assert replacement.capacity_types == (wk.CAPACITY_TYPE_SPOT,)
        assert len(replacement.instance_type_options) == MIN_SPOT_TO_SPOT_OPTIONS
        assert replacement.instance_type == replacement.instance_type_options[0]
    narrow = _plan(wk.CAPACITY_TYPE_SPOT, spot_to_spot_consolidation=True, requirements=ONE_ZONE)
    assert narrow.commands == ()
    # On-demand candidates are not held to the rule: the same narrow pool repacks them.
    assert only_command(_plan(requirements=ONE_ZONE)).method is Method.REPACK


def test_a_when_empty_pool_is_left_to_emptiness() -> None:
    result = _plan(policy="WhenEmpty")
    assert result.commands == ()
    assert codes(result, "a") == [BlockReason.WHEN_EMPTY]


def test_do_not_disrupt_on_a_pod_or_on_the_node_keeps_it() -> None:
    on_pod = _plan(pod_annotations={wk.DO_NOT_DISRUPT: "true"})
    assert on_pod.commands == ()
    assert codes(on_pod, "a") == [BlockReason.DO_NOT_DISRUPT_POD]
    on_node = _plan(node_annotations={wk.DO_NOT_DISRUPT: "true"})
    assert on_node.commands == ()
    assert codes(on_node, "a") == [BlockReason.DO_NOT_DISRUPT_NODE]


def test_a_do_not_disrupt_duration_keeps_the_node_until_the_pod_is_that_old() -> None:
    young = _plan(pod_annotations={wk.DO_NOT_DISRUPT: "1h"}, pod_created=NOW - timedelta(minutes=30))
    assert young.commands == ()
    assert codes(young, "a") == [BlockReason.DO_NOT_DISRUPT_POD]
    old = _plan(pod_annotations={wk.DO_NOT_DISRUPT: "1h"}, pod_created=NOW - timedelta(hours=2))
    assert only_command(old).method is Method.REPACK


def test_an_underutilized_budget_of_zero_stops_the_repack_and_another_reasons_does_not() -> None:
    stopped = _plan(budgets=({"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}))
    assert stopped.commands == ()
    assert codes(stopped, "a") == [BlockReason.BUDGET]
    other = _plan(budgets=({"nodes": "0", "reasons": ["Drifted"]},))
    assert only_command(other).method is Method.REPACK


def test_a_scheduled_budget_of_zero_stops_the_repack_only_while_its_window_is_open() -> None:
    """NOW is a Monday at noon."""
    window = {"nodes": "0", "schedule": "0 12 * * *", "duration": "1h"}
    assert codes(_plan(budgets=(window, {"nodes": "100%"})), "a") == [BlockReason.BUDGET]
    later = {**window, "schedule": "0 15 * * *"}
    assert only_command(_plan(budgets=(later, {"nodes": "100%"}))).method is Method.REPACK


def test_a_pdb_that_allows_no_eviction_and_consolidate_after_keep_the_node() -> None:
    held = _plan(pdbs=(pdb("cpu", {"app": "cpu"}, max_unavailable=0),))
    assert held.commands == ()
    assert codes(held, "a") == [BlockReason.POD_DISRUPTION_BUDGET]
    quiet = _plan(consolidate_after="2h")
    assert quiet.commands == ()
    assert codes(quiet, "a") == [BlockReason.CONSOLIDATE_AFTER]
