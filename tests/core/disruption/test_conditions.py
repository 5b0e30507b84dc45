"""The Drifted and Consolidatable conditions the disruption loop keeps on NodeClaims, as Karpenter's nodeclaim
disruption controller does: set with Karpenter's reasons while they hold, removed once they do not."""

from __future__ import annotations

from datetime import datetime, timedelta

from core import labels as wk
from core.api.manifests import Manifests
from core.api.nodepool import StatusCondition
from core.disruption.conditions import disruption_conditions
from core.disruption.drift import DriftInputs
from tests.core.disruption.fixtures import LAUNCHED, NOW, cluster, node_pair, nodepool

OLD_HASH = {wk.NODEPOOL_HASH: "1111", wk.NODEPOOL_HASH_VERSION: "v3"}
NEW_HASH = {wk.NODEPOOL_HASH: "2222", wk.NODEPOOL_HASH_VERSION: "v3"}


def changes(snapshot: Manifests, now: datetime = NOW) -> dict[tuple[str, str], tuple[str | None, str]]:
    return {
        (c.nodeclaim, c.type.value): (c.reason, c.message)
        for c in disruption_conditions(snapshot, DriftInputs(), now)
    }


def test_a_drifted_nodeclaim_is_marked_with_karpenters_reason_and_an_idle_one_consolidatable() -> None:
    pool = nodepool(annotations=NEW_HASH)
    found = changes(cluster([pool], [node_pair("a", claim_annotations=OLD_HASH), node_pair("b")]))
    assert found == {
        ("claim-a", "Drifted"): ("NodePoolDrifted", "NodePoolDrifted"),
        ("claim-a", "Consolidatable"): ("Consolidatable", ""),
        ("claim-b", "Consolidatable"): ("Consolidatable", ""),
    }


def test_conditions_that_no_longer_hold_are_removed_and_those_that_do_are_left_alone() -> None:
    pool = nodepool(consolidate_after="Never")
    claim, node = node_pair("a", drifted="NodePoolDrifted")  # the hash no longer differs
    claim.status.conditions.append(
        StatusCondition(type="Consolidatable", status="True", reason="Consolidatable")
    )
    assert changes(cluster([pool], [(claim, node)])) == {
        ("claim-a", "Drifted"): (None, ""),
        ("claim-a", "Consolidatable"): (None, ""),
    }
    drifted, node = node_pair("b", claim_annotations=OLD_HASH)
    drifted.status.conditions.append(
        StatusCondition(type="Drifted", status="True", reason="NodePoolDrifted", message="NodePoolDrifted")
    )
    assert (
        changes(cluster([nodepool(annotations=NEW_HASH, consolidate_after="Never")], [(drifted, node)])) == {}
    )


def test_consolidatable_waits_for_consolidate_after_since_initialization() -> None:
    pool = nodepool(consolidate_after="2h")
    snapshot = cluster([pool], [node_pair("a"), node_pair("young", initialized=False)])
    # Initialized a day ago (LAUNCHED): 2h have passed; the uninitialized one never is.
    assert changes(snapshot) == {("claim-a", "Consolidatable"): ("Consolidatable", "")}
    assert changes(snapshot, LAUNCHED + timedelta(hours=1)) == {}


def test_deleting_nodeclaims_and_static_pools_are_left_alone() -> None:
    deleting = node_pair("gone", deleting=True, claim_annotations=OLD_HASH)
    assert changes(cluster([nodepool(annotations=NEW_HASH)], [deleting])) == {}
    static = changes(cluster([nodepool(replicas=1)], [node_pair("s")]))
    assert ("claim-s", "Consolidatable") not in static


def test_a_launched_nodeclaim_whose_node_has_not_registered_is_not_marked_drifted() -> None:
    # Its own labels are a few (the NodePool's and the launch's); the NodePool requires more (sku family, os).
    pool = nodepool(
        requirements=[{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}]
    )
    claim, node = node_pair("new", node_labels={"karpenter.azure.com/sku-family": "D"})
    claim.metadata.labels.pop("karpenter.azure.com/sku-family", None)
    claim.status.node_name = None
    found = changes(cluster([pool], [(claim, node)]))
    assert ("claim-new", "Drifted") not in found
    claim.status.node_name = node.metadata.name  # registered: its Node's labels count too
    assert ("claim-new", "Drifted") not in changes(cluster([pool], [(claim, node)]))
