"""The Azure VM size catalog: the facts about each size that instance types are built from.

A catalog holds one region: its logical availability zones and, per VM size, the Resource SKU capabilities
Karpenter reads (vCPUs, memory, architecture, GPUs, disks, Hyper-V generations, zones, spot eligibility)
plus its Linux prices, and its Windows ones once the Retail Prices API's Windows meters were read. Two snapshots
ship as package data, eastus and southcentralus (see `data/README.md` for where every value comes from). Every
other region the shipped price table covers (`core.instancetypes.regions`) gets the eastus snapshot's sizes that
have a price in that region, at that price, with the region's zones; the table has no spot prices, so spot is
priced as on-demand, as the AKS provider prices it until it reads live prices. Neither the snapshots nor the
table hold Windows meters: a Windows node is priced at its region's Linux rate plus the license
(`core.instancetypes.windows`) until live prices come. The worker builds the same `AzureCatalog` from the Resource
SKUs and Retail Prices APIs (`activities.azure`), starting from these records.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from functools import cache
from importlib.resources import files
from typing import Any

from core.instancetypes.regions import normalize_region, priced_regions, region_prices, region_zones
from core.instancetypes.types import usd_to_micros

_DATA_PACKAGE = "core.instancetypes"
_DATA_DIR = "data"
_FILE_PREFIX = "azure-"


@dataclass(frozen=True, slots=True)
class AzureSku:
    """One VM size in one region, as the Resource SKUs API and the price tables describe it.

    `None` means the source does not say; the instance-type builder documents how it reads each unknown.
    """

    name: str
    """ARM VM size, e.g. `Standard_D4s_v5`."""
    vcpus: int
    memory_gib: float
    """The `MemoryGB` capability, which is really GiB."""
    architecture: str = "amd64"
    """Kubernetes architecture name (`amd64`, `arm64`)."""
    quota_family: str | None = None
    """Quota family (Resource SKU `family`, e.g. `standardDSv3Family`)."""
    docs_series: str | None = None
    """The Microsoft Learn size series the size is listed under (e.g. `Dpsv6`), for display."""
    gpu_count: int = 0
    gpu_manufacturer: str | None = None
    """`nvidia` or `amd` when the provider's GPU registry lists the size; `None` when it does not."""
    gpu_os: frozenset[str] = frozenset()
    """OSes the GPU registry lists for the size: `ubuntu`, `azurelinux`, `azurelinux3`, `windows`."""
    accelerated_networking: bool = False
    premium_io: bool = False
    ephemeral_os_disk_supported: bool | None = None
    temp_disk_gib: float | None = None
    """Total local temp storage: the SCSI resource disk, or the sum of the local NVMe disks."""
    temp_disk_nvme: bool | None = None
    """Whether the temp storage is local NVMe (which can then hold the ephemeral OS disk)."""
    cached_disk_gib: float | None = None
    hyperv_generations: tuple[str, ...] = ()
    """`V1` and/or `V2`."""
    zones: tuple[str, ...] | None = None
    """Logical zones the size is offered in; `None` means the region's zones, `()` regional only."""
    low_priority_capable: bool | None = None
    on_demand_price_micros: int | None = None
    """Linux pay-as-you-go price in micro-dollars per hour."""
    spot_price_micros: int | None = None
    """Linux spot price in micro-dollars per hour; `None` when no source gives one."""
    windows_on_demand_price_micros: int | None = None
    """Windows pay-as-you-go price (license included) from the Retail Prices API's Windows meter; `None` when
    none was read (`core.instancetypes.windows` then adds the license rate to the Linux price)."""
    windows_spot_price_micros: int | None = None
    """Windows spot price from its Windows meter; `None` when none was read."""
    karpenter_known_sku: bool = True
    """Whether the provider's embedded known-SKU list has the size (unknown sizes get the penalty price)."""
    encryption_at_host_supported: bool | None = None
    trusted_launch_disabled: bool | None = None
    ultra_ssd_available: bool | None = None
    """Regional `UltraSSDAvailable` capability."""


@dataclass(frozen=True, slots=True)
class AzureCatalog:
    """The VM sizes of one region."""

    region: str
    zones: tuple[str, ...]
    """Logical availability zones of the region (`("1", "2", "3")`); empty for a region without zones."""
    skus: tuple[AzureSku, ...]
    windows_license_included: bool = True
    """How the cluster licenses Windows nodes (AKS's `windowsProfile.licenseType`): None, the license paid with the
    VM, so Windows nodes cost the Windows rate; or Azure Hybrid Benefit (`Windows_Server`, False here), the
    customer's own license, so they cost the Linux rate."""

    def sku(self, name: str) -> AzureSku:
        """The size with this name (raises `KeyError` when the catalog does not have it)."""
        for sku in self.skus:
            if sku.name == name:
                return sku
        raise KeyError(f"VM size {name!r} is not in the {self.region} catalog")


class UnknownRegionError(ValueError):
    """No catalog ships for the requested region."""


_PRICE_COLUMNS = {
    "on_demand_usd_per_hour": "on_demand_price_micros",
    "spot_usd_per_hour": "spot_price_micros",
    "windows_on_demand_usd_per_hour": "windows_on_demand_price_micros",
    "windows_spot_usd_per_hour": "windows_spot_price_micros",
}
"""Shipped files give prices in USD per hour, as their sources do; other columns are `AzureSku` fields."""
_FIELDS = frozenset(field.name for field in fields(AzureSku))
_OPTIONAL_COLUMNS = frozenset({"windows_on_demand_price_micros", "windows_spot_price_micros"})
"""Columns a shipped file may leave out (the shipped catalogs have no Windows meter): they read as unknown."""


SIZE_FACTS_REGION = "eastus"
"""The snapshot whose sizes (capabilities, quota families, generations) every other region's catalog is made of."""


@cache
def snapshot_regions() -> tuple[str, ...]:
    """The regions a full snapshot ships for (sizes, zones, Linux on-demand and spot prices), sorted."""
    folder = files(_DATA_PACKAGE).joinpath(_DATA_DIR)
    return tuple(
        sorted(
            entry.name.removeprefix(_FILE_PREFIX).removesuffix(".json")
            for entry in folder.iterdir()
            if entry.name.startswith(_FILE_PREFIX) and entry.name.endswith(".json")
        )
    )


def shipped_regions() -> tuple[str, ...]:
    """The regions a catalog ships for: every region of the shipped price table, sorted."""
    return priced_regions()


def load_shipped_catalog(region: str, *, fallback: bool = False) -> AzureCatalog:
    """The shipped catalog of a region (`eastus`, `westeurope`, ...), built once.

    A region the price table lacks raises `UnknownRegionError`; with `fallback`, it gets the fallback region's
    catalog (eastus sizes at eastus prices, as the AKS provider prices such a region) under its own name, with
    the zones the shipped region list gives it (none when it does not list it)."""
    key = normalize_region(region)
    if key in snapshot_regions():
        return _load(key)
    if region_prices(key).fallback and not fallback:
        regions = priced_regions()
        raise UnknownRegionError(
            f"no shipped prices for region {region!r}: the shipped price table covers {len(regions)} public "
            f"regions: {', '.join(regions)}"
        )
    return _derived(key)


@cache
def _derived(region: str) -> AzureCatalog:
    prices = region_prices(region)
    if prices.fallback:
        base = load_shipped_catalog(prices.priced_as)
        return AzureCatalog(region=region, zones=region_zones(region), skus=base.skus)
    skus = tuple(
        dataclasses.replace(
            sku,
            on_demand_price_micros=price,
            spot_price_micros=price,
            windows_on_demand_price_micros=None,
            windows_spot_price_micros=None,
            zones=None,
        )
        for sku in _load(SIZE_FACTS_REGION).skus
        if (price := prices.on_demand.get(sku.name)) is not None
    )
    return AzureCatalog(region=region, zones=region_zones(region), skus=skus)


@cache
def _load(region: str) -> AzureCatalog:
    text = (
        files(_DATA_PACKAGE).joinpath(_DATA_DIR, f"{_FILE_PREFIX}{region}.json").read_text(encoding="utf-8")
    )
    return _catalog_from_json(json.loads(text))


def _catalog_from_json(raw: dict[str, Any]) -> AzureCatalog:
    columns = [_PRICE_COLUMNS.get(column, column) for column in raw["columns"]]
    if not _FIELDS - _OPTIONAL_COLUMNS <= set(columns) <= _FIELDS:
        raise ValueError(
            f"catalog {raw.get('region')!r} columns {sorted(columns)} do not match {sorted(_FIELDS)}"
        )
    return AzureCatalog(
        region=raw["region"],
        zones=tuple(raw["zones"]),
        skus=tuple(_sku_from_row(dict(zip(columns, row, strict=True))) for row in raw["skus"]),
    )


def _sku_from_row(row: dict[str, Any]) -> AzureSku:
    for price in _PRICE_COLUMNS.values():
        if row.get(price) is not None:
            row[price] = usd_to_micros(row[price])
    row["gpu_os"] = frozenset(row["gpu_os"] or ())
    row["hyperv_generations"] = tuple(row["hyperv_generations"] or ())
    if row["zones"] is not None:
        row["zones"] = tuple(row["zones"])
    return AzureSku(**row)
