"""Karpenter's `nodepool.hash` and the AKS provider's `nodeclass.hash` controllers, run by the controller on every
NodePool and AKSNodeClass it sees.

Each keeps its owner's static-drift hash annotations (`core.api.hashes`) equal to the hash of its spec as it is
now, writing only when they differ. When the owner was stamped by another hash version (or never), its
NodeClaims are re-stamped first: the current version and, unless already drifted, the current hash, so that a
change of hashing replaces no node. A bad object or a failed write is logged and left for its next event: it
never stops the controller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from core.api.aksnodeclass import AKSNodeClass
from core.api.hashes import HashStamp, nodeclass_stamp, nodepool_stamp, restamp_annotations
from core.api.meta import InvalidObjectError, ObjectMeta
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import NodePool
from core.cluster import ClusterAPI
from core.errors import CloudError

logger = logging.getLogger("nodewright.controller")

HASHED_KINDS = ("NodePool", "AKSNodeClass")


async def reconcile_hash(cluster: ClusterAPI, kind: str, manifest: dict[str, Any]) -> bool:
    """Stamp a NodePool's or AKSNodeClass's hash if it changed (re-stamping its NodeClaims on a new hash
    version); whether anything was written."""
    try:
        owner, stamp, owns = _parse(kind, manifest)
        if owner.deletion_timestamp is not None:
            return False
        held = owner.annotations
        wanted = stamp.owner_annotations()
        if all(held.get(key) == value for key, value in wanted.items()):
            return False
        if held.get(stamp.version_key) != stamp.version:
            await _restamp(
                cluster, [claim for claim in await _readable_claims(cluster) if owns(claim)], held, stamp
            )
        return await cluster.annotate(kind, owner.name, wanted)
    except (CloudError, ValueError) as error:
        name = (manifest.get("metadata") or {}).get("name", "")
        logger.warning("could not stamp the drift hash of %s %s: %s", kind, name, error)
        return False


def _parse(kind: str, manifest: dict[str, Any]) -> tuple[ObjectMeta, HashStamp, Callable[[NodeClaim], bool]]:
    """The owner's metadata, its current stamp, and which NodeClaims it owns."""
    if kind == "NodePool":
        pool = NodePool.parse(manifest)
        return pool.metadata, nodepool_stamp(pool), lambda claim: claim.nodepool_name == pool.name
    nodeclass = AKSNodeClass.parse(manifest)
    return (
        nodeclass.metadata,
        nodeclass_stamp(nodeclass),
        lambda claim: claim.node_class_ref.name == nodeclass.name,
    )


async def _readable_claims(cluster: ClusterAPI) -> list[NodeClaim]:
    """Every NodeClaim the controller can read: one it cannot is left as it is (the controller's event on it
    says why), where raising would leave every other owner unstamped."""
    claims = []
    for raw in await cluster.list_objects("NodeClaim"):
        try:
            claims.append(NodeClaim.parse(raw))
        except InvalidObjectError as error:
            logger.debug("not re-stamping an unreadable NodeClaim: %s", error)
    return claims


async def _restamp(
    cluster: ClusterAPI, claims: list[NodeClaim], held: dict[str, str], stamp: HashStamp
) -> None:
    for claim in claims:
        drifted = claim.status.condition(NodeClaimConditionType.DRIFTED) is not None
        patch = restamp_annotations(claim.metadata.annotations, held, stamp, drifted)
        if patch and claim.metadata.deletion_timestamp is None:
            await cluster.patch_nodeclaim_metadata(claim.name, annotations=patch)
