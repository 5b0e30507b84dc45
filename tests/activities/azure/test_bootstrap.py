"""The node bootstrap: the script's kubelet flags and variables, the token read from the cluster's Secret (and
never named in an error), the AKSNodeClass of a launch's NodePool, and the image chosen from its status."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.azure.bootstrap import BootstrapRequest, ClusterBootstrap, render_script
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.vm import image_reference_for, node_image_version
from activities.bootstrap_tokens import parse_secret_reference
from activities.errors import as_application_error
from core import labels
from core.api.aksnodeclass import AKSNodeClass, LocalDNSState, NodeImage
from core.api.kube import Secret
from core.api.meta import Taint, TaintEffect
from core.api.nodepool import NodePool
from core.bootstrap_tokens import GENERATION_LABEL, MANAGED_BY, MANAGED_BY_LABEL, rotated_id, secret_name
from core.cloudprovider import LaunchRequest
from core.errors import ConflictError, InvalidError, TransientError
from core.instancetypes.azure import kube_reserved
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.images import boots_on, status_image
from simulator.nodeboot import read_custom_data
from tests.builders import configured_nodeclass_spec

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
        self.labels: dict[tuple[str, str], dict[str, str]] = {}
        self.nodepools: dict[str, NodePool] = {}
        self.nodeclasses: dict[str, AKSNodeClass] = {}

    async def read_secret(self, namespace: str, name: str) -> Secret | None:
        data = self.secrets.get((namespace, name))
        metadata = {"name": name, "namespace": namespace, "labels": self.labels.get((namespace, name), {})}
        return None if data is None else Secret(metadata=metadata, data=data)

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
        "kubernetes.azure.com/localdns-state": "disabled",
    }
    assert list(boot.taints) == TAINTS
    assert (boot.kubernetes_version, boot.node_image_version) == (
        "1.33.5",
        "AKSUbuntu-2204gen2containerd-202512.18.0",
    )
    assert "--max-pods=250" in script and "API_SERVER_NAME=c-dns-1.hcp.eastus.azmk8s.io" in script


def configured(name: str = "configured") -> AKSNodeClass:
    return AKSNodeClass.parse(
        {
            "apiVersion": "karpenter.azure.com/v1beta1",
            "kind": "AKSNodeClass",
            "metadata": {"name": name},
            "spec": configured_nodeclass_spec(),
        }
    )


def test_every_aksnodeclass_node_setting_reaches_the_kubelet_under_its_aks_name() -> None:
    nodeclass = configured()
    bootstrap = BootstrapRequest(
        launch(),
        "1.33.5",
        "AKSAzureLinux-V3gen2fips-202512.18.0",
        max_pods=nodeclass.resolved_max_pods(),
        nodeclass=nodeclass.spec,
        kube_reserved=kube_reserved(24, 220.0),
        gpu_manufacturer="nvidia",
        gpu_name="A100",
        local_dns=nodeclass.resolved_local_dns_state() is LocalDNSState.ENABLED,
    )
    script = render_script(bootstrap, "c-dns-1.hcp.eastus.azmk8s.io", f"{TOKEN_ID}.{TOKEN_SECRET}")
    boot = read_custom_data(base64.b64encode(script.encode()).decode())

    assert boot.kubelet == {
        "cgroup-driver": "systemd",
        "rotate-certificates": "true",
        "max-pods": "42",
        "kube-reserved": "cpu=340m,memory=11427Mi",
        "eviction-hard": "memory.available<750Mi",
        "image-gc-high-threshold": "70",
        "image-gc-low-threshold": "60",
        "cpu-manager-policy": "static",
        "cpu-cfs-quota": "false",
        "cpu-cfs-quota-period": "200ms",
        "topology-manager-policy": "single-numa-node",
        "container-log-max-size": "100Mi",
        "container-log-max-files": "7",
        "pod-max-pids": "4096",
        "allowed-unsafe-sysctls": "kernel.msg*,net.ipv4.route.min_pmtu",
        "fail-swap-on": "false",
    }
    assert boot.max_pods == 42
    assert boot.kube_reserved == {"cpu": 340, "memory": 11427 * 2**20}
    assert boot.eviction_hard == {"memory": 750 * 2**20}
    assert {key: boot.labels[key] for key in boot.labels if key.startswith("kubernetes.azure.com/")} == {
        "kubernetes.azure.com/fips_enabled": "true",
        "kubernetes.azure.com/localdns-state": "enabled",
        "kubernetes.azure.com/artifactstreaming-enabled": "true",
        "kubernetes.azure.com/accelerator": "nvidia",
        "kubernetes.azure.com/node-image-version": "AKSAzureLinux-V3gen2fips-202512.18.0",
    }
    corefile = boot.node.pop("LOCALDNS_GENERATED_COREFILE")
    assert boot.node == {
        "SYSCTL_CONTENT": "net.core.somaxconn=16384\nnet.ipv4.ip_local_port_range=32000 60000\n"
        "net.ipv4.tcp_tw_reuse=1\nvm.max_map_count=262144\n",
        "THP_ENABLED": "madvise",
        "THP_DEFRAG": "defer+madvise",
        "SWAP_FILE_SIZE_MB": "2048",
        "ARTIFACT_STREAMING_ENABLED": "true",
        "GPU_NODE": "true",
        "CONFIG_GPU_DRIVER_IF_NEEDED": "true",
        "GPU_DRIVER_TYPE": "cuda",
        "SHOULD_ENABLE_LOCALDNS": "true",
    }
    blocks = corefile.split("}\n}\n")
    assert len(blocks) == 5  # four zone blocks, then nothing
    assert blocks[0].startswith(".:53 {\n    errors\n    bind 169.254.10.10\n    forward . 168.63.129.16 {")
    assert "serve_stale 3600s verify" in blocks[0]
    assert "bind 169.254.10.11" in blocks[2] and "log\n" in blocks[2] and "policy roundrobin" in blocks[2]
    assert "forward . 10.0.0.10" in blocks[3] and "serve_stale" not in blocks[3]


def test_without_a_kubelet_block_the_node_gets_aks_defaults_and_no_optional_settings() -> None:
    boot = read_custom_data(
        base64.b64encode(render_script(request(), "api", "abcdef.0123456789abcdef").encode()).decode()
    )

    assert {name: boot.kubelet[name] for name in ("image-gc-high-threshold", "image-gc-low-threshold")} == {
        "image-gc-high-threshold": "85",
        "image-gc-low-threshold": "80",
    }
    assert boot.kubelet["cpu-manager-policy"] == "none" and boot.kubelet["pod-max-pids"] == "-1"
    assert "fail-swap-on" not in boot.kubelet and "allowed-unsafe-sysctls" not in boot.kubelet
    assert "kube-reserved" not in boot.kubelet and boot.kube_reserved == {}
    assert boot.node == {
        "ARTIFACT_STREAMING_ENABLED": "false",
        "GPU_NODE": "false",
        "CONFIG_GPU_DRIVER_IF_NEEDED": "false",
        "SHOULD_ENABLE_LOCALDNS": "false",
    }
    assert "kubernetes.azure.com/fips_enabled" not in boot.labels


def test_gpu_mode_none_installs_no_driver_and_a10_sizes_get_the_grid_driver() -> None:
    nodeclass = AKSNodeClass.parse(
        {"kind": "AKSNodeClass", "metadata": {"name": "x"}, "spec": {"gpu": {"mode": "None"}}}
    )

    def variables(spec: AKSNodeClass, gpu: str) -> dict[str, str]:
        bootstrap = BootstrapRequest(
            launch(), "1.33.5", "img", 250, nodeclass=spec.spec, gpu_manufacturer="nvidia", gpu_name=gpu
        )
        return read_custom_data(base64.b64encode(render_script(bootstrap, "api", "t").encode()).decode()).node

    assert variables(nodeclass, "T4")["CONFIG_GPU_DRIVER_IF_NEEDED"] == "false"
    assert "GPU_DRIVER_TYPE" not in variables(nodeclass, "T4")
    assert (
        variables(AKSNodeClass.parse({"kind": "AKSNodeClass", "metadata": {"name": "y"}}), "A10")[
            "GPU_DRIVER_TYPE"
        ]
        == "grid"
    )


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


def rotate(
    cluster: FakeCluster, generation: int, secret: str, expiration: datetime, nodewrights: bool = True
) -> None:
    """A rotated token's Secret (one nodewright did not make, unless `nodewrights`)."""
    key = ("kube-system", secret_name(rotated_id(generation)))
    cluster.secrets[key] = {
        "token-id": rotated_id(generation),
        "token-secret": secret,
        "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if nodewrights:
        cluster.labels[key] = {MANAGED_BY_LABEL: MANAGED_BY, GENERATION_LABEL: str(generation)}


async def test_a_launch_joins_with_the_newest_valid_token() -> None:
    now = datetime.now(UTC)
    cluster = FakeCluster({SECRET: {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET}})
    bootstrap = ClusterBootstrap(cluster, "/".join(SECRET), "api", keep_seconds=0)  # type: ignore[arg-type]
    rotate(cluster, 1, "1" * 16, now + timedelta(hours=1))
    rotate(cluster, 2, "2" * 16, now + timedelta(hours=2))
    assert f"TLS_BOOTSTRAP_TOKEN=nwrot2.{'2' * 16}" in await bootstrap(request())

    rotate(cluster, 2, "2" * 16, now - timedelta(seconds=1))
    assert f"TLS_BOOTSTRAP_TOKEN=nwrot1.{'1' * 16}" in await bootstrap(request()), "never an expired one"
    rotate(cluster, 3, "3" * 16, now + timedelta(hours=3), nodewrights=False)
    assert f"TLS_BOOTSTRAP_TOKEN=nwrot1.{'1' * 16}" in await bootstrap(request()), (
        "nor one nodewright did not make"
    )
    unrotated = ClusterBootstrap(cluster, "/".join(SECRET), "api", rotated=False)  # type: ignore[arg-type]
    assert f"TLS_BOOTSTRAP_TOKEN={TOKEN_ID}.{TOKEN_SECRET}" in await unrotated(request()), "rotation off"

    cluster.secrets[SECRET]["expiration"] = "2026-01-01T00:00:00Z"
    rotate(cluster, 1, "1" * 16, now - timedelta(seconds=1))
    with pytest.raises(
        TransientError,
        match="no bootstrap token is valid: kube-system/bootstrap-token-abcdef expired at 2026-01-01T00:00:00Z, "
        "kube-system/bootstrap-token-nwrot1 expired at",
    ) as raised:
        await bootstrap(request())
    assert raised.value.code == "TokenExpired" and "1" * 16 not in str(raised.value)


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
