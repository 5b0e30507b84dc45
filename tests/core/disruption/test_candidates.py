"""Candidates: which nodes may be disrupted, what disrupting them costs, and why the others may not."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from core import labels as wk
from core.api.kube import Node, Pod
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.disruption.candidates import (
    NodeReport,
    do_not_disrupt,
    eviction_cost,
    find_candidates,
    go_duration,
    is_reschedulable,
    lifetime_remaining,
    pod_blocker,
)
from core.disruption.commands import BlockReason
from core.disruption.drift import DriftInputs
from core.disruption.pdb import PdbLimits
from tests.core.disruption.fixtures import (
    LAUNCHED,
    NOW,
    bound,
    catalog_d,
    cluster,
    node_pair,
    nodepool,
    pdb,
)


def report_of(
    *pairs: tuple[NodeClaim, Node],
    pods: Sequence[Pod] = (),
    pools: Sequence[NodePool] | None = None,
    strangers: Sequence[Node] = (),
) -> NodeReport:
    snapshot = cluster(pools or [nodepool()], list(pairs), pods)
    snapshot.nodes.extend(strangers)
    types = {pool.name: list(catalog_d()) for pool in snapshot.nodepools if not pool.is_static}
    return find_candidates(snapshot, types, DriftInputs(), NOW)


def rejection(report: NodeReport, node: str) -> tuple[BlockReason, str]:
    [entry] = [blocked for blocked in report.rejected if blocked.node == node]
    [reason] = entry.reasons
    return reason.code, reason.message


@pytest.mark.parametrize(
    ("annotations", "priority", "cost"),
    [
        ({}, None, 1.0),
        ({"controller.kubernetes.io/pod-deletion-cost": str(2**27)}, None, 2.0),
        ({"controller.kubernetes.io/pod-deletion-cost": str(-(2**27))}, None, 0.0),
        ({}, 2**25, 2.0),
        ({}, 1_000_000_000, 10.0),
        ({}, -2_147_483_648, -10.0),
        ({"controller.kubernetes.io/pod-deletion-cost": "not a number"}, None, 1.0),
    ],
)
def test_eviction_cost_from_deletion_cost_and_priority(
    annotations: dict[str, str], priority: int | None, cost: float
) -> None:
    pod = bound("node-a", annotations=annotations)
    if priority is not None:
        pod = pod.model_copy(update={"spec": pod.spec.model_copy(update={"priority": priority})})
    assert eviction_cost(pod) == pytest.approx(cost)


def test_lifetime_remaining_scales_with_expire_after() -> None:
    claim, _ = node_pair("node-a", created=NOW - timedelta(hours=360))
    assert lifetime_remaining(nodepool(expire_after="720h"), claim, NOW) == pytest.approx(0.5)
    assert lifetime_remaining(nodepool(expire_after="Never"), claim, NOW) == 1.0
    assert lifetime_remaining(nodepool(expire_after="100h"), claim, NOW) == 0.0


def test_disruption_cost_is_pod_costs_times_lifetime_left() -> None:
    report = report_of(
        node_pair("node-a", created=NOW - timedelta(hours=360)),
        node_pair("node-b"),
        pods=[
            bound("node-a", "a-1"),
            bound("node-a", "a-2"),
            bound("node-b", "b-1", annotations={"controller.kubernetes.io/pod-deletion-cost": str(2**27)}),
        ],
    )
    costs = {candidate.name: candidate.disruption_cost for candidate in report.candidates}
    assert costs["node-a"] == pytest.approx(2 * 0.5)
    assert costs["node-b"] == pytest.approx(2.0 * (1 - 24 / 720))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("300ms", 0.3), ("0", 0), ("-5m", -300)],
)
def test_go_durations(text: str, seconds: float) -> None:
    duration = go_duration(text)
    assert duration is not None
    assert duration.total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5 minutes", "1x", "h"])
def test_not_go_durations(text: str) -> None:
    assert go_duration(text) is None


def test_do_not_disrupt_true_or_a_duration_from_pod_start() -> None:
    forever = bound("node-a", "x", annotations={wk.DO_NOT_DISRUPT: "true"})
    assert do_not_disrupt(forever, NOW) == "do-not-disrupt pod default/x"
    young = bound("node-a", "y", annotations={wk.DO_NOT_DISRUPT: "5m"}, created=NOW - timedelta(minutes=1))
    assert (
        do_not_disrupt(young, NOW) == "do-not-disrupt pod default/y (for 5m after it started, until 12:04:00)"
    )
    old = bound("node-a", "z", annotations={wk.DO_NOT_DISRUPT: "5m"}, created=NOW - timedelta(minutes=10))
    assert do_not_disrupt(old, NOW) is None
    invalid = bound("node-a", "w", annotations={wk.DO_NOT_DISRUPT: "soon"})
    assert do_not_disrupt(invalid, NOW) is None


def test_which_pods_need_rescheduling() -> None:
    assert is_reschedulable(bound("node-a"))
    assert not is_reschedulable(bound("node-a", owner_kind="DaemonSet"))
    assert not is_reschedulable(bound("node-a", owner_kind="Node"))
    assert not is_reschedulable(bound("node-a", owner_kind="ReplicaSet", deleting=True))
    assert is_reschedulable(bound("node-a", owner_kind="StatefulSet", deleting=True))
    assert not is_reschedulable(bound("node-a", phase="Succeeded"))


def test_a_node_with_only_daemonset_pods_is_empty() -> None:
    report = report_of(node_pair("node-a"), pods=[bound("node-a", owner_kind="DaemonSet")])
    [candidate] = report.candidates
    assert candidate.empty
    assert len(candidate.pods) == 1


def test_nodes_that_cannot_be_candidates_say_why() -> None:
    report = report_of(
        node_pair("orphan", pool="gone"),
        node_pair("launching", initialized=False),
        node_pair("leaving", deleting=True),
        node_pair("tainted", taints=[{"key": wk.DISRUPTED_TAINT, "effect": "NoSchedule"}]),
        node_pair("pinned", node_annotations={wk.DO_NOT_DISRUPT: "true"}),
        node_pair("claim-pinned", claim_annotations={wk.DO_NOT_DISRUPT: "true"}),
        node_pair("mystery", node_labels={wk.INSTANCE_TYPE: "no-such-type"}),
        node_pair("fixed", pool="static"),
        node_pair("fine"),
        pools=[nodepool(), nodepool("static", replicas=1)],
        strangers=[node_pair("unmanaged")[1]],
    )
    assert [candidate.name for candidate in report.candidates] == ["fine"]
    assert rejection(report, "unmanaged")[0] is BlockReason.NOT_MANAGED
    assert rejection(report, "orphan") == (BlockReason.NODEPOOL_NOT_FOUND, 'NodePool "gone" not found')
    assert rejection(report, "launching")[0] is BlockReason.NOT_INITIALIZED
    assert rejection(report, "leaving")[0] is BlockReason.DELETING
    assert rejection(report, "tainted")[0] is BlockReason.DISRUPTING
    assert rejection(report, "pinned") == (
        BlockReason.DO_NOT_DISRUPT_NODE,
        "do-not-disrupt annotation on node pinned",
    )
    assert rejection(report, "claim-pinned")[0] is BlockReason.DO_NOT_DISRUPT_NODE
    assert rejection(report, "mystery") == (
        BlockReason.INSTANCE_TYPE_NOT_FOUND,
        'instance type "no-such-type" not found',
    )
    assert rejection(report, "fixed")[0] is BlockReason.STATIC_NODEPOOL
    assert report.leaving == ["leaving", "tainted"]


def test_budget_counts_cover_initialized_nodes_and_those_leaving_or_not_ready() -> None:
    report = report_of(
        node_pair("ready"),
        node_pair("not-ready", ready=False),
        node_pair("leaving", deleting=True),
        node_pair("launching", initialized=False),
    )
    assert report.totals == {"default": 3}
    assert report.disrupting == {"default": 2}


def test_expired_nodeclaims_are_set_apart_whatever_holds_them() -> None:
    report = report_of(
        node_pair("old", created=NOW - timedelta(hours=800), node_annotations={wk.DO_NOT_DISRUPT: "true"}),
        node_pair("young"),
    )
    assert [candidate.name for candidate in report.expiring] == ["old"]
    assert report.expiring[0].expires_at == NOW - timedelta(hours=80)
    assert [candidate.name for candidate in report.candidates] == ["young"]


def test_consolidate_after_counts_from_the_last_pod_event_or_initialization() -> None:
    pool = nodepool(consolidate_after="10m")
    report = report_of(
        node_pair("busy", last_pod_event=NOW - timedelta(minutes=3)),
        node_pair("quiet", last_pod_event=NOW - timedelta(minutes=30)),
        node_pair("fresh", created=NOW - timedelta(minutes=4)),
        pools=[pool],
    )
    quiet = {candidate.name: candidate.quiet for candidate in report.candidates}
    assert quiet["quiet"] is None
    busy = quiet["busy"]
    assert busy is not None and busy.code is BlockReason.CONSOLIDATE_AFTER
    assert busy.message == "consolidateAfter 10m has not passed since the last pod event (7m left)"
    fresh = quiet["fresh"]
    assert fresh is not None and "6m left" in fresh.message
    never = report_of(node_pair("a"), pools=[nodepool(consolidate_after="Never")]).candidates[0].quiet
    assert never is not None and never.code is BlockReason.CONSOLIDATION_DISABLED


def test_the_price_is_that_of_the_nodes_offering() -> None:
    [candidate] = report_of(node_pair("a")).candidates
    assert candidate.price_micros == 20_143_895
    assert (candidate.zone, candidate.capacity_type) == ("test-zone-1", "on-demand")


def test_pods_block_by_do_not_disrupt_then_pdb_unless_eventual_with_grace_period() -> None:
    pods = [
        bound("guarded", "x", annotations={wk.DO_NOT_DISRUPT: "true"}),
        bound("budgeted", "y", app="web"),
        bound("bounded", "z", annotations={wk.DO_NOT_DISRUPT: "true"}),
    ]
    report = report_of(
        node_pair("guarded"),
        node_pair("budgeted"),
        node_pair("bounded", termination_grace_period="1h"),
        pods=pods,
    )
    limits = PdbLimits([pdb("web", {"app": "web"}, max_unavailable=0)], pods)
    by_name = {candidate.name: candidate for candidate in report.candidates}
    guarded = pod_blocker(by_name["guarded"], limits, eventual=True)
    assert guarded is not None and guarded.message == "do-not-disrupt pod default/x"
    budgeted = pod_blocker(by_name["budgeted"], limits, eventual=False)
    assert budgeted is not None and budgeted.message == "pdb default/web allows 0 evictions"
    assert pod_blocker(by_name["bounded"], limits, eventual=False) is not None
    assert pod_blocker(by_name["bounded"], limits, eventual=True) is None
    assert by_name["bounded"].drifted_at == LAUNCHED
