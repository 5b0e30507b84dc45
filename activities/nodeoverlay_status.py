"""Writes the NodeOverlays' status conditions from the verdicts a plan computed (`core.nodeoverlay_status`).

Karpenter's `nodeoverlay` controller writes them when it evaluates the overlays; here the planning activity
does, since it applies the overlays to every NodePool's instance types anyway (`build_snapshot`). Only
overlays whose conditions change are patched, with the resourceVersion read as precondition: a newer
version is evaluated again by the next plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from core.api.condition_set import conditions_json
from core.api.nodeoverlay import NodeOverlay
from core.cluster import ClusterAPI
from core.instancetypes.overlay import OverlayVerdict
from core.nodeoverlay_status import nodeoverlay_conditions


async def write_nodeoverlay_statuses(
    cluster: ClusterAPI,
    overlays: Sequence[NodeOverlay],
    verdicts: Mapping[str, OverlayVerdict],
    now: datetime,
) -> int:
    """Patch the conditions of each overlay whose verdict changes them; how many were written."""
    written = 0
    for overlay in overlays:
        verdict = verdicts.get(overlay.name)
        if verdict is None or not overlay.metadata.resource_version:
            continue
        conditions = nodeoverlay_conditions(overlay, verdict, now)
        if conditions is None:
            continue
        status = {"conditions": conditions_json(conditions)}
        if await cluster.patch_status("NodeOverlay", overlay.name, status, overlay.metadata.resource_version):
            written += 1
    return written
