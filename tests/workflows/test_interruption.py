"""Spot interruption and vanished VMs, end to end on the real control plane and the emulated Azure: the emulator
evicts a Spot VM with a Preempt Scheduled Event, its node agent sets `PreemptionScheduled=True`, the controller
interrupts the NodeClaim's lifecycle, which rules the offering out, records why, has the provisioner plan the
node's pods at once and drains by the event's deadline; a VM that vanishes is garbage collected and its pods
replaced."""

from __future__ import annotations

import asyncio
import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import WorkflowHandle

from activities.metrics import Metrics
from core import labels
from core.api.kube import is_node_ready
from core.messages import (
    ActivityName,
    DisruptionInput,
    DisruptionSettings,
    DrainInput,
    GarbageCollectionInput,
    TerminationReason,
)
from tests.cluster import eventually
from tests.workflows.conftest import (
    FAST,
    INSTANCE_TYPE,
    System,
    activity_calls,
    condition,
    decode,
    deployment,
    pdb,
)
from workers.explain import explain, render_text
from workflows.disruption import DisruptionWorkflow, disruption_id
from workflows.maintenance import GarbageCollectionWorkflow, garbage_collection_id
from workflows.provisioner import ProvisionerWorkflow

NOTICE = timedelta(seconds=8)
SPOT = {labels.INSTANCE_TYPE: INSTANCE_TYPE, labels.CAPACITY_TYPE: labels.CAPACITY_TYPE_SPOT}


async def spot_pods(system: System, replicas: int) -> tuple[str, str, set[str]]:
    """A spot deployment running on one node: (node, NodeClaim, pod names)."""
    await system.apply_examples()
    await system.kube.apply([deployment("spotty", replicas, node_selector=SPOT)])
    pods = await eventually(lambda: system.running("spotty", replicas), timeout=20, what="spotty running")
    [node] = {pod.spec.node_name or "" for pod in pods}
    return node, await system.claim_of(node), {pod.metadata.name for pod in pods}


async def forced_drain_time(system: System, lifecycle: WorkflowHandle[Any, Any]) -> datetime:
    """When the lifecycle scheduled its first forced drain pass."""
    history = await lifecycle.fetch_history()
    for event in history.events:
        if event.event_type != HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attributes = event.activity_task_scheduled_event_attributes
        if attributes.activity_type.name != ActivityName.DRAIN_NODE:
            continue
        drain = await decode(system.client, list(attributes.input.payloads), DrainInput)
        if drain.force:
            return event.event_time.ToDatetime(tzinfo=UTC)
    raise AssertionError("no forced drain")


async def test_a_spot_eviction_is_handled_before_its_deadline(system: System) -> None:
    registry = CollectorRegistry()
    system.start_controller(metrics=Metrics(registry))
    node, claim, pods = await spot_pods(system, 2)
    zone = (await system.node(node)).metadata.labels[labels.ZONE]  # type: ignore[union-attr]
    # The pods cannot leave by eviction (their budget allows none), so only the deadline moves them.
    await system.kube.apply([pdb("spotty", min_available=2)])
    lifecycle = await system.nodeclaim_workflow(claim)

    event = await system.aks.evict(node, NOTICE)
    result = await asyncio.wait_for(lifecycle.result(), 40)

    # Recorded as an interruption, with the event's id and deadline.
    assert result.termination_reason is TerminationReason.INTERRUPTED
    assert event.id in result.reason and event.not_before.strftime("%Y-%m-%dT%H:%M:%SZ") in result.reason
    final = system.deleted_claim(claim)
    assert final is not None and condition(final, "DisruptionReason") == ("True", "Interrupted")
    # The offering is ruled out for new launches.
    unavailable = await system.provisioner().query(ProvisionerWorkflow.unavailable_offerings)
    assert [(u.instance_type, u.zone, u.capacity_type, u.reason) for u in unavailable] == [
        (INSTANCE_TYPE, zone, "spot", "SpotInterruption")
    ]
    # The drain asked until the deadline, then deleted what was left: never after it.
    calls = await activity_calls(lifecycle)
    drains = [
        await decode(system.client, call.input, DrainInput)
        for call in calls
        if call.name == ActivityName.DRAIN_NODE
    ]
    assert drains[0].force is False and drains[-1].force is True
    forced = await forced_drain_time(system, lifecycle)
    assert abs((forced - event.not_before).total_seconds()) < 1.5, (forced, event.not_before)
    gone = [
        index
        for index, seen in enumerate(system.events)
        if seen.kind == "Pod" and seen.name in pods and seen.type == "DELETED"
    ]
    assert len(gone) == len(pods)
    # The replacement was planned while the node drained: its NodeClaim exists before the pods left.
    created = [
        index
        for index, seen in enumerate(system.events)
        if seen.kind == "NodeClaim" and seen.type == "ADDED" and seen.name != claim
    ]
    assert created and created[0] < min(gone)
    # The pods run again, elsewhere: not on the interrupted offering.
    moved = await eventually(lambda: system.running("spotty", 2), timeout=30, what="spotty running again")
    nodes = {pod.spec.node_name for pod in moved}
    assert node not in nodes
    for name in nodes:
        placed = await system.node(name or "")
        assert placed is not None and placed.metadata.labels[labels.ZONE] != zone
    # `nodewright explain` tells the story: why it was removed, and how.
    story = await explain(system.client, "nodeclaim", claim)
    text = io.StringIO()
    render_text(story, text)
    assert f"why: interrupted: Spot eviction (Preempt event {event.id}, deadline " in text.getvalue()
    assert "[Interrupted]" in text.getvalue() and "(forced at its deadline)" in text.getvalue()
    # Karpenter's interruption metrics.
    assert (
        registry.get_sample_value(
            "karpenter_interruption_received_messages_total", {"message_type": "spot_interrupted"}
        )
        == 1
    )
    assert registry.get_sample_value("karpenter_interruption_deleted_messages_total") == 1
    waited = registry.get_sample_value("karpenter_interruption_message_queue_duration_seconds_count")
    assert waited == 1


async def test_a_vanished_vm_is_collected_in_one_pass_and_its_pods_replaced(system: System) -> None:
    system.start_controller()
    node, claim, _ = await spot_pods(system, 1)
    lifecycle = await system.nodeclaim_workflow(claim)

    await system.aks.vanish(node)

    async def not_ready() -> bool:
        found = await system.node(node)
        return found is not None and not is_node_ready(found)

    await eventually(not_ready, timeout=60, what=f"{node} not Ready")
    collected = await system.client.execute_workflow(
        GarbageCollectionWorkflow.run,
        GarbageCollectionInput(cluster=system.cluster, grace_seconds=0, timeout_seconds=60),
        id=f"{garbage_collection_id(system.cluster)}-{uuid.uuid4().hex[:6]}",
        task_queue=system.task_queue,
    )

    assert collected.nodeclaims == [claim]
    result = await asyncio.wait_for(lifecycle.result(), 30)
    assert result.termination_reason is TerminationReason.GARBAGE_COLLECTED
    moved = await eventually(lambda: system.running("spotty", 1), timeout=30, what="spotty running again")
    assert moved[0].spec.node_name != node
    assert await system.node(node) is None


async def test_node_repair_replaces_a_node_not_ready_past_its_toleration(system: System) -> None:
    system.start_controller()
    node, claim, _ = await spot_pods(system, 1)
    lifecycle = await system.nodeclaim_workflow(claim)
    settings = DisruptionSettings(
        poll_seconds=1, validation_seconds=30, node_repair=True, repair_not_ready_seconds=2
    )
    loop = await system.client.start_workflow(
        DisruptionWorkflow.run,
        DisruptionInput(cluster=system.cluster, settings=settings, lifecycle=FAST),
        id=disruption_id(system.cluster),
        task_queue=system.task_queue,
    )

    await system.aks.vanish(node)  # its node agent stops with it: the Node turns NotReady

    result = await asyncio.wait_for(lifecycle.result(), 90)
    assert result.termination_reason is TerminationReason.UNHEALTHY
    assert "Ready=" in result.reason and f"node {node} is unhealthy" in result.reason
    final = system.deleted_claim(claim)
    assert final is not None and condition(final, "DisruptionReason") == ("True", "Unhealthy")
    # Drained at once, as Karpenter's repair annotates it: no later than the NodeClaim's deletion.
    deleted = final.metadata.deletion_timestamp
    assert deleted is not None
    assert final.metadata.annotations[labels.TERMINATION_TIMESTAMP] <= f"{deleted:%Y-%m-%dT%H:%M:%SZ}"
    # Forceful: the first drain pass already deletes the pod, no eviction is asked for.
    calls = await activity_calls(lifecycle)
    drains = [
        await decode(system.client, call.input, DrainInput)
        for call in calls
        if call.name == ActivityName.DRAIN_NODE
    ]
    assert drains and all(drain.force for drain in drains)
    moved = await eventually(lambda: system.running("spotty", 1), timeout=30, what="spotty running again")
    assert moved[0].spec.node_name != node
    await loop.terminate()
