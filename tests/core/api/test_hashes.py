"""Static-drift hashes: which NodePool template and AKSNodeClass spec fields are hashed, which are left out,
stability under changes that mean nothing, and the re-stamp a new hash version asks for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.hashes import (
    NODECLASS_HASH_FIELDS,
    NODEPOOL_HASH_FIELDS,
    NODEPOOL_HASH_VERSION,
    changed_fields,
    format_fields,
    is_hash_drifted,
    nodeclaim_hash_annotations,
    nodeclass_stamp,
    nodepool_stamp,
    parse_fields,
    restamp_annotations,
)
from core.api.nodepool import NodePool

SUBNET = (
    "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
)


def pool_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "web"}, "annotations": {"example.com/owner": "web"}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]},
                        {"key": labels.ARCH, "operator": "In", "values": ["amd64"]},
                    ],
                    "taints": [
                        {"key": "a", "value": "1", "effect": "NoSchedule"},
                        {"key": "b", "effect": "NoExecute"},
                    ],
                    "expireAfter": "720h",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
        },
    }


def pool(manifest: dict[str, Any] | None = None) -> NodePool:
    return NodePool.parse(manifest or pool_manifest())


def edited(path: str, value: Any, manifest: dict[str, Any] | None = None) -> NodePool:
    """The NodePool with the field at the dotted `path` set to `value` (None removes it)."""
    changed = copy.deepcopy(manifest or pool_manifest())
    *parents, last = path.split(".")
    target = changed
    for part in parents:
        target = target.setdefault(part, {})
    if value is None:
        target.pop(last, None)
    else:
        target[last] = value
    return NodePool.parse(changed)


def nodeclass(**spec: Any) -> AKSNodeClass:
    return AKSNodeClass.model_validate({"metadata": {"name": "default"}, "spec": spec})


BASE = nodepool_stamp(pool())


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.template.metadata.labels", {"team": "web", "tier": "gold"}),
        ("spec.template.metadata.annotations", {"example.com/owner": "api"}),
        ("spec.template.spec.taints", [{"key": "a", "value": "2", "effect": "NoSchedule"}]),
        ("spec.template.spec.startupTaints", [{"key": "c", "effect": "NoSchedule"}]),
        ("spec.template.spec.expireAfter", "24h"),
        ("spec.template.spec.terminationGracePeriod", "1h"),
        (
            "spec.template.spec.nodeClassRef",
            {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "other"},
        ),
    ],
)
def test_every_hashed_template_field_changes_the_hash_and_is_named(path: str, value: Any) -> None:
    stamp = nodepool_stamp(edited(path, value))
    assert stamp.hash != BASE.hash
    claim = nodeclaim_hash_annotations(pool(), None)
    assert changed_fields(claim, stamp) == (path,)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.template.spec.requirements", [{"key": labels.ARCH, "operator": "In", "values": ["arm64"]}]),
        ("spec.disruption", {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h"}),
        ("spec.disruption.budgets", [{"nodes": "0"}]),
        ("spec.limits", {"cpu": "100"}),
        ("spec.weight", 50),
        ("metadata.labels", {"unrelated": "yes"}),
        ("metadata.annotations", {labels.NODEPOOL_HASH: "123"}),
    ],
)
def test_fields_outside_the_hash_leave_it_alone(path: str, value: Any) -> None:
    assert nodepool_stamp(edited(path, value)) == BASE


def test_order_and_spelled_out_empty_fields_do_not_change_the_hash() -> None:
    manifest = pool_manifest()
    template = manifest["spec"]["template"]
    template["spec"]["taints"].reverse()
    template["spec"]["startupTaints"] = []
    template["metadata"]["labels"] = {"team": "web"}
    assert nodepool_stamp(pool(manifest)) == BASE
    # expireAfter has a default: leaving it out is the same as spelling the default.
    assert nodepool_stamp(edited("spec.template.spec.expireAfter", None)) == BASE


def test_removing_a_field_is_a_change() -> None:
    stamp = nodepool_stamp(edited("spec.template.metadata.annotations", None))
    assert stamp.hash != BASE.hash
    assert changed_fields(BASE.nodeclaim_annotations(), stamp) == ("spec.template.metadata.annotations",)


def test_the_owner_carries_the_hash_and_karpenters_version() -> None:
    assert BASE.owner_annotations() == {
        labels.NODEPOOL_HASH: BASE.hash,
        labels.NODEPOOL_HASH_VERSION: "v3",
    }
    assert BASE.hash.isdigit()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("osDiskSizeGB", 64),
        ("vnetSubnetID", SUBNET),
        ("imageFamily", "AzureLinux"),
        ("maxPods", 50),
        ("kubelet", {"cpuManagerPolicy": "static"}),
        ("security", {"encryptionAtHost": True}),
    ],
)
def test_every_nodeclass_spec_field_but_tags_changes_its_hash(field: str, value: Any) -> None:
    before = nodeclass()
    after = nodeclass(**{field: value})
    assert nodeclass_stamp(after).hash != nodeclass_stamp(before).hash
    claim = nodeclaim_hash_annotations(None, before)
    assert changed_fields(claim, nodeclass_stamp(after)) == (f"spec.{field}",)


def test_nodeclass_tags_and_spelled_out_defaults_leave_the_hash_alone() -> None:
    base = nodeclass_stamp(nodeclass())
    assert nodeclass_stamp(nodeclass(tags={"team": "web"})) == base
    assert nodeclass_stamp(nodeclass(osDiskSizeGB=128, imageFamily="Ubuntu")) == base


def test_a_nodeclaim_gets_both_stamps_and_their_field_records() -> None:
    annotations = nodeclaim_hash_annotations(pool(), nodeclass())
    assert annotations[labels.NODEPOOL_HASH] == BASE.hash
    assert annotations[labels.NODECLASS_HASH] == nodeclass_stamp(nodeclass()).hash
    assert annotations[labels.NODECLASS_HASH_VERSION] == "v3"
    assert parse_fields(annotations[NODEPOOL_HASH_FIELDS]) == BASE.fields
    assert "spec.osDiskSizeGB" in parse_fields(annotations[NODECLASS_HASH_FIELDS])
    assert nodeclaim_hash_annotations(None, None) == {}


def test_field_records_round_trip_and_skip_what_they_cannot_read() -> None:
    assert parse_fields(format_fields(BASE.fields)) == BASE.fields
    assert parse_fields("garbage,,a.b:12") == {"a.b": "12"}


def test_no_record_or_another_version_names_nothing() -> None:
    changed = nodepool_stamp(edited("spec.template.metadata.labels", {}))
    assert changed_fields({}, changed) == ()
    old = {**BASE.nodeclaim_annotations(), labels.NODEPOOL_HASH_VERSION: "v2"}
    assert changed_fields(old, changed) == ()


def hashes(value: str, version: str) -> dict[str, str]:
    return {labels.NODEPOOL_HASH: value, labels.NODEPOOL_HASH_VERSION: version}


def test_drift_needs_both_hashes_of_the_same_version() -> None:
    keys = (labels.NODEPOOL_HASH, labels.NODEPOOL_HASH_VERSION)
    assert is_hash_drifted(hashes("1", "v3"), hashes("2", "v3"), *keys)
    assert not is_hash_drifted(hashes("1", "v3"), hashes("1", "v3"), *keys)
    assert not is_hash_drifted(hashes("1", "v4"), hashes("2", "v3"), *keys)
    assert not is_hash_drifted(hashes("1", "v3"), {labels.NODEPOOL_HASH: "2"}, *keys)
    assert not is_hash_drifted({}, hashes("2", "v3"), *keys)


def test_a_new_hash_version_restamps_nodeclaims_instead_of_drifting_them() -> None:
    owner = hashes("old-pool", "v2")
    in_step = hashes("old-pool", "v2")
    patch = restamp_annotations(in_step, owner, BASE, drifted_condition=False)
    assert patch == {
        labels.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION,
        labels.NODEPOOL_HASH: BASE.hash,
        NODEPOOL_HASH_FIELDS: format_fields(BASE.fields),
    }
    restamped = {**in_step, **patch}
    assert not is_hash_drifted(
        BASE.owner_annotations(), restamped, labels.NODEPOOL_HASH, labels.NODEPOOL_HASH_VERSION
    )


def test_a_restamp_keeps_a_drifted_nodeclaim_drifted() -> None:
    owner = hashes("old-pool", "v2")
    for claim, condition in ((hashes("older", "v2"), False), (hashes("old-pool", "v2"), True)):
        patch = restamp_annotations(claim, owner, BASE, drifted_condition=condition)
        assert patch == {labels.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION}
        restamped = {**claim, **patch}
        assert is_hash_drifted(
            BASE.owner_annotations(), restamped, labels.NODEPOOL_HASH, labels.NODEPOOL_HASH_VERSION
        )


def test_no_restamp_when_the_owner_is_already_at_the_current_version() -> None:
    assert (
        restamp_annotations(hashes("old", "v3"), BASE.owner_annotations(), BASE, drifted_condition=False)
        == {}
    )
    current = BASE.nodeclaim_annotations()
    assert restamp_annotations(current, hashes("x", "v2"), BASE, drifted_condition=False) == {}


def test_a_nodeclaim_from_before_hashing_is_stamped_when_its_owner_first_is() -> None:
    patch = restamp_annotations({}, {}, BASE, drifted_condition=False)
    assert patch[labels.NODEPOOL_HASH] == BASE.hash
    assert patch[labels.NODEPOOL_HASH_VERSION] == "v3"
