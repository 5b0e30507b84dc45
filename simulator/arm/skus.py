"""Resource SKUs: the catalog's VM sizes as the Resource SKUs API describes them (capabilities, zones,
restrictions), and the few disk SKUs the real API lists among them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.instancetypes.catalog import AzureCatalog, AzureSku
from simulator.arm.resources import Json

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Restriction:
    """A size the subscription may not use in the region (`zones` empty) or in some zones."""

    vm_size: str
    zones: frozenset[str] = frozenset()
    reason: str = "NotAvailableForSubscription"


def resource_skus(catalog: AzureCatalog, restrictions: Mapping[str, Restriction]) -> list[Json]:
    """The Resource SKUs of the catalog's region: every size (with its restriction, by lower-cased name), then a
    few disk SKUs."""
    region = catalog.region
    zones = list(catalog.zones)
    disks = [
        {
            "resourceType": "disks",
            "name": name,
            "tier": tier,
            "size": size,
            "family": family,
            "locations": [region],
            "locationInfo": [{"location": region, "zones": zones, "zoneDetails": []}],
            "capabilities": [{"name": "MaxSizeGiB", "value": "4"}, {"name": "MinSizeGiB", "value": "0"}],
            "restrictions": [],
        }
        for name, tier, size, family in (
            ("Premium_LRS", "Premium", "P1", "PremiumSSD"),
            ("StandardSSD_LRS", "Standard", "E1", "StandardSSD"),
            ("Standard_LRS", "Standard", "S4", "StandardHDD"),
        )
    ]
    vms = [resource_sku(sku, catalog, restrictions.get(sku.name.lower())) for sku in catalog.skus]
    return vms + disks


def _flag(value: bool) -> str:
    return "True" if value else "False"


def resource_sku(sku: AzureSku, catalog: AzureCatalog, restriction: Restriction | None = None) -> Json:
    """A catalog size as the Resource SKUs API describes it (`resourceType` `virtualMachines`)."""
    capabilities: list[tuple[str, str]] = []
    nvme = bool(sku.temp_disk_nvme)
    if sku.temp_disk_gib is not None:
        capabilities.append(("MaxResourceVolumeMB", "0" if nvme else str(int(sku.temp_disk_gib * 1024))))
    capabilities += [
        ("OSVhdSizeMB", "1047552"),
        ("vCPUs", str(sku.vcpus)),
        ("MemoryPreservingMaintenanceSupported", "True"),
    ]
    if sku.hyperv_generations:
        capabilities.append(("HyperVGenerations", ",".join(sku.hyperv_generations)))
    capabilities += [
        ("MemoryGB", f"{sku.memory_gib:g}"),
        ("CpuArchitectureType", "Arm64" if sku.architecture == "arm64" else "x64"),
    ]
    if sku.low_priority_capable is not None:
        capabilities.append(("LowPriorityCapable", _flag(sku.low_priority_capable)))
    capabilities += [("PremiumIO", _flag(sku.premium_io)), ("VMDeploymentTypes", "IaaS")]
    capabilities.append(("vCPUsAvailable", str(sku.vcpus)))
    if sku.gpu_count:
        capabilities.append(("GPUs", str(sku.gpu_count)))
    if sku.ephemeral_os_disk_supported is not None:
        capabilities.append(("EphemeralOSDiskSupported", _flag(sku.ephemeral_os_disk_supported)))
        if sku.ephemeral_os_disk_supported:
            placements = (
                ["NvmeDisk"] if nvme else ["ResourceDisk"] + (["CacheDisk"] if sku.cached_disk_gib else [])
            )
            capabilities.append(("SupportedEphemeralOSDiskPlacements", ",".join(placements)))
    if nvme and sku.temp_disk_gib:
        capabilities.append(("NvmeDiskSizeInMiB", str(int(sku.temp_disk_gib * 1024))))
    if sku.encryption_at_host_supported is not None:
        capabilities.append(("EncryptionAtHostSupported", _flag(sku.encryption_at_host_supported)))
    if sku.cached_disk_gib:
        capabilities.append(("CachedDiskBytes", str(int(sku.cached_disk_gib * GIB))))
    if sku.ultra_ssd_available is not None:
        capabilities.append(("UltraSSDAvailable", _flag(sku.ultra_ssd_available)))
    if sku.trusted_launch_disabled is not None:
        capabilities.append(("TrustedLaunchDisabled", _flag(sku.trusted_launch_disabled)))
    capabilities.append(("AcceleratedNetworkingEnabled", _flag(sku.accelerated_networking)))

    region = catalog.region
    zones = catalog.zones if sku.zones is None else sku.zones
    tier, _, size = sku.name.partition("_")
    body: Json = {
        "resourceType": "virtualMachines",
        "name": sku.name,
        "tier": tier,
        "size": size,
        "locations": [region],
        "locationInfo": [{"location": region, "zones": list(zones), "zoneDetails": []}],
        "capabilities": [{"name": name, "value": value} for name, value in capabilities],
        "restrictions": [],
    }
    if sku.quota_family:
        body["family"] = sku.quota_family
    if restriction is not None:
        info: Json = {"locations": [region]}
        if restriction.zones:
            info["zones"] = sorted(restriction.zones)
        body["restrictions"].append(
            {
                "type": "Zone" if restriction.zones else "Location",
                "values": [region],
                "restrictionInfo": info,
                "reasonCode": restriction.reason,
            }
        )
    return body
