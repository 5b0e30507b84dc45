"""Live prices: which Retail Prices items count, and the client against the emulator (paging, retries, faults)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from activities.azure.prices import (
    PriceFetchError,
    PriceSettings,
    RetailPricesClient,
    price_filter,
    prices_from_items,
)
from core.instancetypes.catalog import load_shipped_catalog
from simulator.arm import RunningArm, serve_arm
from simulator.retail_prices import PATH, RETAIL_PRICES_KEY, RetailPrices

CATALOG = load_shipped_catalog("eastus")


def item(
    arm_sku: str, sku_name: str, price: float, product: str = "Virtual Machines Dsv5 Series", **more: Any
) -> dict[str, Any]:
    return {
        "armSkuName": arm_sku,
        "skuName": sku_name,
        "meterName": more.pop("meterName", sku_name),
        "productName": product,
        "retailPrice": price,
        **more,
    }


def test_linux_and_windows_items_give_their_on_demand_and_spot_prices_low_priority_does_not() -> None:
    prices = prices_from_items(
        [
            item("Standard_D4s_v5", "D4s v5", 0.192),
            item("Standard_D4s_v5", "D4s v5", 0.376, product="Virtual Machines Dsv5 Series Windows"),
            item("Standard_D4s_v5", "D4s v5 Spot", 0.0384),
            item("Standard_D4s_v5", "D4s v5 Low Priority", 0.0384 * 0.8),
            item("Standard_D4s_v5", "D4s v5 Spot", 0.09, product="Virtual Machines Dsv5 Series Windows"),
            item("Standard_E2s_v5", "E2s v5 Low Priority", 0.02),
            item("", "nameless", 1.0),
            item("Standard_F2s_v2", "F2s v2", "free"),  # type: ignore[arg-type]
        ]
    )
    assert prices.on_demand == {"Standard_D4s_v5": 192_000}
    assert prices.spot == {"Standard_D4s_v5": 38_400}
    assert prices.windows_on_demand == {"Standard_D4s_v5": 376_000}
    assert prices.windows_spot == {"Standard_D4s_v5": 90_000}


@pytest.mark.parametrize("cloud_services_last", [True, False])
def test_a_cloud_services_item_at_the_windows_rate_is_not_the_linux_price(cloud_services_last: bool) -> None:
    # What the API lists for Standard_D8as_v5 in eastus: the VM meter, and Cloud Services' at the Windows rate.
    linux = item("Standard_D8as_v5", "D8as v5", 0.344, product="Virtual Machines Dasv5 Series")
    cloud = item("Standard_D8as_v5", "D8as v5", 0.712, product="Dasv5 Series Cloud Services")
    windows = item("Standard_D8as_v5", "D8as v5", 0.712, product="Virtual Machines Dasv5 Series Windows")
    prices = prices_from_items([linux, windows, cloud] if cloud_services_last else [cloud, linux, windows])
    assert prices.on_demand == {"Standard_D8as_v5": 344_000}
    assert prices.windows_on_demand == {"Standard_D8as_v5": 712_000}


def test_the_filter_is_the_providers() -> None:
    assert price_filter("eastus") == (
        "priceType eq 'Consumption' and currencyCode eq 'USD' and serviceFamily eq 'Compute' "
        "and serviceName eq 'Virtual Machines' and armRegionName eq 'eastus'"
    )


@pytest.fixture
async def arm() -> AsyncIterator[RunningArm]:
    async with serve_arm("eastus") as running:
        yield running


def emulated(arm: RunningArm) -> RetailPrices:
    return arm.runner.app[RETAIL_PRICES_KEY]


def client(arm: RunningArm, **settings: Any) -> RetailPricesClient:
    values: dict[str, Any] = {
        "url": arm.url + PATH,
        "ca_file": arm.ca_pem,
        "backoff": timedelta(0),
        **settings,
    }
    return RetailPricesClient(PriceSettings(**values))


async def test_every_page_is_read_and_the_prices_are_the_catalogs(arm: RunningArm) -> None:
    emulated(arm).page_size = 400
    prices = await client(arm).fetch("eastus")
    assert emulated(arm).requests > 3
    assert prices.on_demand == {
        sku.name: sku.on_demand_price_micros for sku in CATALOG.skus if sku.on_demand_price_micros is not None
    }
    assert prices.spot == {
        sku.name: sku.spot_price_micros for sku in CATALOG.skus if sku.spot_price_micros is not None
    }


async def test_an_outage_is_retried_a_bounded_number_of_times(arm: RunningArm) -> None:
    emulated(arm).page_size = 10_000  # one page
    emulated(arm).fail(503, times=2)
    prices = await client(arm, attempts=3).fetch("eastus")
    assert prices.on_demand and emulated(arm).requests == 3

    emulated(arm).fail(503)
    emulated(arm).requests = 0
    with pytest.raises(PriceFetchError, match=r"after 3 attempt\(s\): HTTP 503"):
        await client(arm, attempts=3).fetch("eastus")
    assert emulated(arm).requests == 3


async def test_a_client_error_is_not_retried(arm: RunningArm) -> None:
    emulated(arm).fail(403)
    with pytest.raises(PriceFetchError, match="HTTP 403"):
        await client(arm, attempts=4).fetch("eastus")
    assert emulated(arm).requests == 1


async def test_a_region_without_prices_is_a_failure(arm: RunningArm) -> None:
    with pytest.raises(PriceFetchError, match="no Linux VM price for westus"):
        await client(arm).fetch("westus")


async def test_an_unreachable_api_fails_after_its_attempts() -> None:
    unreachable = RetailPricesClient(
        PriceSettings(url="http://127.0.0.1:9/api/retail/prices", attempts=2, backoff=timedelta(0))
    )
    with pytest.raises(PriceFetchError, match=r"after 2 attempt\(s\): ClientConnectorError"):
        await unreachable.fetch("eastus")
