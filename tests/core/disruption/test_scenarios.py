"""Whole-plan scenarios the unit tests leave between them: budget percentages rounded up across a plan,
per-reason budgets that close one method and not another, cron windows opening and closing over a week,
do-not-disrupt on a node or a pod against every method, and the spot-to-spot rule at exactly 15 options."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core import labels as wk
from core.disruption.commands import BlockReason, Method
from core.disruption.consolidation import MIN_SPOT_TO_SPOT_OPTIONS
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE_SPOT,
    NOW,
    bound,
    catalog_d,
    cluster,
    codes,
    disrupted,
    messages,
    node_pair,
    nodepool,
    only_command,
    plan,
)

KEEPER = {wk.DO_NOT_DISRUPT: "true"}
WORKDAYS = {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}
"""No disruption at all from 09:00 to 17:00, Monday to Friday (NOW is a Monday at noon)."""


@pytest.mark.parametrize(("nodes", "deleted"), [("10%", 2), ("1%", 1), ("0%", 0), ("50%", 6), ("2", 2)])
def test_a_percentage_budget_is_rounded_up_over_the_pools_nodes(nodes: str, deleted: int) -> None:
    names = [f"n{index:02}" for index in range(11)]
    result = plan(cluster([nodepool(budgets=[{"nodes": nodes}])], [node_pair(name) for name in names]))
    assert sum(len(command.candidates) for command in result.commands) == deleted
    assert all(command.method is Method.EMPTINESS for command in result.commands)
    kept = [entry.node for entry in result.blocked]
    assert len(kept) == 11 - deleted
    assert all(codes(result, node) == [BlockReason.BUDGET] for node in kept)


def test_a_node_already_deleting_counts_in_the_total_and_uses_up_the_budget() -> None:
    # Karpenter: 20% of 11 initialized nodes rounds up to 3; the one being deleted leaves 2.
    pairs = [node_pair(f"n{index}") for index in range(10)] + [node_pair("leaving", deleting=True)]
    result = plan(cluster([nodepool(budgets=[{"nodes": "20%"}])], pairs))
    assert disrupted(result) == [["n0", "n1"]]
    assert messages(result, "n2") == ["budget for reason Empty allows 3 of 11 nodes and 3 are disrupting"]
    assert codes(result, "leaving") == [BlockReason.DELETING]


def test_a_reason_budget_closes_consolidation_while_emptiness_and_drift_go_on() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}])
    full = {"cpu": "32", "pods": "1"}  # busy has no room for the drifted node's pod: it goes to keeper
    pairs = [
        node_pair("empty"),
        node_pair("drifted", drifted="NodePoolDrifted"),
        node_pair("busy", allocatable=full),
        node_pair("keeper", node_annotations=KEEPER),
    ]
    pods = [bound("drifted", "d-1"), bound("busy", "b-1"), bound("keeper", "k-1")]
    result = plan(cluster([pool], pairs, pods))
    assert [command.method for command in result.commands] == [Method.EMPTINESS, Method.DRIFT]
    assert disrupted(result) == [["empty"], ["drifted"]]
    assert messages(result, "busy") == ["budget for reason Underutilized is 0"]


def test_a_drift_budget_of_zero_holds_drift_but_not_consolidation_of_a_drifted_node() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "100%"}])
    pairs = [node_pair("drifted", drifted="NodePoolDrifted"), node_pair("empty")]
    snapshot = cluster([pool], pairs, [bound("drifted", cpu="30")])
    without_consolidation = plan(snapshot, methods=[Method.EMPTINESS, Method.DRIFT])
    assert disrupted(without_consolidation) == [["empty"]]
    assert messages(without_consolidation, "drifted") == ["budget for reason Drifted is 0"]
    # Budgets are per reason: the same node is Underutilized too, and a cheaper node holds its pod.
    result = plan(snapshot)
    assert [(command.method, command.reason) for command in result.commands] == [
        (Method.EMPTINESS, "Empty"),
        (Method.SINGLE_NODE_CONSOLIDATION, "Underutilized"),
    ]
    assert disrupted(result) == [["empty"], ["drifted"]]


def test_a_workday_window_holds_everything_until_it_closes() -> None:
    pool = nodepool(budgets=[WORKDAYS, {"nodes": "100%"}])
    snapshot = cluster([pool], [node_pair("a"), node_pair("b")])
    monday_noon = plan(snapshot)
    assert monday_noon.commands == ()
    assert messages(monday_noon, "a") == ["budget for reason Empty is 0 until 17:00"]
    assert disrupted(plan(snapshot, now=NOW.replace(hour=17))) == [["a", "b"]]
    assert disrupted(plan(snapshot, now=NOW + timedelta(days=5))) == [["a", "b"]]  # Saturday noon
    assert plan(snapshot, now=NOW + timedelta(days=4)).commands == ()  # Friday noon


def test_do_not_disrupt_on_the_node_keeps_it_from_emptiness_and_drift() -> None:
    pairs = [
        node_pair("empty", node_annotations=KEEPER),
        node_pair("drifted", drifted="NodePoolDrifted", node_annotations=KEEPER),
    ]
    result = plan(cluster([nodepool()], pairs, [bound("drifted", cpu="30")]))
    assert result.commands == ()
    for node in ("empty", "drifted"):
        assert codes(result, node) == [BlockReason.DO_NOT_DISRUPT_NODE]


def test_a_do_not_disrupt_pod_keeps_a_drifted_node_but_not_an_expired_one() -> None:
    protected = bound("drifted", "guarded", annotations=KEEPER)
    drifted = cluster([nodepool()], [node_pair("drifted", drifted="NodePoolDrifted")], [protected])
    result = plan(drifted)
    assert result.commands == ()
    assert codes(result, "drifted") == [BlockReason.DO_NOT_DISRUPT_POD]
    assert "guarded" in messages(result, "drifted")[0]

    old = node_pair("old", created=NOW - timedelta(hours=2), expire_after="1h")
    expired = plan(cluster([nodepool()], [old], [bound("old", "guarded", annotations=KEEPER)]))
    assert only_command(expired).method is Method.EXPIRATION


def _spot_catalog(cheaper: int) -> list[object]:
    """The most expensive spot type and the `cheaper` cheapest spot types of its zone, OS and arch."""
    peers = sorted(
        (
            it
            for it in catalog_d()
            if it.offerings[0].capacity_type == wk.CAPACITY_TYPE_SPOT
            and it.name.endswith("-amd64-linux-test-zone-1-spot")
            and it.name != MOST_EXPENSIVE_SPOT.name
        ),
        key=lambda it: it.offerings[0].price_micros,
    )
    return [MOST_EXPENSIVE_SPOT, *peers[:cheaper]]


@pytest.mark.parametrize("cheaper", [MIN_SPOT_TO_SPOT_OPTIONS - 1, MIN_SPOT_TO_SPOT_OPTIONS])
def test_spot_to_spot_needs_at_least_fifteen_cheaper_types(cheaper: int) -> None:
    snapshot = cluster([nodepool()], [node_pair("a", MOST_EXPENSIVE_SPOT)], [bound("a")])
    result = plan(snapshot, _spot_catalog(cheaper), spot_to_spot_consolidation=True)  # type: ignore[arg-type]
    if cheaper < MIN_SPOT_TO_SPOT_OPTIONS:
        assert result.commands == ()
        assert codes(result, "a") == [BlockReason.SPOT_TO_SPOT_TOO_FEW_OPTIONS]
        assert messages(result, "a")[0].endswith(f"got {cheaper}")
    else:
        [replacement] = only_command(result).replacements
        assert len(replacement.instance_type_options) == MIN_SPOT_TO_SPOT_OPTIONS
    disabled = plan(snapshot, _spot_catalog(cheaper))  # type: ignore[arg-type]
    assert codes(disabled, "a") == [BlockReason.SPOT_TO_SPOT_DISABLED]
