"""The live SKU list: Resource SKUs as `AzureSku` records, filtered as the AKS provider filters them."""

from __future__ import annotations

import dataclasses
from typing import Any

from azure.mgmt.compute.models import ResourceSku

from activities.azure.skus import sku_from_resource, skus_from_resources
from core.instancetypes.catalog import AzureSku, load_shipped_catalog
from simulator.arm import Restriction, resource_sku

CATALOG = load_shipped_catalog("eastus")


def raw(name: str, restriction: Restriction | None = None) -> dict[str, Any]:
    """The Resource SKU of a shipped size, as the API (the ARM emulator) serves it."""
    return resource_sku(CATALOG.sku(name), CATALOG, restriction)


def live(*resources: dict[str, Any]) -> dict[str, AzureSku]:
    skus = skus_from_resources([ResourceSku(resource) for resource in resources], "eastus", CATALOG)
    return {sku.name: sku for sku in skus}


def test_a_resource_sku_reads_back_as_the_size_it_describes() -> None:
    for name in (
        "Standard_D4s_v5",
        "Standard_D16ps_v5",
        "Standard_NC24ads_A100_v4",
        "Standard_D128ds_v6",
        "Standard_B12ms",
    ):
        shipped = CATALOG.sku(name)
        sku = sku_from_resource(ResourceSku(raw(name)), "eastus", shipped)
        # The API names every zone where the snapshot says "the region's"; everything else is the same.
        expected_zones = CATALOG.zones if shipped.zones is None else shipped.zones
        assert sku == dataclasses.replace(shipped, zones=expected_zones), name


def test_the_api_wins_over_the_snapshot_where_it_says_something() -> None:
    resource = raw("Standard_D4s_v5")
    capabilities = {c["name"]: c for c in resource["capabilities"]}
    capabilities["MemoryGB"]["value"] = "32"
    capabilities["LowPriorityCapable"]["value"] = "False"
    resource["family"] = "standardDSv5FamilyNew"
    sku = live(resource)["Standard_D4s_v5"]
    assert (sku.memory_gib, sku.low_priority_capable, sku.quota_family) == (
        32.0,
        False,
        "standardDSv5FamilyNew",
    )
    assert sku.docs_series == CATALOG.sku("Standard_D4s_v5").docs_series
    assert sku.on_demand_price_micros == CATALOG.sku("Standard_D4s_v5").on_demand_price_micros


def test_only_virtual_machine_skus_of_the_region_are_kept() -> None:
    disk = {"resourceType": "disks", "name": "Premium_LRS", "locations": ["eastus"], "capabilities": []}
    elsewhere = raw("Standard_D2s_v5")
    elsewhere["locations"] = ["westus"]
    elsewhere["locationInfo"] = [{"location": "westus", "zones": ["1"]}]
    assert list(live(disk, elsewhere, raw("Standard_D4s_v5"))) == ["Standard_D4s_v5"]


def test_a_location_restriction_drops_the_size_and_a_zone_restriction_drops_its_zones() -> None:
    skus = live(
        raw("Standard_D4s_v5", Restriction("Standard_D4s_v5")),
        raw("Standard_D8s_v5", Restriction("Standard_D8s_v5", frozenset({"2"}))),
        raw("Standard_D16s_v5", Restriction("Standard_D16s_v5", frozenset({"1", "2", "3"}))),
    )
    assert "Standard_D4s_v5" not in skus
    assert skus["Standard_D8s_v5"].zones == ("1", "3")
    # Every zone restricted: still offered regionally (zone "0"), as the provider does.
    assert skus["Standard_D16s_v5"].zones == ()


def test_sizes_no_aksnodeclass_can_use_are_left_out() -> None:
    tiny = raw("Standard_D4s_v5")
    tiny["name"] = "Standard_B1s"
    constrained = raw("Standard_E8s_v5")
    constrained["name"] = "Standard_E8-2s_v5"
    confidential = raw("Standard_D4s_v5")
    confidential["name"] = "Standard_DC4s_v5"
    unregistered_gpu = raw("Standard_D4s_v5")
    unregistered_gpu["name"] = "Standard_ND4_v9"
    unregistered_gpu["capabilities"].append({"name": "GPUs", "value": "1"})
    assert list(live(tiny, constrained, confidential, unregistered_gpu, raw("Standard_D4s_v5"))) == [
        "Standard_D4s_v5"
    ]


def test_a_size_the_snapshot_does_not_know_is_kept_as_an_unknown_sku_without_prices() -> None:
    new = raw("Standard_D4s_v5")
    new["name"] = "Standard_D4s_v9"
    sku = live(new)["Standard_D4s_v9"]
    assert (sku.vcpus, sku.memory_gib, sku.architecture) == (4, 16.0, "amd64")
    assert sku.karpenter_known_sku is False
    assert (sku.on_demand_price_micros, sku.spot_price_micros, sku.gpu_manufacturer) == (None, None, None)


def test_a_size_only_the_api_lists_gets_the_providers_facts_and_the_tables_price() -> None:
    storage = raw("Standard_E8s_v5")
    storage["name"], storage["family"] = "Standard_L8s_v3", "standardLSv3Family"
    gpu = raw("Standard_NC24ads_A100_v4")
    gpu["name"] = "Standard_NC16ads_A10_v4"
    skus = live(storage, gpu)
    l8 = skus["Standard_L8s_v3"]
    # Known to the provider and priced by its table (0.696 $/h in eastus), with the API's capabilities.
    assert (l8.karpenter_known_sku, l8.on_demand_price_micros, l8.quota_family) == (
        True,
        696_000,
        "standardLSv3Family",
    )
    assert (l8.vcpus, l8.docs_series, l8.spot_price_micros) == (8, None, None)
    a10 = skus["Standard_NC16ads_A10_v4"]
    assert (a10.gpu_manufacturer, a10.gpu_os) == ("nvidia", frozenset({"ubuntu", "windows", "azurelinux3"}))


def test_a_size_without_vcpus_or_memory_is_skipped() -> None:
    broken = raw("Standard_D4s_v5")
    broken["capabilities"] = [c for c in broken["capabilities"] if c["name"] != "vCPUs"]
    assert live(broken) == {}
