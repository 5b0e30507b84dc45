from __future__ import annotations

from decimal import Decimal

import pytest

from core.instancetypes.catalog import (
    AzureCatalog,
    AzureSku,
    UnknownRegionError,
    load_shipped_catalog,
    shipped_regions,
    snapshot_regions,
    usd_to_micros,
)


def test_a_catalog_ships_for_every_region_of_the_price_table() -> None:
    assert snapshot_regions() == ("eastus", "southcentralus")
    regions = shipped_regions()
    assert len(regions) == 57
    assert {"eastus", "southcentralus", "westeurope", "uksouth", "swedensouth"} <= set(regions)


@pytest.mark.parametrize("region", ["eastus", "southcentralus"])
def test_shipped_catalog_has_every_size_once(region: str) -> None:
    catalog = load_shipped_catalog(region)

    names = [sku.name for sku in catalog.skus]
    assert catalog.region == region
    assert catalog.zones == ("1", "2", "3")
    assert len(names) == 637
    assert len(set(names)) == len(names)
    assert sum(sku.architecture == "arm64" for sku in catalog.skus) == 97
    assert sum(sku.spot_price_micros is not None for sku in catalog.skus) == 619


def test_sizes_read_with_prices_in_micro_dollars() -> None:
    catalog = load_shipped_catalog("eastus")

    d2s = catalog.sku("Standard_D2s_v3")
    assert (d2s.vcpus, d2s.memory_gib, d2s.architecture) == (2, 8.0, "amd64")
    assert d2s.quota_family == "standardDSv3Family"
    assert d2s.hyperv_generations == ("V1", "V2")
    assert d2s.encryption_at_host_supported is True
    # Linux rates, not the Windows rates the provider's compiled table holds for these sizes
    assert catalog.sku("Standard_D2as_v5").on_demand_price_micros == 86_000
    assert catalog.sku("Standard_B2ats_v2").on_demand_price_micros == 9_400


def test_gpu_sizes_carry_registry_facts() -> None:
    a100 = load_shipped_catalog("eastus").sku("Standard_NC24ads_A100_v4")

    assert (a100.gpu_count, a100.gpu_manufacturer) == (1, "nvidia")
    assert "ubuntu" in a100.gpu_os


def test_unknowns_stay_unknown() -> None:
    catalog = load_shipped_catalog("eastus")

    b12ms = catalog.sku("Standard_B12ms")
    assert b12ms.low_priority_capable is False
    assert b12ms.spot_price_micros is None
    assert b12ms.zones is None
    assert catalog.sku("Standard_D248s_v7").karpenter_known_sku is False


def test_southcentralus_has_fixture_zones() -> None:
    catalog = load_shipped_catalog("southcentralus")

    assert catalog.sku("Standard_NC24ads_A100_v4").zones == ("1", "3")
    assert catalog.sku("Standard_NC6s_v3").zones == ()
    assert catalog.sku("Standard_D4s_v5").zones is None


def test_region_is_case_insensitive_and_cached() -> None:
    assert load_shipped_catalog("EastUS") is load_shipped_catalog("eastus")


def test_another_region_has_the_snapshot_sizes_it_prices_at_its_own_prices() -> None:
    eastus, westeurope = load_shipped_catalog("eastus"), load_shipped_catalog("West Europe")

    assert (westeurope.region, westeurope.zones) == ("westeurope", ("1", "2", "3"))
    assert {sku.name for sku in westeurope.skus} <= {sku.name for sku in eastus.skus}
    d4 = westeurope.sku("Standard_D4s_v5")
    # The provider's table: 0.23 $/h in westeurope, 0.192 in eastus. It has no spot prices: as the provider does
    # until it reads live prices, spot costs what on-demand does.
    assert (d4.on_demand_price_micros, d4.spot_price_micros, d4.zones) == (230_000, 230_000, None)
    assert eastus.sku("Standard_D4s_v5").on_demand_price_micros == 192_000
    assert (d4.vcpus, d4.quota_family) == (4, eastus.sku("Standard_D4s_v5").quota_family)


def test_a_region_without_zones_and_one_that_prices_fewer_sizes() -> None:
    westcentralus = load_shipped_catalog("westcentralus")
    assert westcentralus.zones == ()
    assert 0 < len(westcentralus.skus) < len(load_shipped_catalog("eastus").skus)


def test_a_region_the_table_lacks_is_refused_or_gets_the_fallback_catalog() -> None:
    with pytest.raises(
        UnknownRegionError, match=r"'westeuropa': the shipped price table covers 57 public regions"
    ):
        load_shipped_catalog("westeuropa")
    gov = load_shipped_catalog("usgovvirginia", fallback=True)
    eastus = load_shipped_catalog("eastus")
    assert (gov.region, gov.zones, gov.skus) == ("usgovvirginia", (), eastus.skus)


def test_catalog_lookup_of_missing_size() -> None:
    catalog = AzureCatalog(
        region="eastus", zones=(), skus=(AzureSku(name="Standard_D2s_v3", vcpus=2, memory_gib=8),)
    )

    assert catalog.sku("Standard_D2s_v3").vcpus == 2
    with pytest.raises(KeyError, match="Standard_X"):
        catalog.sku("Standard_X")


@pytest.mark.parametrize(
    ("usd", "micros"),
    [
        (0.192, 192_000),
        ("0.0000005", 1),
        ("0.0000004", 0),
        (Decimal("1.2345675"), 1_234_568),
        (999, 999_000_000),
    ],
)
def test_usd_to_micros_rounds_half_up(usd: float | str | Decimal, micros: int) -> None:
    assert usd_to_micros(usd) == micros
