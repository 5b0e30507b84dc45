from __future__ import annotations

from decimal import Decimal

import pytest

from core.instancetypes.catalog import (
    AzureCatalog,
    AzureSku,
    UnknownRegionError,
    load_shipped_catalog,
    shipped_regions,
    usd_to_micros,
)


def test_shipped_regions() -> None:
    assert shipped_regions() == ("eastus", "southcentralus")


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


def test_unknown_region_lists_shipped_regions() -> None:
    with pytest.raises(UnknownRegionError, match=r"'westus'; shipped regions: eastus, southcentralus"):
        load_shipped_catalog("westus")


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
