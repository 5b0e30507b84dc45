"""What holders derive from the worker's catalog is built once per catalog and again after a refresh."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.catalog_source import CatalogSource
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
