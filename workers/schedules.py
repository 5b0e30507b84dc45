"""The cluster's maintenance on Temporal Schedules, and what a worker hosts to run it.

Three schedules per cluster, `catalog-refresh/<cluster>`, `garbage-collection/<cluster>` and
`nodeclass-status/<cluster>`, start the maintenance workflows (workflows/maintenance.py) at fixed intervals: the
provider refreshes instance types and prices every 12 hours, collects garbage every 2 minutes and checks its
AKSNodeClasses (their subnets) every minute. A run still going when the next is due makes
that one skip. `ensure_schedules` creates them, or brings existing ones up to date, so every process start
may call it.

The catalog a refresh replaces is the one of the worker that runs the refresh activity: each worker holds its
own `CatalogSource`, and a worker that did not run the refresh keeps planning with the catalog it has.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from activities.azure.catalog_refresh import CatalogRefreshActivities
from activities.azure.garbage import GarbageCollectionActivities
from activities.azure.nodeclass_status import NodeClassStatusActivities
from activities.azure.prices import PriceSettings, RetailPricesClient
from activities.azure.provider import AzureCloudProvider
from activities.catalog_source import CatalogSource
from core import summaries
from core.cluster import ClusterAPI
from core.messages import CatalogRefreshInput, GarbageCollectionInput, NodeClassStatusInput
from workflows.maintenance import (
    CatalogRefreshWorkflow,
    GarbageCollectionWorkflow,
    NodeClassStatusWorkflow,
    catalog_refresh_id,
    garbage_collection_id,
    nodeclass_status_id,
)

CATALOG_REFRESH_EVERY = timedelta(hours=12)
GARBAGE_COLLECTION_EVERY = timedelta(minutes=2)
NODECLASS_STATUS_EVERY = timedelta(minutes=1)
"""The AKS provider re-reads a subnet every minute while it is missing (3 when it is there)."""


def maintenance_workflows() -> list[type]:
    return [CatalogRefreshWorkflow, GarbageCollectionWorkflow, NodeClassStatusWorkflow]


def catalog_refresh(
    provider: AzureCloudProvider, catalogs: CatalogSource, prices: PriceSettings | None = None
) -> CatalogRefreshActivities:
    """The refresh of `catalogs` through the provider's clients: its Retail Prices client (the cloud's, or none in a
    sovereign cloud), unless `prices` says where else to read them."""
    retail = RetailPricesClient(prices) if prices is not None else provider.retail_prices
    return CatalogRefreshActivities(catalogs, provider.compute, retail)


def maintenance_activities(
    cluster: ClusterAPI,
    provider: AzureCloudProvider,
    catalogs: CatalogSource,
    prices: PriceSettings | None = None,
) -> list[Any]:
    """The maintenance activities of one worker. The provider reads `catalogs` from now on, as the planning
    and lifecycle activities given the same source do."""
    provider.catalogs = catalogs
    refresh = catalog_refresh(provider, catalogs, prices)
    garbage = GarbageCollectionActivities(cluster, provider)
    statuses = NodeClassStatusActivities(cluster, provider)  # type: ignore[arg-type]
    return [refresh.refresh_catalog, garbage.collect_garbage, statuses.reconcile_nodeclass_status]


def _schedule(
    workflow: Any, request: Any, workflow_id: str, task_queue: str, every: timedelta, summary: str
) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            workflow, request, id=workflow_id, task_queue=task_queue, static_summary=summary
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_schedule(client: Client, schedule_id: str, schedule: Schedule) -> None:
    """Create the schedule, or replace the action, spec and policy of the one with this id (its state, such as
    an operator's pause and note, stays)."""
    try:
        await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError:

        def replace(existing: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(
                schedule=dataclasses.replace(schedule, state=existing.description.schedule.state)
            )

        await client.get_schedule_handle(schedule_id).update(replace)


async def ensure_schedules(
    client: Client,
    cluster: str,
    task_queue: str,
    catalog_every: timedelta = CATALOG_REFRESH_EVERY,
    gc_every: timedelta = GARBAGE_COLLECTION_EVERY,
    *,
    catalog_refresh: CatalogRefreshInput | None = None,
    garbage_collection: GarbageCollectionInput | None = None,
    nodeclass_status_every: timedelta = NODECLASS_STATUS_EVERY,
) -> None:
    """Create or update the cluster's maintenance schedules (inputs default to the provider's), and run the
    AKSNodeClass status reconcile once now."""
    refresh_id, collection_id = catalog_refresh_id(cluster), garbage_collection_id(cluster)
    status_id = nodeclass_status_id(cluster)
    await ensure_schedule(
        client,
        status_id,
        _schedule(
            NodeClassStatusWorkflow.run,
            NodeClassStatusInput(cluster=cluster),
            status_id,
            task_queue,
            nodeclass_status_every,
            summaries.nodeclass_status_summary(cluster),
        ),
    )
    # At a process start the NodeClasses are checked now, rather than at the schedule's next turn.
    await client.get_schedule_handle(status_id).trigger()
    await ensure_schedule(
        client,
        refresh_id,
        _schedule(
            CatalogRefreshWorkflow.run,
            catalog_refresh or CatalogRefreshInput(cluster=cluster),
            refresh_id,
            task_queue,
            catalog_every,
            summaries.catalog_refresh_summary(cluster),
        ),
    )
    await ensure_schedule(
        client,
        collection_id,
        _schedule(
            GarbageCollectionWorkflow.run,
            garbage_collection or GarbageCollectionInput(cluster=cluster),
            collection_id,
            task_queue,
            gc_every,
            summaries.garbage_collection_summary(cluster),
        ),
    )


async def refresh_catalog_now(client: Client, cluster: str) -> None:
    """Run the catalog refresh once now (a worker start), rather than wait for the schedule's next turn."""
    await client.get_schedule_handle(catalog_refresh_id(cluster)).trigger()
