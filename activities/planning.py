"""The planning activity: read the cluster, run the scheduler, return only the decisions.

The snapshot never leaves the activity; the workflow's history gets the NodeClaims to create, each with its
launch candidates, and a count of what could not be placed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

from temporalio import activity

from activities.capacity_buffer import write_provisioning_conditions
from activities.catalog_source import CatalogSource
from activities.heartbeat import AttemptFence, AttemptGivenUpError, heartbeating
from activities.kube import nodeclaim_object, pod_event
from activities.logs import karpenter_log
from activities.metrics import CreatedReason, Metrics, default_metrics
from activities.nodeoverlay_status import write_nodeoverlay_statuses
from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.hashes import nodeclaim_hash_annotations
from core.api.kube import Pod, pod_key
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.cluster import ClusterAPI
from core.events import FAILED_SCHEDULING, NOMINATED
from core.features import MinValuesPolicy
from core.instancetypes.catalog import AzureCatalog
from core.instancetypes.overlay import OVERLAY_ANNOTATIONS
from core.instancetypes.types import dollars
from core.messages import (
    MAX_RECORDED_PODS,
    ActivityName,
    LifecycleInput,
    LifecycleSettings,
    NodeClaimSummary,
    OfferingChoice,
    PlanInput,
    PlannedNodeClaim,
    PlanResult,
    UnavailableOffering,
)
from core.resources import format_resources
from core.scheduling.inputs import SchedulingOptions
from core.scheduling.nominations import NOMINATED_PODS_ANNOTATION, nominated_pods_value
from core.scheduling.pods import BoundPods
from core.scheduling.results import NewNodeClaim, SchedulingResults
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import (
    InstanceTypeProvider,
    SchedulingSnapshot,
    azure_provider,
    build_snapshot,
    left_out_summary,
)

MAX_REPORTED_UNSCHEDULABLE = 20
_ALPHABET = string.ascii_lowercase + string.digits

LifecycleStarter = Callable[[LifecycleInput], Awaitable[None]]
"""Starts (or finds, when it already runs) the lifecycle workflow of a NodeClaim; wired by the worker."""

logger = logging.getLogger(__name__)


PLAN_LABEL = "nodewright.io/plan"
"""On every NodeClaim a plan creates: which provisioner batch made it, so a retried plan can find it."""
LIFECYCLE_ANNOTATION = "nodewright.io/lifecycle"
"""The lifecycle input of a NodeClaim, so a retried plan can start a lifecycle an earlier attempt did not."""


def nodeclaim_suffix(run: str, batch: int, attempt: int, index: int) -> str:
    """Five characters, as generateName adds, derived from the plan that made the NodeClaim."""
    digest = hashlib.sha256(f"{run}/{batch}/{attempt}/{index}".encode()).digest()
    return "".join(_ALPHABET[byte % len(_ALPHABET)] for byte in digest[:5])


def plan_key(run: str, batch: int) -> str:
    return hashlib.sha256(f"{run}/{batch}".encode()).hexdigest()[:16]


async def resume_attempt(
    manifests: Manifests, batch: int, start_lifecycle: LifecycleStarter
) -> tuple[str, int, str]:
    """This activity attempt's workflow run, attempt number and plan key (of the run and `batch`). A retry first
    starts the lifecycles of the NodeClaims an earlier attempt created and died before starting."""
    info = activity.info() if activity.in_activity() else None
    run, attempt = ((info.workflow_run_id or ""), info.attempt) if info else ("local", 1)
    key = plan_key(run, batch)
    if attempt > 1:
        await concurrently(
            [
                start_lifecycle(LifecycleInput.model_validate_json(recorded))
                for existing in manifests.nodeclaims
                if existing.labels.get(PLAN_LABEL) == key
                and (recorded := existing.metadata.annotations.get(LIFECYCLE_ANNOTATION))
            ]
        )
    return run, attempt, key


def _seconds(pool: NodePool | None, which: str) -> float | None:
    if pool is None:
        return None
    spec = pool.spec.template.spec
    duration = spec.expire_after_duration if which == "expire" else spec.termination_grace_period_duration
    return duration.total_seconds() if duration is not None else None


def creation_reason(claim: NewNodeClaim) -> str:
    """Why the scheduler chose this NodeClaim's launch, in one line: how many types fit, for which requests,
    and the offering it is launched with first (the cheapest, in the provider's order)."""
    requests = ", ".join(f"{name} {amount}" for name, amount in format_resources(claim.requests).items())
    options = len(claim.instance_type_options)
    fitting = f"{options} instance type{'s' if options != 1 else ''}"
    pods = f"{len(claim.pods)} pod{'s' if len(claim.pods) != 1 else ''}"
    head = f"cheapest of {fitting} that fit {pods} ({requests}) in NodePool {claim.nodepool}"
    if not claim.launch_candidates:
        return f"{head}: no offering available"
    first = claim.launch_candidates[0]
    price = dollars(first.offering.price_micros)
    overlay = first.offering.price_overlay
    return (
        f"{head}: {first.instance_type} {first.offering.capacity_type} in {first.offering.zone} "
        f"at ${price:.4f}/h" + (f" (price adjusted by overlay {overlay})" if overlay else "")
    )


def planned(
    claim: NewNodeClaim,
    pool: NodePool | None,
    name: str,
    max_candidates: int,
    batch: int = 0,
    left_out: Mapping[str, str] | None = None,
) -> PlannedNodeClaim:
    """A simulated NodeClaim as its lifecycle needs it, with the pods it is for and why it was chosen (and,
    given its NodePool's `left_out`, which instance types were not considered because no image boots on them)."""
    # The scheduler resolved the NodeClaim's labels (`NewNodeClaim.nodeclaim_labels`); the NodePool's own are
    # the floor for a NodeClaim made elsewhere. The launch adds its instance type's labels under these.
    template_labels = dict(pool.spec.template.metadata.labels) if pool else {}
    template_labels[labels.NODEPOOL] = claim.nodepool
    template_labels.update(claim.nodeclaim_labels)
    return PlannedNodeClaim(
        name=name,
        nodepool=claim.nodepool,
        launch_candidates=[
            OfferingChoice(
                instance_type=launch.instance_type,
                zone=launch.offering.zone,
                capacity_type=launch.offering.capacity_type,
                price_micros=launch.offering.price_micros,
                price_overlay=launch.offering.price_overlay,
            )
            for launch in claim.launch_candidates[:max_candidates]
        ],
        labels=template_labels,
        taints=claim.taints,
        startup_taints=claim.startup_taints,
        requests=format_resources(claim.requests),
        instance_types=pretty_slice(claim.instance_type_options),
        pod_count=len(claim.pods),
        pods=claim.pods[:MAX_RECORDED_PODS],
        reason=creation_reason(claim) + (f"; {left_out_summary(left_out)}" if left_out else ""),
        batch=batch,
        expire_after_seconds=_seconds(pool, "expire"),
        termination_grace_period_seconds=_seconds(pool, "grace"),
        nodeclass=pool.spec.template.spec.node_class_ref.name if pool else "",
    )


def lifecycle_nodeclaim(
    lifecycle: LifecycleInput,
    pool: NodePool | None,
    requirements: list[dict[str, object]],
    hashes: Mapping[str, str] | None = None,
) -> NodeClaim:
    """The NodeClaim object of a planned lifecycle (from provisioning or a disruption's replacement), carrying
    its lifecycle input so that a retry can start the lifecycle an earlier attempt did not, and the static-drift
    hashes of its NodePool and AKSNodeClass as they are now (`drift_hashes`)."""
    nodeclass = pool.spec.template.spec.node_class_ref.name if pool else ""
    uid = pool.metadata.uid if pool else ""
    nodeclaim = nodeclaim_object(lifecycle.nodeclaim, nodeclass, requirements, uid)
    if pool is not None:  # as Karpenter copies it, so that the NodeClaim says how long its drain may take
        nodeclaim.spec.termination_grace_period = pool.spec.template.spec.termination_grace_period
    nodeclaim.metadata.annotations[LIFECYCLE_ANNOTATION] = lifecycle.model_dump_json()
    nodeclaim.metadata.annotations.update(hashes or {})
    return nodeclaim


def drift_hashes(pool: NodePool | None, nodeclasses: Mapping[str, AKSNodeClass]) -> dict[str, str]:
    """The hash annotations (`core.api.hashes`) a new NodeClaim of this NodePool is created with."""
    nodeclass = nodeclasses.get(pool.spec.template.spec.node_class_ref.name) if pool else None
    return nodeclaim_hash_annotations(pool, nodeclass)


async def create_nodeclaim(
    cluster: ClusterAPI, nodeclaim: NodeClaim, planned: PlannedNodeClaim, log: logging.Logger
) -> None:
    """Create a planned NodeClaim and log Karpenter's "created nodeclaim" line for it on `log`."""
    await cluster.create_nodeclaim(nodeclaim)
    karpenter_log(
        log,
        "created nodeclaim",
        NodePool=planned.nodepool,
        NodeClaim=planned.name,
        requests=planned.requests,
        **{"instance-types": planned.instance_types},
    )


CONCURRENT_CALLS = 32
"""Calls a plan keeps in flight at once (creations, events, lifecycle starts)."""


async def concurrently(calls: Sequence[Awaitable[object]], limit: int = CONCURRENT_CALLS) -> None:
    """Await the calls with at most `limit` in flight; every call ends before the first error is raised, so
    none is left running behind the caller's back."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[object]) -> None:
        async with semaphore:
            await call

    outcomes = await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def pretty_slice(items: Sequence[str], shown: int = 5) -> str:
    """The first items and how many more, as Karpenter's `pretty.Slice` writes a list in a log line."""
    others = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {others} other(s)" if others > 0 else "")


def provisionable_fields(pending: Sequence[Pod], results: SchedulingResults) -> dict[str, object] | None:
    """The fields of Karpenter's "found provisionable pod(s)" for a pass, None when it logs nothing: only a pass
    that computed new NodeClaims says it, naming the pods it scheduled as Karpenter's provisioner does, a
    CapacityBuffer's virtual pods among them (a buffer whose room fits the nodes there are says nothing)."""
    if not results.nodeclaims:
        return None
    keys = [pod_key(pod) for pod in pending]
    return {"Pods": pretty_slice(keys), "count": len(keys)}


def existing_targets(manifests: Manifests) -> Callable[[str], str]:
    """Where a pod placed on existing capacity should schedule, as Karpenter's Nominated event names it:
    `nodeclaim/<name>, node/<name>`, either part left out when there is none (a NodeClaim still launching has
    no Node; a Node that no NodeClaim manages has none). The scheduler names that capacity by its Node, or by
    its NodeClaim while no Node has registered."""
    claims = {claim.name: claim for claim in manifests.nodeclaims}
    claims.update({claim.status.node_name: claim for claim in manifests.nodeclaims if claim.status.node_name})
    nodes = {node.metadata.name for node in manifests.nodes}

    def target(name: str) -> str:
        claim = claims.get(name)
        node = name if name in nodes else (claim.status.node_name if claim is not None else None)
        parts = [f"nodeclaim/{claim.name}"] if claim is not None else []
        return ", ".join(parts + ([f"node/{node}"] if node else [])) or f"node/{name}"

    return target


class PlanningActivities:
    """Runs the scheduler on a snapshot of the cluster and carries out its decisions."""

    def __init__(
        self,
        cluster: ClusterAPI,
        catalog: AzureCatalog | CatalogSource,
        start_lifecycle: LifecycleStarter,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.catalogs = CatalogSource.of(catalog)
        """Read at every plan, so a refreshed catalog takes effect at the next one."""
        self.start_lifecycle = start_lifecycle
        self.metrics = metrics or default_metrics()
        self._providers: dict[tuple[int, frozenset[tuple[str, str, str]]], InstanceTypeProvider] = {}
        self._bound_pods = BoundPods()
        """The bound pods every plan simulates around, compiled once while the informer hands them over unchanged
        (a re-plan at 3,000 nodes compiled 6,000 of them)."""

    @activity.defn(name=ActivityName.PLAN_PROVISIONING)
    async def plan_provisioning(self, request: PlanInput) -> PlanResult:
        """Plan, then for each new NodeClaim: create it, nominate its pods, start its lifecycle."""
        async with heartbeating():
            return await self._plan(request)

    async def _plan(self, request: PlanInput) -> PlanResult:
        manifests = await self.cluster.snapshot()
        now = datetime.now(UTC)
        snapshot = await asyncio.to_thread(
            build_snapshot,
            manifests,
            self._unavailable_aware(request.unavailable, now),
            reschedule_deleting=True,
            now=now,
        )
        if manifests.nodeoverlays:
            await write_nodeoverlay_statuses(self.cluster, manifests.nodeoverlays, snapshot.overlays, now)
        # Nothing new to place (every pending pod waits for its in-flight NodeClaim): no simulation at all.
        results = SchedulingResults()
        if snapshot.pending:
            results = await asyncio.to_thread(self._solve, snapshot, request.min_values_policy)
        if (found := provisionable_fields(snapshot.pending, results)) is not None:
            karpenter_log(logger, "found provisionable pod(s)", **found)
        uids = {pod_key(pod): pod.metadata.uid for pod in snapshot.pending}
        # Virtual pods (CapacityBuffers) are scheduled like the others, but never nominated and never told.
        virtual = {pod for entry in snapshot.buffers for pod in entry.pods}
        if snapshot.buffers:
            await write_provisioning_conditions(self.cluster, snapshot.buffers, results, now)
        for entry in [e for e in results.unschedulable if e.pod not in virtual][:MAX_REPORTED_UNSCHEDULABLE]:
            karpenter_log(logger, "could not schedule pod", Pod=entry.pod, error="; ".join(entry.reasons))
            message = "Failed to schedule pod, " + "; ".join(entry.reasons)
            await self.cluster.record_event(
                pod_event(entry.pod, FAILED_SCHEDULING, message, warning=True, uid=uids.get(entry.pod))
            )
        pools = {pool.name: pool for pool in manifests.nodepools}
        nodeclasses = {nodeclass.name: nodeclass for nodeclass in manifests.nodeclasses}
        run, attempt, key = await resume_attempt(manifests, request.batch, self.start_lifecycle)
        decisions: list[tuple[NodeClaim, LifecycleInput, list[str]]] = []
        hashes: dict[str, dict[str, str]] = {}
        launched = [c for c in results.nodeclaims if c.launch_candidates]
        for index, claim in enumerate(launched):
            pool = pools.get(claim.nodepool)
            name = f"{claim.nodepool}-{nodeclaim_suffix(run, request.batch, attempt, index)}"
            decision = planned(
                claim,
                pool,
                name,
                request.max_launch_candidates,
                request.batch,
                snapshot.left_out.get(claim.nodepool),
            )
            lifecycle = LifecycleInput(
                cluster=request.cluster,
                nodeclaim=decision,
                settings=request.lifecycle or LifecycleSettings(),
                provisioner_workflow_id=request.provisioner_workflow_id or None,
            )
            if claim.nodepool not in hashes:  # once per NodePool, not per NodeClaim
                hashes[claim.nodepool] = drift_hashes(pool, nodeclasses)
            nodeclaim = lifecycle_nodeclaim(lifecycle, pool, claim.requirements, hashes[claim.nodepool])
            nodeclaim.metadata.labels[PLAN_LABEL] = key
            nodeclaim.metadata.annotations.update(
                {name: value for name, value in claim.annotations.items() if name in OVERLAY_ANNOTATIONS}
            )
            nodeclaim.metadata.annotations[NOMINATED_PODS_ANNOTATION] = nominated_pods_value(
                pod for pod in claim.pods if pod not in virtual
            )
            decisions.append((nodeclaim, lifecycle, claim.pods))
        before = {claim.name for claim in manifests.nodeclaims}  # count only what this call created

        # NodeClaims first (capacity the next plan counts on; created while no launch competes for the API
        # server), then the lifecycles, then the pods' Nominated events: each stage concurrently.
        summaries = [
            NodeClaimSummary(
                name=lifecycle.nodeclaim.name,
                nodepool=lifecycle.nodeclaim.nodepool,
                requests=lifecycle.nodeclaim.requests,
                instance_types=lifecycle.nodeclaim.instance_types,
                pod_count=lifecycle.nodeclaim.pod_count,
            )
            for _, lifecycle, _ in decisions
        ]

        if summaries:
            # As Karpenter's `Results.Record`, the count is of every pod the NodeClaims are for, a CapacityBuffer's
            # virtual pods included (Karpenter leaves them out of nominations only, as the plan does below).
            karpenter_log(
                logger,
                "computed new nodeclaim(s) to fit pod(s)",
                nodeclaims=len(summaries),
                pods=sum(summary.pod_count for summary in summaries),
            )

        # Logged here, not by the provisioner: thousands of lines in one workflow task outlast the SDK's 2 s
        # deadlock detection on a busy worker, and the task then fails and is retried forever.
        # Each creation first makes sure the server still runs this attempt: one it gave up on (a starved
        # worker's late heartbeats) would create NodeClaims for the pods its retry plans again.
        fence = AttemptFence()
        created: set[str] = set()

        async def create(nodeclaim: NodeClaim, lifecycle: LifecycleInput) -> None:
            await fence.check()
            await create_nodeclaim(self.cluster, nodeclaim, lifecycle.nodeclaim, logger)
            created.add(nodeclaim.name)

        try:
            await concurrently([create(nodeclaim, lifecycle) for nodeclaim, lifecycle, _ in decisions])
        except AttemptGivenUpError as given_up:
            # What this attempt did create gets its lifecycle; the retry plans the rest.
            await concurrently(
                [
                    self.start_lifecycle(lifecycle)
                    for nodeclaim, lifecycle, _ in decisions
                    if nodeclaim.name in created
                ]
            )
            logger.warning(
                "stopped creating NodeClaims after %d of %d: %s", len(created), len(decisions), given_up
            )
            raise
        for (nodeclaim, _, _), claim in zip(decisions, launched, strict=True):
            if nodeclaim.name not in before:
                relaxed = claim.annotations.get(labels.MIN_VALUES_RELAXED) == "true"
                self.metrics.nodeclaim_created(CreatedReason.PROVISIONED, claim.nodepool, relaxed)
        await concurrently([self.start_lifecycle(lifecycle) for _, lifecycle, _ in decisions])
        targets = [(f"nodeclaim/{nodeclaim.name}", pods) for nodeclaim, _, pods in decisions]
        existing = existing_targets(manifests)
        targets += [(existing(placement.node), placement.pods) for placement in results.existing]
        await concurrently(
            [
                self.cluster.record_event(
                    pod_event(pod, NOMINATED, f"Pod should schedule on: {target}", uid=uids.get(pod))
                )
                for target, pods in targets
                for pod in pods
                if pod not in virtual
            ]
        )
        return PlanResult(
            pods=len(snapshot.pending),
            nominated=len(snapshot.nominated),
            nodeclaims=summaries,
            scheduled_on_existing=sum(len(placement.pods) for placement in results.existing),
            unschedulable={
                entry.pod: entry.reasons for entry in results.unschedulable[:MAX_REPORTED_UNSCHEDULABLE]
            },
            unschedulable_count=len(results.unschedulable),
        )

    def _unavailable_aware(
        self, unavailable: Sequence[UnavailableOffering], now: datetime
    ) -> InstanceTypeProvider:
        """Instance types without the offerings ruled out for every NodeClass, and for a NodeClass the ones ruled
        out for it alone (a launch of its own failed)."""
        live = [u for u in unavailable if u.until > now]
        everywhere = frozenset((u.instance_type, u.zone, u.capacity_type) for u in live if not u.nodeclass)
        scoped: dict[str, set[tuple[str, str, str]]] = {}
        for u in live:
            if u.nodeclass:
                scoped.setdefault(u.nodeclass, set()).add((u.instance_type, u.zone, u.capacity_type))
        common = self._provider(everywhere)
        if not scoped:
            return common
        own = {name: self._provider(everywhere | offerings) for name, offerings in scoped.items()}
        return lambda nodeclass: own.get(nodeclass.metadata.name if nodeclass else "", common)(nodeclass)

    def _provider(self, unavailable: frozenset[tuple[str, str, str]]) -> InstanceTypeProvider:
        # Building instance types from the catalog takes a tenth of a second; plans mostly repeat the same
        # unavailable offerings (usually none), so keep the last few. Each set of unavailable offerings shares the
        # instance types it leaves alone with the catalog's own (`base`): a full copy is tens of MB (a long-running
        # worker's RSS rose about 60 MB with each set an eviction added).
        key = (self.catalogs.version, unavailable)
        provider = self._providers.get(key)
        if provider is None:
            base = self._provider(frozenset()) if unavailable else None
            if len(self._providers) >= 8:
                self._providers.clear()
                if base is not None:
                    self._providers[(self.catalogs.version, frozenset())] = base
            provider = self._providers[key] = azure_provider(self.catalogs.current, unavailable, base)
        return provider

    def _solve(self, snapshot: SchedulingSnapshot, policy: MinValuesPolicy) -> SchedulingResults:
        options = SchedulingOptions(min_values_best_effort=policy is MinValuesPolicy.BEST_EFFORT)
        scheduler = Scheduler(
            snapshot.nodepools,
            snapshot.instance_types,
            snapshot.nodes,
            snapshot.daemonsets,
            options,
            self._bound_pods,
        )
        return scheduler.solve(snapshot.pending)
