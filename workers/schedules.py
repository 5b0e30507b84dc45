"""The cluster's maintenance on Temporal Schedules, and what a worker hosts to run it.

Three schedules per cluster, `catalog-refresh/<cluster>`, `garbage-collection/<cluster>` and
`nodeclass-status/<cluster>`, start the maintenance workflows (workflows/maintenance.py) at fixed intervals: the
provider refreshes instance types and prices every 12 hours, collects garbage every 2 minutes and checks its
AKSNodeClasses (their subnets) every minute. A fourth, `bootstrap-token-rotation/<cluster>`, rotates the node
bootstrap token (workflows/bootstrap_tokens.py), every 12 hours by default. A run still going when the next is due
makes that one skip. `ensure_schedules` creates them, or brings existing ones up to date, so every process start
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
from temporalio.service import RPCError, RPCStatusCode

from activities.azure.catalog_refresh import CatalogRefreshActivities
from activities.azure.garbage import GarbageCollectionActivities
from activities.azure.nodeclass_status import NodeClassStatusActivities
from activities.azure.prices import PriceSettings, RetailPricesClient
from activities.azure.provider import AzureCloudProvider
from activities.bootstrap_tokens import BootstrapTokenActivities, rotation_grace
from activities.catalog_source import CatalogSource
from core import summaries
from core.bootstrap_token_messages import BootstrapTokenRotationInput
from core.cluster import ClusterAPI
from core.messages import CatalogRefreshInput, GarbageCollectionInput, NodeClassStatusInput
from workflows.bootstrap_tokens import BootstrapTokenRotationWorkflow, bootstrap_token_rotation_id
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
    return [
        CatalogRefreshWorkflow,
        GarbageCollectionWorkflow,
        NodeClassStatusWorkflow,
        BootstrapTokenRotationWorkflow,
    ]


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
    tokens = BootstrapTokenActivities(cluster, provider.settings.bootstrap_token_secret)  # type: ignore[arg-type]
    return [
        refresh.refresh_catalog,
        garbage.collect_garbage,
        statuses.reconcile_nodeclass_status,
        tokens.rotate_bootstrap_token,
        tokens.delete_stale_bootstrap_tokens,
    ]


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
    bootstrap_token_rotation: BootstrapTokenRotationInput | None = None,
) -> None:
    """Create or update the cluster's maintenance schedules (inputs default to the provider's), and run the
    AKSNodeClass status reconcile once now. Without `bootstrap_token_rotation`, the cluster's rotation schedule
    is deleted if an earlier start made one (rotation turned off)."""
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
    await ensure_bootstrap_token_rotation(client, cluster, task_queue, bootstrap_token_rotation)


async def ensure_bootstrap_token_rotation(
    client: Client, cluster: str, task_queue: str, rotation: BootstrapTokenRotationInput | None
) -> None:
    """Create or update the cluster's rotation schedule; without `rotation`, delete it if there is one."""
    schedule_id = bootstrap_token_rotation_id(cluster)
    if rotation is None:
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
        return
    await ensure_schedule(
        client,
        schedule_id,
        _schedule(
            BootstrapTokenRotationWorkflow.run,
            rotation,
            schedule_id,
            task_queue,
            timedelta(seconds=rotation.period_seconds),
            summaries.bootstrap_token_rotation_summary(cluster),
        ),
    )


def bootstrap_token_rotation(
    cluster: str, period_seconds: float, registration_ttl_seconds: float, launch_timeout_seconds: float
) -> BootstrapTokenRotationInput | None:
    """The rotation's Schedule action for these settings (None: a period of 0 turns rotation off)."""
    if period_seconds <= 0:
        return None
    return BootstrapTokenRotationInput(
        cluster=cluster,
        period_seconds=period_seconds,
        grace_seconds=rotation_grace(registration_ttl_seconds, launch_timeout_seconds),
    )


async def rotate_bootstrap_token_now(client: Client, cluster: str) -> None:
    """Run the rotation now (as `temporal schedule trigger` does), even while the last run still keeps the token
    it replaced."""
    handle = client.get_schedule_handle(bootstrap_token_rotation_id(cluster))
    await handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)


async def refresh_catalog_now(client: Client, cluster: str) -> None:
    """Run the catalog refresh once now (a worker start), rather than wait for the schedule's next turn."""
    await client.get_schedule_handle(catalog_refresh_id(cluster)).trigger()
