"""Only what can boot is planned, on the real control plane: an AKSNodeClass whose status has amd64 images only,
under a NodePool that allows amd64 and arm64, gets an amd64 NodeClaim that launches (the cheapest size would be
arm64, whose launch fails with "no image in status.images boots on ...")."""

from __future__ import annotations

from typing import Any

import yaml

from core import labels
from core.api.nodeclaim import NodeClaimConditionType
from core.messages import LifecycleInput
from tests.cluster import eventually
from tests.workflows.conftest import CATALOG, System, deployment, example_manifests, start_input


def amd64_images_only() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = list(yaml.safe_load_all(example_manifests()))
    for document in documents:
        if document["kind"] == "AKSNodeClass":
            images = document["status"]["images"]
            document["status"]["images"] = [image for image in images if "arm64" not in str(image)]
            assert len(document["status"]["images"]) < len(images)
    return documents


async def test_a_nodeclass_with_amd64_images_only_gets_an_amd64_nodeclaim_that_launches(
    system: System,
) -> None:
    await system.kube.apply(yaml.safe_dump_all(amd64_images_only()))
    nodeclass = await system.kube.get_nodeclass("default")
    assert nodeclass is not None
    assert {value for image in nodeclass.status.images for value in image.requirements[0].values} == {"amd64"}
    await system.kube.apply([deployment("web", 1)])
    pods = await system.unschedulable("web", 1)

    await system.start_provisioner(pods)

    await eventually(lambda: system.running("web", 1), timeout=60, what="web running")
    [claim] = await system.nodeclaims()
    assert claim.is_true(NodeClaimConditionType.LAUNCHED)
    node = await system.node(claim.status.node_name or "")
    assert node is not None
    assert node.metadata.labels[labels.ARCH] == "amd64"
    assert CATALOG.sku(node.metadata.labels[labels.INSTANCE_TYPE]).architecture == "amd64"
    options = claim.spec.requirement_set().get(labels.INSTANCE_TYPE).values
    assert options and {CATALOG.sku(name).architecture for name in options} == {"amd64"}
    # Why, as `nodewright explain` tells it: the lifecycle's input says which types were left out.
    lifecycle = await system.nodeclaim_workflow(claim.name)
    reason = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim.reason
    assert "instance type(s) left out as no image boots on them; first: AKSNodeClass default: " in reason
