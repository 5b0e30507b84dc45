"""The live VM size list: the Resource SKUs API for the region, filtered as the AKS provider filters it.

The provider keeps only `virtualMachines` SKUs, drops sizes with a `Location` restriction for the region
(e.g. `NotAvailableForSubscription`), removes zones a `Zone` restriction names, and leaves out the sizes no
AKSNodeClass can use (`core.instancetypes.azure.filter_reason` with the rules that hold for every
AKSNodeClass: restricted sizes, too small, unsupported GPUs, constrained vCPUs, confidential, unparsable
names). The rules that depend on an AKSNodeClass apply later, when instance types are built.

Capabilities come from the API; where it says nothing of one, the shipped catalog's record of the size (the
snapshot's, or the eastus snapshot's in another region) stands. What the API never says comes from what ships: the
provider's known-SKU list (a size missing from it is priced at 999 $/h) and GPU registry
(`core.instancetypes.provider_facts`), and the region's price from the shipped table (`core.instancetypes.regions`,
the eastus prices where the table lacks the region): the shipped record's price for a size it has (the snapshots
carry Linux rates where the table holds Windows ones), the table's for any other.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from enum import Enum

from azure.core.exceptions import AzureError
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.compute.models import ResourceSku

from activities.azure.errors import classify
from core.errors import CloudError
from core.instancetypes.azure import FilterReason, filter_reason
from core.instancetypes.catalog import AzureCatalog, AzureSku
from core.instancetypes.provider_facts import is_known_sku, registered_gpu
from core.instancetypes.regions import RegionPrices, region_prices

logger = logging.getLogger(__name__)

VIRTUAL_MACHINES = "virtualMachines"
LOCATION_RESTRICTION = "location"
ZONE_RESTRICTION = "zone"
MIB_PER_GIB = 1024
BYTES_PER_GIB = 2**30

UNSUPPORTED_EVERYWHERE = frozenset(
    {
        FilterReason.UNPARSABLE_NAME,
        FilterReason.RESTRICTED_SIZE,
        FilterReason.TOO_FEW_VCPUS,
        FilterReason.TOO_LITTLE_MEMORY,
        FilterReason.UNSUPPORTED_GPU,
        FilterReason.CONSTRAINED_VCPUS,
        FilterReason.CONFIDENTIAL,
    }
)
"""Filter reasons that hold whatever the AKSNodeClass: such sizes are left out of the live list."""


class SkuListError(RuntimeError):
    """The Resource SKUs API could not be read, or returned no usable VM size; `failure` is Azure's failure, as
    classified, when there was one."""

    def __init__(self, message: str, failure: CloudError | None = None) -> None:
        super().__init__(message)
        self.failure = failure


def location_filter(region: str) -> str:
    return f"location eq '{region}'"


async def list_skus(
    compute: ComputeManagementClient, region: str, shipped: AzureCatalog
) -> tuple[AzureSku, ...]:
    """The usable VM sizes of the region, sorted by name; `SkuListError` when none can be read."""
    try:
        resources = [sku async for sku in compute.resource_skus.list(filter=location_filter(region))]
    except AzureError as error:
        failure = classify(error)
        raise SkuListError(f"listing Resource SKUs for {region} failed: {failure}", failure) from error
    skus = skus_from_resources(resources, region, shipped)
    if not skus:
        raise SkuListError(f"the Resource SKUs API listed no usable VM size for {region}")
    return skus


def skus_from_resources(
    resources: Iterable[ResourceSku], region: str, shipped: AzureCatalog
) -> tuple[AzureSku, ...]:
    """The usable VM sizes among Resource SKUs, sorted by name (one per name: the first listed)."""
    known = {sku.name: sku for sku in shipped.skus}
    prices = region_prices(region)
    result: dict[str, AzureSku] = {}
    unknown_families: set[str] = set()
    for resource in resources:
        sku = sku_from_resource(resource, region, known.get(resource.name or ""), prices)
        if sku is None or sku.name in result:
            continue
        if filter_reason(sku) in UNSUPPORTED_EVERYWHERE:
            continue
        if not sku.karpenter_known_sku:
            unknown_families.add(sku.quota_family or "unknown")
        result[sku.name] = sku
    if unknown_families:
        # As the provider does: unknown sizes are offered at the missing price, and their families logged.
        logger.info(
            "sizes missing from the known SKU list are priced at the missing price; families: %s",
            ", ".join(sorted(unknown_families)),
        )
    return tuple(result[name] for name in sorted(result))


def sku_from_resource(
    resource: ResourceSku, region: str, shipped: AzureSku | None, prices: RegionPrices | None = None
) -> AzureSku | None:
    """One Resource SKU as an `AzureSku`; None when it is not a VM size usable in the region. A size without a
    shipped record is priced from `prices` (the region's shipped table by default)."""
    name = resource.name
    if not name or _text(resource.resource_type) != VIRTUAL_MACHINES:
        return None
    location = region.lower()
    restricted_zones: set[str] = set()
    for restriction in resource.restrictions or []:
        kind = _text(restriction.type).lower()
        info = restriction.restriction_info
        if kind == LOCATION_RESTRICTION and location in _lower(restriction.get("values")):
            return None
        if kind == ZONE_RESTRICTION and info is not None and location in _lower(info.locations or [location]):
            restricted_zones.update(info.zones or [])
    infos = [info for info in resource.location_info or [] if (info.location or "").lower() == location]
    if not infos and location not in _lower(resource.locations):
        return None
    zones = sorted({zone for info in infos for zone in info.zones or []} - restricted_zones)
    capabilities = {
        capability.name: capability.value
        for capability in resource.capabilities or []
        if capability.name and capability.value is not None
    }
    vcpus = _int(capabilities.get("vCPUs"))
    memory = _float(capabilities.get("MemoryGB"))
    if vcpus is None or memory is None:
        logger.info("Resource SKU %s has no vCPUs or MemoryGB capability; skipping it", name)
        return None
    base = shipped or _unshipped(name, vcpus, memory, prices or region_prices(region))
    nvme_mib = _int(capabilities.get("NvmeDiskSizeInMiB"))
    resource_mb = _int(capabilities.get("MaxResourceVolumeMB"))
    cached = _int(capabilities.get("CachedDiskBytes"))
    generations = capabilities.get("HyperVGenerations")
    architecture = capabilities.get("CpuArchitectureType")
    live = {
        "vcpus": vcpus,
        "memory_gib": memory,
        "architecture": None if architecture is None else ("arm64" if architecture == "Arm64" else "amd64"),
        "quota_family": resource.family,
        "gpu_count": _int(capabilities.get("GPUs")) or 0,
        "accelerated_networking": _flag(capabilities.get("AcceleratedNetworkingEnabled")),
        "premium_io": _flag(capabilities.get("PremiumIO")),
        "ephemeral_os_disk_supported": _flag(capabilities.get("EphemeralOSDiskSupported")),
        "temp_disk_gib": (
            nvme_mib / MIB_PER_GIB
            if nvme_mib
            else (resource_mb / MIB_PER_GIB if resource_mb is not None else None)
        ),
        "temp_disk_nvme": True if nvme_mib else None,
        "cached_disk_gib": cached / BYTES_PER_GIB if cached else None,
        "hyperv_generations": (
            tuple(part.strip() for part in generations.split(",") if part.strip()) if generations else None
        ),
        "zones": tuple(zones),
        "low_priority_capable": _flag(capabilities.get("LowPriorityCapable")),
        "encryption_at_host_supported": _flag(capabilities.get("EncryptionAtHostSupported")),
        "trusted_launch_disabled": _flag(capabilities.get("TrustedLaunchDisabled")),
        "ultra_ssd_available": _flag(capabilities.get("UltraSSDAvailable")),
    }
    # The API's word wins; where it says nothing, the snapshot's record of the size stands.
    return dataclasses.replace(base, **{key: value for key, value in live.items() if value is not None})


def _unshipped(name: str, vcpus: int, memory_gib: float, prices: RegionPrices) -> AzureSku:
    """A size no shipped catalog has: what the provider embeds about it, and the price table's price."""
    gpu = registered_gpu(name)
    return AzureSku(
        name=name,
        vcpus=vcpus,
        memory_gib=memory_gib,
        karpenter_known_sku=is_known_sku(name),
        gpu_manufacturer=gpu.manufacturer if gpu else None,
        gpu_os=gpu.os if gpu else frozenset(),
        on_demand_price_micros=prices.on_demand.get(name),
    )


def _text(value: object) -> str:
    """An SDK value as the string Azure sent (the SDK turns known values into enums)."""
    if value is None:
        return ""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _lower(values: object) -> set[str]:
    if not isinstance(values, Iterable) or isinstance(values, str | Mapping):
        return set()
    return {str(value).lower() for value in values}


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _flag(value: str | None) -> bool | None:
    return None if value is None else value.strip().lower() == "true"
