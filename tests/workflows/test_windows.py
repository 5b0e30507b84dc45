"""Windows nodes end to end on the real control plane: deploy/examples' Windows deployment gets a node of the
Windows NodePool (a Windows VM made as AKS makes one, whose node agent joins once the bootstrap extension runs and
registers a Windows Node), Linux pods never land there, and a newer Windows node image drifts it: a Windows node
on the new image replaces it."""

from __future__ import annotations

from typing import Any

import yaml

from core import labels
from core.messages import DisruptionInput, DisruptionSettings
from tests.workflows.conftest import FAST, System, deployment, eventually, example_manifests
from workers.demo.disruption import status_images
from workflows.disruption import DisruptionWorkflow, disruption_id

WINDOWS_REPLICAS = 2


def mixed_cluster() -> list[dict[str, Any]]:
    """deploy/examples with the Windows deployment scaled up and no node expiring."""
    documents: list[dict[str, Any]] = list(
        yaml.safe_load_all(example_manifests(windows=True, expireAfter="Never"))
    )
    for document in documents:
        if document["kind"] == "Deployment" and document["metadata"]["name"] == "windows-web":
            document["spec"]["replicas"] = WINDOWS_REPLICAS
    return documents


async def test_windows_pods_get_a_windows_node_linux_pods_do_not_and_a_new_image_drifts_it(
    system: System,
) -> None:
    system.start_controller()
    await system.kube.apply(mixed_cluster())
    await system.kube.apply([deployment("linux-app", 2, cpu="100m")])

    windows_pods = await eventually(
        lambda: system.running("windows-web", WINDOWS_REPLICAS), timeout=90, what="the Windows pods running"
    )
    linux_pods = await eventually(lambda: system.running("linux-app", 2), timeout=60, what="the Linux pods")

    [node_name] = {pod.spec.node_name for pod in windows_pods}
    node = await system.node(node_name or "")
    assert node is not None
    assert len(node.metadata.name) <= 15, "the Node is named after the VM's Windows computer name"
    node_labels = node.metadata.labels
    assert (node_labels[labels.OS], node_labels[labels.WINDOWS_BUILD], node_labels[labels.AKS_OS_SKU]) == (
        "windows",
        "10.0.20348",
        "Windows2022",
    )
    assert node_labels[labels.NODEPOOL] == "windows" and node_labels[labels.ARCH] == "amd64"
    info = node.status.node_info
    assert (info.operating_system, info.os_image, info.kernel_version) == (
        "windows",
        "Windows Server 2022 Datacenter",
        "10.0.20348.4529",
    )
    assert ("os", "windows") in {(taint.key, taint.value) for taint in node.spec.taints}
    for pod in linux_pods:
        linux_node = await system.node(pod.spec.node_name or "")
        assert linux_node is not None and linux_node.metadata.labels[labels.OS] == "linux"
    claim_name = await system.claim_of(node_name or "")
    claim = await system.nodeclaim(claim_name)
    assert (
        claim is not None and "/galleries/AKSWindows/images/windows-2022-containerd" in claim.status.image_id
    )

    # A newer Windows node image ships: drift replaces the Windows node with one on the new image.
    nodeclass = await system.kube.get_nodeclass("windows")
    assert nodeclass is not None
    images = status_images(nodeclass)
    await system.kube.patch_nodeclass_status("windows", {"images": images})
    settings = DisruptionSettings(poll_seconds=0.5, validation_seconds=1, replacement_timeout_seconds=60)
    handle = await system.client.start_workflow(
        DisruptionWorkflow.run,
        DisruptionInput(cluster=system.cluster, settings=settings, lifecycle=FAST),
        id=disruption_id(system.cluster),
        task_queue=system.task_queue,
    )
    wanted = {image["id"] for image in images}

    async def drifted() -> bool:
        windows_claims = [c for c in await system.nodeclaims() if c.nodepool_name == "windows"]
        return (
            bool(windows_claims)
            and all(c.status.image_id in wanted for c in windows_claims)
            and bool(await system.running("windows-web", WINDOWS_REPLICAS))
        )

    await eventually(drifted, timeout=90, what="the Windows node replaced on the new image")
    assert await system.nodeclaim(claim_name) is None
    for pod in await system.running("windows-web", WINDOWS_REPLICAS):
        replaced = await system.node(pod.spec.node_name or "")
        assert replaced is not None and replaced.metadata.labels[labels.OS] == "windows"
    await handle.terminate()
