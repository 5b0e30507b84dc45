"""When a CapacityWindow acts: its windows in time, the Temporal calendars that fire a lead time before each one
opens, and why a window cannot be scheduled.

A window opens at each minute its cron fires and stays open for `duration`. Its Temporal Schedule must fire
`leadTime` earlier. Temporal calendars match second, minute, hour, day of month, month and day of week, all at
once; cron matches the same fields (with Vixie cron's either-day rule when both day fields are restricted). Moving
every fire time back by the lead time moves each (hour, minute) pair back, to the same day or to an earlier one;
a pair that lands on an earlier day moves its day of week with it, which a calendar can say, but not its day of
month or month (the day before the 1st is the 28th to the 31st): such a schedule is refused, naming the fields,
rather than approximated. `shift` returns calendars whose fire times, plus the lead time, are exactly the cron's.

Windows of one target may not overlap, nor may a window's run (lead time plus duration) overlap the next run of
the same window: `overlap_problem` checks the next `OVERLAP_HORIZON` windows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.api.capacitywindow import CapacityWindow
from core.cron import Schedule, as_utc

DAY_SECONDS = 86_400
ALL_DAYS_OF_MONTH = tuple(range(1, 32))
ALL_MONTHS = tuple(range(1, 13))
ALL_DAYS_OF_WEEK = tuple(range(7))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
OVERLAP_HORIZON = 1000
"""How many upcoming windows `overlap_problem` compares with the next one."""


class ShiftError(ValueError):
    """A schedule and lead time no set of calendars can fire exactly; the message names the fields."""


@dataclass(frozen=True)
class Calendar:
    """One Temporal calendar spec: a moment matches when each field holds its value (Sunday is day 0)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: tuple[int, ...] = ALL_DAYS_OF_MONTH
    months: tuple[int, ...] = ALL_MONTHS
    days_of_week: tuple[int, ...] = ALL_DAYS_OF_WEEK

    def matches(self, moment: datetime) -> bool:
        """Whether the calendar fires at this second (naive times are read as UTC)."""
        moment = as_utc(moment)
        return (
            moment.second in self.seconds
            and moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.day in self.days_of_month
            and moment.month in self.months
            and (moment.weekday() + 1) % 7 in self.days_of_week
        )


def shift(schedule: Schedule, lead: timedelta) -> list[Calendar]:
    """Calendars that fire exactly `lead` before each time `schedule` fires; `ShiftError` when none can.

    One calendar per group of shifted (hour, minute) pairs that share their day offset and their minutes, so
    `0 8 * * mon-fri` with a 5 minute lead is one calendar (07:55, Monday to Friday)."""
    lead_seconds = int(lead.total_seconds())
    if lead_seconds < 0:
        raise ShiftError("spec.leadTime: must not be negative")
    minutes_by_hour: dict[tuple[int, int, int], set[int]] = defaultdict(set)
    for hour in schedule.hours:
        for minute in schedule.minutes:
            day, rest = divmod(hour * 3600 + minute * 60 - lead_seconds, DAY_SECONDS)
            shifted_hour, rest = divmod(rest, 3600)
            shifted_minute, second = divmod(rest, 60)
            minutes_by_hour[(second, day, shifted_hour)].add(shifted_minute)
    if any(day for _, day, _ in minutes_by_hour):
        _check_day_shift(schedule)
    hours_by_group: dict[tuple[int, int, tuple[int, ...]], list[int]] = defaultdict(list)
    for (second, day, hour), minute_set in sorted(minutes_by_hour.items()):
        hours_by_group[(second, day, tuple(sorted(minute_set)))].append(hour)
    calendars = []
    for (second, day, minutes), hours in sorted(hours_by_group.items()):
        for days_of_month, days_of_week in _day_fields(schedule):
            calendars.append(
                Calendar(
                    seconds=(second,),
                    minutes=minutes,
                    hours=tuple(hours),
                    days_of_month=days_of_month,
                    months=tuple(sorted(schedule.months)),
                    days_of_week=tuple(sorted((weekday + day) % 7 for weekday in days_of_week)),
                )
            )
    return calendars


def _check_day_shift(schedule: Schedule) -> None:
    """Refuse fields a shift to the day before cannot carry: the day of month and the month."""
    if not schedule.any_day_of_month:
        raise ShiftError(
            "spec.schedule restricts the day of month and spec.leadTime moves some fire times to the day before "
            "(the day before a given day of month can be any of four dates): shorten the lead time so it stays "
            "on the same day, or schedule by day of week"
        )
    if tuple(sorted(schedule.months)) != ALL_MONTHS:
        raise ShiftError(
            "spec.schedule restricts the month and spec.leadTime moves some fire times to the day before (the "
            "first of a month would move into the previous month): shorten the lead time so it stays on the "
            "same day, or leave the month unrestricted"
        )


def _day_fields(schedule: Schedule) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(days of month, days of week) of each calendar a time of day needs. Cron fires on a day matching either
    day field when both are restricted; a calendar needs both to match, so that takes two calendars."""
    days_of_month = tuple(sorted(schedule.days_of_month))
    days_of_week = tuple(sorted(schedule.days_of_week))
    if schedule.any_day_of_month or schedule.any_day_of_week:
        return [(days_of_month, days_of_week)]
    return [(days_of_month, ALL_DAYS_OF_WEEK), (ALL_DAYS_OF_MONTH, days_of_week)]


# --- windows in time ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One window: open from `opens` (a cron fire) until `closes`."""

    opens: datetime
    closes: datetime

    def is_open(self, now: datetime) -> bool:
        return self.opens <= as_utc(now) < self.closes


def current_or_next(schedule: Schedule, duration: timedelta, now: datetime) -> Window | None:
    """The window open at `now` (the earliest, should two be), else the next one to open; None when the schedule
    fires no more within 5 years."""
    now = as_utc(now)
    opens = schedule.next_after(now - duration)
    return None if opens is None else Window(opens, opens + duration)


def window_of_run(scheduled: datetime, lead: timedelta, duration: timedelta) -> Window:
    """The window a Schedule's run serves: the Schedule fired `lead` before it opened."""
    opens = as_utc(scheduled) + lead
    return Window(opens, opens + duration)


def overlap_problem(schedule: Schedule, lead: timedelta, duration: timedelta, now: datetime) -> str | None:
    """Why one run of the window (raise `lead` before it opens, restore when it closes) would still hold the target
    when the next run raises it; None when the next `OVERLAP_HORIZON` windows leave room."""
    span = lead + duration
    previous = schedule.next_after(as_utc(now))
    for _ in range(OVERLAP_HORIZON):
        if previous is None:
            return None
        following = schedule.next_after(previous)
        if following is None:
            return None
        if following - previous < span:
            return (
                f"spec.duration plus spec.leadTime ({_text(span)}) is longer than the {_text(following - previous)} "
                f"from the window at {previous:%Y-%m-%dT%H:%MZ} to the next: shorten them, or fire less often"
            )
        previous = following
    return None


def _text(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return (
        "".join(f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if value)
        or "0s"
    )


# --- verdicts --------------------------------------------------------------------------------------------------

INVALID_SPEC = "InvalidSpec"
SCHEDULE_NOT_SHIFTABLE = "ScheduleNotShiftable"
WINDOWS_OVERLAP = "WindowsOverlap"
TARGET_CONFLICT = "TargetConflict"
TARGET_NOT_FOUND = "TargetNotFound"
TARGET_NOT_SCALABLE = "TargetNotScalable"
"""The reasons of ValidationSucceeded=False, each naming the field at fault in its message."""


@dataclass(frozen=True)
class Verdict:
    """Whether a window may be scheduled; when not, the reason and a message naming the fields."""

    calendars: tuple[Calendar, ...] = ()
    reason: str = ""
    message: str = ""

    @property
    def valid(self) -> bool:
        return not self.reason


def judge(window: CapacityWindow, now: datetime) -> Verdict:
    """The calendars of a parsed window, or why it cannot be scheduled (its target is judged apart)."""
    spec = window.spec
    try:
        calendars = shift(spec.cron(), spec.lead)
    except ShiftError as error:
        return Verdict(reason=SCHEDULE_NOT_SHIFTABLE, message=str(error))
    problem = overlap_problem(spec.cron(), spec.lead, spec.window, now)
    if problem is not None:
        return Verdict(reason=WINDOWS_OVERLAP, message=problem)
    return Verdict(calendars=tuple(calendars))


def target_key(window: CapacityWindow) -> tuple[str, str, str]:
    ref = window.spec.target_ref
    return (ref.kind.value, ref.namespace or "", ref.name)


def conflicts(windows: Iterable[CapacityWindow]) -> dict[str, str]:
    """Windows refused because an older window (by creation, then name) scales the same target: name to the name
    of the window that keeps it. One target, one window: two windows raising and restoring the same replicas
    would each restore what the other set."""
    keeper: dict[tuple[str, str, str], str] = {}
    refused: dict[str, str] = {}
    ordered: Sequence[CapacityWindow] = sorted(
        windows,
        key=lambda w: (
            w.metadata.creation_timestamp is None,
            w.metadata.creation_timestamp or _EPOCH,
            w.name,
        ),
    )
    for window in ordered:
        key = target_key(window)
        if key in keeper:
            refused[window.name] = keeper[key]
        else:
            keeper[key] = window.name
    return refused
