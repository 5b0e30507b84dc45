"""The catalog refresh: live VM sizes and prices replace the worker's catalog, or it is kept with one log line.

Both APIs are read together. With both answers, the catalog becomes the live sizes at their live prices; a size
without a live price keeps the shipped one (a size the snapshot does not know has none, and is offered at
the missing price). If either read fails, nothing changes: the worker keeps the catalog it has (the shipped
snapshot until a refresh succeeds) and one warning says what failed and which catalog stays in use.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from azure.mgmt.compute.aio import ComputeManagementClient
from temporalio import activity

from activities.azure.prices import LivePrices, PriceFetchError, RetailPricesClient
from activities.azure.skus import SkuListError, list_skus
from activities.catalog_source import CatalogSource
from activities.heartbeat import heartbeats
from core.instancetypes.catalog import AzureCatalog, AzureSku, load_shipped_catalog
from core.messages import CatalogRefreshInput, CatalogRefreshResult, MaintenanceActivity

logger = logging.getLogger(__name__)


def live_catalog(
    zones: tuple[str, ...],
    region: str,
    skus: tuple[AzureSku, ...],
    prices: LivePrices,
    windows_license_included: bool = True,
) -> AzureCatalog:
    """The live sizes at their live prices; each size without a live price keeps the price it came with."""
    return AzureCatalog(
        region=region,
        zones=zones,
        windows_license_included=windows_license_included,
        skus=tuple(
            dataclasses.replace(
                sku,
                on_demand_price_micros=prices.on_demand.get(sku.name, sku.on_demand_price_micros),
                spot_price_micros=prices.spot.get(sku.name, sku.spot_price_micros),
                windows_on_demand_price_micros=prices.windows_on_demand.get(
                    sku.name, sku.windows_on_demand_price_micros
                ),
                windows_spot_price_micros=prices.windows_spot.get(sku.name, sku.windows_spot_price_micros),
            )
            for sku in skus
        ),
    )


class CatalogRefreshActivities:
    """Refreshes one worker's `CatalogSource` from the Resource SKUs and Retail Prices APIs."""

    def __init__(
        self,
        catalogs: CatalogSource,
        compute: ComputeManagementClient,
        prices: RetailPricesClient,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.catalogs = catalogs
        self.compute = compute
        self.prices = prices
        self._clock = clock

    @activity.defn(name=MaintenanceActivity.REFRESH_CATALOG)
    @heartbeats
    async def refresh_catalog(self, request: CatalogRefreshInput) -> CatalogRefreshResult:
        """Replace the catalog with live data, or keep it and say why."""
        region = self.catalogs.current.region
        shipped = load_shipped_catalog(region)
        skus, prices = await asyncio.gather(
            list_skus(self.compute, region, shipped), self.prices.fetch(region), return_exceptions=True
        )
        failures: list[str] = []
        for outcome in (skus, prices):
            if isinstance(outcome, SkuListError | PriceFetchError):
                failures.append(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        if failures:
            failure = "; ".join(failures)
            logger.warning(
                f"failed to refresh instance types and pricing for region {region}, "
                f"using {self.catalogs.describe()}: {failure}",
                extra={"karpenter": {}},
            )
            return self._result(region, refreshed=False, failure=failure)
        assert isinstance(skus, tuple) and isinstance(prices, LivePrices)
        included = self.catalogs.current.windows_license_included
        catalog = live_catalog(shipped.zones, region, skus, prices, included)
        self.catalogs.replace(catalog, self._clock())
        for kind, count in (("on-demand", len(prices.on_demand)), ("spot", len(prices.spot))):
            logger.info(
                f"updated {kind} pricing for region {region}",
                extra={"karpenter": {"instance-type-count": count}},
            )
        logger.info(
            f"updated instance types for region {region}",
            extra={"karpenter": {"instance-type-count": len(catalog.skus)}},
        )
        return self._result(region, refreshed=True, prices=prices)

    def _result(
        self, region: str, refreshed: bool, prices: LivePrices | None = None, failure: str | None = None
    ) -> CatalogRefreshResult:
        return CatalogRefreshResult(
            region=region,
            refreshed=refreshed,
            origin=self.catalogs.origin,
            refreshed_at=self.catalogs.refreshed_at,
            skus=len(self.catalogs.current.skus),
            live_on_demand_prices=len(prices.on_demand) if prices else 0,
            live_spot_prices=len(prices.spot) if prices else 0,
            failure=failure,
        )
