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


def catalog_refresh_id(cluster: str) -> str:
    return f"catalog-refresh/{cluster}"


def garbage_collection_id(cluster: str) -> str:
    return f"garbage-collection/{cluster}"


def nodeclass_status_id(cluster: str) -> str:
    return f"nodeclass-status/{cluster}"


@workflow.defn(name="CatalogRefresh")
class CatalogRefreshWorkflow:
    @workflow.run
    async def run(self, request: CatalogRefreshInput) -> CatalogRefreshResult:
        result: CatalogRefreshResult = await workflow.execute_activity(
            MaintenanceActivity.REFRESH_CATALOG,
            request,
            result_type=CatalogRefreshResult,
            schedule_to_close_timeout=timedelta(seconds=request.timeout_seconds),
            retry_policy=RETRY,
            summary=summaries.refresh_catalog_summary(),
        )
        return result


@workflow.defn(name="GarbageCollection")
class GarbageCollectionWorkflow:
    @workflow.run
    async def run(self, request: GarbageCollectionInput) -> GarbageCollectionResult:
        result: GarbageCollectionResult = await workflow.execute_activity(
            MaintenanceActivity.COLLECT_GARBAGE,
            request,
            result_type=GarbageCollectionResult,
            schedule_to_close_timeout=timedelta(seconds=request.timeout_seconds),
            retry_policy=RETRY,
            summary=summaries.collect_garbage_summary(request.grace_seconds),
        )
        return result


@workflow.defn(name="NodeClassStatus")
class NodeClassStatusWorkflow:
    @workflow.run
    async def run(self, request: NodeClassStatusInput) -> NodeClassStatusResult:
        result: NodeClassStatusResult = await workflow.execute_activity(
            MaintenanceActivity.RECONCILE_NODECLASS_STATUS,
            request,
            result_type=NodeClassStatusResult,
            schedule_to_close_timeout=timedelta(seconds=request.timeout_seconds),
            retry_policy=RETRY,
            summary=summaries.reconcile_nodeclass_status_summary(),
        )
        return result
