"""Emptiness: empty, quiet candidates are deleted together, as far as the `Empty` budgets allow."""

from __future__ import annotations

from datetime import timedelta

from core import labels as wk
from core.disruption.commands import BlockReason, Decision, Method
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE,
    NOW,
    blocked,
    bound,
    cluster,
    codes,
    disrupted,
    messages,
    node_pair,
    nodepool,
    plan,
)


def test_empty_nodes_are_deleted_in_one_command() -> None:
    result = plan(
        cluster([nodepool()], [node_pair("a"), node_pair("b"), node_pair("c")], [bound("c", cpu="30")])
    )
    command = result.commands[0]
    assert (command.method, command.reason, command.decision) == (Method.EMPTINESS, "Empty", Decision.DELETE)
    assert disrupted(result)[0] == ["a", "b"]
    assert command.savings_micros == 2 * MOST_EXPENSIVE.offerings[0].price_micros
    assert command.replacements == () and command.pods_moved == ()


def test_daemonset_pods_do_not_make_a_node_busy() -> None:
    result = plan(cluster([nodepool()], [node_pair("a")], [bound("a", owner_kind="DaemonSet")]))
    assert disrupted(result) == [["a"]]
    assert result.commands[0].method is Method.EMPTINESS


def test_the_empty_budget_limits_how_many_go_and_says_so_for_the_others() -> None:
    pool = nodepool(budgets=[{"nodes": "2", "reasons": ["Empty"]}, {"nodes": "100%"}])
    pairs = [node_pair(name) for name in ("a", "b", "c", "d")]
    result = plan(cluster([pool], pairs))
    assert disrupted(result) == [["a", "b"]]
    for node in ("c", "d"):
        assert codes(result, node) == [BlockReason.BUDGET]
        assert messages(result, node) == ["budget for reason Empty allows 2 of 4 nodes and 2 are disrupting"]


def test_an_empty_budget_of_zero_keeps_empty_nodes_from_consolidation_too() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "reasons": ["Empty"]}, {"nodes": "100%"}])
    result = plan(cluster([pool], [node_pair("a")]))
    assert result.commands == ()
    assert messages(result, "a") == ["budget for reason Empty is 0"]


def test_consolidate_after_must_pass_since_the_last_pod_left() -> None:
    pool = nodepool(consolidate_after="30m")
    result = plan(
        cluster(
            [pool],
            [
                node_pair("recent", last_pod_event=NOW - timedelta(minutes=10)),
                node_pair("settled", last_pod_event=NOW - timedelta(hours=1)),
            ],
        )
    )
    assert disrupted(result) == [["settled"]]
    [reason] = blocked(result, "recent").reasons
    assert (reason.code, reason.method) == (BlockReason.CONSOLIDATE_AFTER, Method.EMPTINESS)
    assert reason.message == "consolidateAfter 30m has not passed since the last pod event (20m left)"


def test_consolidate_after_never_disables_emptiness() -> None:
    result = plan(cluster([nodepool(consolidate_after="Never")], [node_pair("a")]))
    assert result.commands == ()
    assert codes(result, "a") == [BlockReason.CONSOLIDATION_DISABLED]


def test_when_empty_deletes_empty_nodes_only() -> None:
    result = plan(cluster([nodepool(policy="WhenEmpty")], [node_pair("a"), node_pair("b")], [bound("b")]))
    assert disrupted(result) == [["a"]]
    assert messages(result, "b") == [
        'NodePool "default" has consolidationPolicy WhenEmpty and the node has 1 pods to move'
    ]


def test_a_do_not_disrupt_daemonset_pod_keeps_an_empty_node() -> None:
    pod = bound("a", "agent", owner_kind="DaemonSet", annotations={wk.DO_NOT_DISRUPT: "true"})
    result = plan(cluster([nodepool()], [node_pair("a")], [pod]))
    assert result.commands == ()
    assert messages(result, "a") == ["do-not-disrupt pod default/agent"]
