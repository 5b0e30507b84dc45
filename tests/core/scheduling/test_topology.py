"""Topology spread, pod affinity and pod anti-affinity scenarios with the outcomes of Karpenter's
topology_test.go (karpenter-core.md section 2.6), run on Catalog P with one NodePool unless stated.

Karpenter runs several provisioning rounds in some scenarios; `launch` turns a round's decisions into the
cluster the next round sees. Skews are the non-zero pod counts per domain, largest first.
"""

from __future__ import annotations

from core import labels as wk
from core.api.kube import Pod, pod_key
from core.scheduling.scheduler import NodeSnapshot
from tests.builders import (
    ON_DEMAND,
    SPOT,
    TOLERATE_ALL,
    expr,
    launch,
    launched_labels,
    node,
    node_labels,
    nodepool,
    pod,
    pod_term,
    pods,
    solve,
    spread,
    taint,
    toleration,
    unschedulable,
)
from tests.builders import placements as where
from tests.builders import skew as skew_of

LABELS = {"test": "test"}
S2 = {"security": "s2"}
ZONE, HOST, CT = wk.ZONE, wk.HOSTNAME, wk.CAPACITY_TYPE
CPU_1_1 = "1.1"
"""Big enough that a small node holds one such pod: every pod then needs its own node."""


def zonal_pool(*zones: str, **options):
    return nodepool(requirements=[expr(ZONE, "In", *zones)], **options)


def scheduled(results, batch):
    placed = where(results)
    return [p for p in batch if pod_key(p) in placed]


def zone_node(name: str, zone: str, *bound: Pod) -> NodeSnapshot:
    """A small existing node of the NodePool in a zone (1.9 CPU allocatable) holding the given pods."""
    placed = [b.model_copy(update={"spec": b.spec.model_copy(update={"node_name": name})}) for b in bound]
    return node(name, zone=zone, nodepool="default", cpu=2, memory="2Gi", bound=placed)


# -------------------------------------------------------------------------------------------- zonal


def test_unknown_topology_keys_make_the_owner_unschedulable_only():
    spread_pod = pod(labels=LABELS, spread_constraints=[spread("unknown", LABELS)])
    plain = pod()
    results = solve([spread_pod, plain])
    assert pod_key(spread_pod) in unschedulable(results)
    assert pod_key(plain) in where(results)


def test_pods_balance_across_zones_with_match_labels():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    assert skew_of(solve(batch), batch, ZONE, LABELS) == [2, 1, 1]


def test_pods_balance_across_zones_with_match_expressions():
    constraint = {
        "topologyKey": ZONE,
        "maxSkew": 1,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": "test", "operator": "In", "values": ["test"]}]},
    }
    batch = pods(4, labels=LABELS, spread_constraints=[constraint])
    assert skew_of(solve(batch), batch, ZONE, LABELS) == [2, 1, 1]


def test_spread_only_uses_the_zones_of_the_nodepool_requirements():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    assert skew_of(solve(batch, pools=[zonal_pool("test-zone-1", "test-zone-2")]), batch, ZONE, LABELS) == [
        2,
        2,
    ]


def test_spread_only_uses_the_zone_of_the_nodepool_label():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    labelled = nodepool(labels={ZONE: "test-zone-1"})
    assert skew_of(solve(batch, pools=[labelled]), batch, ZONE, LABELS) == [4]
    both = nodepool(
        requirements=[expr(ZONE, "In", "test-zone-1", "test-zone-2")], labels={ZONE: "test-zone-1"}
    )
    assert skew_of(solve(batch, pools=[both]), batch, ZONE, LABELS) == [4]


def test_spread_uses_the_zones_of_every_nodepool():
    first = nodepool(
        "first", requirements=[expr(ZONE, "In", "test-zone-1", "test-zone-2")], labels={ZONE: "test-zone-1"}
    )
    second = nodepool("second", labels={ZONE: "test-zone-2"})
    batch = pods(4, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    assert skew_of(solve(batch, pools=[first, second]), batch, ZONE, LABELS) == [2, 2]


def test_an_existing_pod_outside_the_nodepool_zones_caps_the_others():
    existing = zone_node("zone-3-node", "test-zone-3", pod(labels=LABELS, cpu=CPU_1_1))
    batch = pods(6, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(ZONE, LABELS)])
    results = solve(batch, pools=[zonal_pool("test-zone-1", "test-zone-2")], nodes=[existing])
    assert skew_of(results, batch, ZONE, LABELS, [existing]) == [2, 2, 1]
    assert len(results.unschedulable) == 2


def test_pods_go_to_a_non_minimum_domain_when_it_is_all_that_is_left():
    cluster = [
        zone_node("z1", "test-zone-1", pod(labels=LABELS, cpu=CPU_1_1)),
        zone_node("z2", "test-zone-2", pod(labels=LABELS, cpu=CPU_1_1)),
    ]
    batch = pods(10, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(ZONE, LABELS, max_skew=5)])
    results = solve(batch, pools=[zonal_pool("test-zone-3")], nodes=cluster)
    assert skew_of(results, batch, ZONE, LABELS, cluster) == [6, 1, 1]


def test_an_already_violated_skew_only_fills_the_minimum_domains():
    cluster = [zone_node(f"z1-{i}", "test-zone-1", pod(labels=LABELS, cpu=CPU_1_1)) for i in range(3)]
    batch = pods(3, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(ZONE, LABELS)])
    results = solve(batch, nodes=cluster)
    assert skew_of(results, batch, ZONE, LABELS, cluster) == [3, 2, 1]


def test_do_not_schedule_never_violates_max_skew():
    cluster = [zone_node("z1", "test-zone-1", pod(labels=LABELS, cpu=CPU_1_1))]
    batch = pods(10, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(ZONE, LABELS)])
    results = solve(batch, pools=[zonal_pool("test-zone-2", "test-zone-3")], nodes=cluster)
    assert skew_of(results, batch, ZONE, LABELS, cluster) == [2, 2, 1]
    assert len(results.unschedulable) == 6
    assert all("topology spread" in e.reasons[0] for e in results.unschedulable)


def test_only_running_matching_pods_on_nodes_with_the_domain_count():
    blocked = [
        taint("full", "yes")
    ]  # keeps the new pods off these nodes; nodeTaintsPolicy defaults to Ignore
    first, second, third = "first", "second", "third"
    cluster = [
        node(
            first,
            zone="test-zone-1",
            taints=blocked,
            bound=[
                pod(node_name=first),  # no matching labels
                pod(labels=LABELS, namespace="wrong-namespace", node_name=first),
                pod(labels=LABELS, node_name=first, phase="Failed"),
                pod(labels=LABELS, node_name=first, phase="Succeeded"),
                pod(labels=LABELS, node_name=first, deleting=True),
                pod(labels=LABELS, node_name=first),
                pod(labels=LABELS, node_name=first),
            ],
        ),
        node(second, zone="test-zone-2", taints=blocked, bound=[pod(labels=LABELS, node_name=second)]),
        node(third, taints=blocked, bound=[pod(labels=LABELS, node_name=third)]),  # no zone label
    ]
    batch = pods(2, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    results = solve(batch, nodes=cluster)
    assert skew_of(results, batch, ZONE, LABELS, cluster) == [2, 2, 1]


def test_finished_terminating_and_foreign_pods_do_not_count_for_spread():
    # Zone 1 really holds one matching pod, zones 2 and 3 two each: the new pod belongs in zone 1 unless the
    # finished, terminating, other-namespace or unlabelled pods there are wrongly counted.
    blocked = [taint("full", "yes")]
    zone_1 = node(
        "z1",
        zone="test-zone-1",
        taints=blocked,
        bound=[
            pod(labels=LABELS, node_name="z1"),
            pod(labels=LABELS, node_name="z1", phase="Failed"),
            pod(labels=LABELS, node_name="z1", phase="Succeeded"),
            pod(labels=LABELS, node_name="z1", deleting=True),
            pod(labels=LABELS, namespace="other", node_name="z1"),
            pod(node_name="z1"),
        ],
    )
    others = [
        node(name, zone=zone, taints=blocked, bound=[pod(labels=LABELS, node_name=name) for _ in range(2)])
        for name, zone in (("z2", "test-zone-2"), ("z3", "test-zone-3"))
    ]
    p = pod(labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    results = solve([p], nodes=[zone_1, *others])
    assert results.nodeclaims[0].zone == "test-zone-1"


def test_a_spread_whose_selector_matches_none_of_its_pods_packs_them():
    batch = pods(5, spread_constraints=[spread(HOST, LABELS)])  # the pods do not carry LABELS
    results = solve(batch)
    assert len(results.nodeclaims) == 1


def test_min_domains_above_the_domains_available_keeps_the_global_minimum_at_zero():
    batch = pods(3, labels=LABELS, spread_constraints=[spread(ZONE, LABELS, min_domains=3)])
    results = solve(batch, pools=[zonal_pool("test-zone-1", "test-zone-2")])
    assert skew_of(results, batch, ZONE, LABELS) == [1, 1]
    assert len(results.unschedulable) == 1


def test_min_domains_satisfied_spreads_normally():
    for min_domains in (2, 3):
        batch = pods(11, labels=LABELS, spread_constraints=[spread(ZONE, LABELS, min_domains=min_domains)])
        results = solve(batch, pools=[zonal_pool("test-zone-1", "test-zone-2", "test-zone-3")])
        assert skew_of(results, batch, ZONE, LABELS) == [4, 4, 3]


# ----------------------------------------------------------------------------------------- hostname


def test_pods_balance_across_nodes():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(HOST, LABELS)])
    results = solve(batch)
    assert skew_of(results, batch, HOST, LABELS) == [1, 1, 1, 1]


def test_hostname_spread_fills_a_node_up_to_max_skew():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(HOST, LABELS, max_skew=4)])
    assert skew_of(solve(batch), batch, HOST, LABELS) == [4]


def test_two_deployments_with_hostname_spread_share_nodes():
    app1 = pods(2, labels={"app": "app1"}, spread_constraints=[spread(HOST, {"app": "app1"})])
    app2 = pods(2, labels={"app": "app2"}, spread_constraints=[spread(HOST, {"app": "app2"})])
    results = solve(app1 + app2)
    assert len(where(results)) == 4
    assert len(results.nodeclaims) == 2


def test_two_deployments_with_hostname_spread_and_different_arch_need_four_nodes():
    app1 = pods(
        2,
        labels={"app": "app1"},
        required=[[expr(wk.ARCH, "In", "amd64")]],
        spread_constraints=[spread(HOST, {"app": "app1"})],
    )
    app2 = pods(
        2,
        labels={"app": "app2"},
        required=[[expr(wk.ARCH, "In", "arm64")]],
        spread_constraints=[spread(HOST, {"app": "app2"})],
    )
    results = solve(app1 + app2)
    assert len(where(results)) == 4
    assert len(results.nodeclaims) == 4


# ------------------------------------------------------------------------------------ capacity type


def test_pods_balance_across_capacity_types():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(CT, LABELS)])
    assert skew_of(solve(batch), batch, CT, LABELS) == [2, 2]
    pool = nodepool(requirements=[expr(CT, "In", SPOT, ON_DEMAND)])
    assert skew_of(solve(batch, pools=[pool]), batch, CT, LABELS) == [2, 2]


def test_capacity_type_spread_does_not_violate_max_skew():
    cluster = [
        node(
            "spot-node",
            capacity_type=SPOT,
            cpu="2",
            bound=[pod(labels=LABELS, cpu=CPU_1_1, node_name="spot-node")],
        )
    ]
    batch = pods(5, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(CT, LABELS)])
    on_demand_only = nodepool(requirements=[expr(CT, "In", ON_DEMAND)])
    results = solve(batch, pools=[on_demand_only], nodes=cluster)
    assert skew_of(results, batch, CT, LABELS, cluster) == [2, 1]


def test_schedule_anyway_violates_max_skew_when_it_must():
    cluster = [
        node(
            "spot-node",
            capacity_type=SPOT,
            cpu="2",
            bound=[pod(labels=LABELS, cpu=CPU_1_1, node_name="spot-node")],
        )
    ]
    batch = pods(
        5, labels=LABELS, cpu=CPU_1_1, spread_constraints=[spread(CT, LABELS, when="ScheduleAnyway")]
    )
    on_demand_only = nodepool(requirements=[expr(CT, "In", ON_DEMAND)])
    results = solve(batch, pools=[on_demand_only], nodes=cluster)
    assert skew_of(results, batch, CT, LABELS, cluster) == [5, 1]


def test_node_affinity_narrows_the_capacity_types_a_spread_counts():
    existing = node(
        "od-node",
        zone="test-zone-1",
        capacity_type=ON_DEMAND,
        taints=[taint("full", "yes")],
        bound=[pod(labels=LABELS, node_name="od-node")],
    )
    batch = pods(
        5,
        labels=LABELS,
        required=[[expr(ZONE, "In", "test-zone-2"), expr(CT, "In", SPOT)]],
        spread_constraints=[spread(CT, LABELS)],
    )
    results = solve(batch, nodes=[existing])
    assert skew_of(results, batch, CT, LABELS, [existing]) == [5, 1]


def test_an_existing_capacity_type_domain_caps_a_nodepool_limited_to_another():
    existing = node(
        "od-node",
        capacity_type=ON_DEMAND,
        instance_type="single-pod-instance-type",
        pods=1,
        bound=[pod(labels=LABELS, node_name="od-node")],
    )
    batch = pods(5, labels=LABELS, cpu="2", spread_constraints=[spread(CT, LABELS)])
    spot_only = nodepool(requirements=[expr(CT, "In", SPOT)])
    results = solve(batch, pools=[spot_only], nodes=[existing])
    assert skew_of(results, batch, CT, LABELS, [existing]) == [2, 1]


def test_an_existing_arch_domain_caps_a_nodepool_limited_to_another():
    existing = node(
        "amd-node", labels={wk.ARCH: "amd64"}, pods=1, bound=[pod(labels=LABELS, node_name="amd-node")]
    )
    batch = pods(5, labels=LABELS, cpu="2", spread_constraints=[spread(wk.ARCH, LABELS)])
    arm_only = nodepool(requirements=[expr(wk.ARCH, "In", "arm64")])
    results = solve(batch, pools=[arm_only], nodes=[existing])
    assert skew_of(results, batch, wk.ARCH, LABELS, [existing]) == [2, 1]


# --------------------------------------------------------------------------------- combined keys


def test_zonal_and_hostname_spread_hold_together_over_several_rounds():
    constraints = [spread(ZONE, LABELS), spread(HOST, LABELS, max_skew=3)]
    cluster: list = []
    for count, expected in ((2, [1, 1]), (3, [2, 2, 1]), (5, [4, 3, 3]), (11, [7, 7, 7])):
        batch = pods(count, labels=LABELS, spread_constraints=constraints)
        results = solve(batch, nodes=cluster)
        assert len(where(results)) == count
        assert skew_of(results, batch, ZONE, LABELS, cluster) == expected
        assert max(skew_of(results, batch, HOST, LABELS, cluster)) <= 3
        cluster = launch(results, batch, cluster)


def test_capacity_type_and_hostname_spread_hold_together_over_several_rounds():
    constraints = [spread(CT, LABELS), spread(HOST, LABELS, max_skew=3)]
    cluster: list = []
    for count, expected in ((2, [1, 1]), (3, [3, 2]), (5, [5, 5]), (11, [11, 10])):
        batch = pods(count, labels=LABELS, spread_constraints=constraints)
        results = solve(batch, nodes=cluster)
        assert skew_of(results, batch, CT, LABELS, cluster) == expected
        assert max(skew_of(results, batch, HOST, LABELS, cluster)) <= 3
        cluster = launch(results, batch, cluster)


def test_spread_on_a_custom_key_balances_across_nodepool_requirements():
    key = "capacity.spread.4-1"
    spot_pool = nodepool("spot", requirements=[expr(CT, "In", SPOT), expr(key, "In", "2", "3", "4", "5")])
    od_pool = nodepool("on-demand", requirements=[expr(CT, "In", ON_DEMAND), expr(key, "In", "1")])
    batch = pods(20, labels=LABELS, spread_constraints=[spread(key, LABELS)])
    results = solve(batch, pools=[spot_pool, od_pool])
    assert len(where(results)) == 20
    assert skew_of(results, batch, key, LABELS) == [4, 4, 4, 4, 4]
    assert skew_of(results, batch, CT, LABELS) == [16, 4]


def test_a_zone_only_a_limited_nodepool_offers_still_caps_the_spread():
    pool = zonal_pool("test-zone-1", "test-zone-2")
    disabled = nodepool("disabled", requirements=[expr(ZONE, "In", "test-zone-3")], limits={"cpu": "0"})
    constraints = [spread(ZONE, LABELS), spread(HOST, LABELS, when="ScheduleAnyway")]
    batch = pods(10, labels=LABELS, spread_constraints=constraints)
    results = solve(batch, pools=[pool, disabled])
    assert skew_of(results, batch, ZONE, LABELS) == [1, 1]
    assert skew_of(results, batch, HOST, LABELS) == [1, 1]


def test_zonal_and_capacity_type_spread_hold_together():
    constraints = [spread(CT, LABELS), spread(ZONE, LABELS)]
    cluster: list = []
    for count, ct_bound, zone_bound in ((2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)):
        batch = pods(count, labels=LABELS, spread_constraints=constraints)
        results = solve(batch, nodes=cluster)
        assert max(skew_of(results, batch, CT, LABELS, cluster)) <= ct_bound
        assert max(skew_of(results, batch, ZONE, LABELS, cluster)) <= zone_bound
        cluster = launch(results, batch, cluster)


# ------------------------------------------------------------------------- spread and node affinity


def test_node_selectors_limit_each_pods_spread_domains():
    zone_1 = pods(
        5, labels=LABELS, node_selector={ZONE: "test-zone-1"}, spread_constraints=[spread(ZONE, LABELS)]
    )
    zone_2 = pods(
        10, labels=LABELS, node_selector={ZONE: "test-zone-2"}, spread_constraints=[spread(ZONE, LABELS)]
    )
    results = solve(zone_1 + zone_2)
    assert skew_of(results, zone_1 + zone_2, ZONE, LABELS) == [10, 5]


def test_required_node_affinity_limits_spread_domains():
    two_zones = [[expr(ZONE, "In", "test-zone-1", "test-zone-2")]]
    batch = pods(10, labels=LABELS, required=two_zones, spread_constraints=[spread(ZONE, LABELS)])
    assert skew_of(solve(batch), batch, ZONE, LABELS) == [5, 5]


def test_required_node_affinity_spread_over_rounds_improves_skew_then_balances():
    constraints = [spread(ZONE, LABELS)]
    first = pods(
        6,
        labels=LABELS,
        required=[[expr(ZONE, "In", "test-zone-1", "test-zone-2")]],
        spread_constraints=constraints,
    )
    results = solve(first)
    assert skew_of(results, first, ZONE, LABELS) == [3, 3]
    cluster = launch(results, first)
    second = [
        pod(
            labels=LABELS,
            required=[[expr(ZONE, "In", "test-zone-2", "test-zone-3")]],
            spread_constraints=constraints,
        )
    ]
    results = solve(second, nodes=cluster)
    assert skew_of(results, second, ZONE, LABELS, cluster) == [3, 3, 1]
    cluster = launch(results, second, cluster)
    third = pods(5, labels=LABELS, spread_constraints=constraints)
    results = solve(third, nodes=cluster)
    assert skew_of(results, third, ZONE, LABELS, cluster) == [4, 4, 4]


def test_preferred_node_affinity_does_not_limit_spread_domains():
    batch = pods(
        6,
        labels=LABELS,
        preferred=[(1, [expr(ZONE, "In", "test-zone-1", "test-zone-2")])],
        spread_constraints=[spread(ZONE, LABELS)],
    )
    assert skew_of(solve(batch), batch, ZONE, LABELS) == [2, 2, 2]


def test_capacity_type_node_selectors_limit_each_pods_domains():
    constraint = [spread(CT, LABELS, when="ScheduleAnyway")]
    spot = pods(5, labels=LABELS, node_selector={CT: SPOT}, spread_constraints=constraint)
    on_demand = pods(5, labels=LABELS, node_selector={CT: ON_DEMAND}, spread_constraints=constraint)
    results = solve(spot + on_demand)
    assert skew_of(results, spot + on_demand, CT, LABELS) == [5, 5]


def test_capacity_type_affinity_spread_over_rounds():
    constraints = [spread(CT, LABELS)]
    first = pods(3, labels=LABELS, required=[[expr(CT, "In", SPOT)]], spread_constraints=constraints)
    results = solve(first)
    assert skew_of(results, first, CT, LABELS) == [3]
    cluster = launch(results, first)
    second = [
        pod(labels=LABELS, required=[[expr(CT, "In", SPOT, ON_DEMAND)]], spread_constraints=constraints)
    ]
    results = solve(second, nodes=cluster)
    assert skew_of(results, second, CT, LABELS, cluster) == [3, 1]
    cluster = launch(results, second, cluster)
    third = pods(5, labels=LABELS, spread_constraints=constraints)
    results = solve(third, nodes=cluster)
    assert skew_of(results, third, CT, LABELS, cluster) == [5, 4]


# ------------------------------------------------------------------------------------ matchLabelKeys


def test_match_label_keys_split_one_selector_into_deployments():
    constraint = [spread(HOST, LABELS, match_label_keys=["test-label"])]
    a = pods(2, labels={**LABELS, "test-label": "value-a"}, spread_constraints=constraint)
    b = pods(2, labels={**LABELS, "test-label": "value-b"}, spread_constraints=constraint)
    results = solve(a + b)
    assert skew_of(results, a + b, HOST, LABELS) == [2, 2]


def test_match_label_keys_the_pods_do_not_carry_are_ignored():
    batch = pods(4, labels=LABELS, spread_constraints=[spread(HOST, LABELS, match_label_keys=["test-label"])])
    assert skew_of(solve(batch), batch, HOST, LABELS) == [1, 1, 1, 1]


# ---------------------------------------------------------------------- node inclusion policies

SPREAD_LABEL = "fake-label"


def label_nodes(labels=None, taints=()):
    """Karpenter's two tiny existing nodes in domains "foo" and "bar" of the spread label (100m CPU: no room)."""
    return [
        node(
            name,
            labels={SPREAD_LABEL: name, **(labels or {})},
            capacity={"cpu": "100m", "memory": "1Gi", "pods": 10},
            taints=taints,
        )
        for name in ("foo", "bar")
    ]


TAINTED = [taint("taintname", "taintvalue")]


def test_node_taints_policy_ignore_counts_tainted_domains():
    cluster = label_nodes(taints=TAINTED)
    pool = nodepool(labels={SPREAD_LABEL: "baz"})
    batch = pods(
        5,
        labels=LABELS,
        cpu="1",
        spread_constraints=[spread(SPREAD_LABEL, LABELS, node_taints_policy="Ignore")],
    )
    results = solve(batch, pools=[pool], nodes=cluster)
    assert skew_of(results, batch, SPREAD_LABEL, LABELS, cluster) == [1]


def test_node_taints_policy_honor_skips_untolerated_domains():
    cluster = label_nodes(taints=TAINTED)
    pool = nodepool(labels={SPREAD_LABEL: "baz"})
    batch = pods(
        5,
        labels=LABELS,
        cpu="1",
        spread_constraints=[spread(SPREAD_LABEL, LABELS, node_taints_policy="Honor")],
    )
    results = solve(batch, pools=[pool], nodes=cluster)
    assert skew_of(results, batch, SPREAD_LABEL, LABELS, cluster) == [5]


def _label_pools():
    plain = nodepool("plain", requirements=[expr(SPREAD_LABEL, "In", "foo")])
    tainted = nodepool(
        "tainted", requirements=[expr(SPREAD_LABEL, "In", "bar")], taints=[taint("taint-key", "taint-value")]
    )
    return [plain, tainted]


def test_node_taints_policy_ignore_counts_domains_of_tainted_nodepools():
    batch = pods(
        2, labels=LABELS, spread_constraints=[spread(SPREAD_LABEL, LABELS, node_taints_policy="Ignore")]
    )
    results = solve(batch, pools=_label_pools())
    assert skew_of(results, batch, SPREAD_LABEL, LABELS) == [1]


def test_node_taints_policy_honor_skips_domains_of_untolerated_nodepools():
    batch = pods(
        2, labels=LABELS, spread_constraints=[spread(SPREAD_LABEL, LABELS, node_taints_policy="Honor")]
    )
    results = solve(batch, pools=_label_pools())
    assert skew_of(results, batch, SPREAD_LABEL, LABELS) == [2]


def test_node_taints_policy_honor_with_nodepools_sharing_a_domain():
    pools = [
        nodepool(
            f"pool-{i}",
            taints=[taint("taint-key", f"nodepool-{i}")],
            requirements=[expr(SPREAD_LABEL, "In", *domains)],
        )
        for i, domains in enumerate((["foo", "bar"], ["foo", "baz"]))
    ]
    constraint = [spread(SPREAD_LABEL, LABELS, node_taints_policy="Honor")]
    batch = [
        p
        for i in range(2)
        for p in pods(
            (i + 1) * 2,
            labels=LABELS,
            spread_constraints=constraint,
            tolerations=[toleration("taint-key", f"nodepool-{i}", "NoSchedule")],
        )
    ]
    results = solve(batch, pools=pools)
    assert skew_of(results, batch, SPREAD_LABEL, LABELS) == [3, 2, 1]


def test_node_affinity_policy_ignore_counts_domains_the_pod_cannot_use():
    cluster = label_nodes({"selector": "mismatch"})
    pool = nodepool(labels={SPREAD_LABEL: "baz", "selector": "value"})
    batch = pods(
        5,
        labels=LABELS,
        cpu="1",
        node_selector={"selector": "value"},
        spread_constraints=[spread(SPREAD_LABEL, LABELS, node_affinity_policy="Ignore")],
    )
    results = solve(batch, pools=[pool], nodes=cluster)
    assert skew_of(results, batch, SPREAD_LABEL, LABELS, cluster) == [1]


def test_node_affinity_policy_honor_counts_only_domains_the_pod_can_use():
    cluster = label_nodes({"selector": "mismatch"})
    pool = nodepool(labels={SPREAD_LABEL: "baz", "selector": "value"})
    batch = pods(
        5,
        labels=LABELS,
        cpu="1",
        node_selector={"selector": "value"},
        spread_constraints=[spread(SPREAD_LABEL, LABELS, node_affinity_policy="Honor")],
    )
    results = solve(batch, pools=[pool], nodes=cluster)
    assert skew_of(results, batch, SPREAD_LABEL, LABELS, cluster) == [5]


# ---------------------------------------------------------------------------------- pod affinity


def test_empty_pod_affinity_schedules():
    spec = {"containers": [{"name": "app"}], "affinity": {"podAffinity": {}, "podAntiAffinity": {}}}
    p = Pod.model_validate({"metadata": {"name": "empty-affinity", "namespace": "default"}, "spec": spec})
    assert pod_key(p) in where(solve([p]))


def test_pod_affinity_on_hostname_joins_the_target():
    spreaders = pods(10, labels=LABELS, spread_constraints=[spread(HOST, LABELS)])
    target = pod(labels=S2)
    follower = pod(affinity=[pod_term(HOST, S2)])
    placed = where(solve([*spreaders, target, follower]))
    assert placed[pod_key(follower)] == placed[pod_key(target)]


def test_pod_affinity_on_arch_shares_the_arch_but_spread_separates_the_nodes():
    host_spread = [spread(HOST, S2)]
    target = pod(labels=S2, cpu="2", node_selector={wk.ARCH: "arm64"}, spread_constraints=host_spread)
    follower = pod(labels=S2, cpu="1", spread_constraints=host_spread, affinity=[pod_term(wk.ARCH, S2)])
    results = solve([target, follower])
    placed = where(results)
    labels_of = node_labels(results)
    assert placed[pod_key(target)] != placed[pod_key(follower)]
    assert (
        labels_of[placed[pod_key(target)]][wk.ARCH]
        == labels_of[placed[pod_key(follower)]][wk.ARCH]
        == "arm64"
    )


def test_self_affinity_on_hostname_puts_a_deployment_on_one_node():
    batch = pods(3, labels=S2, affinity=[pod_term(HOST, S2)])
    results = solve(batch)
    assert len(where(results)) == 3 and len(results.nodeclaims) == 1


def test_self_affinity_bootstraps_only_the_first_empty_domain():
    batch = pods(10, labels=S2, affinity=[pod_term(HOST, S2)])
    results = solve(batch)
    assert len(results.nodeclaims) == 1
    assert len(where(results)) == 5  # a Catalog P node holds 5 pods
    assert len(results.unschedulable) == 5
    cluster = launch(results, batch)
    later = pods(10, labels=S2, affinity=[pod_term(HOST, S2)])
    assert where(solve(later, nodes=cluster)) == {}


def test_self_affinity_does_not_bootstrap_when_a_matching_pod_exists_in_an_unusable_domain():
    anchor = pod(labels=S2, node_selector={ZONE: "test-zone-1"}, affinity=[pod_term(HOST, S2)])
    cluster = launch(solve([anchor]), [anchor])
    assert len(cluster) == 1
    batch = pods(
        10,
        labels=S2,
        required=[[expr(ZONE, "In", "test-zone-2", "test-zone-3")]],
        affinity=[pod_term(HOST, S2)],
    )
    assert where(solve(batch, nodes=cluster)) == {}


def test_self_affinity_on_zone_puts_a_deployment_in_one_zone():
    batch = pods(3, labels=S2, affinity=[pod_term(ZONE, S2)])
    results = solve(batch)
    assert len(results.nodeclaims) == 1


def test_self_affinity_on_zone_respects_the_pods_zone():
    batch = pods(3, labels=S2, affinity=[pod_term(ZONE, S2)], required=[[expr(ZONE, "In", "test-zone-3")]])
    results = solve(batch)
    assert len(results.nodeclaims) == 1
    assert results.nodeclaims[0].zone == "test-zone-3"


def test_affinity_to_a_pod_that_does_not_exist_is_unschedulable():
    batch = pods(10, affinity=[pod_term(ZONE, S2)])
    results = solve(batch)
    assert where(results) == {}
    assert all("pod affinity" in entry.reasons[0] for entry in results.unschedulable)


def test_zonal_affinity_waits_for_an_unconstrained_target_to_commit_to_a_zone():
    target = pod(labels=S2)
    followers = pods(10, affinity=[pod_term(ZONE, S2)])
    results = solve([*followers, target])
    assert set(where(results)) == {pod_key(target)}
    cluster = launch(results, [target])
    results = solve(followers, nodes=cluster)
    assert len(where(results)) == 10
    assert skew_of(results, followers, ZONE, {}, cluster) == [11]


def test_zonal_affinity_follows_a_target_constrained_to_one_zone():
    target = pod(labels=S2, required=[[expr(ZONE, "In", "test-zone-1")]])
    followers = pods(10, affinity=[pod_term(ZONE, S2)])
    results = solve([*followers, target])
    assert len(where(results)) == 11
    assert skew_of(results, [*followers, target], ZONE, {}) == [11]


def test_chained_affinities_converge_within_one_batch():
    db = {"type": "db", "spread": "spread"}
    web = {"type": "web", "spread": "spread"}
    cache = {"type": "cache", "spread": "spread"}
    ui = {"type": "ui", "spread": "spread"}
    batch = [
        pod(labels=ui, affinity=[pod_term(HOST, cache)]),
        pod(labels=cache, affinity=[pod_term(HOST, web)]),
        pod(labels=web, affinity=[pod_term(HOST, db)]),
        pod(labels=db),
    ]
    assert len(where(solve(batch))) == 4


def test_an_unsatisfiable_affinity_chain_ends():
    lonely = pod(labels={"type": "db"}, affinity=[pod_term(HOST, {"type": "web"})])
    results = solve([lonely])
    assert pod_key(lonely) in unschedulable(results)


def test_preferred_pod_affinity_may_be_violated():
    spreaders = pods(10, labels=LABELS, spread_constraints=[spread(HOST, LABELS)])
    hopeful = pod(preferred_affinity=[(50, pod_term(HOST, S2))])
    assert pod_key(hopeful) in where(solve([*spreaders, hopeful]))


def test_a_pod_affinity_preference_yields_to_a_required_spread():
    target = pod(labels=S2)
    followers = pods(
        3,
        labels=LABELS,
        spread_constraints=[spread(HOST, LABELS)],
        preferred_affinity=[(50, pod_term(HOST, S2))],
    )
    results = solve([*followers, target])
    assert len(where(results)) == 4
    assert skew_of(results, followers, HOST, LABELS) == [1, 1, 1]


def test_affinity_only_matches_pods_in_the_terms_namespaces():
    spreaders = pods(10, labels=LABELS, spread_constraints=[spread(HOST, LABELS)])
    target = pod(labels=S2, namespace="other-ns")
    same_namespace = pod(affinity=[pod_term(HOST, S2)])
    listed = pod(affinity=[pod_term(HOST, S2, namespaces=["other-ns"])])
    anywhere = pod(affinity=[pod_term(HOST, S2, all_namespaces=True)])
    results = solve([*spreaders, target, same_namespace, listed, anywhere])
    placed = where(results)
    assert pod_key(same_namespace) in unschedulable(results)
    assert placed[pod_key(listed)] == placed[pod_key(target)]
    assert placed[pod_key(anywhere)] == placed[pod_key(target)]


# ----------------------------------------------------------------------------- pod anti-affinity


def test_anti_affinity_on_hostname_separates_pods_in_either_order():
    for first_is_avoider in (True, False):
        avoider = pod(anti_affinity=[pod_term(HOST, S2)])
        target = pod(labels=S2)
        batch = [avoider, target] if first_is_avoider else [target, avoider]
        placed = where(solve(batch))
        assert placed[pod_key(avoider)] != placed[pod_key(target)]


def _zone_pods(**options):
    return [
        pod(cpu="2", node_selector={ZONE: zone}, **options)
        for zone in ("test-zone-1", "test-zone-2", "test-zone-3")
    ]


def test_anti_affinity_on_zone_is_unschedulable_when_every_zone_holds_a_target():
    targets = _zone_pods(labels=S2)
    avoider = pod(anti_affinity=[pod_term(ZONE, S2)])
    results = solve([*targets, avoider])
    assert all(pod_key(t) in where(results) for t in targets)
    assert pod_key(avoider) in unschedulable(results)
    assert "anti-affinity" in unschedulable(results)[pod_key(avoider)][0]


def test_anti_affinity_blocks_every_zone_a_target_on_an_undecided_claim_may_land_in():
    target = pod(labels=S2, cpu="2")
    avoider = pod(anti_affinity=[pod_term(ZONE, S2)])
    results = solve([target, avoider])
    assert pod_key(target) in where(results)
    assert pod_key(avoider) in unschedulable(results)


def test_anti_affinity_on_arch_separates_architectures():
    host_spread = [spread(HOST, S2)]
    target = pod(labels=S2, cpu="2", node_selector={wk.ARCH: "arm64"}, spread_constraints=host_spread)
    avoider = pod(labels=S2, cpu="1", spread_constraints=host_spread, anti_affinity=[pod_term(wk.ARCH, S2)])
    results = solve([target, avoider])
    placed, labels_of = where(results), node_labels(results)
    assert labels_of[placed[pod_key(target)]][wk.ARCH] != labels_of[placed[pod_key(avoider)]][wk.ARCH]


def test_inverse_preferred_anti_affinity_does_not_block():
    owners = _zone_pods(preferred_anti_affinity=[(10, pod_term(ZONE, S2))])
    plain = pod(labels=S2)
    results = solve([*owners, plain])
    assert len(where(results)) == 4


def test_inverse_required_anti_affinity_keeps_a_plain_matching_pod_out():
    owners = _zone_pods(anti_affinity=[pod_term(ZONE, S2)])
    plain = pod(labels=S2)
    results = solve([*owners, plain])
    assert all(pod_key(o) in where(results) for o in owners)
    assert pod_key(plain) in unschedulable(results)


def test_schroedinger_anti_affinity_waits_for_the_next_round():
    anywhere = pod(cpu="2", anti_affinity=[pod_term(ZONE, S2)])
    plain = pod(labels=S2)
    results = solve([anywhere, plain])
    assert pod_key(anywhere) in where(results)
    assert pod_key(plain) in unschedulable(results)
    cluster = launch(results, [anywhere])
    results = solve([plain], nodes=cluster)
    placed = where(results)
    assert pod_key(plain) in placed
    labels_of = node_labels(results, cluster)
    assert labels_of[placed[pod_key(plain)]][ZONE] != cluster[0].labels[ZONE]


def test_inverse_anti_affinity_of_existing_pods_keeps_a_plain_pod_out():
    owners = _zone_pods(anti_affinity=[pod_term(ZONE, S2)])
    cluster = launch(solve(owners), owners)
    assert len(cluster) == 3
    plain = pod(labels=S2)
    assert pod_key(plain) in unschedulable(solve([plain], nodes=cluster))


def test_inverse_preferred_anti_affinity_of_existing_pods_does_not_block():
    owners = _zone_pods(preferred_anti_affinity=[(10, pod_term(ZONE, S2))])
    cluster = launch(solve(owners), owners)
    plain = pod(labels=S2)
    assert pod_key(plain) in where(solve([plain], nodes=cluster))


def test_zonal_self_anti_affinity_takes_one_zone_per_round():
    cluster: list = []
    for expected in ([1], [1, 1], [1, 1, 1], [1, 1, 1]):
        batch = pods(3, labels=S2, anti_affinity=[pod_term(ZONE, S2)])
        results = solve(batch, nodes=cluster)
        assert skew_of(results, batch, ZONE, S2, cluster) == expected
        cluster = launch(results, batch, cluster)


def test_preferred_anti_affinity_may_be_violated():
    spreaders = pods(3, labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    avoiders = pods(10, preferred_anti_affinity=[(50, pod_term(ZONE, LABELS))])
    results = solve([*spreaders, *avoiders])
    assert all(pod_key(a) in where(results) for a in avoiders)


def test_anti_affinity_respects_existing_pods_on_hostname():
    cluster = [node("busy", bound=[pod(labels=S2, node_name="busy")])]
    avoider = pod(anti_affinity=[pod_term(HOST, S2)])
    placed = where(solve([avoider], nodes=cluster))
    assert placed[pod_key(avoider)] != "busy"


def test_tainted_nodepools_keep_intolerant_spread_pods_off_while_tolerant_ones_use_them():
    tainted = nodepool(
        "tainted", weight=50, taints=[taint("dedicated", "x")], requirements=[expr(ZONE, "In", "test-zone-3")]
    )
    general = zonal_pool("test-zone-1", "test-zone-2")
    intolerant = pods(4, labels=LABELS, spread_constraints=[spread(ZONE, LABELS, node_taints_policy="Honor")])
    results = solve(intolerant, pools=[tainted, general])
    assert skew_of(results, intolerant, ZONE, LABELS) == [2, 2]
    tolerant = pods(3, labels=LABELS, tolerations=[TOLERATE_ALL], spread_constraints=[spread(ZONE, LABELS)])
    results = solve(tolerant, pools=[tainted, general])
    assert skew_of(results, tolerant, ZONE, LABELS) == [1, 1, 1]
    assert {launched_labels(c)[ZONE] for c in results.nodeclaims} == {
        "test-zone-1",
        "test-zone-2",
        "test-zone-3",
    }


# ---------------------------------------------------------------------- existing nodes without the key


def test_a_zonal_spread_pod_does_not_land_on_a_node_without_a_zone():
    # kube-scheduler refuses nodes missing a DoNotSchedule constraint's key, and Karpenter re-checks the
    # node's labels after topology narrows the zone.
    unlabelled = node("no-zone")
    p = pod(labels=LABELS, spread_constraints=[spread(ZONE, LABELS)])
    results = solve([p], nodes=[unlabelled])
    assert where(results)[pod_key(p)] == "new-0"


def test_zonal_affinity_is_not_met_by_a_node_without_a_zone():
    target_node = node(
        "zoned", zone="test-zone-1", taints=[taint("full", "yes")], bound=[pod(labels=S2, node_name="zoned")]
    )
    unlabelled = node("no-zone")
    follower = pod(affinity=[pod_term(ZONE, S2)])
    results = solve([follower], nodes=[unlabelled, target_node])
    assert where(results)[pod_key(follower)] == "new-0"
    assert results.nodeclaims[0].zone == "test-zone-1"


def test_hostname_affinity_to_a_pod_on_a_full_node_is_unschedulable():
    full = node("full", pods=1, bound=[pod(labels=S2, node_name="full")])
    follower = pod(affinity=[pod_term(HOST, S2)])
    results = solve([follower], nodes=[full])
    assert results.nodeclaims == []
    assert "pod affinity" in unschedulable(results)[pod_key(follower)][0]


def test_an_existing_pods_zonal_anti_affinity_steers_new_capacity_away():
    owner = pod(anti_affinity=[pod_term(ZONE, {"app": "x"})], node_name="owner")
    cluster = [node("owner", zone="test-zone-1", taints=[taint("full", "yes")], bound=[owner])]
    target = pod(labels={"app": "x"})
    results = solve([target], nodes=cluster)
    assert results.nodeclaims[0].zone != "test-zone-1"
