"""The root-condition algebra of Karpenter's and the AKS provider's statuses (awslabs/operatorpkg)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.api.condition_set import ConditionSet
from core.api.nodepool import ConditionStatus, StatusCondition

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)


def test_unset_dependents_start_unknown_since_creation_and_the_root_waits_for_them() -> None:
    conditions = ConditionSet([], ["A", "B"], generation=1, created=CREATED, now=NOW)
    a, b, ready = (conditions.get(t) for t in ("A", "B", "Ready"))
    assert a is not None and b is not None and ready is not None
    assert (a.status, a.reason, a.message) == (
        ConditionStatus.UNKNOWN,
        "AwaitingReconciliation",
        "object is awaiting reconciliation",
    )
    assert a.last_transition_time == CREATED and a.observed_generation == 1
    assert (ready.status, ready.reason) == (ConditionStatus.UNKNOWN, "ReconcilingDependents")
    assert conditions.conditions[-1].type == "Ready"  # the root is listed last


def test_the_root_is_true_once_every_dependent_is_true_and_false_when_one_is_false() -> None:
    conditions = ConditionSet([], ["A", "B"], generation=2, created=CREATED, now=NOW)
    conditions.set_true("A")
    conditions.set_true("B")
    ready = conditions.get("Ready")
    assert ready is not None and (ready.status, ready.reason, ready.message) == (
        ConditionStatus.TRUE,
        "Ready",
        "",
    )
    assert ready.last_transition_time == NOW.replace(microsecond=0)
    a = conditions.get("A")
    assert a is not None and a.reason == "A"  # SetTrue's reason is the type

    conditions.set_false("B", "Broken", "B is broken")
    ready = conditions.get("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        ConditionStatus.FALSE,
        "UnhealthyDependents",
        "B=False",
    )


def test_setting_the_same_conditions_again_changes_nothing_not_even_the_times() -> None:
    first = ConditionSet([], ["A"], generation=1, created=CREATED, now=NOW)
    first.set_false("A", "Broken", "broken")
    later = ConditionSet(first.conditions, ["A"], generation=1, created=CREATED, now=NOW + timedelta(hours=1))
    assert not later.set_false("A", "Broken", "broken")
    assert later.conditions == first.conditions


def test_a_new_message_keeps_the_transition_time_and_a_new_status_moves_it() -> None:
    first = ConditionSet([], ["A"], generation=1, created=CREATED, now=NOW)
    first.set_false("A", "Broken", "one")
    later_time = NOW + timedelta(hours=1)
    later = ConditionSet(first.conditions, ["A"], generation=1, created=CREATED, now=later_time)
    later.set_false("A", "Broken", "two")
    a = later.get("A")
    assert a is not None and a.message == "two" and a.last_transition_time == NOW.replace(microsecond=0)
    later.set_true("A")
    a = later.get("A")
    assert a is not None and a.last_transition_time == later_time.replace(microsecond=0)


def test_a_dependent_of_an_older_generation_keeps_the_root_unknown() -> None:
    old = ConditionSet([], ["A", "B"], generation=1, created=CREATED, now=NOW)
    old.set_true("A")
    old.set_true("B")
    newer = ConditionSet(old.conditions, ["A", "B"], generation=2, created=CREATED, now=NOW)
    newer.set_true("A")
    ready = newer.get("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        ConditionStatus.UNKNOWN,
        "ReconcilingDependents",
        "B=True",
    )


def test_conditions_outside_the_set_are_kept() -> None:
    other = StatusCondition(type="NodeRegistrationHealthy", status=ConditionStatus.TRUE, reason="x")
    conditions = ConditionSet([other], ["A"], generation=1, created=CREATED, now=NOW)
    conditions.set_true("A")
    assert conditions.get("NodeRegistrationHealthy") == other
