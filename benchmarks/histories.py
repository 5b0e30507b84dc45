"""What Temporal's histories say of a lifecycle run: the provisioner's batches, what one history of a type holds,
workflow tasks that timed out, and why the provisioner is stuck when it is.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from benchmarks.nodewright import CLUSTER
from benchmarks.observed import since
from core.messages import PlanResult
from workflows.provisioner import provisioner_id

SAMPLED_HISTORIES = 20
SIGNALLED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


async def _histories(client: Client, query: str, limit: int | None = None) -> list[Any]:
    histories = []
    async for execution in client.list_workflows(query, limit=limit):
        histories.append(
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        )
    return histories


def _seconds(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


async def provisioner_profile(client: Client, origin: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each batch of the provisioner: when its planning started
    (seconds after `origin`), how long planning and creation took, and when its children started."""
    batches: list[dict[str, Any]] = []
    histories = await _histories(client, f'WorkflowId="{provisioner_id(CLUSTER)}"')
    for history in histories:
        scheduled: dict[int, tuple[str, float]] = {}
        signalled: float | None = None  # the first signal of the batch (or the start of a run)
        closed: float | None = None  # the batch window's last timer
        for event in history.events:
            at = _seconds(event)
            if event.event_type in (SIGNALLED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED):
                signalled = at if signalled is None else signalled
            elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
                closed = at
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                name = attributes.activity_type.name
                scheduled[event.event_id] = (name, at)
                if name == "plan_provisioning":
                    batches.append(
                        {
                            "signalled at": since(origin, signalled),
                            "window closed at": since(origin, closed),
                            "planned at": since(origin, at),
                            "nodeclaims": 0,
                        }
                    )
                    signalled = closed = None
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and batches:
                completed = event.activity_task_completed_event_attributes
                name, started = scheduled[completed.scheduled_event_id]
                batches[-1][f"{name} s"] = round(at - started, 2)
                if name == "plan_provisioning":
                    (plan,) = await client.data_converter.decode(completed.result.payloads, [PlanResult])
                    batches[-1]["pods"] = plan.pods
                    batches[-1]["nodeclaims"] = len(plan.nodeclaims)
                    batches[-1]["plan bytes"] = completed.result.ByteSize()
            elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED and batches:
                batches[-1].setdefault("first child started at", since(origin, at))
                batches[-1]["last child started at"] = since(origin, at)
    events = [event for history in histories for event in history.events]
    totals = {
        "runs": len(histories),
        "events": len(events),
        "workflow tasks": sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events),
        "signals": sum(e.event_type == SIGNALLED for e in events),
        "history MB": round(sum(event.ByteSize() for event in events) / 1e6, 1),
    }
    return sorted(batches, key=lambda batch: batch["planned at"] or 0.0), totals


async def history_profile(client: Client, workflow_type: str) -> dict[str, float]:
    """What one history of the type holds, averaged over a sample: events by kind, activities (and local
    activities) by name."""
    histories = await _histories(client, f'WorkflowType="{workflow_type}"', limit=SAMPLED_HISTORIES)
    counts: Counter[str] = Counter()
    for history in histories:
        counts["events"] += len(history.events)
        for event in history.events:
            counts[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()] += 1
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                counts["activity " + event.activity_task_scheduled_event_attributes.activity_type.name] += 1
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                marker = event.marker_recorded_event_attributes
                if marker.marker_name == "core_local_activity":
                    local = json.loads(marker.details["data"].payloads[0].data)["activity_type"]
                    counts["local activity " + local] += 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                # StartToClose: the worker took too long; ScheduleToStart: a sticky task waited too long.
                timeout = event.workflow_task_timed_out_event_attributes.timeout_type
                counts[
                    "workflow_task_timed_out " + TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_")
                ] += 1
    return (
        {kind: round(count / len(histories), 1) for kind, count in sorted(counts.items())}
        if histories
        else {}
    )


async def workflow_task_timeouts(client: Client) -> dict[str, int]:
    """Workflow tasks that timed out, over every history of the run, by workflow type and timeout."""
    counts: Counter[str] = Counter()
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timeout = event.workflow_task_timed_out_event_attributes.timeout_type
                counts[
                    f"{execution.workflow_type} {TimeoutType.Name(timeout).removeprefix('TIMEOUT_TYPE_')}"
                ] += 1
    return dict(sorted(counts.items()))


async def provisioner_failure(client: Client) -> str:
    """Why the provisioner's pending activity keeps failing, if it does."""
    with contextlib.suppress(Exception):
        description = await client.get_workflow_handle(provisioner_id(CLUSTER)).describe()
        for pending in description.raw_description.pending_activities:
            if pending.attempt > 1 and pending.last_failure.message:
                return (
                    f"{pending.activity_type.name} attempt {pending.attempt}: {pending.last_failure.message}"
                )
    return ""
