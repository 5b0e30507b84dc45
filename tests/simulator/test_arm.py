"""The ARM emulator, driven by the real async Azure SDK clients over HTTPS (trustme CA, bearer token)."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest
import pytest_asyncio
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient

from core.instancetypes.catalog import load_shipped_catalog
from simulator.arm import (
    ArmSettings,
    ArmState,
    Fault,
    FaultAction,
    ProvisioningState,
    ResourceType,
    RunningArm,
    StaticTokenCredential,
    resource_sku,
    serve_arm,
    start_arm,
)

SUBNET_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-vnet/providers/"
    "Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
)
BOOTSTRAP_TOKEN = "abcdef.0123456789abcdef"
CUSTOM_DATA = base64.b64encode(f"#!/bin/bash\nTLS_BOOTSTRAP_TOKEN={BOOTSTRAP_TOKEN}\n".encode()).decode()


@dataclass
class Azure:
    """An emulator and the real SDK clients pointed at it."""

    arm: RunningArm
    compute: ComputeManagementClient
    network: NetworkManagementClient

    @property
    def state(self) -> ArmState:
        return self.arm.state

    @property
    def rg(self) -> str:
        return self.arm.state.settings.resource_group


@pytest_asyncio.fixture
async def azure() -> AsyncIterator[Azure]:
    async with serve_arm(page_size=2) as arm, clients(arm) as connected:
        yield connected


class Clock:
    """A wall clock the test moves (`ArmState(wall_clock=...)`)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 24, 14, 0, 0, 250_000, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@asynccontextmanager
async def clients(arm: RunningArm, **options: Any) -> AsyncIterator[Azure]:
    """The compute and network clients against an emulator, with `options` over its test defaults."""
    credential = StaticTokenCredential()
    subscription = arm.state.settings.subscription_id
    async with (
        ComputeManagementClient(credential, subscription, **arm.client_options(**options)) as compute,
        NetworkManagementClient(credential, subscription, **arm.client_options(**options)) as network,
    ):
        yield Azure(arm, compute, network)


def nic_body(name: str, accelerated: bool = False) -> dict[str, Any]:
    return {
        "location": "eastus",
        "tags": {"karpenter.azure.com_cluster": "nodewright"},
        "properties": {
            "enableAcceleratedNetworking": accelerated,
            "ipConfigurations": [
                {"name": name, "properties": {"primary": True, "subnet": {"id": SUBNET_ID}}}
            ],
        },
    }


def vm_body(
    nic_id: str,
    vm_size: str = "Standard_D2s_v5",
    zone: str | None = "1",
    spot: bool = False,
    ephemeral: str | None = None,
    disk_gb: int = 128,
) -> dict[str, Any]:
    os_disk: dict[str, Any] = {"createOption": "FromImage", "diskSizeGB": disk_gb, "deleteOption": "Delete"}
    if ephemeral:
        os_disk["caching"] = "ReadOnly"
        os_disk["diffDiskSettings"] = {"option": "Local", "placement": ephemeral}
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": vm_size},
        "osProfile": {"computerName": "node", "adminUsername": "azureuser", "customData": CUSTOM_DATA},
        "storageProfile": {"osDisk": os_disk},
        "networkProfile": {
            "networkInterfaces": [{"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}]
        },
        "priority": "Regular",
    }
    if spot:
        properties.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
    body: dict[str, Any] = {
        "location": "eastus",
        "tags": {"karpenter.sh_nodepool": "default"},
        "properties": properties,
    }
    if zone:
        body["zones"] = [zone]
    return body


async def create_nic(azure: Azure, name: str, accelerated: bool = False) -> Any:
    poller = await azure.network.network_interfaces.begin_create_or_update(
        azure.rg, name, nic_body(name, accelerated)
    )
    return await poller.result()


async def create_vm(azure: Azure, name: str, **body: Any) -> Any:
    nic = await create_nic(azure, name)
    poller = await azure.compute.virtual_machines.begin_create_or_update(
        azure.rg, name, vm_body(nic.id, **body)
    )
    return await poller.result()


def requests_for(state: ArmState, method: str, resource: str, name: str | None = None) -> list[Any]:
    return [
        r
        for r in state.requests
        if r.method == method and r.resource == resource and (name is None or r.name == name)
    ]


# --- network interfaces ----------------------------------------------------------------------------------


async def test_nic_create_get_delete(azure: Azure) -> None:
    nic = await create_nic(azure, "aks-a")
    assert nic.provisioning_state == "Succeeded"
    assert nic.id.endswith(f"/resourceGroups/{azure.rg}/providers/Microsoft.Network/networkInterfaces/aks-a")
    fetched = await azure.network.network_interfaces.get(azure.rg, "aks-a")
    assert fetched.ip_configurations[0].private_ip_address == "10.224.0.4"
    assert fetched.ip_configurations[0].subnet.id == SUBNET_ID
    assert fetched.tags == {"karpenter.azure.com_cluster": "nodewright"}
    assert requests_for(azure.state, "GET", "operations"), "the create was polled as an LRO"

    await (await azure.network.network_interfaces.begin_delete(azure.rg, "aks-a")).result()
    with pytest.raises(ResourceNotFoundError) as missing:
        await azure.network.network_interfaces.get(azure.rg, "aks-a")
    assert missing.value.error is not None and missing.value.error.code == "ResourceNotFound"
    assert (azure.state.counters.nics_created, azure.state.counters.nics_deleted) == (1, 1)


async def test_nic_delete_is_polled_through_location_until_204(azure: Azure) -> None:
    await create_nic(azure, "aks-a")
    azure.state.add_fault(Fault.slow(polls=3, resource="networkInterfaces"))
    await (await azure.network.network_interfaces.begin_delete(azure.rg, "aks-a")).result()
    statuses = [r.status for r in requests_for(azure.state, "GET", "operations")][-4:]
    assert statuses == [202, 202, 202, 204]
    assert azure.state.nic("aks-a") is None


async def test_nic_list_is_paged(azure: Azure) -> None:
    for name in ("aks-a", "aks-b", "aks-c"):
        await create_nic(azure, name)
    names = [nic.name async for nic in azure.network.network_interfaces.list(azure.rg)]
    assert names == ["aks-a", "aks-b", "aks-c"]
    assert len(requests_for(azure.state, "GET", "networkInterfaces", "")) == 2


async def test_a_nic_attached_to_a_vm_cannot_be_deleted(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    with pytest.raises(HttpResponseError) as in_use:
        await azure.network.network_interfaces.begin_delete(azure.rg, "aks-a")
    assert in_use.value.status_code == 400
    assert in_use.value.error is not None and in_use.value.error.code == "NicInUse"


# --- virtual machines ------------------------------------------------------------------------------------


async def test_vm_create_get_list_delete(azure: Azure) -> None:
    for name in ("aks-a", "aks-b", "aks-c"):
        vm = await create_vm(azure, name)
        assert vm.provisioning_state == "Succeeded"
    vm = await azure.compute.virtual_machines.get(azure.rg, "aks-b")
    assert vm.hardware_profile.vm_size == "Standard_D2s_v5"
    assert vm.zones == ["1"]
    assert vm.vm_id and vm.time_created is not None
    assert vm.tags == {"karpenter.sh_nodepool": "default"}
    assert vm.id == (
        f"/subscriptions/{azure.state.settings.subscription_id}/resourceGroups/{azure.rg}"
        "/providers/Microsoft.Compute/virtualMachines/aks-b"
    )
    names = [vm.name async for vm in azure.compute.virtual_machines.list(azure.rg)]
    assert names == ["aks-a", "aks-b", "aks-c"]
    assert len(requests_for(azure.state, "GET", "virtualMachines", "")) == 2, "three VMs, two per page"

    await (await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-b", force_deletion=True)).result()
    with pytest.raises(ResourceNotFoundError):
        await azure.compute.virtual_machines.get(azure.rg, "aks-b")
    # deleteOption Delete took the NIC and the OS disk with the VM.
    assert azure.state.nic("aks-b") is None
    assert len(azure.state.resources(ResourceType.DISK)) == 2
    counters = azure.state.counters
    assert (counters.vms_created, counters.vms_deleted, counters.nics_deleted, counters.disks_deleted) == (
        3,
        1,
        1,
        1,
    )
    assert counters.vms_created_again == []
    await create_vm(azure, "aks-b")
    assert counters.vms_created_again == ["aks-b"], "a VM made again under a name a VM had"


async def test_list_all_spans_resource_groups(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    nic = await create_nic(azure, "aks-b")
    await azure.compute.virtual_machines.begin_create_or_update("other-rg", "aks-b", vm_body(nic.id))
    assert [vm.name async for vm in azure.compute.virtual_machines.list_all()] == ["aks-a", "aks-b"]
    assert [vm.name async for vm in azure.compute.virtual_machines.list("OTHER-RG")] == ["aks-b"]


async def test_what_a_vm_deletes_and_what_it_leaves(azure: Azure) -> None:
    nic = await create_nic(azure, "aks-a")
    body = vm_body(nic.id)
    body["properties"]["storageProfile"]["osDisk"]["deleteOption"] = "Detach"
    body["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] = "Detach"
    vm = await (await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", body)).result()
    disk_name = vm.storage_profile.os_disk.name
    assert vm.storage_profile.os_disk.managed_disk.id.endswith(f"/disks/{disk_name}")
    disk = await azure.compute.disks.get(azure.rg, disk_name)
    assert (disk.managed_by, disk.disk_size_gb) == (vm.id, 128)
    with pytest.raises(ResourceExistsError) as attached:
        await azure.compute.disks.begin_delete(azure.rg, disk_name)
    assert attached.value.error is not None and attached.value.error.code == "OperationNotAllowed"

    await (await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-a")).result()
    left = await azure.network.network_interfaces.get(azure.rg, "aks-a")
    assert left.virtual_machine is None
    assert (await azure.compute.disks.get(azure.rg, disk_name)).disk_state == "Unattached"
    await (await azure.network.network_interfaces.begin_delete(azure.rg, "aks-a")).result()
    await (await azure.compute.disks.begin_delete(azure.rg, disk_name)).result()
    assert azure.state.resources() == []


async def test_tags_are_updated_in_place(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    tags = {"karpenter.sh_nodepool": "default", "team": "blue"}
    nic = await azure.network.network_interfaces.update_tags(azure.rg, "aks-a", {"tags": tags})
    assert nic.tags == tags
    vm = await (await azure.compute.virtual_machines.begin_update(azure.rg, "aks-a", {"tags": tags})).result()
    assert vm.tags == tags
    with pytest.raises(HttpResponseError) as reserved:
        await azure.network.network_interfaces.update_tags(
            azure.rg, "aks-a", {"tags": {"karpenter.sh/nodepool": "x"}}
        )
    assert reserved.value.error is not None and reserved.value.error.code == "InvalidTagNameCharacters"


async def test_deleting_what_is_gone_is_204_and_done(azure: Azure) -> None:
    poller = await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-never")
    assert await poller.result() is None
    assert requests_for(azure.state, "DELETE", "virtualMachines")[0].status == 204


async def test_spot_vm_body_is_stored_as_given(azure: Azure) -> None:
    vm = await create_vm(azure, "aks-spot", vm_size="Standard_D4ds_v5", spot=True, ephemeral="ResourceDisk")
    assert vm.priority == "Spot"
    assert vm.eviction_policy == "Delete"
    assert vm.billing_profile.max_price == -1
    os_disk = vm.storage_profile.os_disk
    assert (os_disk.diff_disk_settings.option, os_disk.diff_disk_settings.placement) == (
        "Local",
        "ResourceDisk",
    )
    assert os_disk.caching == "ReadOnly"
    assert os_disk.disk_size_gb == 128
    stored = azure.state.vm("aks-spot")
    assert stored is not None
    assert stored.body["properties"]["billingProfile"] == {"maxPrice": -1}
    assert stored.body["properties"]["hardwareProfile"] == {"vmSize": "Standard_D4ds_v5"}
    assert azure.state.counters.disks_created == 0, "an ephemeral OS disk is no managed disk"


async def test_custom_data_is_accepted_but_never_returned_or_logged(
    azure: Azure, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    vm = await create_vm(azure, "aks-a")
    assert vm.os_profile.custom_data is None
    assert vm.os_profile.admin_username == "azureuser"
    stored = azure.state.vm("aks-a")
    assert stored is not None and stored.custom_data == CUSTOM_DATA

    raw_get = await azure.compute.virtual_machines.get(
        azure.rg, "aks-a", cls=lambda response, _model, _headers: response.http_response.text()
    )
    async with emulator_session(azure.arm) as session:
        async with session.get(
            f"{azure.arm.url}{vm.id.rsplit('/', 1)[0]}",
            params={"api-version": "2026-04-01"},
            headers={"Authorization": "Bearer x"},
        ) as response:
            raw_list = await response.text()
        async with session.get(f"{azure.arm.url}/_emulator/resources") as response:
            summary = await response.text()
    assert "aks-a" in raw_list and "aks-a" in summary
    everything = "\n".join([raw_get, raw_list, summary, *(r.getMessage() for r in caplog.records)])
    for secret in (CUSTOM_DATA, BOOTSTRAP_TOKEN):
        assert secret not in everything
    assert "customData" not in raw_get


async def test_a_repeated_put_is_an_update_and_makes_no_second_vm(azure: Azure) -> None:
    vm = await create_vm(azure, "aks-a")
    body = vm_body(vm.network_profile.network_interfaces[0].id)
    again = await (
        await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", body)
    ).result()
    assert again.vm_id == vm.vm_id
    assert [r.status for r in requests_for(azure.state, "PUT", "virtualMachines")] == [201, 200]
    assert azure.state.counters.vms_created == 1

    with pytest.raises(ResourceExistsError) as moved:
        await azure.compute.virtual_machines.begin_create_or_update(
            azure.rg, "aks-a", {**body, "zones": ["2"]}
        )
    assert moved.value.error is not None and moved.value.error.code == "PropertyChangeNotAllowed"
    other_data = vm_body(vm.network_profile.network_interfaces[0].id)
    other_data["properties"]["osProfile"]["customData"] = base64.b64encode(b"other").decode()
    with pytest.raises(ResourceExistsError) as changed:
        await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", other_data)
    assert changed.value.error is not None and changed.value.error.code == "PropertyChangeNotAllowed"


async def test_reading_the_vm_moves_its_create_on_without_the_poller(azure: Azure) -> None:
    """A worker that lost its poller (crash mid-LRO) GETs the VM until it is no longer Creating."""
    nic = await create_nic(azure, "aks-a")
    azure.state.settings.create_polls = 2
    await azure.compute.virtual_machines.begin_create_or_update(
        azure.rg, "aks-a", vm_body(nic.id), polling=False
    )
    states = [
        (await azure.compute.virtual_machines.get(azure.rg, "aks-a")).provisioning_state for _ in range(3)
    ]
    assert states == ["Creating", "Creating", "Succeeded"]
    view = await azure.compute.virtual_machines.get(azure.rg, "aks-a", expand="instanceView")
    assert [status.code for status in view.instance_view.statuses] == [
        "ProvisioningState/succeeded",
        "PowerState/running",
    ]


async def test_a_vm_create_takes_vm_create_seconds_however_often_it_is_read(tmp_path: Path) -> None:
    """Azure's VM creates take tens of seconds: reads before `vm_create_seconds` answer Creating; the NIC's
    create is not held."""
    clock = Clock()
    arm = await start_arm(ArmState(ArmSettings(vm_create_seconds=30), wall_clock=clock), tmp_path)
    try:
        async with clients(arm) as azure:
            nic = await create_nic(azure, "aks-a")
            await azure.compute.virtual_machines.begin_create_or_update(
                azure.rg, "aks-a", vm_body(nic.id), polling=False
            )

            async def state() -> str:
                return (await azure.compute.virtual_machines.get(azure.rg, "aks-a")).provisioning_state

            early = [await state() for _ in range(5)]
            clock.now += timedelta(seconds=29)
            almost = await state()
            clock.now += timedelta(seconds=1)
            assert (early, almost, await state()) == (["Creating"] * 5, "Creating", "Succeeded")
    finally:
        await arm.close()


async def test_a_vm_create_ends_after_vm_create_seconds_though_nobody_reads_it(tmp_path: Path) -> None:
    """As Azure's do: a launch that stops polling (it returned while the VM was being created) still gets its VM,
    and the node agents hear of it. A slow fault's create waits for its polls to be read as well."""
    arm = await start_arm(ArmState(ArmSettings(vm_create_seconds=0.3)), tmp_path)
    changes: list[str] = []
    arm.state.on_change = lambda: changes.append("changed")
    try:
        async with clients(arm) as azure:
            nic = await create_nic(azure, "aks-a")
            arm.state.add_fault(Fault.slow(polls=2, method="PUT", resource="virtualMachines", name="aks-b"))
            for name in ("aks-a", "aks-b"):
                await azure.compute.virtual_machines.begin_create_or_update(
                    azure.rg,
                    name,
                    vm_body(nic.id if name == "aks-a" else (await create_nic(azure, name)).id),
                    polling=False,
                )
            ended_before = len(changes)

            def provisioning(name: str) -> str:
                vm = arm.state.vm(name)
                assert vm is not None
                return vm.provisioning_state

            assert (provisioning("aks-a"), provisioning("aks-b")) == ("Creating", "Creating")
            await asyncio.sleep(1.0)
            assert (provisioning("aks-a"), provisioning("aks-b")) == ("Succeeded", "Creating")
            assert len(changes) > ended_before, "the end of the create is a change the node agents hear of"
            states = [
                (await azure.compute.virtual_machines.get(azure.rg, "aks-b")).provisioning_state
                for _ in "abc"
            ]
            assert states == ["Creating", "Creating", "Succeeded"], "the slow create ends on its last poll"
    finally:
        await arm.close()


async def test_a_delete_overtaking_a_create_cancels_it(azure: Azure) -> None:
    nic = await create_nic(azure, "aks-a")
    create = await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", vm_body(nic.id))
    await (await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-a")).result()
    with pytest.raises(HttpResponseError) as canceled:
        await create.result()
    assert canceled.value.error is not None and canceled.value.error.code == "OperationPreempted"
    assert azure.state.vm("aks-a") is None


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"vm_size": "Standard_Nope"}, 409, "SkuNotAvailable"),
        (
            {"vm_size": "Standard_B2s", "accelerated": True},
            400,
            "VMSizeIsNotPermittedToEnableAcceleratedNetworking",
        ),
        ({"vm_size": "Standard_D2s_v3", "ephemeral": "CacheDisk", "disk_gb": 128}, 400, "InvalidParameter"),
        ({"vm_size": "Standard_D2s_v5", "ephemeral": "ResourceDisk"}, 400, "InvalidParameter"),
        ({"missing_nic": True}, 400, "InvalidResourceReference"),
        ({"custom_data": "not base64!"}, 400, "InvalidParameter"),
        ({"location": "westus"}, 400, "LocationNotAvailableForResourceType"),
        ({"tags": {"karpenter.sh/nodepool": "default"}}, 400, "InvalidTagNameCharacters"),
    ],
)
async def test_invalid_vm_creates_are_refused_as_azure_does(
    azure: Azure, change: dict[str, Any], status: int, code: str
) -> None:
    nic = await create_nic(azure, "aks-a", accelerated=change.get("accelerated", False))
    nic_id = nic.id.replace("aks-a", "aks-missing") if change.get("missing_nic") else nic.id
    body = vm_body(
        nic_id,
        vm_size=change.get("vm_size", "Standard_D2s_v5"),
        ephemeral=change.get("ephemeral"),
        disk_gb=change.get("disk_gb", 30),
    )
    if "custom_data" in change:
        body["properties"]["osProfile"]["customData"] = change["custom_data"]
    body["location"] = change.get("location", "eastus")
    body["tags"] = change.get("tags", body["tags"])
    with pytest.raises(HttpResponseError) as refused:
        await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", body)
    assert refused.value.status_code == status
    assert refused.value.error is not None and refused.value.error.code == code
    assert azure.state.counters.vms_created == 0


async def test_an_ephemeral_disk_that_fits_its_placement_is_accepted(azure: Azure) -> None:
    vm = await create_vm(azure, "aks-a", vm_size="Standard_D2s_v3", ephemeral="CacheDisk", disk_gb=50)
    assert vm.storage_profile.os_disk.diff_disk_settings.placement == "CacheDisk"


# --- resource SKUs ---------------------------------------------------------------------------------------


async def test_resource_skus_filtered_by_location(azure: Azure) -> None:
    catalog = load_shipped_catalog("eastus")
    skus = [sku async for sku in azure.compute.resource_skus.list(filter="location eq 'eastus'")]
    vm_skus = {sku.name: sku for sku in skus if sku.resource_type == "virtualMachines"}
    assert set(vm_skus) == {sku.name for sku in catalog.skus}
    assert {sku.resource_type for sku in skus} == {"virtualMachines", "disks"}

    d2s_v3 = vm_skus["Standard_D2s_v3"]
    capabilities = {c.name: c.value for c in d2s_v3.capabilities}
    assert (d2s_v3.family, d2s_v3.tier, d2s_v3.size) == ("standardDSv3Family", "Standard", "D2s_v3")
    assert d2s_v3.location_info[0].location == "eastus"
    assert d2s_v3.location_info[0].zones == ["1", "2", "3"]
    assert d2s_v3.restrictions == []
    assert capabilities["vCPUs"] == "2"
    assert capabilities["MemoryGB"] == "8"
    assert capabilities["CpuArchitectureType"] == "x64"
    assert capabilities["LowPriorityCapable"] == "True"
    assert capabilities["EphemeralOSDiskSupported"] == "True"
    assert capabilities["SupportedEphemeralOSDiskPlacements"] == "ResourceDisk,CacheDisk"
    assert capabilities["CachedDiskBytes"] == str(50 * 2**30)
    assert capabilities["MaxResourceVolumeMB"] == str(16 * 1024)
    assert capabilities["HyperVGenerations"] == "V1,V2"
    arm64 = {c.name: c.value for c in vm_skus["Standard_D16plds_v5"].capabilities}
    assert arm64["CpuArchitectureType"] == "Arm64"
    gpu = {c.name: c.value for c in vm_skus["Standard_NC24ads_A100_v4"].capabilities}
    assert gpu["GPUs"] == "1"

    elsewhere = [sku async for sku in azure.compute.resource_skus.list(filter="location eq 'westus'")]
    assert elsewhere == []


async def test_restrictions_show_in_the_sku_list_and_refuse_creates(azure: Azure) -> None:
    azure.state.restrict("Standard_D2s_v5", zones=["eastus-2"])
    azure.state.restrict("Standard_D4s_v5")
    skus = {sku.name: sku async for sku in azure.compute.resource_skus.list(filter="location eq 'eastus'")}
    zonal = skus["Standard_D2s_v5"].restrictions[0]
    assert (zonal.type, zonal.reason_code, zonal.restriction_info.zones) == (
        "Zone",
        "NotAvailableForSubscription",
        ["2"],
    )
    assert skus["Standard_D4s_v5"].restrictions[0].type == "Location"

    assert (await create_vm(azure, "aks-a", zone="1")).provisioning_state == "Succeeded"
    for name, size, zone in (("aks-b", "Standard_D2s_v5", "2"), ("aks-c", "Standard_D4s_v5", None)):
        with pytest.raises(ResourceExistsError) as refused:
            await create_vm(azure, name, vm_size=size, zone=zone)
        assert refused.value.error is not None and refused.value.error.code == "SkuNotAvailable"


def test_sku_capabilities_describe_nvme_temp_storage() -> None:
    catalog = load_shipped_catalog("eastus")
    nvme = next(sku for sku in catalog.skus if sku.temp_disk_nvme and sku.ephemeral_os_disk_supported)
    capabilities = {c["name"]: c["value"] for c in resource_sku(nvme, catalog)["capabilities"]}
    assert capabilities["SupportedEphemeralOSDiskPlacements"] == "NvmeDisk"
    assert capabilities["NvmeDiskSizeInMiB"] == str(int((nvme.temp_disk_gib or 0) * 1024))
    assert capabilities["MaxResourceVolumeMB"] == "0"


# --- faults ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code", "wording"),
    [
        (
            Fault.sku_not_available("Standard_D2s_v5", zone="eastus-1"),
            "SkuNotAvailable",
            "Capacity Restrictions",
        ),
        (Fault.quota_exceeded("family"), "OperationNotAllowed", "standardDSv5Family Cores quota"),
        (Fault.quota_exceeded("spot", limit=0), "OperationNotAllowed", "LowPriorityCores quota"),
        (
            Fault.quota_exceeded("regional"),
            "OperationNotAllowed",
            "exceeding approved Total Regional Cores quota",
        ),
    ],
)
async def test_synchronous_create_errors(azure: Azure, fault: Fault, code: str, wording: str) -> None:
    azure.state.add_fault(fault)
    with pytest.raises(ResourceExistsError) as refused:
        await create_vm(azure, "aks-a", spot=fault.quota == "spot")
    assert refused.value.status_code == 409
    assert refused.value.error is not None and refused.value.error.code == code
    assert wording in refused.value.error.message
    assert azure.state.counters.vms_created == 0


async def test_quota_message_carries_the_limit(azure: Azure) -> None:
    azure.state.add_fault(Fault.quota_exceeded("family", vm_size="Standard_D2s_v5", limit=0))
    with pytest.raises(ResourceExistsError) as refused:
        await create_vm(azure, "aks-a")
    assert refused.value.error is not None
    assert "Current Limit: 0" in refused.value.error.message
    assert "Additional Required: 2" in refused.value.error.message


@pytest.mark.parametrize(
    "code",
    [
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    ],
)
async def test_allocation_failures_fail_the_lro_late(azure: Azure, code: str) -> None:
    azure.state.add_fault(Fault.fail_late(code, vm_size="Standard_D2s_v5", zone="1"))
    nic = await create_nic(azure, "aks-a")
    poller = await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-a", vm_body(nic.id))
    with pytest.raises(HttpResponseError) as failed:
        await poller.result()
    assert failed.value.status_code == 200
    assert failed.value.error is not None and failed.value.error.code == code
    assert poller.status() == "Failed"
    vm = await azure.compute.virtual_machines.get(azure.rg, "aks-a")
    assert vm.provisioning_state == ProvisioningState.FAILED
    assert azure.state.counters.vms_created == 1


async def test_faults_match_only_their_size_zone_and_capacity_type(azure: Azure) -> None:
    azure.state.add_fault(Fault.sku_not_available("Standard_D2s_v5", zone="2", capacity_type="spot"))
    assert (await create_vm(azure, "aks-a", zone="2")).provisioning_state == "Succeeded"
    assert (await create_vm(azure, "aks-b", zone="1", spot=True)).provisioning_state == "Succeeded"
    assert (await create_vm(azure, "aks-c", vm_size="Standard_D4s_v5", zone="2", spot=True)).name == "aks-c"
    with pytest.raises(ResourceExistsError):
        await create_vm(azure, "aks-d", zone="2", spot=True)


async def test_a_fault_fires_its_times_then_is_gone(azure: Azure) -> None:
    azure.state.add_fault(Fault.sku_not_available(times=1))
    with pytest.raises(ResourceExistsError):
        await create_vm(azure, "aks-a")
    assert azure.state.faults() == []
    assert (await create_vm(azure, "aks-b")).provisioning_state == "Succeeded"


async def test_a_fault_with_a_rate_fires_on_about_that_share_of_its_requests() -> None:
    async with serve_arm() as arm, clients(arm, retry_total=0) as azure:
        await create_nic(azure, "aks-a")
        azure.state.add_fault(Fault.transient(500, method="GET", resource="networkInterfaces", rate=0.25))
        failed = 0
        for _ in range(200):
            try:
                await azure.network.network_interfaces.get(azure.rg, "aks-a")
            except HttpResponseError as error:
                assert error.status_code == 500
                failed += 1
        # 50 expected; the emulator's generator is seeded, so this is one fixed draw
        assert 25 <= failed <= 75
        assert len(azure.state.faults()) == 1


async def test_throttling_retry_after_is_honoured_by_azure_core(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    azure.state.add_fault(Fault.throttle(retry_after=0.3, method="GET", resource="virtualMachines", times=1))
    vm = await azure.compute.virtual_machines.get(azure.rg, "aks-a")
    assert vm.name == "aks-a"
    throttled, retried = requests_for(azure.state, "GET", "virtualMachines", "aks-a")[-2:]
    assert (throttled.status, retried.status) == (429, 200)
    assert retried.at - throttled.at >= 0.3


async def test_throttling_surfaces_as_429_when_retries_run_out() -> None:
    async with serve_arm() as arm, clients(arm, retry_total=0) as azure:
        azure.state.add_fault(Fault.throttle(retry_after=7))
        with pytest.raises(HttpResponseError) as throttled:
            await azure.compute.virtual_machines.get(azure.rg, "aks-a")
        assert throttled.value.status_code == 429
        assert throttled.value.error is not None and throttled.value.error.code == "TooManyRequests"
        assert throttled.value.response.headers["Retry-After"] == "7"


@pytest.mark.parametrize(("status", "code"), [(500, "InternalServerError"), (503, "ServiceUnavailable")])
async def test_transient_errors_are_retried_then_surface(status: Literal[500, 503], code: str) -> None:
    async with serve_arm() as arm:
        async with clients(arm) as azure:
            azure.state.add_fault(Fault.transient(status, method="PUT", times=1))
            assert (await create_nic(azure, "aks-a")).name == "aks-a"
            assert [r.status for r in requests_for(azure.state, "PUT", "networkInterfaces")] == [status, 201]
        async with clients(arm, retry_total=0) as azure:
            azure.state.add_fault(Fault.transient(status))
            with pytest.raises(HttpResponseError) as failed:
                await azure.network.network_interfaces.get(azure.rg, "aks-a")
            assert failed.value.status_code == status
            assert failed.value.error is not None and failed.value.error.code == code


async def test_slow_deletes_take_their_polls(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    azure.state.add_fault(Fault.slow(polls=4, resource="virtualMachines"))
    polls_before = len(requests_for(azure.state, "GET", "operations"))
    poller = await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-a")
    assert azure.state.vm("aks-a") is not None
    assert azure.state.vm("aks-a").provisioning_state == "Deleting"
    await poller.result()
    assert len(requests_for(azure.state, "GET", "operations")) - polls_before == 5
    assert azure.state.vm("aks-a") is None


async def test_a_lost_create_response_is_retried_without_a_second_vm(azure: Azure) -> None:
    azure.state.add_fault(Fault.drop_response(method="PUT", resource="virtualMachines", times=1))
    vm = await create_vm(azure, "aks-a")
    assert vm.provisioning_state == "Succeeded"
    assert [r.status for r in requests_for(azure.state, "PUT", "virtualMachines")] == [201, 200]
    counters = azure.state.counters
    assert (counters.vms_created, counters.responses_dropped) == (1, 1)


async def test_a_retried_create_joins_the_running_operation(azure: Azure) -> None:
    """The retry after a lost response must not hide the create's late failure."""
    azure.state.add_fault(Fault.fail_late("ZonalAllocationFailed"))
    azure.state.add_fault(Fault.drop_response(method="PUT", resource="virtualMachines", times=1))
    with pytest.raises(HttpResponseError) as failed:
        await create_vm(azure, "aks-a")
    assert failed.value.error is not None and failed.value.error.code == "ZonalAllocationFailed"
    assert azure.state.counters.vms_created == 1


async def test_lost_responses_surface_when_retries_run_out() -> None:
    async with serve_arm() as arm, clients(arm, retry_total=0) as azure:
        azure.state.add_fault(Fault.drop_response(method="PUT"))
        with pytest.raises(ServiceRequestError, match="Server disconnected"):
            await create_nic(azure, "aks-a")
        assert azure.state.nic("aks-a") is not None, "the NIC was made; only the answer was lost"


async def test_faults_through_the_control_endpoint(azure: Azure) -> None:
    async with emulator_session(azure.arm) as session:
        fault = {
            "action": "fail_late",
            "code": "ZonalAllocationFailed",
            "vm_size": "Standard_D2s_v5",
            "zone": "1",
        }
        async with session.post(f"{azure.arm.url}/_emulator/faults", json=fault) as response:
            assert response.status == 201
            created = await response.json()
        async with session.post(f"{azure.arm.url}/_emulator/faults", json={"action": "reject"}) as response:
            assert response.status == 400
        with pytest.raises(HttpResponseError) as failed:
            await create_vm(azure, "aks-a")
        assert failed.value.error is not None and failed.value.error.code == "ZonalAllocationFailed"
        async with session.get(f"{azure.arm.url}/_emulator/counters") as response:
            counters = await response.json()
        assert counters["vms_created"] == 1 and counters["faults_fired"] == 1
        assert counters["fired_by_fault"] == {created["id"]: 1}
        async with session.delete(f"{azure.arm.url}/_emulator/faults/{created['id']}") as response:
            assert response.status == 204
    assert azure.state.faults() == []
    assert FaultAction(created["action"]) is FaultAction.FAIL_LATE


# --- the front door --------------------------------------------------------------------------------------


def emulator_session(arm: RunningArm) -> aiohttp.ClientSession:
    context = ssl.create_default_context(cafile=str(arm.ca_pem))
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))


async def test_requests_need_a_bearer_token_and_an_api_version(azure: Azure) -> None:
    subscription = azure.state.settings.subscription_id
    vms = f"{azure.arm.url}/subscriptions/{subscription}/resourceGroups/{azure.rg}/providers/Microsoft.Compute/virtualMachines"
    async with emulator_session(azure.arm) as session:
        async with session.get(vms, params={"api-version": "2026-04-01"}) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "AuthenticationFailed"
        async with session.get(vms, headers={"Authorization": "Bearer x"}) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == "MissingApiVersionParameter"
        async with session.get(
            vms, params={"api-version": "2026-04-01"}, headers={"Authorization": "Bearer x"}
        ) as response:
            assert response.status == 200
            assert await response.json() == {"value": []}


async def test_a_configured_token_must_match() -> None:
    async with serve_arm(token="the-right-one") as arm:
        async with clients(arm) as azure:
            with pytest.raises(HttpResponseError) as denied:
                await azure.compute.virtual_machines.get(azure.rg, "aks-a")
            assert denied.value.status_code == 401
            assert denied.value.error is not None and denied.value.error.code == "InvalidAuthenticationToken"
        credential = arm.credential()
        async with ComputeManagementClient(
            credential, arm.state.settings.subscription_id, **arm.client_options()
        ) as compute:
            with pytest.raises(ResourceNotFoundError):
                await compute.virtual_machines.get(arm.state.settings.resource_group, "aks-a")
        assert credential.scopes == ["https://management.azure.com/.default"]


async def test_unknown_subscriptions_and_resource_groups_are_404() -> None:
    async with serve_arm(resource_groups=["MC_rg"], resource_group="MC_rg") as arm, clients(arm) as azure:
        with pytest.raises(ResourceNotFoundError) as no_group:
            await azure.compute.virtual_machines.get("other-rg", "aks-a")
        assert no_group.value.error is not None and no_group.value.error.code == "ResourceGroupNotFound"
        with pytest.raises(ResourceNotFoundError) as not_found:
            await azure.compute.virtual_machines.get("mc_RG", "aks-a")
        assert not_found.value.error is not None and not_found.value.error.code == "ResourceNotFound"


async def test_the_clusters_subnet_and_the_listed_ones_exist_and_others_are_not_found(azure: Azure) -> None:
    subnet = await azure.network.subnets.get(azure.rg, "aks-vnet-12345678", "aks-subnet")
    assert subnet.name == "aks-subnet" and subnet.provisioning_state == "Succeeded"
    assert subnet.id is not None and subnet.id.endswith(
        "/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
    )
    azure.state.settings.subnets = [
        f"/subscriptions/{azure.state.settings.subscription_id}/resourceGroups/net/providers/Microsoft.Network"
        "/virtualNetworks/vnet/subnets/nodes"
    ]
    assert (
        await azure.network.subnets.get("NET", "VNET", "nodes")
    ).name == "nodes"  # names are case-insensitive
    with pytest.raises(ResourceNotFoundError) as missing:
        await azure.network.subnets.get("net", "vnet", "pods")
    assert missing.value.error is not None and missing.value.error.code == "NotFound"
    with pytest.raises(ResourceNotFoundError) as no_vnet:
        await azure.network.subnets.get("net", "other", "nodes")
    assert no_vnet.value.error is not None and no_vnet.value.error.code == "ResourceNotFound"
