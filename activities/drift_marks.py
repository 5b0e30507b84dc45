"""Karpenter's NodeClaim `Drifted` condition, kept by each automatic disruption pass (`core.disruption.drift`):
set True with the drift's reason (`NodePoolDrifted`, `RequirementsDrifted`, `NodeClassDrift`, `K8sVersionDrift`,
`ImageDrift`) and message, removed when the NodeClaim no longer drifts, so `kubectl get nodeclaims -o wide` shows
what the planner sees. A write that fails is logged and tried again by the next pass."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import StatusCondition
from core.cluster import ClusterAPI
from core.disruption.drift import DriftMark
from core.errors import CloudError

logger = logging.getLogger(__name__)


def _change(mark: DriftMark) -> Callable[[NodeClaim], None]:
    def change(claim: NodeClaim) -> None:
        kept = [c for c in claim.status.conditions if c.type != NodeClaimConditionType.DRIFTED]
        if mark.drift is not None:
            kept.append(
                StatusCondition(
                    type=NodeClaimConditionType.DRIFTED,
                    status="True",
                    reason=mark.drift.reason,
                    message=mark.drift.message,
                    last_transition_time=datetime.now(UTC),
                )
            )
        claim.status.conditions = kept

    return change


async def mark_drifted(cluster: ClusterAPI, marks: Sequence[DriftMark]) -> None:
    """Write the `Drifted` condition changes; none of them fails the pass."""
    for mark in marks:
        try:
            await cluster.change_nodeclaim_status(mark.nodeclaim, _change(mark))
        except CloudError as error:
            logger.warning("could not mark NodeClaim %s drifted: %s", mark.nodeclaim, error)
