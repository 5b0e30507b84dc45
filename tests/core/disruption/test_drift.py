"""Drift: nodes that no longer match their NodePool or AKSNodeClass are replaced, one at a time, within the
`Drifted` budgets and the PDBs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from core import labels as wk
from core.api.aksnodeclass import AKSNodeClass
from core.api.hashes import nodeclaim_hash_annotations, nodeclass_stamp, nodepool_stamp
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaimConditionType
from core.disruption.commands import BlockReason, Decision, Method
from core.disruption.conditions import disruption_conditions
from core.disruption.drift import NODECLASS_HASH, NODECLASS_HASH_VERSION, DriftInputs
from tests.core.disruption.fixtures import (
    NOW,
    blocked,
    bound,
    catalog_type,
    cluster,
    codes,
    disrupted,
    messages,
    node_pair,
    nodepool,
    pdb,
    plan,
)

OLD_HASH = {wk.NODEPOOL_HASH: "1111", wk.NODEPOOL_HASH_VERSION: "v3"}
NEW_HASH = {wk.NODEPOOL_HASH: "2222", wk.NODEPOOL_HASH_VERSION: "v3"}
SMALL = catalog_type(4, 8)
SMALL_ALLOCATABLE = {"cpu": "3900m", "memory": "7Gi", "pods": "100"}


def busy(name: str, **options: Any) -> tuple[Any, Any]:
    """A small node whose one pod (3 CPUs) leaves no room for another node's pod."""
    return node_pair(name, SMALL, allocatable=SMALL_ALLOCATABLE, **options)


def heavy(node: str, app: str = "web") -> Any:
    return bound(node, f"{app}-{node}", app=app, cpu="3")


def drift_methods(result: Any) -> list[Method]:
    return [command.method for command in result.commands]


def with_nodeclass(snapshot: Manifests, **fields: Any) -> Manifests:
    snapshot.nodeclasses.append(AKSNodeClass.model_validate({"metadata": {"name": "default"}, **fields}))
    return snapshot


def test_a_nodepool_hash_change_replaces_the_node_before_pods_move() -> None:
    pool = nodepool(annotations=NEW_HASH)
    result = plan(cluster([pool], [busy("a", claim_annotations=OLD_HASH)], [heavy("a")]))
    [command] = result.commands
    assert (command.method, command.reason, command.decision) == (Method.DRIFT, "Drifted", Decision.REPLACE)
    [replacement] = command.replacements
    assert [(move.pod, move.destination) for move in command.pods_moved] == [
        ("default/web-a", replacement.name)
    ]
    assert command.candidates[0].detail == (
        f"NodePoolDrifted: NodePool default changed since the node was launched ({wk.NODEPOOL_HASH} 1111 -> 2222)"
    )
    assert command.log_line().startswith("disrupting via drift replace, terminating 1 nodes (1 pods) a/")


def test_hashes_of_different_versions_do_not_drift() -> None:
    pool = nodepool(annotations={wk.NODEPOOL_HASH: "2222", wk.NODEPOOL_HASH_VERSION: "v4"})
    result = plan(
        cluster([pool], [busy("a", claim_annotations=OLD_HASH)], [heavy("a")]), methods={Method.DRIFT}
    )
    assert result.commands == ()


def test_requirements_a_node_no_longer_satisfies_drift_it() -> None:
    pool = nodepool(requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}])
    result = plan(cluster([pool], [busy("a")], [heavy("a")]), methods={Method.DRIFT})
    [command] = result.commands
    assert command.candidates[0].detail is not None
    assert command.candidates[0].detail.startswith(
        "RequirementsDrifted: node labels no longer satisfy NodePool default"
    )
    assert command.replacements[0].capacity_types == ("spot",)


def test_a_new_kubernetes_version_drifts_older_kubelets() -> None:
    pairs = [busy("old", kubelet_version="v1.30.4"), busy("current", kubelet_version="v1.31.1")]
    result = plan(
        cluster([nodepool()], pairs, [heavy("old"), heavy("current", app="api")]),
        methods={Method.DRIFT},
        drift=DriftInputs(kubernetes_version="1.31.1"),
    )
    assert disrupted(result) == [["old"]]
    assert result.commands[0].candidates[0].detail == (
        "K8sVersionDrift: node runs Kubernetes 1.30.4, the cluster is at 1.31.1"
    )


def test_the_aksnodeclass_status_gives_the_version_and_images_unless_inputs_override() -> None:
    pairs = [
        busy("stale-image", image_id="image-2024.05"),
        busy("fresh-image", image_id="image-2024.06"),
        busy("old-kubelet", kubelet_version="1.30.0", image_id="image-2024.06"),
    ]
    pods = [heavy("stale-image"), heavy("fresh-image", app="api"), heavy("old-kubelet", app="db")]
    snapshot = with_nodeclass(
        cluster([nodepool()], pairs, pods),
        status={"kubernetesVersion": "1.31.1", "images": [{"id": "image-2024.06"}]},
    )
    result = plan(snapshot, methods={Method.DRIFT})
    assert sorted(c.candidates[0].node for c in result.commands) == ["old-kubelet", "stale-image"]
    overridden = plan(
        snapshot,
        methods={Method.DRIFT},
        drift=DriftInputs(node_images={"default": frozenset({"image-2024.07"})}),
    )
    assert sorted(c.candidates[0].node for c in overridden.commands) == [
        "fresh-image",
        "old-kubelet",
        "stale-image",
    ]


def test_an_aksnodeclass_hash_change_drifts_its_nodes() -> None:
    claim_hash = {NODECLASS_HASH: "aaa", NODECLASS_HASH_VERSION: "v3"}
    snapshot = with_nodeclass(
        cluster([nodepool()], [busy("a", claim_annotations=claim_hash)], [heavy("a")]),
        metadata={"name": "default", "annotations": {NODECLASS_HASH: "bbb", NODECLASS_HASH_VERSION: "v3"}},
    )
    [command] = plan(snapshot, methods={Method.DRIFT}).commands
    assert command.candidates[0].detail is not None
    assert command.candidates[0].detail.startswith("NodeClassDrift: AKSNodeClass default changed")


def test_a_template_label_added_drifts_nodes_stamped_before_and_names_the_field() -> None:
    before = nodepool()
    stamped = nodeclaim_hash_annotations(before, None)
    after = nodepool()
    after.spec.template.metadata.labels["tier"] = "gold"
    after.metadata.annotations.update(nodepool_stamp(after).owner_annotations())
    pairs = [
        busy("old", claim_annotations=stamped),
        busy("new", claim_annotations=nodeclaim_hash_annotations(after, None)),
    ]
    result = plan(cluster([after], pairs, [heavy("old"), heavy("new", app="api")]), methods={Method.DRIFT})
    assert disrupted(result) == [["old"]]
    assert result.commands[0].candidates[0].detail == (
        "NodePoolDrifted: NodePool default template changed: spec.template.metadata.labels "
        f"({wk.NODEPOOL_HASH} {stamped[wk.NODEPOOL_HASH]} -> {nodepool_stamp(after).hash})"
    )


def test_a_requirement_change_is_not_a_hash_drift() -> None:
    before = nodepool()
    stamped = nodeclaim_hash_annotations(before, None)
    after = nodepool(
        requirements=[{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]}]
    )
    after.metadata.annotations.update(nodepool_stamp(after).owner_annotations())
    result = plan(
        cluster([after], [busy("a", claim_annotations=stamped)], [heavy("a")]), methods={Method.DRIFT}
    )
    assert result.commands == ()


def test_an_aksnodeclass_spec_edit_names_the_field() -> None:
    before = AKSNodeClass.model_validate({"metadata": {"name": "default"}})
    stamped = nodeclaim_hash_annotations(nodepool(), before)
    after = nodeclass_stamp(AKSNodeClass.model_validate({"spec": {"osDiskSizeGB": 64}}))
    snapshot = with_nodeclass(
        cluster([nodepool()], [busy("a", claim_annotations=stamped)], [heavy("a")]),
        metadata={"name": "default", "annotations": after.owner_annotations()},
        spec={"osDiskSizeGB": 64, "tags": {"team": "web"}},
    )
    [command] = plan(snapshot, methods={Method.DRIFT}).commands
    assert command.candidates[0].detail is not None
    assert command.candidates[0].detail.startswith(
        "NodeClassDrift: AKSNodeClass default spec changed: spec.osDiskSizeGB (karpenter.azure.com/aksnodeclass-hash"
    )


def test_empty_drifted_nodes_go_together_and_first() -> None:
    pool = nodepool(annotations=NEW_HASH, consolidate_after="Never")
    pairs = [busy(name, claim_annotations=OLD_HASH) for name in ("busy", "idle-1", "idle-2")]
    result = plan(cluster([pool], pairs, [heavy("busy")]))
    assert disrupted(result) == [["idle-1", "idle-2"], ["busy"]]
    assert [c.decision for c in result.commands] == [Decision.DELETE, Decision.REPLACE]


def test_the_oldest_drift_goes_first_and_the_budget_holds_the_rest() -> None:
    pool = nodepool(annotations=NEW_HASH, budgets=[{"nodes": "1"}])
    pairs = [
        busy("b", claim_annotations=OLD_HASH, drifted="NodePoolDrifted", drifted_at=NOW - timedelta(hours=1)),
        busy("a", claim_annotations=OLD_HASH, drifted="NodePoolDrifted", drifted_at=NOW - timedelta(hours=2)),
    ]
    result = plan(cluster([pool], pairs, [heavy("a"), heavy("b", app="api")]))
    assert disrupted(result) == [["a"]]
    assert codes(result, "b") == [BlockReason.BUDGET, BlockReason.BUDGET]
    assert messages(result, "b")[0] == "budget for reason Drifted allows 1 of 2 nodes and 1 are disrupting"


def test_an_upgrade_replaces_one_node_at_a_time_while_a_pdb_holds_two_replicas() -> None:
    pairs = [busy(name, kubelet_version="1.30.4") for name in ("a", "b", "c")]
    result = plan(
        cluster(
            [nodepool()],
            pairs,
            [heavy(name) for name in ("a", "b", "c")],
            [pdb("web", {"app": "web"}, min_available=2)],
        ),
        drift=DriftInputs(kubernetes_version="1.31.1"),
    )
    assert disrupted(result) == [["a"]]
    for node in ("b", "c"):
        assert blocked(result, node).reasons[0].message == "pdb default/web allows 0 evictions"
        assert blocked(result, node).reasons[0].method is Method.DRIFT


def test_a_node_whose_pods_have_nowhere_to_go_stays() -> None:
    pool = nodepool(annotations=NEW_HASH)
    pinned = bound("a", "pinned", node_selector={"team": "blue"})
    result = plan(
        cluster([pool], [busy("a", claim_annotations=OLD_HASH, node_labels={"team": "blue"})], [pinned])
    )
    assert result.commands == ()
    [reason, *_] = blocked(result, "a").reasons
    assert (reason.code, reason.method) == (BlockReason.PODS_UNSCHEDULABLE, Method.DRIFT)
    assert reason.message.startswith("pod default/pinned cannot be rescheduled: ")


def test_a_termination_grace_period_lets_drift_pass_pods_that_block_eviction() -> None:
    pool = nodepool(annotations=NEW_HASH)
    guarded = bound("a", "guarded", cpu="3", annotations={wk.DO_NOT_DISRUPT: "true"})
    pairs = [busy("a", claim_annotations=OLD_HASH, termination_grace_period="1h")]
    assert disrupted(plan(cluster([pool], pairs, [guarded]))) == [["a"]]
    without = [busy("a", claim_annotations=OLD_HASH)]
    result = plan(cluster([pool], without, [guarded]))
    assert result.commands == ()
    assert messages(result, "a") == ["do-not-disrupt pod default/guarded"]


def test_with_a_termination_grace_period_pods_that_block_eviction_are_not_made_room_for() -> None:
    # Karpenter simulates only the pods that will leave now: the do-not-disrupt pod and the pod behind a
    # PDB that can never allow an eviction (maxUnavailable 0) stay until the grace period ends and are
    # then deleted, so no replacement is launched for them. A PDB that allows no eviction only for now
    # (minAvailable 1 of 1) does not make its pod stay: that pod is simulated like any other.
    pool = nodepool(annotations=NEW_HASH)
    pods = [
        bound("a", "guarded", cpu="1500m", annotations={wk.DO_NOT_DISRUPT: "true"}),
        bound("a", "web-0", app="web", cpu="1500m"),
        bound("a", "db-0", app="db", cpu="200m"),
        bound("a", "plain", app="plain", cpu="500m"),
        heavy("roomy", app="big"),
    ]
    pairs = [
        busy("a", claim_annotations=OLD_HASH, termination_grace_period="1h"),
        busy("roomy", node_annotations={wk.DO_NOT_DISRUPT: "true"}),
    ]
    budgets = [pdb("web", {"app": "web"}, max_unavailable=0), pdb("db", {"app": "db"}, min_available=1)]
    result = plan(cluster([pool], pairs, pods, budgets))
    [command] = result.commands
    assert (command.method, command.decision) == (Method.DRIFT, Decision.DELETE)
    assert sorted((move.pod, move.destination) for move in command.pods_moved) == [
        ("default/db-0", "roomy"),
        ("default/plain", "roomy"),
    ]
    detail = command.candidates[0].detail or ""
    assert "default/guarded" in detail and "default/web-0" in detail and "terminationGracePeriod" in detail


def test_the_drifted_condition_follows_a_template_edit_and_goes_when_it_is_undone() -> None:
    before = nodepool()
    stamped = nodeclaim_hash_annotations(before, None)
    after = nodepool()
    after.spec.template.metadata.labels["tier"] = "gold"
    after.metadata.annotations.update(nodepool_stamp(after).owner_annotations())
    pairs = [
        busy("fresh", claim_annotations=stamped),
        busy("marked", claim_annotations=stamped, drifted="NodePoolDrifted"),
        busy("other-reason", claim_annotations=stamped, drifted="ImageDrift"),
        busy("deleting", claim_annotations=stamped, deleting=True),
    ]

    def drifted(manifests: Manifests) -> dict[str, str | None]:
        changes = disruption_conditions(manifests, DriftInputs(), NOW)
        return {c.nodeclaim: c.reason for c in changes if c.type is NodeClaimConditionType.DRIFTED}

    assert drifted(cluster([after], pairs)) == {
        "claim-fresh": "NodePoolDrifted",
        "claim-marked": "NodePoolDrifted",  # its message becomes the reason, as Karpenter writes it
        "claim-other-reason": "NodePoolDrifted",
    }
    before.metadata.annotations.update(nodepool_stamp(before).owner_annotations())
    assert drifted(cluster([before], pairs)) == {"claim-marked": None, "claim-other-reason": None}
