"""The scheduled maintenance workflows: one activity each, started by Temporal Schedules (workers/schedules.py).

`CatalogRefreshWorkflow` refreshes the VM sizes and prices of the worker that runs its activity;
`GarbageCollectionWorkflow` removes the cluster's leaked VMs and NICs and the NodeClaims whose VM is gone.
`NodeClassStatusWorkflow` writes the AKSNodeClasses' conditions (their subnets checked in Azure).
Each returns what its activity did, so a schedule's recent runs say what was refreshed or collected. The
activity is retried (a failed listing, say) until the input's timeout; then the run fails and the schedule's
next run tries again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow

from workflows.conventions import RETRY

with workflow.unsafe.imports_passed_through():
    from core import summaries
    from core.messages import (
        CatalogRefreshInput,
        CatalogRefreshResult,
        GarbageCollectionInput,
        GarbageCollectionResult,
        MaintenanceActivity,
        NodeClassStatusInput,
        NodeClassStatusResult,
    )


T = TypeVar("T")


def catalog_refresh_id(cluster: str) -> str:
    return f"catalog-refresh/{cluster}"


def garbage_collection_id(cluster: str) -> str:
    return f"garbage-collection/{cluster}"


def nodeclass_status_id(cluster: str) -> str:
    return f"nodeclass-status/{cluster}"


async def _one_activity(name: MaintenanceActivity, request: Any, result_type: type[T], summary: str) -> T:
    """A maintenance run: its one activity, retried until the request's timeout; one whose worker died is
    retried a heartbeat timeout later."""
    result: T = await workflow.execute_activity(
        name,
        request,
        result_type=result_type,
        schedule_to_close_timeout=timedelta(seconds=request.timeout_seconds),
        heartbeat_timeout=timedelta(seconds=request.heartbeat_seconds),
        retry_policy=RETRY,
        summary=summary,
    )
    return result


@workflow.defn(name="CatalogRefresh")
class CatalogRefreshWorkflow:
    @workflow.run
    async def run(self, request: CatalogRefreshInput) -> CatalogRefreshResult:
        return await _one_activity(
            MaintenanceActivity.REFRESH_CATALOG,
            request,
            CatalogRefreshResult,
            summaries.refresh_catalog_summary(),
        )


@workflow.defn(name="GarbageCollection")
class GarbageCollectionWorkflow:
    @workflow.run
    async def run(self, request: GarbageCollectionInput) -> GarbageCollectionResult:
        return await _one_activity(
            MaintenanceActivity.COLLECT_GARBAGE,
            request,
            GarbageCollectionResult,
            summaries.collect_garbage_summary(request.grace_seconds),
        )


@workflow.defn(name="NodeClassStatus")
class NodeClassStatusWorkflow:
    @workflow.run
    async def run(self, request: NodeClassStatusInput) -> NodeClassStatusResult:
        return await _one_activity(
            MaintenanceActivity.RECONCILE_NODECLASS_STATUS,
            request,
            NodeClassStatusResult,
            summaries.reconcile_nodeclass_status_summary(),
        )
