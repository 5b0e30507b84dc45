"""Karpenter's condition-set rules (operatorpkg), as NodeClaim status writes follow them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.api.nodeclaim import NODECLAIM_CONDITIONS, NodeClaimStatus
from core.api.nodepool import ConditionStatus

CREATED = datetime(2026, 11, 26, 4, 0, 0, tzinfo=UTC)
LATER = CREATED + timedelta(minutes=1, microseconds=250_000)


def summary(status: NodeClaimStatus) -> list[tuple[str, str, str, str]]:
    return [(c.type, c.status.value, c.reason, c.message) for c in status.conditions]


def test_launched_brings_the_others_as_unknown_and_ready_reconciling() -> None:
    status = NodeClaimStatus()
    assert NODECLAIM_CONDITIONS.set(status, "Launched", "True", "", "", CREATED, 1, LATER)
    assert summary(status) == [
        ("Registered", "Unknown", "AwaitingReconciliation", "object is awaiting reconciliation"),
        ("Initialized", "Unknown", "AwaitingReconciliation", "object is awaiting reconciliation"),
        ("Launched", "True", "Launched", ""),
        ("Ready", "Unknown", "ReconcilingDependents", "Registered=Unknown, Initialized=Unknown"),
    ]
    by_type = {c.type: c for c in status.conditions}
    # Dependents first seen date from the object's creation; the one set now from now, in whole seconds.
    assert by_type["Registered"].last_transition_time == CREATED
    assert by_type["Launched"].last_transition_time == LATER.replace(microsecond=0)
    assert all(c.observed_generation == 1 for c in status.conditions)


def test_ready_turns_true_with_the_last_dependent_and_keeps_its_time_when_set_again() -> None:
    status = NodeClaimStatus()
    for index, condition in enumerate(("Launched", "Registered", "Initialized")):
        NODECLAIM_CONDITIONS.set(
            status, condition, "True", "", "", CREATED, 1, LATER + timedelta(seconds=index)
        )
    ready = status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason, ready.message) == (
        ConditionStatus.TRUE,
        "Ready",
        "",
    )
    assert ready.last_transition_time == LATER.replace(microsecond=0) + timedelta(seconds=2)
    assert status.conditions[-1].type == "Ready"
    assert not NODECLAIM_CONDITIONS.set(
        status, "Initialized", "True", "", "", CREATED, 1, LATER + timedelta(hours=1)
    )
    assert status.condition("Initialized").last_transition_time == ready.last_transition_time  # type: ignore[union-attr]


def test_a_false_dependent_makes_ready_false() -> None:
    status = NodeClaimStatus()
    NODECLAIM_CONDITIONS.set(
        status, "Registered", "False", "MultipleNodesFound", "matched", CREATED, 1, LATER
    )
    ready = status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == (
        ConditionStatus.FALSE,
        "UnhealthyDependents",
    )
    assert "Registered=False" in ready.message


def test_a_reason_changing_under_the_same_status_keeps_the_transition_time() -> None:
    status = NodeClaimStatus()
    NODECLAIM_CONDITIONS.set(
        status, "Initialized", "Unknown", "NodeNotReady", "Node status is NotReady", CREATED, 1, LATER
    )
    first = status.condition("Initialized")
    assert first is not None
    assert NODECLAIM_CONDITIONS.set(
        status,
        "Initialized",
        "Unknown",
        "StartupTaintsExist",
        "StartupTaint",
        CREATED,
        1,
        LATER + timedelta(minutes=5),
    )
    second = status.condition("Initialized")
    assert second is not None and second.reason == "StartupTaintsExist"
    assert second.last_transition_time == first.last_transition_time


def test_independent_conditions_clear_and_dependents_cannot() -> None:
    status = NodeClaimStatus()
    NODECLAIM_CONDITIONS.set(status, "Consolidatable", "True", "", "", CREATED, 1, LATER)
    drifted = status.condition("Consolidatable")
    assert drifted is not None and drifted.last_transition_time == LATER.replace(microsecond=0)
    assert NODECLAIM_CONDITIONS.clear(status, "Consolidatable")
    assert status.condition("Consolidatable") is None
    assert not NODECLAIM_CONDITIONS.clear(status, "Consolidatable")
    assert [c.type for c in status.conditions] == sorted(c.type for c in status.conditions)
    with pytest.raises(ValueError, match="Launched"):
        NODECLAIM_CONDITIONS.clear(status, "Launched")


def test_on_an_object_being_deleted_the_bumped_generation_keeps_ready_true() -> None:
    status = NodeClaimStatus()
    for condition in ("Launched", "Registered", "Initialized"):
        NODECLAIM_CONDITIONS.set(status, condition, "True", "", "", CREATED, 1, LATER)
    # Deletion bumped the generation to 2: a condition written now does not leave the others behind.
    NODECLAIM_CONDITIONS.set(
        status, "Drained", "Unknown", "Draining", "Draining", CREATED, 2, LATER, deleting=True
    )
    ready = status.condition("Ready")
    assert ready is not None and ready.status is ConditionStatus.TRUE
    assert all(c.observed_generation == 2 for c in status.conditions)
    # Without the deletion, a dependent of an older generation is not current: Ready waits for it.
    NODECLAIM_CONDITIONS.set(status, "Launched", "True", "", "", CREATED, 3, LATER)
    ready = status.condition("Ready")
    assert ready is not None and (ready.status, ready.reason) == (
        ConditionStatus.UNKNOWN,
        "ReconcilingDependents",
    )
