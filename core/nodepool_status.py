"""The status Karpenter writes on a NodePool: what it has provisioned and whether it can provision.

- `status.resources` and `status.nodes` (Karpenter's `nodepool.counter`): the capacity of the pool's nodes summed,
  with cpu, memory, pods, ephemeral-storage and nodes always present (0 when the pool has none). A node counts
  once, whether Karpenter knows it as a NodeClaim, a Node or both; one being deleted (its NodeClaim deleting or
  terminating its instance, or a Node without NodeClaim deleting) no longer counts. An initialized node counts
  its Node's capacity; before that, the NodeClaim's capacity fills what the Node does not show yet.
- `ValidationSucceeded` (`nodepool.validation`): False with reason `NodePoolValidationFailed` and the broken
  rules when the NodePool does not pass validation.
- `NodeClassReady` (`nodepool.readiness`): follows the referenced NodeClass's `Ready`: False with its reason and
  message when it is False; `NodeClassNotFound`, `NodeClassTerminating` or `NodeClassReadinessUnknown` otherwise.
- `Ready`: the root of the two (`core.api.condition_set`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.api.condition_set import ConditionSet, conditions_json
from core.api.nodepool import ConditionStatus, NodePoolConditionType, StatusCondition
from core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, NODES, PODS, Resources, format_resources, merge

BASE_RESOURCES = (CPU, MEMORY, PODS, EPHEMERAL_STORAGE, NODES)
"""The resources `status.resources` always lists, as Karpenter's counter does."""

VALIDATION_FAILED = "NodePoolValidationFailed"
NODECLASS_NOT_FOUND = ("NodeClassNotFound", "NodeClass not found on cluster")
NODECLASS_TERMINATING = ("NodeClassTerminating", "NodeClass is Terminating")
NODECLASS_READINESS_UNKNOWN = ("NodeClassReadinessUnknown", "Node Class Readiness Unknown")

NODEPOOL_DEPENDENTS = (NodePoolConditionType.VALIDATION_SUCCEEDED, NodePoolConditionType.NODE_CLASS_READY)
"""What a NodePool's `Ready` depends on (`NodeRegistrationHealthy` is reported beside it, not under it)."""


@dataclass(frozen=True, slots=True)
class CountedNode:
    """One node as the counter sees it: a NodeClaim, its Node, or both."""

    nodepool: str | None
    """The `karpenter.sh/nodepool` label (of the Node when there is one, else of the NodeClaim)."""
    capacity: Resources
    deleting: bool = False


def counted_capacity(claim: Resources | None, node: Resources | None, initialized: bool) -> Resources:
    """A node's capacity as Karpenter's cluster state reports it: the Node's once it is initialized (or when
    there is no NodeClaim); before that the NodeClaim's fills every resource the Node shows as zero or not at
    all."""
    if initialized or claim is None:
        return dict(node or {})
    if node is None:
        return dict(claim)
    filled = dict(node)
    for name, amount in claim.items():
        if not filled.get(name):
            filled[name] = amount
    return filled


def nodepool_usage(nodes: Iterable[CountedNode]) -> dict[str, Resources]:
    """Per NodePool, the summed capacity of its nodes that are not being deleted, with `nodes` counting them."""
    usage: dict[str, Resources] = {}
    for node in nodes:
        if node.nodepool is None or node.deleting:
            continue
        usage[node.nodepool] = merge(usage.get(node.nodepool, {}), node.capacity, {NODES: 1})
    return usage


@dataclass(frozen=True, slots=True)
class NodeClassState:
    """What the readiness of a NodePool reads of its NodeClass."""

    deleting: bool
    ready: StatusCondition | None


def nodeclass_state(raw: Mapping[str, Any]) -> NodeClassState:
    """The deletion and `Ready` condition of a NodeClass manifest (an unreadable condition counts as unset)."""
    metadata = raw.get("metadata") or {}
    conditions = (raw.get("status") or {}).get("conditions") or []
    ready = None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            try:
                ready = StatusCondition.model_validate(condition)
            except ValueError:
                ready = None
    return NodeClassState(deleting=metadata.get("deletionTimestamp") is not None, ready=ready)


@dataclass(frozen=True, slots=True)
class NodePoolFacts:
    """Everything the status of one NodePool is computed from."""

    generation: int | None
    created: datetime | None
    conditions: list[StatusCondition]
    """Its current conditions (others' conditions, such as NodeRegistrationHealthy, are kept)."""
    validation_error: str | None
    """Why it fails validation, or None."""
    nodeclass: NodeClassState | None
    """Its NodeClass, or None when there is none of that name."""
    usage: Resources


def nodepool_conditions(facts: NodePoolFacts, now: datetime) -> list[StatusCondition]:
    """The NodePool's conditions after validation and readiness have been reconciled."""
    conditions = ConditionSet(facts.conditions, NODEPOOL_DEPENDENTS, facts.generation, facts.created, now)
    if facts.validation_error is not None:
        conditions.set_false(
            NodePoolConditionType.VALIDATION_SUCCEEDED, VALIDATION_FAILED, facts.validation_error
        )
    else:
        conditions.set_true(NodePoolConditionType.VALIDATION_SUCCEEDED)
    nodeclass, ready_type = facts.nodeclass, NodePoolConditionType.NODE_CLASS_READY
    if nodeclass is None:
        conditions.set_false(ready_type, *NODECLASS_NOT_FOUND)
    elif nodeclass.deleting:
        conditions.set_false(ready_type, *NODECLASS_TERMINATING)
    elif nodeclass.ready is None or nodeclass.ready.status is ConditionStatus.UNKNOWN:
        conditions.set_false(ready_type, *NODECLASS_READINESS_UNKNOWN)
    elif nodeclass.ready.status is ConditionStatus.FALSE:
        conditions.set_false(ready_type, nodeclass.ready.reason, nodeclass.ready.message)
    else:
        conditions.set_true(ready_type)
    return conditions.conditions


def nodepool_status(facts: NodePoolFacts, now: datetime) -> dict[str, Any]:
    """The fields of `status` Karpenter's NodePool controllers write: resources, nodes and conditions."""
    resources = {**dict.fromkeys(BASE_RESOURCES, 0), **facts.usage}
    return {
        "resources": format_resources(resources),
        "nodes": facts.usage.get(NODES, 0),
        "conditions": conditions_json(nodepool_conditions(facts, now)),
    }
