"""The catalog refresh against the ARM emulator (Resource SKUs and Retail Prices through the real clients):
live data replaces the worker's catalog where every holder reads it (the next plan for pods kube-scheduler
could not place prices its launches at the live price), and a failure keeps the catalog in use with one log
line that says what failed and which catalog stays."""

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


async def test_a_prices_outage_keeps_the_shipped_snapshot_and_says_so(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.prices.fail(503)
    with caplog.at_level(logging.WARNING, logger="activities.azure.catalog_refresh"):
        result = await world.run()

    assert not result.refreshed
    assert world.catalogs.origin is CatalogOrigin.SHIPPED and world.catalogs.current is SHIPPED
    assert world.provider.catalog is SHIPPED
    [line] = [record.getMessage() for record in caplog.records]
    assert line.startswith(
        f"failed to refresh instance types and pricing for region {REGION}, "
        f"using the shipped {REGION} snapshot of 2026-06-18: reading the Retail Prices API"
    )
    assert "HTTP 503" in line


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
    assert world.catalogs.current is live and world.catalogs.origin is CatalogOrigin.LIVE
    [line] = [record.getMessage() for record in caplog.records]
    assert f"using the live {REGION} catalog of {NOW.isoformat(timespec='seconds')}" in line


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


async def test_a_starting_worker_refreshes_its_own_catalog_outside_temporal(world: World) -> None:
    from workers.schedules import refresh_in_process

    world.prices.price_overrides[D4] = 0.25
    prices = PriceSettings(url=world.arm.url + PATH, ca_file=world.arm.ca_pem, attempts=1)
    await refresh_in_process("c", world.provider, world.catalogs, prices)
    assert world.catalogs.origin is CatalogOrigin.LIVE
    assert world.catalogs.current.sku(D4).on_demand_price_micros == 250_000
    assert world.provider.catalog is world.catalogs.current
