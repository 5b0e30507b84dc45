"""Provisioning scenarios with Karpenter's expected outcomes (karpenter-core.md sections 2.2-2.9, 7.1), mostly
taken from kubernetes-sigs/karpenter's provisioning and scheduling suites and run against Catalog P.

Each test names the Karpenter behaviour it pins; topology spread and pod (anti-)affinity live in
test_topology.py.
"""

from __future__ import annotations

import pytest

from core import labels as wk
from core.api.kube import pod_key
from core.scheduling.requirements import Requirements
from core.scheduling.scheduler import SchedulingOptions
from tests.builders import (
    GPU_VENDOR_A,
    ON_DEMAND,
    SPOT,
    TOLERATE_ALL,
    ZONES,
    catalog_p,
    daemonset,
    expr,
    instance_type,
    node,
    nodepool,
    pod,
    pod_term,
    pods,
    price_micros,
    resources,
    solve,
    spread,
    taint,
    toleration,
    unschedulable,
)
from tests.builders import placements as where

CATALOG = {it.name: it for it in catalog_p()}
SMALL, DEFAULT, ARM = "small-instance-type", "default-instance-type", "arm-instance-type"
SINGLE_POD = "single-pod-instance-type"


def claim_for(results, key):
    """The new NodeClaim holding a pod (fails when it went elsewhere)."""
    matches = [claim for claim in results.nodeclaims if key in claim.pods]
    assert len(matches) == 1, f"{key} is not on exactly one new NodeClaim: {where(results)}"
    return matches[0]


def requirement(claim, key):
    """The claim's requirement on a key, as the algebra reads it."""
    return Requirements.from_dicts(claim.requirements).get(key)


def reasons_of(results, p):
    """Every reason a pending pod was given, in one string (fails when the pod was placed)."""
    reasons = unschedulable(results)[pod_key(p)]
    return " | ".join(reasons)


# ----------------------------------------------------------------------------- instance selection, price


def test_a_pod_without_requests_gets_one_claim_on_the_cheapest_type():
    p = pod()
    results = solve([p])
    claim = claim_for(results, pod_key(p))
    assert len(results.nodeclaims) == 1
    assert claim.instance_type == SMALL
    assert claim.price_micros == price_micros(CATALOG[SMALL].capacity)
    assert claim.nodepool == "default"
    assert claim.labels[wk.NODEPOOL] == "default"


def test_instance_type_options_are_ordered_by_price_and_the_launch_is_the_cheapest():
    p = pod(cpu="1", memory="1Gi")
    claim = claim_for(solve([p]), pod_key(p))
    prices = [
        min(o.price_micros for o in CATALOG[name].offerings if o.available)
        for name in claim.instance_type_options
    ]
    assert prices == sorted(prices)
    assert set(claim.instance_type_options) == set(CATALOG)  # every Catalog P type fits 1 CPU / 1Gi
    assert claim.instance_type == claim.instance_type_options[0]
    assert claim.price_micros == prices[0]
    assert claim.zone in requirement(claim, wk.ZONE).values or requirement(claim, wk.ZONE).has(claim.zone)
    assert requirement(claim, wk.INSTANCE_TYPE).values == set(claim.instance_type_options)


def test_the_launched_offering_is_the_cheapest_compatible_one_across_zones_and_capacity_types():
    prices = {
        ("test-zone-1", SPOT): 900,
        ("test-zone-2", SPOT): 700,
        ("test-zone-1", ON_DEMAND): 800,
        ("test-zone-2", ON_DEMAND): 600,
        ("test-zone-3", ON_DEMAND): 650,
    }
    types = [instance_type("only", 4, "4Gi", prices=prices)]
    anywhere, in_zone_1 = pod(), pod(node_selector={wk.ZONE: "test-zone-1"})
    results = solve([anywhere], types=types)
    assert (
        results.nodeclaims[0].zone,
        results.nodeclaims[0].capacity_type,
        results.nodeclaims[0].price_micros,
    ) == (
        "test-zone-2",
        ON_DEMAND,
        600,
    )
    results = solve([in_zone_1], types=types)
    assert (
        results.nodeclaims[0].zone,
        results.nodeclaims[0].capacity_type,
        results.nodeclaims[0].price_micros,
    ) == (
        "test-zone-1",
        ON_DEMAND,
        800,
    )


def test_unavailable_offerings_are_never_launched():
    types = [
        instance_type(
            "cheap", 4, "4Gi", price=100, unavailable=[(z, c) for z in ZONES for c in (SPOT, ON_DEMAND)]
        ),
        instance_type("dear", 4, "4Gi", price=500),
    ]
    claim = solve([pod()], types=types).nodeclaims[0]
    assert claim.instance_type == "dear"
    assert claim.instance_type_options == ["dear"]


def test_a_pod_lands_on_the_cheapest_type_that_fits_its_requests():
    three_cpus = pod(cpu="3")
    claim = claim_for(solve([three_cpus]), pod_key(three_cpus))
    assert claim.instance_type == DEFAULT
    assert SMALL not in claim.instance_type_options


def test_a_gpu_pod_gets_a_type_with_that_gpu():
    gpu = pod(limits={GPU_VENDOR_A: 1})
    claim = claim_for(solve([gpu]), pod_key(gpu))
    assert claim.instance_type_options == ["gpu-vendor-instance-type"]


def test_a_pod_larger_than_every_type_is_unschedulable_with_a_resources_reason():
    huge = pod(cpu="100")
    results = solve([huge])
    assert results.nodeclaims == []
    reason = reasons_of(results, huge)
    assert '"default"' in reason
    assert "cpu" in reason and "enough" in reason


def test_pods_count_against_the_max_pods_of_a_type():
    # Every Catalog P type holds 5 pods, so six pods need two nodes.
    six = pods(6)
    results = solve(six)
    assert sorted(len(claim.pods) for claim in results.nodeclaims) == [1, 5]


def test_single_pod_instance_type_makes_one_node_per_pod():
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", SINGLE_POD)])
    results = solve(pods(3), pools=[pool])
    assert len(results.nodeclaims) == 3
    assert all(claim.instance_type == SINGLE_POD for claim in results.nodeclaims)


def test_pods_are_packed_first_fit_decreasing():
    # Largest first: 3 CPU opens a 4 CPU claim, 1 CPU no longer fits beside it (3.9 allocatable) and opens a
    # second, and 0.5 CPU joins the first. In arrival order, 0.5 and 1 would have shared a node instead.
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", SMALL, DEFAULT)])
    big, half, one = pod(cpu="3"), pod(cpu="500m"), pod(cpu="1")
    placed = where(solve([half, one, big], pools=[pool]))
    assert placed[pod_key(big)] == placed[pod_key(half)]
    assert placed[pod_key(one)] != placed[pod_key(big)]


def test_pods_of_equal_size_are_queued_by_creation_time():
    # The limit leaves room for one small node, so only the first pod in the queue gets capacity.
    pool = nodepool(limits={"cpu": "2"})
    late, early = pod("late", cpu="1.5", created_seconds=100), pod("early", cpu="1.5", created_seconds=5)
    results = solve([late, early], pools=[pool])
    assert set(where(results)) == {pod_key(early)}


def test_claim_requests_hold_the_pods_and_the_pods_resource():
    a, b = pod(cpu="1", memory="1Gi"), pod(cpu="500m", memory="512Mi")
    claim = solve([a, b]).nodeclaims[0]
    assert claim.requests == resources(cpu="1.5", memory="1536Mi", pods=2)


def test_a_resource_no_type_offers_is_named_in_the_reason():
    p = pod(limits={"nvidia.com/gpu": 1})
    results = solve([p])
    assert results.nodeclaims == []
    assert "nvidia.com/gpu" in reasons_of(results, p)


def test_claims_list_at_most_600_types_keeping_the_cheapest():
    types = [instance_type(f"t-{i:03d}", 1, "1Gi", price=1000 + i) for i in range(650)]
    claim = solve([pod()], types=types).nodeclaims[0]
    assert claim.instance_type_options == [f"t-{i:03d}" for i in range(600)]
    assert claim.instance_type == "t-000"


def test_claim_capacity_types_are_those_its_offerings_allow():
    pool = nodepool(requirements=[expr(wk.CAPACITY_TYPE, "In", ON_DEMAND)])
    claim = solve([pod()], pools=[pool]).nodeclaims[0]
    assert requirement(claim, wk.CAPACITY_TYPE).values == {ON_DEMAND}
    assert claim.capacity_type == ON_DEMAND


# ------------------------------------------------------------------------------ existing and in-flight


def test_pods_go_to_an_existing_node_with_room_before_new_capacity():
    existing = node(
        "node-a", nodepool="default", zone="test-zone-1", capacity_type=SPOT, instance_type=DEFAULT
    )
    p = pod(cpu="1")
    results = solve([p], nodes=[existing])
    assert results.nodeclaims == []
    assert where(results) == {pod_key(p): "node-a"}


def test_an_existing_node_without_room_is_skipped():
    existing = node("node-a", cpu=1)  # 900m allocatable
    p = pod(cpu="1")
    results = solve([p], nodes=[existing])
    assert where(results)[pod_key(p)] == "new-0"


def test_bound_pods_use_up_an_existing_node():
    busy = node("node-a", bound=[pod(cpu="3", node_name="node-a")])
    p = pod(cpu="1")  # 3.9 - 3 = 0.9 left
    assert where(solve([p], nodes=[busy]))[pod_key(p)] == "new-0"
    small = pod(cpu="900m")
    assert where(solve([small], nodes=[busy]))[pod_key(small)] == "node-a"


def test_finished_and_terminating_pods_free_their_node():
    done = node(
        "node-a",
        bound=[
            pod(cpu="3", node_name="node-a", phase="Succeeded"),
            pod(cpu="3", node_name="node-a", deleting=True),
        ],
    )
    p = pod(cpu="3")
    assert where(solve([p], nodes=[done]))[pod_key(p)] == "node-a"


def test_initialized_nodes_are_used_before_in_flight_ones_then_by_name():
    in_flight = node("a-launching", initialized=False)
    ready_b, ready_c = node("c-ready"), node("b-ready")
    p = pod(cpu="1")
    assert where(solve([p], nodes=[in_flight, ready_b, ready_c]))[pod_key(p)] == "b-ready"
    assert where(solve([p], nodes=[in_flight]))[pod_key(p)] == "a-launching"


def test_an_in_flight_node_is_filled_before_new_capacity_is_made():
    in_flight = node("launching", nodepool="default", initialized=False)
    batch = pods(3, cpu="1")
    results = solve(batch, nodes=[in_flight])
    assert results.nodeclaims == []
    assert set(where(results).values()) == {"launching"}


def test_claims_made_earlier_are_tried_with_the_fewest_pods_first():
    # Two 2-CPU pods that avoid each other open two claims; the small pods then go to the emptier claim
    # each time (Karpenter sorts in-flight NodeClaims by pod count before every pod).
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", DEFAULT)])
    big = pods(2, cpu="2", labels={"app": "big"}, anti_affinity=[pod_term(wk.HOSTNAME, {"app": "big"})])
    small = pods(2, cpu="100m")
    results = solve(big + small, pools=[pool])
    assert sorted(len(claim.pods) for claim in results.nodeclaims) == [2, 2]


def test_existing_node_taints_keep_intolerant_pods_off():
    tainted = node("tainted", taints=[taint("dedicated", "db")])
    plain, tolerant = pod(), pod(tolerations=[toleration("dedicated", "db", "NoSchedule")])
    results = solve([plain, tolerant], nodes=[tainted])
    assert where(results)[pod_key(tolerant)] == "tainted"
    assert where(results)[pod_key(plain)].startswith("new-")


def test_an_existing_node_without_the_selected_label_does_not_take_the_pod():
    # kube-scheduler only binds a pod where the node carries the label; undefined well-known labels are
    # allowed on NodeClaims (the provider fills them in) but not on nodes that exist.
    unlabelled = node("no-zone")
    p = pod(node_selector={wk.ZONE: "test-zone-2"})
    results = solve([p], nodes=[unlabelled])
    assert where(results)[pod_key(p)] == "new-0"
    assert results.nodeclaims[0].zone == "test-zone-2"


def test_existing_node_labels_must_satisfy_the_pod():
    zone_1 = node("zone-1-node", zone="test-zone-1")
    p = pod(node_selector={wk.ZONE: "test-zone-2"})
    results = solve([p], nodes=[zone_1])
    assert where(results)[pod_key(p)] == "new-0"
    assert results.nodeclaims[0].zone == "test-zone-2"


def test_a_daemonset_pod_missing_from_an_existing_node_reserves_its_share():
    ds = daemonset("agent", cpu="1")
    empty = node("node-a")  # 3.9 CPU allocatable, 1 of it promised to the agent
    fits, too_big = pod(cpu="2.5"), pod(cpu="3")
    results = solve([fits, too_big], nodes=[empty], daemonsets=[ds])
    assert where(results)[pod_key(fits)] == "node-a"
    assert where(results)[pod_key(too_big)].startswith("new-")


def test_a_daemonset_pod_already_on_the_node_is_not_counted_twice():
    ds = daemonset("agent", cpu="1")
    running = pod("agent-abc", cpu="1", owner_kind="DaemonSet", owner_name="agent", node_name="node-a")
    with_agent = node("node-a", bound=[running])
    p = pod(cpu="2.5")
    assert where(solve([p], nodes=[with_agent], daemonsets=[ds]))[pod_key(p)] == "node-a"


def test_host_ports_of_bound_pods_block_the_same_port():
    busy = node("node-a", bound=[pod(host_ports=[8080], node_name="node-a")])
    same, other = pod(host_ports=[8080]), pod(host_ports=[9090])
    results = solve([same, other], nodes=[busy])
    assert where(results)[pod_key(other)] == "node-a"
    assert where(results)[pod_key(same)].startswith("new-")


# ------------------------------------------------------------------------------------- weights, limits


def test_the_highest_weight_nodepool_always_wins():
    pools = [nodepool("a-default"), nodepool("b-twenty", weight=20), nodepool("c-hundred", weight=100)]
    results = solve(pods(3), pools=pools)
    assert {claim.nodepool for claim in results.nodeclaims} == {"c-hundred"}


def test_equal_weights_are_ordered_by_name_later_in_the_alphabet_first():
    pools = [nodepool("alpha"), nodepool("bravo"), nodepool("charlie")]
    assert solve([pod()], pools=pools).nodeclaims[0].nodepool == "charlie"


def test_an_explicitly_selected_nodepool_wins_over_weight():
    pools = [nodepool("target"), nodepool("heavy", weight=100)]
    p = pod(node_selector={wk.NODEPOOL: "target"})
    assert claim_for(solve([p], pools=pools), pod_key(p)).nodepool == "target"


def test_a_lower_weight_nodepool_takes_what_the_heavier_cannot():
    heavy = nodepool("heavy", weight=100, requirements=[expr(wk.ARCH, "In", "amd64")])
    light = nodepool("light")
    arm, amd = pod(node_selector={wk.ARCH: "arm64"}), pod(node_selector={wk.ARCH: "amd64"})
    results = solve([arm, amd], pools=[heavy, light])
    assert claim_for(results, pod_key(arm)).nodepool == "light"
    assert claim_for(results, pod_key(amd)).nodepool == "heavy"


def test_a_nodepool_over_its_limits_makes_nothing_and_says_so():
    pool = nodepool(limits={"cpu": "20"})
    used = node("big", nodepool="default", cpu=100, taints=[taint("full", "yes")])
    p = pod()  # cannot use the existing node, and the pool already holds 100 of its 20 CPUs
    results = solve([p], pools=[pool], nodes=[used])
    assert results.nodeclaims == []
    reason = reasons_of(results, p)
    assert '"default"' in reason and "limit" in reason


def test_a_pod_fits_when_the_limit_allows_a_big_enough_type():
    pool = nodepool(limits={"cpu": "2"})
    p = pod(cpu="1.75")  # needs the 2 CPU type, which the limit allows
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert claim.instance_type_options == [SMALL]


def test_a_pod_needing_more_than_the_limit_is_unschedulable_with_a_limits_reason():
    pool = nodepool(limits={"cpu": "2"})
    p = pod(cpu="2.1")
    results = solve([p], pools=[pool])
    assert results.nodeclaims == []
    reason = reasons_of(results, p)
    assert '"default"' in reason and "limit" in reason


def test_limits_are_charged_pessimistically_with_the_largest_remaining_option():
    # limit 8 CPU: the first claim may still become a 4 CPU type, so 4 is charged; the second charges the
    # remaining 4; the third finds nothing left even though three 2 CPU nodes would fit in 8.
    pool = nodepool(limits={"cpu": "8"})
    apart = pods(3, cpu="1", labels={"app": "a"}, anti_affinity=[pod_term(wk.HOSTNAME, {"app": "a"})])
    results = solve(apart, pools=[pool])
    assert len(results.nodeclaims) == 2
    assert len(results.unschedulable) == 1
    assert "limit" in results.unschedulable[0].reasons[0]


def test_the_limit_partially_schedules_a_batch():
    pool = nodepool(limits={"cpu": "3"})
    apart = pods(2, cpu="1.5", labels={"app": "foo"}, anti_affinity=[pod_term(wk.HOSTNAME, {"app": "foo"})])
    results = solve(apart, pools=[pool])
    assert len(where(results)) == 1
    assert len(results.unschedulable) == 1


def test_the_nodes_limit_counts_new_claims():
    pool = nodepool(limits={"nodes": 1})
    apart = pods(2, labels={"app": "a"}, anti_affinity=[pod_term(wk.HOSTNAME, {"app": "a"})])
    results = solve(apart, pools=[pool])
    assert len(results.nodeclaims) == 1
    assert "limit" in results.unschedulable[0].reasons[0]


def test_existing_nodes_count_against_the_nodes_limit():
    pool = nodepool(limits={"nodes": 1})
    member = node("member", nodepool="default", taints=[taint("full", "yes")])
    p = pod()
    results = solve([p], pools=[pool], nodes=[member])
    assert results.nodeclaims == []
    assert "nodes limit" in reasons_of(results, p)


def test_a_limited_nodepool_falls_back_to_the_next_one():
    capped = nodepool("capped", weight=100, limits={"cpu": "0"})
    fallback = nodepool("fallback")
    assert solve([pod()], pools=[capped, fallback]).nodeclaims[0].nodepool == "fallback"


def test_limits_do_not_keep_pods_off_existing_nodes():
    pool = nodepool(limits={"cpu": "4"})
    full_pool = node("member", nodepool="default", cpu=4)
    p = pod(cpu="1")
    assert where(solve([p], pools=[pool], nodes=[full_pool]))[pod_key(p)] == "member"


# ----------------------------------------------------------------------------------------- daemonsets


def test_daemonset_overhead_chooses_a_larger_type():
    ds = daemonset(cpu="1", memory="1Gi")
    p = pod(cpu="1", memory="1Gi")
    claim = claim_for(solve([p], daemonsets=[ds]), pod_key(p))
    assert claim.instance_type == DEFAULT
    assert claim.requests == resources(cpu="2", memory="2Gi", pods=2)


def test_daemonset_overhead_is_only_counted_where_the_daemonset_tolerates_the_taints():
    pool = nodepool(taints=[taint("foo", "bar")])
    ds = daemonset(cpu="1", memory="1Gi")
    p = pod(cpu="1", memory="1Gi", tolerations=[TOLERATE_ALL])
    claim = claim_for(solve([p], pools=[pool], daemonsets=[ds]), pod_key(p))
    assert claim.instance_type == SMALL
    assert claim.requests == resources(cpu="1", memory="1Gi", pods=1)


def test_daemonset_overhead_ignores_startup_taints():
    pool = nodepool(startup_taints=[taint("foo.com/taint")])
    ds = daemonset(cpu="1", memory="1Gi")
    p = pod(cpu="1", memory="1Gi")
    assert claim_for(solve([p], pools=[pool], daemonsets=[ds]), pod_key(p)).instance_type == DEFAULT


def test_a_daemonset_must_tolerate_prefer_no_schedule_taints_to_be_counted():
    pool = nodepool(taints=[taint("soft", "yes", "PreferNoSchedule")])
    ds = daemonset(cpu="1", memory="1Gi")
    p = pod(cpu="1", memory="1Gi")
    assert claim_for(solve([p], pools=[pool], daemonsets=[ds]), pod_key(p)).instance_type == SMALL


def test_a_daemonset_that_tolerates_the_taint_is_counted():
    pool = nodepool(taints=[taint("foo", "bar")])
    ds = daemonset(cpu="1", memory="1Gi", tolerations=[toleration("foo", "bar", "NoSchedule")])
    p = pod(cpu="1", memory="1Gi", tolerations=[TOLERATE_ALL])
    assert claim_for(solve([p], pools=[pool], daemonsets=[ds]), pod_key(p)).instance_type == DEFAULT


def test_a_daemonset_with_affinity_to_another_nodepool_adds_no_overhead():
    pool = nodepool("voo", labels={"foo": "voo"}, limits={"cpu": "2"})
    ds = daemonset(cpu="4", memory="4Gi", required=[[expr("foo", "In", "bar")]])
    p = pod(cpu="1", memory="1Gi", node_selector={"foo": "voo"})
    claim = claim_for(solve([p], pools=[pool], daemonsets=[ds]), pod_key(p))
    assert claim.instance_type == SMALL


def test_a_daemonset_with_not_in_on_an_undeclared_key_is_counted():
    ds = daemonset(cpu="1", memory="1Gi", required=[[expr("foo", "NotIn", "bar")]])
    p = pod(cpu="1", memory="1Gi", required=[[expr(wk.ZONE, "In", "test-zone-2")]])
    assert claim_for(solve([p], daemonsets=[ds]), pod_key(p)).instance_type == DEFAULT


def test_a_daemonset_selecting_only_arm_adds_overhead_only_to_arm():
    ds = daemonset(cpu="3", node_selector={wk.ARCH: "arm64"})
    p = pod(cpu="1")
    claim = claim_for(solve([p], daemonsets=[ds]), pod_key(p))
    assert claim.instance_type == SMALL
    assert claim.requests == resources(cpu="1", pods=1)  # the smallest overhead over the remaining options


def test_a_daemonset_too_large_for_every_type_leaves_pods_pending():
    ds = daemonset(cpu="10000", memory="10000Gi")
    p = pod()
    results = solve([p], daemonsets=[ds])
    assert results.nodeclaims == []
    assert pod_key(p) in unschedulable(results)


def test_a_daemonset_host_port_keeps_a_pod_with_the_same_port_off_its_nodes():
    ds = daemonset(host_ports=[80], node_selector={wk.ARCH: "amd64"})
    p = pod(host_ports=[80])
    claim = claim_for(solve([p], daemonsets=[ds]), pod_key(p))
    assert claim.instance_type_options == [ARM]


# ----------------------------------------------------------------------------------------- host ports


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        (80, 80, False),
        (80, 81, True),
        ((53, "UDP", ""), (53, "TCP", ""), True),
        ((80, "TCP", "10.0.0.1"), (80, "TCP", "10.0.0.2"), True),
        ((80, "TCP", "10.0.0.1"), (80, "TCP", "0.0.0.0"), False),
        ((80, "TCP", "10.0.0.1"), 80, False),
    ],
)
def test_host_port_conflicts_split_pods_across_nodes(first, second, shared):
    a, b = pod(host_ports=[first]), pod(host_ports=[second])
    placed = where(solve([a, b]))
    assert (placed[pod_key(a)] == placed[pod_key(b)]) is shared


# ---------------------------------------------------------------------------------- taints, tolerations


@pytest.mark.parametrize(
    ("tolerations", "scheduled"),
    [
        ([toleration("test-key", effect="NoSchedule")], True),
        ([toleration("test-key", "test-value", "NoSchedule")], True),
        ([toleration("test-key")], True),
        ([TOLERATE_ALL], True),
        ([], False),
        ([toleration("invalid")], False),
        ([toleration("test-key", operator="Equal", effect="NoSchedule")], False),  # value mismatch
        ([toleration("test-key", "test-value", "NoExecute")], False),
    ],
)
def test_pods_schedule_on_a_tainted_nodepool_only_when_they_tolerate_it(tolerations, scheduled):
    pool = nodepool(taints=[taint("test-key", "test-value")])
    p = pod(tolerations=tolerations)
    results = solve([p], pools=[pool])
    assert (pod_key(p) in where(results)) is scheduled
    if not scheduled:
        reason = reasons_of(results, p)
        assert '"default"' in reason and "test-key" in reason


def test_new_claims_carry_the_nodepool_taints_and_startup_taints():
    pool = nodepool(taints=[taint("test", "bar")], startup_taints=[taint("ignore-me", "nothing")])
    p = pod(tolerations=[toleration("test", effect="NoSchedule")])
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert [(t.key, t.value) for t in claim.taints] == [("test", "bar")]
    assert [(t.key, t.value) for t in claim.startup_taints] == [("ignore-me", "nothing")]


def test_startup_taints_do_not_need_tolerating():
    pool = nodepool(startup_taints=[taint("ignore-me", "nothing-to-see-here")])
    p = pod()
    assert pod_key(p) in where(solve([p], pools=[pool]))


def test_pods_that_tolerate_nothing_stay_off_tainted_pools():
    gpu_pool = nodepool("gpu", weight=100, taints=[taint("nvidia.com/gpu", "true")])
    general = nodepool("general")
    # The tolerant pod comes first in the queue (created earlier), so it opens a claim on the heavier pool
    # which the plain pod must then refuse.
    tolerant = pod(tolerations=[toleration("nvidia.com/gpu", "true", "NoSchedule")])
    plain = pod()
    results = solve([plain, tolerant], pools=[gpu_pool, general])
    assert claim_for(results, pod_key(plain)).nodepool == "general"
    assert claim_for(results, pod_key(tolerant)).nodepool == "gpu"


def test_a_prefer_no_schedule_nodepool_is_avoided_while_another_matches():
    preferred_not = nodepool("z-soft", taints=[taint("foo", "bar", "PreferNoSchedule")])
    other = nodepool("a-plain")
    p = pod()
    assert claim_for(solve([p], pools=[preferred_not, other]), pod_key(p)).nodepool == "a-plain"


def test_prefer_no_schedule_is_tolerated_after_affinity_preferences_are_relaxed():
    pool = nodepool(taints=[taint("foo", "bar", "PreferNoSchedule")])
    p = pod(preferred=[(1, [expr(wk.ZONE, "In", "invalid")]), (1, [expr(wk.INSTANCE_TYPE, "In", "invalid")])])
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert [(t.key, t.effect) for t in claim.taints] == [("foo", "PreferNoSchedule")]


# ------------------------------------------------------------------------- node selectors and affinity


SELECTABLE = [
    {wk.NODEPOOL: "default"},
    {wk.ZONE: "test-zone-1"},
    {wk.INSTANCE_TYPE: DEFAULT},
    {wk.ARCH: "arm64"},
    {wk.OS: "linux"},
    {wk.CAPACITY_TYPE: SPOT},
    {"size": "large"},
    {"integer": "4"},
]
NOT_SELECTABLE = [
    {wk.NODEPOOL: "unknown"},
    {wk.ZONE: "unknown"},
    {wk.INSTANCE_TYPE: "unknown"},
    {wk.ARCH: "unknown"},
    {wk.OS: "unknown"},
    {wk.CAPACITY_TYPE: "unknown"},
    {"foo": "bar"},
]


@pytest.mark.parametrize("selector", SELECTABLE, ids=lambda s: "=".join(next(iter(s.items()))))
@pytest.mark.parametrize("form", ["nodeSelector", "required"])
def test_supported_selectors_schedule_on_a_matching_node(selector, form):
    key, value = next(iter(selector.items()))
    p = pod(node_selector=selector) if form == "nodeSelector" else pod(required=[[expr(key, "In", value)]])
    claim = claim_for(solve([p]), pod_key(p))
    assert requirement(claim, key).has(value)
    launched = CATALOG[claim.instance_type]
    assert launched.requirements.get(key).has(value) or claim.labels.get(key) == value


@pytest.mark.parametrize("selector", NOT_SELECTABLE, ids=lambda s: "=".join(next(iter(s.items()))))
@pytest.mark.parametrize("form", ["nodeSelector", "required"])
def test_unsatisfiable_selectors_leave_the_pod_pending_with_the_nodepool_named(selector, form):
    key, value = next(iter(selector.items()))
    p = pod(node_selector=selector) if form == "nodeSelector" else pod(required=[[expr(key, "In", value)]])
    results = solve([p])
    assert results.nodeclaims == []
    reason = reasons_of(results, p)
    assert '"default"' in reason and key in reason


def test_a_launched_node_carries_the_labels_of_its_instance_type():
    arm = pod(node_selector={wk.ARCH: "arm64"})
    claim = claim_for(solve([arm]), pod_key(arm))
    assert claim.instance_type == ARM
    assert claim.labels[wk.ARCH] == "arm64"
    assert claim.labels[wk.INSTANCE_TYPE] == ARM
    assert claim.labels[wk.ZONE] == claim.zone
    assert claim.labels[wk.CAPACITY_TYPE] == claim.capacity_type


def test_a_label_a_nodepool_requirement_bounds_is_the_launched_types_own_value():
    # `integer` is defined by every instance type: the provider labels the node with the launched type's
    # value, and the requirement must not replace it with a value of its own (only 16 is above 8 here).
    pool = nodepool(requirements=[expr("integer", "Gt", "8"), expr("team", "In", "a")])
    p = pod()
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    launched = CATALOG[claim.instance_type]
    offering = next(
        o for o in launched.offerings if (o.zone, o.capacity_type) == (claim.zone, claim.capacity_type)
    )
    assert claim.labels["integer"] == "16"
    # The NodeClaim carries the NodePool's labels and the custom keys its requirements resolve, never a key
    # the instance types define; the node launched from it carries the same labels as the plan shows.
    assert claim.nodeclaim_labels == {wk.NODEPOOL: "default", "team": "a"}
    assert claim.labels == {**launched.node_labels(offering), **claim.nodeclaim_labels}


@pytest.mark.parametrize(
    ("expressions", "expected_types", "expected_zone"),
    [
        ([expr(wk.ZONE, "NotIn", "test-zone-1", "test-zone-2")], None, "test-zone-3"),
        ([expr(wk.ARCH, "NotIn", "amd64")], [ARM], None),
        ([expr(wk.ZONE, "Exists")], None, None),
        ([expr("integer", "Gt", "4")], [ARM], None),
        ([expr("integer", "Lt", "3")], [SMALL], None),
        ([expr("integer", "Gt", "2"), expr("integer", "Lt", "16")], None, None),
        ([expr("special", "DoesNotExist")], None, None),
        ([expr("special", "Exists")], [ARM], None),
    ],
)
def test_well_known_label_operators(expressions, expected_types, expected_zone):
    p = pod(required=[expressions])
    claim = claim_for(solve([p]), pod_key(p))
    options = set(claim.instance_type_options)
    for expression in expressions:
        wanted = Requirements.from_dicts([expression]).get(expression["key"])
        for name in options:
            assert CATALOG[name].requirements.get(expression["key"]).has_intersection(wanted) or (
                wanted.is_negative() and not CATALOG[name].requirements.get(expression["key"]).values
            ), name
    if expected_types is not None:
        assert options == set(expected_types)
    if expected_zone is not None:
        assert claim.zone == expected_zone and claim.capacity_type == ON_DEMAND


def test_does_not_exist_on_a_key_every_type_has_is_unschedulable():
    p = pod(required=[[expr(wk.ARCH, "DoesNotExist")]])
    results = solve([p])
    assert results.nodeclaims == []
    assert '"default"' in reasons_of(results, p)


def test_custom_label_declared_as_nodepool_label_is_selectable_and_applied():
    pool = nodepool(labels={"team": "a"})
    match, other = pod(node_selector={"team": "a"}), pod(node_selector={"team": "b"})
    results = solve([match, other], pools=[pool])
    assert claim_for(results, pod_key(match)).labels["team"] == "a"
    assert pod_key(other) in unschedulable(results)


@pytest.mark.parametrize(
    ("expression", "allowed"),
    [
        (expr("team", "In", "b"), {"b"}),
        (expr("team", "Exists"), {"a", "b"}),
        (expr("team", "NotIn", "a"), {"b"}),
        (expr("team", "In", "a", "c"), {"a"}),
    ],
)
def test_custom_label_declared_as_nodepool_requirement_resolves_to_one_value(expression, allowed):
    pool = nodepool(requirements=[expr("team", "In", "a", "b")])
    p = pod(required=[[expression]])
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert claim.labels["team"] in allowed


@pytest.mark.parametrize("expression", [expr("team", "DoesNotExist"), expr("team", "In", "c")])
def test_custom_label_requirements_the_nodepool_cannot_meet_are_unschedulable(expression):
    pool = nodepool(requirements=[expr("team", "In", "a", "b")])
    p = pod(required=[[expression]])
    results = solve([p], pools=[pool])
    assert results.nodeclaims == []
    assert "team" in reasons_of(results, p)


def test_custom_integer_bounds_resolve_to_a_value_inside_both():
    pool = nodepool(requirements=[expr("generation", "Gt", "5")])
    p = pod(required=[[expr("generation", "Lt", "10")]])
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert 6 <= int(claim.labels["generation"]) <= 9


@pytest.mark.parametrize(
    ("expression", "scheduled"),
    [
        (expr("foo", "NotIn", "bar"), True),
        (expr("foo", "DoesNotExist"), True),
        (expr("foo", "In", "bar"), False),
        (expr("foo", "Exists"), False),
        (expr("foo", "Gt", "1"), False),
    ],
)
def test_undeclared_custom_keys_only_schedule_when_they_forbid_values(expression, scheduled):
    p = pod(required=[[expression]])
    results = solve([p])
    assert (pod_key(p) in where(results)) is scheduled
    if scheduled:
        # NotIn resolves to a generated value (as Karpenter's Requirements.Labels), DoesNotExist to no label.
        label = claim_for(results, pod_key(p)).labels.get("foo")
        wanted = Requirements.from_dicts([expression]).get("foo")
        assert wanted.has(label) if label is not None else wanted.is_negative()
    else:
        assert 'label "foo" does not have known values' in reasons_of(results, p)


def test_the_first_satisfiable_or_term_is_used():
    p = pod(
        required=[
            [expr(wk.ZONE, "In", "invalid")],
            [expr(wk.ZONE, "In", "invalid")],
            [expr(wk.ZONE, "In", "test-zone-1")],
            [expr(wk.ZONE, "In", "test-zone-2")],
        ]
    )
    claim = claim_for(solve([p]), pod_key(p))
    assert requirement(claim, wk.ZONE).values == {"test-zone-1"}
    assert claim.zone == "test-zone-1"


def test_the_last_or_term_is_never_relaxed():
    pool = nodepool(requirements=[expr(wk.ZONE, "In", "test-zone-1")])
    p = pod(required=[[expr(wk.ZONE, "In", "invalid")]])
    results = solve([p], pools=[pool])
    assert results.nodeclaims == []
    assert pod_key(p) in unschedulable(results)


def test_the_node_selector_applies_to_every_or_term():
    p = pod(
        node_selector={wk.ARCH: "arm64"},
        required=[[expr(wk.ZONE, "In", "test-zone-3")], [expr(wk.OS, "In", "ios")]],
    )
    claim = claim_for(solve([p]), pod_key(p))
    assert claim.instance_type_options == [ARM]
    assert claim.zone == "test-zone-3"


def test_unsupported_or_restricted_pod_constraints_are_reported_not_crashed():
    hostname = pod(node_selector={wk.HOSTNAME: "some-node"})
    results = solve([hostname, pod()])
    assert pod_key(hostname) in unschedulable(results)
    assert len(results.nodeclaims) == 1


# ----------------------------------------------------------------------------------- preferences


def test_a_satisfiable_node_preference_is_honoured():
    p = pod(preferred=[(10, [expr(wk.ZONE, "In", "test-zone-2")])])
    assert claim_for(solve([p]), pod_key(p)).zone == "test-zone-2"


def test_unsatisfiable_node_preferences_are_all_relaxed():
    p = pod(preferred=[(1, [expr(wk.ZONE, "In", "invalid")]), (1, [expr(wk.INSTANCE_TYPE, "In", "invalid")])])
    assert pod_key(p) in where(solve([p]))


def test_node_preferences_relax_from_the_heaviest_to_lighter_weights():
    pool = nodepool(requirements=[expr(wk.ZONE, "In", "test-zone-1", "test-zone-2")])
    p = pod(
        preferred=[
            (100, [expr(wk.INSTANCE_TYPE, "In", "test-zone-3")]),
            (50, [expr(wk.ZONE, "In", "test-zone-2")]),
            (1, [expr(wk.ZONE, "In", "test-zone-1")]),
        ]
    )
    assert claim_for(solve([p], pools=[pool]), pod_key(p)).zone == "test-zone-2"


def test_preferred_pod_affinity_is_relaxed_before_preferred_node_affinity():
    p = pod(
        preferred=[(10, [expr(wk.ZONE, "In", "test-zone-2")])],
        preferred_affinity=[(10, pod_term(wk.ZONE, {"app": "does-not-exist"}))],
    )
    assert claim_for(solve([p]), pod_key(p)).zone == "test-zone-2"


def test_preferred_node_affinity_is_relaxed_before_schedule_anyway_spread():
    # The preference pins zone 1; the ScheduleAnyway spread (hard until relaxed) refuses a second pod there.
    # Karpenter drops the node preference first, so the spread still balances the zones.
    batch = pods(
        3,
        labels={"app": "web"},
        preferred=[(10, [expr(wk.ZONE, "In", "test-zone-1")])],
        spread_constraints=[spread(wk.ZONE, {"app": "web"}, when="ScheduleAnyway")],
    )
    results = solve(batch)
    assert sorted(claim.zone for claim in results.nodeclaims) == list(ZONES)


def test_ignoring_preferences_drops_node_preferences():
    p = pod(preferred=[(10, [expr(wk.ZONE, "In", "test-zone-2")])])
    claim = claim_for(solve([p], options=SchedulingOptions(respect_preferences=False)), pod_key(p))
    assert claim.zone == "test-zone-1"
    assert requirement(claim, wk.ZONE).has("test-zone-1")


# -------------------------------------------------------------------------------- layered constraints


@pytest.mark.parametrize(
    ("pool_values", "pod_values", "expected"),
    [
        (["amd64", "arm64"], ["arm64"], {ARM}),
        (["arm64"], ["amd64", "arm64"], {ARM}),
        (["arm64"], ["amd64"], None),
    ],
)
def test_nodepool_and_pod_arch_requirements_intersect(pool_values, pod_values, expected):
    pool = nodepool(requirements=[expr(wk.ARCH, "In", *pool_values)])
    p = pod(required=[[expr(wk.ARCH, "In", *pod_values)]])
    results = solve([p], pools=[pool])
    if expected is None:
        assert results.nodeclaims == []
        assert "arch" in reasons_of(results, p)
    else:
        assert set(claim_for(results, pod_key(p)).instance_type_options) == expected


@pytest.mark.parametrize(
    ("pool_values", "pod_values", "expected"),
    [
        ([SPOT, ON_DEMAND], [SPOT], SPOT),
        ([ON_DEMAND], [SPOT, ON_DEMAND], ON_DEMAND),
        ([ON_DEMAND], [SPOT], None),
    ],
)
def test_nodepool_and_pod_capacity_types_intersect(pool_values, pod_values, expected):
    pool = nodepool(requirements=[expr(wk.CAPACITY_TYPE, "In", *pool_values)])
    p = pod(required=[[expr(wk.CAPACITY_TYPE, "In", *pod_values)]])
    results = solve([p], pools=[pool])
    if expected is None:
        assert results.nodeclaims == []
    else:
        claim = claim_for(results, pod_key(p))
        assert claim.capacity_type == expected
        assert requirement(claim, wk.CAPACITY_TYPE).values == {expected}


@pytest.mark.parametrize(
    ("pool_zones", "pod_zones", "expected"),
    [
        (["test-zone-1", "test-zone-2"], ["test-zone-2", "test-zone-3"], "test-zone-2"),
        (["test-zone-1", "test-zone-2"], ["test-zone-3"], None),
    ],
)
def test_nodepool_and_pod_zones_intersect(pool_zones, pod_zones, expected):
    pool = nodepool(requirements=[expr(wk.ZONE, "In", *pool_zones)])
    p = pod(required=[[expr(wk.ZONE, "In", *pod_zones)]])
    results = solve([p], pools=[pool])
    if expected is None:
        assert results.nodeclaims == []
        assert "zone" in reasons_of(results, p)
    else:
        assert claim_for(results, pod_key(p)).zone == expected


def test_a_zone_without_an_offering_of_the_capacity_type_is_unschedulable():
    pool = nodepool(requirements=[expr(wk.CAPACITY_TYPE, "In", SPOT)])
    p = pod(node_selector={wk.ZONE: "test-zone-3"})  # zone 3 sells on-demand only
    results = solve([p], pools=[pool])
    assert results.nodeclaims == []
    assert '"default"' in reasons_of(results, p)


# ------------------------------------------------------------------------------------------ minValues


def test_min_values_keeps_enough_instance_types_on_the_claim():
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", SMALL, DEFAULT, ARM, min_values=2)])
    p = pod(cpu="1")
    claim = claim_for(solve([p], pools=[pool]), pod_key(p))
    assert len(claim.instance_type_options) >= 2
    entry = next(e for e in claim.requirements if e["key"] == wk.INSTANCE_TYPE)
    assert entry.get("minValues") == 2


def test_min_values_not_met_is_unschedulable_under_strict_policy():
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", SMALL, DEFAULT, ARM, min_values=2)])
    p = pod(cpu="5")  # only the arm type is large enough
    results = solve([p], pools=[pool])
    assert results.nodeclaims == []
    reason = reasons_of(results, p)
    assert '"default"' in reason and "minValues" in reason


def test_min_values_on_a_custom_label_counts_distinct_values_of_the_remaining_types():
    pool = nodepool(requirements=[expr("integer", "In", "2", "4", "16", min_values=3)])
    fits_all, too_big_for_small = pod(cpu="1"), pod(cpu="3")
    results = solve([fits_all, too_big_for_small], pools=[pool])
    assert pod_key(fits_all) in where(results)
    assert pod_key(too_big_for_small) in unschedulable(results)


def test_min_values_best_effort_schedules_what_strict_refuses():
    pool = nodepool(requirements=[expr(wk.INSTANCE_TYPE, "In", SMALL, DEFAULT, ARM, min_values=2)])
    p = pod(cpu="5")
    results = solve([p], pools=[pool], options=SchedulingOptions(min_values_best_effort=True))
    assert claim_for(results, pod_key(p)).instance_type_options == [ARM]


# ------------------------------------------------------------------------------------------- reasons


def test_reasons_name_each_nodepool_that_refused():
    tainted = nodepool("tainted", weight=10, taints=[taint("dedicated", "x")])
    small_only = nodepool("small-only", requirements=[expr(wk.INSTANCE_TYPE, "In", SMALL)])
    p = pod(cpu="3")
    results = solve([p], pools=[tainted, small_only])
    reasons = unschedulable(results)[pod_key(p)]
    assert len(reasons) == 2
    assert '"tainted"' in reasons[0] and "dedicated" in reasons[0]
    assert '"small-only"' in reasons[1] and "cpu" in reasons[1]


def test_no_nodepools_leaves_every_pod_pending():
    p = pod()
    results = solve([p], pools=[])
    assert results.nodeclaims == []
    assert unschedulable(results)[pod_key(p)]


def test_a_bound_pod_with_a_hostname_selector_still_uses_its_room():
    # A hostname node selector is refused on pending pods, but a pod already bound with one holds its requests.
    pinned = pod(cpu="3", node_selector={wk.HOSTNAME: "busy"}, node_name="busy")
    busy = node("busy", cpu=4, bound=[pinned])
    p = pod(cpu="2")
    results = solve([p], nodes=[busy])
    assert where(results)[pod_key(p)].startswith("new-")


def test_requests_and_prices_beyond_int64_are_unschedulable_not_a_crash():
    """Kubernetes takes quantities up to 2^63-1 (and an overlay any price): the simulation's int64 arrays hold
    them at a bound larger than any node, so such a pod fits nowhere, and a price that large never overflows."""
    huge = pod("huge", cpu=1, memory="8Ei")
    twice = pod("twice", requests={"cpu": "1", "example.com/dongle": str(2**70)})
    small = pod("small", cpu=1, memory="1Gi")
    dear = [instance_type("dear", price=10**30), *catalog_p()]

    results = solve([huge, twice, small], types=dear)

    assert set(unschedulable(results)) == {"default/huge", "default/twice"}
    assert where(results)["default/small"].startswith("new")
