"""Live VM prices from Azure's public Retail Prices API, read as the AKS provider reads them.

One query per region (`priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute'
and serviceName eq 'Virtual Machines' and armRegionName eq '<region>'`), following `NextPageLink` to the
last page. Low Priority meters (`meterName` ending in ` Low Priority`) are dropped; an item whose `skuName`
ends in ` Spot` is the spot price of its `armSkuName`, any other the on-demand price. `retailPrice` is USD per
hour. When one size has several items of the same kind, the last one read wins (the provider keeps an arbitrary
one). The provider drops Windows products (`productName` ending in ` Windows`), as it launches Linux only; they
are kept here apart, as the Windows prices of Windows nodes (`core.instancetypes.windows`).

Unlike the provider, Cloud Services products (`productName` ending in ` Cloud Services`, e.g. `Dasv5 Series Cloud
Services`) are dropped: the API lists them under the `Virtual Machines` service for some series, at the Windows
rate, and the provider keeping whichever item comes last is the likely way its generated table came to hold
2,095 Windows rates as Linux prices (`core/instancetypes/data/README.md`).

Only the public cloud has the API (the AKS provider reads it there only): a `PriceSettings` without a `url` is a
cloud without one, and `RetailPricesClient.available` says so. Every request has a timeout; throttling (429),
server errors and connection failures are retried a bounded number of times with exponential backoff. A failed
read raises `PriceFetchError`, and so does a read that found no price at all (the provider treats that as a
failure too and keeps the prices it had).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from core.instancetypes.types import usd_to_micros

RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
MAX_PAGES = 1000
"""A bound on `NextPageLink`s followed (eastus has about 10 pages of 1,000 items)."""
_RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_CLOUD_SERVICES = " Cloud Services"
"""The suffix of the Cloud Services products the API lists among VM prices (they run Windows: the Windows rate)."""


class PriceSettings(BaseModel):
    """Where the Retail Prices API is and how patiently it is read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = RETAIL_PRICES_URL
    """None: the cloud has no Retail Prices API."""
    api_version: str = API_VERSION
    request_timeout: timedelta = timedelta(seconds=30)
    attempts: int = Field(default=4, ge=1)
    """Tries per page, the first included."""
    backoff: timedelta = timedelta(seconds=1)
    """Before the second try; doubled for each further try."""
    max_backoff: timedelta = timedelta(seconds=10)
    ca_file: Path | None = None
    """A CA bundle to trust instead of the system's (the ARM emulator's, in tests and the demo)."""


class PriceFetchError(RuntimeError):
    """The Retail Prices API could not be read, or had no price for the region."""


@dataclass(frozen=True, slots=True)
class LivePrices:
    """Linux and Windows prices per ARM VM size, in micro-dollars per hour."""

    on_demand: dict[str, int] = field(default_factory=dict)
    spot: dict[str, int] = field(default_factory=dict)
    windows_on_demand: dict[str, int] = field(default_factory=dict)
    windows_spot: dict[str, int] = field(default_factory=dict)


def price_filter(region: str) -> str:
    """The provider's OData filter for the region's pay-as-you-go VM prices in USD."""
    return (
        "priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' "
        f"and serviceName eq 'Virtual Machines' and armRegionName eq '{region}'"
    )


def prices_from_items(items: Iterable[Mapping[str, Any]]) -> LivePrices:
    """The on-demand and spot prices among Retail Prices items, Linux and Windows apart (Low Priority and Cloud
    Services dropped)."""
    prices = LivePrices()
    for item in items:
        size = item.get("armSkuName")
        price = item.get("retailPrice")
        if not isinstance(size, str) or not size or not isinstance(price, int | float):
            continue
        if str(item.get("meterName", "")).endswith(" Low Priority"):
            continue
        if str(item.get("productName", "")).endswith(_CLOUD_SERVICES):
            continue
        spot = str(item.get("skuName", "")).endswith(" Spot")
        if str(item.get("productName", "")).endswith(" Windows"):
            kind = prices.windows_spot if spot else prices.windows_on_demand
        else:
            kind = prices.spot if spot else prices.on_demand
        kind[size] = usd_to_micros(price)
    return prices


class RetailPricesClient:
    """Reads a region's prices from the Retail Prices API, over `session` when given (the worker's connection pool
    to Azure), else over a session of each fetch's own."""

    def __init__(
        self, settings: PriceSettings | None = None, session: aiohttp.ClientSession | None = None
    ) -> None:
        self.settings = settings or PriceSettings()
        self.session = session

    @property
    def available(self) -> bool:
        """Whether the cloud has the API (the public cloud's, or an emulator's)."""
        return self.settings.url is not None

    async def fetch(self, region: str) -> LivePrices:
        """Every price of the region; `PriceFetchError` when the API fails or lists no Linux one."""
        settings = self.settings
        if settings.url is None:
            raise PriceFetchError("this cloud has no Retail Prices API")
        if self.session is not None:
            return await self._fetch(self.session, settings.url, region)
        ca_file = settings.ca_file
        tls = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else True
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as session:
            return await self._fetch(session, settings.url, region)

    async def _fetch(self, session: aiohttp.ClientSession, first: str, region: str) -> LivePrices:
        settings = self.settings
        items: list[Mapping[str, Any]] = []
        url: str | None = first
        params: dict[str, str] | None = {
            "api-version": settings.api_version,
            "$filter": price_filter(region),
        }
        pages = 0
        while url:
            pages += 1
            if pages > MAX_PAGES:
                raise PriceFetchError(f"the Retail Prices API returned more than {MAX_PAGES} pages")
            page = await self._page(session, url, params)
            page_items = page.get("Items")
            if not isinstance(page_items, list):
                raise PriceFetchError(f"the Retail Prices API answered without Items ({settings.url})")
            items.extend(item for item in page_items if isinstance(item, Mapping))
            next_link = page.get("NextPageLink")
            url, params = (next_link, None) if isinstance(next_link, str) and next_link else (None, None)
        prices = prices_from_items(items)
        if not prices.on_demand and not prices.spot:
            raise PriceFetchError(f"the Retail Prices API listed no Linux VM price for {region}")
        return prices

    async def _page(
        self, session: aiohttp.ClientSession, url: str, params: dict[str, str] | None
    ) -> dict[str, Any]:
        """One page, retried on throttling, server errors, timeouts and connection failures."""
        settings = self.settings
        failure = ""
        for attempt in range(settings.attempts):
            if attempt:
                delay = settings.backoff.total_seconds() * 2 ** (attempt - 1)
                await asyncio.sleep(min(delay, settings.max_backoff.total_seconds()))
            try:
                timeout = aiohttp.ClientTimeout(total=settings.request_timeout.total_seconds())
                async with session.get(url, params=params, timeout=timeout) as response:
                    if response.status == 200:
                        body = await response.json(content_type=None)
                        if not isinstance(body, dict):
                            raise PriceFetchError(
                                "the Retail Prices API answered with something not an object"
                            )
                        return body
                    failure = f"HTTP {response.status}"
                    if response.status not in _RETRIED_STATUSES:
                        break
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                failure = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        raise PriceFetchError(
            f"reading the Retail Prices API ({settings.url}) failed after {attempt + 1} attempt(s): {failure}"
        )
