"""Node repair with the AKS provider's policies: NotReady is tolerated for 10 minutes, NodeHealthy=False and
PreemptionScheduled=True not at all; repairs stop while more than 20 % (rounded up) of a NodePool is unhealthy;
NodeClaims already being deleted and nodes nodewright does not manage are left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.api.kube import Node
from core.api.nodeclaim import NodeClaim
from core.disruption.repair import allowed_unhealthy, plan_repairs

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def node_and_claim(
    name: str, *conditions: tuple[str, str, timedelta], pool: str = "default", deleting: bool = False
) -> tuple[Node, NodeClaim]:
    provider_id = (
        f"azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{name}"
    )
    statuses: list[dict[str, Any]] = [
        {"type": kind, "status": status, "lastTransitionTime": (NOW - ago).isoformat()}
        for kind, status, ago in conditions
    ]
    if not any(kind == "Ready" for kind, _, _ in conditions):
        statuses.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": (NOW - timedelta(hours=1)).isoformat()}
        )
    node = Node.model_validate(
        {"metadata": {"name": name}, "spec": {"providerID": provider_id}, "status": {"conditions": statuses}}
    )
    metadata: dict[str, Any] = {"name": f"claim-{name}", "labels": {"karpenter.sh/nodepool": pool}}
    if deleting:
        metadata["deletionTimestamp"] = NOW.isoformat()
        metadata["finalizers"] = ["karpenter.sh/termination"]
    claim = NodeClaim.parse(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": metadata,
            "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [],
            },
            "status": {"providerID": provider_id, "nodeName": name},
        }
    )
    return node, claim


def plan(*pairs: tuple[Node, NodeClaim], now: datetime = NOW) -> Any:
    return plan_repairs([n for n, _ in pairs], [c for _, c in pairs], now)


def healthy(count: int, pool: str = "default") -> list[tuple[Node, NodeClaim]]:
    return [node_and_claim(f"healthy-{pool}-{i}", pool=pool) for i in range(count)]


def test_not_ready_is_tolerated_for_ten_minutes_then_repaired() -> None:
    waiting = plan(node_and_claim("a", ("Ready", "False", timedelta(minutes=9))), *healthy(9))
    assert waiting.repairs == () and waiting.refused == ()
    assert waiting.next_check == NOW + timedelta(minutes=1)

    due = plan(node_and_claim("a", ("Ready", "Unknown", timedelta(minutes=10))), *healthy(9))
    [repair] = due.repairs
    assert (repair.node, repair.nodeclaim, repair.nodepool, repair.condition) == (
        "a",
        "claim-a",
        "default",
        "Ready=Unknown",
    )
    assert "tolerated 0:10:00" in repair.message


def test_node_unhealthy_and_preemption_are_repaired_at_once() -> None:
    result = plan(
        node_and_claim("sick", ("kubernetes.azure.com/NodeHealthy", "False", timedelta(seconds=1))),
        node_and_claim("spot", ("PreemptionScheduled", "True", timedelta(0))),
        *healthy(8),
    )
    assert [(r.node, r.condition) for r in result.repairs] == [
        ("sick", "kubernetes.azure.com/NodeHealthy=False"),
        ("spot", "PreemptionScheduled=True"),
    ]


def test_more_than_twenty_percent_unhealthy_refuses_every_repair_in_that_nodepool() -> None:
    # 10 nodes allow 2 unhealthy; 3 is more, so none is repaired. Another NodePool is judged on its own.
    sick = [node_and_claim(f"s{i}", ("Ready", "False", timedelta(hours=1))) for i in range(3)]
    other = node_and_claim("o", ("Ready", "False", timedelta(hours=1)), pool="other")
    result = plan(*sick, *healthy(7), other, *healthy(4, pool="other"))
    assert [r.node for r in result.repairs] == ["o"]
    assert sorted(r.node for r in result.refused) == ["s0", "s1", "s2"]
    refused = result.refused[0]
    assert (refused.unhealthy, refused.total, refused.allowed) == (3, 10, 2)
    assert refused.message.startswith("more than 20% nodes are unhealthy in the nodepool")


def test_the_threshold_rounds_up() -> None:
    # One of three nodes is 33 %, yet 20 % of 3 rounds up to one node: repaired, as Karpenter does.
    assert [allowed_unhealthy(n) for n in (1, 3, 5, 6, 10, 11)] == [1, 1, 1, 2, 2, 3]
    result = plan(node_and_claim("a", ("Ready", "False", timedelta(hours=1))), *healthy(2))
    assert [r.node for r in result.repairs] == ["a"]


def test_deleting_nodeclaims_and_unmanaged_nodes_are_left_alone() -> None:
    deleting = node_and_claim("d", ("Ready", "False", timedelta(hours=1)), deleting=True)
    unmanaged, _ = node_and_claim("u", ("Ready", "False", timedelta(hours=1)))
    result = plan_repairs(
        [deleting[0], unmanaged, *(n for n, _ in healthy(4))], [deleting[1], *(c for _, c in healthy(4))], NOW
    )
    assert result.repairs == () and result.refused == ()


def test_a_node_and_its_nodeclaim_match_whatever_the_case_of_their_provider_ids() -> None:
    node, claim = node_and_claim("a", ("Ready", "Unknown", timedelta(minutes=11)))
    node.spec.provider_id = (node.spec.provider_id or "").replace("resourceGroups", "resourcegroups")
    [repair] = plan((node, claim), *healthy(9)).repairs
    assert (repair.node, repair.nodeclaim, repair.condition) == ("a", "claim-a", "Ready=Unknown")
