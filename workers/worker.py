"""The worker: hosts the provisioner and NodeClaim workflows and their activities on one task queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.cloud import CloudActivities
from activities.kube import KubeActivities
from activities.lifecycle import LifecycleActivities
from activities.planning import PlanningActivities
from core.cloudprovider import CloudProvider
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import ProvisionerWorkflow

WORKFLOWS: Sequence[type] = (ProvisionerWorkflow, NodeClaimWorkflow)


def activities_for(cluster: ClusterAPI, cloud: CloudProvider, catalog: AzureCatalog) -> list[Any]:
    """Every activity, bound to the cluster and cloud they act on."""
    kube = KubeActivities(cluster)
    lifecycle = LifecycleActivities(cluster, cloud, catalog)
    planning = PlanningActivities(cluster, catalog)
    return [
        planning.plan_provisioning,
        lifecycle.launch_nodeclaim,
        lifecycle.register_nodeclaim,
        lifecycle.initialize_nodeclaim,
        kube.update_nodeclaim,
        kube.taint_for_termination,
        kube.drain_node,
        kube.delete_node,
        kube.delete_nodeclaim,
        CloudActivities(cloud).delete_instance,
    ]


def build_worker(
    client: Client, task_queue: str, cluster: ClusterAPI, cloud: CloudProvider, catalog: AzureCatalog
) -> Worker:
    """A worker for our workflows and activities; a dead worker's sticky tasks move on after 2 s, not 10."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=activities_for(cluster, cloud, catalog),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        graceful_shutdown_timeout=timedelta(seconds=5),
        max_concurrent_activities=64,
    )


async def connect(address: str, namespace: str = "default") -> Client:
    """A Temporal client that speaks pydantic payloads."""
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
