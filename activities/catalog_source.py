"""The catalog a worker plans and launches with, which a scheduled refresh replaces while the worker runs.

Activities hold a `CatalogSource` instead of a fixed `AzureCatalog` and read `current` at each call, so a
refreshed catalog takes effect at the next plan or launch. The holder lives in one worker process: each worker
has its own copy, refreshed only by the refresh activities that run on that worker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from core.instancetypes.catalog import AzureCatalog, load_shipped_catalog
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
        self._version = 0

    @classmethod
    def shipped(cls, region: str, windows_license_included: bool = True) -> CatalogSource:
        """The shipped snapshot of the region, until a refresh replaces it; Windows nodes at the Linux rate unless
        `windows_license_included` (the cluster's license type, `AzureCatalog.windows_license_included`)."""
        catalog = load_shipped_catalog(region)
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
        """For log lines: `the shipped eastus snapshot of <date>` or `the live eastus catalog of <time>`."""
        region = self._catalog.region
        if self._origin is CatalogOrigin.SHIPPED or self._refreshed_at is None:
            return f"the shipped {region} snapshot of {SHIPPED_SNAPSHOT_DATE}"
        return f"the live {region} catalog of {self._refreshed_at.isoformat(timespec='seconds')}"

    def replace(self, catalog: AzureCatalog, refreshed_at: datetime) -> None:
        """Make a live catalog current."""
        if catalog.region != self._catalog.region:
            raise ValueError(
                f"a catalog for region {catalog.region!r} cannot replace the {self._catalog.region!r} catalog"
            )
        self._catalog = catalog
        self._origin = CatalogOrigin.LIVE
        self._refreshed_at = refreshed_at
        self._version += 1
