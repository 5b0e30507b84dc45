"""What holders derive from the worker's catalog is built once per catalog and again after a refresh."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from activities.catalog_source import CatalogSource
from core.instancetypes.azure import ImageFamily, NodeClassSettings, azure_instance_types
from core.instancetypes.catalog import AzureCatalog, load_shipped_catalog

SHIPPED = load_shipped_catalog("eastus")


def test_a_derived_value_is_built_once_per_catalog() -> None:
    source = CatalogSource(SHIPPED)
    built: list[AzureCatalog] = []

    def count(catalog: AzureCatalog) -> int:
        built.append(catalog)
        return len(catalog.skus)

    skus = source.derived(count)
    assert skus() == skus() == len(SHIPPED.skus)
    assert built == [SHIPPED]

    smaller = AzureCatalog(region="eastus", zones=SHIPPED.zones, skus=SHIPPED.skus[:3])
    source.replace(smaller, datetime(2026, 11, 22, tzinfo=UTC))
    assert skus() == skus() == 3
    assert built == [SHIPPED, smaller]


def test_a_cluster_with_azure_hybrid_benefit_prices_windows_at_the_linux_rate() -> None:
    windows = NodeClassSettings(image_family=ImageFamily.WINDOWS_2022)

    def on_demand(source: CatalogSource) -> int:
        [d4] = [it for it in azure_instance_types(source.current, windows) if it.name == "Standard_D4s_v5"]
        return next(o.price_micros for o in d4.offerings if o.capacity_type == "on-demand")

    linux_price = SHIPPED.sku("Standard_D4s_v5").on_demand_price_micros
    assert on_demand(CatalogSource.shipped("eastus", windows_license_included=False)) == linux_price
    assert on_demand(CatalogSource.shipped("eastus")) == linux_price + 4 * 46_000  # type: ignore[operator]


@pytest.mark.parametrize(
    ("region", "described"),
    [
        ("eastus", "the shipped eastus snapshot of 2026-06-18"),
        ("westeurope", "the eastus snapshot's sizes priced with the shipped westeurope prices of 2026-06-18"),
        (
            "belgiumcentral",
            "the eastus snapshot's sizes priced with the shipped eastus prices of 2026-06-18 (the table has none "
            "for belgiumcentral)",
        ),
    ],
)
def test_a_shipped_catalog_says_what_its_sizes_and_prices_are(region: str, described: str) -> None:
    """Only two regions ship a snapshot: every other region's catalog is the eastus sizes at its own prices (or,
    where the table lacks the region, at eastus's), and says so where a failed refresh names what stays."""
    assert CatalogSource.shipped(region).describe() == described
