"""The shipped price table of the public regions, its fallback, the regions' zones, and what the AKS provider
embeds about sizes (known SKUs, GPU registry)."""

from __future__ import annotations

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
