"""The disruption workflow's activities: plan a pass, taint and untaint candidates, launch replacements and
follow them, and record Karpenter's disruption events.

The plan runs `core.disruption.plan_disruption` on a fresh snapshot; only its decisions reach the history, as
a `DisruptionPassRecord`. Replacements are launched the way provisioning launches NodeClaims (the same
NodeClaim objects, lifecycle annotation and lifecycle workflows), named after the command so that a retried
launch finds what an earlier attempt created.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.catalog_source import CatalogSource
from activities.heartbeat import heartbeating
from activities.kube import DISRUPTED, clear_nodeclaim_condition, kube_event, mark_nodeclaim
from activities.metrics import Metrics, default_metrics
from activities.nodeoverlay_status import write_nodeoverlay_statuses
from activities.planning import (
    LifecycleStarter,
    concurrently,
    drift_hashes,
    lifecycle_nodeclaim,
    nodeclaim_suffix,
    planned,
)
from core import labels
from core.api.kube import Pod, pod_key
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaimConditionType
from core.api.nodepool import NodePool
from core.cluster import ClusterAPI
from core.disruption import Command, DisruptionOptions, DisruptionPlan, Method, plan_disruption
from core.disruption.bound import PlanCost
from core.disruption.budgets import BudgetStatus
from core.disruption.conditions import ConditionChange, disruption_conditions
from core.disruption.options import RepackOptions
from core.disruption.repair import RefusedRepair, Repair, aks_repair_policies
from core.disruption.steering import UNSCHEDULABLE_TAINT, steer_from
from core.errors import NotFoundError, PDBViolationError
from core.features import MinValuesPolicy
from core.instancetypes.catalog import AzureCatalog
from core.instancetypes.types import InstanceType
from core.messages import (
    ActivityName,
    DisruptedCandidate,
    DisruptionActivity,
    DisruptionCommand,
    DisruptionEvent,
    DisruptionMode,
    DisruptionPassRecord,
    DisruptionPlanInput,
    KeptNode,
    KeptReason,
    LaunchReplacementsInput,
    LifecycleInput,
    LifecycleSettings,
    PlanCostRecord,
    PlannedReplacement,
    RepackRecord,
    RepackSettings,
    RepairRecord,
    ReplacementProgress,
    SteeredPod,
    SteerInput,
    SteerStep,
    TaintCandidates,
)
from core.resources import parse_resources
from core.scheduling.inputs import SchedulingOptions
from core.scheduling.instancetypeset import InstanceTypeSet, ResourceAxes
from core.scheduling.requirements import Requirements
from core.scheduling.results import Launch, NewNodeClaim, launch_order
from core.scheduling.snapshot import InstanceTypeProvider, azure_provider, build_snapshot

CONSOLIDATION_METHODS = frozenset(
    {Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION, Method.REPACK}
)
"""What manual consolidation runs (`nodewright consolidate`): Karpenter's consolidation, then the repack."""


def repack_options(settings: RepackSettings | None, hint: list[str] | None = None) -> RepackOptions | None:
    """The planner's repack options from the workflow's settings, searching against the process's clock."""
    if settings is None:
        return None
    return RepackOptions.from_settings(settings, time.monotonic, frozenset(hint or ()))


def repack_record(command: Command) -> RepackRecord | None:
    """A repack command's explanation as the history records it."""
    repacked = command.repacked
    if repacked is None:
        return None
    new = {replacement.name for replacement in command.replacements}
    return RepackRecord(
        retired=list(repacked.retired),
        launched=list(repacked.launched),
        receiving=list(repacked.receiving),
        moves=[f"{move.pod}: {move.source} -> {move.destination}" for move in command.pods_moved],
        message=repacked.message,
        staying={
            move.pod: move.destination
            for move in command.pods_moved
            if move.destination is not None and move.destination not in new
        },
    )


STEER_POLL_SECONDS = 0.5
"""How often a step of the steered drain looks again for the replacement of the pod it evicted."""
HOLD_SECONDS = 600
"""How long a step of the steered drain keeps the command's new nodes from other disruption (each step renews it;
a drain that stopped for good lets them go by then)."""
RELEASE_SECONDS = 5.0
"""How long a step waits for an uncordoned node to lose the cordon's taint before it evicts anyway."""


def controller_uid(pod: Pod) -> str:
    """The uid of the pod's controller ("" when it has none)."""
    return next((owner.uid for owner in pod.metadata.owner_references if owner.controller), "")


def replacement_of(manifests: Manifests, awaited: SteeredPod) -> Pod | None:
    """The pod its owner made in place of the awaited one (bound or not), if it made one yet."""
    for pod in manifests.pods:
        if (
            pod.metadata.deletion_timestamp is None
            and controller_uid(pod) == awaited.owner
            and pod.metadata.uid not in awaited.known
        ):
            return pod
    return None


@dataclass(frozen=True, slots=True)
class Awaited:
    """Where the pod a step of the steered drain awaits stands: landed, still to wait for (why), or past help."""

    landed: SteeredPod | None = None
    waiting: str = ""
    problem: str = ""


def awaiting(manifests: Manifests, awaited: SteeredPod | None) -> Awaited:
    """Whether the replacement of the pod evicted last is scheduled yet (nothing to wait for without one)."""
    if awaited is None or not awaited.owner:
        return Awaited()
    replacement = replacement_of(manifests, awaited)
    if replacement is None:
        return Awaited(waiting=f"waiting for the replacement of {awaited.pod} to be created")
    if replacement.spec.node_name:
        return Awaited(landed=awaited.model_copy(update={"landed": replacement.spec.node_name}))
    if unschedulable(replacement):
        return Awaited(problem=f"pod {pod_key(replacement)} (in place of {awaited.pod}) found no node")
    return Awaited(waiting=f"waiting for {pod_key(replacement)} (in place of {awaited.pod}) to be scheduled")


def unschedulable(pod: Pod) -> bool:
    """Whether kube-scheduler found no node for the pod (its PodScheduled condition says so)."""
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions
    )


def cost_record(cost: PlanCost | None) -> PlanCostRecord | None:
    if cost is None:
        return None
    return PlanCostRecord(
        now_micros=cost.now_micros,
        after_micros=cost.after_micros,
        bound_micros=cost.bound_micros,
        exact=cost.exact,
    )


def command_message(command: Command) -> DisruptionCommand:
    """A planned command as the history records it."""
    return DisruptionCommand(
        method=command.method.value,
        reason=command.reason,
        decision=command.decision.value,
        candidates=[
            DisruptedCandidate(
                node=c.node,
                nodeclaim=c.nodeclaim,
                nodepool=c.nodepool,
                instance_type=c.instance_type,
                zone=c.zone,
                capacity_type=c.capacity_type,
                price_micros=c.price_micros,
                pods=c.pods,
                detail=c.detail,
            )
            for c in command.candidates
        ],
        replacements=[
            PlannedReplacement(
                nodepool=r.nodepool,
                instance_type=r.instance_type,
                capacity_type=r.capacity_type,
                price_micros=r.price_micros,
                instance_type_options=list(r.instance_type_options),
                capacity_types=list(r.capacity_types),
                requirements=list(r.requirements),
                labels=r.labels,
                taints=list(r.taints),
                pods=list(r.pods),
                requests=r.requests,
                nodeclaim_labels=r.nodeclaim_labels,
            )
            for r in command.replacements
        ],
        savings_micros=command.savings_micros,
        pods_moved=len(command.pods_moved),
        message=command.log_line(),
        repack=repack_record(command),
    )


def budget_line(status: BudgetStatus) -> str:
    """One NodePool and reason of a plan's budgets, e.g. "default/Underutilized: 0 of 2 nodes allowed (1
    disrupting)"."""
    limit = status.limit
    allowed = limit.allowed(status.disrupting_before)
    text = f"{limit.nodepool}/{limit.reason.value}: "
    text += "no limit" if allowed is None else f"{allowed} of {limit.total} nodes allowed"
    text += f" ({status.disrupting_before} disrupting"
    if status.taken:
        text += f", {status.taken} taken by this plan"
    return text + ")"


def pass_record(plan: DisruptionPlan, now: datetime, previous_fingerprint: str = "") -> DisruptionPassRecord:
    """The history's account of a plan; when it says what the previous recorded pass said, only that."""
    record = DisruptionPassRecord(
        at=now,
        commands=[command_message(command) for command in plan.commands],
        kept=[
            KeptNode(
                node=blocked.node,
                nodeclaim=blocked.nodeclaim,
                nodepool=blocked.nodepool,
                reasons=[
                    KeptReason(
                        code=reason.code.value,
                        message=reason.message,
                        method=reason.method.value if reason.method else None,
                    )
                    for reason in blocked.reasons
                ],
            )
            for blocked in plan.blocked
        ],
        budgets=[budget_line(status) for status in plan.budgets if status.limit.limit is not None],
        notes=list(plan.notes),
        savings_micros=plan.savings_micros,
        cost=cost_record(plan.cost),
    )
    digest = hashlib.sha256()
    for part in (record.commands, record.kept, record.budgets, record.notes):
        for item in part:
            digest.update(item.model_dump_json().encode() if not isinstance(item, str) else item.encode())
        digest.update(b"\0")
    record.fingerprint = digest.hexdigest()[:16]
    # Repairs are actions, not a report: every pass carries them, unchanged or not.
    record.repairs = [repair_record(repair) for repair in plan.repairs.repairs] + [
        repair_record(refused, refused=True) for refused in plan.repairs.refused
    ]
    if previous_fingerprint and record.fingerprint == previous_fingerprint:
        return DisruptionPassRecord(
            at=now,
            fingerprint=record.fingerprint,
            unchanged=True,
            savings_micros=record.savings_micros,
            repairs=record.repairs,
            cost=record.cost,
        )
    return record


def repair_record(repair: Repair | RefusedRepair, refused: bool = False) -> RepairRecord:
    return RepairRecord(
        node=repair.node,
        nodeclaim=repair.nodeclaim,
        nodepool=repair.nodepool,
        condition=repair.condition,
        message=repair.message,
        refused=refused,
    )


def replacement_launches(
    types: list[InstanceType], replacement: PlannedReplacement, limit: int
) -> list[Launch]:
    """The offerings a replacement may launch with, in the provider's order, from its instance-type options
    and requirements (capacity type and zone as the plan narrowed them)."""
    by_name = {instance_type.name: instance_type for instance_type in types}
    options = [by_name[name] for name in replacement.instance_type_options if name in by_name]
    if not options:
        return []
    catalog = InstanceTypeSet(options, ResourceAxes(()))
    requirements = Requirements.from_dicts(replacement.requirements)
    return launch_order(catalog, range(len(options)), requirements, limit)


def replacement_claim(
    replacement: PlannedReplacement, pool: NodePool, launches: list[Launch]
) -> NewNodeClaim:
    """A replacement as the scheduler would have made it, so it is planned like any other NodeClaim."""
    first = launches[0]
    return NewNodeClaim(
        nodepool=replacement.nodepool,
        instance_type=first.instance_type,
        zone=first.offering.zone,
        capacity_type=first.offering.capacity_type,
        price_micros=first.offering.price_micros,
        instance_type_options=list(replacement.instance_type_options),
        pods=list(replacement.pods),
        labels={},
        taints=list(replacement.taints),
        startup_taints=list(pool.spec.template.spec.startup_taints),
        requirements=list(replacement.requirements),
        requests=parse_resources(replacement.requests),
        launch_candidates=launches,
        nodeclaim_labels=dict(replacement.nodeclaim_labels),
    )


class DisruptionActivities:
    """Plans disruption passes on a fresh snapshot and carries out the workflow's steps in the cluster."""

    def __init__(
        self,
        cluster: ClusterAPI,
        catalog: AzureCatalog | CatalogSource,
        start_lifecycle: LifecycleStarter,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.start_lifecycle = start_lifecycle
        self.catalogs = CatalogSource.of(catalog)
        self.metrics = metrics or default_metrics()
        self.instance_types: Callable[[], InstanceTypeProvider] = self.catalogs.derived(azure_provider)
        """Instance types from the current catalog (a refreshed one takes effect at the next call)."""

    @activity.defn(name=ActivityName.PLAN_DISRUPTION)
    async def plan_disruption(self, request: DisruptionPlanInput) -> DisruptionPassRecord:
        """One pass of the planner over the cluster as it is now."""
        repair = request.repair_not_ready_seconds
        options = DisruptionOptions(
            spot_to_spot_consolidation=request.spot_to_spot_consolidation,
            methods=CONSOLIDATION_METHODS if request.mode is DisruptionMode.MANUAL else frozenset(Method),
            nodepools=frozenset(request.nodepools) if request.nodepools else None,
            scheduling=SchedulingOptions(
                min_values_best_effort=request.min_values_policy is MinValuesPolicy.BEST_EFFORT
            ),
            repair=None if repair is None else aks_repair_policies(timedelta(seconds=repair)),
            repack=repack_options(request.repack, request.repack_candidates),
        )
        automatic = request.mode is DisruptionMode.AUTOMATIC and not request.nodepools
        async with heartbeating():
            snapshot = await self.cluster.snapshot()
            now = datetime.now(UTC)
            plan = await asyncio.to_thread(plan_disruption, snapshot, self.instance_types(), options, now)
            if automatic:
                await self._mark_nodeclaims(disruption_conditions(snapshot, options.drift, now))
            if snapshot.nodeoverlays:
                await write_nodeoverlay_statuses(self.cluster, snapshot.nodeoverlays, plan.overlays, now)
        if automatic:
            self.metrics.set_allowed_disruptions(plan.budgets)
            self.metrics.set_nodepool_costs(plan.costs)
            if plan.cost is not None:
                self.metrics.set_cluster_cost(plan.cost)
        record = pass_record(plan, now, request.previous_fingerprint)
        record.validating = request.validating
        return record

    async def _mark_nodeclaims(self, changes: list[ConditionChange]) -> None:
        """Write the Drifted and Consolidatable conditions that changed, as Karpenter's nodeclaim disruption
        controller does (a NodeClaim gone meanwhile is skipped)."""

        async def write(change: ConditionChange) -> None:
            if change.reason is None:
                await clear_nodeclaim_condition(self.cluster, change.nodeclaim, change.type)
            else:
                await mark_nodeclaim(
                    self.cluster, change.nodeclaim, change.type, "True", change.reason, change.message
                )

        await concurrently([write(change) for change in changes])

    @activity.defn(name=DisruptionActivity.TAINT_CANDIDATES)
    async def taint_candidates(self, request: TaintCandidates) -> list[str]:
        """Keep new pods off the candidates (`karpenter.sh/disrupted:NoSchedule`); the nodes still there.

        The first attempt to taint a node counts the decision being executed, as Karpenter counts a command
        when it starts one (a retried attempt finds the taints in place and does not count again)."""
        nodes = request.nodes
        before = [await self.cluster.get_node(node) for node in nodes]
        fresh = any(
            node is not None and not any(t.key == labels.DISRUPTED_TAINT for t in node.spec.taints)
            for node in before
        )
        patched = [await self.cluster.patch_node(node, add_taints=[DISRUPTED]) for node in nodes]
        if fresh and request.decision:
            self.metrics.disruption_decided(request.decision, request.reason, request.method, len(nodes))
        return [node for node, result in zip(nodes, patched, strict=True) if result is not None]

    @activity.defn(name=DisruptionActivity.UNTAINT_CANDIDATES)
    async def untaint_candidates(self, nodes: list[str]) -> None:
        """Give the candidates back after a rolled-back command."""
        for node in nodes:
            await self.cluster.patch_node(node, remove_taint_keys=[labels.DISRUPTED_TAINT])

    @activity.defn(name=DisruptionActivity.LAUNCH_REPLACEMENTS)
    async def launch_replacements(self, request: LaunchReplacementsInput) -> list[str]:
        """Create the command's replacement NodeClaims and start their lifecycles; their names, in order."""
        snapshot = await self.cluster.snapshot()
        pools = {pool.name: pool for pool in snapshot.nodepools}
        nodeclasses = {nodeclass.name: nodeclass for nodeclass in snapshot.nodeclasses}
        # With NodeOverlays, the prices the plan compared (`build_snapshot` applies them to every pool).
        overlaid = (
            build_snapshot(snapshot, self.instance_types()).instance_types if snapshot.nodeoverlays else {}
        )
        command = request.command
        made = []
        for index, replacement in enumerate(command.replacements):
            pool = pools.get(replacement.nodepool)
            if pool is None:
                raise ApplicationError(
                    f"NodePool {replacement.nodepool} of a replacement no longer exists",
                    type="NodePoolNotFound",
                    non_retryable=True,
                )
            types = overlaid.get(pool.name) or self.instance_types()(
                nodeclasses.get(pool.spec.template.spec.node_class_ref.name)
            )
            launches = replacement_launches(types, replacement, request.max_launch_candidates)
            if not launches:
                raise ApplicationError(
                    f"no offering of {', '.join(replacement.instance_type_options[:5])} is available "
                    f"for a replacement in NodePool {pool.name}",
                    type="NoCompatibleInstanceTypes",
                    non_retryable=True,
                )
            name = f"{pool.name}-{nodeclaim_suffix(request.key, 0, 0, index)}"
            decision = planned(
                replacement_claim(replacement, pool, launches), pool, name, request.max_launch_candidates
            )
            lifecycle = LifecycleInput(
                cluster=request.cluster,
                nodeclaim=decision,
                settings=request.lifecycle or LifecycleSettings(),
            )
            hashes = drift_hashes(pool, nodeclasses)
            made.append((lifecycle_nodeclaim(lifecycle, pool, replacement.requirements, hashes), lifecycle))
        await concurrently([self.cluster.create_nodeclaim(nodeclaim) for nodeclaim, _ in made])
        existing = {claim.name for claim in snapshot.nodeclaims}  # a retry finds its NodeClaims: not counted
        for nodeclaim, lifecycle in made:
            if nodeclaim.name not in existing:
                # Karpenter's replacements carry the disruption reason, lower-cased, as their creation reason.
                self.metrics.nodeclaim_created(command.reason.lower(), lifecycle.nodeclaim.nodepool, False)
        message = f"Launching NodeClaim: {command.reason}"
        await concurrently(
            [
                self.cluster.record_event(kube_event("NodeClaim", n.name, "DisruptionLaunching", message))
                for n, _ in made
            ]
        )
        await concurrently([self.start_lifecycle(lifecycle) for _, lifecycle in made])
        return [nodeclaim.name for nodeclaim, _ in made]

    @activity.defn(name=DisruptionActivity.REPLACEMENT_PROGRESS)
    async def replacement_progress(self, names: list[str]) -> ReplacementProgress:
        """Which replacements are initialized, which are gone (their lifecycle failed), which are coming."""
        progress = ReplacementProgress()
        for name in names:
            claim = await self.cluster.get_nodeclaim(name)
            if claim is None or claim.metadata.deletion_timestamp is not None:
                progress.failed.append(name)
            elif claim.is_true(NodeClaimConditionType.INITIALIZED):
                progress.initialized.append(name)
            else:
                progress.waiting.append(name)
        return progress

    @activity.defn(name=DisruptionActivity.STEER_DRAIN)
    async def steer_drain(self, request: SteerInput) -> SteerStep:
        """One step of a steered drain (`core.disruption.steering`): wait until the pod evicted last has
        its replacement scheduled, then hold every new node of the command but the one the next pod should go to
        (cordoned) and evict that pod."""
        async with heartbeating():
            return await self._steer(request)

    async def _steer(self, request: SteerInput) -> SteerStep:
        deadline = time.monotonic() + request.settle_seconds
        awaited = request.awaiting
        while True:
            manifests = await self.cluster.snapshot()
            wait = awaiting(manifests, awaited)
            if wait.problem:
                return SteerStep(problem=wait.problem)
            if wait.landed is not None or not wait.waiting:
                return await self._evict_next(manifests, request, wait.landed)
            if time.monotonic() >= deadline:
                return SteerStep(waiting=wait.waiting)
            await asyncio.sleep(STEER_POLL_SECONDS)

    async def _evict_next(
        self, manifests: Manifests, request: SteerInput, landed: SteeredPod | None
    ) -> SteerStep:
        nodes_of = {c.name: c.status.node_name for c in manifests.nodeclaims if c.status.node_name}
        held = [nodes_of[name] for name in request.held if name in nodes_of]
        destinations = {pod: nodes_of.get(where, where) for pod, where in request.destinations.items()}
        steering = await asyncio.to_thread(
            steer_from, manifests, self.instance_types(), request.candidates, held, destinations
        )
        if not steering.steps:
            return SteerStep(landed=landed, done=steering.complete, problem=steering.problem or "")
        step = steering.steps[0]
        held_until = str(int(time.time() + HOLD_SECONDS))
        for node in held:
            await self.cluster.patch_node(
                node, labels={labels.REPACK_TARGET: held_until}, unschedulable=node != step.opened
            )
        if step.opened is not None:
            await self._until_released(step.opened)
        pods = {pod_key(pod): pod for pod in manifests.pods}
        pod = pods[step.pod]
        owner = controller_uid(pod)
        evicted = SteeredPod(
            pod=step.pod,
            owner=owner,
            known=[p.metadata.uid for p in manifests.pods if owner and controller_uid(p) == owner],
            expected=step.expected,
            planned=step.planned,
        )
        namespace, _, name = step.pod.partition("/")
        try:
            await self.cluster.evict_pod(namespace, name)
        except PDBViolationError as error:
            return SteerStep(landed=landed, waiting=f"the eviction of {step.pod} was refused: {error}")
        except NotFoundError:
            pass  # gone meanwhile: its owner replaces it all the same
        return SteerStep(landed=landed, evicted=evicted)

    async def _until_released(self, node: str) -> None:
        """Wait until the node lifecycle controller has taken the cordon's taint off the opened node: until then
        kube-scheduler's taint filter still refuses the pod (a few seconds at most, then the pod goes anyway)."""
        deadline = time.monotonic() + RELEASE_SECONDS
        while time.monotonic() < deadline:
            found = await self.cluster.get_node(node)
            if found is None or not any(t.key == UNSCHEDULABLE_TAINT for t in found.spec.taints):
                return
            await asyncio.sleep(STEER_POLL_SECONDS / 5)

    @activity.defn(name=DisruptionActivity.RELEASE_HELD)
    async def release_held(self, nodeclaims: list[str]) -> None:
        """Give the new nodes a repack's steered drain held back to everyone: uncordoned, and candidates again."""
        for name in nodeclaims:
            claim = await self.cluster.get_nodeclaim(name)
            if claim is not None and claim.status.node_name:
                await self.cluster.patch_node(
                    claim.status.node_name, labels={labels.REPACK_TARGET: None}, unschedulable=False
                )

    @activity.defn(name=DisruptionActivity.RECORD_EVENTS)
    async def record_events(self, events: list[DisruptionEvent]) -> None:
        await concurrently(
            [
                self.cluster.record_event(
                    kube_event(event.kind, event.name, event.reason, event.message, warning=event.warning)
                )
                for event in events
            ]
        )
