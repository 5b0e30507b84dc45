"""Kubernetes activities: NodeClaim objects and their conditions, Node registration, tainting and draining.

Each one is a few API calls and idempotent, so a retry after a lost response or a worker crash does no harm.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

from temporalio import activity

from activities.metrics import DisruptedReason, Metrics, default_metrics, disrupted_reason
from core import labels
from core.api.kube import Event, ObjectReference, Pod, is_daemonset_pod, is_node_ready, is_terminal, tolerates
from core.api.meta import ObjectMeta, Taint, TaintEffect
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import NodePool, StatusCondition
from core.cluster import ClusterAPI
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
)
from core.resources import parse_resources

DISRUPTED = Taint(key=labels.DISRUPTED_TAINT, effect=TaintEffect.NO_SCHEDULE)
EXCLUDE_FROM_LOAD_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
ROOT_CONDITION_PARTS = ("Launched", "Registered", "Initialized")
"""Karpenter's NodeClaim is Ready when all three are."""
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


def kube_event(
    kind: str, name: str, reason: str, message: str, namespace: str | None = None, warning: bool = False
) -> Event:
    """A core/v1 Event on an object, from Karpenter."""
    now = datetime.now(UTC)
    return Event(
        metadata=ObjectMeta(name=f"{name}.{uuid.uuid4().hex[:16]}", namespace=namespace or "default"),
        involved_object=ObjectReference(kind=kind, name=name, namespace=namespace),
        reason=reason,
        message=message,
        type="Warning" if warning else "Normal",
        first_timestamp=now,
        last_timestamp=now,
    )


def pod_event(pod: str, reason: str, message: str, warning: bool = False) -> Event:
    namespace, _, name = pod.partition("/")
    return kube_event("Pod", name, reason, message, namespace, warning)


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


async def apply_condition(cluster: ClusterAPI, update: ConditionUpdate) -> bool:
    """Set one NodeClaim condition (and any status fields given), keeping Ready in step; False when it is gone."""

    def change(claim: NodeClaim) -> None:
        status = claim.status
        now = datetime.now(UTC)
        previous = status.condition(update.type)
        changed = previous is None or previous.status != update.status
        condition = StatusCondition(
            type=update.type,
            status=update.status,
            reason=update.reason or update.type,
            message=update.message,
            last_transition_time=now if changed or previous is None else previous.last_transition_time,
        )
        status.conditions = [c for c in status.conditions if c.type != update.type] + [condition]
        ready = all(status.is_true(part) for part in ROOT_CONDITION_PARTS)
        if update.type in ROOT_CONDITION_PARTS and ready != status.is_true("Ready"):
            status.conditions = [c for c in status.conditions if c.type != "Ready"] + [
                StatusCondition(
                    type="Ready",
                    status="True" if ready else "Unknown",
                    reason="Ready" if ready else "NotReady",
                    last_transition_time=now,
                )
            ]
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
        event = kube_event("NodeClaim", update.name, update.event_reason, update.message, warning=warning)
        await cluster.record_event(event)
    return True


async def node_state(cluster: ClusterAPI, request: InitializeInput) -> NodeState:
    """What initialization waits for: Ready, startup taints gone, requested extended resources reported."""
    node = await cluster.get_node(request.node)
    if node is None:
        return NodeState(name=request.node, exists=False)
    ready = is_node_ready(node)
    taint_keys = {taint.key for taint in node.spec.taints}
    allocatable = parse_resources(node.status.allocatable)
    return NodeState(
        name=request.node,
        ready=ready,
        startup_taints_remaining=[key for key in request.startup_taints if key in taint_keys],
        ephemeral_taints_remaining=[key for key in labels.KNOWN_EPHEMERAL_TAINTS if key in taint_keys],
        missing_resources=[name for name in request.requested_resources if allocatable.get(name, 0) <= 0],
        deleting=node.metadata.deletion_timestamp is not None,
    )


async def register_node(cluster: ClusterAPI, node: str, node_labels: dict[str, str]) -> bool:
    """Karpenter's registration: the Node gets the NodeClaim's labels, the termination finalizer and the
    registered label, and loses the unregistered taint. False when the Node is gone."""
    patched = await cluster.patch_node(
        node,
        labels={**node_labels, labels.REGISTERED: "true"},
        remove_taint_keys=[labels.UNREGISTERED_TAINT],
        add_finalizers=[labels.TERMINATION_FINALIZER],
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
        return applied

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
        return await self.taint_for_termination(request.node)

    @activity.defn(name=ActivityName.DRAIN_NODE)
    async def drain_node(self, request: DrainInput) -> DrainResult:
        """One pass of the drain: evict the first group still present, or delete everything when forced."""
        pods = [pod for pod in await self.cluster.list_pods_on_node(request.node) if is_drainable(pod)]
        pods = [pod for pod in pods if pod.metadata.deletion_timestamp is None or request.force]
        if not pods:
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

    async def _delete_unregistered_node(self, provider_id: str) -> None:
        """The Node of a NodeClaim deleted before its lifecycle registered it (it joined meanwhile) goes with it,
        as Karpenter deletes every Node with the NodeClaim's providerID before releasing its finalizer. Only the
        Node named after the instance is looked up (one GET, as nodes are on Azure), not every Node."""
        guess = provider_id.rstrip("/").rpartition("/")[2].lower()
        node = await self.cluster.get_node(guess) if guess else None
        if node is None or node.spec.provider_id != provider_id:
            return
        await self.cluster.patch_node(guess, remove_finalizers=[labels.TERMINATION_FINALIZER])
        with contextlib.suppress(NotFoundError):
            await self.cluster.delete_node(guess)

    @activity.defn(name=ActivityName.DELETE_NODECLAIM)
    async def delete_nodeclaim(self, name: str) -> None:
        """Delete the NodeClaim and release its finalizer: the object goes away.

        Counted as terminated (and, when its expireAfter ended it, as disrupted) by the call that releases the
        finalizer; a retry finds the NodeClaim gone and counts nothing."""
        claim = await self.cluster.get_nodeclaim(name)
        if claim is not None and claim.status.provider_id:
            await self._delete_unregistered_node(claim.status.provider_id)
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
