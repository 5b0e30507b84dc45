"""Azure's public regions as the AKS provider knows them: each region's availability zones, and the provider's
generated on-demand price table with its fallback for a region the table lacks.

The table (`data/public-prices.csv`, see `data/README.md`) is the provider's `zz_generated.pricing.go` of
2026-06-18: Linux pay-as-you-go USD per hour for 57 public regions, one row per ARM size, one column per region,
empty where the region has no meter for the size. As in the provider, a region the table lacks is priced with
the fallback region's (eastus) prices, and the caller says so. The table holds no spot prices.

The provider's table holds the Windows rate (Linux plus the Windows Server license) instead of the Linux one for
some sizes in 56 of its 57 regions. `data/public-prices-windows-rates.csv` lists each such cell with its Linux
price, and loading replaces the one by the other, so the table's prices are Linux prices everywhere.

Zones (`data/public-regions.json`) are the logical availability zones of each physical region, from the
provider's `locations.json`; a region it does not list has none known.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from core.instancetypes.types import usd_to_micros

_DATA_PACKAGE = "core.instancetypes"
_DATA_DIR = "data"
_PRICES_FILE = "public-prices.csv"
_WINDOWS_RATES_FILE = "public-prices-windows-rates.csv"
_REGIONS_FILE = "public-regions.json"

PRICE_FALLBACK_REGION = "eastus"
"""The provider's fallback: a region missing from its table is priced with this region's prices."""
PRICES_GENERATED = "2026-06-18"
"""When the provider generated its table from the Retail Prices API."""


@dataclass(frozen=True, slots=True)
class RegionPrices:
    """The shipped on-demand prices a region is planned with until live prices replace them."""

    region: str
    priced_as: str
    """The table's region whose prices these are: the region itself, or the fallback region."""
    on_demand: Mapping[str, int]
    """Micro-dollars per hour by ARM size name."""

    @property
    def fallback(self) -> bool:
        """Whether the table lacks the region, so the fallback region's prices stand in for its own."""
        return self.priced_as != self.region

    def describe(self) -> str:
        """For log lines: `the shipped westeurope prices of 2026-06-18`, or the fallback's, naming it."""
        if self.fallback:
            return f"the shipped {self.priced_as} prices of {PRICES_GENERATED} (the table has none for {self.region})"
        return f"the shipped {self.region} prices of {PRICES_GENERATED}"


def normalize_region(region: str) -> str:
    """Region names as ARM writes them: lower case, no spaces (`West Europe` -> `westeurope`)."""
    return "".join(region.split()).lower()


def priced_regions() -> tuple[str, ...]:
    """The regions the shipped price table covers, sorted."""
    return tuple(_price_table())


def region_prices(region: str) -> RegionPrices:
    """The table's prices for the region, or the fallback region's when the table lacks it."""
    key = normalize_region(region)
    table = _price_table()
    priced_as = key if key in table else PRICE_FALLBACK_REGION
    return RegionPrices(region=key, priced_as=priced_as, on_demand=table[priced_as])


def region_zones(region: str) -> tuple[str, ...]:
    """The region's logical availability zones (`("1", "2", "3")`); empty when it has none or is not listed."""
    entry = _regions().get(normalize_region(region))
    return tuple(entry["zones"]) if entry else ()


def region_display_name(region: str) -> str:
    """`West Europe` for `westeurope`; the name itself for a region the shipped list lacks."""
    entry = _regions().get(normalize_region(region))
    return str(entry["displayName"]) if entry else region


@cache
def _price_table() -> dict[str, dict[str, int]]:
    table = _provider_table()
    for correction in _read_csv(_WINDOWS_RATES_FILE)[1]:
        region, size, windows_rate, linux_rate = correction[:4]
        if table[region].get(size) != usd_to_micros(windows_rate):
            raise ValueError(
                f"{_WINDOWS_RATES_FILE}: {region} {size} is listed at {windows_rate} $/h, which is not "
                f"its price in {_PRICES_FILE}"
            )
        table[region][size] = usd_to_micros(linux_rate)
    return table


def _provider_table() -> dict[str, dict[str, int]]:
    header, rows = _read_csv(_PRICES_FILE)
    if header[0] != "size":
        raise ValueError(f"{_PRICES_FILE}: the first column must be 'size', not {header[0]!r}")
    regions = header[1:]
    table: dict[str, dict[str, int]] = {region: {} for region in regions}
    for row in rows:
        size, prices = row[0], row[1:]
        if len(prices) != len(regions):
            raise ValueError(
                f"{_PRICES_FILE}: row {size!r} has {len(prices)} prices for {len(regions)} regions"
            )
        for region, price in zip(regions, prices, strict=True):
            if price:
                table[region][size] = usd_to_micros(price)
    return dict(sorted(table.items()))


def _read_csv(name: str) -> tuple[list[str], list[list[str]]]:
    text = files(_DATA_PACKAGE).joinpath(_DATA_DIR, name).read_text(encoding="utf-8")
    header, *rows = csv.reader(io.StringIO(text))
    return header, rows


@cache
def _regions() -> dict[str, dict[str, Any]]:
    text = files(_DATA_PACKAGE).joinpath(_DATA_DIR, _REGIONS_FILE).read_text(encoding="utf-8")
    regions: dict[str, dict[str, Any]] = json.loads(text)["regions"]
    return regions
