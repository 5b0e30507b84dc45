"""`nodewright explain node|nodeclaim NAME`: the story of one node, read back out of the workflow histories.

Karpenter users ask "why was this node created, why was it never consolidated, why was it deleted?" and
correlate logs by hand to answer. Here every answer is already recorded: the NodeClaim's lifecycle workflow
(`nodeclaim/<name>`) started with the pods it was planned for, its launch options and why it was chosen;
its activities record each offering tried, registration, initialization, drain and deletion; its signals
say who asked for the deletion. Every pass of the disruption workflows (`disruption/<cluster>`, all runs,
and manual `consolidation/<cluster>/...`) records, as its `plan_disruption` result, which nodes it kept
and why, and which it chose. This module only reads histories, so it works after the node is gone and
without a running worker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from pydantic import BaseModel, Field
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.azure.names import nodeclaim_of
from core import summaries
from core.disruption.commands import format_price
from core.disruption.validation import abandonment_reason, validate
from core.instancetypes.types import dollars
from core.messages import (
    ActivityName,
    ConditionUpdate,
    DeletionRequested,
    DisruptionCommand,
    DisruptionPassRecord,
    DisruptNodeClaim,
    DrainInput,
    DrainResult,
    Interruption,
    LaunchInput,
    LaunchResult,
    LifecycleInput,
    LifecycleStatus,
    NodeEvent,
    NodeState,
    TerminationReason,
)
from workflows import search_attributes as attributes

T = TypeVar("T")

NODECLAIM_WORKFLOW_TYPE = "NodeClaim"
SHOWN_PODS = 10
"""Pods named in the text output (JSON has every recorded one)."""


class ExplainError(Exception):
    """No story to tell: unknown node or NodeClaim, or Temporal unreachable; the message says which."""


# -------------------------------------------------------------------------------------------------- the story


class Option(BaseModel):
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    price_overlay: str | None = None
    """The NodeOverlay that set the price, if one did."""


class Creation(BaseModel):
    at: datetime
    cluster: str
    nodepool: str
    reason: str
    pods: list[str]
    pod_count: int
    requests: dict[str, str]
    instance_types: str
    options: list[Option]
    """The offerings the lifecycle would try, in order."""
    batch: int
    planned_by: str | None
    """The provisioner (or disruption) workflow that planned it."""


class LaunchAttempt(BaseModel):
    at: datetime
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float
    launched: bool
    price_overlay: str | None = None
    error: str = ""
    """The error kind and message of a failed attempt."""


class DisruptionSpan(BaseModel):
    """Consecutive passes of one disruption workflow that treated the node the same way."""

    workflow_id: str
    first: datetime
    last: datetime
    passes: int
    outcome: str
    """"kept" or "chosen"; "validated" (the fresh plan after a command's validation wait found the command still
    holds: it goes ahead as planned) or "abandoned" (it did not); "repaired" or "repair refused"."""
    reasons: list[str] = Field(default_factory=list)
    """Why it was kept; when chosen, the node's detail (which field drifted, when it expired); when abandoned, why;
    when validated, what a plan made then would do instead, if that differs from the command."""
    method: str = ""
    reason: str = ""
    """Karpenter's disruption reason of the command that chose it."""
    command: str = ""
    """The command's log line."""
    savings_per_hour: float = 0.0
    repack: list[str] = Field(default_factory=list)
    """For a repack: why the new set is cheaper, what it launches and where this node's pods went."""
    dry_run: bool = False
    """Chosen by a dry run (`nodewright consolidate --dry-run`): planned, never carried out."""


class Step(BaseModel):
    """One thing the termination did, with when."""

    at: datetime
    what: str


class Removal(BaseModel):
    requested_at: datetime | None = None
    cause: str = ""
    """Who or what ended it: a deletion, a disruption command, expiration, a failed launch or registration (the
    lifecycle's result says it once it has ended; until then it is read from the signals)."""
    termination_reason: str = ""
    """The lifecycle result's `TerminationReason`, once it has ended."""
    disruption_reason: str = ""
    disruption_workflow: str = ""
    steps: list[Step] = Field(default_factory=list)


class Story(BaseModel):
    nodeclaim: str
    node: str | None
    workflow_id: str
    run_id: str
    status: str
    """The workflow's status: Running, Completed, Failed, Terminated..."""
    phase: str | None
    """The lifecycle phase it ended in (its result), or is in (its Phase search attribute)."""
    closed_at: datetime | None
    created: Creation
    launches: list[LaunchAttempt] = Field(default_factory=list)
    provider_id: str | None = None
    registered_at: datetime | None = None
    initialized_at: datetime | None = None
    failure: str = ""
    disruption: list[DisruptionSpan] = Field(default_factory=list)
    removal: Removal | None = None


# -------------------------------------------------------------------------------------------- history reading


@dataclass(slots=True)
class Call:
    """One activity of a history: its input, and its result or failure once it has one."""

    name: str
    input: list[Payload]
    scheduled: datetime
    result: list[Payload] | None = None
    failure_type: str = ""
    failure_message: str = ""
    ended: datetime | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    name: str
    input: list[Payload]
    at: datetime


@dataclass(slots=True)
class Events:
    """A run's history, split into what explaining needs, in the order it happened."""

    started: HistoryEvent
    items: list[Call | Signal] = field(default_factory=list)
    """Activities (in the order they were scheduled) and signals, as the history interleaves them."""
    result: list[Payload] | None = None
    closed: datetime | None = None


def _time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


LOCAL_ACTIVITY_MARKER = "core_local_activity"


def _local_call(event: HistoryEvent) -> Call | None:
    """A local activity, from the marker that records it (its input is not kept; it ran within the task)."""
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in marker.details:
        return None
    name = str(json.loads(marker.details["data"].payloads[0].data)["activity_type"])
    call = Call(name, [], _time(event), ended=_time(event))
    if marker.HasField("failure"):
        call.failure_type = marker.failure.application_failure_info.type
        call.failure_message = marker.failure.message
    else:
        call.result = list(marker.details["result"].payloads)
    return call


def read_events(events: Sequence[HistoryEvent]) -> Events:
    """Activities (completed or failed; local ones as their markers) and signals of one run, keyed back to
    when each was scheduled."""
    if not events or events[0].event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise ExplainError("history does not start with WorkflowExecutionStarted")
    found = Events(started=events[0])
    calls: dict[int, Call] = {}
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            call = Call(scheduled.activity_type.name, list(scheduled.input.payloads), _time(event))
            calls[event.event_id] = call
            found.items.append(call)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            call = calls[completed.scheduled_event_id]
            call.result, call.ended = list(completed.result.payloads), _time(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = event.activity_task_failed_event_attributes
            call = calls[failed.scheduled_event_id]
            call.failure_type = failed.failure.application_failure_info.type
            call.failure_message, call.ended = failed.failure.message, _time(event)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED and (local := _local_call(event)) is not None:
            found.items.append(local)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            found.items.append(Signal(signaled.signal_name, list(signaled.input.payloads), _time(event)))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            found.result = list(event.workflow_execution_completed_event_attributes.result.payloads)
            found.closed = _time(event)
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
        ):
            found.closed = _time(event)
    return found


class Decoder:
    """Payloads back into our message types, with the client's (pydantic) data converter."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def one(self, payloads: Sequence[Payload], kind: type[T]) -> T:
        [value] = await self.client.data_converter.decode(list(payloads), [kind])
        return value  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------------- the lifecycle part


def _option_price(micros: int) -> float:
    return round(dollars(micros), 6)


_TAINTS = (ActivityName.TAINT_FOR_TERMINATION, ActivityName.BEGIN_TERMINATION)
"""The steps that taint the Node (since the `begin-termination` patch, one that also marks the NodeClaim deleting)."""


async def nodeclaim_story(
    decoder: Decoder, workflow_id: str, run_id: str, status: str, events: Events
) -> Story:
    """Creation, launch, registration, initialization and removal, from a NodeClaim workflow's history."""
    request = await decoder.one(
        events.started.workflow_execution_started_event_attributes.input.payloads, LifecycleInput
    )
    claim = request.nodeclaim
    story = Story(
        nodeclaim=claim.name,
        node=None,
        workflow_id=workflow_id,
        run_id=run_id,
        status=status,
        phase=None,
        closed_at=events.closed,
        created=Creation(
            at=_time(events.started),
            cluster=request.cluster,
            nodepool=claim.nodepool,
            reason=claim.reason,
            pods=claim.pods,
            pod_count=claim.pod_count,
            requests=claim.requests,
            instance_types=claim.instance_types,
            options=[
                Option(
                    instance_type=o.instance_type,
                    zone=o.zone,
                    capacity_type=o.capacity_type,
                    price_per_hour=_option_price(o.price_micros),
                    price_overlay=o.price_overlay,
                )
                for o in claim.launch_candidates
            ],
            batch=claim.batch,
            planned_by=request.provisioner_workflow_id,
        ),
    )
    removal = Removal()
    evicted = 0
    for call in events.items:
        if isinstance(call, Signal):
            await _signal(decoder, removal, call, claim.name)
            continue
        ended = call.ended or call.scheduled
        if call.name == ActivityName.LAUNCH_NODECLAIM:
            offering = (await decoder.one(call.input, LaunchInput)).offering
            attempt = LaunchAttempt(
                at=ended,
                instance_type=offering.instance_type,
                zone=offering.zone,
                capacity_type=offering.capacity_type,
                price_per_hour=_option_price(offering.price_micros),
                launched=call.result is not None,
                price_overlay=offering.price_overlay,
            )
            if call.result is not None:
                story.provider_id = (await decoder.one(call.result, LaunchResult)).provider_id
            elif call.ended is not None:
                attempt.error = f"{call.failure_type}: {call.failure_message}"
            if call.ended is not None:
                story.launches.append(attempt)
        elif call.name == ActivityName.REGISTER_NODECLAIM and call.result is not None:
            node = await decoder.one(call.result, str)
            if node:
                story.node, story.registered_at = node, ended
        elif call.name == ActivityName.REGISTER_NODECLAIM and call.failure_type and story.launches:
            # The instance's create failed after the launch returned: that launch did not launch after all.
            attempt = story.launches[-1]
            attempt.launched = False
            attempt.error = f"its VM's create failed after the launch returned: {call.failure_type}: {call.failure_message}"
        elif call.name == ActivityName.INITIALIZE_NODECLAIM and call.result is not None:
            state = await decoder.one(call.result, NodeState)
            if state.initialized and story.initialized_at is None:
                story.initialized_at = ended
            if (not state.exists or state.deleting) and not removal.cause:
                removal.cause, removal.requested_at = summaries.node_deleted(state.name), ended
        elif call.name == ActivityName.UPDATE_NODECLAIM:
            update = await decoder.one(call.input, ConditionUpdate)
            if update.status == "False" and update.type in ("Launched", "Registered"):
                story.failure = f"{update.type}=False ({update.reason}): {update.message}"
                removal.cause = removal.cause or story.failure
                removal.requested_at = removal.requested_at or ended
        elif call.name in _TAINTS and call.result is not None:
            if await decoder.one(call.result, bool):
                removal.steps.append(Step(at=ended, what="tainted karpenter.sh/disrupted:NoSchedule"))
        elif call.name == ActivityName.DRAIN_NODE and call.result is not None:
            drain = await decoder.one(call.result, DrainResult)
            evicted += len(drain.evicted)
            if drain.remaining == 0:
                forced = (await decoder.one(call.input, DrainInput)).force
                how = " (forced at its deadline)" if forced else ""
                removal.steps.append(Step(at=ended, what=f"drained: {evicted} pod(s) evicted{how}"))
            elif drain.blocked:
                pod, why = next(iter(drain.blocked.items()))
                blocked = f"drain: {len(drain.blocked)} eviction(s) blocked, e.g. {pod}: {why}"
                if not removal.steps or removal.steps[-1].what != blocked:
                    removal.steps.append(Step(at=ended, what=blocked))
        elif call.name == ActivityName.DELETE_UNREGISTERED_NODE and call.result is not None:
            if late := await decoder.one(call.result, str):
                removal.steps.append(Step(at=ended, what=f"node {late} deleted (it joined after all)"))
        elif call.name in _DELETIONS and call.result is not None:
            removal.steps.append(Step(at=ended, what=_DELETIONS[call.name]))
    if events.result is not None:
        final = await decoder.one(events.result, LifecycleStatus)
        story.phase = final.phase.value
        story.node = story.node or final.node
        if final.reason:
            removal.cause = final.reason
        if final.termination_reason is not None:
            removal.termination_reason = final.termination_reason.value
    if not removal.cause and removal.steps:
        # Nothing asked for it: the lifecycle's expireAfter timer fired while it ran.
        expire = claim.expire_after_seconds
        removal.cause = (
            summaries.expired(expire)
            if expire is not None and story.initialized_at is not None
            else "unknown (no deletion was requested)"
        )
    if removal.cause or removal.steps:
        story.removal = removal
    return story


_DELETIONS: dict[str, str] = {
    ActivityName.DELETE_INSTANCE: "instance deleted",
    ActivityName.DELETE_NODE: "node deleted",
    ActivityName.DELETE_NODECLAIM: "NodeClaim deleted (finalizer removed)",
}


async def _signal(decoder: Decoder, removal: Removal, signal: Signal, nodeclaim: str) -> None:
    """The first signal that asked for termination is the cause, as the workflow keeps the first (in the
    workflow's words)."""
    cause = ""
    if signal.name == "delete":
        request = await decoder.one(signal.input, DeletionRequested)
        cause = (
            summaries.garbage_collected(nodeclaim)
            if request.reason is TerminationReason.GARBAGE_COLLECTED
            else summaries.nodeclaim_deleted(nodeclaim, request.by)
        )
    elif signal.name == "node_event":
        event = await decoder.one(signal.input, NodeEvent)
        cause = summaries.node_deleted(event.node) if event.deleting else ""
    elif signal.name == "interrupt":
        cause = summaries.interrupted(await decoder.one(signal.input, Interruption))
    elif signal.name == "disrupt":
        disrupt = await decoder.one(signal.input, DisruptNodeClaim)
        cause = summaries.disrupted(disrupt)
        if not removal.cause:
            removal.disruption_reason, removal.disruption_workflow = disrupt.reason, disrupt.command
    if cause and not removal.cause:
        removal.cause, removal.requested_at = cause, signal.at


# ---------------------------------------------------------------------------------------- the disruption part


@dataclass(frozen=True, slots=True)
class Pass:
    workflow_id: str
    record: DisruptionPassRecord
    """With an unchanged pass's commands and kept nodes filled in from the run's previous full record."""
    validated: DisruptionCommand | None = None
    """For the fresh plan after a command's validation wait (`record.validating`): that command as the run planned
    it, which is what goes ahead if anything does."""
    dry_run: bool = False
    """A pass of a dry run, whose commands are never carried out."""


async def pass_records(decoder: Decoder, workflow_id: str, events: Events) -> list[Pass]:
    """Every `plan_disruption` result of one run, unchanged passes expanded, each validation's fresh plan with the
    command it validates."""
    passes: list[Pass] = []
    previous: DisruptionPassRecord | None = None
    planned: dict[str, DisruptionCommand] = {}
    started = events.started.workflow_execution_started_event_attributes.input.payloads
    request = await decoder.one(started[:1], dict) if started else {}
    dry_run = bool(request.get("dry_run"))
    for item in events.items:
        if isinstance(item, Signal) or item.name != ActivityName.PLAN_DISRUPTION or item.result is None:
            continue
        record = await decoder.one(item.result, DisruptionPassRecord)
        if record.validating:
            passes.append(Pass(workflow_id, record, planned.get(record.validating)))
            continue
        if record.unchanged and previous is not None:
            record = previous.model_copy(
                update={"at": record.at, "unchanged": True, "repairs": record.repairs}
            )
        elif not record.unchanged:
            previous = record
        planned.update((command.message, command) for command in record.commands)
        passes.append(Pass(workflow_id, record, dry_run=dry_run))
    return passes


def _about(node: str | None, nodeclaim: str) -> Callable[[str, str | None], bool]:
    """Whether a node and NodeClaim named in a record are the ones explained."""
    return lambda other_node, other_claim: (
        other_claim == nodeclaim or (node is not None and other_node == node)
    )


def _one_pass(record: DisruptionPassRecord, outcome: str, **fields: Any) -> DisruptionSpan:
    return DisruptionSpan(
        workflow_id="", first=record.at, last=record.at, passes=1, outcome=outcome, **fields
    )


def _of_command(command: DisruptionCommand) -> dict[str, Any]:
    """A span's fields that name the command."""
    return {
        "method": command.method,
        "reason": command.reason,
        "command": command.message,
        "savings_per_hour": round(dollars(command.savings_micros), 6),
    }


def _mention(
    record: DisruptionPassRecord, node: str | None, nodeclaim: str, dry_run: bool = False
) -> DisruptionSpan | None:
    """How one pass treated the node, as a one-pass span (None when it did not consider it)."""
    about = _about(node, nodeclaim)
    for command in record.commands:
        chosen = [c for c in command.candidates if about(c.node, c.nodeclaim)]
        if chosen:
            return _one_pass(
                record,
                "chosen",
                reasons=[c.detail for c in chosen if c.detail],
                repack=_repack_lines(command, {c.node for c in chosen}),
                dry_run=dry_run,
                **_of_command(command),
            )
    for repair in record.repairs:
        if about(repair.node, repair.nodeclaim):
            outcome = "repair refused" if repair.refused else "repaired"
            return _one_pass(record, outcome, reason=repair.condition, reasons=[repair.message])
    for kept in record.kept:
        if about(kept.node, kept.nodeclaim):
            return _one_pass(record, "kept", reasons=[reason.message for reason in kept.reasons])
    return None


def _validation(one: Pass, node: str | None, nodeclaim: str) -> DisruptionSpan | None:
    """What the validation of a command that disrupts the node decided, as `core.disruption.validation` decides it
    from the fresh plan (None when the command is not for this node): it goes ahead as planned, with what a plan
    made then would do instead when that differs, or it is abandoned, and why."""
    about = _about(node, nodeclaim)
    command, fresh = one.validated, one.record
    mine = [c for c in command.candidates if about(c.node, c.nodeclaim)] if command else []
    if command is None or not mine:
        return None
    validated, why = validate(command, fresh)
    if validated is None or not any(about(c.node, c.nodeclaim) for c in validated.candidates):
        why = why or abandonment_reason(command.model_copy(update={"candidates": mine}), fresh)
        return _one_pass(fresh, "abandoned", reasons=[why], **_of_command(command))
    return _one_pass(fresh, "validated", reasons=_instead(command, fresh), **_of_command(command))


def _instead(command: DisruptionCommand, fresh: DisruptionPassRecord) -> list[str]:
    """What the fresh plan would do with the command's candidates, when it is not what the command does."""
    nodes = {c.node for c in command.candidates}
    other = next((c for c in fresh.commands if {d.node for d in c.candidates} == nodes), None)
    if other is None or _outline(other) == _outline(command):
        return []
    repack = other.repack
    launches = (
        [*repack.launched, *(f"room on {line}" for line in repack.receiving)]
        if repack is not None
        else [
            f"{r.instance_type} ({format_price(r.price_micros or 0)}/h): {len(r.pods)} pods"
            for r in other.replacements
        ]
    )
    would = f"launch {', '.join(launches)}" if launches else f"{other.decision} them"
    return [
        f"the fresh plan would {would} (savings: {format_price(other.savings_micros)}/h); validation only checks "
        "that the planned command still holds, and the planned command is what goes ahead"
    ]


def _outline(command: DisruptionCommand) -> tuple[object, ...]:
    """What a command does as its lines say it, however its nodes are ordered and named and whichever of a
    Deployment's like pods goes where: each new node's type, price and pod count, and the pods each node that stays
    takes."""
    replacements = sorted(
        (r.instance_type or "", r.price_micros or 0, len(r.pods)) for r in command.replacements
    )
    staying = sorted(Counter(command.repack.staying.values()).items()) if command.repack is not None else []
    return command.decision, command.savings_micros, replacements, staying


def _repack_lines(command: DisruptionCommand, nodes: set[str]) -> list[str]:
    """A repack's sentence, its new nodes and nodes that take pods, and where the chosen node's pods went."""
    repack = command.repack
    if repack is None:
        return []
    moves = [move for move in repack.moves if move.split(": ", 1)[-1].split(" -> ", 1)[0] in nodes]
    return [
        f"why cheaper: {repack.message}",
        *(f"retires {line}" for line in repack.retired),
        *(f"launches {line}" for line in repack.launched),
        *(f"room on {line}" for line in repack.receiving),
        *(f"pod {move}" for move in moves),
    ]


def disruption_spans(passes: Sequence[Pass], node: str | None, nodeclaim: str) -> list[DisruptionSpan]:
    """The passes that mention the node, consecutive identical ones of the same workflow merged into spans."""
    spans: list[DisruptionSpan] = []
    open_span: dict[str, DisruptionSpan | None] = {}
    for one in sorted(passes, key=lambda p: p.record.at):
        if one.record.validating:
            seen = _validation(one, node, nodeclaim)
            if seen is None:  # it checks a command for other nodes: not a pass over this one
                continue
        else:
            seen = _mention(one.record, node, nodeclaim, one.dry_run)
        current = open_span.get(one.workflow_id)
        if seen is None:
            open_span[one.workflow_id] = None
            continue
        if current is not None and _same(current, seen):
            current.last, current.passes = seen.last, current.passes + 1
            continue
        seen.workflow_id = one.workflow_id
        spans.append(seen)
        open_span[one.workflow_id] = seen
    return spans


def _same(a: DisruptionSpan, b: DisruptionSpan) -> bool:
    return (a.outcome, a.reasons, a.command, a.method) == (b.outcome, b.reasons, b.command, b.method)


def disruption_query(cluster: str) -> str:
    """Every run of the cluster's disruption loop and of its manual consolidations."""
    return f'WorkflowId = "disruption/{cluster}" OR WorkflowId STARTS_WITH "consolidation/{cluster}/"'


# ------------------------------------------------------------------------------------------------- assembling


class Explainer:
    """Finds a NodeClaim's workflow and the disruption workflows of its cluster, and tells the story."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.decoder = Decoder(client)

    async def _history(self, workflow_id: str, run_id: str | None = None) -> Events:
        history = await self.client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        return read_events(history.events)

    async def _described(self, workflow_id: str) -> tuple[str, str, str | None] | None:
        """(run id, status, the Phase it published) of the latest run, None when there is no such workflow."""
        try:
            description = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        status = description.status.name.replace("_", " ").title() if description.status else "Unknown"
        phase = description.typed_search_attributes.get(attributes.PHASE)
        return description.run_id or "", status, phase

    async def nodeclaim(self, name: str) -> Story:
        workflow_id = f"nodeclaim/{name}"
        found = await self._described(workflow_id)
        if found is None:
            raise ExplainError(
                f"NodeClaim {name}: no workflow {workflow_id} in namespace {self.client.namespace} "
                "(a NodeClaim nodewright did not create, or a different Temporal namespace)"
            )
        run_id, status, phase = found
        events = await self._history(workflow_id, run_id)
        story = await nodeclaim_story(self.decoder, workflow_id, run_id, status, events)
        story.phase = story.phase or phase
        story.disruption = await self._disruption(story)
        return story

    async def node(self, name: str) -> Story:
        # The AKS provider names the VM, and so the Node, `aks-<nodeclaim>`: try that NodeClaim first.
        guess = nodeclaim_of(name)
        if await self._described(f"nodeclaim/{guess}") is not None:
            story = await self.nodeclaim(guess)
            if story.node in (None, name):
                return story
        async for execution in self.client.list_workflows(f'WorkflowType = "{NODECLAIM_WORKFLOW_TYPE}"'):
            events = await self._history(execution.id, execution.run_id)
            if await self._registered_node(events) == name:
                return await self.nodeclaim(execution.id.removeprefix("nodeclaim/"))
        raise ExplainError(
            f"Node {name}: no NodeClaim workflow in namespace {self.client.namespace} registered it "
            "(not a node nodewright launched, or not registered yet)"
        )

    async def _registered_node(self, events: Events) -> str | None:
        for item in events.items:
            if isinstance(item, Call) and item.name == ActivityName.REGISTER_NODECLAIM and item.result:
                node = await self.decoder.one(item.result, str)
                if node:
                    return node
        return None

    async def _disruption(self, story: Story) -> list[DisruptionSpan]:
        return await self.disruption(story.created.cluster, story.node, story.nodeclaim, story.created.at)

    async def disruption(
        self, cluster: str, node: str | None, nodeclaim: str, since: datetime
    ) -> list[DisruptionSpan]:
        """How every disruption pass of the cluster since `since` treated the node, as spans."""
        passes: list[Pass] = []
        async for execution in self.client.list_workflows(disruption_query(cluster)):
            if execution.close_time is not None and execution.close_time < since:
                continue
            events = await self._history(execution.id, execution.run_id)
            passes.extend(await pass_records(self.decoder, execution.id, events))
        return disruption_spans(passes, node, nodeclaim)


async def explain(client: Client, kind: str, name: str) -> Story:
    explainer = Explainer(client)
    return await (explainer.node(name) if kind == "node" else explainer.nodeclaim(name))


# ----------------------------------------------------------------------------------------------------- output


def _at(moment: datetime | None) -> str:
    """As Karpenter's log lines stamp time: UTC, milliseconds."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dollars(price: float) -> str:
    return f"${price:.4f}/h"


def _overlaid(overlay: str | None) -> str:
    return f", price adjusted by overlay {overlay}" if overlay else ""


def render_text(story: Story, out: TextIO) -> None:
    """A readable timeline: creation, launch, disruption passes, removal."""
    created = story.created

    def line(at: datetime | None, text: str) -> None:
        print(f"  {_at(at)}  {text}", file=out)

    node = f" (Node {story.node})" if story.node else ""
    print(
        f"NodeClaim {story.nodeclaim}{node}, NodePool {created.nodepool}, cluster {created.cluster}", file=out
    )
    ended = f", closed {_at(story.closed_at)}" if story.closed_at else ""
    phase = f", phase {story.phase}" if story.phase else ""
    print(f"Workflow {story.workflow_id}: {story.status}{phase}{ended}", file=out)

    print("\nCreated", file=out)
    by = (
        f" by {created.planned_by}" + (f" (batch {created.batch})" if created.batch else "")
        if created.planned_by
        else ""
    )
    line(created.at, f"lifecycle started{by}")
    if created.reason:
        print(f"    why: {created.reason}", file=out)
    shown = ", ".join(created.pods[:SHOWN_PODS])
    more = created.pod_count - min(len(created.pods), SHOWN_PODS)
    if created.pod_count:
        print(
            f"    for {created.pod_count} pod(s): {shown}" + (f" and {more} more" if more > 0 else ""),
            file=out,
        )
    if created.requests:
        print(f"    requests: {', '.join(f'{k} {v}' for k, v in created.requests.items())}", file=out)
    if created.options:
        options = ", ".join(
            f"{o.instance_type}/{o.zone}/{o.capacity_type} {_dollars(o.price_per_hour)}{_overlaid(o.price_overlay)}"
            for o in created.options[:5]
        )
        others = len(created.options) - 5
        print(
            f"    launch options in order ({len(created.options)}): {options}"
            + (", ..." if others > 0 else ""),
            file=out,
        )

    print("\nLaunch", file=out)
    for attempt in story.launches:
        offering = f"{attempt.instance_type} {attempt.capacity_type} in {attempt.zone}"
        offering += f" ({_dollars(attempt.price_per_hour)}{_overlaid(attempt.price_overlay)})"
        if attempt.launched:
            line(attempt.at, f"launched {offering}, provider-id {story.provider_id}")
        else:
            line(attempt.at, f"could not launch {offering}: {attempt.error}")
    if story.registered_at:
        line(story.registered_at, f"registered as Node {story.node}")
    if story.initialized_at:
        line(story.initialized_at, "initialized")
    if story.failure:
        print(f"    failed: {story.failure}", file=out)

    print("\nDisruption", file=out)
    if not story.disruption:
        print("  no disruption pass considered it", file=out)
    for span in story.disruption:
        when = _at(span.first) if span.passes == 1 else f"{_at(span.first)} - {_at(span.last)}"
        passes = f"{span.passes} pass{'es' if span.passes != 1 else ''} of {span.workflow_id}"
        if span.outcome == "kept":
            print(f"  {when}  kept ({passes}): {'; '.join(span.reasons) or 'no reason recorded'}", file=out)
        elif span.outcome in ("repaired", "repair refused"):
            print(f"  {when}  {span.outcome} ({passes}, {span.reason}): {'; '.join(span.reasons)}", file=out)
        elif span.outcome == "validated":
            print(
                f"  {when}  validated ({passes}, {span.method}): goes ahead as planned: {span.command}",
                file=out,
            )
            for detail in span.reasons:
                print(f"    {detail}", file=out)
        elif span.outcome == "abandoned":
            print(f"  {when}  abandoned at validation ({passes}, {span.method}): {span.command}", file=out)
            for detail in span.reasons:
                print(f"    why: {detail}", file=out)
        else:
            saves = f", saves {_dollars(span.savings_per_hour)}" if span.savings_per_hour else ""
            dry_run = "dry run, not carried out; " if span.dry_run else ""
            print(
                f"  {when}  chosen ({dry_run}{passes}, {span.method}, {span.reason}{saves}): {span.command}",
                file=out,
            )
            for detail in span.reasons:
                print(f"    {detail}", file=out)
            for text in span.repack:
                print(f"    {text}", file=out)

    print("\nRemoval", file=out)
    removal = story.removal
    if removal is None:
        print("  still running" if story.closed_at is None else "  nothing recorded", file=out)
    else:
        code = f" [{removal.termination_reason}]" if removal.termination_reason else ""
        line(removal.requested_at, f"why: {removal.cause}{code}")
        for step in removal.steps:
            line(step.at, step.what)
    if story.phase and story.closed_at:
        print(f"\nFinal phase: {story.phase}", file=out)


def render_json(story: Story, out: TextIO) -> None:
    json.dump(story.model_dump(mode="json"), out, indent=2)
    out.write("\n")


async def _explain_from_settings(kind: str, name: str) -> Story:
    from workers.settings import load_settings
    from workers.worker import TemporalUnreachableError, connect_configured

    settings = load_settings()
    unreachable = f"cannot reach Temporal at {settings.temporal_address} (NODEWRIGHT_TEMPORAL_ADDRESS)"
    try:
        client = await connect_configured(settings.temporal_connection())
    except TemporalUnreachableError as error:
        raise ExplainError(str(error)) from None
    try:
        return await explain(client, kind, name)
    except RPCError as error:
        if error.status is RPCStatusCode.UNAVAILABLE:
            raise ExplainError(f"{unreachable}: {error}") from None
        raise


def explain_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`nodewright explain`: 0 with the story, 1 with a one-line error."""
    try:
        story = asyncio.run(_explain_from_settings(args.kind, args.name))
    except ExplainError as error:
        print(f"error: {error}", file=err)
        return 1
    if args.output == "json":
        render_json(story, out)
    else:
        render_text(story, out)
    return 0
