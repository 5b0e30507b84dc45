"""Azure's public Retail Prices API (`GET /api/retail/prices`), served by the ARM emulator from a catalog.

Items have the real API's fields and shape (`Items`, `NextPageLink`, `Count`, with `BillingCurrency`,
`CustomerEntityId` and `CustomerEntityType`), one page of `page_size` items at a time, the next page linked
with `$skip`. For every size of the catalog it lists what the real API lists for a VM size: the Linux
pay-as-you-go meter, the Windows one (product name ending in ` Windows`: the Linux price plus the Windows
Server license, `core.instancetypes.windows`), and, for sizes with a spot price, the Linux and Windows spot
meters and the Low Priority one (sku names ending in ` Spot` and ` Low Priority`), plus a `DevTestConsumption`
item. Prices are the catalog's, so a client that reads only Linux consumption items gets exactly the catalog's
prices (`price_overrides` changes some, to prove a refresh picked them up).

`$filter` takes what the provider sends: `field eq 'value'` clauses joined by `and`, on the item fields
(`priceType` matches `type`). Values compare exactly, as the API's do since 2023. An unknown field or a
clause of another form is 400. `RetailPrices.fail(status)` makes every request (or the next `times`) answer
that status instead, like an outage (503) or throttling (429).
"""

from __future__ import annotations

import re
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from core.instancetypes.catalog import AzureCatalog, AzureSku
from core.instancetypes.types import MICROS_PER_DOLLAR
from core.instancetypes.windows import license_price

PATH = "/api/retail/prices"
DEFAULT_PAGE_SIZE = 1000
"""The real API's page size."""
LOW_PRIORITY_FACTOR = 0.8

Json = dict[str, Any]

_REGION_NAMES = {
    "eastus": "US East",
    "southcentralus": "US South Central",
    "westeurope": "EU West",
    "uksouth": "UK South",
}
_FIELDS = {
    "armRegionName": "armRegionName",
    "armSkuName": "armSkuName",
    "currencyCode": "currencyCode",
    "location": "location",
    "meterId": "meterId",
    "meterName": "meterName",
    "priceType": "type",
    "productId": "productId",
    "productName": "productName",
    "serviceFamily": "serviceFamily",
    "serviceId": "serviceId",
    "serviceName": "serviceName",
    "skuId": "skuId",
    "skuName": "skuName",
    "type": "type",
    "unitOfMeasure": "unitOfMeasure",
}
"""Filterable fields: the name in `$filter`, then the item field it compares."""
_CLAUSE = re.compile(r"^\s*(\w+)\s+eq\s+'((?:[^']|'')*)'\s*$", re.IGNORECASE)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


class FilterError(ValueError):
    """A `$filter` the API would refuse."""


@dataclass
class RetailPrices:
    """What the endpoint serves, and its fault switch (tests and the demo change both)."""

    catalog: AzureCatalog
    page_size: int = DEFAULT_PAGE_SIZE
    price_overrides: dict[str, float] = field(default_factory=dict)
    """Linux on-demand USD per hour by ARM size name, instead of the catalog's."""
    fault_status: int | None = None
    fault_times: int | None = None
    """How many more requests fail (None: all, while `fault_status` is set)."""
    requests: int = 0
    hosts: list[str] = field(default_factory=list)
    """The host each request was sent to (its `Host` header)."""

    def fail(self, status: int = 503, times: int | None = None) -> None:
        self.fault_status, self.fault_times = status, times

    def heal(self) -> None:
        self.fault_status, self.fault_times = None, None

    def items(self) -> list[Json]:
        return [item for sku in self.catalog.skus for item in self._sku_items(sku)]

    def _sku_items(self, sku: AzureSku) -> list[Json]:
        on_demand = self.price_overrides.get(sku.name)
        if on_demand is None and sku.on_demand_price_micros is not None:
            on_demand = sku.on_demand_price_micros / MICROS_PER_DOLLAR
        items: list[Json] = []
        meter = sku.name.removeprefix("Standard_").removeprefix("Basic_").replace("_", " ")
        product = f"Virtual Machines {sku.docs_series or meter.split(' ')[0]} Series"
        license_usd = license_price(sku) / MICROS_PER_DOLLAR
        windows = f"{product} Windows"
        if on_demand is not None:
            items.append(self._item(sku, meter, meter, product, on_demand))
            items.append(self._item(sku, meter, meter, windows, on_demand + license_usd))
            items.append(self._item(sku, meter, meter, product, on_demand, price_type="DevTestConsumption"))
        if sku.spot_price_micros is not None:
            spot = sku.spot_price_micros / MICROS_PER_DOLLAR
            items.append(self._item(sku, f"{meter} Spot", f"{meter} Spot", product, spot))
            items.append(self._item(sku, f"{meter} Spot", f"{meter} Spot", windows, spot + license_usd))
            low = f"{meter} Low Priority"
            items.append(self._item(sku, low, low, product, spot * LOW_PRIORITY_FACTOR))
        return items

    def _item(
        self,
        sku: AzureSku,
        meter_name: str,
        sku_name: str,
        product: str,
        usd: float,
        price_type: str = "Consumption",
    ) -> Json:
        region = self.catalog.region
        price = round(usd, 6)
        product_id = f"DZH318Z0{zlib.crc32(product.encode()) % 10_000:04d}"
        return {
            "currencyCode": "USD",
            "tierMinimumUnits": 0.0,
            "retailPrice": price,
            "unitPrice": price,
            "armRegionName": region,
            "location": _REGION_NAMES.get(region, region),
            "effectiveStartDate": "2026-01-01T00:00:00Z",
            "meterId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{region}/{product}/{sku_name}/{price_type}")),
            "meterName": meter_name,
            "productId": product_id,
            "skuId": f"{product_id}/{sku_name.replace(' ', '')}",
            "productName": product,
            "skuName": sku_name,
            "serviceName": "Virtual Machines",
            "serviceId": "DZH313Z7MMC8",
            "serviceFamily": "Compute",
            "unitOfMeasure": "1 Hour",
            "type": price_type,
            "isPrimaryMeterRegion": True,
            "armSkuName": sku.name,
        }

    async def handle(self, request: web.Request) -> web.Response:
        """`GET /api/retail/prices`: one page of the filtered items."""
        self.requests += 1
        self.hosts.append(request.host)
        status = self.fault_status
        if status is not None:
            if self.fault_times is not None:
                self.fault_times -= 1
                if self.fault_times <= 0:
                    self.heal()
            return _error(status, "ServiceUnavailable", "The service is temporarily unavailable.")
        try:
            clauses = parse_filter(request.query.get("$filter", ""))
        except FilterError as error:
            return _error(400, "InvalidFilter", str(error))
        skip_text = request.query.get("$skip", "0")
        if not skip_text.isdigit():
            return _error(400, "InvalidSkip", f"$skip must be a whole number, not {skip_text!r}")
        matching = [item for item in self.items() if all(item.get(key) == value for key, value in clauses)]
        skip = int(skip_text)
        page = matching[skip : skip + self.page_size]
        next_link = None
        if skip + self.page_size < len(matching):
            next_link = str(request.url.update_query({"$skip": str(skip + self.page_size)}))
        return web.json_response(
            {
                "BillingCurrency": "USD",
                "CustomerEntityId": "Default",
                "CustomerEntityType": "Retail",
                "Items": page,
                "NextPageLink": next_link,
                "Count": len(page),
            }
        )


def parse_filter(text: str) -> list[tuple[str, str]]:
    """`field eq 'value' and ...` as (item field, value) pairs; `FilterError` for anything else."""
    if not text.strip():
        return []
    clauses = []
    for clause in _AND.split(text.strip()):
        match = _CLAUSE.match(clause)
        if match is None:
            raise FilterError(f"unsupported filter clause {clause!r}: use <field> eq '<value>'")
        name, value = match.group(1), match.group(2).replace("''", "'")
        key = next((item for known, item in _FIELDS.items() if known.lower() == name.lower()), None)
        if key is None:
            raise FilterError(f"unknown filter field {name!r}; known: {', '.join(sorted(_FIELDS))}")
        clauses.append((key, value))
    return clauses


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"Error": {"Code": code, "Message": message}}, status=status)


RETAIL_PRICES_KEY = web.AppKey("retail_prices", RetailPrices)


def add_retail_prices(app: web.Application, catalog: AzureCatalog) -> RetailPrices:
    """Serve the Retail Prices API from `catalog` on `app` (register before any catch-all route)."""
    prices = RetailPrices(catalog)
    app[RETAIL_PRICES_KEY] = prices
    app.router.add_get(PATH, prices.handle)
    return prices
