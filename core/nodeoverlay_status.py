"""The status Karpenter's `nodeoverlay` controller writes on a NodeOverlay.

`ValidationSucceeded` is True when the overlay is in force; False with reason `RuntimeValidation` (and the
broken rules) or `Conflict` ("conflict with another overlay") when `core.instancetypes.overlay` leaves it out.
`Ready` is its root (`core.api.condition_set`).
"""

from __future__ import annotations

from datetime import datetime

from core.api.condition_set import ConditionSet
from core.api.nodeoverlay import NodeOverlay, NodeOverlayConditionType
from core.api.nodepool import StatusCondition
from core.instancetypes.overlay import OverlayVerdict


def nodeoverlay_conditions(
    overlay: NodeOverlay, verdict: OverlayVerdict, now: datetime
) -> list[StatusCondition] | None:
    """The overlay's conditions after `verdict`, or None when they would not change."""
    conditions = ConditionSet(
        overlay.status.conditions,
        (NodeOverlayConditionType.VALIDATION_SUCCEEDED,),
        overlay.metadata.generation,
        overlay.metadata.creation_timestamp,
        now,
    )
    changed = conditions.conditions != overlay.status.conditions
    if verdict.valid:
        changed |= conditions.set_true(NodeOverlayConditionType.VALIDATION_SUCCEEDED)
    else:
        changed |= conditions.set_false(
            NodeOverlayConditionType.VALIDATION_SUCCEEDED, verdict.reason, verdict.message
        )
    return conditions.conditions if changed else None
