"""The controller: watches the cluster and turns what it sees into Temporal signals. It decides nothing.

- A pod kube-scheduler marked Unschedulable is signalled to the provisioner (signal-with-start, so the
  provisioner exists as soon as it is needed), debounced, and signalled again every `requeue_seconds` while it
  stays pending, as Karpenter requeues provisionable pods; not while it waits for the in-flight NodeClaim a plan
  nominated it to (`core.scheduling.nominations`), which the next plan would not simulate again anyway.
- A NodePool that becomes usable for new nodes (created, or its Ready condition no longer False) has the pending
  pods signalled again at once rather than at their next requeue: at a start, the first plan often runs before
  the worker's first AKSNodeClass status made the NodePool Ready, and Karpenter's provisioner, like ours, ignores
  a NodePool that is not Ready.
- The disruption loop (`disruption/<cluster>`) is started once, when the controller starts (an already
  running loop is kept).
- A Node whose providerID belongs to a NodeClaim wakes that NodeClaim's workflow while the workflow waits on it
  (`waiting_on_node`): a lifecycle that has not looked yet will see the Node when it looks, and a signal then
  would only cost it a workflow task. A Node or NodeClaim being deleted asks the workflow to terminate, and so
  does a Node that went before it was registered.
- A Node with `PreemptionScheduled=True` (Azure is evicting its Spot VM) interrupts its NodeClaim's workflow at
  once, once per Scheduled Event, as Karpenter's interruption controller handles a message from its queue
  (`karpenter_interruption_*` metrics: received, handled ("deleted"), and the time from notice to action).
- It writes NodePool status as Karpenter does (`workers.controller.nodepool_status`): resources, nodes and the Ready,
  ValidationSucceeded and NodeClassReady conditions, from what it watches.
- It keeps one Temporal Schedule per CapacityWindow, and the window's status (`workers.controller.capacity_windows`).
- A NodePool or AKSNodeClass gets its static-drift hash annotations when its spec changed (`workers.controller.hashes`).
- A NodeClaim whose plan stopped before starting its lifecycle gets one (`workers.controller.adoption`).
- With the CapacityBuffer gate on, CapacityBuffers get their status, and the ready ones wake the provisioner
  (`workers.controller.capacity_buffers`).
- Every few seconds it recomputes Karpenter's cluster-state gauges (nodes, their allocatable and requests,
  NodePool usage and limits) from the objects its watch keeps, without asking the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from activities.kube import kube_event
from activities.metrics import Metrics
from core import labels, summaries
from core.api.aksnodeclass import AKSNodeClass
from core.api.conditions import AWAITING_RECONCILIATION
from core.api.kube import (
    DEFAULT_NAMESPACE,
    Event,
    Node,
    Pod,
    is_daemonset_pod,
    is_node_ready,
    is_terminal,
    pod_key,
)
from core.api.meta import InvalidObjectError, problems_of
from core.api.nodeclaim import (
    KNOWN_EPHEMERAL_TAINTS_EXIST,
    NODE_NOT_FOUND,
    NODE_NOT_READY,
    NodeClaim,
    NodeClaimConditionType,
)
from core.api.nodeoverlay import NodeOverlay
from core.api.nodepool import is_managed_manifest
from core.cluster import ClusterAPI, EventType, WatchEvent
from core.disruption.interruption import SPOT_INTERRUPTED, NoticeError, preemption_notice
from core.errors import CloudError
from core.messages import (
    TERMINATION_REASON_ANNOTATION,
    DeletionRequested,
    DisruptionInput,
    Interruption,
    LifecycleInput,
    NodeEvent,
    PodsPending,
    ProvisionerInput,
    TerminationReason,
)
from core.scheduling.nominations import held_until, in_flight, nominated_pods
from workers.controller.adoption import LifecycleAdoption
from workers.controller.capacity_buffers import CapacityBuffers
from workers.controller.capacity_windows import CapacityWindows
from workers.controller.hashes import HASHED_KINDS, reconcile_hash
from workers.controller.nodepool_status import NodePoolStatusWriter
from workers.controller.static_pools import StaticPools
from workers.metrics import WatchedClusterState, keep_cluster_state
from workers.worker import start_lifecycle
from workflows.disruption import DisruptionWorkflow, disruption_id
from workflows.maintenance import nodeclass_status_id
from workflows.provisioner import ProvisionerWorkflow, nodeclaim_id, provisioner_id

logger = logging.getLogger("nodewright.controller")


def is_provisionable(pod: Pod) -> bool:
    """Karpenter's test: kube-scheduler failed it, it is not bound or nominated, and no DaemonSet owns it."""
    if pod.spec.node_name or is_terminal(pod) or is_daemonset_pod(pod) or pod.metadata.deletion_timestamp:
        return False
    if pod.status is not None and pod.status.nominated_node_name:
        return False
    conditions = pod.status.conditions if pod.status is not None else []
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable" for c in conditions
    )


def usable_for_pending_pods(nodepool: Mapping[str, Any]) -> bool:
    """Whether plans may launch a NodePool's nodes for pending pods, as `core.scheduling.snapshot` decides it from
    the manifest: not being deleted, not static, and Ready unless its status says otherwise."""
    metadata, spec = nodepool.get("metadata") or {}, nodepool.get("spec") or {}
    if metadata.get("deletionTimestamp") is not None or spec.get("replicas") is not None:
        return False
    conditions = (nodepool.get("status") or {}).get("conditions") or []
    return not any(
        isinstance(condition, Mapping)
        and condition.get("type") == "Ready"
        and condition.get("status") == "False"
        for condition in conditions
    )


def is_managed_taint(key: str) -> bool:
    """A taint nodewright itself sets and removes (unregistered, disrupted): no lifecycle waits on it, so its
    coming and going signals nothing."""
    return key in (labels.UNREGISTERED_TAINT, labels.DISRUPTED_TAINT)


SIGNALS_IN_FLIGHT = 32
"""Signals to lifecycles the controller has under way at once."""


def not_initializable(event: NodeEvent) -> bool:
    """Whether the Node cannot be initialized yet whatever else: not Ready, or with one of Kubernetes' not-ready
    taints."""
    return not event.ready or any(key in labels.KNOWN_EPHEMERAL_TAINTS for key in event.taints)


def lifecycle_wake(event: NodeEvent, initialized: bool) -> tuple[object, ...]:
    """What of a Node its NodeClaim's lifecycle waits on: a signal goes only when this changes. Registration
    waits for the Node to exist; initialization for it to be Ready without Kubernetes' not-ready taints, then
    for its other taints (startup ones) to go and its resources to show; once Initialized only its deletion
    matters (node repair is the disruption loop's). It starts with the Node's name and whether it is being
    deleted."""
    if initialized:
        return (event.node, event.deleting)
    blocked = not_initializable(event)
    if blocked:
        return (event.node, event.deleting, blocked)
    return (event.node, event.deleting, blocked, tuple(event.taints), tuple(event.resources))


def waiting_on_node(claim: NodeClaim) -> bool:
    """Whether a NodeClaim's lifecycle waits on its Node, by what its last look wrote on the NodeClaim: no Node
    yet (`Registered=Unknown`, `NodeNotFound`), or a registered Node not initialized yet (`Initialized=Unknown`
    with the reason it waits for). Before its first look (both still `AwaitingReconciliation`, from launch) it
    waits on nothing: it reads the Node when it gets there."""
    registered = claim.status.condition(NodeClaimConditionType.REGISTERED)
    if registered is None or registered.status != "True":
        return (
            registered is not None and registered.status == "Unknown" and registered.reason == NODE_NOT_FOUND
        )
    initialized = claim.status.condition(NodeClaimConditionType.INITIALIZED)
    return (
        initialized is not None
        and initialized.status == "Unknown"
        and initialized.reason not in ("", AWAITING_RECONCILIATION)
    )


def looked_blocked(claim: NodeClaim) -> bool:
    """Whether the look that started a lifecycle's wait found its Node not initializable yet (not Ready, or with
    one of Kubernetes' not-ready taints): the same of the Node since is no news to it."""
    initialized = claim.status.condition(NodeClaimConditionType.INITIALIZED)
    return initialized is not None and initialized.reason in (NODE_NOT_READY, KNOWN_EPHEMERAL_TAINTS_EXIST)


def deletion_requested(claim: NodeClaim) -> DeletionRequested:
    """What the lifecycle of a NodeClaim being deleted is told: why, when whoever deleted it said so on it."""
    try:
        reason = TerminationReason(claim.metadata.annotations.get(TERMINATION_REASON_ANNOTATION, ""))
    except ValueError:
        reason = TerminationReason.NODECLAIM_DELETED
    return DeletionRequested(by="nodeclaim deleted", reason=reason)


def lifecycle_adoption(
    client: Client, cluster: ClusterAPI, task_queue: str, **timing: float
) -> LifecycleAdoption:
    """The controller's `LifecycleAdoption`, starting lifecycles on `task_queue` as a plan does (`timing`: its
    `grace_seconds` and `check_seconds`)."""

    async def start(request: LifecycleInput, deletion: DeletionRequested | None) -> None:
        await start_lifecycle(client, task_queue, request, "delete" if deletion else None, deletion)

    return LifecycleAdoption(client, cluster, start, deletion_requested, **timing)


def invalid_object_event(event: WatchEvent, error: InvalidObjectError | ValidationError) -> Event:
    """The Warning event on a watched object that breaks a rule: `Invalid<Kind>`, with each field and rule."""
    metadata = event.object.get("metadata") or {}
    namespace = metadata.get("namespace")
    problems = error.problems if isinstance(error, InvalidObjectError) else problems_of(error)
    name = f"{namespace}/{event.name}" if namespace else event.name
    return kube_event(
        event.kind,
        event.name,
        f"Invalid{event.kind}",
        "; ".join(f"{event.kind} {name}: {problem}" for problem in problems),
        namespace,
        warning=True,
        uid=metadata.get("uid"),
    )


class Controller:
    def __init__(
        self,
        client: Client,
        cluster: ClusterAPI,
        provisioner: ProvisionerInput,
        task_queue: str,
        debounce_seconds: float = 0.2,
        requeue_seconds: float = 10.0,
        disruption: DisruptionInput | None = None,
        metrics: Metrics | None = None,
        metrics_seconds: float = 5.0,
        status_seconds: float = 1.0,
        static: StaticPools | None = None,
        windows: CapacityWindows | None = None,
        adoption: LifecycleAdoption | None = None,
        capacity_buffers: bool = False,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.provisioner = provisioner
        self.task_queue = task_queue
        self.debounce_seconds = debounce_seconds
        self.requeue_seconds = requeue_seconds
        self.disruption = disruption
        self.metrics = metrics
        """Where the cluster-state gauges go, set every `metrics_seconds` for what changed; None: not kept."""
        self.metrics_seconds = metrics_seconds
        self.state = WatchedClusterState() if metrics is not None else None
        self.static = static
        """Starts and signals the static NodePools' workflows (None: static pools are not watched)."""
        self.windows = windows
        """Keeps one Temporal Schedule per CapacityWindow, and their status (None: windows are not read)."""
        self.adoption = adoption
        """Starts the lifecycle of a NodeClaim whose plan did not (None: not checked)."""
        self.buffers = CapacityBuffers(cluster, capacity_buffers, self._wake_for, self._forget)
        """Reconciles CapacityBuffers and wakes the provisioner for the ready ones (the CapacityBuffer gate)."""
        self.statuses = NodePoolStatusWriter(cluster, status_seconds)
        """Writes NodePool status (resources, nodes, conditions) after the watch is quiet for `status_seconds`."""
        self.provisionable: set[str] = set()
        self._unsent: set[str] = set()
        self._wake = asyncio.Event()
        self._claims_by_provider_id: dict[str, str] = {}
        self._unclaimed_nodes: dict[str, Node] = {}
        """Nodes seen before any NodeClaim showed their providerID (a few, briefly), by providerID."""
        self._told: dict[str, tuple[object, ...]] = {}
        """What each NodeClaim's lifecycle was last told of its Node (`lifecycle_wake`), by NodeClaim."""
        self._sending: dict[str, asyncio.Task[None]] = {}
        """The last signal under way to each workflow (`_in_order`)."""
        self._signal_slots = asyncio.Semaphore(SIGNALS_IN_FLIGHT)
        self._signalled: dict[str, datetime] = {}
        """When each provisionable pod was last sent to the provisioner."""
        self._initialized: set[str] = set()
        """NodeClaims seen Initialized."""
        self._waiting: set[str] = set()
        """NodeClaims whose lifecycle waits on their Node (`waiting_on_node`): only these hear of its changes."""
        self._last_seen: dict[str, NodeEvent] = {}
        """The last word of each NodeClaim's Node, told once its lifecycle starts waiting if it is news then."""
        self._registering: set[str] = set()
        """NodeClaims seen neither Registered nor deleting: a Node of theirs that goes is news to their lifecycle."""
        self._nominated: dict[str, tuple[list[str], datetime | None]] = {}
        """In-flight NodeClaim to the pods nominated to it, and until when once it is Initialized."""
        self._notices: set[tuple[str, str]] = set()
        """(Node, Scheduled Event id) already handled."""
        self._nodeclass_generations: dict[str, object] = {}
        """The generation of each AKSNodeClass its status schedule was last triggered for."""
        self._usable_nodepools: set[str] = set()
        """NodePools the provisioner may use for pending pods as last watched (`usable_for_pending_pods`)."""

    async def run(self) -> None:
        """Watch and signal until cancelled."""
        if self.disruption is not None:
            await self._start_disruption(self.disruption)
        await self.buffers.warn_disabled()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watch())
            group.create_task(self._flush_loop())
            group.create_task(self._requeue_loop())
            group.create_task(self.statuses.run())
            if self.windows is not None:
                group.create_task(self.windows.run())
            if self.adoption is not None:
                group.create_task(self.adoption.run())
            if self.metrics is not None and self.state is not None:
                group.create_task(keep_cluster_state(self.state, self.metrics, self.metrics_seconds))

    async def _start_disruption(self, disruption: DisruptionInput) -> None:
        try:
            await self.client.start_workflow(
                DisruptionWorkflow.run,
                disruption,
                id=disruption_id(disruption.cluster),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=summaries.disruption_summary(disruption),
                static_details=summaries.disruption_details(disruption),
            )
        except RPCError as error:
            # Provisioning does not need it; the next controller start tries again.
            logger.warning("could not start the disruption loop: %s", error)

    async def _watch(self) -> None:
        async for event in self.cluster.watch(0):
            await self.receive(event)

    async def receive(self, event: WatchEvent) -> None:
        """`handle` the event; an object the controller cannot read, or a signal that fails, is logged and left for
        its next event (the watch goes on), and an object that breaks a rule gets a Warning event `Invalid<Kind>`
        naming each field, which `kubectl describe` lists."""
        try:
            await self.handle(event)
        except (InvalidObjectError, ValidationError) as error:
            logger.warning("ignoring %s %s: %s", event.kind, event.name, error)
            if event.type is not EventType.DELETED:
                await self.cluster.record_event(invalid_object_event(event, error))
        except (ValueError, RPCError) as error:
            logger.warning("ignoring %s %s: %s", event.kind, event.name, error)

    async def handle(self, event: WatchEvent) -> None:
        if self.state is not None:
            self.state.observe(event)
        self.statuses.observe(event)
        if self.static is not None:
            await self.static.observe(event)
        await self.buffers.observe(event)
        if event.kind == "Pod":
            self._pod(event)
        elif event.kind == "NodeClaim" and event.type is EventType.DELETED:
            self._nominated.pop(event.name, None)
            self._told.pop(event.name, None)
            self._last_seen.pop(event.name, None)
            self._waiting.discard(event.name)
            self._initialized.discard(event.name)
            self._registering.discard(event.name)
            if self.adoption is not None:
                self.adoption.forget(event.name)
        elif event.kind == "NodeClaim" and not is_managed_manifest(event.object):
            pass  # another provider's, as Karpenter's NodeClaim controllers leave it
        elif event.kind == "NodeClaim":
            claim = NodeClaim.parse(event.object)
            if self.adoption is not None:
                self.adoption.observe(claim)
            await self._nodeclaim(claim)
        elif event.kind == "Node" and event.type is EventType.DELETED:
            self._unclaimed_nodes = {
                p: n for p, n in self._unclaimed_nodes.items() if n.metadata.name != event.name
            }
            await self._node_gone(Node.model_validate(event.object))
        elif event.kind == "Node":
            await self._node(Node.model_validate(event.object))
        elif event.kind == "NodePool":
            self._nodepool(event)
        elif event.kind == "NodeOverlay" and event.type is not EventType.DELETED:
            NodeOverlay.parse(event.object)  # planning leaves out one it cannot read: the event says why
        elif event.kind == "AKSNodeClass":
            self._nodeclass(event)
            if event.type is not EventType.DELETED:
                await self._nodeclass_status(AKSNodeClass.parse(event.object))
        if event.kind in HASHED_KINDS and event.type is not EventType.DELETED:
            await reconcile_hash(self.cluster, event.kind, event.object)

    async def _nodeclass_status(self, nodeclass: AKSNodeClass) -> None:
        """`status.localDNSState`, as the AKS provider's status controller resolves `localDNS.mode`, at once (the
        worker's status reconcile writes the conditions)."""
        state = nodeclass.resolved_local_dns_state()
        if nodeclass.status.local_dns_state is state:
            return
        try:
            await self.cluster.patch_nodeclass_status(nodeclass.name, {"localDNSState": state.value})
        except CloudError as error:
            logger.warning("AKSNodeClass %s: could not write status.localDNSState: %s", nodeclass.name, error)

    def _pod(self, event: WatchEvent) -> None:
        # Most pod events are of bound pods (their status, their binding): never provisionable, and not worth
        # parsing whole to learn so.
        bound = bool((event.object.get("spec") or {}).get("nodeName"))
        if event.type is EventType.DELETED or bound:
            key, provisionable = f"{event.namespace or DEFAULT_NAMESPACE}/{event.name}", False
        else:
            pod = Pod.model_validate(event.object)
            key, provisionable = pod_key(pod), is_provisionable(pod)
        if provisionable:
            if key not in self.provisionable:
                self.provisionable.add(key)
                self._unsent.add(key)
                self._wake.set()
        else:
            self.provisionable.discard(key)
            self._unsent.discard(key)
            self._signalled.pop(key, None)

    def _wake_for(self, keys: list[str]) -> None:
        """Plan for these CapacityBuffers now, and again every requeue period while they are ready."""
        fresh = [key for key in keys if key not in self._unsent]
        if not fresh:
            return
        self.provisionable.update(fresh)
        self._unsent.update(fresh)
        self._wake.set()

    def _forget(self, key: str) -> None:
        self.provisionable.discard(key)
        self._unsent.discard(key)
        self._signalled.pop(key, None)

    def _nodepool(self, event: WatchEvent) -> None:
        """A NodePool that became usable for pending pods wakes the provisioner for every pod that waits (but those
        nominated to an in-flight NodeClaim): the plans that left them pending could not use it."""
        usable = event.type is not EventType.DELETED and usable_for_pending_pods(event.object)
        if not usable:
            self._usable_nodepools.discard(event.name)
            return
        if event.name in self._usable_nodepools:
            return
        self._usable_nodepools.add(event.name)
        if pods := self.requeued(within_period=False):
            logger.debug("NodePool %s is usable: planning again for %d pending pod(s)", event.name, len(pods))
            self._unsent.update(pods)
            self._wake.set()

    def _nodeclass(self, event: WatchEvent) -> None:
        """A new or changed AKSNodeClass has its status (conditions, subnet check) reconciled now rather than at
        the schedule's next turn (no schedule: nothing happens)."""
        if event.type is EventType.DELETED:
            self._nodeclass_generations.pop(event.name, None)
            return
        generation = (event.object.get("metadata") or {}).get("generation")
        if self._nodeclass_generations.get(event.name) == generation:
            return
        self._nodeclass_generations[event.name] = generation
        schedule = nodeclass_status_id(self.provisioner.cluster)
        self._in_order(schedule, lambda: self._trigger(schedule))

    async def _trigger(self, schedule_id: str) -> None:
        with contextlib.suppress(RPCError):
            await self.client.get_schedule_handle(schedule_id).trigger()

    def _track_nominations(self, claim: NodeClaim) -> None:
        pods = nominated_pods(claim)
        if pods and in_flight(claim, datetime.now(UTC)):
            self._nominated[claim.name] = (pods, held_until(claim))
        else:
            self._nominated.pop(claim.name, None)

    def requeued(self, now: datetime | None = None, *, within_period: bool = True) -> list[str]:
        """The pods the requeue signals again: provisionable, not waiting for an in-flight NodeClaim, and (unless
        `within_period` is False) not signalled within the requeue period (a plan for them may still be creating
        their NodeClaims)."""
        now = now or datetime.now(UTC)
        waiting = {
            pod for pods, until in self._nominated.values() if until is None or now < until for pod in pods
        }
        recent = now - timedelta(seconds=self.requeue_seconds)
        return sorted(
            pod
            for pod in self.provisionable - waiting
            if not within_period or (signalled := self._signalled.get(pod)) is None or signalled <= recent
        )

    async def _nodeclaim(self, claim: NodeClaim) -> None:
        self._track_nominations(claim)
        if claim.is_true(NodeClaimConditionType.REGISTERED) or claim.metadata.deletion_timestamp is not None:
            self._registering.discard(claim.name)
        else:
            self._registering.add(claim.name)
        if claim.is_true(NodeClaimConditionType.INITIALIZED) and claim.name not in self._initialized:
            self._initialized.add(claim.name)
            if claim.name in self._told:  # what it was told is now only news if the Node goes
                self._told[claim.name] = self._told[claim.name][:2]
        if not waiting_on_node(claim):
            self._waiting.discard(claim.name)
        elif claim.name not in self._waiting:
            # Its lifecycle looked and started waiting: what changed since it looked (or since it was last told,
            # which it saw) is news now. A Node still not initializable, as the look found it, is not.
            self._waiting.add(claim.name)
            event = self._last_seen.get(claim.name)
            if (
                event is not None
                and looked_blocked(claim)
                and not event.deleting
                and not_initializable(event)
            ):
                self._told[claim.name] = lifecycle_wake(event, initialized=False)
            elif event is not None:
                self._tell(claim.name, event)
        provider_id = claim.status.provider_id
        if provider_id and provider_id not in self._claims_by_provider_id:
            self._claims_by_provider_id[provider_id] = claim.name
            # The Node may have registered before the NodeClaim showed its providerID.
            node = self._unclaimed_nodes.pop(provider_id, None)
            if node is not None:
                await self._node(node)
        if claim.metadata.deletion_timestamp is not None:
            workflow_id, request = nodeclaim_id(claim.name), deletion_requested(claim)
            self._in_order(workflow_id, lambda: self._signal(workflow_id, "delete", request))

    async def _node(self, node: Node) -> None:
        provider_id = node.spec.provider_id or ""
        claim = self._claims_by_provider_id.get(provider_id)
        if claim is None:
            if provider_id:
                self._unclaimed_nodes[provider_id] = node
            return
        try:
            notice = preemption_notice(node)
        except NoticeError as error:
            logger.warning("ignoring an unreadable eviction notice: %s", error)
            notice = None
        if notice is not None and (node.metadata.name, notice.event_id) not in self._notices:
            self._in_order(nodeclaim_id(claim), lambda: self._interrupt(claim, notice))
        event = NodeEvent(
            node=node.metadata.name,
            ready=is_node_ready(node),
            deleting=node.metadata.deletion_timestamp is not None,
            taints=sorted(taint.key for taint in node.spec.taints if not is_managed_taint(taint.key)),
            resources=sorted(node.status.allocatable),
        )
        self._last_seen[claim] = event
        # Its deletion is news whatever the lifecycle is doing; anything else only while it waits.
        if event.deleting or claim in self._waiting:
            self._tell(claim, event)

    def _tell(self, claim: str, event: NodeEvent) -> None:
        """Signal a change of the Node its lifecycle waits on, once; heartbeats and our own labels and taints wake
        nothing."""
        wake = lifecycle_wake(event, claim in self._initialized)
        if self._told.get(claim) != wake:
            self._told[claim] = wake
            workflow_id = nodeclaim_id(claim)
            self._in_order(workflow_id, lambda: self._signal(workflow_id, "node_event", event))

    async def _node_gone(self, node: Node) -> None:
        """A Node that went before its NodeClaim was registered (nothing held it: the termination finalizer comes
        with registration) ends the NodeClaim's lifecycle as a deleting Node does, at once rather than at the
        registration timeout; the provisioner then plans its pods again."""
        claim = self._claims_by_provider_id.get(node.spec.provider_id or "")
        told = self._told.get(claim or "")
        # A registered Node is deleted through its finalizer (its lifecycle hears of that), or by the lifecycle.
        if claim not in self._registering or (told is not None and told[:2] == (node.metadata.name, True)):
            return
        self._tell(claim, NodeEvent(node=node.metadata.name, ready=False, deleting=True))

    async def _interrupt(self, claim: str, notice: Interruption) -> None:
        if (notice.node, notice.event_id) in self._notices:  # handled while this waited its turn
            return
        metrics = self.metrics
        if metrics is not None:
            metrics.interruption_received.labels(message_type=SPOT_INTERRUPTED).inc()
        logger.info(
            "interrupting nodeclaim %s: node %s has Preempt event %s (NotBefore %s)",
            claim,
            notice.node,
            notice.event_id,
            notice.not_before or "now",
        )
        if not await self._signal(nodeclaim_id(claim), "interrupt", notice):
            return
        self._notices.add((notice.node, notice.event_id))
        if metrics is not None:
            metrics.interruption_deleted.inc()
            if notice.noticed is not None:
                waited = (datetime.now(UTC) - notice.noticed).total_seconds()
                metrics.interruption_queue_duration.observe(max(waited, 0.0))

    def _in_order(self, workflow_id: str, send: Callable[[], Awaitable[object]]) -> None:
        """`send()` in the background, after what was sent to this workflow before (its signals keep their
        order), with at most `SIGNALS_IN_FLIGHT` in flight: the watch goes on meanwhile. A thousand Nodes turning
        Ready at once no longer wait in line behind one another's round trip to Temporal."""
        previous = self._sending.get(workflow_id)

        async def after() -> None:
            if previous is not None:
                await asyncio.wait({previous})
            async with self._signal_slots:
                await send()

        task = asyncio.create_task(after())
        self._sending[workflow_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._sending.get(workflow_id) is finished:
                del self._sending[workflow_id]
            if not finished.cancelled() and (error := finished.exception()) is not None:
                logger.warning("could not signal %s: %s", workflow_id, error)

        task.add_done_callback(done)

    async def sent(self) -> None:
        """Until every signal asked for so far has been sent (or given up)."""
        while self._sending:
            await asyncio.wait(set(self._sending.values()))

    async def _signal(self, workflow_id: str, signal: str, argument: object) -> bool:
        """Whether the workflow got it (one that has finished has nothing left to learn)."""
        try:
            await self.client.get_workflow_handle(workflow_id).signal(signal, argument)
        except RPCError:
            return False
        return True

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.debounce_seconds)
            self._wake.clear()
            pods, self._unsent = sorted(self._unsent), set()
            if pods:
                await self._signal_provisioner(pods)

    async def _requeue_loop(self) -> None:
        while True:
            await asyncio.sleep(self.requeue_seconds)
            if pods := self.requeued():
                await self._signal_provisioner(pods)

    async def _signal_provisioner(self, pods: list[str]) -> None:
        try:
            await self.client.start_workflow(
                ProvisionerWorkflow.run,
                self.provisioner,
                id=provisioner_id(self.provisioner.cluster),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                start_signal="pods_pending",
                start_signal_args=[PodsPending(pods=pods)],
                static_summary=summaries.provisioner_summary(self.provisioner.cluster),
                static_details=summaries.provisioner_details(
                    self.provisioner.batch_idle_seconds, self.provisioner.batch_max_seconds
                ),
            )
            now = datetime.now(UTC)
            self._signalled.update((pod, now) for pod in pods)
        except RPCError as error:
            # Temporal is unreachable for now: the pods stay provisionable and the requeue loop tries again.
            logger.warning("could not signal the provisioner about %d pod(s): %s", len(pods), error)
