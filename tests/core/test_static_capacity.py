from __future__ import annotations

from core.api.manifests import Manifests
from core.scheduling.snapshot import fixed_provider
from core.static_capacity import (
    REPLACEMENT_ANNOTATION,
    StaticMember,
    deletion_order,
    plan_pool,
    plan_static,
    static_template,
)
from tests.core.disruption.fixtures import NOW, bound, catalog_d, catalog_type, cluster, node_pair, nodepool


def member(name: str, **fields: object) -> StaticMember:
    return StaticMember(name=name, launched=bool(fields.pop("launched", True)), **fields)  # type: ignore[arg-type]


def test_creates_the_missing_nodeclaims() -> None:
    step = plan_static("static", 3, None, [member("a"), member("b", deleting=True)])
    assert (step.current, step.create, step.delete, step.limited) == (1, 2, (), False)
    assert step.reason == "1 nodeclaim(s), 3 desired: creating 2"


def test_limits_nodes_counts_the_nodeclaims_being_deleted() -> None:
    step = plan_static("static", 3, 2, [member("a"), member("b", deleting=True)])
    assert (step.create, step.limited) == (0, True)
    assert "limits.nodes 2" in step.reason
    assert plan_static("static", 3, 3, [member("a"), member("b", deleting=True)]).create == 1


def test_holds_when_at_replicas() -> None:
    step = plan_static("static", 2, None, [member("a"), member("b"), member("c", deleting=True)])
    assert not step.acts


def test_scale_down_takes_unlaunched_then_empty_then_cheapest_without_do_not_disrupt() -> None:
    members = [
        member("busy", empty=False, cost=5.0),
        member("protected", empty=False, do_not_disrupt=True, cost=1.5),
        member("light", empty=False, cost=2.0),
        member("empty"),
        member("launching", launched=False),
        member("gone", deleting=True),
    ]
    assert [m.name for m in deletion_order(members)] == ["launching", "empty", "light", "busy", "protected"]
    step = plan_static("static", 2, None, members)
    assert step.delete == ("launching", "empty", "light")
    assert "empty (empty)" in step.reason and "light (disruption cost 2.00)" in step.reason


def test_empty_node_with_a_do_not_disrupt_daemon_is_not_taken_as_empty() -> None:
    members = [member("pinned", do_not_disrupt=True, cost=1.0), member("light", empty=False, cost=3.0)]
    assert plan_static("static", 1, None, members).delete == ("light",)


def test_template_is_the_cheapest_offering_of_an_empty_node() -> None:
    pool = nodepool(
        "static",
        replicas=2,
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
    )
    types = [catalog_type(4, 16), catalog_type(2, 8), catalog_type(8, 32)]
    template = static_template(Manifests(nodepools=[pool]), pool, fixed_provider(types))
    assert template.claim is not None
    assert template.claim.nodepool == "static" and template.claim.pods == []
    assert template.claim.requests.get("pods", 0) == 0
    assert template.claim.launch_candidates[0].instance_type == types[1].name
    assert set(template.claim.instance_type_options) == {it.name for it in types}


def test_template_says_why_nothing_launches() -> None:
    pool = nodepool(
        "static",
        replicas=1,
        requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["nope"]}],
    )
    template = static_template(Manifests(nodepools=[pool]), pool, fixed_provider(list(catalog_d())))
    assert template.claim is None and template.reason


def test_a_drifted_node_is_replaced_once_the_pool_holds_its_replicas() -> None:
    members = [member("a", drift="NodePool changed"), member("b")]
    step = plan_static("static", 2, None, members, drift_budget=1)
    assert (step.create, step.replace, step.delete) == (1, ("a",), ())
    assert "replacing drifted a (NodePool changed)" in step.reason


def test_drift_waits_for_its_budget_and_for_limits_nodes() -> None:
    members = [member("a", drift="x"), member("b", drift="y")]
    assert plan_static("static", 2, None, members, drift_budget=1).replace == ("a",)
    blocked = plan_static("static", 2, None, members, drift_budget=0)
    assert not blocked.acts and "Drifted budget allows none" in blocked.reason
    assert not plan_static("static", 2, 2, members).acts


def test_a_node_being_replaced_is_pending_disruption_not_surplus() -> None:
    replacing = [member("a", drift="x", replaced_by="c"), member("b"), member("c", launched=False)]
    step = plan_static("static", 2, None, replacing)
    assert not step.acts and (step.current, step.create, step.delete) == (2, 0, ())
    ready = [member("a", drift="x", replaced_by="c", replacement_ready=True), member("b"), member("c")]
    assert plan_static("static", 2, None, ready).finish == ("a",)


def test_a_node_whose_replacement_is_gone_runs_again_and_is_replaced_anew() -> None:
    step = plan_static(
        "static", 2, None, [member("a", drift="x", replaced_by="c", replacement_gone=True), member("b")]
    )
    assert (step.unmark, step.replace, step.create) == (("a",), ("a",), 1)


def test_no_drift_replacement_while_scaling_down() -> None:
    step = plan_static("static", 1, None, [member("a", drift="x"), member("b", empty=False)])
    assert step.delete == ("a",) and not step.replace


def test_plan_pool_reads_the_cluster_empty_nodes_go_first_and_drift_is_seen() -> None:
    pool = nodepool("fixed", replicas=1)
    busy, empty = node_pair("busy", pool="fixed"), node_pair("empty", pool="fixed")
    snapshot = cluster([pool], [busy, empty], pods=[bound(busy[1].metadata.name)])
    step = plan_pool(snapshot, pool, NOW)
    assert step.delete == (empty[0].name,)

    drifted = node_pair("old", pool="fixed", drifted="NodeClassDrift")
    held = plan_pool(cluster([pool], [drifted]), pool, NOW)
    assert held.replace == (drifted[0].name,) and held.create == 1


def test_a_replaced_node_goes_once_its_replacement_is_initialized() -> None:
    pool = nodepool("fixed", replicas=1)
    old = node_pair(
        "old", pool="fixed", drifted="NodeClassDrift", claim_annotations={REPLACEMENT_ANNOTATION: "claim-new"}
    )
    new = node_pair("new", pool="fixed", initialized=False)
    waiting = plan_pool(cluster([pool], [old, new]), pool, NOW)
    assert not waiting.acts and waiting.current == 1
    ready = node_pair("new", pool="fixed")
    assert plan_pool(cluster([pool], [old, ready]), pool, NOW).finish == (old[0].name,)
    gone = plan_pool(cluster([pool], [old]), pool, NOW)
    assert gone.unmark == (old[0].name,)
