"""The catalog refresh: the region's VM sizes from the Resource SKUs API, priced from the Retail Prices API where
the cloud has one, replace the worker's catalog; what fails keeps what the worker had, with one log line each.

The two reads are independent, as the AKS provider's instance-type and pricing controllers are:

- Sizes listed: the catalog becomes them (`activities.azure.skus`); otherwise it keeps the sizes it has.
- Each size is priced at its live price when this refresh read one, else at the price the catalog had for it (an
  earlier live price, or the shipped one), else at the shipped table's (`core.instancetypes.regions`, the
  fallback region's where the table lacks the region). Spot prices read live replace all others: a size the
  Retail Prices API lists no spot price for has none (the provider prices it at 999 $/h; here its spot offering
  is unavailable), where the shipped table's stand-in (spot as on-demand) stood before.
- A cloud without the Retail Prices API (the sovereign clouds: the provider reads live prices in the public cloud
  only) keeps the shipped prices for good, and, as the provider's static prices do, a size without a spot price
  is offered as spot at its on-demand price.

`CatalogRefreshActivities.refresh` is what a starting worker calls (and retries while the sizes cannot be listed,
`workers.serve`); the scheduled activity calls it too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from azure.mgmt.compute.aio import ComputeManagementClient
from temporalio import activity

from activities.azure.prices import LivePrices, PriceFetchError, RetailPricesClient
from activities.azure.skus import SkuListError, list_skus
from activities.catalog_source import CatalogSource
from activities.heartbeat import heartbeats
from core.instancetypes.catalog import AzureCatalog, AzureSku, load_shipped_catalog
from core.instancetypes.regions import region_zones
from core.messages import CatalogRefreshInput, CatalogRefreshResult, MaintenanceActivity

logger = logging.getLogger(__name__)


def priced_catalog(
    region: str,
    skus: Iterable[AzureSku],
    live: LivePrices | None,
    previous: AzureCatalog,
    spot_as_on_demand: bool = False,
) -> AzureCatalog:
    """The sizes at their live prices, else at the prices `previous` had for them, else at the prices they came
    with (live spot prices, when read, are the only ones); `spot_as_on_demand` offers a size without a spot price
    as spot at its on-demand price. Windows meters read live are kept as the sizes' Windows prices, by the same
    rules; a size without one is priced as Linux plus the license (`core.instancetypes.windows`)."""
    before = {sku.name: sku for sku in previous.skus}

    def price(sku: AzureSku) -> AzureSku:
        kept = before.get(sku.name, sku)
        on_demand, spot = kept.on_demand_price_micros, kept.spot_price_micros
        windows_on_demand, windows_spot = kept.windows_on_demand_price_micros, kept.windows_spot_price_micros
        if live is not None:
            # Live spot prices replace the shipped ones wholesale, as the provider's do: a size without a live
            # spot price has none (it has no spot meter), where the shipped one may stand in for on-demand's.
            on_demand, spot = live.on_demand.get(sku.name, on_demand), live.spot.get(sku.name)
            windows_on_demand = live.windows_on_demand.get(sku.name, windows_on_demand)
            windows_spot = live.windows_spot.get(sku.name)
        if spot is None and spot_as_on_demand:
            spot = on_demand
        return dataclasses.replace(
            sku,
            on_demand_price_micros=on_demand,
            spot_price_micros=spot,
            windows_on_demand_price_micros=windows_on_demand,
            windows_spot_price_micros=windows_spot,
        )

    return AzureCatalog(
        region=region,
        zones=region_zones(region),
        skus=tuple(price(sku) for sku in skus),
        windows_license_included=previous.windows_license_included,
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
        catalogs.live_prices = prices.available

    @activity.defn(name=MaintenanceActivity.REFRESH_CATALOG)
    @heartbeats
    async def refresh_catalog(self, request: CatalogRefreshInput) -> CatalogRefreshResult:
        """Replace the catalog's sizes and prices with live ones, or keep what cannot be read and say why."""
        return await self.refresh()

    async def refresh(self, *, required: bool = False) -> CatalogRefreshResult:
        """Read both APIs and replace what was read. `required` (a worker's start, which cannot take work without
        sizes from the API): a listing that fails raises `SkuListError` instead, and nothing changes."""
        catalogs = self.catalogs
        region = catalogs.current.region
        shipped = load_shipped_catalog(region, fallback=True)
        reads: list[asyncio.Future[object]] = [
            asyncio.ensure_future(list_skus(self.compute, region, shipped))
        ]
        if self.prices.available:
            reads.append(asyncio.ensure_future(self.prices.fetch(region)))
        outcomes = await asyncio.gather(*reads, return_exceptions=True)
        skus, live = outcomes[0], outcomes[1] if len(outcomes) > 1 else None
        failures: list[str] = []
        for outcome in outcomes:
            if isinstance(outcome, SkuListError | PriceFetchError):
                failures.append(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        listed = isinstance(skus, tuple)
        priced = isinstance(live, LivePrices)
        if required and isinstance(skus, SkuListError):
            raise skus
        if not listed:
            logger.warning(
                f"failed to refresh instance types for region {region}, using {catalogs.describe()}: {skus}",
                extra={"karpenter": {}},
            )
        if isinstance(live, PriceFetchError):
            logger.warning(
                f"failed to refresh pricing for region {region}, using {catalogs.describe_prices()}: {live}",
                extra={"karpenter": {}},
            )
        if listed or priced:
            now = self._clock()
            catalogs.replace(
                priced_catalog(
                    region,
                    skus if isinstance(skus, tuple) else catalogs.current.skus,
                    live if isinstance(live, LivePrices) else None,
                    catalogs.current,
                    spot_as_on_demand=not self.prices.available,
                ),
                now if listed else None,
                now if priced else None,
            )
        catalog = catalogs.current
        if isinstance(live, LivePrices):
            for kind, count in (("on-demand", len(live.on_demand)), ("spot", len(live.spot))):
                logger.info(
                    f"updated {kind} pricing for region {region}",
                    extra={"karpenter": {"instance-type-count": count}},
                )
        if listed:
            logger.info(
                f"updated instance types for region {region}",
                extra={"karpenter": {"instance-type-count": len(catalog.skus)}},
            )
        return CatalogRefreshResult(
            region=region,
            refreshed=listed,
            prices_refreshed=priced,
            origin=catalogs.origin,
            refreshed_at=catalogs.refreshed_at,
            skus=len(catalog.skus),
            live_on_demand_prices=len(live.on_demand) if isinstance(live, LivePrices) else 0,
            live_spot_prices=len(live.spot) if isinstance(live, LivePrices) else 0,
            prices=catalogs.describe_prices(),
            failure="; ".join(failures) or None,
        )
