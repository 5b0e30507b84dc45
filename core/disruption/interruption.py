"""Spot interruption: reading Azure's eviction notice off a Node.

Azure gives a Spot VM about 30 s of notice before it evicts it: the VM's Scheduled Events (the instance metadata
service) post a `Preempt` event with a `NotBefore` deadline. On AKS, the node-problem-detector turns it into the
Node condition `PreemptionScheduled=True`, whose message carries the event's status, its deadline (RFC 1123, GMT)
and its id, e.g. `Preempt Scheduled: Tue, 24 Nov 2026 14:00:30 GMT. For more information, see
https://aka.ms/aks/scheduledevents. EventId: 40B7BD88-...`; once the event has started the deadline is gone
(`Preempt Started. ... EventId: ...`). This reads that condition; it reads no clock.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from core.api.kube import Node
from core.messages import Interruption

PREEMPTION_CONDITION = "PreemptionScheduled"
SPOT_INTERRUPTED = "spot_interrupted"
"""The `message_type` of `karpenter_interruption_received_messages_total` for a Spot eviction notice."""

_MESSAGE = re.compile(
    r"Preempt (?P<status>[A-Za-z]+)(?:: (?P<not_before>[^.]*?))?\..*?EventId: (?P<event_id>[^\s.]+)",
    re.DOTALL,
)


class NoticeError(ValueError):
    """A PreemptionScheduled condition whose message cannot be read."""


def _deadline(text: str | None, node: str) -> datetime | None:
    if not text:
        return None
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        raise NoticeError(
            f"Node {node}: condition {PREEMPTION_CONDITION}: NotBefore {text!r} is not RFC 1123"
        ) from None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def preemption_notice(node: Node) -> Interruption | None:
    """The eviction notice a Node carries (`PreemptionScheduled=True`), or None. `NoticeError`, naming the Node
    and the condition, when the condition is True but its message has no event id or an unreadable deadline."""
    name = node.metadata.name
    for condition in node.status.conditions:
        if condition.type != PREEMPTION_CONDITION or condition.status != "True":
            continue
        match = _MESSAGE.search(condition.message or "")
        if match is None:
            raise NoticeError(
                f"Node {name}: condition {PREEMPTION_CONDITION}: message {condition.message!r} names no "
                "Preempt event (expected 'Preempt <status>[: <NotBefore>]. ... EventId: <id>')"
            )
        return Interruption(
            node=name,
            event_id=match["event_id"],
            status=match["status"],
            not_before=_deadline(match["not_before"], name),
            noticed=condition.last_transition_time,
        )
    return None
