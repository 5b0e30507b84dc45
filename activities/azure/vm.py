"""The create bodies of a node's NIC and VM, as pure functions of the offering, the VM size and the settings.

They follow the AKS provider (research sections 2.6, 3.1 to 3.4): the VM is placed in the offering's zone
(none for the regional zone "0"), boots the AKS node image for the image family and the cluster's Kubernetes
version, gets an ephemeral OS disk when the size can hold one of the requested size, and is a spot VM
(eviction policy Delete, no price cap) for spot offerings. Bodies are ARM JSON in the REST shape (camelCase,
nested `properties`), which the SDK sends as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from activities.azure.names import NodeNames
from core import labels
from core.api.aksnodeclass import ImageFamily, NodeImage
from core.api.meta import NodeSelectorOperator
from core.errors import InvalidError
from core.instancetypes.azure import ARM64, REGIONAL_ZONE, ephemeral_os_max_size_gb
from core.instancetypes.catalog import AzureSku

Json = dict[str, Any]
"""An ARM request body. (The SDK's TypedDicts cannot type partial bodies: some mark every key required.)"""

CLUSTER_TAG = "karpenter.azure.com_cluster"
NODEPOOL_TAG = "karpenter.sh_nodepool"
NODECLAIM_TAG = "karpenter.sh_nodeclaim"
BILLING_TAG = "compute.aks.billing"
BILLING_LINUX = "linux"

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


def os_disk(name: str, sku: AzureSku, size_gb: int) -> Json:
    """The OS disk: ephemeral (local, read-only cache) when the size can hold `size_gb`, else a managed disk.

    Either way it goes when the VM goes (`deleteOption` Delete).
    """
    disk: Json = {
        "name": name,
        "osType": "Linux",
        "createOption": "FromImage",
        "diskSizeGB": size_gb,
        "deleteOption": DELETE,
    }
    ephemeral = ephemeral_os_disk(sku)
    if ephemeral is not None and size_gb <= ephemeral.max_size_gb:
        disk["caching"] = "ReadOnly"
        disk["diffDiskSettings"] = {"option": "Local", "placement": ephemeral.placement.value}
    return disk


# --- image ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gallery:
    """An AKS node image gallery, as a Shared Image Gallery (managed AKS) and as a Community Gallery."""

    name: str
    resource_group: str
    community_name: str


UBUNTU_GALLERY = Gallery("AKSUbuntu", "AKS-Ubuntu", "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2")
AZURE_LINUX_GALLERY = Gallery(
    "AKSAzureLinux", "AKS-AzureLinux", "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"
)

_AMD64 = "amd64"
_GEN1 = "V1"
_GEN2 = "V2"


@dataclass(frozen=True, slots=True)
class ImageDefinition:
    """One image definition of a gallery and the VMs that can boot it (architecture, Hyper-V generation)."""

    gallery: Gallery
    name: str
    architecture: str = _AMD64
    generation: str = _GEN2

    def boots_on(self, sku: AzureSku) -> bool:
        """Whether a VM of this size can boot the image (a size with unknown generations is not excluded)."""
        return sku.architecture == self.architecture and (
            not sku.hyperv_generations or self.generation in sku.hyperv_generations
        )


def _definitions(
    gallery: Gallery, gen2: str, gen1: str | None, arm64: str | None
) -> tuple[ImageDefinition, ...]:
    """A family's definitions in the provider's priority order: Gen2, then Gen1, then Arm64."""
    found = [ImageDefinition(gallery, gen2)]
    if gen1 is not None:
        found.append(ImageDefinition(gallery, gen1, generation=_GEN1))
    if arm64 is not None:
        found.append(ImageDefinition(gallery, arm64, architecture=ARM64))
    return tuple(found)


class _Variant(StrEnum):
    PLAIN = "plain"
    TRUSTED_LAUNCH = "trusted launch"
    FIPS = "FIPS"
    FIPS_TRUSTED_LAUNCH = "FIPS with trusted launch"


_U = UBUNTU_GALLERY
_AL = AZURE_LINUX_GALLERY
_IMAGES: dict[tuple[str, _Variant], tuple[ImageDefinition, ...]] = {
    ("Ubuntu2004", _Variant.FIPS): _definitions(_U, "2004gen2fipscontainerd", "2004fipscontainerd", None),
    ("Ubuntu2204", _Variant.PLAIN): _definitions(
        _U, "2204gen2containerd", "2204containerd", "2204gen2arm64containerd"
    ),
    ("Ubuntu2204", _Variant.TRUSTED_LAUNCH): _definitions(_U, "2204gen2TLcontainerd", None, None),
    ("Ubuntu2204", _Variant.FIPS_TRUSTED_LAUNCH): _definitions(_U, "2204gen2fipsTLcontainerd", None, None),
    ("Ubuntu2404", _Variant.PLAIN): _definitions(
        _U, "2404gen2containerd", "2404containerd", "2404gen2arm64containerd"
    ),
    ("Ubuntu2404", _Variant.TRUSTED_LAUNCH): _definitions(_U, "2404gen2TLcontainerd", None, None),
    ("AzureLinux2", _Variant.PLAIN): _definitions(_AL, "V2gen2", "V2", "V2gen2arm64"),
    ("AzureLinux2", _Variant.FIPS): _definitions(_AL, "V2gen2fips", "V2fips", None),
    ("AzureLinux2", _Variant.TRUSTED_LAUNCH): _definitions(_AL, "V2gen2TL", None, None),
    ("AzureLinux3", _Variant.PLAIN): _definitions(_AL, "V3gen2", "V3", "V3gen2arm64"),
    ("AzureLinux3", _Variant.FIPS): _definitions(_AL, "V3gen2fips", "V3fips", "V3gen2arm64fips"),
    ("AzureLinux3", _Variant.TRUSTED_LAUNCH): _definitions(_AL, "V3gen2TL", None, None),
}

_VERSION = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?")
UBUNTU_2404_FROM = (1, 34)
"""The Ubuntu family boots Ubuntu 24.04 from this Kubernetes version on, 22.04 below it."""
AZURE_LINUX_3_FROM = (1, 32)


def kubernetes_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version such as `1.33.2` or `v1.34`."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise InvalidError(
            f"Kubernetes version {version!r} is not of the form 1.33 or 1.33.2", code="InvalidVersion"
        )
    return int(match["major"]), int(match["minor"])


def image_definition(
    family: ImageFamily,
    kubernetes_version: str,
    sku: AzureSku,
    trusted_launch: bool = False,
    fips: bool = False,
) -> ImageDefinition:
    """The node image definition a VM of this size boots: the first of the release's definitions it can boot.

    Ubuntu (the default family) is Ubuntu 24.04 from Kubernetes 1.34 and 22.04 below; with Trusted Launch it is
    22.04, and with FIPS 20.04 (or 22.04 with FIPS and Trusted Launch). AzureLinux is Azure Linux 3 from
    Kubernetes 1.32 and 2 below.
    """
    minor = kubernetes_minor(kubernetes_version)
    if fips:
        variant = _Variant.FIPS_TRUSTED_LAUNCH if trusted_launch else _Variant.FIPS
    else:
        variant = _Variant.TRUSTED_LAUNCH if trusted_launch else _Variant.PLAIN
    match family:
        case ImageFamily.AZURE_LINUX:
            release = "AzureLinux3" if minor >= AZURE_LINUX_3_FROM else "AzureLinux2"
        case ImageFamily.UBUNTU_2204:
            release = "Ubuntu2204"
        case ImageFamily.UBUNTU_2404:
            release = "Ubuntu2404"
        case _ if variant is _Variant.FIPS:
            release = "Ubuntu2004"
        case _ if variant is not _Variant.PLAIN:
            release = "Ubuntu2204"
        case _:
            release = "Ubuntu2404" if minor >= UBUNTU_2404_FROM else "Ubuntu2204"
    definitions = _IMAGES.get((release, variant))
    if definitions is None:
        raise InvalidError(
            f"image family {family} has no {variant} image ({release})", code="UnsupportedImage"
        )
    for definition in definitions:
        if definition.boots_on(sku):
            return definition
    generations = ", ".join(sku.hyperv_generations) or "unknown"
    raise InvalidError(
        f"no {release} {variant} image boots on {sku.name} ({sku.architecture}, Hyper-V generations {generations})",
        code="UnsupportedImage",
    )


def image_reference(
    definition: ImageDefinition, version: str, gallery_subscription_id: str | None = None
) -> Json:
    """The image version's reference: in AKS's Shared Image Gallery when its subscription is given (managed
    AKS), else in the public Community Gallery (self-hosted)."""
    gallery = definition.gallery
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


def _sku_values(sku: AzureSku) -> dict[str, set[str]]:
    """The image-matching label values of a size (architecture, Hyper-V generations `1`/`2`); a size whose
    generations are unknown has no value for that key, so it matches on architecture alone."""
    values = {labels.ARCH: {sku.architecture}}
    if sku.hyperv_generations:
        values[labels.SKU_HYPERV_GENERATION] = {
            gen.upper().removeprefix("V") for gen in sku.hyperv_generations
        }
    return values


def boots_on(image: NodeImage, sku: AzureSku) -> bool:
    """Whether the size satisfies every requirement of an AKSNodeClass status image (keys it has no value
    for are not held against it)."""
    values = _sku_values(sku)
    for requirement in image.requirements:
        have = values.get(requirement.key)
        if have is None:
            continue
        wanted = set(requirement.values)
        match requirement.operator:
            case NodeSelectorOperator.IN:
                if not have & wanted:
                    return False
            case NodeSelectorOperator.NOT_IN:
                if have <= wanted:
                    return False
            case NodeSelectorOperator.DOES_NOT_EXIST:
                return False
    return True


def status_image(images: Sequence[NodeImage], sku: AzureSku) -> str | None:
    """The image a size boots from an AKSNodeClass status: the first (in priority order) it can boot, as the
    AKS provider picks it; None when no image fits."""
    return next((image.id for image in images if boots_on(image, sku)), None)


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
    return f"{gallery}-{match['definition']}-{match['version']}"


# --- tags, zones, NIC and VM ---------------------------------------------------------------------------


def tag_key(key: str) -> str:
    """Azure tag names cannot hold `/`; the provider writes label-style keys with `_` instead."""
    return key.replace("/", "_")


def node_tags(
    cluster_name: str,
    nodepool: str,
    nodeclaim: str,
    *sources: Mapping[str, str],
) -> dict[str, str]:
    """The tags of a node's VM and NIC: `sources` merged in order (later wins), then the managed tags, which
    always win: cluster, billing, NodePool and NodeClaim."""
    tags = {tag_key(key): value for source in sources for key, value in source.items()}
    tags.update(
        {
            CLUSTER_TAG: cluster_name,
            BILLING_TAG: BILLING_LINUX,
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
) -> Json:
    """The VM create body. `custom_data` is the base64 bootstrap; the body must never be logged."""
    properties: Json = {
        "hardwareProfile": {"vmSize": sku.name},
        "storageProfile": {"imageReference": image, "osDisk": os_disk(names.os_disk, sku, os_disk_size_gb)},
        "networkProfile": {
            "networkInterfaces": [{"id": nic_id, "properties": {"primary": True, "deleteOption": DELETE}}]
        },
        "osProfile": {
            "computerName": names.vm,
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
        },
        "priority": PRIORITY_REGULAR,
    }
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
