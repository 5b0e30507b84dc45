"""The controller: watches the cluster and turns what it sees into Temporal signals. It decides nothing.

- A pod kube-scheduler marked Unschedulable is signalled to the provisioner (signal-with-start, so the
  provisioner exists as soon as it is needed), debounced, and signalled again every `requeue_seconds` while it
  stays pending, as Karpenter requeues provisionable pods.
- The disruption loop (`disruption/<cluster>`) is started once, when the controller starts (an already
  running loop is kept).
- A Node whose providerID belongs to a NodeClaim wakes that NodeClaim's workflow; a Node or NodeClaim being
  deleted asks the workflow to terminate.
- A Node with `PreemptionScheduled=True` (Azure is evicting its Spot VM) interrupts its NodeClaim's workflow at
  once, once per Scheduled Event, as Karpenter's interruption controller handles a message from its queue
  (`karpenter_interruption_*` metrics: received, handled ("deleted"), and the time from notice to action).
- Every few seconds it recomputes Karpenter's cluster-state gauges (nodes, their allocatable and requests,
  NodePool usage and limits) from a snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from activities.metrics import Metrics
from core import summaries
from core.api.kube import Node, Pod, is_daemonset_pod, is_node_ready, is_terminal, pod_key
from core.api.nodeclaim import NodeClaim
from core.cluster import ClusterAPI, EventType, WatchEvent
from core.disruption.interruption import SPOT_INTERRUPTED, NoticeError, preemption_notice
from core.messages import (
    TERMINATION_REASON_ANNOTATION,
    DeletionRequested,
    DisruptionInput,
    Interruption,
    NodeEvent,
    PodsPending,
    ProvisionerInput,
    TerminationReason,
)
from workers.metrics import watch_cluster_state
from workflows.disruption import DisruptionWorkflow, disruption_id
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


def deletion_requested(claim: NodeClaim) -> DeletionRequested:
    """What the lifecycle of a NodeClaim being deleted is told: why, when whoever deleted it said so on it."""
    try:
        reason = TerminationReason(claim.metadata.annotations.get(TERMINATION_REASON_ANNOTATION, ""))
    except ValueError:
        reason = TerminationReason.NODECLAIM_DELETED
    return DeletionRequested(by="nodeclaim deleted", reason=reason)


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
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.provisioner = provisioner
        self.task_queue = task_queue
        self.debounce_seconds = debounce_seconds
        self.requeue_seconds = requeue_seconds
        self.disruption = disruption
        self.metrics = metrics
        """Where the cluster-state gauges go, recomputed every `metrics_seconds`; None: not kept."""
        self.metrics_seconds = metrics_seconds
        self.provisionable: set[str] = set()
        self._unsent: set[str] = set()
        self._wake = asyncio.Event()
        self._claims_by_provider_id: dict[str, str] = {}
        self._notices: set[tuple[str, str]] = set()
        """(Node, Scheduled Event id) already handled."""

    async def run(self) -> None:
        """Watch and signal until cancelled."""
        if self.disruption is not None:
            await self._start_disruption(self.disruption)
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watch())
            group.create_task(self._flush_loop())
            group.create_task(self._requeue_loop())
            if self.metrics is not None:
                group.create_task(watch_cluster_state(self.cluster, self.metrics, self.metrics_seconds))

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
            try:
                await self.handle(event)
            except (ValueError, RPCError) as error:
                logger.warning("ignoring %s %s: %s", event.kind, event.name, error)

    async def handle(self, event: WatchEvent) -> None:
        if event.kind == "Pod":
            self._pod(event)
        elif event.kind == "NodeClaim" and event.type is not EventType.DELETED:
            await self._nodeclaim(NodeClaim.parse(event.object))
        elif event.kind == "Node" and event.type is not EventType.DELETED:
            await self._node(Node.model_validate(event.object))

    def _pod(self, event: WatchEvent) -> None:
        pod = Pod.model_validate(event.object)
        key = pod_key(pod)
        if event.type is not EventType.DELETED and is_provisionable(pod):
            if key not in self.provisionable:
                self.provisionable.add(key)
                self._unsent.add(key)
                self._wake.set()
        else:
            self.provisionable.discard(key)
            self._unsent.discard(key)

    async def _nodeclaim(self, claim: NodeClaim) -> None:
        provider_id = claim.status.provider_id
        if provider_id and provider_id not in self._claims_by_provider_id:
            self._claims_by_provider_id[provider_id] = claim.name
            # The Node may have registered before the NodeClaim showed its providerID.
            node = await self.cluster.find_node_by_provider_id(provider_id)
            if node is not None:
                await self._node(node)
        if claim.metadata.deletion_timestamp is not None:
            await self._signal(nodeclaim_id(claim.name), "delete", deletion_requested(claim))

    async def _node(self, node: Node) -> None:
        claim = self._claims_by_provider_id.get(node.spec.provider_id or "")
        if claim is None:
            return
        try:
            notice = preemption_notice(node)
        except NoticeError as error:
            logger.warning("ignoring an unreadable eviction notice: %s", error)
            notice = None
        if notice is not None and (node.metadata.name, notice.event_id) not in self._notices:
            await self._interrupt(claim, notice)
        event = NodeEvent(
            node=node.metadata.name,
            ready=is_node_ready(node),
            deleting=node.metadata.deletion_timestamp is not None,
        )
        await self._signal(nodeclaim_id(claim), "node_event", event)

    async def _interrupt(self, claim: str, notice: Interruption) -> None:
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
            if self.provisionable:
                await self._signal_provisioner(sorted(self.provisionable))

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
        except RPCError as error:
            # Temporal is unreachable for now: the pods stay provisionable and the requeue loop tries again.
            logger.warning("could not signal the provisioner about %d pod(s): %s", len(pods), error)
