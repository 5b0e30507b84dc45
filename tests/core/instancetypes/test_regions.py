"""The shipped price table of the public regions, its fallback, the regions' zones, and what the AKS provider
embeds about sizes (known SKUs, GPU registry)."""

from __future__ import annotations

import csv
import io
import re
from importlib.resources import files

import pytest

from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.provider_facts import RegisteredGpu, is_known_sku, registered_gpu
from core.instancetypes.regions import (
    PRICE_FALLBACK_REGION,
    priced_regions,
    region_display_name,
    region_prices,
    region_zones,
)


def test_the_table_prices_57_regions_as_the_provider_generated_it() -> None:
    regions = priced_regions()
    assert len(regions) == 57 and list(regions) == sorted(regions)
    uksouth = region_prices("uksouth")
    assert (uksouth.region, uksouth.priced_as, uksouth.fallback) == ("uksouth", "uksouth", False)
    assert len(uksouth.on_demand) == 1533  # the count the provider's table has for uksouth
    assert uksouth.on_demand["Standard_D4s_v5"] == 222_000
    assert uksouth.describe() == "the shipped uksouth prices of 2026-06-18"


def test_a_region_the_table_lacks_is_priced_as_the_fallback_region_and_says_so() -> None:
    prices = region_prices("usgovvirginia")
    assert (prices.priced_as, prices.fallback) == (PRICE_FALLBACK_REGION, True)
    assert prices.on_demand is region_prices("eastus").on_demand
    assert (
        prices.describe() == "the shipped eastus prices of 2026-06-18 (the table has none for usgovvirginia)"
    )


def test_zones_come_from_the_providers_location_list() -> None:
    assert region_zones("westeurope") == ("1", "2", "3")
    assert region_zones("westcentralus") == ()
    assert region_zones("swedensouth") == ()  # priced, but not in the location list
    assert region_display_name("uksouth") == "UK South"


def test_the_providers_known_skus_and_gpu_registry() -> None:
    assert is_known_sku("Standard_D4s_v5") and not is_known_sku("Standard_D248s_v7")
    assert registered_gpu("Standard_NC24ads_A100_v4") == RegisteredGpu(
        "nvidia", frozenset({"ubuntu", "windows", "azurelinux3"})
    )
    assert registered_gpu("Standard_NC24ads_A100_v4_Promo") == registered_gpu("Standard_NC24ads_A100_v4")
    assert registered_gpu("Standard_D4s_v5") is None


def _windows_rate_rows() -> list[dict[str, str]]:
    data = files("core.instancetypes").joinpath("data", "public-prices-windows-rates.csv")
    return list(csv.DictReader(io.StringIO(data.read_text(encoding="utf-8"))))


def test_the_windows_rates_in_the_providers_table_are_replaced_by_linux_prices() -> None:
    # westus2's row of Standard_D2as_v5 in the provider's table is 0.178: the Linux 0.086 plus the license.
    assert region_prices("westus2").on_demand["Standard_D2as_v5"] == 86_000
    # A Linux AMD size (D/E ..as_v5, ..ads_v5) never costs more than its Intel twin; the provider's table
    # breaks that 893 times in 54 regions.
    above_twin = []
    for region in priced_regions():
        prices = region_prices(region).on_demand
        for size, price in prices.items():
            if amd := re.fullmatch(r"Standard_([DE]\d+)a(d?s_v5)", size):
                twin = prices.get(f"Standard_{amd[1]}{amd[2]}")
                if twin is not None and price > twin:
                    above_twin.append((region, size, price, twin))
    assert above_twin == []


@pytest.mark.parametrize("region", ["eastus", "southcentralus"])
def test_the_table_holds_the_snapshots_linux_prices_in_their_regions(region: str) -> None:
    # The snapshots' on-demand prices are Linux meters; the provider's table has 41 Windows rates in each region.
    table = region_prices(region).on_demand
    snapshot = {sku.name: sku.on_demand_price_micros for sku in load_shipped_catalog(region).skus}
    differ = {name: (price, table.get(name)) for name, price in snapshot.items() if table.get(name) != price}
    assert differ == {}


def test_each_replaced_price_is_the_windows_rate_less_the_license() -> None:
    rows = _windows_rate_rows()
    assert len(rows) == 2095
    assert len({row["region"] for row in rows}) == 56  # every region but spaincentral
    for row in rows:
        vcpus = int(re.match(r"Standard_[A-Z]+(\d+)", row["size"])[1])  # type: ignore[index]
        license_rate = 0.0046 if row["size"].startswith("Standard_B") else 0.046
        per_vcpu = (float(row["table_usd_per_hour"]) - float(row["linux_usd_per_hour"])) / vcpus
        assert abs(per_vcpu - license_rate) <= license_rate / 10, row
