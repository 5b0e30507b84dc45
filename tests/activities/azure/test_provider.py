"""AzureCloudProvider through the real async SDK clients against the ARM emulator (HTTPS, real LRO pollers).

Launch, idempotent re-launch (also after a crash mid-operation), delete, each launch failure's classification
and its effect on the unavailable-offerings cache, throttling, request bodies, cleanup, and the bootstrap
secret staying out of everything the provider returns, raises, logs or heartbeats.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine
from azure.mgmt.network.aio import NetworkManagementClient
from azure.mgmt.network.models import NetworkInterface

from activities.azure import AzureCloudProvider, AzureSettings, AzureSettingsError
from activities.azure.bootstrap import BootstrapRequest
from activities.azure.names import NodeNames
from activities.azure.vm import nic_body, node_tags, vm_body
from core.api.aksnodeclass import AKSNodeClass, AKSNodeClassSpec
from core.api.meta import ObjectMeta
from core.cloudprovider import InstanceState, LaunchRequest
from core.errors import (
    ConflictError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)
from simulator.arm import Fault, RunningArm, serve_arm

REGION = "southcentralus"
SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
GROUP = "MC_Nodewright_Test_southcentralus"
CLUSTER = "test-cluster"
SUBNET = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network/virtualNetworks/"
    "aks-vnet-12345678/subnets/aks-subnet"
)
TOKEN = "abcdef.0123456789abcdef"
"""The join token inside the bootstrap; it must never leave the provider."""
SCRIPT = f"#!/bin/bash\nexport TLS_BOOTSTRAP_TOKEN={TOKEN}\n/opt/azure/containers/provision.sh\n"
SECRETS = (TOKEN, base64.b64encode(SCRIPT.encode()).decode())
UBUNTU = "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2"
ZONE_1 = f"{REGION}-1"
ZONE_2 = f"{REGION}-2"
OD = "on-demand"
SPOT = "spot"


def settings(**overrides: Any) -> AzureSettings:
    values: dict[str, Any] = {
        "subscription_id": SUBSCRIPTION,
        "resource_group": GROUP,
        "location": REGION,
        "cluster_name": CLUSTER,
        "subnet_id": SUBNET,
        "kubernetes_version": "1.33.2",
        "node_image_version": "202512.18.0",
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAItest",
        "cluster_endpoint": "test-cluster-dns-1.hcp.southcentralus.azmk8s.io",
        "bootstrap_token_secret": "kube-system/bootstrap-token-abcdef",
        "kubelet_identity_id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities/kubelet",
        "poll_interval": timedelta(0),
        "heartbeat_interval": timedelta(milliseconds=5),
        **overrides,
    }
    return AzureSettings.load(values)


async def fixed_bootstrap(request: BootstrapRequest) -> str:
    return SCRIPT


def launch(
    name: str = "default-abc12",
    instance_type: str = "Standard_D4s_v3",
    zone: str = ZONE_1,
    capacity_type: str = OD,
) -> LaunchRequest:
    return LaunchRequest(
        name=name,
        nodepool="default",
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        tags={"karpenter.sh_nodepool": "default", "karpenter.sh_nodeclaim": name},
    )


@dataclass
class World:
    """The emulator, the provider under test, and what the provider reported on the way."""

    arm: RunningArm
    provider: AzureCloudProvider
    heartbeats: list[str] = field(default_factory=list)
    bootstraps: list[BootstrapRequest] = field(default_factory=list)
    creating_vm: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a VM create was accepted and is being polled."""

    def vm_body(self, nodeclaim: str) -> dict[str, Any]:
        vm = self.arm.state.vm(NodeNames.of(nodeclaim).vm)
        assert vm is not None
        return vm.body

    def requests(self, key: str) -> int:
        return self.arm.state.counters.requests[key]


@pytest.fixture
async def arm() -> AsyncIterator[RunningArm]:
    async with serve_arm(REGION, SUBSCRIPTION, resource_group=GROUP) as running:
        yield running


@pytest.fixture
def client_options() -> dict[str, Any]:
    """Overrides of the emulator's client options (e.g. fewer retries), set by a test before `world`."""
    return {}


@pytest.fixture
async def world(arm: RunningArm, client_options: dict[str, Any]) -> AsyncIterator[World]:
    credential = arm.credential()
    options = arm.client_options(**client_options)
    async with (
        ComputeManagementClient(credential, SUBSCRIPTION, **options) as compute,
        NetworkManagementClient(credential, SUBSCRIPTION, **options) as network,
    ):
        bootstraps: list[BootstrapRequest] = []
        heartbeats: list[str] = []
        creating_vm = asyncio.Event()

        async def bootstrap(request: BootstrapRequest) -> str:
            bootstraps.append(request)
            return SCRIPT

        def heartbeat(detail: str) -> None:
            heartbeats.append(detail)
            if detail.startswith("creating VM"):
                creating_vm.set()

        provider = AzureCloudProvider(compute, network, settings(), bootstrap, heartbeat=heartbeat)
        yield World(arm, provider, heartbeats, bootstraps, creating_vm)


# --- launch and delete ---------------------------------------------------------------------------------


async def test_launch_makes_a_nic_and_a_vm_and_reports_the_instance(world: World) -> None:
    instance = await world.provider.create(launch())

    assert instance.name == "default-abc12"
    assert instance.provider_id == (
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP.lower()}/providers/Microsoft.Compute/"
        "virtualMachines/aks-default-abc12"
    )
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("Standard_D4s_v3", ZONE_1, OD)
    assert instance.state is InstanceState.RUNNING
    assert instance.created_at is not None
    state = world.arm.state
    vm = state.vm("aks-default-abc12")
    nic = state.nic("aks-default-abc12")
    assert vm is not None and nic is not None
    assert vm.provisioning_state == "Succeeded"
    assert vm.custom_data == SECRETS[1]
    assert (
        vm.tags
        == instance.tags
        == {
            "karpenter.azure.com_cluster": CLUSTER,
            "compute.aks.billing": "linux",
            "karpenter.sh_nodepool": "default",
            "karpenter.sh_nodeclaim": "default-abc12",
        }
    )
    assert nic.body["properties"]["enableAcceleratedNetworking"] is True
    assert nic.body["properties"]["ipConfigurations"][0]["properties"]["subnet"] == {"id": SUBNET}
    assert vm.body["zones"] == ["1"]
    assert vm.body["identity"]["userAssignedIdentities"].keys() == {settings().kubelet_identity_id}
    assert vm.body["properties"]["storageProfile"]["imageReference"] == {
        "communityGalleryImageId": "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/"
        "2204gen2containerd/versions/202512.18.0"
    }
    assert (state.counters.vms_created, state.counters.nics_created) == (1, 1)
    assert any(beat.startswith("creating VM aks-default-abc12") for beat in world.heartbeats)
    assert instance.image_id == (
        "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd/versions/"
        "202512.18.0"
    )
    [bootstrap] = world.bootstraps
    assert (bootstrap.kubernetes_version, bootstrap.node_image_version) == (
        "1.33.2",
        "AKSUbuntu-2204gen2containerd-202512.18.0",
    )


STATUS_IMAGES = {
    "kubernetesVersion": "1.33.5",
    "images": [
        {
            "id": f"/CommunityGalleries/{UBUNTU}/images/2204gen2containerd/versions/202601.10.0",
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.azure.com/sku-hyperv-generation", "operator": "In", "values": ["2"]},
            ],
        },
        {
            "id": f"/CommunityGalleries/{UBUNTU}/images/2204gen2arm64containerd/versions/202601.10.0",
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                {"key": "karpenter.azure.com/sku-hyperv-generation", "operator": "In", "values": ["2"]},
            ],
        },
    ],
}


@pytest.mark.parametrize(
    ("instance_type", "definition"),
    [("Standard_D4s_v3", "2204gen2containerd"), ("Standard_D4ps_v5", "2204gen2arm64containerd")],
)
async def test_the_image_and_version_come_from_the_nodeclass_status_when_it_has_images(
    world: World, instance_type: str, definition: str
) -> None:
    nodeclass = AKSNodeClass.parse({"metadata": {"name": "default"}, "spec": {}, "status": STATUS_IMAGES})
    seen: list[BootstrapRequest] = []

    async def node_class(request: LaunchRequest) -> AKSNodeClass:
        return nodeclass

    async def bootstrap(request: BootstrapRequest) -> str:
        seen.append(request)
        return SCRIPT

    provider = AzureCloudProvider(
        world.provider.compute, world.provider.network, settings(), bootstrap, node_class=node_class
    )
    instance = await provider.create(launch(instance_type=instance_type))

    image_id = f"/CommunityGalleries/{UBUNTU}/images/{definition}/versions/202601.10.0"
    assert world.vm_body("default-abc12")["properties"]["storageProfile"]["imageReference"] == {
        "communityGalleryImageId": image_id
    }
    assert instance.image_id == image_id
    assert [(b.kubernetes_version, b.node_image_version) for b in seen] == [
        ("1.33.5", f"AKSUbuntu-{definition}-202601.10.0")
    ]


async def test_a_size_no_status_image_boots_on_is_refused_without_calling_azure(world: World) -> None:
    only_arm = {**STATUS_IMAGES, "images": STATUS_IMAGES["images"][1:]}
    nodeclass = AKSNodeClass.parse({"metadata": {"name": "default"}, "spec": {}, "status": only_arm})

    async def node_class(request: LaunchRequest) -> AKSNodeClass:
        return nodeclass

    provider = AzureCloudProvider(
        world.provider.compute, world.provider.network, settings(), fixed_bootstrap, node_class=node_class
    )
    with pytest.raises(InvalidError, match=r"AKSNodeClass default: no image in status\.images boots on"):
        await provider.create(launch())
    assert world.requests("PUT virtualMachines") == 0


async def test_a_spot_launch_asks_for_spot_with_eviction_by_deletion_and_no_price_cap(world: World) -> None:
    await world.provider.create(launch("spot-1", capacity_type=SPOT))
    await world.provider.create(launch("regular-1"))

    spot = world.vm_body("spot-1")["properties"]
    regular = world.vm_body("regular-1")["properties"]
    assert (spot["priority"], spot["evictionPolicy"], spot["billingProfile"]) == (
        "Spot",
        "Delete",
        {"maxPrice": -1},
    )
    assert regular["priority"] == "Regular"
    assert not {"evictionPolicy", "billingProfile"} & regular.keys()
    assert (await world.provider.get("spot-1")).capacity_type == SPOT


async def test_ephemeral_os_disk_where_the_size_holds_it_and_a_managed_disk_where_not(world: World) -> None:
    await world.provider.create(launch("ephemeral-1", "Standard_D8s_v3"))
    await world.provider.create(launch("managed-1", "Standard_D2as_v6", zone=ZONE_2))

    ephemeral = world.vm_body("ephemeral-1")["properties"]["storageProfile"]["osDisk"]
    managed = world.vm_body("managed-1")["properties"]["storageProfile"]["osDisk"]
    assert ephemeral["diffDiskSettings"] == {"option": "Local", "placement": "CacheDisk"}
    assert "diffDiskSettings" not in managed
    assert world.arm.state.disk("aks-managed-1") is not None
    assert world.arm.state.disk("aks-ephemeral-1") is None


async def test_a_regional_launch_has_no_zone(world: World) -> None:
    instance = await world.provider.create(launch(zone="0"))

    assert instance.zone == "0"
    assert "zones" not in world.vm_body("default-abc12")


async def test_the_nodeclass_sets_subnet_disk_size_image_and_tags(arm: RunningArm, world: World) -> None:
    other_subnet = SUBNET.replace("aks-subnet", "pods-and-nodes")
    spec = AKSNodeClassSpec.model_validate(
        {
            "vnetSubnetID": other_subnet,
            "osDiskSizeGB": 64,
            "imageFamily": "AzureLinux",
            "tags": {"team/name": "storage"},
        }
    )

    async def node_class(request: LaunchRequest) -> AKSNodeClass:
        return AKSNodeClass(metadata=ObjectMeta(name="default"), spec=spec)

    provider = AzureCloudProvider(
        world.provider.compute,
        world.provider.network,
        settings(),
        fixed_bootstrap,
        node_class=node_class,
    )
    await provider.create(launch())

    body = world.vm_body("default-abc12")
    nic = arm.state.nic("aks-default-abc12")
    assert nic is not None
    assert nic.body["properties"]["ipConfigurations"][0]["properties"]["subnet"] == {"id": other_subnet}
    assert body["properties"]["storageProfile"]["osDisk"]["diskSizeGB"] == 64
    assert (
        "/images/V3gen2/" in body["properties"]["storageProfile"]["imageReference"]["communityGalleryImageId"]
    )
    assert body["tags"]["team_name"] == "storage"


async def test_launching_again_returns_the_same_vm_without_a_second_put(world: World) -> None:
    first = await world.provider.create(launch())
    second = await world.provider.create(launch())

    assert second == first
    assert world.arm.state.counters.vms_created == 1
    assert world.requests("PUT virtualMachines") == 1
    assert [b.launch.name for b in world.bootstraps] == ["default-abc12"], "an adopted VM needs no bootstrap"


async def crash_mid_launch(world: World, *faults: Fault, polls_after: int = 0) -> None:
    """Start a launch, kill it while the VM create is being polled, and let the operation end after
    `polls_after` more status reads (with `faults` deciding how)."""
    state = world.arm.state
    for fault in faults:
        state.add_fault(fault)
    state.add_fault(Fault.slow(polls=1000, method="PUT", resource="virtualMachines"))
    crashed = asyncio.create_task(world.provider.create(launch()))
    await world.creating_vm.wait()
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    vm = state.vm("aks-default-abc12")
    assert vm is not None and vm.provisioning_state == "Creating"
    state.clear_faults()
    operation = state.operation(vm.operation or "")
    assert operation is not None
    operation.polls_left = polls_after


async def test_a_launch_interrupted_mid_operation_resumes_on_the_same_vm(world: World) -> None:
    await crash_mid_launch(world, polls_after=2)

    instance = await world.provider.create(launch())

    assert instance.state is InstanceState.RUNNING
    assert world.arm.state.counters.vms_created == 1
    assert world.requests("PUT virtualMachines") == 1
    assert [b.launch.name for b in world.bootstraps] == ["default-abc12"]


async def test_a_vm_that_failed_after_a_crash_is_replaced(world: World) -> None:
    await crash_mid_launch(world, Fault.fail_late("InternalExecutionError"))

    instance = await world.provider.create(launch())

    state = world.arm.state
    assert instance.state is InstanceState.RUNNING
    assert (state.counters.vms_created, state.counters.vms_deleted) == (2, 1)


async def test_a_lost_put_response_is_retried_onto_the_same_vm(world: World) -> None:
    world.arm.state.add_fault(Fault.drop_response(method="PUT", resource="virtualMachines", times=1))

    instance = await world.provider.create(launch())

    assert instance.state is InstanceState.RUNNING
    assert world.arm.state.counters.vms_created == 1
    assert world.requests("PUT virtualMachines") == 2


async def test_delete_removes_vm_nic_and_managed_disk_and_is_idempotent(world: World) -> None:
    await world.provider.create(launch("managed-1", "Standard_D2as_v6", zone=ZONE_2))

    await world.provider.delete("managed-1")
    await world.provider.delete("managed-1")

    state = world.arm.state
    assert state.vm("aks-managed-1") is None
    assert state.nic("aks-managed-1") is None
    assert state.disk("aks-managed-1") is None
    assert (state.counters.vms_deleted, state.counters.nics_deleted, state.counters.disks_deleted) == (
        1,
        1,
        1,
    )
    with pytest.raises(NotFoundError):
        await world.provider.get("managed-1")


async def test_delete_removes_a_disk_and_nic_the_vm_did_not_take_with_it(world: World) -> None:
    names = NodeNames.of("kept-1")
    compute, network = world.provider.compute, world.provider.network
    tags = node_tags(CLUSTER, "default", "kept-1")
    nic = nic_body(name=names.nic, location=REGION, subnet_id=SUBNET, accelerated_networking=False, tags=tags)
    await (
        await network.network_interfaces.begin_create_or_update(GROUP, names.nic, NetworkInterface(nic))
    ).result()
    body = vm_body(
        names=names,
        location=REGION,
        sku=world.provider.catalog.sku("Standard_D2as_v6"),
        zone=ZONE_2,
        capacity_type=OD,
        os_disk_size_gb=64,
        image={"id": "/images/x"},
        nic_id=f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network/"
        f"networkInterfaces/{names.nic}",
        admin_username="azureuser",
        ssh_public_key="ssh-ed25519 AAAA",
        custom_data=base64.b64encode(b"#!/bin/true").decode(),
        tags=tags,
    )
    body["properties"]["storageProfile"]["osDisk"]["deleteOption"] = "Detach"
    body["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] = "Detach"
    await (
        await compute.virtual_machines.begin_create_or_update(GROUP, names.vm, VirtualMachine(body))
    ).result()
    assert world.arm.state.disk(names.os_disk) is not None

    await world.provider.delete("kept-1")

    state = world.arm.state
    assert (state.vm(names.vm), state.nic(names.nic), state.disk(names.os_disk)) == (None, None, None)


async def test_a_slow_delete_is_waited_for_with_heartbeats(world: World) -> None:
    await world.provider.create(launch())
    world.arm.state.add_fault(Fault.slow(polls=5, method="DELETE", resource="virtualMachines"))
    world.heartbeats.clear()

    await world.provider.delete("default-abc12")

    assert world.arm.state.vm("aks-default-abc12") is None
    assert any(beat.startswith("deleting VM aks-default-abc12") for beat in world.heartbeats)


async def test_list_and_get_see_only_this_clusters_vms(world: World) -> None:
    await world.provider.create(launch("b-1"))
    await world.provider.create(launch("a-1", capacity_type=SPOT, zone="0"))
    foreign = AzureCloudProvider(
        world.provider.compute,
        world.provider.network,
        settings(cluster_name="other-cluster"),
        fixed_bootstrap,
    )
    await foreign.create(launch("c-1"))

    listed = await world.provider.list()

    assert [(i.name, i.zone, i.capacity_type) for i in listed] == [("a-1", "0", SPOT), ("b-1", ZONE_1, OD)]
    assert await world.provider.get("b-1") == listed[1]
    with pytest.raises(NotFoundError):
        await world.provider.get("c-1")
    with pytest.raises(ConflictError, match="not tagged for cluster"):
        await world.provider.delete("c-1")
    assert world.arm.state.vm("aks-c-1") is not None


# --- launch failures and the unavailable-offerings cache -----------------------------------------------


def blocked(world: World, size: str) -> set[tuple[str, str]]:
    sku = world.provider.catalog.sku(size)
    return {
        (zone, capacity_type)
        for zone in (f"{REGION}-1", f"{REGION}-2", f"{REGION}-3", "0")
        for capacity_type in (OD, SPOT)
        if world.provider.unavailable.is_unavailable(sku, zone, capacity_type)
    }


ZONAL = {f"{REGION}-{n}" for n in (1, 2, 3)}


@pytest.mark.parametrize(
    ("fault", "capacity_type", "error", "code", "blocked_d4", "blocked_d8"),
    [
        (
            Fault.sku_not_available("Standard_D4s_v3"),
            OD,
            InsufficientCapacityError,
            "SkuNotAvailable",
            {(z, OD) for z in ZONAL},
            {(z, OD) for z in ZONAL},
        ),
        (
            Fault.fail_late("ZonalAllocationFailed", "Standard_D4s_v3"),
            SPOT,
            InsufficientCapacityError,
            "ZonalAllocationFailed",
            {(ZONE_1, OD), (ZONE_1, SPOT)},
            {(ZONE_1, OD), (ZONE_1, SPOT)},
        ),
        (
            Fault.fail_late("AllocationFailed", "Standard_D4s_v3"),
            OD,
            InsufficientCapacityError,
            "AllocationFailed",
            {(z, ct) for z in ZONAL for ct in (OD, SPOT)},
            {(z, ct) for z in ZONAL for ct in (OD, SPOT)},
        ),
        (
            Fault.fail_late("OverconstrainedZonalAllocationRequest", "Standard_D4s_v3"),
            OD,
            InsufficientCapacityError,
            "OverconstrainedZonalAllocationRequest",
            {(ZONE_1, OD)},
            {(ZONE_1, OD)},
        ),
        (
            Fault.fail_late("OverconstrainedAllocationRequest", "Standard_D4s_v3"),
            SPOT,
            InsufficientCapacityError,
            "OverconstrainedAllocationRequest",
            {(z, SPOT) for z in ZONAL},
            {(z, SPOT) for z in ZONAL},
        ),
        (
            Fault.quota_exceeded("family", "Standard_D4s_v3"),
            OD,
            QuotaExceededError,
            "OperationNotAllowed",
            {(z, OD) for z in (*ZONAL, "0")},
            {(z, OD) for z in (*ZONAL, "0")},
        ),
        (
            Fault.quota_exceeded("spot", "Standard_D4s_v3"),
            SPOT,
            QuotaExceededError,
            "OperationNotAllowed",
            {(z, SPOT) for z in (*ZONAL, "0")},
            {(z, SPOT) for z in (*ZONAL, "0")},
        ),
        (
            Fault.quota_exceeded("regional", "Standard_D4s_v3"),
            OD,
            QuotaExceededError,
            "OperationNotAllowed",
            set(),
            set(),
        ),
    ],
    ids=lambda value: value.action.value + ":" + value.code if isinstance(value, Fault) else None,
)
async def test_each_launch_failure_is_classified_cleaned_up_and_cached(
    world: World,
    fault: Fault,
    capacity_type: str,
    error: type[Exception],
    code: str,
    blocked_d4: set[tuple[str, str]],
    blocked_d8: set[tuple[str, str]],
) -> None:
    world.arm.state.add_fault(fault)

    with pytest.raises(error) as raised:
        await world.provider.create(launch(capacity_type=capacity_type))

    failure = raised.value
    assert isinstance(failure, InsufficientCapacityError | QuotaExceededError)
    assert failure.code == code
    assert failure.offering == Offering("Standard_D4s_v3", ZONE_1, capacity_type)
    assert world.arm.state.vm("aks-default-abc12") is None, "a failed launch leaves no VM"
    assert world.arm.state.nic("aks-default-abc12") is None, "a failed launch leaves no NIC"
    assert blocked(world, "Standard_D4s_v3") == blocked_d4
    assert blocked(world, "Standard_D8s_v3") == blocked_d8, "larger sizes of the family follow"
    assert blocked(world, "Standard_D2s_v3") - {(z, SPOT) for z in (*ZONAL, "0")} == set(), (
        "smaller ones do not"
    )


@pytest.mark.parametrize(
    ("scope", "size", "capacity_type"),
    [
        ("family", "Standard_E4d_v5", OD),
        ("spot", "Standard_E4d_v5", SPOT),
        ("regional", "Standard_D2s_v3", OD),
    ],
)
async def test_quota_errors_carry_their_scope(
    world: World, scope: str, size: str, capacity_type: str
) -> None:
    world.arm.state.add_fault(Fault.quota_exceeded(scope))

    with pytest.raises(QuotaExceededError) as raised:
        await world.provider.create(launch(instance_type=size, capacity_type=capacity_type))

    assert raised.value.scope == scope


async def test_a_cached_failure_fails_the_next_launch_without_calling_azure_and_other_offerings_launch(
    world: World,
) -> None:
    world.arm.state.add_fault(Fault.sku_not_available("Standard_D4s_v3", times=1))
    with pytest.raises(InsufficientCapacityError):
        await world.provider.create(launch("first-1"))
    puts = world.requests("PUT virtualMachines")

    with pytest.raises(InsufficientCapacityError, match="unavailable until"):
        await world.provider.create(launch("second-1", zone=ZONE_2))
    assert world.requests("PUT virtualMachines") == puts, "a cached failure needs no call"

    regional = await world.provider.create(launch("third-1", zone="0"))
    smaller = await world.provider.create(launch("fourth-1", "Standard_D2s_v3"))
    assert regional.state is smaller.state is InstanceState.RUNNING


async def test_a_capacity_failure_after_a_crash_is_cached_and_refuses_the_retried_launch(
    world: World,
) -> None:
    await crash_mid_launch(world, Fault.fail_late("ZonalAllocationFailed", "Standard_D4s_v3"))

    with pytest.raises(InsufficientCapacityError) as raised:
        await world.provider.create(launch())

    state = world.arm.state
    assert raised.value.code == "ZonalAllocationFailed"
    assert state.vm("aks-default-abc12") is None and state.nic("aks-default-abc12") is None
    assert blocked(world, "Standard_D4s_v3") == {(ZONE_1, OD), (ZONE_1, SPOT)}


async def test_an_unknown_size_is_an_invalid_request_and_makes_nothing(world: World) -> None:
    with pytest.raises(InvalidError, match="Standard_Nope_v9"):
        await world.provider.create(launch(instance_type="Standard_Nope_v9"))

    assert world.requests("PUT networkInterfaces") == 0


@pytest.mark.parametrize("client_options", [{"retry_total": 0}])
async def test_throttling_is_reported_with_the_retry_after_delay(world: World) -> None:
    world.arm.state.add_fault(Fault.throttle(retry_after=7, method="PUT", resource="networkInterfaces"))

    with pytest.raises(ThrottledError) as raised:
        await world.provider.create(launch())

    assert raised.value.retry_after_seconds == 7.0
    assert world.arm.state.nic("aks-default-abc12") is None
    assert blocked(world, "Standard_D4s_v3") == set(), "throttling says nothing about capacity"


async def test_a_short_throttle_is_honoured_and_the_launch_goes_through(world: World) -> None:
    world.arm.state.add_fault(
        Fault.throttle(retry_after=0, method="PUT", resource="virtualMachines", times=2)
    )

    instance = await world.provider.create(launch())

    assert instance.state is InstanceState.RUNNING
    assert world.requests("PUT virtualMachines") == 3


@pytest.mark.parametrize("client_options", [{"retry_total": 0}])
async def test_a_server_error_is_transient_and_leaves_the_nic_to_the_retry(world: World) -> None:
    world.arm.state.add_fault(Fault.transient(503, method="PUT", resource="virtualMachines", times=1))

    with pytest.raises(TransientError, match="ServiceUnavailable"):
        await world.provider.create(launch())
    assert world.arm.state.nic("aks-default-abc12") is not None, "a 5xx says nothing of what was made"

    instance = await world.provider.create(launch())
    counters = world.arm.state.counters
    assert instance.state is InstanceState.RUNNING
    assert (counters.nics_created, counters.nics_deleted, counters.vms_created) == (1, 0, 1)


def impatient(world: World, wait: timedelta = timedelta(0)) -> AzureCloudProvider:
    """The world's provider, but one whose launch waits for a VM's create only `wait`."""
    provider = world.provider
    return AzureCloudProvider(
        provider.compute,
        provider.network,
        settings(create_wait=wait),
        fixed_bootstrap,
        catalog=provider.catalogs,
    )


async def test_a_vm_create_that_outlasts_the_wait_returns_the_vm_being_created(world: World) -> None:
    state = world.arm.state
    state.add_fault(Fault.slow(polls=10**6, method="PUT", resource="virtualMachines", times=1))
    provider = impatient(world, timedelta(milliseconds=50))

    instance = await provider.create(launch())

    assert instance.state is InstanceState.CREATING
    assert instance.provider_id == (
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP.lower()}/providers/Microsoft.Compute/"
        "virtualMachines/aks-default-abc12"
    )
    assert (instance.instance_type, instance.zone, instance.capacity_type) == ("Standard_D4s_v3", ZONE_1, OD)
    assert instance.image_id.endswith("/images/2204gen2containerd/versions/202512.18.0")
    assert instance.tags == state.vm("aks-default-abc12").tags  # type: ignore[union-attr]
    assert await provider.create_failure("default-abc12") is None, "still being created is no failure"
    # A second attempt (a retried launch) adopts it, and returns as soon as its own wait is over.
    again = await provider.create(launch())
    assert (again.provider_id, again.state) == (instance.provider_id, InstanceState.CREATING)
    assert world.requests("PUT virtualMachines") == 1
    vm = state.vm("aks-default-abc12")
    assert vm is not None
    operation = state.operation(vm.operation or "")
    assert operation is not None
    operation.polls_left = 0
    assert await provider.create_failure("default-abc12") is None, "made is no failure either"
    assert (await provider.get("default-abc12")).state is InstanceState.RUNNING


async def test_a_vm_create_that_fails_after_the_launch_returned_is_reported_and_rules_the_offering_out(
    world: World,
) -> None:
    state = world.arm.state
    state.add_fault(
        Fault.fail_late("ZonalAllocationFailed", method="PUT", resource="virtualMachines", times=1)
    )
    state.add_fault(Fault.slow(polls=2, method="PUT", resource="virtualMachines", times=1))
    provider = impatient(world)

    instance = await provider.create(launch())

    assert instance.state is InstanceState.CREATING
    failures = [await provider.create_failure("default-abc12") for _ in range(4)]
    assert failures[0] is None, "the first look finds it still being created"
    failure = next(failure for failure in failures if failure is not None)
    assert isinstance(failure, InsufficientCapacityError)
    assert failure.code == "ZonalAllocationFailed"
    sku = provider.catalog.sku("Standard_D4s_v3")
    assert provider.unavailable.is_unavailable(sku, ZONE_1, OD)
    assert provider.unavailable.is_unavailable(sku, ZONE_1, SPOT), "ZonalAllocationFailed rules out the zone"
    vm = state.vm("aks-default-abc12")
    assert vm is not None and vm.provisioning_state == "Failed", "the failed VM is left for the lifecycle"


async def test_a_vm_that_is_gone_before_its_node_registered_is_a_create_failure(world: World) -> None:
    failure = await world.provider.create_failure("default-never")

    assert isinstance(failure, NotFoundError)
    assert "aks-default-never" in str(failure)


@pytest.mark.parametrize("client_options", [{"retry_total": 0}])
async def test_a_failed_poll_of_the_vm_create_leaves_the_vm_to_the_retry_which_adopts_it(
    world: World,
) -> None:
    state = world.arm.state
    state.add_fault(Fault.slow(polls=3, method="PUT", resource="virtualMachines", times=1))
    launching = asyncio.create_task(world.provider.create(launch()))
    await world.creating_vm.wait()
    state.add_fault(Fault.transient(500, method="GET", resource="operations", times=1))
    with pytest.raises(TransientError, match="InternalServerError"):
        await launching
    vm = state.vm("aks-default-abc12")
    assert vm is not None, "the VM being made is not deleted on a failed poll"

    instance = await world.provider.create(launch())

    assert instance.state is InstanceState.RUNNING
    assert state.counters.vms_created_again == [], "the retry adopts the VM rather than making it again"
    assert (state.counters.vms_created, state.counters.vms_deleted) == (1, 0)
    assert world.requests("PUT virtualMachines") == 1


@pytest.mark.parametrize("client_options", [{"retry_total": 0}])
async def test_a_launch_whose_vm_is_deleted_while_it_waits_makes_no_second_vm(world: World) -> None:
    # An attempt that outlived its lifecycle's launch (whose clean-up deleted the VM) must not make it again.
    await crash_mid_launch(world, polls_after=1000)
    waiting = asyncio.create_task(world.provider.create(launch()))
    await asyncio.sleep(0.2)
    world.arm.state.vanish(GROUP, "aks-default-abc12")  # gone between two of the attempt's looks

    with pytest.raises(TransientError, match="deleted while being created"):
        await asyncio.wait_for(waiting, 10)

    state = world.arm.state
    assert state.vm("aks-default-abc12") is None
    assert (state.counters.vms_created, state.counters.vms_created_again) == (1, [])


async def test_a_vm_whose_provisioning_failed_is_cleaned_up_at_once(world: World) -> None:
    world.arm.state.add_fault(Fault.fail_late("InternalExecutionError", times=1))

    with pytest.raises(TransientError, match="InternalExecutionError"):
        await world.provider.create(launch())

    assert world.arm.state.vm("aks-default-abc12") is None
    assert world.arm.state.nic("aks-default-abc12") is None


# --- the bootstrap secret ------------------------------------------------------------------------------


def chain(error: BaseException | None) -> list[str]:
    """The messages of an error and of the errors behind it, followed as tracebacks and Temporal failures do."""
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return messages


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


async def test_the_bootstrap_token_appears_in_no_result_error_log_or_heartbeat(
    world: World, logs: pytest.LogCaptureFixture
) -> None:
    world.arm.state.add_fault(
        Fault(
            action="reject",
            code="InvalidParameter",
            message=f"customData {SECRETS[1]} is invalid",
            method="PUT",
            resource="virtualMachines",
        )
    )
    seen: list[str] = []
    with pytest.raises(InvalidError) as raised:
        await world.provider.create(launch("bad-1"))
    seen.extend(chain(raised.value))
    world.arm.state.clear_faults()
    world.arm.state.add_fault(Fault.fail_late("AllocationFailed", "Standard_D4s_v3", times=1))
    with pytest.raises(InsufficientCapacityError) as late:
        await world.provider.create(launch("late-1"))
    seen.extend(chain(late.value))
    instance = await world.provider.create(launch("good-1", "Standard_D2s_v3"))
    seen.append(instance.model_dump_json())
    seen.extend(i.model_dump_json() for i in await world.provider.list())
    await world.provider.delete("good-1")
    seen.extend(record.getMessage() for record in logs.records)
    seen.extend(world.heartbeats)

    assert world.bootstraps, "the bootstrap was fetched"
    leaks = [text for text in seen for secret in SECRETS if secret in text]
    assert leaks == []


def test_missing_settings_are_named_together() -> None:
    with pytest.raises(AzureSettingsError) as raised:
        AzureSettings.load({"subscription_id": SUBSCRIPTION, "subnet_id": "not-a-subnet"}, name=str.upper)

    message = str(raised.value)
    for missing in ("RESOURCE_GROUP", "LOCATION", "CLUSTER_NAME", "KUBERNETES_VERSION", "SSH_PUBLIC_KEY"):
        assert missing in message
    assert "invalid Azure setting SUBNET_ID" in message


def test_the_kubelet_identity_comes_first_and_once() -> None:
    kubelet = "/identities/kubelet"

    assert settings(kubelet_identity_id=kubelet, node_identities=("/identities/a", kubelet)).identities == (
        kubelet,
        "/identities/a",
    )
