"""The NIC and VM create bodies: OS disk placement, image, zones, spot, identities, security and tags."""

from __future__ import annotations

import pytest

from activities.azure.names import NodeNames
from activities.azure.vm import (
    DiskPlacement,
    EphemeralOSDisk,
    Json,
    Security,
    azure_zones,
    ephemeral_os_disk,
    image_reference,
    nic_body,
    node_tags,
    os_disk,
    vm_body,
)
from core.api.aksnodeclass import ImageFamily
from core.errors import InvalidError
from core.instancetypes.catalog import AzureSku, load_shipped_catalog
from core.instancetypes.images import image_definition, kubernetes_minor

CATALOG = load_shipped_catalog("southcentralus")
LOCATION = "southcentralus"
NAMES = NodeNames.of("default-2jf98")
NIC_ID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/aks-default-2jf98"
SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
IMAGE = {"communityGalleryImageId": "/CommunityGalleries/g/images/2204gen2containerd/versions/1.0.0"}


def catalog_sku(size: str) -> AzureSku:
    return CATALOG.sku(f"Standard_{size}")


def without_ephemeral(name: str) -> AzureSku:
    return AzureSku(name=name, vcpus=2, memory_gib=4.0, ephemeral_os_disk_supported=False, temp_disk_gib=50.0)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ("B20ms", EphemeralOSDisk(32, DiskPlacement.CACHE)),
        ("D128ds_v6", EphemeralOSDisk(7559, DiskPlacement.NVME)),
        ("D16plds_v5", EphemeralOSDisk(429, DiskPlacement.CACHE)),
        ("NC24ads_A100_v4", EphemeralOSDisk(274, DiskPlacement.CACHE)),
        ("D64s_v3", EphemeralOSDisk(1717, DiskPlacement.CACHE)),
        ("E4d_v5", EphemeralOSDisk(161, DiskPlacement.RESOURCE)),
        ("D2as_v6", None),
    ],
)
def test_ephemeral_os_disk_size_and_placement_of_the_provider_fixtures(
    size: str, expected: EphemeralOSDisk | None
) -> None:
    assert ephemeral_os_disk(catalog_sku(size)) == expected


@pytest.mark.parametrize("name", ["Standard_A0", "Standard_D2_v2"])
def test_sizes_without_ephemeral_os_support_have_none(name: str) -> None:
    assert ephemeral_os_disk(without_ephemeral(name)) is None


def test_an_os_disk_that_fits_is_ephemeral_in_the_first_placement() -> None:
    disk = os_disk(NAMES.os_disk, catalog_sku("D64s_v3"), 128)

    assert disk == {
        "name": "aks-default-2jf98",
        "osType": "Linux",
        "createOption": "FromImage",
        "diskSizeGB": 128,
        "deleteOption": "Delete",
        "caching": "ReadOnly",
        "diffDiskSettings": {"option": "Local", "placement": "CacheDisk"},
    }


def test_an_os_disk_larger_than_the_first_placement_is_managed_even_if_a_later_one_is_larger() -> None:
    b20ms = catalog_sku("B20ms")  # 32 GB cache disk, 171 GB resource disk

    assert "diffDiskSettings" not in os_disk(NAMES.os_disk, b20ms, 128)
    assert os_disk(NAMES.os_disk, b20ms, 32)["diffDiskSettings"] == {
        "option": "Local",
        "placement": "CacheDisk",
    }


def test_an_nvme_size_puts_the_ephemeral_disk_on_nvme() -> None:
    disk = os_disk(NAMES.os_disk, catalog_sku("D128ds_v6"), 256)

    assert disk["diffDiskSettings"]["placement"] == "NvmeDisk"


def test_a_size_without_ephemeral_support_gets_a_managed_disk_deleted_with_the_vm() -> None:
    disk = os_disk(NAMES.os_disk, catalog_sku("D2as_v6"), 30)

    assert "diffDiskSettings" not in disk and "caching" not in disk
    assert disk["deleteOption"] == "Delete"


@pytest.mark.parametrize(
    ("family", "version", "size", "trusted_launch", "fips", "expected"),
    [
        (ImageFamily.UBUNTU, "1.33.2", "D2s_v3", False, False, "2204gen2containerd"),
        (ImageFamily.UBUNTU, "v1.34", "D2s_v3", False, False, "2404gen2containerd"),
        (ImageFamily.UBUNTU, "1.33", "D2_v3", False, False, "2204containerd"),
        (ImageFamily.UBUNTU, "1.33", "D16plds_v5", False, False, "2204gen2arm64containerd"),
        (ImageFamily.UBUNTU, "1.34", "D2s_v3", True, False, "2204gen2TLcontainerd"),
        (ImageFamily.UBUNTU, "1.34", "D2s_v3", False, True, "2004gen2fipscontainerd"),
        (ImageFamily.UBUNTU, "1.34", "D2s_v3", True, True, "2204gen2fipsTLcontainerd"),
        (ImageFamily.UBUNTU_2204, "1.34", "D2s_v3", False, False, "2204gen2containerd"),
        (ImageFamily.UBUNTU_2404, "1.30", "D2s_v3", True, False, "2404gen2TLcontainerd"),
        (ImageFamily.AZURE_LINUX, "1.31", "D2s_v3", False, False, "V2gen2"),
        (ImageFamily.AZURE_LINUX, "1.32", "D2s_v3", False, False, "V3gen2"),
        (ImageFamily.AZURE_LINUX, "1.32", "D16plds_v5", False, True, "V3gen2arm64fips"),
        (ImageFamily.AZURE_LINUX, "1.32", "D2_v3", False, True, "V3fips"),
    ],
)
def test_image_definition_from_family_version_and_size(
    family: ImageFamily, version: str, size: str, trusted_launch: bool, fips: bool, expected: str
) -> None:
    definition = image_definition(
        family, version, catalog_sku(size), trusted_launch=trusted_launch, fips=fips
    )

    assert definition.name == expected


@pytest.mark.parametrize(
    ("family", "size", "trusted_launch", "fips", "problem"),
    [
        (ImageFamily.UBUNTU_2404, "D2s_v3", False, True, "no FIPS image"),
        (ImageFamily.UBUNTU, "D16plds_v5", True, False, "boots on Standard_D16plds_v5"),
        (ImageFamily.UBUNTU, "D2_v3", True, False, "boots on Standard_D2_v3"),
    ],
)
def test_an_image_the_size_cannot_boot_is_an_invalid_request(
    family: ImageFamily, size: str, trusted_launch: bool, fips: bool, problem: str
) -> None:
    with pytest.raises(InvalidError, match=problem):
        image_definition(family, "1.33", catalog_sku(size), trusted_launch=trusted_launch, fips=fips)


def test_kubernetes_versions_are_read_to_the_minor() -> None:
    assert kubernetes_minor("v1.33.2") == (1, 33)
    with pytest.raises(InvalidError, match="Kubernetes version 'latest'"):
        kubernetes_minor("latest")


def test_image_reference_in_the_community_or_the_shared_gallery() -> None:
    definition = image_definition(ImageFamily.UBUNTU, "1.33", catalog_sku("D2s_v3"))

    assert image_reference(definition, "202512.18.0") == {
        "communityGalleryImageId": (
            "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/2204gen2containerd"
            "/versions/202512.18.0"
        )
    }
    assert image_reference(definition, "202512.18.0", "sig-sub") == {
        "id": (
            "/subscriptions/sig-sub/resourceGroups/AKS-Ubuntu/providers/Microsoft.Compute/galleries/AKSUbuntu"
            "/images/2204gen2containerd/versions/202512.18.0"
        )
    }


def test_tags_merge_sources_in_order_and_the_managed_tags_win() -> None:
    tags = node_tags(
        "prod",
        "default",
        "default-2jf98",
        {"team": "a", "karpenter.azure.com/cluster": "spoofed"},
        {"team": "b", "cost/center": "42"},
        {"karpenter.sh/nodepool": "ignored"},
    )

    assert tags == {
        "team": "b",
        "cost_center": "42",
        "karpenter.azure.com_cluster": "prod",
        "compute.aks.billing": "linux",
        "karpenter.sh_nodepool": "default",
        "karpenter.sh_nodeclaim": "default-2jf98",
    }


def test_zones_are_the_zone_number_and_none_for_regional_placement() -> None:
    assert azure_zones("southcentralus-2", LOCATION) == ["2"]
    assert azure_zones("0", LOCATION) == []
    with pytest.raises(InvalidError, match="not a zone of southcentralus"):
        azure_zones("eastus-1", LOCATION)


def vm(
    capacity_type: str = "on-demand",
    zone: str = "southcentralus-1",
    identities: tuple[str, ...] = (),
    security: Security | None = None,
) -> Json:
    return vm_body(
        names=NAMES,
        location=LOCATION,
        sku=catalog_sku("D4s_v3"),
        zone=zone,
        capacity_type=capacity_type,
        os_disk_size_gb=128,
        image=IMAGE,
        nic_id=NIC_ID,
        admin_username="azureuser",
        ssh_public_key="ssh-rsa AAAA",
        custom_data="Ym9vdHN0cmFw",
        tags={"karpenter.azure.com_cluster": "prod"},
        identities=identities,
        security=security or Security(),
    )


def test_an_on_demand_vm_body() -> None:
    body = vm()

    assert body == {
        "location": LOCATION,
        "zones": ["1"],
        "tags": {"karpenter.azure.com_cluster": "prod"},
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D4s_v3"},
            "priority": "Regular",
            "storageProfile": {
                "imageReference": IMAGE,
                "osDisk": os_disk(NAMES.os_disk, catalog_sku("D4s_v3"), 128),
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": NIC_ID, "properties": {"primary": True, "deleteOption": "Delete"}}
                ]
            },
            "osProfile": {
                "computerName": "aks-default-2jf98",
                "adminUsername": "azureuser",
                "customData": "Ym9vdHN0cmFw",
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {
                        "publicKeys": [
                            {"path": "/home/azureuser/.ssh/authorized_keys", "keyData": "ssh-rsa AAAA"}
                        ]
                    },
                },
            },
        },
    }


def test_a_spot_vm_is_evicted_by_deletion_and_has_no_price_cap() -> None:
    properties = vm("spot")["properties"]

    assert properties["priority"] == "Spot"
    assert properties["evictionPolicy"] == "Delete"
    assert properties["billingProfile"] == {"maxPrice": -1.0}
    assert not {"evictionPolicy", "billingProfile"} & vm("on-demand")["properties"].keys()


def test_a_regional_vm_has_no_zones() -> None:
    assert "zones" not in vm(zone="0")


def test_identities_and_security() -> None:
    body = vm(
        identities=("/subscriptions/s/.../kubelet", "/subscriptions/s/.../extra"),
        security=Security(encryption_at_host=True, secure_boot=True, vtpm=False),
    )

    assert body["identity"] == {
        "type": "UserAssigned",
        "userAssignedIdentities": {"/subscriptions/s/.../kubelet": {}, "/subscriptions/s/.../extra": {}},
    }
    assert body["properties"]["securityProfile"] == {
        "encryptionAtHost": True,
        "securityType": "TrustedLaunch",
        "uefiSettings": {"secureBootEnabled": True, "vTpmEnabled": False},
    }
    assert "identity" not in vm() and "securityProfile" not in vm()["properties"]


def test_the_nic_is_in_the_subnet_with_accelerated_networking_when_the_size_has_it() -> None:
    body = nic_body(
        name="aks-default-2jf98",
        location=LOCATION,
        subnet_id=SUBNET,
        accelerated_networking=True,
        tags={"karpenter.azure.com_cluster": "prod"},
        backend_pool_ids=["/lb/pools/aksOutboundBackendPool"],
        network_security_group_id="/nsg/aks-agentpool-12345678-nsg",
    )

    assert body == {
        "location": LOCATION,
        "tags": {"karpenter.azure.com_cluster": "prod"},
        "properties": {
            "ipConfigurations": [
                {
                    "name": "aks-default-2jf98",
                    "properties": {
                        "primary": True,
                        "privateIPAllocationMethod": "Dynamic",
                        "subnet": {"id": SUBNET},
                        "loadBalancerBackendAddressPools": [{"id": "/lb/pools/aksOutboundBackendPool"}],
                    },
                }
            ],
            "enableAcceleratedNetworking": True,
            "enableIPForwarding": False,
            "networkSecurityGroup": {"id": "/nsg/aks-agentpool-12345678-nsg"},
        },
    }


def test_a_node_subnet_nic_has_one_ip_configuration_per_pod() -> None:
    body = nic_body(
        name="aks-x",
        location=LOCATION,
        subnet_id=SUBNET,
        accelerated_networking=False,
        tags={},
        ip_configurations=30,
    )

    configurations = body["properties"]["ipConfigurations"]
    assert [c["name"] for c in configurations[:3]] == ["aks-x", "ipconfig1", "ipconfig2"]
    assert len(configurations) == 30
    assert [c["properties"]["primary"] for c in configurations].count(True) == 1
    assert body["properties"]["enableAcceleratedNetworking"] is False
