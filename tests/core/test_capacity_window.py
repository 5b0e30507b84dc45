"""CapacityWindow: the model's validation, the shift of a cron by the lead time into Temporal calendars (checked
against `core.cron` both ways), overlapping windows, and one window per target."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.api.capacitywindow import DEFAULT_LEAD_TIME, CapacityWindow
from core.api.meta import InvalidObjectError
from core.capacity_window import (
    ALL_DAYS_OF_MONTH,
    SCHEDULE_NOT_SHIFTABLE,
    WINDOWS_OVERLAP,
    Calendar,
    ShiftError,
    conflicts,
    current_or_next,
    judge,
    overlap_problem,
    shift,
    window_of_run,
)
from core.cron import Schedule


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def manifest(name: str = "weekdays", created: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "targetRef": {"apiGroup": "karpenter.sh", "kind": "NodePool", "name": "fixed"},
        "schedule": "0 8 * * mon-fri",
        "duration": "10h",
        "replicas": 5,
    }
    body.update(spec)
    metadata: dict[str, Any] = {"name": name}
    if created:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": "nodewright.io/v1alpha1",
        "kind": "CapacityWindow",
        "metadata": metadata,
        "spec": body,
    }


# --- the model -----------------------------------------------------------------------------------------------


def test_a_window_on_a_static_nodepool_parses_with_the_default_lead_time() -> None:
    window = CapacityWindow.parse(manifest())

    assert window.spec.lead_time == DEFAULT_LEAD_TIME
    assert window.spec.lead == timedelta(minutes=5)
    assert window.spec.window == timedelta(hours=10)
    assert window.spec.target_ref.api_version == "karpenter.sh/v1"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"schedule": "0 25 * * *"}, "spec.schedule", "outside 0-23"),
        ({"schedule": "0 0 30 feb *"}, "spec.schedule", "never fires"),
        ({"duration": "0s"}, "spec.duration", "longer than 0s"),
        ({"duration": "10 hours"}, "spec.duration", "not a duration"),
        ({"leadTime": "Never"}, "spec.leadTime", "not allowed"),
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        (
            {"targetRef": {"apiGroup": "apps", "kind": "NodePool", "name": "fixed"}},
            "spec.targetRef.apiGroup",
            'group "karpenter.sh"',
        ),
        (
            {
                "targetRef": {
                    "apiGroup": "karpenter.sh",
                    "kind": "NodePool",
                    "name": "fixed",
                    "namespace": "a",
                }
            },
            "spec.targetRef.namespace",
            "cluster-scoped",
        ),
        (
            {"targetRef": {"apiGroup": "autoscaling.x-k8s.io", "kind": "CapacityBuffer", "name": "spare"}},
            "spec.targetRef.namespace",
            "namespaced",
        ),
        (
            {"targetRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}},
            "spec.targetRef.kind",
            "NodePool",
        ),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(change: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InvalidObjectError) as refused:
        CapacityWindow.parse(manifest(**change))

    problem = next(p for p in refused.value.problems if p.startswith(field))
    assert words in problem


def test_a_window_on_a_capacity_buffer_names_its_namespace() -> None:
    ref = {
        "apiGroup": "autoscaling.x-k8s.io",
        "kind": "CapacityBuffer",
        "name": "spare",
        "namespace": "team-a",
    }
    window = CapacityWindow.parse(manifest(targetRef=ref))

    assert window.spec.target_ref.api_version == "autoscaling.x-k8s.io/v1beta1"
    assert window.spec.target_ref.describe() == "CapacityBuffer team-a/spare"


# --- shifting a cron by the lead time ------------------------------------------------------------------------


def test_weekday_mornings_with_a_five_minute_lead_are_one_calendar() -> None:
    [calendar] = shift(Schedule.parse("0 8 * * mon-fri"), timedelta(minutes=5))

    assert (calendar.seconds, calendar.minutes, calendar.hours) == ((0,), (55,), (7,))
    assert calendar.days_of_week == (1, 2, 3, 4, 5)
    assert calendar.days_of_month == ALL_DAYS_OF_MONTH


def test_a_lead_across_midnight_moves_the_day_of_week_back() -> None:
    [calendar] = shift(Schedule.parse("0 0 * * mon"), timedelta(minutes=5))

    assert (calendar.minutes, calendar.hours, calendar.days_of_week) == ((55,), (23,), (0,))
    assert calendar.matches(at(2026, 11, 29, 23, 55))  # a Sunday
    assert Schedule.parse("0 0 * * mon").matches(at(2026, 11, 30, 0, 0))


def test_a_lead_in_seconds_fires_on_that_second() -> None:
    [calendar] = shift(Schedule.parse("30 9 * * *"), timedelta(seconds=20))

    assert (calendar.seconds, calendar.minutes, calendar.hours) == ((40,), (29,), (9,))


def test_times_of_day_that_shift_differently_get_their_own_calendars() -> None:
    calendars = shift(Schedule.parse("*/15 8-17 * * *"), timedelta(minutes=5))

    assert {(c.hours, c.minutes) for c in calendars} == {
        ((7,), (55,)),
        (tuple(range(8, 17)), (10, 25, 40, 55)),
        ((17,), (10, 25, 40)),
    }


@pytest.mark.parametrize(
    ("schedule", "field"),
    [("0 0 1 * *", "day of month"), ("0 0 * jan *", "month"), ("0 0 1 * mon", "day of month")],
)
def test_a_shift_a_calendar_cannot_carry_is_refused(schedule: str, field: str) -> None:
    with pytest.raises(ShiftError) as refused:
        shift(Schedule.parse(schedule), timedelta(minutes=5))

    assert "spec.schedule" in str(refused.value) and "spec.leadTime" in str(refused.value)
    assert f"restricts the {field}" in str(refused.value)


def test_a_restricted_day_of_month_shifts_when_the_lead_stays_on_the_same_day() -> None:
    [calendar] = shift(Schedule.parse("30 0 1 jan *"), timedelta(minutes=5))

    assert (calendar.minutes, calendar.hours, calendar.days_of_month, calendar.months) == (
        (25,),
        (0,),
        (1,),
        (1,),
    )


def test_both_day_fields_restricted_fire_on_either_day_through_two_calendars() -> None:
    calendars = shift(Schedule.parse("0 9 13 * fri"), timedelta(minutes=5))

    assert len(calendars) == 2
    assert any(c.matches(at(2026, 11, 13, 8, 55)) for c in calendars)  # the 13th (a Friday too)
    assert any(c.matches(at(2026, 12, 13, 8, 55)) for c in calendars)  # the 13th, a Sunday
    assert any(c.matches(at(2026, 12, 4, 8, 55)) for c in calendars)  # a Friday, the 4th
    assert not any(c.matches(at(2026, 12, 5, 8, 55)) for c in calendars)


def field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    item = st.one_of(
        value.map(str),
        st.tuples(value, value).map(lambda pair: f"{min(pair)}-{max(pair)}"),
        st.tuples(value, st.integers(1, 7)).map(lambda pair: f"{pair[0]}/{pair[1]}"),
        st.integers(2, 20).map(lambda step: f"*/{step}"),
        *(st.sampled_from(names),) if names else (),
    )
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


CRONS = st.tuples(
    field(0, 59),
    field(0, 23),
    st.one_of(st.just("*"), field(1, 28)),
    st.one_of(st.just("*"), st.just("*"), field(1, 12)),
    field(0, 6, ("mon", "fri", "sun")),
).map(" ".join)
LEADS = st.one_of(
    st.integers(0, 3 * 3600), st.integers(0, 30).map(lambda minutes: minutes * 60), st.integers(0, 3 * 86400)
).map(lambda seconds: timedelta(seconds=seconds))
STARTS = st.datetimes(datetime(2025, 1, 1), datetime(2031, 12, 31)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)


@settings(max_examples=150, deadline=None)
@given(CRONS, LEADS, STARTS)
def test_every_shifted_fire_time_plus_the_lead_is_a_cron_fire_time_and_back(
    expression: str, lead: timedelta, start: datetime
) -> None:
    schedule = Schedule.parse(expression)
    try:
        calendars = shift(schedule, lead)
    except ShiftError:
        # Refused only when some time of day moves to the day before while a day field or the month is fixed.
        crosses = any(
            h * 3600 + m * 60 < lead.total_seconds() for h in schedule.hours for m in schedule.minutes
        )
        assert crosses and (not schedule.any_day_of_month or len(schedule.months) < 12)
        return
    # Every cron fire time, less the lead, is a calendar fire time...
    moment = start
    for _ in range(40):
        fire = schedule.next_after(moment)
        if fire is None:
            break
        assert any(c.matches(fire - lead) for c in calendars), f"{fire - lead} is not fired for {fire}"
        moment = fire
    # ...and every calendar fire time (the calendars fire at one second of the minute), plus the lead, is a cron
    # fire time.
    [second] = {s for c in calendars for s in c.seconds}
    minute = start.replace(second=second, microsecond=0)
    for offset in range(0, 3 * 24 * 60, 1):
        candidate = minute + timedelta(minutes=offset)
        if any(c.matches(candidate) for c in calendars):
            assert schedule.matches(candidate + lead), (
                f"{candidate} fires but {candidate + lead} is no window"
            )


def test_a_calendar_matches_all_its_fields_at_once() -> None:
    calendar = Calendar(seconds=(0,), minutes=(55,), hours=(7,), days_of_week=(1,))

    assert calendar.matches(at(2026, 11, 30, 7, 55))  # a Monday
    assert not calendar.matches(at(2026, 11, 30, 7, 55, 1))
    assert not calendar.matches(at(2026, 12, 1, 7, 55))  # a Tuesday


# --- windows in time, overlap, conflicts --------------------------------------------------------------------


def test_the_window_open_now_or_the_next_one() -> None:
    weekdays = Schedule.parse("0 8 * * mon-fri")
    ten_hours = timedelta(hours=10)

    during = current_or_next(weekdays, ten_hours, at(2026, 11, 26, 9, 0))  # Thursday
    after = current_or_next(weekdays, ten_hours, at(2026, 11, 27, 18, 0))  # Friday, as it closes
    assert during is not None and during.opens == at(2026, 11, 26, 8) and during.is_open(at(2026, 11, 26, 9))
    assert (
        after is not None and after.opens == at(2026, 11, 30, 8) and not after.is_open(at(2026, 11, 27, 18))
    )


def test_a_scheduled_run_serves_the_window_a_lead_time_later() -> None:
    window = window_of_run(at(2026, 11, 26, 7, 55), timedelta(minutes=5), timedelta(hours=10))

    assert (window.opens, window.closes) == (at(2026, 11, 26, 8), at(2026, 11, 26, 18))


def test_windows_whose_runs_would_overlap_are_refused() -> None:
    now = at(2026, 11, 26)
    problem = overlap_problem(Schedule.parse("0 * * * *"), timedelta(minutes=5), timedelta(hours=1), now)

    assert problem is not None and "spec.duration plus spec.leadTime (1h5m)" in problem and "1h" in problem
    assert (
        overlap_problem(Schedule.parse("0 8 * * mon-fri"), timedelta(minutes=5), timedelta(hours=10), now)
        is None
    )
    # Runs 25 hours long overlap from one weekday to the next; 24 hours just touch.
    assert overlap_problem(Schedule.parse("0 8 * * mon-fri"), timedelta(hours=2), timedelta(hours=23), now)
    assert (
        overlap_problem(Schedule.parse("0 8 * * mon-fri"), timedelta(hours=1), timedelta(hours=23), now)
        is None
    )


def test_judge_gives_calendars_or_the_reason() -> None:
    now = at(2026, 11, 26)

    assert judge(CapacityWindow.parse(manifest()), now).calendars
    monthly = judge(CapacityWindow.parse(manifest(schedule="0 0 1 * *")), now)
    assert monthly.reason == SCHEDULE_NOT_SHIFTABLE and "spec.schedule" in monthly.message
    hourly = judge(CapacityWindow.parse(manifest(schedule="0 * * * *", duration="1h")), now)
    assert hourly.reason == WINDOWS_OVERLAP


def test_the_oldest_window_keeps_a_target_and_later_ones_are_refused() -> None:
    first = CapacityWindow.parse(manifest("first", "2026-11-01T00:00:00Z"))
    second = CapacityWindow.parse(manifest("second", "2026-11-02T00:00:00Z"))
    other = CapacityWindow.parse(
        manifest(
            "other",
            "2026-11-03T00:00:00Z",
            targetRef={"apiGroup": "karpenter.sh", "kind": "NodePool", "name": "b"},
        )
    )

    assert conflicts([second, other, first]) == {"second": "first"}
