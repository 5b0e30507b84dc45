"""A starting worker's catalog: listed from the Resource SKUs API of its region before the worker takes activities,
retried with jittered backoff while Azure cannot list it, each failure logged and shown by `/readyz`, then priced
(with one line saying so when the prices are another region's)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from azure.mgmt.compute.aio import ComputeManagementClient

from activities.azure.catalog_refresh import CatalogRefreshActivities
from activities.azure.prices import PriceSettings, RetailPricesClient
from activities.catalog_source import CatalogSource
from core.messages import CatalogOrigin
from simulator.arm import Fault, FaultAction, serve_arm
from simulator.retail_prices import PATH, RETAIL_PRICES_KEY
from workers.serve import CatalogStart


@pytest.mark.parametrize(("region", "prices_read"), [("westeurope", True), ("belgiumcentral", False)])
async def test_the_worker_waits_for_the_sizes_and_says_why_meanwhile(
    region: str, prices_read: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_arm(region) as arm:
        if not prices_read:
            arm.runner.app[RETAIL_PRICES_KEY].fail(503)
        arm.state.add_fault(
            Fault(action=FaultAction.REJECT, code="ServiceUnavailable", status=503, resource="skus", times=3)
        )
        options = arm.client_options(retry_total=0)
        async with ComputeManagementClient(
            arm.credential(), arm.state.settings.subscription_id, **options
        ) as compute:
            catalogs = CatalogSource.shipped(region)
            prices = RetailPricesClient(PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem, attempts=1))
            refresh = CatalogRefreshActivities(catalogs, compute, prices)
            start = CatalogStart(region)
            seen: list[str] = []
            with caplog.at_level(logging.INFO, logger="nodewright"):
                building = asyncio.create_task(start.build(refresh, max_wait_seconds=0.05))
                while not building.done():
                    reason = await start.ready()
                    if reason is not None and reason not in seen:
                        seen.append(reason)
                    await asyncio.sleep(0.02)
                await building

    assert await start.ready() is None
    assert catalogs.origin is CatalogOrigin.LIVE and (catalogs.prices_refreshed_at is not None) is prices_read
    assert arm.state.counters.fired_by_fault and sum(arm.state.counters.fired_by_fault.values()) == 3
    assert any(
        reason.startswith(
            f"no instance types for region {region} yet: listing Resource SKUs for {region} failed"
        )
        and "ServiceUnavailable" in reason
        for reason in seen
    )
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for Azure")]
    assert len(waits) == 3
    assert waits[0].startswith(
        f"waiting for Azure to list instance types for region {region}, trying again in "
    )
    fallback = [r.getMessage() for r in caplog.records if "the AKS provider's fallback" in r.getMessage()]
    if prices_read:  # westeurope is in the table, and its live prices were read anyway
        assert fallback == []
    else:  # the table lacks belgiumcentral and no live prices came: the worker says what it prices with
        assert fallback == [
            "the shipped price table has no prices for belgiumcentral: instance types are priced with the eastus "
            "prices (the AKS provider's fallback) until prices are read from the Retail Prices API"
        ]
