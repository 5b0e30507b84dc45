"""The create bodies of a node's NIC and VM, as pure functions of the offering, the VM size and the settings.

They follow the AKS provider (research sections 2.6, 3.1 to 3.4): the VM is placed in the offering's zone
(none for the regional zone "0"), boots the AKS node image for the image family and the cluster's Kubernetes
version, gets an ephemeral OS disk when the size can hold one of the requested size, and is a spot VM
(eviction policy Delete, no price cap) for spot offerings. A Windows node is made as AKS makes one: a Windows OS
disk, a computer name of at most 15 characters, the admin account instead of an SSH key, automatic updates off
(the node image carries them), the license type of the cluster, and billing tag `windows`
(`activities.azure.windows`). Bodies are ARM JSON in the REST shape (camelCase, nested `properties`), which the
SDK sends as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from activities.azure.names import NodeNames
from activities.azure.windows import LICENSE_NONE, WindowsAdmin
from core import labels
from core.errors import InvalidError
from core.instancetypes.azure import REGIONAL_ZONE, ephemeral_os_max_size_gb
from core.instancetypes.catalog import AzureSku
from core.instancetypes.images import ImageDefinition

Json = dict[str, Any]
"""An ARM request body. (The SDK's TypedDicts cannot type partial bodies: some mark every key required.)"""

CLUSTER_TAG = "karpenter.azure.com_cluster"
NODEPOOL_TAG = "karpenter.sh_nodepool"
NODECLAIM_TAG = "karpenter.sh_nodeclaim"
BILLING_TAG = "compute.aks.billing"
BILLING_LINUX = "linux"
BILLING_WINDOWS = "windows"

PRIORITY_SPOT = "Spot"
PRIORITY_REGULAR = "Regular"
DELETE = "Delete"
NO_PRICE_CAP = -1.0
"""Spot `maxPrice` -1: pay up to the on-demand price, and be evicted only for capacity, never for price."""


# --- OS disk -------------------------------------------------------------------------------------------


class DiskPlacement(StrEnum):
    """Where an ephemeral OS disk lives (`diffDiskSettings.placement`)."""

    NVME = "NvmeDisk"
    CACHE = "CacheDisk"
    RESOURCE = "ResourceDisk"


@dataclass(frozen=True, slots=True)
class EphemeralOSDisk:
    max_size_gb: int
    placement: DiskPlacement


def ephemeral_os_disk(sku: AzureSku) -> EphemeralOSDisk | None:
    """The largest ephemeral OS disk the size holds and where, or `None` when it cannot hold one.

    The provider takes the first non-empty place of: local NVMe, cache disk, resource disk, and never falls
    back to a later one because the first is too small. The size is `ephemeral_os_max_size_gb`, which
    applies the same order; the placement here is the one that size came from.
    """
    max_size_gb = ephemeral_os_max_size_gb(sku)
    if max_size_gb <= 0:
        return None
    if sku.temp_disk_nvme:
        placement = DiskPlacement.NVME
    elif sku.cached_disk_gib:
        placement = DiskPlacement.CACHE
    else:
        placement = DiskPlacement.RESOURCE
    return EphemeralOSDisk(max_size_gb, placement)


def os_disk(name: str, sku: AzureSku, size_gb: int, os_type: str = "Linux") -> Json:
    """The OS disk: ephemeral (local, read-only cache) when the size can hold `size_gb`, else a managed disk.

    Either way it goes when the VM goes (`deleteOption` Delete).
    """
    disk: Json = {
        "name": name,
        "osType": os_type,
        "createOption": "FromImage",
        "diskSizeGB": size_gb,
        "deleteOption": DELETE,
    }
    ephemeral = ephemeral_os_disk(sku)
    if ephemeral is not None and size_gb <= ephemeral.max_size_gb:
        disk["caching"] = "ReadOnly"
        disk["diffDiskSettings"] = {"option": "Local", "placement": ephemeral.placement.value}
    return disk


# --- image (which one a size boots: `core.instancetypes.images`) -----------------------------------------


def image_reference(
    definition: ImageDefinition, version: str, gallery_subscription_id: str | None = None
) -> Json:
    """The image version's reference: in AKS's Shared Image Gallery when its subscription is given (managed
    AKS), else in the public Community Gallery (self-hosted); `InvalidError` for a gallery AKS publishes in its
    Shared Image Gallery only (Windows) when no subscription is given."""
    gallery = definition.gallery
    if not gallery_subscription_id and gallery.community_name is None:
        raise InvalidError(
            f"{gallery.name} images ({definition.name}) are published only in AKS's Shared Image Gallery: set "
            "the gallery subscription (NODEWRIGHT_IMAGE_GALLERY_SUBSCRIPTION_ID), or give the AKSNodeClass "
            "status.images",
            code="UnsupportedImage",
        )
    if gallery_subscription_id:
        return {
            "id": (
                f"/subscriptions/{gallery_subscription_id}/resourceGroups/{gallery.resource_group}/providers/"
                f"Microsoft.Compute/galleries/{gallery.name}/images/{definition.name}/versions/{version}"
            )
        }
    return {
        "communityGalleryImageId": (
            f"/CommunityGalleries/{gallery.community_name}/images/{definition.name}/versions/{version}"
        )
    }


def image_reference_for(image_id: str) -> Json:
    """The `imageReference` of an image version ID: a Community Gallery ID, or an ARM ID (Shared Image Gallery)."""
    if image_id.lower().startswith("/communitygalleries/"):
        return {"communityGalleryImageId": image_id}
    return {"id": image_id}


def image_id_of(reference: Mapping[str, Any]) -> str:
    """The image version ID an `imageReference` points at ("" for a marketplace image)."""
    return str(reference.get("communityGalleryImageId") or reference.get("id") or "")


_IMAGE_ID = re.compile(
    r"(?i)/(?:galleries|CommunityGalleries)/(?P<gallery>[^/]+)/images/(?P<definition>[^/]+)/versions/(?P<version>[^/]+)$"
)


def node_image_version(image_id: str) -> str:
    """AKS's node image version name of an image ID, e.g. `AKSUbuntu-2204gen2containerd-202512.18.0` (the
    Community Gallery's name without its GUID suffix); the ID itself when it is not a gallery image."""
    match = _IMAGE_ID.search(image_id)
    if match is None:
        return image_id
    gallery = match["gallery"].split("-")[0]
    # AKS drops the Windows definitions' `windows-` prefix: AKSWindows-2022-containerd-gen2-20348.4529.251212.
    definition = match["definition"].removeprefix(_WINDOWS_DEFINITION_PREFIX)
    return f"{gallery}-{definition}-{match['version']}"


_WINDOWS_DEFINITION_PREFIX = "windows-"


# --- tags, zones, NIC and VM ---------------------------------------------------------------------------


def tag_key(key: str) -> str:
    """Azure tag names cannot hold `/`; the provider writes label-style keys with `_` instead."""
    return key.replace("/", "_")


def node_tags(
    cluster_name: str,
    nodepool: str,
    nodeclaim: str,
    *sources: Mapping[str, str],
    billing: str = BILLING_LINUX,
) -> dict[str, str]:
    """The tags of a node's VM and NIC: `sources` merged in order (later wins), then the managed tags, which
    always win: cluster, billing (`linux` or `windows`), NodePool and NodeClaim."""
    tags = {tag_key(key): value for source in sources for key, value in source.items()}
    tags.update(
        {
            CLUSTER_TAG: cluster_name,
            BILLING_TAG: billing,
            NODEPOOL_TAG: nodepool,
            NODECLAIM_TAG: nodeclaim,
        }
    )
    return tags


def azure_zones(zone: str, location: str) -> list[str]:
    """The VM's `zones`: `["2"]` for `eastus-2`, none for the regional zone "0"."""
    if zone == REGIONAL_ZONE:
        return []
    prefix = f"{location}-"
    number = zone.removeprefix(prefix)
    if not zone.startswith(prefix) or not number:
        raise InvalidError(
            f"zone {zone!r} is not a zone of {location} (expected {prefix}<n> or {REGIONAL_ZONE!r})",
            code="InvalidZone",
        )
    return [number]


def nic_body(
    *,
    name: str,
    location: str,
    subnet_id: str,
    accelerated_networking: bool,
    tags: Mapping[str, str],
    ip_configurations: int = 1,
    backend_pool_ids: Sequence[str] = (),
    network_security_group_id: str | None = None,
) -> Json:
    """The NIC: a primary dynamic IP configuration named like the NIC in the subnet (and the load balancer
    pools), plus secondary ones for Azure CNI node-subnet pod IPs; accelerated networking when the size
    supports it; no IP forwarding."""
    configurations: list[Json] = []
    for index in range(ip_configurations):
        primary = index == 0
        properties: Json = {
            "primary": primary,
            "privateIPAllocationMethod": "Dynamic",
            "subnet": {"id": subnet_id},
        }
        if primary and backend_pool_ids:
            properties["loadBalancerBackendAddressPools"] = [{"id": pool} for pool in backend_pool_ids]
        configurations.append({"name": name if primary else f"ipconfig{index}", "properties": properties})
    body: Json = {
        "location": location,
        "tags": dict(tags),
        "properties": {
            "ipConfigurations": configurations,
            "enableAcceleratedNetworking": accelerated_networking,
            "enableIPForwarding": False,
        },
    }
    if network_security_group_id:
        body["properties"]["networkSecurityGroup"] = {"id": network_security_group_id}
    return body


@dataclass(frozen=True, slots=True)
class WindowsOS:
    """How a Windows VM differs: its computer name, admin account and license type."""

    computer_name: str
    admin: WindowsAdmin
    license_type: str = LICENSE_NONE


def os_profile(
    computer_name: str, admin_username: str, ssh_public_key: str, custom_data: str, windows: WindowsOS | None
) -> Json:
    """The OS profile: a Linux admin with an SSH key and no password, or the Windows admin account."""
    if windows is not None:
        return {
            "computerName": windows.computer_name,
            "adminUsername": windows.admin.username,
            "adminPassword": windows.admin.password,
            "customData": custom_data,
            "windowsConfiguration": {"enableAutomaticUpdates": False, "provisionVMAgent": True},
        }
    return {
        "computerName": computer_name,
        "adminUsername": admin_username,
        "customData": custom_data,
        "linuxConfiguration": {
            "disablePasswordAuthentication": True,
            "ssh": {
                "publicKeys": [
                    {"path": f"/home/{admin_username}/.ssh/authorized_keys", "keyData": ssh_public_key}
                ]
            },
        },
    }


@dataclass(frozen=True, slots=True)
class Security:
    """The VM security settings of an AKSNodeClass."""

    encryption_at_host: bool = False
    secure_boot: bool = False
    vtpm: bool = False

    @property
    def trusted_launch(self) -> bool:
        return self.secure_boot or self.vtpm


def vm_body(
    *,
    names: NodeNames,
    location: str,
    sku: AzureSku,
    zone: str,
    capacity_type: str,
    os_disk_size_gb: int,
    image: Json,
    nic_id: str,
    admin_username: str,
    ssh_public_key: str,
    custom_data: str,
    tags: Mapping[str, str],
    identities: Sequence[str] = (),
    security: Security = Security(),
    windows: WindowsOS | None = None,
) -> Json:
    """The VM create body (a Windows VM's with `windows`). `custom_data` is the base64 bootstrap and a Windows
    body holds the admin password: the body must never be logged."""
    disk = os_disk(names.os_disk, sku, os_disk_size_gb, "Linux" if windows is None else "Windows")
    properties: Json = {
        "hardwareProfile": {"vmSize": sku.name},
        "storageProfile": {"imageReference": image, "osDisk": disk},
        "networkProfile": {
            "networkInterfaces": [{"id": nic_id, "properties": {"primary": True, "deleteOption": DELETE}}]
        },
        "osProfile": os_profile(names.vm, admin_username, ssh_public_key, custom_data, windows),
        "priority": PRIORITY_REGULAR,
    }
    if windows is not None and windows.license_type != LICENSE_NONE:
        properties["licenseType"] = windows.license_type
    if capacity_type == labels.CAPACITY_TYPE_SPOT:
        properties["priority"] = PRIORITY_SPOT
        properties["evictionPolicy"] = DELETE
        properties["billingProfile"] = {"maxPrice": NO_PRICE_CAP}
    profile: Json = {}
    if security.encryption_at_host:
        profile["encryptionAtHost"] = True
    if security.trusted_launch:
        profile["securityType"] = "TrustedLaunch"
        profile["uefiSettings"] = {"secureBootEnabled": security.secure_boot, "vTpmEnabled": security.vtpm}
    if profile:
        properties["securityProfile"] = profile
    body: Json = {
        "location": location,
        "tags": dict(tags),
        "properties": properties,
    }
    zones = azure_zones(zone, location)
    if zones:
        body["zones"] = zones
    if identities:
        body["identity"] = {
            "type": "UserAssigned",
            "userAssignedIdentities": {identity: {} for identity in identities},
        }
    return body
