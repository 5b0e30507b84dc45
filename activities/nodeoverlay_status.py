"""Writes the NodeOverlays' status conditions from the verdicts a plan computed (`core.nodeoverlay_status`).

Karpenter's `nodeoverlay` controller writes them when it evaluates the overlays; here the planning activity
does, since it applies the overlays to every NodePool's instance types anyway (`build_snapshot`). Only
overlays whose conditions change are patched, with the resourceVersion read as precondition: a newer
version is evaluated again by the next plan. A write that fails is logged and left to the next plan: it
never holds up provisioning or disruption.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from core.api.condition_set import conditions_json
from core.api.nodeoverlay import NodeOverlay
from core.cluster import ClusterAPI
from core.errors import CloudError
from core.instancetypes.overlay import OverlayVerdict
from core.nodeoverlay_status import nodeoverlay_conditions

logger = logging.getLogger("nodewright.nodeoverlay.status")


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
        try:
            if await cluster.patch_status(
                "NodeOverlay", overlay.name, status, overlay.metadata.resource_version
            ):
                written += 1
        except CloudError as error:
            logger.warning("could not write the status of NodeOverlay %s: %s", overlay.name, error)
    return written
