"""Windows nodes through the real SDK clients against the ARM emulator: the VM made as AKS makes a Windows node
(OS disk, computer name, admin account, license type, billing tag, the AKSWindows image), its bootstrap extension
(also for a create that outlives the launch), what a launch refuses before calling Azure, and the Windows
bootstrap a node agent reads back."""

from __future__ import annotations

import base64
import logging
from datetime import timedelta
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute.models import VirtualMachine

from activities.azure import AzureCloudProvider
from activities.azure.bootstrap import BootstrapRequest, bootstrap_request, render
from activities.azure.names import NodeNames, nic_id
from activities.azure.vm import WindowsOS, vm_body
from activities.azure.windows import (
    BOOTSTRAP_EXTENSION,
    MAX_COMPUTER_NAME_LENGTH,
    WindowsAdmin,
    admin_from,
    computer_name,
)
from core.api.aksnodeclass import AKSNodeClass
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import InstanceState, LaunchRequest
from core.errors import InvalidError
from core.instancetypes.catalog import load_shipped_catalog
from simulator.arm import Fault
from simulator.nodeagent import runs_custom_data, windows_node_info
from simulator.nodeboot import read_custom_data
from tests.activities.azure.test_provider import GROUP, SUBSCRIPTION, TOKEN, World, launch, settings

GALLERY_SUBSCRIPTION = "109a5e88-712a-48ae-9078-9ca8b3c81345"
ADMIN = WindowsAdmin("azureuser", "Str0ng-Passw0rd!x")
SCRIPT = f"$global:TLSBootstrapToken = '{TOKEN}'\n"


def windows_nodeclass(family: str = "Windows2022", **status: Any) -> AKSNodeClass:
    return AKSNodeClass.parse(
        {"metadata": {"name": "windows"}, "spec": {"imageFamily": family}, "status": status}
    )


def windows_provider(
    world: World, nodeclass: AKSNodeClass, *, admin: WindowsAdmin | None = ADMIN, **overrides: Any
) -> AzureCloudProvider:
    async def node_class(request: LaunchRequest) -> AKSNodeClass:
        return nodeclass

    async def bootstrap(request: BootstrapRequest) -> str:
        world.bootstraps.append(request)
        return SCRIPT

    async def windows_admin() -> WindowsAdmin:
        assert admin is not None
        return admin

    return AzureCloudProvider(
        world.provider.compute,
        world.provider.network,
        settings(**{"image_gallery_subscription_id": GALLERY_SUBSCRIPTION, **overrides}),
        bootstrap,
        node_class=node_class,
        heartbeat=world.heartbeats.append,
        windows_admin=windows_admin if admin is not None else None,
    )


# --- names and accounts --------------------------------------------------------------------------------


def test_a_computer_name_fits_windows_and_keeps_the_nodepool_and_the_nodeclaim_apart() -> None:
    assert computer_name("aks-win-x7k2p", "win-x7k2p") == "aks-win-x7k2p"
    first = computer_name("aks-windows-x7k2p", "windows-x7k2p")
    second = computer_name("aks-windows-q9d4m", "windows-q9d4m")
    other_pool = computer_name("aks-windows2025-x7k2p", "windows2025-x7k2p")

    assert len(first) <= MAX_COMPUTER_NAME_LENGTH and first.startswith("aks") and first.endswith("-x7k2p")
    assert first[:9] == second[:9] and first != second
    assert other_pool != first
    assert computer_name("aks-windows-x7k2p", "windows-x7k2p") == first, "deterministic"
    odd = computer_name("aks-averyveryveryverylongname", "averyveryveryverylongname")
    assert len(odd) <= MAX_COMPUTER_NAME_LENGTH and not odd.isdigit()


@pytest.mark.parametrize(
    ("secret", "key"),
    [
        ({"username": "administrator", "password": ADMIN.password}, "username"),
        ({"password": ADMIN.password}, "username"),
        ({"username": "azureuser", "password": "short-Pass1"}, "password"),
        ({"username": "azureuser", "password": "alllowercaseletters"}, "password"),
    ],
)
def test_an_admin_account_aks_would_refuse_is_named_by_key_not_value(
    secret: dict[str, str], key: str
) -> None:
    with pytest.raises(InvalidError) as raised:
        admin_from(secret, "kube-system/windows-admin")

    message = str(raised.value)
    assert f"Secret kube-system/windows-admin: data.{key}" in message
    assert secret.get("password", "") not in message or not secret.get("password")


def test_a_good_admin_account_is_read_and_its_password_never_shown() -> None:
    admin = admin_from({"username": "azureuser", "password": ADMIN.password}, "kube-system/windows-admin")

    assert admin == ADMIN
    assert ADMIN.password not in repr(admin)


# --- the launch -----------------------------------------------------------------------------------------


async def test_a_windows_launch_makes_the_vm_aks_makes_and_installs_its_bootstrap_extension(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = windows_provider(world, windows_nodeclass(), windows_license_type="Windows_Server")

    instance = await provider.create(launch("windows-x7k2p", "Standard_D4s_v3"))

    assert instance.state is InstanceState.RUNNING
    vm = world.arm.state.vm("aks-windows-x7k2p")
    assert vm is not None
    properties = vm.body["properties"]
    os_profile = properties["osProfile"]
    assert os_profile["computerName"] == computer_name("aks-windows-x7k2p", "windows-x7k2p")
    assert len(os_profile["computerName"]) <= MAX_COMPUTER_NAME_LENGTH
    assert os_profile["adminUsername"] == "azureuser"
    assert os_profile["windowsConfiguration"] == {"enableAutomaticUpdates": False, "provisionVMAgent": True}
    assert "linuxConfiguration" not in os_profile
    assert properties["storageProfile"]["osDisk"]["osType"] == "Windows"
    assert properties["licenseType"] == "Windows_Server"
    assert vm.tags["compute.aks.billing"] == "windows"
    image_id = (
        f"/subscriptions/{GALLERY_SUBSCRIPTION}/resourceGroups/AKS-Windows/providers/Microsoft.Compute/galleries/"
        "AKSWindows/images/windows-2022-containerd-gen2/versions/20348.4529.251212"
    )
    assert properties["storageProfile"]["imageReference"] == {"id": image_id}
    assert instance.image_id == image_id
    assert world.bootstraps[-1].node_image_version == "AKSWindows-2022-containerd-gen2-20348.4529.251212"
    [extension] = vm.extensions.values()
    assert extension["name"] == BOOTSTRAP_EXTENSION
    assert (extension["properties"]["publisher"], extension["properties"]["type"]) == (
        "Microsoft.Compute",
        "CustomScriptExtension",
    )
    assert extension["properties"]["typeHandlerVersion"] == "1.10"
    assert runs_custom_data(extension), "the node agent recognizes the extension that runs the custom data"
    shown = (
        [record.getMessage() for record in caplog.records] + world.heartbeats + [instance.model_dump_json()]
    )
    assert not [text for text in shown if ADMIN.password in text or TOKEN in text]
    # A retried launch adopts the VM and finds its extension there: no second PUT of either.
    await provider.create(launch("windows-x7k2p", "Standard_D4s_v3"))
    assert world.requests("PUT virtualMachines") == 1
    assert world.requests("PUT extensions") == 1


async def test_a_gen1_only_size_boots_the_gen1_windows_image_and_the_license_stays_none(world: World) -> None:
    sizes = world.provider.catalog.skus
    gen1 = next(sku for sku in sizes if sku.hyperv_generations == ("V1",) and sku.architecture == "amd64")
    provider = windows_provider(world, windows_nodeclass())

    await provider.create(launch("windows-g1abc", gen1.name))

    body = world.vm_body("windows-g1abc")
    assert body["properties"]["storageProfile"]["imageReference"]["id"].endswith(
        "/images/windows-2022-containerd/versions/20348.4529.251212"
    )
    assert "licenseType" not in body["properties"]


async def test_a_windows_create_that_outlives_the_launch_gets_its_extension_at_registrations_look(
    world: World,
) -> None:
    state = world.arm.state
    state.add_fault(Fault.slow(polls=2, method="PUT", resource="virtualMachines", times=1))
    provider = windows_provider(world, windows_nodeclass(), create_wait=timedelta(0))

    instance = await provider.create(launch("windows-slow1"))

    assert instance.state is InstanceState.CREATING
    vm = state.vm("aks-windows-slow1")
    assert vm is not None and not vm.extensions, "no extension on a VM still being made"
    for _ in range(5):
        assert await provider.create_failure("windows-slow1") is None
    assert [extension["name"] for extension in vm.extensions.values()] == [BOOTSTRAP_EXTENSION]


async def test_a_windows_launch_without_an_admin_account_is_refused_before_azure_is_called(
    world: World,
) -> None:
    provider = windows_provider(world, windows_nodeclass(), admin=None)

    with pytest.raises(InvalidError, match="admin account"):
        await provider.create(launch("windows-noadm"))

    assert world.requests("PUT networkInterfaces") == 0


async def test_windows_images_need_the_shared_image_gallery_or_the_status(world: World) -> None:
    provider = windows_provider(world, windows_nodeclass(), image_gallery_subscription_id=None)

    with pytest.raises(InvalidError, match="published only in AKS's Shared Image Gallery"):
        await provider.create(launch("windows-nosig"))
    assert world.requests("PUT networkInterfaces") == 0

    status_image = (
        f"/subscriptions/{GALLERY_SUBSCRIPTION}/resourceGroups/AKS-Windows/providers/Microsoft.Compute/galleries/"
        "AKSWindows/images/windows-2025-gen2/versions/26100.7462.251212"
    )
    images = [
        {
            "id": status_image,
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        }
    ]
    nodeclass = windows_nodeclass("Windows2025", images=images, kubernetesVersion="1.33.5")
    with_status = windows_provider(world, nodeclass, image_gallery_subscription_id=None)
    instance = await with_status.create(launch("windows-st25a"))
    assert instance.image_id == status_image


async def test_the_emulator_refuses_a_windows_vm_azure_would_refuse(world: World) -> None:
    sku = world.provider.catalog.sku("Standard_D4s_v3")
    names = NodeNames.of("windows-x7k2p")
    await world.provider.network.network_interfaces.begin_create_or_update(
        GROUP, "aks-windows-x7k2p", {"location": "southcentralus", "properties": {"ipConfigurations": []}}
    )

    async def put(windows: WindowsOS) -> str:
        body = vm_body(
            names=names,
            location="southcentralus",
            sku=sku,
            zone="0",
            capacity_type="on-demand",
            os_disk_size_gb=128,
            image={"id": f"/subscriptions/{GALLERY_SUBSCRIPTION}/resourceGroups/AKS-Windows/images/windows"},
            nic_id=nic_id(SUBSCRIPTION, GROUP, "aks-windows-x7k2p"),
            admin_username="azureuser",
            ssh_public_key="",
            custom_data=base64.b64encode(SCRIPT.encode()).decode(),
            tags={},
            windows=windows,
        )
        with pytest.raises(HttpResponseError) as raised:
            poller = await world.provider.compute.virtual_machines.begin_create_or_update(
                GROUP, "aks-windows-x7k2p", VirtualMachine(body)
            )
            await poller.result()
        return str(raised.value)

    assert "computer name cannot be more than 15 characters" in await put(
        WindowsOS("aks-windows-x7k2p", ADMIN)
    )
    assert "The Admin Username specified is not allowed" in await put(
        WindowsOS("akswin1", WindowsAdmin("admin", ADMIN.password))
    )
    assert "password must be between 8-123 characters" in await put(
        WindowsOS("akswin1", WindowsAdmin("azureuser", "password"))
    )
    assert "licenseType" in await put(WindowsOS("akswin1", ADMIN, "Linux_Server"))


# --- the bootstrap --------------------------------------------------------------------------------------


def test_the_windows_bootstrap_is_powershell_a_windows_kubelet_reads_back() -> None:
    nodeclass = windows_nodeclass("Windows2025")
    sku = load_shipped_catalog("eastus").sku("Standard_D4s_v5")
    request = LaunchRequest(
        name="windows-x7k2p",
        nodepool="windows",
        instance_type=sku.name,
        zone="eastus-1",
        capacity_type="on-demand",
        labels={"kubernetes.io/os": "windows", "team": "o'neil"},
        taints=[Taint(key="os", value="windows", effect=TaintEffect.NO_SCHEDULE)],
    )
    script = render(
        bootstrap_request(request, nodeclass, sku, "1.33.5", "AKSWindows-2025-gen2-26100.7462.251212", 250),
        "api.example:443",
        TOKEN,
    )

    assert "#!/bin/bash" not in script and "$global:TLSBootstrapToken" in script
    boot = read_custom_data(base64.b64encode(script.encode()).decode())
    assert boot.windows and boot.token == TOKEN and boot.api_server == "api.example:443"
    assert boot.labels["team"] == "o'neil"
    assert boot.labels["kubernetes.azure.com/fips_enabled"] == "true", "Windows Server 2025 always runs FIPS"
    assert boot.taints == (Taint(key="os", value="windows", effect=TaintEffect.NO_SCHEDULE),)
    # The bracket's 2 GiB more for Windows (4 vCPU, 16 GiB: 2662Mi + 2048Mi), and no hard eviction threshold.
    assert boot.kubelet["kube-reserved"] == "cpu=140m,memory=4710Mi"
    assert boot.eviction_hard == {}
    assert boot.kubelet["cgroups-per-qos"] == "false"
    assert boot.node == {"EnableFIPS": "true", "ConfigGPUDriverIfNeeded": "false"}


def test_a_windows_kubelet_reports_the_build_of_its_image() -> None:
    assert windows_node_info("AKSWindows-2022-containerd-gen2-20348.4529.251212") == {
        "windowsBuild": "10.0.20348",
        "osImage": "Windows Server 2022 Datacenter",
        "kernelVersion": "10.0.20348.4529",
    }
    assert windows_node_info("AKSWindows-2025-gen2-26100.7462.251212")["osImage"] == (
        "Windows Server 2025 Datacenter"
    )
