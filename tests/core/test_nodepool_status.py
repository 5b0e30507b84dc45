"""NodePool status as Karpenter's counter, validation and readiness controllers write it."""

from __future__ import annotations

from datetime import UTC, datetime

from core.api.nodepool import ConditionStatus, StatusCondition
from core.nodepool_status import (
    CountedNode,
    NodeClassState,
    NodePoolFacts,
    counted_capacity,
    nodeclass_state,
    nodepool_conditions,
    nodepool_status,
    nodepool_usage,
)

NOW = datetime(2026, 1, 2, tzinfo=UTC)
READY = StatusCondition(type="Ready", status=ConditionStatus.TRUE, reason="Ready")
GIB = 2**30


def facts(**fields: object) -> NodePoolFacts:
    values: dict[str, object] = {
        "generation": 1,
        "created": NOW,
        "conditions": [],
        "validation_error": None,
        "nodeclass": NodeClassState(deleting=False, ready=READY),
        "usage": {},
    }
    values.update(fields)
    return NodePoolFacts(**values)  # type: ignore[arg-type]


def by_type(conditions: list[StatusCondition]) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status.value, c.reason, c.message) for c in conditions}


def test_an_initialized_node_counts_its_nodes_capacity_and_an_uninitialized_one_fills_in_its_nodeclaims() -> (
    None
):
    claim = {"cpu": 4000, "memory": 16 * GIB, "pods": 110}
    node = {"cpu": 4000, "memory": 15 * GIB, "pods": 0}
    assert counted_capacity(claim, node, initialized=True) == node
    assert counted_capacity(claim, node, initialized=False) == {"cpu": 4000, "memory": 15 * GIB, "pods": 110}
    assert counted_capacity(claim, None, initialized=False) == claim
    assert counted_capacity(None, node, initialized=False) == node


def test_usage_sums_each_pools_nodes_and_leaves_out_those_being_deleted() -> None:
    usage = nodepool_usage(
        [
            CountedNode("default", {"cpu": 2000, "memory": 8 * GIB}),
            CountedNode("default", {"cpu": 4000, "memory": 16 * GIB}),
            CountedNode("default", {"cpu": 8000}, deleting=True),
            CountedNode("gpu", {"cpu": 8000, "nvidia.com/gpu": 1}),
            CountedNode(None, {"cpu": 1000}),
        ]
    )
    assert usage == {
        "default": {"cpu": 6000, "memory": 24 * GIB, "nodes": 2},
        "gpu": {"cpu": 8000, "nvidia.com/gpu": 1, "nodes": 1},
    }


def test_the_status_lists_the_base_resources_and_the_node_count() -> None:
    status = nodepool_status(
        facts(usage={"cpu": 6000, "memory": 24 * GIB, "nodes": 2, "nvidia.com/gpu": 1}), NOW
    )
    assert status["resources"] == {
        "cpu": "6",
        "ephemeral-storage": "0",
        "memory": "24Gi",
        "nodes": "2",
        "nvidia.com/gpu": "1",
        "pods": "0",
    }
    assert status["nodes"] == 2
    empty = nodepool_status(facts(), NOW)
    assert empty["nodes"] == 0 and set(empty["resources"].values()) == {"0"}


def test_a_valid_pool_with_a_ready_nodeclass_is_ready() -> None:
    assert by_type(nodepool_conditions(facts(), NOW)) == {
        "ValidationSucceeded": ("True", "ValidationSucceeded", ""),
        "NodeClassReady": ("True", "NodeClassReady", ""),
        "Ready": ("True", "Ready", ""),
    }


def test_an_invalid_pool_fails_validation_and_is_not_ready() -> None:
    problem = (
        'spec.template.spec.requirements[0].values: no valid value for karpenter.sh/capacity-type in ["x"]'
    )
    conditions = by_type(nodepool_conditions(facts(validation_error=problem), NOW))
    assert conditions["ValidationSucceeded"] == ("False", "NodePoolValidationFailed", problem)
    assert conditions["Ready"] == ("False", "UnhealthyDependents", "ValidationSucceeded=False")


def test_nodeclass_ready_follows_the_nodeclass() -> None:
    broken = StatusCondition(
        type="Ready", status=ConditionStatus.FALSE, reason="UnhealthyDependents", message="SubnetsReady=False"
    )
    unknown = StatusCondition(type="Ready", status=ConditionStatus.UNKNOWN, reason="ReconcilingDependents")
    cases = [
        (None, ("False", "NodeClassNotFound", "NodeClass not found on cluster")),
        (NodeClassState(True, READY), ("False", "NodeClassTerminating", "NodeClass is Terminating")),
        (NodeClassState(False, None), ("False", "NodeClassReadinessUnknown", "Node Class Readiness Unknown")),
        (
            NodeClassState(False, unknown),
            ("False", "NodeClassReadinessUnknown", "Node Class Readiness Unknown"),
        ),
        (NodeClassState(False, broken), ("False", "UnhealthyDependents", "SubnetsReady=False")),
    ]
    for nodeclass, expected in cases:
        conditions = by_type(nodepool_conditions(facts(nodeclass=nodeclass), NOW))
        assert conditions["NodeClassReady"] == expected, nodeclass
        assert conditions["Ready"] == ("False", "UnhealthyDependents", "NodeClassReady=False")


def test_the_nodeclass_state_is_read_from_its_manifest() -> None:
    raw = {
        "metadata": {"name": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "R", "message": "M"}]},
    }
    state = nodeclass_state(raw)
    assert state.deleting and state.ready is not None and state.ready.reason == "R"
    assert nodeclass_state({"metadata": {}}) == NodeClassState(deleting=False, ready=None)
