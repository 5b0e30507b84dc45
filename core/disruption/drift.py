"""Whether a node has drifted from what its NodePool and AKSNodeClass would launch today.

The checks run in the order Karpenter and the AKS provider run them, and the first that fires is the
reason: the NodeClaim's own Drifted condition (set by the drift controller), the NodePool template hash,
the NodePool requirements, the AKSNodeClass hash, the Kubernetes version, then the node image. Hashes
(`core.api.hashes`) are compared only when both sides carry one of the same hash version, so that a new hash
version does not drift every node at once; the message names the fields that changed when the NodeClaim
recorded them. The target Kubernetes version and node images come from the AKSNodeClass
status, unless the caller passes newer ones in `DriftInputs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.hashes import HashStamp, changed_fields, is_hash_drifted, nodeclass_stamp, nodepool_stamp
from core.api.kube import Node
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import NodePool
from core.scheduling.requirements import Requirements

NODECLASS_HASH = labels.NODECLASS_HASH
NODECLASS_HASH_VERSION = labels.NODECLASS_HASH_VERSION


class DriftReason(StrEnum):
    NODEPOOL_DRIFTED = "NodePoolDrifted"
    REQUIREMENTS_DRIFTED = "RequirementsDrifted"
    NODECLASS_DRIFTED = "NodeClassDrift"
    KUBERNETES_VERSION = "K8sVersionDrift"
    IMAGE = "ImageDrift"


@dataclass(frozen=True, slots=True)
class DriftInputs:
    """What the cluster should run now, when it is newer than the AKSNodeClass status says."""

    kubernetes_version: str | None = None
    """The control plane's version ("1.31.2"); nodes whose kubelet differs are drifted."""
    node_images: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per AKSNodeClass name, the image IDs nodes should run; a NodeClaim on another image is drifted."""


@dataclass(frozen=True, slots=True)
class Drift:
    reason: str
    message: str


def _hash_drift(
    owner: str,
    part: str,
    annotations: Mapping[str, str],
    claim: NodeClaim,
    keys: tuple[str, str],
    stamp: Callable[[], HashStamp],
) -> str | None:
    """Why the owner's hash annotation (`keys`: hash and version) no longer matches the NodeClaim's, naming the
    changed fields when the NodeClaim recorded them (against the owner's `stamp` as it is now); None when it
    matches."""
    have = claim.metadata.annotations
    hash_key, version_key = keys
    if not is_hash_drifted(annotations, have, hash_key, version_key):
        return None
    hashes = f"{hash_key} {have[hash_key]} -> {annotations[hash_key]}"
    fields = changed_fields(have, stamp())
    if fields:
        return f"{owner} {part} changed: {', '.join(fields)} ({hashes})"
    return f"{owner} changed since the node was launched ({hashes})"


def _version(text: str) -> str:
    return text.strip().removeprefix("v")


def detect_drift(
    claim: NodeClaim,
    node: Node | None,
    pool: NodePool,
    nodeclass: AKSNodeClass | None,
    inputs: DriftInputs,
    recorded: bool = True,
) -> Drift | None:
    """The first reason the node no longer matches its NodePool and AKSNodeClass, or None. With `recorded`,
    a NodeClaim marked Drifted is drifted for the reason it records (the detail computed here when it is the
    same reason); without, only what is computed here counts (what the Drifted condition is written from)."""
    found = _compute_drift(claim, node, pool, nodeclass, inputs)
    condition = claim.status.condition(NodeClaimConditionType.DRIFTED)
    if not recorded or condition is None or condition.status != "True":
        return found
    if found is not None and found.reason == condition.reason:
        return found
    return Drift(condition.reason or "Drifted", condition.message or "the NodeClaim is marked Drifted")


def _compute_drift(
    claim: NodeClaim,
    node: Node | None,
    pool: NodePool,
    nodeclass: AKSNodeClass | None,
    inputs: DriftInputs,
) -> Drift | None:
    message = _hash_drift(
        f"NodePool {pool.name}",
        "template",
        pool.metadata.annotations,
        claim,
        (labels.NODEPOOL_HASH, labels.NODEPOOL_HASH_VERSION),
        partial(nodepool_stamp, pool),
    )
    if message is not None:
        return Drift(DriftReason.NODEPOOL_DRIFTED, message)
    # Karpenter checks the template's requirements alone: its labels are in the hash.
    node_labels = node.metadata.labels if node is not None else {}
    current = Requirements.from_labels({**node_labels, **claim.labels})
    problem = current.compatible(pool.spec.template.spec.requirement_set(), frozenset())
    if problem is not None:
        return Drift(
            DriftReason.REQUIREMENTS_DRIFTED, f"node labels no longer satisfy NodePool {pool.name}: {problem}"
        )
    if nodeclass is not None:
        message = _hash_drift(
            f"AKSNodeClass {nodeclass.name}",
            "spec",
            nodeclass.metadata.annotations,
            claim,
            (NODECLASS_HASH, NODECLASS_HASH_VERSION),
            partial(nodeclass_stamp, nodeclass),
        )
        if message is not None:
            return Drift(DriftReason.NODECLASS_DRIFTED, message)
    target = inputs.kubernetes_version or (nodeclass.status.kubernetes_version if nodeclass else None)
    running = node.status.node_info.kubelet_version if node is not None else None
    if target and running and _version(target) != _version(running):
        return Drift(
            DriftReason.KUBERNETES_VERSION,
            f"node runs Kubernetes {_version(running)}, the cluster is at {_version(target)}",
        )
    nodeclass_name = claim.node_class_ref.name
    images = inputs.node_images.get(nodeclass_name)
    if images is None and nodeclass is not None:
        images = frozenset(image.id for image in nodeclass.status.images)
    image = claim.status.image_id
    if images and image and image not in images:
        return Drift(
            DriftReason.IMAGE,
            f"node image {image} is not among the current images of AKSNodeClass {nodeclass_name}",
        )
    return None
