"""The maintenance workflows on the dev server, with their activities against the emulated AKS (its ARM, whose
VMs join the real control plane), and the schedules that start them: created, updated in place, and really
starting their workflow."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest_asyncio
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio import activity
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleIntervalSpec, WorkflowExecution
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.azure.bootstrap import ClusterBootstrap
from activities.azure.catalog_refresh import CatalogRefreshActivities
from activities.azure.garbage import GarbageCollectionActivities
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.nodeclass_status import NodeClassStatusActivities
from activities.azure.prices import PriceSettings
from activities.azure.provider import AzureCloudProvider
from activities.catalog_source import CatalogSource
from activities.heartbeat import heartbeats
from activities.kubeclient.cluster import KubernetesCluster
from core.cloudprovider import LaunchRequest
from core.messages import (
    CatalogOrigin,
    CatalogRefreshInput,
    GarbageCollectionInput,
    GarbageCollectionResult,
    MaintenanceActivity,
    NodeClassStatusInput,
)
from simulator.arm import RunningArm
from simulator.retail_prices import PATH, RETAIL_PRICES_KEY
from tests.activities.azure.test_provider import launch
from tests.cluster import apply_examples
from tests.workflows.conftest import decode, eventually, step_summaries
from workers.controlplane.run import ControlPlane
from workers.schedules import ensure_schedules, maintenance_activities, maintenance_workflows
from workers.simulated_aks import SimulatedAks
from workflows.maintenance import (
    CatalogRefreshWorkflow,
    GarbageCollectionWorkflow,
    NodeClassStatusWorkflow,
    catalog_refresh_id,
    garbage_collection_id,
    nodeclass_status_id,
)


@dataclass
class Maintenance:
    client: Client
    task_queue: str
    cluster: str
    arm: RunningArm
    provider: AzureCloudProvider
    catalogs: CatalogSource
    kube: KubernetesCluster


def leaked(name: str) -> LaunchRequest:
    """A VM of the cluster that no NodeClaim claims."""
    return launch(name, zone="eastus-1")


@pytest_asyncio.fixture
async def maintenance(
    temporal_env: WorkflowEnvironment, task_queue: str, aks: SimulatedAks
) -> AsyncIterator[Maintenance]:
    """A worker of the maintenance workflows on the emulated AKS (its cluster name is the test's own)."""
    await apply_examples(aks.kube)
    arm = aks.emulated.arm
    settings = aks.azure.settings
    options = arm.client_options()
    async with (
        ComputeManagementClient(arm.credential(), settings.subscription_id, **options) as compute,
        NetworkManagementClient(arm.credential(), settings.subscription_id, **options) as network,
    ):
        bootstrap = ClusterBootstrap(aks.kube, settings.bootstrap_token_secret, settings.cluster_endpoint)
        provider = AzureCloudProvider(
            compute, network, settings, bootstrap, node_class=ClusterNodeClasses(aks.kube)
        )
        catalogs = CatalogSource.shipped(settings.location)
        prices = PriceSettings(url=arm.url + PATH, ca_file=arm.ca_pem, backoff=timedelta(0))
        async with Worker(
            temporal_env.client,
            task_queue=task_queue,
            workflows=maintenance_workflows(),
            activities=maintenance_activities(aks.kube, provider, catalogs, prices),
        ):
            yield Maintenance(
                temporal_env.client, task_queue, settings.cluster_name, arm, provider, catalogs, aks.kube
            )


async def test_the_catalog_refresh_workflow_makes_the_live_catalog_current(maintenance: Maintenance) -> None:
    maintenance.arm.runner.app[RETAIL_PRICES_KEY].price_overrides["Standard_D4s_v5"] = 0.25

    result = await maintenance.client.execute_workflow(
        CatalogRefreshWorkflow.run,
        CatalogRefreshInput(cluster=maintenance.cluster, timeout_seconds=60),
        id=f"{catalog_refresh_id(maintenance.cluster)}-{uuid.uuid4().hex[:6]}",
        task_queue=maintenance.task_queue,
    )

    assert result.refreshed and result.origin is CatalogOrigin.LIVE and result.failure is None
    assert result.skus == len(maintenance.catalogs.current.skus) > 500
    assert result.live_on_demand_prices > 500 and result.live_spot_prices > 0
    assert maintenance.provider.catalog.sku("Standard_D4s_v5").on_demand_price_micros == 250_000


async def test_the_garbage_collection_workflow_deletes_a_leaked_vm(maintenance: Maintenance) -> None:
    await maintenance.provider.create(leaked("leaked-1"))

    result = await maintenance.client.execute_workflow(
        GarbageCollectionWorkflow.run,
        GarbageCollectionInput(cluster=maintenance.cluster, grace_seconds=0, timeout_seconds=60),
        id=f"{garbage_collection_id(maintenance.cluster)}-{uuid.uuid4().hex[:6]}",
        task_queue=maintenance.task_queue,
    )

    assert result.instances == ["leaked-1"] and result.failures == []
    assert maintenance.arm.state.vm("aks-leaked-1") is None


async def test_ensure_schedules_creates_then_updates_and_the_schedules_start_their_workflows(
    maintenance: Maintenance,
) -> None:
    client, cluster = maintenance.client, maintenance.cluster
    ids = (catalog_refresh_id(cluster), garbage_collection_id(cluster))
    collect_now = GarbageCollectionInput(cluster=cluster, grace_seconds=0, timeout_seconds=60)
    try:
        await ensure_schedules(
            client, cluster, maintenance.task_queue, timedelta(hours=12), timedelta(hours=1)
        )
        first = [await client.get_schedule_handle(id).describe() for id in ids]
        await client.get_schedule_handle(ids[0]).pause(note="paused by the operator")
        await ensure_schedules(
            client,
            cluster,
            maintenance.task_queue,
            timedelta(hours=6),
            timedelta(hours=2),
            garbage_collection=collect_now,
        )
        second = [await client.get_schedule_handle(id).describe() for id in ids]

        def every(description: object) -> list[timedelta]:
            spec = description.schedule.spec  # type: ignore[attr-defined]
            return [
                interval.every for interval in spec.intervals if isinstance(interval, ScheduleIntervalSpec)
            ]

        assert [every(d) for d in first] == [[timedelta(hours=12)], [timedelta(hours=1)]]
        assert [every(d) for d in second] == [[timedelta(hours=6)], [timedelta(hours=2)]]
        assert [(d.schedule.state.paused, d.schedule.state.note) for d in second] == [
            (True, "paused by the operator"),
            (False, None),
        ]
        actions = [d.schedule.action for d in second]
        assert all(isinstance(a, ScheduleActionStartWorkflow) for a in actions)
        assert [(a.workflow, a.task_queue, a.id) for a in actions] == [  # type: ignore[attr-defined]
            ("CatalogRefresh", maintenance.task_queue, ids[0]),
            ("GarbageCollection", maintenance.task_queue, ids[1]),
        ]

        await maintenance.provider.create(leaked("leaked-2"))
        await client.get_schedule_handle(ids[1]).trigger()

        async def collected() -> bool:
            return maintenance.arm.state.vm("aks-leaked-2") is None

        await eventually(collected, timeout=30, what="the scheduled garbage collection")
        # What the Temporal UI lists the runs by.
        # (A described schedule's action holds the summary still encoded.)
        assert [await decode(client, [a.static_summary], str) for a in actions] == [  # type: ignore[attr-defined]
            f"catalog refresh (instance types and prices) for cluster {cluster}",
            f"garbage collection for cluster {cluster}",
        ]

        async def scheduled() -> list[WorkflowExecution]:
            return [run async for run in client.list_workflows(f'TemporalScheduledById = "{ids[1]}"')]

        [run] = await eventually(scheduled, what="the scheduled run listed")
        collection = client.get_workflow_handle(run.id, run_id=run.run_id)
        assert (
            await (await collection.describe()).static_summary()
            == f"garbage collection for cluster {cluster}"
        )
        assert await step_summaries(client, collection) == [
            ("collect_garbage", "delete leaked VMs and NICs (older than 0s) and NodeClaims whose VM is gone")
        ]
    finally:
        for schedule_id in (*ids, nodeclass_status_id(cluster)):
            await client.get_schedule_handle(schedule_id).delete()


def nodeclass(name: str, subnet_id: str) -> dict[str, object]:
    return {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": name},
        "spec": {"vnetSubnetID": subnet_id},
    }


def subnet(maintenance: Maintenance, resource_group: str, vnet: str, name: str) -> str:
    return (
        f"/subscriptions/{maintenance.provider.settings.subscription_id}/resourceGroups/{resource_group}/providers/Microsoft.Network"
        f"/virtualNetworks/{vnet}/subnets/{name}"
    )


async def nodeclass_conditions(control_plane: ControlPlane, name: str) -> dict[str, dict[str, Any]]:
    done = await asyncio.to_thread(control_plane.kubectl, "get", "aksnodeclass", name, "-o", "json")
    return {c["type"]: c for c in json.loads(done.stdout).get("status", {}).get("conditions", [])}


async def ready_column(control_plane: ControlPlane) -> dict[str, str]:
    done = await asyncio.to_thread(control_plane.kubectl, "get", "aksnodeclasses")
    return {row.split()[0]: row.split()[1] for row in done.stdout.splitlines()[1:]}


async def test_the_nodeclass_status_workflow_marks_a_subnet_outside_the_clusters_vnet(
    maintenance: Maintenance, control_plane: ControlPlane
) -> None:
    elsewhere = subnet(maintenance, "other-rg", "other-vnet", "nodes")
    await asyncio.to_thread(control_plane.apply, [nodeclass("elsewhere", elsewhere)])

    result = await maintenance.client.execute_workflow(
        NodeClassStatusWorkflow.run,
        NodeClassStatusInput(cluster=maintenance.cluster, timeout_seconds=60),
        id=f"{nodeclass_status_id(maintenance.cluster)}-{uuid.uuid4().hex[:6]}",
        task_queue=maintenance.task_queue,
    )

    assert result.ready == ["default"] and result.failures == []
    assert result.not_ready == {"elsewhere": "UnhealthyDependents: SubnetsReady=False"}
    assert sorted(result.written) == ["default", "elsewhere"]
    assert await ready_column(control_plane) == {"default": "True", "elsewhere": "False"}
    subnets = (await nodeclass_conditions(control_plane, "elsewhere"))["SubnetsReady"]
    assert (subnets["status"], subnets["reason"]) == ("False", "SubnetIDInvalid")
    assert subnets["message"] == (
        f"vnetSubnetID does not match the cluster subscription, resource group, or virtual network: {elsewhere}"
    )


async def test_a_subnet_azure_does_not_have_makes_its_nodeclass_not_ready(
    maintenance: Maintenance, control_plane: ControlPlane
) -> None:
    # A cluster in a virtual network of its own ("bring your own"), where a NodeClass may pick another subnet.
    nodes, missing = (
        subnet(maintenance, "net", "vnet", "nodes"),
        subnet(maintenance, "net", "vnet", "missing"),
    )
    maintenance.arm.state.settings.subnets = [nodes]
    provider = copy.copy(maintenance.provider)
    provider.settings = provider.settings.model_copy(update={"subnet_id": nodes})
    await asyncio.to_thread(control_plane.apply, [nodeclass("missing", missing), nodeclass("byo", nodes)])

    result = await NodeClassStatusActivities(maintenance.kube, provider).reconcile(datetime.now(UTC))

    assert sorted(result.ready) == ["byo", "default"]
    assert list(result.not_ready) == ["missing"]
    conditions = await nodeclass_conditions(control_plane, "missing")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "UnhealthyDependents")
    subnets = conditions["SubnetsReady"]
    assert (subnets["status"], subnets["reason"], subnets["message"]) == (
        "False",
        "SubnetNotFound",
        f"resource not found: {missing}",
    )
    assert (await ready_column(control_plane))["missing"] == "False"
    # Nothing changed: nothing is written again.
    again = await NodeClassStatusActivities(maintenance.kube, provider).reconcile(datetime.now(UTC))
    assert again.written == []


class SilentFirstAttempt:
    """`collect_garbage` whose first attempt goes silent, as on a worker that died mid-run (no heartbeat, no
    answer), and whose second collects nothing."""

    def __init__(self) -> None:
        self.attempts: list[int] = []

    @activity.defn(name=MaintenanceActivity.COLLECT_GARBAGE)
    async def collect_garbage(self, request: GarbageCollectionInput) -> GarbageCollectionResult:
        self.attempts.append(activity.info().attempt)
        if activity.info().attempt == 1:
            await asyncio.Event().wait()  # until cancelled; never heartbeats
        return GarbageCollectionResult()


async def test_a_maintenance_run_whose_worker_went_silent_is_retried_a_heartbeat_timeout_later(
    temporal_env: WorkflowEnvironment,
) -> None:
    silent = SilentFirstAttempt()
    queue = f"maintenance-silent-{uuid.uuid4()}"
    async with Worker(
        temporal_env.client,
        task_queue=queue,
        workflows=[GarbageCollectionWorkflow],
        activities=[silent.collect_garbage],
    ):
        started = asyncio.get_running_loop().time()
        result = await temporal_env.client.execute_workflow(
            GarbageCollectionWorkflow.run,
            GarbageCollectionInput(cluster="silent", timeout_seconds=120, heartbeat_seconds=1),
            id=f"garbage-collection/silent-{uuid.uuid4()}",
            task_queue=queue,
            result_type=GarbageCollectionResult,
        )
        took = asyncio.get_running_loop().time() - started
    assert result == GarbageCollectionResult()
    assert silent.attempts == [1, 2]
    assert took < 30  # a heartbeat timeout and a retry, not the 120 s the run may take


async def test_the_maintenance_activities_heartbeat_while_they_run() -> None:
    beats: list[object] = []
    environment = ActivityEnvironment()
    environment.on_heartbeat = lambda *details: beats.append(details)

    @heartbeats
    async def slow() -> str:
        await asyncio.sleep(1.5)
        return "done"

    assert await environment.run(slow) == "done"
    assert len(beats) >= 2  # at the start, and a second later
    for method in (
        GarbageCollectionActivities.collect_garbage,
        CatalogRefreshActivities.refresh_catalog,
        NodeClassStatusActivities.reconcile_nodeclass_status,
    ):
        assert method.__wrapped__ is not None, method  # type: ignore[attr-defined]
