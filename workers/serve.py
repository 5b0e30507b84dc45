"""`nodewright worker` and `nodewright controller` as cluster components: what each runs, in which order, what
its readiness means, and how it stops.

Both check the Kubernetes API server first (a kubeconfig that cannot be used stops the process at once, exit
code 2), serve their health probes, then wait for Temporal: in a cluster it may start after them, so an
unreachable Temporal is retried with backoff while `/readyz` says why the process is not ready. Then:

- the worker registers the search attributes and schedules, builds its catalog from the Resource SKUs API of its
  region, priced from the shipped table and the Retail Prices API (unless it runs workflows only: their local
  activities read no catalog), and polls its task queue for the tasks of its role (`WorkerRole`). Azure that
  cannot be reached at start is retried with jittered backoff, each failure logged, while `/readyz` says why (a
  refused credential, named, too: as a launch, the start waits for an administrator to mend it).
  On SIGTERM it stops polling, lets running activities finish for `NODEWRIGHT_SHUTDOWN_GRACE_SECONDS`, then
  cancels the rest (Temporal retries them on another worker) and exits 0. Ready: API server and Temporal answer,
  the worker has its catalog, and it polls.
- the controller waits for the leader Lease (`workers.leader`), then watches and signals until SIGTERM, when it
  stops watching, releases the Lease and exits 0; a Lease it could not renew ends it with exit code 1, for
  Kubernetes to restart it. Ready: API server and Temporal answer, and it leads or stands by having read the
  Lease (a standby must pass readiness, or a rollout of two replicas would never finish).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from activities.azure.skus import SkuListError
from activities.azure.windows import LICENSE_NONE as WINDOWS_LICENSE_NONE
from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from activities.kubeclient.connection import USER_AGENT
from core.errors import CloudError, CredentialError
from core.messages import ProvisionerInput
from workers.health import Check, Readiness, serve_probes
from workers.settings import Settings, TemporalConnection
from workers.worker import TemporalUnreachableError, WorkerRole, connect_configured

if TYPE_CHECKING:
    from activities.azure.catalog_refresh import CatalogRefreshActivities
    from activities.catalog_source import CatalogSource
    from workers.azure import AzureConfig
    from workers.leader import LeaderElector

logger = logging.getLogger("nodewright")

HEALTH_CHECK_TIMEOUT = timedelta(seconds=3)


def connect_cluster(settings: Settings, part: str, threads: int | None = None) -> KubernetesCluster:
    """The Kubernetes API of the settings' kubeconfig (or the pod's service account) for a `part` of the
    process (its User-Agent is `nodewright/<part>`); `ClusterConfigError` when it cannot be read. The
    connection is checked by the caller, on its event loop."""
    extra = {} if threads is None else {"threads": threads}
    cluster = load_cluster(
        settings.kubeconfig,
        settings.kube_context,
        qps=settings.kube_qps,
        burst=settings.kube_burst,
        user_agent=f"{USER_AGENT}/{part}",
        **extra,
    )
    cluster.node_overlays = settings.gates.node_overlay
    cluster.capacity_buffers = settings.gates.capacity_buffer
    return cluster


def retrying_while(
    error: type[BaseException],
    failed: Callable[[BaseException, float], None],
    multiplier: float,
    max_wait_seconds: float,
) -> AsyncRetrying:
    """Attempts repeated with jittered exponential backoff while they raise `error` (any other error ends them);
    `failed(error, seconds to the next try)` before each wait."""

    def before_sleep(state: RetryCallState) -> None:
        exception = state.outcome.exception() if state.outcome else None
        failed(exception or error(), state.next_action.sleep if state.next_action else 0.0)

    return AsyncRetrying(
        retry=retry_if_exception_type(error),
        wait=wait_random_exponential(multiplier=multiplier, max=max_wait_seconds),
        before_sleep=before_sleep,
        reraise=True,
    )


@dataclass
class Connections:
    """What readiness looks at: the API server, Temporal once connected, and the process's own part."""

    cluster: KubernetesCluster
    temporal: TemporalConnection
    client: Client | None = None
    temporal_error: str = "not tried yet"

    async def kubernetes(self) -> str | None:
        try:
            await self.cluster.ping()
        except CloudError as error:
            return f"cannot reach the Kubernetes API server {self.cluster.server}: {error}"
        return None

    async def temporal_server(self) -> str | None:
        where = f"Temporal at {self.temporal.address}"
        if self.client is None:
            return f"not connected to {where} yet: {self.temporal_error}"
        try:
            serving = await self.client.service_client.check_health(timeout=HEALTH_CHECK_TIMEOUT)
        except (RPCError, RuntimeError) as error:
            return f"cannot reach {where}: {error}"
        return None if serving else f"{where} answers but does not serve yet"

    def checks(self) -> list[Check]:
        return [
            Check("the Kubernetes API server", self.kubernetes),
            Check("Temporal", self.temporal_server),
        ]

    async def connect_temporal(self, max_wait_seconds: float = 5.0) -> Client:
        """Connect, trying again with jittered backoff while Temporal cannot be reached; each failure is
        logged and `/readyz` shows the last one."""

        def failed(error: BaseException, wait: float) -> None:
            self.temporal_error = str(error)
            logger.warning("waiting for Temporal: %s", error)

        retrying = retrying_while(TemporalUnreachableError, failed, 0.5, max_wait_seconds)
        async for attempt in retrying:
            with attempt:
                self.client = await connect_configured(self.temporal)
        assert self.client is not None
        return self.client


# --- the worker ------------------------------------------------------------------------------------------


@dataclass
class CatalogStart:
    """A worker's first catalog, built from Azure before it takes activities; readiness reads `error`."""

    region: str
    error: str | None = "not listed yet"
    signed_in_as: str = "the worker's credential"
    """What signs in to Azure (`CredentialSettings.describe`), named when Azure refuses it."""

    async def ready(self) -> str | None:
        if self.error is None:
            return None
        return f"no instance types for region {self.region} yet: {self.error}"

    async def build(self, refresh: CatalogRefreshActivities, max_wait_seconds: float = 30.0) -> None:
        """List the region's sizes (and read its prices), trying again with jittered backoff while the Resource
        SKUs API cannot be listed; each failure is logged and `/readyz` shows the last one."""

        def failed(error: BaseException, wait: float) -> None:
            self.error = str(error)
            if isinstance(error, SkuListError) and isinstance(error.failure, CredentialError):
                # Retried like any other failure: a new secret or role assignment mends it without a restart.
                self.error = f"Azure refused {self.signed_in_as}: {error}"
            logger.warning(
                "waiting for Azure to list instance types for region %s, trying again in %.1f s: %s",
                self.region,
                wait,
                self.error,
            )

        retrying = retrying_while(SkuListError, failed, 1.0, max_wait_seconds)
        async for attempt in retrying:
            with attempt:
                await refresh.refresh(required=True)
        self.error = None
        announce_prices(refresh.catalogs)


def announce_prices(catalogs: CatalogSource) -> None:
    """Say once at start where the prices come from, when they are not the region's own: a log line (the
    AKSNodeClass status says it too, `PricingFallback`)."""
    fallback = catalogs.price_fallback()
    if fallback is not None:
        logger.warning(fallback)
    elif not catalogs.live_prices:
        logger.info(
            "this cloud has no Retail Prices API: instance types stay priced with %s",
            catalogs.describe_prices(),
        )


async def serve_worker(
    settings: Settings,
    azure: AzureConfig,
    connection: TemporalConnection,
    role: WorkerRole = WorkerRole.ALL,
) -> None:
    from activities.catalog_source import CatalogSource
    from workers.azure import cloud_provider
    from workers.schedules import bootstrap_token_rotation, catalog_refresh, ensure_schedules
    from workers.temporal_server import ensure_search_attributes
    from workers.worker import build_worker

    cluster = connect_cluster(settings, "worker")
    await cluster.check_connection()
    if role.runs_activities and settings.worker_informer:
        cluster.start_informer()
    connections = Connections(cluster, connection)
    worker: Worker | None = None
    stopping = False

    async def polling() -> str | None:
        if stopping:
            return "shutting down"
        if worker is None or not worker.is_running:
            return f"not polling task queue {settings.task_queue} for {role} tasks yet"
        return None

    start = CatalogStart(
        azure.settings.location,
        None if not role.runs_activities else "not listed yet",
        azure.credential.describe() if azure.credential else "the emulator's static token",
    )
    readiness = Readiness(
        [*connections.checks(), Check("the catalog", start.ready), Check("the worker", polling)]
    )
    async with cluster, serve_probes(settings.health_probe_port, readiness):
        client = await connections.connect_temporal()
        await ensure_search_attributes(client)
        catalogs = CatalogSource.shipped(
            azure.settings.location, azure.settings.windows_license_type == WINDOWS_LICENSE_NONE
        )
        rotating = settings.bootstrap_token_rotation_seconds > 0
        async with cloud_provider(cluster, azure, catalogs, rotated_tokens=rotating) as cloud:
            if role.runs_activities:  # the local activities a workflows-only worker runs read no catalog
                await start.build(catalog_refresh(cloud, catalogs))
            worker = build_worker(
                client,
                settings.task_queue,
                cluster,
                cloud,
                catalogs,
                None,
                settings.shutdown_grace,
                role,
                settings.worker_workflow_tasks,
                settings.worker_lifecycle_sandbox,
                settings.worker_activities,
            )
            await ensure_schedules(
                client,
                azure.settings.cluster_name,
                settings.task_queue,
                catalog_every=timedelta(seconds=settings.catalog_refresh_seconds),
                gc_every=timedelta(seconds=settings.garbage_collection_seconds),
                bootstrap_token_rotation=bootstrap_token_rotation(
                    azure.settings.cluster_name,
                    settings.bootstrap_token_rotation_seconds,
                    settings.registration_ttl_seconds,
                    settings.launch_timeout_seconds,
                ),
            )
            running = asyncio.create_task(worker.run())
            try:
                await asyncio.shield(running)
            except asyncio.CancelledError:
                # Cancelling `run()` would also cancel its shutdown; `shutdown()` applies the grace period.
                stopping = True
                logger.info(
                    "stopping the %s worker: no new tasks; running activities have %g s to finish",
                    role,
                    settings.shutdown_grace_seconds,
                )
                await worker.shutdown()
                raise


# --- the controller --------------------------------------------------------------------------------------


async def serve_controller(settings: Settings, connection: TemporalConnection) -> None:
    from activities.metrics import default_metrics
    from core.static_messages import StaticPoolInput
    from workers.consolidate import disruption_input
    from workers.controller import Controller, lifecycle_adoption
    from workers.controller.capacity_windows import CapacityWindows
    from workers.controller.static_pools import StaticPools
    from workers.leader import LeaderElectionConfig, LeaderElector

    for gate in settings.gates.unsupported():
        logger.warning(
            "feature gate %s is on (FEATURE_GATES) but nodewright does not implement it yet; its objects are not read",
            gate,
        )
    cluster = connect_cluster(settings, "controller")
    await cluster.check_connection()
    connections = Connections(cluster, connection)
    # Leases get a client of their own (as controller-runtime gives leader election one): a renewal never
    # waits behind the controller's requests for a pool thread or the rate limiter.
    leases = connect_cluster(settings, "leader-election", threads=2)
    elector = (
        LeaderElector(leases, LeaderElectionConfig.from_settings(settings))
        if settings.leader_election
        else None
    )
    readiness = Readiness([*connections.checks(), Check("leader election", lambda: _standing(elector))])
    async with cluster, leases, serve_probes(settings.health_probe_port, readiness):
        client = await connections.connect_temporal()
        controller = Controller(
            client,
            cluster,
            provisioner_input(settings),
            settings.task_queue,
            disruption=disruption_input(settings),
            metrics=default_metrics(),
            static=StaticPools(
                client,
                cluster,
                settings.task_queue,
                settings.gates.static_capacity,
                StaticPoolInput(cluster=settings.cluster_name, nodepool=""),
            ),
            windows=CapacityWindows(client, cluster, settings.cluster_name, settings.task_queue),
            adoption=lifecycle_adoption(client, cluster, settings.task_queue),
            capacity_buffers=settings.gates.capacity_buffer,
        )
        if elector is None:
            await controller.run()
        else:
            await elector.run(controller.run)


def provisioner_input(settings: Settings) -> ProvisionerInput:
    """The provisioner the controller starts, with the batching window, lifecycle timeouts and minValues policy of
    the settings."""
    from workers.consolidate import lifecycle_settings

    return ProvisionerInput(
        cluster=settings.cluster_name,
        batch_idle_seconds=settings.batch_idle_seconds,
        batch_max_seconds=settings.batch_max_seconds,
        lifecycle=lifecycle_settings(settings),
        min_values_policy=settings.min_values_policy,
    )


async def _standing(elector: LeaderElector | None) -> str | None:
    if elector is None or elector.leading or elector.observed:
        return None
    return f"has not read the leader lease {elector.config.lease} yet"
