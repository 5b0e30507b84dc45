"""What provisioning sees of a cluster: a Node being deleted (its NodeClaim has a deletion timestamp) is no
capacity, and the pods that must leave it are pending, as Karpenter's provisioner counts them, so that their new
capacity launches while the node drains; DaemonSet pods, finished pods and pods already terminating are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Pod
from core.api.manifests import Manifests, load_yaml, parse_manifests
from core.api.nodepool import StatusCondition
from core.instancetypes.catalog import load_shipped_catalog
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import azure_provider, build_snapshot, fixed_provider, nodeclass_settings
from tests.builders import configured_nodeclass_spec
from tests.core.disruption.fixtures import NOW, bound, catalog_d, cluster, node_pair, nodepool


def terminating(pod: Pod) -> Pod:
    return pod.model_copy(update={"metadata": pod.metadata.model_copy(update={"deletion_timestamp": NOW})})


def test_the_pods_of_a_deleting_node_are_pending_and_the_node_is_no_capacity() -> None:
    staying, leaving = node_pair("staying"), node_pair("leaving", deleting=True)
    pods = [
        bound("staying", "s-1"),
        bound("leaving", "l-1"),
        bound("leaving", "l-2"),
        bound("leaving", "l-daemon", owner_kind="DaemonSet", owner_name="agent"),
        bound("leaving", "l-done", phase="Succeeded"),
        terminating(bound("leaving", "l-going")),
    ]
    manifests = cluster([nodepool()], [staying, leaving], pods)
    provider = fixed_provider(list(catalog_d()))

    provisioning = build_snapshot(manifests, provider, reschedule_deleting=True)

    assert sorted(pod.metadata.name for pod in provisioning.pending) == ["l-1", "l-2"]
    assert all(pod.spec.node_name is None for pod in provisioning.pending)
    assert provisioning.rescheduled == 2
    assert [node.name for node in provisioning.nodes] == ["staying"]

    # Disruption's planner sees the node as it is (it knows leaving nodes itself).
    planning = build_snapshot(manifests, provider)
    assert planning.pending == [] and planning.rescheduled == 0
    assert sorted(node.name for node in planning.nodes) == ["leaving", "staying"]


def test_fips_and_a_required_localdns_shape_the_instance_types_of_their_nodeclass() -> None:
    nodeclass = AKSNodeClass.parse(
        {"kind": "AKSNodeClass", "metadata": {"name": "configured"}, "spec": configured_nodeclass_spec()}
    )
    settings = nodeclass_settings(nodeclass)
    assert (settings.fips, settings.local_dns, settings.max_pods) == (True, True, 42)
    assert (nodeclass_settings(None).fips, nodeclass_settings(None).local_dns) == (False, False)


# --- sizes no image of the AKSNodeClass boots on ---------------------------------------------------------

EXAMPLES = Path(__file__).parents[3] / "deploy" / "examples"
CATALOG = load_shipped_catalog("eastus")


def example_cluster(arm64_image: bool, pod_yaml: str) -> Manifests:
    """The shipped NodePool (amd64 and arm64, D/E/F families) and AKSNodeClass, with or without its arm64 image,
    and one pending pod."""
    documents = load_yaml((EXAMPLES / "nodepool.yaml").read_text(), "nodepool.yaml")
    for document in documents:
        if document["kind"] == "AKSNodeClass" and not arm64_image:
            document["status"]["images"] = [
                image for image in document["status"]["images"] if "arm64" not in str(image["requirements"])
            ]
    documents.extend(load_yaml(pod_yaml, "pod.yaml"))
    return parse_manifests(documents, "test")


POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def test_sizes_no_status_image_boots_on_are_left_out_of_planning_with_the_reason() -> None:
    snapshot = build_snapshot(example_cluster(False, POD), azure_provider(CATALOG))

    planned = snapshot.instance_types["default"]
    listed = snapshot.listed_instance_types["default"]
    assert {CATALOG.sku(t.name).architecture for t in planned} == {"amd64"}
    assert any(CATALOG.sku(t.name).architecture == "arm64" for t in listed)
    left_out = snapshot.left_out["default"]
    # Only the sizes the NodePool's requirements allow (families D, E and F) are reported.
    assert {CATALOG.sku(name).architecture for name in left_out} == {"arm64"}
    assert all(name.startswith(("Standard_D", "Standard_E", "Standard_F")) for name in left_out)
    assert left_out["Standard_D4ps_v5"] == (
        "AKSNodeClass default: no image in status.images boots on Standard_D4ps_v5 (arm64, Hyper-V generations V2)"
    )
    assert any(
        note.startswith(f"NodePool default: {len(left_out)} instance type(s) left out")
        for note in snapshot.notes
    )


def test_a_pod_allowing_both_architectures_gets_what_boots() -> None:
    def solve(arm64_image: bool) -> str:
        snapshot = build_snapshot(example_cluster(arm64_image, POD), azure_provider(CATALOG))
        results = Scheduler(snapshot.nodepools, snapshot.instance_types).solve(snapshot.pending)
        [claim] = results.nodeclaims
        assert claim.instance_type is not None
        return CATALOG.sku(claim.instance_type).architecture

    assert solve(arm64_image=True) == "arm64"  # the cheapest size when every image is there
    assert solve(arm64_image=False) == "amd64"


def test_a_pod_that_needs_arm64_is_unschedulable_when_no_arm64_image_boots() -> None:
    needs_arm = POD + "  nodeSelector: {kubernetes.io/arch: arm64}\n"
    snapshot = build_snapshot(example_cluster(False, needs_arm), azure_provider(CATALOG))
    results = Scheduler(snapshot.nodepools, snapshot.instance_types).solve(snapshot.pending)
    assert results.nodeclaims == []
    [entry] = results.unschedulable
    assert 'incompatible with nodepool "default"' in entry.reasons[0]


def test_a_nodepool_whose_ready_is_false_is_not_used_for_new_nodes_and_says_why() -> None:
    ready, broken, fresh = nodepool("ready"), nodepool("broken"), nodepool("fresh")
    ready.status.conditions = [StatusCondition(type="Ready", status="True", reason="Ready")]
    broken.status.conditions = [
        StatusCondition(
            type="Ready",
            status="False",
            reason="NodeClassNotReady",
            message="NodeClassReady=False",
        )
    ]
    snapshot = build_snapshot(cluster([ready, broken, fresh], []), fixed_provider(list(catalog_d())))
    assert [pool.name for pool in snapshot.nodepools] == ["ready", "fresh"]  # no status yet: used
    assert "NodePool broken: not Ready (NodeClassNotReady: NodeClassReady=False), not used for new nodes" in (
        snapshot.notes
    )


def launching_claim(name: str, nodepool: str, nodeclass: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": nodepool}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": nodeclass},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_D4s_v5"]}
            ],
        },
    }


def test_a_launching_nodeclaim_counts_the_allocatable_its_own_nodepool_gives_its_size() -> None:
    documents = [
        *load_yaml((EXAMPLES / "nodepool.yaml").read_text(), "nodepool.yaml"),
        *load_yaml((EXAMPLES / "windows.yaml").read_text(), "windows.yaml"),
        launching_claim("default-a1b2c", "default", "default"),
        launching_claim("windows-x7k2p", "windows", "windows"),
    ]
    snapshot = build_snapshot(parse_manifests(documents, "test"), azure_provider(CATALOG))

    nodes = {node.name: node for node in snapshot.nodes}
    for claim, pool in (("default-a1b2c", "default"), ("windows-x7k2p", "windows")):
        [size] = [t for t in snapshot.listed_instance_types[pool] if t.name == "Standard_D4s_v5"]
        assert nodes[claim].allocatable == size.allocatable()
    # A Linux and a Windows node of one size differ (Windows keeps 2 GiB more and has no eviction threshold).
    assert nodes["default-a1b2c"].allocatable != nodes["windows-x7k2p"].allocatable
