"""The catalog refresh against the ARM emulator (Resource SKUs and Retail Prices through the real clients):
live data replaces the worker's catalog where every holder reads it (the next plan for pods kube-scheduler
could not place prices its launches at the live price); each read that fails keeps what it would have replaced,
with one log line that says what failed and what stays; a cloud without the Retail Prices API keeps the shipped
prices and offers spot at them; a starting worker waits for the sizes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio.testing import ActivityEnvironment

from activities.azure.catalog_refresh import CatalogRefreshActivities
from activities.azure.prices import PriceSettings, RetailPricesClient
from activities.azure.provider import AzureCloudProvider
from activities.azure.skus import SkuListError
from activities.catalog_source import CatalogSource
from activities.lifecycle import LifecycleActivities
from activities.planning import PlanningActivities
from core.cloudprovider import CloudProvider
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog, load_shipped_catalog
from core.messages import CatalogOrigin, CatalogRefreshInput, CatalogRefreshResult, LifecycleInput, PlanInput
from simulator.arm import Fault, FaultAction, RunningArm, serve_arm
from simulator.retail_prices import PATH, RETAIL_PRICES_KEY, RetailPrices
from tests.activities.azure.test_provider import fixed_bootstrap, settings
from tests.cluster import activity_environment, apply_examples, scale_pending
from workers.schedules import maintenance_activities
from workers.simulated_aks import SimulatedAks

REGION = "southcentralus"
SHIPPED = load_shipped_catalog(REGION)
NOW = datetime(2026, 11, 22, 3, 30, tzinfo=UTC)
D4 = "Standard_D4s_v5"
D8 = "Standard_D8s_v5"


@dataclass
class World:
    arm: RunningArm
    catalogs: CatalogSource
    refresh: CatalogRefreshActivities
    provider: AzureCloudProvider

    @property
    def prices(self) -> RetailPrices:
        return self.arm.runner.app[RETAIL_PRICES_KEY]

    async def run(self) -> CatalogRefreshResult:
        return await ActivityEnvironment().run(self.refresh.refresh_catalog, CatalogRefreshInput(cluster="c"))


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with serve_arm(REGION) as arm:
        options = arm.client_options()
        async with (
            ComputeManagementClient(
                arm.credential(), arm.state.settings.subscription_id, **options
            ) as compute,
            NetworkManagementClient(
                arm.credential(), arm.state.settings.subscription_id, **options
            ) as network,
        ):
            catalogs = CatalogSource.shipped(REGION)
            prices = RetailPricesClient(
                PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem, attempts=2, backoff=timedelta(0))
            )
            provider = AzureCloudProvider(compute, network, settings(), fixed_bootstrap)
            maintenance_activities(cast(ClusterAPI, None), provider, catalogs)
            refresh = CatalogRefreshActivities(catalogs, compute, prices, clock=lambda: NOW)
            yield World(arm, catalogs, refresh, provider)


def on_demand_price(activities: LifecycleActivities, size: str) -> int:
    return next(o.price_micros for o in activities.types[size].offerings if o.capacity_type == "on-demand")


async def test_a_live_refresh_replaces_sizes_and_prices_for_every_holder(world: World) -> None:
    world.prices.price_overrides[D4] = 0.5
    world.arm.state.restrict(D8)
    lifecycle = LifecycleActivities(cast(ClusterAPI, None), cast(CloudProvider, None), world.catalogs)
    shipped_price = SHIPPED.sku(D4).on_demand_price_micros
    assert on_demand_price(lifecycle, D4) == shipped_price != 500_000

    result = await world.run()

    assert result.refreshed and result.failure is None
    assert (world.catalogs.origin, world.catalogs.refreshed_at) == (CatalogOrigin.LIVE, NOW)
    catalog = world.catalogs.current
    assert catalog.sku(D4).on_demand_price_micros == 500_000
    # The Windows meter is kept too: the live price plus the license ($0.046 per vCPU-hour).
    assert catalog.sku(D4).windows_on_demand_price_micros == 500_000 + 46_000 * SHIPPED.sku(D4).vcpus
    assert D8 not in {sku.name for sku in catalog.skus}
    # Every other size keeps the price the emulator serves, which is the shipped one.
    d2 = catalog.sku("Standard_D2s_v5")
    assert (d2.on_demand_price_micros, d2.spot_price_micros) == (
        SHIPPED.sku("Standard_D2s_v5").on_demand_price_micros,
        SHIPPED.sku("Standard_D2s_v5").spot_price_micros,
    )
    assert on_demand_price(lifecycle, D4) == 500_000
    assert world.provider.catalog is catalog


async def test_sizes_without_a_live_price_keep_the_shipped_one(world: World) -> None:
    world.prices.catalog = AzureCatalog(
        region=REGION, zones=SHIPPED.zones, skus=tuple(sku for sku in SHIPPED.skus if sku.name != D4)
    )
    await world.run()
    assert world.catalogs.current.sku(D4).on_demand_price_micros == SHIPPED.sku(D4).on_demand_price_micros


async def test_a_prices_outage_keeps_the_shipped_prices_and_says_so(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.prices.fail(503)
    world.arm.state.restrict(D8)
    with caplog.at_level(logging.WARNING, logger="activities.azure.catalog_refresh"):
        result = await world.run()

    assert result.refreshed and not result.prices_refreshed
    assert world.catalogs.origin is CatalogOrigin.LIVE and world.catalogs.prices_refreshed_at is None
    assert D8 not in {sku.name for sku in world.catalogs.current.skus}  # the sizes are the API's
    d4 = world.catalogs.current.sku(D4)
    assert (d4.on_demand_price_micros, d4.spot_price_micros) == (
        SHIPPED.sku(D4).on_demand_price_micros,
        SHIPPED.sku(D4).spot_price_micros,
    )
    assert world.provider.catalog is world.catalogs.current
    [line] = [record.getMessage() for record in caplog.records]
    assert line.startswith(
        f"failed to refresh pricing for region {REGION}, "
        f"using the shipped {REGION} prices of 2026-06-18: reading the Retail Prices API"
    )
    assert "HTTP 503" in line
    assert result.prices == f"the shipped {REGION} prices of 2026-06-18"


async def test_both_reads_failing_keep_the_shipped_catalog(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.prices.fail(503)
    world.arm.state.add_fault(
        Fault(action=FaultAction.REJECT, code="InternalServerError", status=500, resource="skus")
    )
    with caplog.at_level(logging.WARNING, logger="activities.azure.catalog_refresh"):
        result = await world.run()

    assert not result.refreshed and not result.prices_refreshed
    assert world.catalogs.current is SHIPPED and world.catalogs.origin is CatalogOrigin.SHIPPED
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(":")[0] for line in lines] == [
        f"failed to refresh instance types for region {REGION}, using the shipped {REGION} snapshot of 2026-06-18",
        f"failed to refresh pricing for region {REGION}, using the shipped {REGION} prices of 2026-06-18",
    ]


async def test_a_starting_refresh_raises_until_the_sizes_are_listed(world: World) -> None:
    world.arm.state.add_fault(
        Fault(action=FaultAction.REJECT, code="InternalServerError", status=500, resource="skus", times=4)
    )
    with pytest.raises(SkuListError, match=f"listing Resource SKUs for {REGION} failed"):
        await world.refresh.refresh(required=True)
    assert world.catalogs.current is SHIPPED
    result = await world.refresh.refresh(required=True)
    assert result.refreshed and world.catalogs.origin is CatalogOrigin.LIVE


async def test_a_cloud_without_retail_prices_keeps_the_shipped_prices_and_offers_spot_at_them(
    world: World,
) -> None:
    no_prices = CatalogRefreshActivities(
        world.catalogs, world.provider.compute, RetailPricesClient(PriceSettings(url=None)), clock=lambda: NOW
    )
    result = await no_prices.refresh()

    assert result.refreshed and not result.prices_refreshed and world.prices.requests == 0
    catalog = world.catalogs.current
    with_spot, without = SHIPPED.sku(D4), SHIPPED.sku("Standard_B12ms")
    assert catalog.sku(D4).spot_price_micros == with_spot.spot_price_micros
    # The shipped snapshot has no spot price for it: as the provider's static prices, spot costs on-demand.
    assert without.spot_price_micros is None
    assert catalog.sku("Standard_B12ms").spot_price_micros == without.on_demand_price_micros
    assert not world.catalogs.live_prices


async def test_a_failed_refresh_after_a_live_one_keeps_the_live_catalog(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.prices.price_overrides[D4] = 0.5
    await world.run()
    live = world.catalogs.current
    world.arm.state.add_fault(
        Fault(action=FaultAction.REJECT, code="InternalServerError", status=500, resource="skus")
    )
    with caplog.at_level(logging.WARNING, logger="activities.azure.catalog_refresh"):
        result = await world.run()

    assert not result.refreshed and "Resource SKUs" in (result.failure or "")
    assert world.catalogs.origin is CatalogOrigin.LIVE
    assert [sku.name for sku in world.catalogs.current.skus] == [sku.name for sku in live.skus]
    assert world.catalogs.current.sku(D4).on_demand_price_micros == 500_000
    [line] = [record.getMessage() for record in caplog.records]
    assert f"using the live {REGION} catalog of {NOW.isoformat(timespec='seconds')}" in line


async def test_windows_meters_refresh_with_the_prices_alone_and_the_license_type_stays(world: World) -> None:
    hybrid = CatalogSource.shipped(REGION, windows_license_included=False)
    refresh = CatalogRefreshActivities(
        hybrid, world.provider.compute, world.refresh.prices, clock=lambda: NOW
    )
    world.arm.state.add_fault(
        Fault(action=FaultAction.REJECT, code="InternalServerError", status=500, resource="skus")
    )
    world.prices.price_overrides[D4] = 0.5
    result = await refresh.refresh()

    assert not result.refreshed and result.prices_refreshed
    d4 = hybrid.current.sku(D4)
    license_price = 46_000 * d4.vcpus
    assert (d4.on_demand_price_micros, d4.windows_on_demand_price_micros) == (
        500_000,
        500_000 + license_price,
    )
    assert d4.spot_price_micros is not None
    assert d4.windows_spot_price_micros == d4.spot_price_micros + license_price
    assert not hybrid.current.windows_license_included  # Azure Hybrid Benefit outlives the refresh


async def test_the_next_plan_after_a_refresh_prices_its_launches_at_the_live_price(aks: SimulatedAks) -> None:
    pinned = "Standard_D4ps_v5"  # deploy/examples' inflate: on-demand in eastus-2
    arm = aks.emulated.arm
    assert arm.state.settings.region == "eastus"
    async with ComputeManagementClient(
        arm.credential(), arm.state.settings.subscription_id, **arm.client_options()
    ) as compute:
        await apply_examples(aks.kube)
        catalogs = CatalogSource.shipped("eastus")
        planned: list[LifecycleInput] = []

        async def start(request: LifecycleInput) -> None:
            planned.append(request)

        planning = PlanningActivities(aks.kube, catalogs, start)
        prices = RetailPricesClient(PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem))
        arm.runner.app[RETAIL_PRICES_KEY].price_overrides[pinned] = 0.123
        await ActivityEnvironment().run(
            CatalogRefreshActivities(catalogs, compute, prices).refresh_catalog,
            CatalogRefreshInput(cluster="c"),
        )
        await scale_pending(aks.kube, "inflate", 1)

        await activity_environment().run(planning.plan_provisioning, PlanInput(cluster="c"))
        [lifecycle] = planned
        first = lifecycle.nodeclaim.launch_candidates[0]
        assert (first.instance_type, first.zone, first.price_micros) == (pinned, "eastus-2", 123_000)


async def test_a_region_the_table_lacks_is_priced_as_eastus_until_live_prices_come(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with serve_arm("swedensouth") as arm:
        options = arm.client_options()
        async with ComputeManagementClient(
            arm.credential(), arm.state.settings.subscription_id, **options
        ) as compute:
            catalogs = CatalogSource(load_shipped_catalog("swedensouth"))
            prices = RetailPricesClient(PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem, attempts=1))
            arm.runner.app[RETAIL_PRICES_KEY].fail(503)
            refresh = CatalogRefreshActivities(catalogs, compute, prices, clock=lambda: NOW)
            await refresh.refresh()
            assert catalogs.price_fallback() is None  # swedensouth is in the table

    async with serve_arm("belgiumcentral") as arm:
        options = arm.client_options()
        async with ComputeManagementClient(
            arm.credential(), arm.state.settings.subscription_id, **options
        ) as compute:
            catalogs = CatalogSource.shipped("belgiumcentral")
            eastus = load_shipped_catalog("eastus")
            prices = RetailPricesClient(PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem, attempts=1))
            arm.runner.app[RETAIL_PRICES_KEY].fail(503, times=1)
            refresh = CatalogRefreshActivities(catalogs, compute, prices, clock=lambda: NOW)
            result = await refresh.refresh()
            assert result.refreshed and not result.prices_refreshed
            assert catalogs.current.zones == ("1", "2", "3")  # the provider's location list
            assert catalogs.current.sku(D4).on_demand_price_micros == eastus.sku(D4).on_demand_price_micros
            assert (
                result.prices
                == "the shipped eastus prices of 2026-06-18 (the table has none for belgiumcentral)"
            )
            assert "priced with the eastus prices" in (catalogs.price_fallback() or "")

            await refresh.refresh()
            assert catalogs.price_fallback() is None and catalogs.prices_refreshed_at == NOW
