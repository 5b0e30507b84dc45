"""The Drifted and Consolidatable conditions of every NodeClaim, as Karpenter's nodeclaim disruption
controller keeps them (the disruption loop writes them each pass).

* Drifted: True, with the drift reason as both reason and message (`NodePoolDrifted`, `RequirementsDrifted`,
  or the AKS provider's `NodeClassDrift`, `K8sVersionDrift`, `ImageDrift`), while a launched NodeClaim whose
  Node has registered has drifted; removed when it has not, or is not launched or registered.
* Consolidatable: True once consolidation is enabled for its NodePool, it is initialized and consolidateAfter
  has passed since its last pod event; removed otherwise. NodeClaims of static NodePools are left alone.

NodeClaims being deleted and those without a NodePool are left as they are, as Karpenter leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.disruption.candidates import is_consolidatable
from core.disruption.drift import DriftInputs, detect_drift


@dataclass(frozen=True, slots=True)
class ConditionChange:
    """One condition to set True (with `reason`) or, when `reason` is None, to remove."""

    nodeclaim: str
    type: NodeClaimConditionType
    reason: str | None
    message: str = ""


def _change(
    claim: NodeClaim, kind: NodeClaimConditionType, reason: str | None, message: str
) -> list[ConditionChange]:
    """The change that makes the condition so, if it is not already."""
    current = claim.status.condition(kind)
    if reason is None:
        return [] if current is None else [ConditionChange(claim.name, kind, None)]
    if current is not None and (current.status, current.reason, current.message) == ("True", reason, message):
        return []
    return [ConditionChange(claim.name, kind, reason, message)]


def disruption_conditions(manifests: Manifests, inputs: DriftInputs, now: datetime) -> list[ConditionChange]:
    """What to change so that every NodeClaim's Drifted and Consolidatable conditions say what holds at
    `now`, by NodeClaim name."""
    pools = {pool.name: pool for pool in manifests.nodepools}
    nodeclasses = {nodeclass.name: nodeclass for nodeclass in manifests.nodeclasses}
    nodes = {node.metadata.name: node for node in manifests.nodes}
    changes: list[ConditionChange] = []
    for claim in sorted(manifests.nodeclaims, key=lambda c: c.name):
        pool = pools.get(claim.nodepool_name or "")
        if pool is None or claim.metadata.deletion_timestamp is not None:
            continue
        drift = None
        node = nodes.get(claim.node_name or "")
        if claim.is_true(NodeClaimConditionType.LAUNCHED) and node is not None:
            # Requirements are checked against the labels of the NodeClaim and its Node together: a NodeClaim
            # whose Node has not registered carries only a few of them, and would look drifted.
            nodeclass = nodeclasses.get(claim.node_class_ref.name)
            drift = detect_drift(claim, node, pool, nodeclass, inputs, recorded=False)
        reason = None if drift is None else drift.reason
        changes += _change(claim, NodeClaimConditionType.DRIFTED, reason, reason or "")
        if not pool.is_static:
            consolidatable = is_consolidatable(pool, claim, now)
            reason = NodeClaimConditionType.CONSOLIDATABLE.value if consolidatable else None
            changes += _change(claim, NodeClaimConditionType.CONSOLIDATABLE, reason, "")
    return changes
