"""The catalog a worker plans and launches with, which a scheduled refresh replaces while the worker runs.

Activities hold a `CatalogSource` instead of a fixed `AzureCatalog` and read `current` at each call, so a
refreshed catalog takes effect at the next plan or launch. The holder lives in one worker process: each worker
has its own copy, refreshed only by the refresh activities that run on that worker.

It also says where the catalog's sizes and its prices came from: the sizes from the shipped catalog or the
Resource SKUs API (`refreshed_at`), the prices from the shipped table (the region's, or the fallback region's
when the table lacks it) or the Retail Prices API (`prices_refreshed_at`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from core.instancetypes.catalog import SIZE_FACTS_REGION, AzureCatalog, load_shipped_catalog, snapshot_regions
from core.instancetypes.regions import region_prices
from core.messages import CatalogOrigin

SHIPPED_SNAPSHOT_DATE = "2026-06-18"
"""Date of the shipped prices (the provider's generated on-demand table; spot prices are from 2026-05-20)."""

T = TypeVar("T")


class CatalogSource:
    """The current catalog of one region, where it came from, and when it was last refreshed."""

    def __init__(
        self,
        catalog: AzureCatalog,
        origin: CatalogOrigin = CatalogOrigin.SHIPPED,
        refreshed_at: datetime | None = None,
    ) -> None:
        self._catalog = catalog
        self._origin = origin
        self._refreshed_at = refreshed_at
        self._prices_refreshed_at: datetime | None = None
        self._version = 0
        self.live_prices = True
        """Whether the cloud has a Retail Prices API to refresh prices from (sovereign clouds have none)."""

    @classmethod
    def shipped(cls, region: str, windows_license_included: bool = True) -> CatalogSource:
        """The shipped catalog of the region (the fallback region's prices for a region the table lacks), until a
        refresh replaces it; Windows nodes at the Linux rate unless `windows_license_included` (the cluster's
        license type, `AzureCatalog.windows_license_included`)."""
        catalog = load_shipped_catalog(region, fallback=True)
        if not windows_license_included:
            catalog = dataclasses.replace(catalog, windows_license_included=False)
        return cls(catalog)

    @classmethod
    def of(cls, catalog: AzureCatalog | CatalogSource) -> CatalogSource:
        """A fixed catalog as a source (tests and the what-if CLI never refresh), or the source itself."""
        return catalog if isinstance(catalog, CatalogSource) else cls(catalog)

    @property
    def current(self) -> AzureCatalog:
        return self._catalog

    @property
    def origin(self) -> CatalogOrigin:
        return self._origin

    @property
    def refreshed_at(self) -> datetime | None:
        """When the current catalog was built from live data; None for the shipped snapshot."""
        return self._refreshed_at

    @property
    def prices_refreshed_at(self) -> datetime | None:
        """When the current prices were read from the Retail Prices API; None for the shipped ones."""
        return self._prices_refreshed_at

    @property
    def version(self) -> int:
        """Goes up at every replacement: a key for whatever is derived from the catalog and cached."""
        return self._version

    def derived(self, build: Callable[[AzureCatalog], T]) -> Callable[[], T]:
        """`build(current)` as a function holders call at each use: computed once per catalog, again only
        after a refresh replaced it (instance types take a tenth of a second to build)."""
        built: tuple[int, T] | None = None

        def get() -> T:
            nonlocal built
            if built is None or built[0] != self._version:
                built = (self._version, build(self._catalog))
            return built[1]

        return get

    def describe(self) -> str:
        """For log lines: `the shipped eastus snapshot of <date>`, `the live eastus catalog of <time>`, or, in a
        region no snapshot ships for, `the eastus snapshot's sizes priced with <its prices>`."""
        region = self._catalog.region
        if self._origin is CatalogOrigin.LIVE and self._refreshed_at is not None:
            return f"the live {region} catalog of {self._refreshed_at.isoformat(timespec='seconds')}"
        if region in snapshot_regions():
            return f"the shipped {region} snapshot of {SHIPPED_SNAPSHOT_DATE}"
        return f"the {SIZE_FACTS_REGION} snapshot's sizes priced with {self.describe_prices()}"

    def describe_prices(self) -> str:
        """For log lines: `the live westeurope prices of <time>`, or the shipped prices in use (naming the fallback
        region's)."""
        region = self._catalog.region
        if self._prices_refreshed_at is not None:
            return f"the live {region} prices of {self._prices_refreshed_at.isoformat(timespec='seconds')}"
        return region_prices(region).describe()

    def price_fallback(self) -> str | None:
        """Why the catalog's prices are another region's, when they are: the shipped table lacks the region and no
        live prices replaced its fallback's (None otherwise)."""
        shipped = region_prices(self._catalog.region)
        if not shipped.fallback or self._prices_refreshed_at is not None:
            return None
        until = (
            "until prices are read from the Retail Prices API"
            if self.live_prices
            else "for good: this cloud has no Retail Prices API to read them from"
        )
        return (
            f"the shipped price table has no prices for {shipped.region}: instance types are priced with the "
            f"{shipped.priced_as} prices (the AKS provider's fallback) {until}"
        )

    def replace(
        self,
        catalog: AzureCatalog,
        refreshed_at: datetime | None,
        prices_refreshed_at: datetime | None = None,
    ) -> None:
        """Make a refreshed catalog current: its sizes listed live at `refreshed_at` (None: the sizes in use were
        kept), its prices read live at `prices_refreshed_at` (None: the prices in use were kept)."""
        if catalog.region != self._catalog.region:
            raise ValueError(
                f"a catalog for region {catalog.region!r} cannot replace the {self._catalog.region!r} catalog"
            )
        self._catalog = catalog
        if refreshed_at is not None:
            self._origin = CatalogOrigin.LIVE
            self._refreshed_at = refreshed_at
        if prices_refreshed_at is not None:
            self._prices_refreshed_at = prices_refreshed_at
        self._version += 1
