"""The node bootstrap: the script's kubelet flags and variables, the token read from the cluster's Secret (and
never named in an error), the AKSNodeClass of a launch's NodePool, and the image chosen from its status."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from activities.azure.bootstrap import (
    BootstrapRequest,
    ClusterBootstrap,
    parse_secret_reference,
    render_script,
)
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.vm import image_reference_for, node_image_version
from activities.errors import as_application_error
from core import labels
from core.api.aksnodeclass import AKSNodeClass, NodeImage
from core.api.meta import Taint, TaintEffect
from core.api.nodepool import NodePool
from core.cloudprovider import LaunchRequest
from core.errors import ConflictError, InvalidError, TransientError
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.images import boots_on, status_image
from simulator.nodeboot import read_custom_data

TOKEN_ID, TOKEN_SECRET = "abcdef", "0123456789abcdef"
TAINTS = [
    Taint(key="karpenter.sh/unregistered", effect=TaintEffect.NO_EXECUTE),
    Taint(key="dedicated", value="db", effect=TaintEffect.NO_SCHEDULE),
]


def launch() -> LaunchRequest:
    return LaunchRequest(
        name="default-abcde",
        nodepool="default",
        instance_type="Standard_D4s_v5",
        zone="eastus-1",
        capacity_type="on-demand",
        labels={labels.NODEPOOL: "default", labels.ZONE: "eastus-1"},
        taints=TAINTS,
    )


def request() -> BootstrapRequest:
    return BootstrapRequest(launch(), "1.33.5", "AKSUbuntu-2204gen2containerd-202512.18.0", max_pods=250)


class FakeCluster:
    """The three ClusterAPI reads the bootstrap and the AKSNodeClass lookup make."""

    def __init__(self, secrets: dict[tuple[str, str], dict[str, str]] | None = None) -> None:
        self.secrets = secrets or {}
        self.nodepools: dict[str, NodePool] = {}
        self.nodeclasses: dict[str, AKSNodeClass] = {}

    async def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.secrets.get((namespace, name))

    async def get_nodepool(self, name: str) -> NodePool | None:
        return self.nodepools.get(name)

    async def get_nodeclass(self, name: str) -> AKSNodeClass | None:
        return self.nodeclasses.get(name)


SECRET = ("kube-system", f"bootstrap-token-{TOKEN_ID}")


def test_the_script_carries_what_the_kubelet_needs_and_the_simulated_kubelet_reads_it_back() -> None:
    script = render_script(request(), "c-dns-1.hcp.eastus.azmk8s.io", f"{TOKEN_ID}.{TOKEN_SECRET}")

    assert script.startswith("#!/bin/bash\n") and script.rstrip().endswith(
        "/opt/azure/containers/provision.sh"
    )
    boot = read_custom_data(base64.b64encode(script.encode()).decode())
    assert boot.token == f"{TOKEN_ID}.{TOKEN_SECRET}"
    assert boot.labels == {
        labels.NODEPOOL: "default",
        labels.ZONE: "eastus-1",
        "kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202512.18.0",
    }
    assert list(boot.taints) == TAINTS
    assert (boot.kubernetes_version, boot.node_image_version) == (
        "1.33.5",
        "AKSUbuntu-2204gen2containerd-202512.18.0",
    )
    assert "--max-pods=250" in script and "API_SERVER_NAME=c-dns-1.hcp.eastus.azmk8s.io" in script


async def test_the_bootstrap_reads_the_token_from_the_secret_at_every_launch() -> None:
    cluster = FakeCluster({SECRET: {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET}})
    bootstrap = ClusterBootstrap(cluster, "/".join(SECRET), "api", keep_seconds=0)  # type: ignore[arg-type]
    assert f"TLS_BOOTSTRAP_TOKEN={TOKEN_ID}.{TOKEN_SECRET}" in await bootstrap(request())

    cluster.secrets[SECRET] = {"token-id": TOKEN_ID, "token-secret": "fedcba9876543210"}
    assert f"TLS_BOOTSTRAP_TOKEN={TOKEN_ID}.fedcba9876543210" in await bootstrap(request()), "rotated"


@pytest.mark.parametrize(
    ("secret", "error", "message"),
    [
        (
            None,
            TransientError,
            "the bootstrap token Secret kube-system/bootstrap-token-abcdef does not exist",
        ),
        ({"token-id": TOKEN_ID}, InvalidError, "data.token-secret is missing or not 16 of"),
        ({"token-id": "ABC", "token-secret": TOKEN_SECRET}, InvalidError, "data.token-id is missing"),
    ],
)
async def test_a_missing_or_broken_secret_is_named_without_its_values(
    secret: dict[str, str] | None, error: type[Exception], message: str
) -> None:
    cluster = FakeCluster({SECRET: secret} if secret else {})
    bootstrap = ClusterBootstrap(cluster, "/".join(SECRET), "api")  # type: ignore[arg-type]
    with pytest.raises(error, match=message) as raised:
        await bootstrap(request())
    assert TOKEN_SECRET not in str(raised.value)


def test_a_secret_reference_is_namespace_and_name() -> None:
    assert parse_secret_reference("kube-system/bootstrap-token-abcdef") == SECRET
    with pytest.raises(ValueError, match="not <namespace>/<name>"):
        parse_secret_reference("bootstrap-token-abcdef")


def nodepool(kind: str = "AKSNodeClass") -> NodePool:
    reference = {"group": "karpenter.azure.com", "kind": kind, "name": "default"}
    return NodePool.parse(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": reference, "requirements": []}}},
        }
    )


async def test_the_nodeclass_of_a_launch_is_its_nodepools() -> None:
    cluster = FakeCluster()
    lookup = ClusterNodeClasses(cluster)  # type: ignore[arg-type]
    assert await lookup(launch()) is None, "no NodePool: the defaults"

    cluster.nodepools["default"] = nodepool()
    with pytest.raises(TransientError, match=r"AKSNodeClass default \(of NodePool default\) not found"):
        await lookup(launch())
    cluster.nodeclasses["default"] = AKSNodeClass.parse({"metadata": {"name": "default"}, "spec": {}})
    found = await lookup(launch())
    assert found is not None and found.name == "default"


IMAGES: list[dict[str, Any]] = [
    {
        "id": "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/"
        "versions/202512.18.0",
        "requirements": [
            {"key": labels.ARCH, "operator": "In", "values": ["amd64"]},
            {"key": labels.SKU_HYPERV_GENERATION, "operator": "In", "values": ["2"]},
        ],
    },
    {
        "id": "/subscriptions/s/resourceGroups/AKS-Ubuntu/providers/Microsoft.Compute/galleries/AKSUbuntu/images/"
        "2204containerd/versions/202512.18.0",
        "requirements": [
            {"key": labels.ARCH, "operator": "In", "values": ["amd64"]},
            {"key": labels.SKU_HYPERV_GENERATION, "operator": "NotIn", "values": ["2"]},
        ],
    },
]


def test_a_size_boots_the_first_status_image_it_can() -> None:
    catalog = load_shipped_catalog("eastus")
    images = [NodeImage.model_validate(image) for image in IMAGES]
    gen2, arm = catalog.sku("Standard_D4s_v5"), catalog.sku("Standard_D4ps_v5")
    gen1 = next(
        sku for sku in catalog.skus if sku.hyperv_generations == ("V1",) and sku.architecture == "amd64"
    )

    assert status_image(images, gen2) == IMAGES[0]["id"]
    assert status_image(images, gen1) == IMAGES[1]["id"]
    assert status_image(images, arm) is None and not boots_on(images[0], arm)


def test_image_ids_become_references_and_aks_image_version_names() -> None:
    community, shared = IMAGES[0]["id"], IMAGES[1]["id"]
    assert image_reference_for(community) == {"communityGalleryImageId": community}
    assert image_reference_for(shared) == {"id": shared}
    assert node_image_version(community) == "AKSUbuntu-2204gen2containerd-202512.18.0"
    assert node_image_version(shared) == "AKSUbuntu-2204containerd-202512.18.0"


def test_a_vm_another_cluster_owns_is_a_non_retryable_conflict() -> None:
    error = as_application_error(ConflictError("VM aks-x is not tagged for cluster c", code="NotOwned"))
    assert (error.type, error.non_retryable) == ("Conflict", True)
    assert not as_application_error(ConflictError("changed", code="Conflict")).non_retryable
