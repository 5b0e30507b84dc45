"""AKSNodeClass settings end to end: a NodePool whose AKSNodeClass sets the kubelet block, maxPods, linuxOSConfig,
FIPS and LocalDNS Required launches a node (controller, provisioner, lifecycle, the Azure provider, the node
agent) that shows each of them, a pod that selects `kubernetes.azure.com/fips_enabled: "true"` runs on it, and
the controller writes the AKSNodeClass's `status.localDNSState`."""

from __future__ import annotations

import json
from typing import Any

import yaml

from core import labels
from simulator.nodeagent import NODE_CONFIG_ANNOTATION
from tests.builders import configured_nodeclass_spec
from tests.cluster import eventually
from tests.workflows.conftest import System, deployment, example_manifests


def configured_examples() -> list[dict[str, Any]]:
    """`deploy/examples/` with the AKSNodeClass's spec replaced by one that sets every node setting (its status,
    the images, stays)."""
    documents = list(yaml.safe_load_all(example_manifests()))
    for document in documents:
        if document["kind"] == "AKSNodeClass":
            document["spec"] = configured_nodeclass_spec()
    return documents


async def test_a_fips_localdns_nodeclass_launches_a_node_that_shows_its_settings(system: System) -> None:
    system.start_controller()
    await system.kube.apply(configured_examples())

    async def local_dns_state() -> str | None:
        nodeclass = await system.kube.get_nodeclass("default")
        state = nodeclass.status.local_dns_state if nodeclass is not None else None
        return state.value if state is not None else None

    assert await eventually(local_dns_state, timeout=15, what="status.localDNSState") == "Enabled"

    selector = {labels.AKS_FIPS_ENABLED: "true", labels.CAPACITY_TYPE: labels.CAPACITY_TYPE_ON_DEMAND}
    await system.kube.apply([deployment("fips", 1, node_selector=selector)])
    [pod] = await eventually(lambda: system.running("fips", 1), timeout=60, what="the FIPS pod running")

    node = await system.node(str(pod.spec.node_name))
    assert node is not None
    assert node.metadata.labels[labels.AKS_FIPS_ENABLED] == "true"
    assert node.metadata.labels["kubernetes.azure.com/localdns-state"] == "enabled"
    assert node.metadata.labels["kubernetes.azure.com/artifactstreaming-enabled"] == "true"
    # LocalDNS Required: no size under 4 vCPUs.
    assert int(node.metadata.labels[labels.SKU_CPU]) >= 4
    assert node.status.capacity["pods"] == "42" and node.status.allocatable["pods"] == "42"
    # The NodeClaim says what the node says: its instance type is its AKSNodeClass's.
    claim = await system.nodeclaim(await system.claim_of(node.metadata.name))
    assert claim is not None and claim.status.capacity["pods"] == "42"
    assert claim.status.allocatable["pods"] == "42"
    config = json.loads(node.metadata.annotations[NODE_CONFIG_ANNOTATION])
    assert config["kubelet"]["cpu-manager-policy"] == "static"
    assert config["kubelet"]["kube-reserved"].startswith("cpu=")
    assert config["sysctls"]["net.core.somaxconn"] == "16384"
    assert config["variables"]["SHOULD_ENABLE_LOCALDNS"] == "true"
