"""What provisioning sees of a cluster: a Node being deleted (its NodeClaim has a deletion timestamp) is no
capacity, and the pods that must leave it are pending, as Karpenter's provisioner counts them, so that their new
capacity launches while the node drains; DaemonSet pods, finished pods and pods already terminating are not."""

from __future__ import annotations

from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Pod
from core.scheduling.snapshot import build_snapshot, fixed_provider, nodeclass_settings
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
