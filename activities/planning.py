"""The planning activity: read the cluster, run the scheduler, return only the decisions.

The snapshot never leaves the activity; the workflow's history gets the NodeClaims to create, each with its
launch candidates, and a count of what could not be placed.
"""

from __future__ import annotations

import asyncio
import secrets
import string
from collections.abc import Callable
from datetime import UTC, datetime

from temporalio import activity

from activities.kube import nodeclaim_object, pod_event
from core import labels
from core.api.nodepool import NodePool
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog
from core.messages import ActivityName, OfferingChoice, PlanInput, PlannedNodeClaim, PlanResult
from core.resources import format_resources
from core.scheduling.results import NewNodeClaim, SchedulingResults
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import InstanceTypeProvider, SchedulingSnapshot, azure_provider, build_snapshot

MAX_REPORTED_UNSCHEDULABLE = 20
_ALPHABET = string.ascii_lowercase + string.digits


def random_suffix() -> str:
    """Five characters, as Kubernetes' generateName adds."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(5))


def _seconds(pool: NodePool | None, which: str) -> float | None:
    if pool is None:
        return None
    spec = pool.spec.template.spec
    duration = spec.expire_after_duration if which == "expire" else spec.termination_grace_period_duration
    return duration.total_seconds() if duration is not None else None


def _instance_types_summary(options: list[str], shown: int = 5) -> str:
    others = len(options) - shown
    return ", ".join(options[:shown]) + (f" and {others} other(s)" if others > 0 else "")


def planned(claim: NewNodeClaim, pool: NodePool | None, name: str, max_candidates: int) -> PlannedNodeClaim:
    """A simulated NodeClaim as its lifecycle needs it."""
    template_labels = dict(pool.spec.template.metadata.labels) if pool else {}
    template_labels[labels.NODEPOOL] = claim.nodepool
    return PlannedNodeClaim(
        name=name,
        nodepool=claim.nodepool,
        launch_candidates=[
            OfferingChoice(
                instance_type=launch.instance_type,
                zone=launch.offering.zone,
                capacity_type=launch.offering.capacity_type,
                price_micros=launch.offering.price_micros,
            )
            for launch in claim.launch_candidates[:max_candidates]
        ],
        labels=template_labels,
        taints=claim.taints,
        startup_taints=claim.startup_taints,
        requests=format_resources(claim.requests),
        instance_types=_instance_types_summary(claim.instance_type_options),
        pod_count=len(claim.pods),
        expire_after_seconds=_seconds(pool, "expire"),
        termination_grace_period_seconds=_seconds(pool, "grace"),
    )


class PlanningActivities:
    """Runs the scheduler on a snapshot of the cluster."""

    def __init__(
        self,
        cluster: ClusterAPI,
        catalog: AzureCatalog,
        names: Callable[[], str] = random_suffix,
    ) -> None:
        self.cluster = cluster
        self.catalog = catalog
        self.names = names
        self._providers: dict[frozenset[tuple[str, str, str]], InstanceTypeProvider] = {}

    @activity.defn(name=ActivityName.PLAN_PROVISIONING)
    async def plan_provisioning(self, request: PlanInput) -> PlanResult:
        manifests = await self.cluster.snapshot()
        now = datetime.now(UTC)
        unavailable = {
            (u.instance_type, u.zone, u.capacity_type) for u in request.unavailable if u.until > now
        }
        snapshot = build_snapshot(manifests, self._provider(frozenset(unavailable)))
        results = await asyncio.to_thread(self._solve, snapshot)
        for entry in results.unschedulable[:MAX_REPORTED_UNSCHEDULABLE]:
            message = "Failed to schedule pod, " + "; ".join(entry.reasons)
            await self.cluster.record_event(pod_event(entry.pod, "FailedScheduling", message, warning=True))
        pools = {pool.name: pool for pool in manifests.nodepools}
        claims = []
        for claim in results.nodeclaims:
            if not claim.launch_candidates:
                continue
            pool = pools.get(claim.nodepool)
            decision = planned(claim, pool, f"{claim.nodepool}-{self.names()}", request.max_launch_candidates)
            nodeclass = pool.spec.template.spec.node_class_ref.name if pool else ""
            await self.cluster.create_nodeclaim(nodeclaim_object(decision, nodeclass, claim.requirements))
            for pod in claim.pods:
                message = f"Pod should schedule on: nodeclaim/{decision.name}"
                await self.cluster.record_event(pod_event(pod, "Nominated", message))
            claims.append(decision)
        return PlanResult(
            pods=len(snapshot.pending),
            nodeclaims=claims,
            scheduled_on_existing=sum(len(placement.pods) for placement in results.existing),
            unschedulable={
                entry.pod: entry.reasons for entry in results.unschedulable[:MAX_REPORTED_UNSCHEDULABLE]
            },
            unschedulable_count=len(results.unschedulable),
        )

    def _provider(self, unavailable: frozenset[tuple[str, str, str]]) -> InstanceTypeProvider:
        # Building instance types from the catalog takes a tenth of a second; plans mostly repeat the same
        # unavailable offerings (usually none), so keep the last few.
        provider = self._providers.get(unavailable)
        if provider is None:
            if len(self._providers) >= 8:
                self._providers.clear()
            provider = self._providers[unavailable] = azure_provider(self.catalog, unavailable)
        return provider

    @staticmethod
    def _solve(snapshot: SchedulingSnapshot) -> SchedulingResults:
        scheduler = Scheduler(
            snapshot.nodepools, snapshot.instance_types, snapshot.nodes, snapshot.daemonsets
        )
        return scheduler.solve(snapshot.pending)
