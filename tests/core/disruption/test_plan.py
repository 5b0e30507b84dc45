"""The whole plan: Karpenter's order, expiration that nothing stops, every node accounted for, options, and
the JSON that `nodewright plan-disruption` prints."""

from __future__ import annotations

import json
from datetime import timedelta

from core import labels as wk
from core.api.manifests import Manifests
from core.disruption.commands import EXPIRED, BlockReason, Decision, Method, format_price
from tests.builders import pod
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE,
    NOW,
    bound,
    catalog_type,
    cluster,
    codes,
    disrupted,
    messages,
    node_pair,
    nodepool,
    pdb,
    plan,
)

OLD_HASH = {wk.NODEPOOL_HASH: "1", wk.NODEPOOL_HASH_VERSION: "v3"}
SMALL = catalog_type(4, 8)
SMALL_ALLOCATABLE = {"cpu": "3900m", "memory": "7Gi", "pods": "100"}


def mixed_cluster() -> Manifests:
    """A node for each method: expired, empty, drifted, and two that merge; none has room for another's
    pods, so that each command stands alone."""
    pool = nodepool(annotations={wk.NODEPOOL_HASH: "2", wk.NODEPOOL_HASH_VERSION: "v3"})
    tight = {"cpu": "1100m", "pods": "100"}
    pairs = [
        node_pair("expired", SMALL, allocatable=SMALL_ALLOCATABLE, created=NOW - timedelta(days=31)),
        node_pair("empty", allocatable={"cpu": "100m", "pods": "100"}),
        node_pair("drifted", SMALL, allocatable=SMALL_ALLOCATABLE, claim_annotations=OLD_HASH),
        node_pair("merge-1", allocatable=tight),
        node_pair("merge-2", allocatable=tight),
    ]
    pods = [
        bound("expired", "e", cpu="3"),
        bound("drifted", "d", cpu="3"),
        bound("merge-1", "m1", cpu="1"),
        bound("merge-2", "m2", cpu="1"),
    ]
    return cluster([pool], pairs, pods)


def test_commands_come_in_karpenters_order() -> None:
    result = plan(mixed_cluster())
    assert [command.method for command in result.commands] == [
        Method.EXPIRATION,
        Method.EMPTINESS,
        Method.DRIFT,
        Method.MULTI_NODE_CONSOLIDATION,
    ]
    assert [command.reason for command in result.commands] == [EXPIRED, "Empty", "Drifted", "Underutilized"]
    assert disrupted(result) == [["expired"], ["empty"], ["drifted"], ["merge-1", "merge-2"]]
    assert result.blocked == ()
    assert result.savings_micros == sum(command.savings_micros for command in result.commands)


def test_expiration_ignores_budgets_do_not_disrupt_and_pdbs_but_uses_up_the_budget() -> None:
    pool = nodepool(budgets=[{"nodes": "1"}])
    pairs = [
        node_pair("old", created=NOW - timedelta(days=40), node_annotations={wk.DO_NOT_DISRUPT: "true"}),
        node_pair("idle"),
    ]
    pods = [bound("old", "guarded", app="web", cpu="40", annotations={wk.DO_NOT_DISRUPT: "true"})]
    result = plan(cluster([pool], pairs, pods, [pdb("web", {"app": "web"}, max_unavailable=0)]))
    [command] = result.commands
    assert (command.method, command.decision) == (Method.EXPIRATION, Decision.REPLACE)
    assert command.candidates[0].detail == "expired at 2024-05-24 12:00:00 (expireAfter 720h)"
    assert messages(result, "idle") == ["budget for reason Empty allows 1 of 2 nodes and 1 are disrupting"]


def test_expired_pods_without_room_show_what_the_provisioner_will_launch() -> None:
    pairs = [node_pair("old", SMALL, allocatable=SMALL_ALLOCATABLE, created=NOW - timedelta(days=40))]
    [command] = plan(cluster([nodepool()], pairs, [bound("old", "p", cpu="3")])).commands
    [replacement] = command.replacements
    assert command.pods_moved[0].destination == replacement.name
    assert command.savings_micros == SMALL.offerings[0].price_micros - (replacement.price_micros or 0)


def test_every_node_is_disrupted_or_kept_with_a_reason() -> None:
    snapshot = mixed_cluster()
    snapshot.nodes.append(node_pair("aks-system-0")[1])
    claim, busy = node_pair("busy", node_annotations={wk.DO_NOT_DISRUPT: "true"})
    snapshot.nodeclaims.append(claim)
    snapshot.nodes.append(busy)
    result = plan(snapshot)
    accounted = [c.node for command in result.commands for c in command.candidates]
    accounted += [entry.node for entry in result.blocked]
    assert sorted(accounted) == sorted(node.metadata.name for node in snapshot.nodes)
    assert codes(result, "aks-system-0") == [BlockReason.NOT_MANAGED]
    assert all(entry.reasons for entry in result.blocked)


def test_methods_and_nodepools_can_be_limited() -> None:
    only_consolidation = plan(
        mixed_cluster(), methods={Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION}
    )
    assert {command.method for command in only_consolidation.commands} <= {
        Method.MULTI_NODE_CONSOLIDATION,
        Method.SINGLE_NODE_CONSOLIDATION,
    }
    assert "expired" not in {c.node for command in only_consolidation.commands for c in command.candidates}
    elsewhere = plan(mixed_cluster(), nodepools=frozenset({"other"}))
    assert elsewhere.commands == ()
    assert messages(elsewhere, "empty") == ["its NodePool is not among those asked for"]


def test_pods_of_nodes_already_leaving_take_room_first() -> None:
    pairs = [node_pair("leaving", deleting=True), node_pair("a"), node_pair("b")]
    pods = [bound("leaving", "evicted", cpu="20"), bound("a", "x", cpu="20"), bound("b", "y", cpu="1")]
    result = plan(cluster([nodepool()], pairs, pods))
    assert codes(result, "leaving") == [BlockReason.DELETING]
    assert codes(result, "b") == [BlockReason.NOMINATED]
    assert disrupted(result) == [["a"]]


def test_pending_pods_are_left_to_the_provisioner_with_a_note() -> None:
    result = plan(cluster([nodepool()], [node_pair("a")], [pod("waiting")]))
    assert result.notes == (
        "1 pending pods are left to the provisioner: disruption only moves pods that are running",
    )


def test_the_json_is_snake_case_and_deterministic() -> None:
    first = plan(mixed_cluster()).to_json()
    assert json.dumps(first, sort_keys=True) == json.dumps(plan(mixed_cluster()).to_json(), sort_keys=True)
    assert set(first) == {
        "commands",
        "blocked",
        "budgets",
        "total_savings_per_hour",
        "notes",
        "repairs",
        "refused_repairs",
    }
    commands = first["commands"]
    assert isinstance(commands, list)
    command = commands[1]
    assert set(command) == {
        "method",
        "reason",
        "decision",
        "candidates",
        "replacements",
        "savings_per_hour",
        "pods_moved",
        "message",
    }
    assert command["savings_per_hour"] == round(MOST_EXPENSIVE.offerings[0].price_micros / 1e6, 6)
    assert command["message"].startswith(
        "disrupting via emptiness delete, terminating 1 nodes (0 pods) empty/"
    )
    replace = commands[2]["replacements"][0]
    assert {"name", "nodepool", "instance_type", "price_per_hour", "instance_type_options", "pods"} <= set(
        replace
    )
    moved = commands[2]["pods_moved"][0]
    assert moved == {"pod": "default/d", "from": "drifted", "to": replace["name"]}
    budgets = first["budgets"]
    assert isinstance(budgets, list)
    budget = budgets[0]
    assert set(budget) == {
        "nodepool",
        "reason",
        "nodes",
        "limit",
        "disrupting",
        "allowed",
        "taken_by_plan",
        "until",
    }


def test_prices_print_with_at_least_three_decimals() -> None:
    assert format_price(192_000) == "$0.192"
    assert format_price(187_500) == "$0.1875"
    assert format_price(10_400) == "$0.0104"
    assert format_price(2_000_000) == "$2.000"
    assert format_price(-500_000) == "-$0.500"


def test_an_expired_nodeclaim_with_a_termination_grace_period_makes_no_room_for_pods_that_stay() -> None:
    pairs = [
        node_pair(
            "old",
            SMALL,
            allocatable=SMALL_ALLOCATABLE,
            created=NOW - timedelta(days=40),
            termination_grace_period="30m",
        ),
        node_pair(
            "roomy", SMALL, allocatable=SMALL_ALLOCATABLE, node_annotations={wk.DO_NOT_DISRUPT: "true"}
        ),
    ]
    pods = [
        bound("old", "guarded", cpu="3", annotations={wk.DO_NOT_DISRUPT: "true"}),
        bound("old", "plain", app="plain", cpu="500m"),
        bound("roomy", "big", app="big", cpu="3"),
    ]
    [command] = plan(cluster([nodepool()], pairs, pods)).commands
    assert (command.method, command.decision) == (Method.EXPIRATION, Decision.DELETE)
    assert [(move.pod, move.destination) for move in command.pods_moved] == [("default/plain", "roomy")]
    assert "default/guarded" in (command.candidates[0].detail or "")
