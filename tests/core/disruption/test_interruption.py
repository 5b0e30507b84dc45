"""Reading a Spot eviction notice off a Node: the PreemptionScheduled condition AKS's node-problem-detector
writes from the VM's Scheduled Events, with the event's status, deadline and id in its message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.api.kube import Node
from core.disruption.interruption import NoticeError, preemption_notice

EVENT = "40B7BD88-C56E-44E4-93F6-75CEDACE2869"
SEEN = datetime(2026, 11, 24, 14, 0, 2, tzinfo=UTC)


def node(*conditions: dict[str, Any]) -> Node:
    return Node.model_validate(
        {"metadata": {"name": "aks-spot-abcde"}, "status": {"conditions": list(conditions)}}
    )


def preemption(message: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": "PreemptionScheduled",
        "status": status,
        "reason": "SpotEvictionIncoming",
        "message": message,
        "lastTransitionTime": SEEN.isoformat(),
    }


def test_a_scheduled_preempt_event_gives_its_id_and_deadline() -> None:
    message = (
        "Preempt Scheduled: Tue, 24 Nov 2026 14:00:30 GMT. For more information, see "
        f"https://aka.ms/aks/scheduledevents. EventId: {EVENT}"
    )
    notice = preemption_notice(node({"type": "Ready", "status": "True"}, preemption(message)))
    assert notice is not None
    assert (notice.node, notice.event_id, notice.status) == ("aks-spot-abcde", EVENT, "Scheduled")
    assert notice.not_before == datetime(2026, 11, 24, 14, 0, 30, tzinfo=UTC)
    assert notice.noticed == SEEN


def test_a_started_event_has_no_deadline_left() -> None:
    message = (
        f"Preempt Started. For more information, see https://aka.ms/aks/scheduledevents. EventId: {EVENT}"
    )
    notice = preemption_notice(node(preemption(message)))
    assert notice is not None and notice.status == "Started" and notice.not_before is None


def test_no_notice_without_the_condition_true() -> None:
    assert preemption_notice(node({"type": "Ready", "status": "True"})) is None
    assert preemption_notice(node(preemption("Preempt Scheduled: x. EventId: y", status="False"))) is None


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        ("something else entirely", "names no Preempt event"),
        ("Preempt Scheduled: Tue, 24 Nov 2026 14:00:30 GMT. For more information.", "names no Preempt event"),
        ("Preempt Scheduled: next Tuesday. EventId: abc", "is not RFC 1123"),
    ],
)
def test_an_unreadable_notice_names_the_node_and_the_condition(message: str, complaint: str) -> None:
    with pytest.raises(NoticeError) as raised:
        preemption_notice(node(preemption(message)))
    assert "Node aks-spot-abcde: condition PreemptionScheduled" in str(raised.value)
    assert complaint in str(raised.value)
