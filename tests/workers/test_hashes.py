"""The hash controllers: they write only when the hash changed, re-stamp NodeClaims only on a new hash version,
and a bad object or a failed write is logged, never raised to the controller."""

from __future__ import annotations

from typing import Any

import pytest

from core import labels
from core.api.hashes import nodepool_stamp
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.errors import TransientError
from workers.controller.hashes import reconcile_hash

POOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [],
            }
        }
    },
}


def claim(name: str, annotations: dict[str, str]) -> NodeClaim:
    return NodeClaim.parse(
        {
            "metadata": {"name": name, "labels": {labels.NODEPOOL: "default"}, "annotations": annotations},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            },
        }
    )


class FakeCluster:
    def __init__(self, claims: list[NodeClaim], fail: bool = False) -> None:
        self.claims = claims
        self.raw: list[dict[str, Any]] = []
        """NodeClaims as listed that the models refuse."""
        self.fail = fail
        self.annotated: list[tuple[str, str, dict[str, str]]] = []
        self.patched: list[tuple[str, dict[str, str]]] = []

    async def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> bool:
        if self.fail:
            raise TransientError("the API server is away")
        self.annotated.append((kind, name, annotations))
        return True

    async def list_objects(self, kind: str) -> list[dict[str, Any]]:
        assert kind == "NodeClaim"
        return [
            claim.model_dump(mode="json", by_alias=True, exclude_none=True) for claim in self.claims
        ] + self.raw

    async def patch_nodeclaim_metadata(self, name: str, annotations: dict[str, str]) -> None:
        self.patched.append((name, annotations))


STAMP = nodepool_stamp(NodePool.parse(POOL))


async def test_a_new_pool_is_stamped_and_its_unstamped_nodeclaims_with_it() -> None:
    cluster = FakeCluster([claim("default-a", {})])
    assert await reconcile_hash(cluster, "NodePool", POOL)  # type: ignore[arg-type]
    assert cluster.annotated == [("NodePool", "default", STAMP.owner_annotations())]
    assert cluster.patched == [("default-a", STAMP.nodeclaim_annotations())]


async def test_a_stamped_pool_is_left_alone_and_an_edited_one_restamped_without_its_nodeclaims() -> None:
    stamped = {**POOL, "metadata": {"name": "default", "annotations": STAMP.owner_annotations()}}
    cluster = FakeCluster([claim("default-a", STAMP.nodeclaim_annotations())])
    assert not await reconcile_hash(cluster, "NodePool", stamped)  # type: ignore[arg-type]
    edited = {**stamped, "spec": {**POOL["spec"], "weight": 10}}
    assert not await reconcile_hash(cluster, "NodePool", edited)  # type: ignore[arg-type]
    labelled = {
        **stamped,
        "spec": {"template": {**POOL["spec"]["template"], "metadata": {"labels": {"tier": "gold"}}}},
    }
    assert await reconcile_hash(cluster, "NodePool", labelled)  # type: ignore[arg-type]
    assert cluster.annotated[0][2][labels.NODEPOOL_HASH] != STAMP.hash
    assert cluster.patched == []


@pytest.mark.parametrize("manifest", [{**POOL, "spec": {"template": {"spec": {}}}}, POOL])
async def test_a_bad_object_or_a_failed_write_is_logged_not_raised(
    manifest: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = FakeCluster([], fail=True)
    assert not await reconcile_hash(cluster, "NodePool", manifest)  # type: ignore[arg-type]
    assert "could not stamp the drift hash of NodePool default" in caplog.text


async def test_a_nodeclaim_the_models_refuse_leaves_the_others_restamped() -> None:
    """Found by the fuzz benchmark: one NodeClaim with an over-long terminationGracePeriod (the API server takes
    it) made every NodePool's and AKSNodeClass's stamp fail."""
    cluster = FakeCluster([claim("default-a", {})])
    unreadable = claim("default-b", {}).model_dump(mode="json", by_alias=True, exclude_none=True)
    unreadable["spec"]["terminationGracePeriod"] = "9999999999h"
    cluster.raw.append(unreadable)

    assert await reconcile_hash(cluster, "NodePool", POOL)  # type: ignore[arg-type]
    assert cluster.patched == [("default-a", STAMP.nodeclaim_annotations())]
