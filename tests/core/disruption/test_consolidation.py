"""Consolidation, multi-node then single-node: delete a node whose pods fit elsewhere, or replace one or
many nodes with one strictly cheaper node; spot-to-spot only with 15 cheaper options, behind a setting."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import labels as wk
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Node, Pod
from core.api.nodeclaim import NodeClaim
from core.disruption.commands import BlockReason, Decision, Method
from core.disruption.consolidation import MIN_SPOT_TO_SPOT_OPTIONS
from tests.builders import instance_type
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE,
    MOST_EXPENSIVE_SPOT,
    NOW,
    blocked,
    bound,
    catalog_d,
    catalog_type,
    cluster,
    codes,
    disrupted,
    messages,
    node_pair,
    nodepool,
    only_command,
    pdb,
    plan,
    price,
)

KEEPER = {wk.DO_NOT_DISRUPT: "true"}
"""A node annotated so that it stays, and takes the others' pods."""
CHEAPEST = catalog_type(1, 1)


def test_a_node_whose_pods_fit_elsewhere_is_deleted() -> None:
    result = plan(
        cluster([nodepool()], [node_pair("a"), node_pair("keeper", node_annotations=KEEPER)], [bound("a")])
    )
    command = only_command(result)
    assert (command.method, command.decision) == (Method.SINGLE_NODE_CONSOLIDATION, Decision.DELETE)
    assert [(move.pod, move.source, move.destination) for move in command.pods_moved] == [
        (command.pods_moved[0].pod, "a", "keeper")
    ]
    assert command.savings_micros == MOST_EXPENSIVE.offerings[0].price_micros
    assert codes(result, "keeper") == [BlockReason.DO_NOT_DISRUPT_NODE]


def test_a_node_is_replaced_by_the_cheapest_node_that_fits_its_pods_made_spot() -> None:
    result = plan(cluster([nodepool()], [node_pair("a")], [bound("a", cpu="2", memory="3Gi")]))
    command = only_command(result)
    assert (command.method, command.decision) == (Method.SINGLE_NODE_CONSOLIDATION, Decision.REPLACE)
    [replacement] = command.replacements
    assert replacement.capacity_types == ("spot",)
    assert replacement.instance_type == "4-cpu-4-mem-amd64-linux-test-zone-1-spot"
    assert replacement.price_micros == price(4, 4)
    assert command.savings_micros == price(64, 128) - price(4, 4)
    assert "spot node from types 4-cpu-4-mem-amd64-linux-test-zone-1-spot" in command.log_line()
    by_name = {it.name: it for it in catalog_d()}
    assert all(
        by_name[name].offerings[0].price_micros < price(64, 128) for name in replacement.instance_type_options
    )


def test_a_replacement_must_be_strictly_cheaper() -> None:
    pair = node_pair("a", CHEAPEST, allocatable={"cpu": "900m", "memory": "900Mi", "pods": "5"})
    result = plan(cluster([nodepool()], [pair], [bound("a", cpu="500m")]))
    assert result.commands == ()
    [reason] = blocked(result, "a").reasons
    assert (reason.code, reason.method) == (BlockReason.NOT_CHEAPER, Method.SINGLE_NODE_CONSOLIDATION)
    assert reason.message == "replacement would not be cheaper: $0.207374 vs $0.207374/h"


def test_spot_nodes_are_not_replaced_by_spot_nodes_unless_enabled() -> None:
    snapshot = cluster([nodepool()], [node_pair("a", MOST_EXPENSIVE_SPOT)], [bound("a")])
    result = plan(snapshot)
    assert messages(result, "a") == [
        "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
    ]
    command = only_command(plan(snapshot, spot_to_spot_consolidation=True))
    [replacement] = command.replacements
    assert replacement.capacity_types == ("spot",)
    assert len(replacement.instance_type_options) == MIN_SPOT_TO_SPOT_OPTIONS


def test_spot_to_spot_needs_fifteen_cheaper_options() -> None:
    snapshot = cluster(
        [nodepool()], [node_pair("a", catalog_type(2, 1, wk.CAPACITY_TYPE_SPOT))], [bound("a")]
    )
    result = plan(snapshot, spot_to_spot_consolidation=True)
    assert result.commands == ()
    assert messages(result, "a") == [
        "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate "
        "to consolidate, got 12"
    ]


def test_merging_spot_nodes_needs_no_fifteen_options() -> None:
    tiny = catalog_type(1, 1, wk.CAPACITY_TYPE_SPOT)
    allocatable = {"cpu": "900m", "memory": "1014Mi", "pods": "5"}
    pairs = [node_pair(name, tiny, allocatable=allocatable) for name in ("a", "b")]
    pods = [bound(name, f"p-{name}", memory="600Mi") for name in ("a", "b")]
    command = only_command(plan(cluster([nodepool()], pairs, pods), spot_to_spot_consolidation=True))
    assert command.method is Method.MULTI_NODE_CONSOLIDATION
    [replacement] = command.replacements
    assert len(replacement.instance_type_options) == 12
    assert replacement.price_micros == price(1, 2)


def test_an_on_demand_node_may_become_spot_without_the_setting() -> None:
    command = only_command(plan(cluster([nodepool()], [node_pair("a")], [bound("a")])))
    assert command.replacements[0].capacity_type == wk.CAPACITY_TYPE_SPOT


def test_several_nodes_merge_into_one_cheaper_node() -> None:
    pairs = [node_pair(name) for name in ("a", "b", "c")]
    command = only_command(plan(cluster([nodepool()], pairs, [bound(name) for name in ("a", "b", "c")])))
    assert (command.method, command.decision) == (Method.MULTI_NODE_CONSOLIDATION, Decision.REPLACE)
    assert [candidate.node for candidate in command.candidates] == ["a", "b", "c"]
    [replacement] = command.replacements
    assert {move.destination for move in command.pods_moved} == {replacement.name}
    assert command.savings_micros == 3 * price(64, 128) - price(1, 1)


def test_multi_node_takes_the_cheapest_to_disrupt_first_and_nominates_where_pods_go() -> None:
    important = {"controller.kubernetes.io/pod-deletion-cost": str(2**30)}
    pairs = [node_pair(name) for name in ("a", "b", "c")]
    pods = [bound("a", annotations=important), bound("b"), bound("c")]
    budget = nodepool(budgets=[{"nodes": "2"}])
    result = plan(cluster([budget], pairs, pods))
    command = only_command(result)
    assert (command.method, command.decision) == (Method.MULTI_NODE_CONSOLIDATION, Decision.DELETE)
    assert disrupted(result) == [["b", "c"]]
    assert {move.destination for move in command.pods_moved} == {"a"}
    assert codes(result, "a") == [BlockReason.NOMINATED]


def test_consolidation_replaces_with_at_most_one_node() -> None:
    pods = [bound("a", f"big-{i}", cpu="60") for i in range(2)]
    result = plan(cluster([nodepool()], [node_pair("a", allocatable={"cpu": "128", "pods": "100"})], pods))
    assert result.commands == ()
    assert messages(result, "a") == [
        "can't remove without creating 2 nodes (consolidation replaces with at most one)"
    ]


def test_pods_are_never_moved_onto_a_node_that_is_not_initialized() -> None:
    pairs = [
        node_pair("a", CHEAPEST, allocatable={"cpu": "900m", "pods": "5"}),
        node_pair("launching", initialized=False, ready=False),
    ]
    result = plan(cluster([nodepool()], pairs, [bound("a", "p", cpu="500m")]))
    assert result.commands == ()
    assert messages(result, "a") == [
        "pod default/p cannot be rescheduled: would schedule against uninitialized node launching"
    ]


def test_do_not_disrupt_on_a_pod_or_the_node_keeps_it() -> None:
    pairs = [node_pair("pod-guarded"), node_pair("node-guarded", node_annotations=KEEPER), node_pair("free")]
    pods = [
        bound("pod-guarded", "x", annotations={wk.DO_NOT_DISRUPT: "true"}),
        bound("node-guarded", "y"),
        bound("free", "z"),
    ]
    result = plan(cluster([nodepool()], pairs, pods))
    assert disrupted(result) == [["free"]]
    assert messages(result, "pod-guarded")[0] == "do-not-disrupt pod default/x"
    assert messages(result, "node-guarded")[0] == "do-not-disrupt annotation on node node-guarded"


def test_a_do_not_disrupt_duration_protects_until_the_pod_is_that_old() -> None:
    young = bound("a", "young", annotations={wk.DO_NOT_DISRUPT: "1h"}, created=NOW - timedelta(minutes=5))
    old = bound("b", "old", annotations={wk.DO_NOT_DISRUPT: "1h"}, created=NOW - timedelta(hours=2))
    result = plan(cluster([nodepool()], [node_pair("a"), node_pair("b")], [young, old]))
    assert disrupted(result) == [["b"]]
    assert codes(result, "a")[0] is BlockReason.DO_NOT_DISRUPT_POD


def test_a_pdb_that_allows_no_eviction_keeps_the_node() -> None:
    pods = [bound("a", "web-1", app="web"), bound("b", "web-2", app="web")]
    result = plan(
        cluster(
            [nodepool()],
            [node_pair("a"), node_pair("b")],
            pods,
            [pdb("web", {"app": "web"}, max_unavailable=0)],
        )
    )
    assert result.commands == ()
    for node in ("a", "b"):
        assert messages(result, node) == ["pdb default/web allows 0 evictions"]


def test_a_pdb_lets_one_node_go_then_holds_the_next() -> None:
    pods = [bound(n, f"web-{n}", app="web", cpu="20") for n in ("a", "b", "c")]
    pool = nodepool(budgets=[{"nodes": "1"}])
    budgets = [pdb("web", {"app": "web"}, min_available=2)]
    result = plan(cluster([pool], [node_pair(n) for n in ("a", "b", "c")], pods, budgets))
    assert disrupted(result) == [["a"]]
    for node in ("b", "c"):
        assert codes(result, node) == [BlockReason.POD_DISRUPTION_BUDGET]


def test_pdbs_are_checked_per_candidate_as_karpenter_does() -> None:
    # Each node's pod may be evicted on its own, so all three go in one command; the drain then evicts
    # them one at a time as the PDB allows.
    pods = [bound(n, f"web-{n}", app="web") for n in ("a", "b", "c")]
    budgets = [pdb("web", {"app": "web"}, min_available=2)]
    result = plan(cluster([nodepool()], [node_pair(n) for n in ("a", "b", "c")], pods, budgets))
    assert disrupted(result) == [["a", "b", "c"]]


def test_a_schedule_can_close_the_underutilized_budget() -> None:
    night = NOW.replace(hour=3)
    pool = nodepool(
        budgets=[{"nodes": "0", "schedule": "0 0 * * *", "duration": "9h", "reasons": ["Underutilized"]}]
    )
    result = plan(cluster([pool], [node_pair("a")], [bound("a")]), now=night)
    assert result.commands == ()
    assert messages(result, "a") == ["budget for reason Underutilized is 0 until 09:00"]
    assert len(plan(cluster([pool], [node_pair("a")], [bound("a")])).commands) == 1


def test_a_node_with_an_unknown_price_is_not_consolidated() -> None:
    pair = node_pair("a", node_labels={wk.ZONE: "test-zone-9"})
    result = plan(cluster([nodepool()], [pair], [bound("a")]))
    assert result.commands == ()
    assert messages(result, "a") == [
        "cannot price the node: missing an offering of its instance type in its zone and capacity type"
    ]


def test_the_balanced_policy_weighs_savings_against_disruption() -> None:
    busy_nodes = [
        node_pair(
            f"busy-{i}",
            catalog_type(4, 8),
            allocatable={"cpu": "100m", "pods": "100"},
            node_annotations=KEEPER,
        )
        for i in range(9)
    ]
    busy_pods = [bound(f"busy-{i}", f"busy-{i}", app=f"busy-{i}") for i in range(9)]
    # Replacing it saves 3% of the pool's cost for a quarter of its disruption: refused.
    crowded = node_pair(
        "crowded", catalog_type(4, 8), allocatable={"cpu": "3900m", "memory": "7Gi", "pods": "100"}
    )
    crowded_pods = [bound("crowded", f"c-{j}", app="c", cpu="700m", memory="700Mi") for j in range(5)]
    pool = nodepool(policy="Balanced")
    result = plan(cluster([pool], [*busy_nodes, crowded], [*busy_pods, *crowded_pods]))
    assert result.commands == ()
    [reason] = blocked(result, "crowded").reasons
    assert reason.code is BlockReason.BALANCED
    assert reason.message.startswith('NodePool "default" has the Balanced policy and the move scores 0.')
    # Replacing a large node holding one pod saves most of the pool's cost for a tenth of its disruption.
    lonely = node_pair("lonely")
    approved = plan(cluster([pool], [*busy_nodes, lonely], [*busy_pods, bound("lonely")]))
    assert disrupted(approved) == [["lonely"]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(
        st.tuples(
            st.sampled_from([(2, 4), (4, 8), (8, 16), (16, 32)]),
            st.sampled_from([wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT]),
            st.lists(st.sampled_from(["100m", "500m", "1", "2"]), max_size=4),
        ),
        min_size=1,
        max_size=6,
    ),
    spot_to_spot=st.booleans(),
)
def test_consolidation_never_proposes_a_move_that_is_not_cheaper(
    nodes: list[Any], spot_to_spot: bool
) -> None:
    pairs: list[tuple[NodeClaim, Node]] = []
    pods: list[Pod] = []
    for index, ((cpu, memory), capacity_type, requests) in enumerate(nodes):
        name = f"n-{index}"
        shape = catalog_type(cpu, memory, capacity_type, zone=f"test-zone-{index % 3 + 1}")
        pairs.append(
            node_pair(
                name,
                shape,
                allocatable={"cpu": f"{cpu * 1000 - 100}m", "memory": f"{memory}Gi", "pods": "100"},
            )
        )
        pods.extend(
            bound(name, f"{name}-{j}", app=f"app-{j}", cpu=cpu_request)
            for j, cpu_request in enumerate(requests)
        )
    result = plan(cluster([nodepool()], pairs, pods), spot_to_spot_consolidation=spot_to_spot)
    by_name = {it.name: it for it in catalog_d()}
    for command in result.commands:
        paid = sum(candidate.price_micros or 0 for candidate in command.candidates)
        assert command.savings_micros > 0
        for replacement in command.replacements:
            assert replacement.price_micros is not None and replacement.price_micros < paid
            assert all(
                by_name[name].offerings[0].price_micros < paid for name in replacement.instance_type_options
            )
        if not spot_to_spot and all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in command.candidates):
            assert command.decision is Decision.DELETE
        moved = [move for move in command.pods_moved if move.destination is None or move.problem is not None]
        assert moved == []
    disrupted_nodes = {candidate.node for command in result.commands for candidate in command.candidates}
    assert disrupted_nodes | {entry.node for entry in result.blocked} == {
        node.metadata.name for _, node in pairs
    }
    assert all(entry.reasons for entry in result.blocked)


def test_a_pod_the_scheduler_cannot_simulate_keeps_its_node() -> None:
    pinned = bound("a", "pinned", node_selector={wk.HOSTNAME: "a"})
    result = plan(cluster([nodepool()], [node_pair("a")], [pinned]))
    assert result.commands == ()
    [reason] = blocked(result, "a").reasons
    assert reason.code is BlockReason.PODS_UNSCHEDULABLE
    assert reason.message.startswith("pod default/pinned cannot be rescheduled: ignoring pod: ")


def test_a_replacement_forced_to_spot_needs_a_spot_offering() -> None:
    # The only cheaper type sells on-demand only; consolidation would launch it as spot, which cannot be.
    big = instance_type("big", 8, "16Gi", offerings=[("test-zone-1", "on-demand"), ("test-zone-1", "spot")])
    small = instance_type("small", 2, "4Gi", offerings=[("test-zone-1", "on-demand")])
    result = plan(cluster([nodepool()], [node_pair("a", big)], [bound("a")]), types=[big, small])
    assert result.commands == ()
    assert messages(result, "a") == ["no offering of a cheaper instance type can be launched"]


def test_merging_nodes_of_the_cheapest_type_into_one_no_cheaper_spot_node_is_refused() -> None:
    # Karpenter's same-type filter runs on the options before they are narrowed to spot: the candidates'
    # own type is among them, so every option must be cheaper than one candidate. The cheapest spot node
    # costs what one on-demand candidate costs, so nothing is left: keeping one node and deleting the
    # other would disrupt less for the same price.
    allocatable = {"cpu": "500m", "pods": "5"}
    pairs = [node_pair(name, CHEAPEST, allocatable=allocatable) for name in ("a", "b")]
    pods = [bound(name, f"p-{name}", cpu="400m") for name in ("a", "b")]
    result = plan(cluster([nodepool()], pairs, pods))
    assert result.commands == ()
    for node in ("a", "b"):
        assert codes(result, node) == [BlockReason.NOT_CHEAPER]


def test_nodes_of_one_type_may_merge_into_that_type_on_spot_when_spot_is_cheaper() -> None:
    # The same-type filter keeps options cheaper than the candidates' own price: the type itself on spot.
    both = instance_type(
        "both",
        2,
        "4Gi",
        offerings=[("test-zone-1", "on-demand"), ("test-zone-1", "spot")],
        prices={("test-zone-1", "on-demand"): 100_000, ("test-zone-1", "spot"): 60_000},
    )
    allocatable = {"cpu": "1", "memory": "2Gi", "pods": "5"}
    pairs = [node_pair(name, both, allocatable=allocatable) for name in ("a", "b")]
    pods = [bound(name, f"p-{name}", cpu="800m") for name in ("a", "b")]
    command = only_command(plan(cluster([nodepool()], pairs, pods), types=[both]))
    assert command.method is Method.MULTI_NODE_CONSOLIDATION
    [replacement] = command.replacements
    assert (replacement.instance_type, replacement.capacity_type) == ("both", wk.CAPACITY_TYPE_SPOT)
    assert command.savings_micros == 2 * 100_000 - 60_000


def test_consolidation_moves_no_pod_onto_a_node_whose_pods_changed_within_consolidate_after() -> None:
    # "busy" has room for a's pod, but a pod came or went on it 10 minutes ago and the NodePool waits an
    # hour: Karpenter's consolidation simulation will not place a's pod there, so a is replaced instead.
    pool = nodepool(consolidate_after="1h")
    settled = NOW - timedelta(hours=2)
    pairs = [
        node_pair("a", last_pod_event=settled),
        node_pair("busy", last_pod_event=NOW - timedelta(minutes=10)),
    ]
    result = plan(cluster([pool], pairs, [bound("a", "p"), bound("busy", "q")]))
    command = only_command(result)
    assert (command.method, command.decision) == (Method.SINGLE_NODE_CONSOLIDATION, Decision.REPLACE)
    [replacement] = command.replacements
    assert [(move.pod, move.destination) for move in command.pods_moved] == [("default/p", replacement.name)]
    assert codes(result, "busy") == [BlockReason.CONSOLIDATE_AFTER]


def test_drift_may_move_pods_onto_a_node_whose_pods_changed_within_consolidate_after() -> None:
    # The rule is consolidation's: a drifted node's pods go wherever they fit.
    pool = nodepool(consolidate_after="1h")
    pairs = [
        node_pair("drifted", drifted="NodePoolDrifted"),
        node_pair("busy", last_pod_event=NOW - timedelta(minutes=10)),
    ]
    command = only_command(plan(cluster([pool], pairs, [bound("drifted", "p"), bound("busy", "q")])))
    assert (command.method, command.decision) == (Method.DRIFT, Decision.DELETE)
    assert [(move.pod, move.destination) for move in command.pods_moved] == [("default/p", "busy")]


def test_replacements_are_of_sizes_an_image_of_the_aksnodeclass_boots_on() -> None:
    arm64_node = next(
        it for it in catalog_d() if it.name == "64-cpu-128-mem-arm64-linux-test-zone-1-on-demand"
    )
    amd64_only = AKSNodeClass.parse(
        {
            "metadata": {"name": "default"},
            "status": {
                "images": [
                    {
                        "id": "amd64-image",
                        "requirements": [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}],
                    }
                ]
            },
        }
    )

    def replacement_archs(nodeclasses: list[AKSNodeClass]) -> set[str]:
        snapshot = cluster([nodepool()], [node_pair("a", arm64_node)], [bound("a", cpu="2", memory="3Gi")])
        snapshot.nodeclasses.extend(nodeclasses)
        [replacement] = only_command(plan(snapshot)).replacements
        return {name.split("-")[4] for name in replacement.instance_type_options}

    assert replacement_archs([]) == {"amd64", "arm64"}
    # The arm64 node is still found (and replaced); what replaces it is amd64 only.
    assert replacement_archs([amd64_only]) == {"amd64"}
