"""Kubernetes activities: NodeClaim objects and their conditions, Node registration, tainting and draining.

Each one is a few API calls and idempotent, so a retry after a lost response or a worker crash does no harm.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from temporalio import activity

from activities.metrics import DisruptedReason, Metrics, default_metrics, disrupted_reason
from core import labels
from core.api.kube import (
    Event,
    Node,
    ObjectReference,
    Pod,
    VolumeAttachment,
    is_daemonset_pod,
    is_node_ready,
    is_terminal,
    tolerates,
)
from core.api.meta import ObjectMeta, OwnerReference, Taint, TaintEffect
from core.api.nodeclaim import (
    KNOWN_EPHEMERAL_TAINTS_EXIST,
    NODE_NOT_FOUND,
    NODE_NOT_READY,
    NODECLAIM_CONDITIONS,
    NodeClaim,
    NodeClaimConditionType,
)
from core.api.nodepool import NodePool
from core.cluster import ClusterAPI
from core.cron import as_utc
from core.disruption.repair import aks_repair_policies
from core.errors import NotFoundError, PDBViolationError
from core.messages import (
    ActivityName,
    ConditionUpdate,
    DrainInput,
    DrainResult,
    InitializeInput,
    NodeState,
    PlannedNodeClaim,
    TerminationStart,
    VolumeDetachmentInput,
    VolumeDetachmentResult,
)
from core.resources import parse_resources
from core.volumes import DISRUPTED, blocking_attachments, claim_names, listed
from core.volumes import is_drainable as volume_drainable

EXCLUDE_FROM_LOAD_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")


def nodeclaim_object(
    claim: PlannedNodeClaim,
    nodeclass: str,
    requirements: list[dict[str, object]],
    nodepool_uid: str = "",
) -> NodeClaim:
    """The NodeClaim object for a planned NodeClaim, held by the termination finalizer and, given its NodePool's
    UID, owned by the NodePool. Without the UID there is no owner reference: kube-controller-manager's garbage
    collector deletes an object whose owner reference names a UID that does not exist."""
    owners = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": claim.nodepool,
            "uid": nodepool_uid,
            "blockOwnerDeletion": True,
        }
    ]
    return NodeClaim.parse(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": claim.name,
                "labels": claim.labels,
                "finalizers": [labels.TERMINATION_FINALIZER],
                "ownerReferences": owners if nodepool_uid else [],
            },
            "spec": {
                "requirements": requirements,
                "resources": {"requests": claim.requests},
                "taints": [t.model_dump(mode="json", exclude_none=True) for t in claim.taints],
                "startupTaints": [t.model_dump(mode="json", exclude_none=True) for t in claim.startup_taints],
                "nodeClassRef": {
                    "group": "karpenter.azure.com",
                    "kind": "AKSNodeClass",
                    "name": nodeclass,
                },
            },
        }
    )


def termination_timestamp(moment: datetime) -> str:
    """A time as Karpenter writes the termination-timestamp annotation (RFC 3339, whole seconds, UTC)."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def draining_for(claim: NodeClaim, now: datetime) -> timedelta:
    """How long the NodeClaim has been draining (its Drained condition Unknown); forever once it is drained."""
    drained = claim.status.condition(NodeClaimConditionType.DRAINED)
    if drained is None or drained.status != "Unknown" or drained.last_transition_time is None:
        return timedelta.max
    return as_utc(now) - as_utc(drained.last_transition_time)


def kube_event(
    kind: str,
    name: str,
    reason: str,
    message: str,
    namespace: str | None = None,
    warning: bool = False,
    uid: str | None = None,
) -> Event:
    """A core/v1 Event on an object, from Karpenter. Without `uid` the writer looks the object's up."""
    now = datetime.now(UTC)
    return Event(
        metadata=ObjectMeta(name=f"{name}.{uuid.uuid4().hex[:16]}", namespace=namespace or "default"),
        involved_object=ObjectReference(kind=kind, name=name, namespace=namespace, uid=uid or None),
        reason=reason,
        message=message,
        type="Warning" if warning else "Normal",
        first_timestamp=now,
        last_timestamp=now,
    )


def pod_event(pod: str, reason: str, message: str, warning: bool = False, uid: str | None = None) -> Event:
    namespace, _, name = pod.partition("/")
    return kube_event("Pod", name, reason, message, namespace, warning, uid)


def drain_group(pod: Pod) -> int:
    """Karpenter's eviction order: non-critical pods, then non-critical DaemonSet pods, then critical pods,
    then critical DaemonSet pods; each group only once the previous one is gone."""
    critical = pod.spec.priority_class_name in CRITICAL_PRIORITY_CLASSES
    return (2 if critical else 0) + (1 if is_daemonset_pod(pod) else 0)


def is_drainable(pod: Pod) -> bool:
    """Karpenter drains every pod except finished ones and those that tolerate the disrupted taint (they
    chose to stay, like DaemonSet pods that tolerate everything, and go with the node)."""
    return not is_terminal(pod) and not tolerates(pod.spec.tolerations or [], DISRUPTED)


def _key(pod: Pod) -> str:
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"


def set_condition(
    claim: NodeClaim, condition_type: str, status: str, reason: str = "", message: str = ""
) -> None:
    """Set one condition on a NodeClaim read from the API server, Karpenter's way (`NODECLAIM_CONDITIONS`:
    Ready recomputed, the lifecycle's conditions always present, the transition time kept while the status
    stays)."""
    meta = claim.metadata
    NODECLAIM_CONDITIONS.set(
        claim.status,
        condition_type,
        status,
        reason,
        message,
        meta.creation_timestamp,
        meta.generation,
        datetime.now(UTC),
        deleting=meta.deletion_timestamp is not None,
    )


async def mark_nodeclaim(
    cluster: ClusterAPI,
    name: str,
    condition_type: str,
    status: str,
    reason: str = "",
    message: str = "",
    unless_present: bool = False,
    launched_only: bool = False,
) -> NodeClaim | None:
    """Set one condition (nothing is written when it is already so); with `unless_present`, only when the
    NodeClaim has none of the type yet; with `launched_only`, only on a NodeClaim that has a providerID.
    None when the NodeClaim is gone."""

    def change(claim: NodeClaim) -> None:
        if unless_present and claim.status.condition(condition_type) is not None:
            return
        if launched_only and not claim.status.provider_id:
            return
        set_condition(claim, condition_type, status, reason, message)

    return await cluster.change_nodeclaim_status(name, change)


async def clear_nodeclaim_condition(cluster: ClusterAPI, name: str, condition_type: str) -> NodeClaim | None:
    """Remove a condition that no longer holds (Drifted, Consolidatable), as Karpenter clears them."""

    def change(claim: NodeClaim) -> None:
        NODECLAIM_CONDITIONS.clear(claim.status, condition_type)

    return await cluster.change_nodeclaim_status(name, change)


async def apply_condition(
    cluster: ClusterAPI, update: ConditionUpdate, unless: Callable[[NodeClaim], bool] | None = None
) -> bool:
    """Set one NodeClaim condition (and any status fields given), see `set_condition`; False when it is gone.
    `unless` leaves a NodeClaim for which it holds as it is (checked on the version the write replaces)."""

    nodepool = ""

    def change(claim: NodeClaim) -> None:
        nonlocal nodepool
        nodepool = claim.labels.get(labels.NODEPOOL, "")
        if unless is not None and unless(claim):
            return
        status = claim.status
        set_condition(claim, update.type, update.status, update.reason, update.message)
        for more in update.also:
            set_condition(claim, more.type, more.status, more.reason, more.message)
        if update.provider_id is not None:
            status.provider_id = update.provider_id
        if update.node_name is not None:
            status.node_name = update.node_name
        if update.capacity is not None:
            status.capacity = dict(update.capacity)
        if update.allocatable is not None:
            status.allocatable = dict(update.allocatable)
        if update.image_id is not None:
            status.image_id = update.image_id

    if await cluster.change_nodeclaim_status(update.name, change) is None:
        return False
    if update.labels:
        await cluster.patch_nodeclaim_metadata(update.name, labels=update.labels)
    if update.event_reason:
        warning = update.event_type == "Warning"
        message = update.event_message or update.message
        event = kube_event("NodeClaim", update.name, update.event_reason, message, warning=warning)
        await cluster.record_event(event)
        if update.nodepool_event and nodepool:
            message = f"NodeClaim {update.name} event: {message}"
            await cluster.record_event(
                kube_event("NodePool", nodepool, update.event_reason, message, warning=warning)
            )
    return True


def _taint_text(taint: Taint) -> str:
    """A taint as Karpenter's messages write it: `key=value:Effect`, or `key:Effect` without a value."""
    effect = taint.effect.value if isinstance(taint.effect, TaintEffect) else str(taint.effect)
    return f"{taint.key}={taint.value}:{effect}" if taint.value else f"{taint.key}:{effect}"


async def node_state(cluster: ClusterAPI, request: InitializeInput) -> NodeState:
    """What initialization waits for: Ready, startup taints gone, requested extended resources reported; the
    first of them missing as the reason and message of Karpenter's `Initialized=Unknown`. A look takes the Node
    as this client saw it without a request when that shows it initializable (registration's patch answer for the
    first look after it, else the worker's informer copy; no GET), as Karpenter's lifecycle reads its cache;
    otherwise it reads the Node, which may have moved on since (a look that finds it waiting costs the lifecycle
    a wait, a signal and a second look)."""
    seen = cluster.node_seen(request.node)
    if seen is not None:
        state = _node_state(seen, request)
        if not state.deleting and not state.waiting_reason:
            return state
    node = await cluster.get_node(request.node)
    if node is None:
        return NodeState(
            name=request.node,
            exists=False,
            waiting_reason=NODE_NOT_FOUND,
            waiting_message="Node not registered with cluster",
        )
    return _node_state(node, request)


def _node_state(node: Node, request: InitializeInput) -> NodeState:
    ready = is_node_ready(node)
    taints = {taint.key: taint for taint in node.spec.taints}
    allocatable = parse_resources(node.status.allocatable)
    state = NodeState(
        name=request.node,
        ready=ready,
        startup_taints_remaining=[key for key in request.startup_taints if key in taints],
        ephemeral_taints_remaining=[key for key in labels.KNOWN_EPHEMERAL_TAINTS if key in taints],
        missing_resources=[name for name in request.requested_resources if allocatable.get(name, 0) <= 0],
        deleting=node.metadata.deletion_timestamp is not None,
    )
    if not ready:
        state.waiting_reason, state.waiting_message = NODE_NOT_READY, "Node status is NotReady"
    elif state.startup_taints_remaining:
        taint = _taint_text(taints[state.startup_taints_remaining[0]])
        state.waiting_reason, state.waiting_message = (
            "StartupTaintsExist",
            f'StartupTaint "{taint}" still exists',
        )
    elif state.ephemeral_taints_remaining:
        taint = _taint_text(taints[state.ephemeral_taints_remaining[0]])
        state.waiting_reason = KNOWN_EPHEMERAL_TAINTS_EXIST
        state.waiting_message = f'KnownEphemeralTaint "{taint}" still exists'
    elif state.missing_resources:
        state.waiting_reason = "ResourceNotRegistered"
        state.waiting_message = f'Resource "{state.missing_resources[0]}" was requested but not registered'
    return state


async def register_node(
    cluster: ClusterAPI, node: str, node_labels: dict[str, str], claim: NodeClaim | None = None
) -> bool:
    """Karpenter's registration: the Node gets the NodeClaim's labels, the termination finalizer, the registered
    label and an owner reference to its NodeClaim (when given: blocking the owner's deletion, as Karpenter's), and
    loses the unregistered taint. False when the Node is gone."""
    owner = (
        OwnerReference(
            api_version=claim.api_version,
            kind=claim.kind,
            name=claim.name,
            uid=claim.metadata.uid,
            block_owner_deletion=True,
        )
        if claim is not None and claim.metadata.uid
        else None
    )
    patched = await cluster.patch_node(
        node,
        labels={**node_labels, labels.REGISTERED: "true"},
        remove_taint_keys=[labels.UNREGISTERED_TAINT],
        add_finalizers=[labels.TERMINATION_FINALIZER],
        add_owner=owner,
    )
    return patched is not None


def has_expired(claim: NodeClaim, pool: NodePool | None, now: datetime) -> bool:
    """Whether the NodeClaim outlived its NodePool's expireAfter without a disruption command choosing it:
    its lifecycle's own timer, not a command, ended it."""
    expire = pool.spec.template.spec.expire_after_duration if pool is not None else None
    created = claim.metadata.creation_timestamp
    return (
        expire is not None
        and created is not None
        and claim.status.condition("DisruptionReason") is None
        and claim.is_true(NodeClaimConditionType.INITIALIZED)
        and created + expire <= now
    )


class KubeActivities:
    def __init__(self, cluster: ClusterAPI, metrics: Metrics | None = None) -> None:
        self.cluster = cluster
        self.metrics = metrics or default_metrics()

    @activity.defn(name=ActivityName.UPDATE_NODECLAIM)
    async def update_nodeclaim(self, update: ConditionUpdate) -> bool:
        """Set one condition (and any status fields given); False when the NodeClaim is gone.

        A condition that records a disruption counts it, once: only when this call changed the condition."""
        reason = disrupted_reason(update)
        before = await self.cluster.get_nodeclaim(update.name) if reason else None
        applied = await apply_condition(self.cluster, update)
        previous = before.status.condition(update.type) if before is not None else None
        if reason and before is not None and (previous is None or previous.status != update.status):
            pool = await self.cluster.get_nodepool(before.labels.get(labels.NODEPOOL, ""))
            self.metrics.nodeclaim_disrupted(reason, before, pool)
            if reason == DisruptedReason.UNHEALTHY:
                await self._count_unhealthy(before)
        return applied

    async def _count_unhealthy(self, claim: NodeClaim) -> None:
        """`karpenter_nodeclaims_unhealthy_disrupted_total`, by the node condition a repair policy matched."""
        node = await self.cluster.get_node(claim.status.node_name) if claim.status.node_name else None
        conditions = node.status.conditions if node is not None else []
        # As Karpenter picks it: of the conditions a policy matches, the one whose toleration ends first.
        due = [
            ((c.last_transition_time or datetime.min.replace(tzinfo=UTC)) + policy.toleration, c.type)
            for c in conditions
            for policy in aks_repair_policies()
            if policy.matches(c)
        ]
        self.metrics.nodeclaim_unhealthy_disrupted(min(due)[1] if due else "", node, claim)

    @activity.defn(name=ActivityName.TAINT_FOR_TERMINATION)
    async def taint_for_termination(self, node: str) -> bool:
        """Keep new pods off the node; False when the node is already gone."""
        patched = await self.cluster.patch_node(
            node, labels={EXCLUDE_FROM_LOAD_BALANCERS: "karpenter"}, add_taints=[DISRUPTED]
        )
        return patched is not None

    @activity.defn(name=ActivityName.BEGIN_TERMINATION)
    async def begin_termination(self, request: TerminationStart) -> bool:
        """Karpenter's start of termination: the NodeClaim is deleted (its finalizer holds it, so the cluster sees
        it leaving and plans its pods elsewhere) and the Node tainted. False when the Node is already gone."""
        with contextlib.suppress(NotFoundError):
            await self.cluster.delete_nodeclaim(request.nodeclaim)
        await self._annotate_termination_time(request)
        return await self.taint_for_termination(request.node)

    async def _annotate_termination_time(self, request: TerminationStart) -> None:
        """Karpenter's `karpenter.sh/nodeclaim-termination-timestamp`: when the drain ends whatever blocks it
        (deletion + terminationGracePeriod, or the time node repair decided), written once, with a
        TerminationGracePeriodExpiring event on the NodeClaim and its Node."""
        claim = await self.cluster.get_nodeclaim(request.nodeclaim)
        if claim is None or claim.metadata.deletion_timestamp is None:
            return
        if labels.TERMINATION_TIMESTAMP in claim.metadata.annotations:
            return
        grace = claim.spec.termination_grace_period_duration
        if grace is None and request.termination_grace_period_seconds is not None:
            grace = timedelta(seconds=request.termination_grace_period_seconds)
        if request.termination_time is not None:
            deadline = termination_timestamp(request.termination_time)
        elif grace is not None:
            deadline = termination_timestamp(claim.metadata.deletion_timestamp + grace)
        else:
            return
        annotated = await self.cluster.patch_nodeclaim_metadata(
            request.nodeclaim, annotations={labels.TERMINATION_TIMESTAMP: deadline}
        )
        if annotated is None:
            return
        message = f"All pods will be deleted by {deadline}"
        for kind, name in (("NodeClaim", request.nodeclaim), ("Node", request.node)):
            event = kube_event(kind, name, "TerminationGracePeriodExpiring", message, warning=True)
            await self.cluster.record_event(event)

    @activity.defn(name=ActivityName.DRAIN_NODE)
    async def drain_node(self, request: DrainInput) -> DrainResult:
        """One pass of the drain: evict the first group still present, or delete everything when forced. The
        NodeClaim's Drained condition is Unknown (`Draining`) from the first pass, True once nothing is left."""
        claim = None
        if request.nodeclaim:
            draining = "Draining"
            claim = await mark_nodeclaim(
                self.cluster, request.nodeclaim, "Drained", "Unknown", draining, draining, unless_present=True
            )
        pods = [pod for pod in await self.cluster.list_pods_on_node(request.node) if is_drainable(pod)]
        pods = [pod for pod in pods if pod.metadata.deletion_timestamp is None or request.force]
        if not pods:
            if claim is None:
                return DrainResult(remaining=0)
            # Once drained (a retried attempt finds Drained=True), `draining_for` is forever: nothing to wait.
            minimum, drained_for = (
                timedelta(seconds=request.min_drain_seconds),
                draining_for(claim, datetime.now(UTC)),
            )
            settle = minimum - drained_for if drained_for < minimum else timedelta(0)
            if settle > timedelta(0):
                return DrainResult(remaining=0, settle_seconds=settle.total_seconds())
            await mark_nodeclaim(self.cluster, request.nodeclaim, "Drained", "True")
            return DrainResult(remaining=0)
        if request.force:
            for pod in pods:
                await self.cluster.delete_pod(pod.metadata.namespace or "default", pod.metadata.name, 0)
            return DrainResult(remaining=len(pods), evicted=[_key(pod) for pod in pods])
        first = min(drain_group(pod) for pod in pods)
        result = DrainResult(remaining=len(pods))
        for pod in pods:
            if drain_group(pod) != first:
                continue
            try:
                await self.cluster.evict_pod(pod.metadata.namespace or "default", pod.metadata.name)
                result.evicted.append(_key(pod))
            except PDBViolationError as error:
                result.blocked[_key(pod)] = str(error)
            except NotFoundError:
                result.evicted.append(_key(pod))
        if result.blocked:
            message = f"Failed to drain node, {len(result.blocked)} pods are waiting to be evicted"
            await self.cluster.record_event(
                kube_event("Node", request.node, "FailedDraining", message, warning=True)
            )
        return result

    @activity.defn(name=ActivityName.AWAIT_VOLUME_DETACHMENT)
    async def await_volume_detachment(self, request: VolumeDetachmentInput) -> VolumeDetachmentResult:
        """Karpenter's wait for volumes to detach from a drained node, recorded as the NodeClaim's
        VolumesDetached: True once none is left, Unknown (`AwaitingVolumeDetachment`, with an event naming
        them) while some are, False (`TerminationGracePeriodElapsed`) when the deadline ends the wait."""
        attachments = await self.cluster.list_volume_attachments(request.node)
        pending = [attachment.metadata.name for attachment in await self._blocking(attachments, request.node)]
        if not pending:
            await mark_nodeclaim(self.cluster, request.nodeclaim, "VolumesDetached", "True")
            return VolumeDetachmentResult()
        if request.grace_elapsed:
            elapsed = "TerminationGracePeriodElapsed"
            await mark_nodeclaim(
                self.cluster, request.nodeclaim, "VolumesDetached", "False", elapsed, elapsed
            )
            return VolumeDetachmentResult(abandoned=pending)
        awaiting = "AwaitingVolumeDetachment"
        await mark_nodeclaim(
            self.cluster, request.nodeclaim, "VolumesDetached", "Unknown", awaiting, awaiting
        )
        if pending != request.announced:
            message = f"Awaiting deletion of bound volumeattachments ({listed(pending)})"
            await self.cluster.record_event(kube_event("Node", request.node, awaiting, message))
        return VolumeDetachmentResult(pending=pending)

    async def _blocking(self, attachments: list[VolumeAttachment], node: str) -> list[VolumeAttachment]:
        """The attachments to wait for: not those of volumes that pods staying on the node still use."""
        if not attachments:
            return []
        now = datetime.now(UTC)
        kept: set[str] = set()
        for pod in await self.cluster.list_pods_on_node(node):
            if volume_drainable(pod, now):
                continue
            namespace = pod.metadata.namespace or "default"
            for name in claim_names(pod):
                claim = await self.cluster.get_persistent_volume_claim(namespace, name)
                if claim is not None and claim.spec.volume_name:
                    kept.add(claim.spec.volume_name)
        return blocking_attachments(attachments, kept)

    @activity.defn(name=ActivityName.DELETE_NODE)
    async def delete_node(self, node: str) -> None:
        # Counted when this call released the finalizer, so a retry after it does not count again.
        before = await self.cluster.get_node(node)
        await self.cluster.patch_node(node, remove_finalizers=[labels.TERMINATION_FINALIZER])
        if before is not None and labels.TERMINATION_FINALIZER in before.metadata.finalizers:
            self.metrics.node_terminated(before)
        try:
            await self.cluster.delete_node(node)
        except NotFoundError:
            return

    @activity.defn(name=ActivityName.DELETE_UNREGISTERED_NODE)
    async def delete_unregistered_node(self, provider_id: str) -> str | None:
        """Delete the Node with this providerID, if any: its instance is gone, and its NodeClaim ended before it
        registered (it joined while the NodeClaim was being deleted). Karpenter leaves such a Node to the cloud
        node lifecycle controller; here nothing else would remove it. Returns its name."""
        node = await self.cluster.find_node_by_provider_id(provider_id)
        if node is None:
            return None
        await self.delete_node(node.metadata.name)
        return node.metadata.name

    async def _delete_node_named_for(self, provider_id: str) -> None:
        """The Node of a NodeClaim deleted before its lifecycle registered it (it joined meanwhile) goes with it,
        as Karpenter deletes every Node with the NodeClaim's providerID before releasing its finalizer. Only the
        Node named after the instance is looked up (one GET, as nodes are named on Azure), not every Node."""
        guess = provider_id.rstrip("/").rpartition("/")[2].lower()
        node = await self.cluster.get_node(guess) if guess else None
        if node is not None and node.spec.provider_id == provider_id:
            await self.delete_node(guess)

    @activity.defn(name=ActivityName.DELETE_NODECLAIM)
    async def delete_nodeclaim(self, name: str) -> None:
        """Delete the NodeClaim and release its finalizer: the object goes away.

        Counted as terminated (and, when its expireAfter ended it, as disrupted) by the call that releases the
        finalizer; a retry finds the NodeClaim gone and counts nothing."""
        claim = await self.cluster.get_nodeclaim(name)
        if claim is not None and claim.status.provider_id:
            await self._delete_node_named_for(claim.status.provider_id)
        try:
            await self.cluster.delete_nodeclaim(name)
        except NotFoundError:
            return
        await self.cluster.patch_nodeclaim_metadata(name, remove_finalizers=[labels.TERMINATION_FINALIZER])
        if claim is None or labels.TERMINATION_FINALIZER not in claim.metadata.finalizers:
            return
        self.metrics.nodeclaim_terminated(claim)
        pool = await self.cluster.get_nodepool(claim.labels.get(labels.NODEPOOL, ""))
        if has_expired(claim, pool, datetime.now(UTC)):
            self.metrics.nodeclaim_disrupted(DisruptedReason.EXPIRED, claim, pool)
