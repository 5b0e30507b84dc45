"""The Retail Prices API the ARM emulator serves: the real response shape, paging, filters and the fault switch."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import MICROS_PER_DOLLAR
from simulator.arm import RunningArm, serve_arm
from simulator.retail_prices import PATH, RETAIL_PRICES_KEY, RetailPrices

CATALOG = load_shipped_catalog("eastus")
D4 = "Standard_D4s_v5"


@pytest.fixture
async def arm() -> AsyncIterator[RunningArm]:
    async with serve_arm("eastus") as running:
        yield running


@pytest.fixture
async def http(arm: RunningArm) -> AsyncIterator[aiohttp.ClientSession]:
    tls = ssl.create_default_context(cafile=str(arm.ca_pem))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as session:
        yield session


def prices(arm: RunningArm) -> RetailPrices:
    return arm.runner.app[RETAIL_PRICES_KEY]


async def get(http: aiohttp.ClientSession, url: str, **params: str) -> tuple[int, dict[str, Any]]:
    async with http.get(url, params=params or None) as response:
        return response.status, await response.json()


async def test_an_item_has_the_real_fields_and_the_catalog_price(
    arm: RunningArm, http: aiohttp.ClientSession
) -> None:
    status, page = await get(
        http,
        arm.url + PATH,
        **{
            "$filter": f"armSkuName eq '{D4}' and priceType eq 'Consumption'",
            "api-version": "2023-01-01-preview",
        },
    )
    assert status == 200
    assert page["BillingCurrency"] == "USD" and page["NextPageLink"] is None
    assert page["Count"] == len(page["Items"]) == 5
    by_sku_name = {(item["skuName"], item["productName"]): item for item in page["Items"]}
    assert set(by_sku_name) == {
        ("D4s v5", "Virtual Machines Dsv5 Series"),
        ("D4s v5", "Virtual Machines Dsv5 Series Windows"),
        ("D4s v5 Spot", "Virtual Machines Dsv5 Series"),
        ("D4s v5 Spot", "Virtual Machines Dsv5 Series Windows"),
        ("D4s v5 Low Priority", "Virtual Machines Dsv5 Series"),
    }
    # Windows meters: the Linux price plus the license, $0.046 per vCPU-hour.
    windows = by_sku_name[("D4s v5", "Virtual Machines Dsv5 Series Windows")]
    assert windows["retailPrice"] == round(
        CATALOG.sku(D4).on_demand_price_micros / MICROS_PER_DOLLAR + 0.184, 6
    )
    linux = by_sku_name[("D4s v5", "Virtual Machines Dsv5 Series")]
    sku = CATALOG.sku(D4)
    assert sku.on_demand_price_micros is not None
    assert linux["retailPrice"] == linux["unitPrice"] == sku.on_demand_price_micros / MICROS_PER_DOLLAR
    assert {
        key: linux[key] for key in ("armRegionName", "serviceName", "type", "unitOfMeasure", "currencyCode")
    } == {
        "armRegionName": "eastus",
        "serviceName": "Virtual Machines",
        "type": "Consumption",
        "unitOfMeasure": "1 Hour",
        "currencyCode": "USD",
    }
    assert linux["armSkuName"] == D4 and linux["meterName"] == "D4s v5"


async def test_pages_link_to_the_next_until_every_item_was_served(
    arm: RunningArm, http: aiohttp.ClientSession
) -> None:
    prices(arm).page_size = 3
    url: str | None = arm.url + PATH
    params = {"$filter": f"armSkuName eq '{D4}'"}
    seen: list[dict[str, Any]] = []
    while url:
        status, page = await get(http, url, **params)
        assert status == 200 and page["Count"] == len(page["Items"]) <= 3
        seen += page["Items"]
        url, params = page["NextPageLink"], {}
    assert len(seen) == 6  # five consumption items and the DevTest one
    assert len({item["meterId"] for item in seen}) == 6


async def test_a_filter_on_a_field_the_api_does_not_know_or_of_another_form_is_refused(
    arm: RunningArm, http: aiohttp.ClientSession
) -> None:
    for bad in ("colour eq 'red'", "retailPrice gt 1", f"armSkuName eq '{D4}' or skuName eq 'x'"):
        status, body = await get(http, arm.url + PATH, **{"$filter": bad})
        assert status == 400, bad
        assert body["Error"]["Code"] == "InvalidFilter"


async def test_the_region_filter_leaves_out_other_regions(
    arm: RunningArm, http: aiohttp.ClientSession
) -> None:
    _, page = await get(http, arm.url + PATH, **{"$filter": "armRegionName eq 'westus'"})
    assert page["Items"] == [] and page["NextPageLink"] is None


async def test_the_fault_switch_fails_requests_until_healed_or_used_up(
    arm: RunningArm, http: aiohttp.ClientSession
) -> None:
    prices(arm).fail(503, times=1)
    assert (await get(http, arm.url + PATH))[0] == 503
    assert (await get(http, arm.url + PATH, **{"$filter": f"armSkuName eq '{D4}'"}))[0] == 200
    prices(arm).fail(429)
    assert [(await get(http, arm.url + PATH))[0] for _ in range(2)] == [429, 429]
    prices(arm).heal()
    assert (await get(http, arm.url + PATH, **{"$filter": f"armSkuName eq '{D4}'"}))[0] == 200
