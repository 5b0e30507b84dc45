"""The static-drift hashes: what a NodePool template and an AKSNodeClass spec looked like when a node launched.

Karpenter hashes a NodePool's `spec.template` without its requirements (they drift on their own, by label
compatibility), and the AKS provider hashes an AKSNodeClass's `spec` without its tags (applied in place). The
hash and its version are annotations on the NodePool and the AKSNodeClass, and every NodeClaim carries the values
of its creation; a NodeClaim whose hash differs from its owner's, at the same hash version, is drifted. A new hash
version (the hashing itself changed) re-stamps the NodeClaims instead of drifting them all.

Like Karpenter's (hashstructure with SlicesAsSets, IgnoreZeroValue, ZeroNil), the hash ignores list order and
empty or unset fields, so re-applying the same manifest, or one that spells an empty field out, drifts nothing.
The values differ from Karpenter's: the same fields go in, not the same bytes.

Each NodeClaim also records one short digest per hashed field (`nodewright.io/*-hash-fields`), so that a drift
can name the field that changed ("spec.template.metadata.labels") instead of only two hash values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.nodepool import NodePool

NODEPOOL_HASH_VERSION = "v3"
"""Karpenter's `NodePoolHashVersion`: bump it when the hashing changes, so nodes are re-stamped, not replaced."""
NODECLASS_HASH_VERSION = "v3"
"""The AKS provider's `AKSNodeClassHashVersion`."""
NODEPOOL_HASH_FIELDS = "nodewright.io/nodepool-hash-fields"
"""On NodeClaims: a digest per hashed NodePool template field, as `field:digest,field:digest`."""
NODECLASS_HASH_FIELDS = "nodewright.io/aksnodeclass-hash-fields"
"""On NodeClaims: a digest per hashed AKSNodeClass spec field."""

_IGNORED_TEMPLATE_FIELDS = frozenset({"requirements"})
"""Karpenter's `hash:"ignore"` in the NodePool template: requirements drift by compatibility instead."""
_IGNORED_NODECLASS_FIELDS = frozenset({"tags"})
"""The AKS provider's `hash:"ignore"`: tags are applied to running VMs in place."""


def _is_zero(value: Any) -> bool:
    return value is None or (isinstance(value, str | dict | list) and not value)


def _canonical(value: Any) -> Any:
    """The value with unset and empty fields left out and lists turned into sorted sets (JSON-serializable)."""
    if isinstance(value, dict):
        kept = {key: _canonical(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if not _is_zero(item)}
    if isinstance(value, list):
        items = (_canonical(item) for item in value)
        return sorted({_encode(item) for item in items if not _is_zero(item)})
    return value


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _digest(value: Any, size: int) -> bytes:
    return hashlib.blake2b(_encode(value).encode(), digest_size=size).digest()


@dataclass(frozen=True, slots=True)
class HashStamp:
    """An owner's (NodePool's or AKSNodeClass's) current hash, its version, and a digest per hashed field."""

    hash_key: str
    version_key: str
    fields_key: str
    hash: str
    version: str
    fields: Mapping[str, str]
    """Field path (as the manifest spells it, e.g. `spec.template.spec.taints`) to a short digest; unset and
    empty fields are left out."""

    def owner_annotations(self) -> dict[str, str]:
        """The annotations the owner carries: the hash and its version."""
        return {self.hash_key: self.hash, self.version_key: self.version}

    def nodeclaim_annotations(self) -> dict[str, str]:
        """The annotations a NodeClaim gets at creation: the owner's, plus the per-field record."""
        return {**self.owner_annotations(), self.fields_key: format_fields(self.fields)}


def _stamp(
    hash_key: str, version_key: str, fields_key: str, version: str, hashed: Mapping[str, Any]
) -> HashStamp:
    """The stamp of `hashed`, a mapping from field path to the field's value."""
    canonical = {path: value for path, value in _canonical(dict(hashed)).items() if not _is_zero(value)}
    fields = {path: _digest(value, 4).hex() for path, value in canonical.items()}
    digest = str(int.from_bytes(_digest(canonical, 8), "big"))
    return HashStamp(hash_key, version_key, fields_key, digest, version, fields)


def nodepool_stamp(pool: NodePool) -> HashStamp:
    """The NodePool's static-drift hash: `spec.template` (labels, annotations, taints, startupTaints,
    nodeClassRef, expireAfter, terminationGracePeriod), requirements left out; disruption, limits, weight and
    replicas are outside the template and never drift a node."""
    template = pool.spec.template.model_dump(mode="json", by_alias=True)
    hashed = {
        f"spec.template.{section}.{field}": value
        for section in ("metadata", "spec")
        for field, value in template[section].items()
        if not (section == "spec" and field in _IGNORED_TEMPLATE_FIELDS)
    }
    return _stamp(
        labels.NODEPOOL_HASH,
        labels.NODEPOOL_HASH_VERSION,
        NODEPOOL_HASH_FIELDS,
        NODEPOOL_HASH_VERSION,
        hashed,
    )


def nodeclass_stamp(nodeclass: AKSNodeClass) -> HashStamp:
    """The AKSNodeClass's static-drift hash: its whole `spec` but `tags`."""
    spec = nodeclass.spec.model_dump(mode="json", by_alias=True)
    hashed = {
        f"spec.{field}": value for field, value in spec.items() if field not in _IGNORED_NODECLASS_FIELDS
    }
    return _stamp(
        labels.NODECLASS_HASH,
        labels.NODECLASS_HASH_VERSION,
        NODECLASS_HASH_FIELDS,
        NODECLASS_HASH_VERSION,
        hashed,
    )


def nodeclaim_hash_annotations(pool: NodePool | None, nodeclass: AKSNodeClass | None) -> dict[str, str]:
    """What a new NodeClaim carries so that a later change to its NodePool or AKSNodeClass drifts it."""
    annotations = nodepool_stamp(pool).nodeclaim_annotations() if pool else {}
    if nodeclass is not None:
        annotations.update(nodeclass_stamp(nodeclass).nodeclaim_annotations())
    return annotations


def format_fields(fields: Mapping[str, str]) -> str:
    """`field:digest,...`, sorted by field."""
    return ",".join(f"{field}:{digest}" for field, digest in sorted(fields.items()))


def parse_fields(text: str) -> dict[str, str]:
    """The inverse of `format_fields`; malformed entries are skipped (the record only explains a drift)."""
    pairs = (entry.rpartition(":") for entry in text.split(",") if entry)
    return {field: digest for field, sep, digest in pairs if sep and field}


def changed_fields(claim_annotations: Mapping[str, str], stamp: HashStamp) -> tuple[str, ...]:
    """The hashed fields whose value differs from the one the NodeClaim was stamped with (set, changed or
    cleared), sorted; empty when the NodeClaim has no record of the same hash version to compare with."""
    recorded = claim_annotations.get(stamp.fields_key)
    if recorded is None or claim_annotations.get(stamp.version_key) != stamp.version:
        return ()
    before = parse_fields(recorded)
    return tuple(
        sorted(
            field
            for field in before.keys() | stamp.fields.keys()
            if before.get(field) != stamp.fields.get(field)
        )
    )


def is_hash_drifted(
    owner_annotations: Mapping[str, str],
    claim_annotations: Mapping[str, str],
    hash_key: str,
    version_key: str,
) -> bool:
    """Karpenter's static drift test: both sides carry a hash and a hash version, the versions are equal and
    the hashes are not. A NodeClaim of another hash version is not drifted (it waits to be re-stamped)."""
    keys = (hash_key, version_key)
    found = [side.get(key) for side in (owner_annotations, claim_annotations) for key in keys]
    if any(value is None for value in found):
        return False
    owner_hash, owner_version, claim_hash, claim_version = found
    return owner_version == claim_version and owner_hash != claim_hash


def restamp_annotations(
    claim_annotations: Mapping[str, str],
    owner_annotations: Mapping[str, str],
    stamp: HashStamp,
    drifted_condition: bool,
) -> dict[str, str]:
    """What to patch on a NodeClaim when its owner was stamped by another hash version (nothing otherwise).

    As Karpenter's hash controllers do: the NodeClaim gets the current version and, unless it is already
    drifted, the current hash (and field record), so the change of hashing drifts no node. A NodeClaim already
    drifted (its Drifted condition, or a hash that differed from its owner's at the old version) keeps its
    hash, and so stays drifted."""
    if owner_annotations.get(stamp.version_key) == stamp.version:
        return {}
    if claim_annotations.get(stamp.version_key) == stamp.version:
        return {}
    patch = {stamp.version_key: stamp.version}
    if not drifted_condition and not is_hash_drifted(
        owner_annotations, claim_annotations, stamp.hash_key, stamp.version_key
    ):
        patch[stamp.hash_key] = stamp.hash
        patch[stamp.fields_key] = format_fields(stamp.fields)
    return patch
