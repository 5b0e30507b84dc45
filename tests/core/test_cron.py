from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from core.cron import CronError, Schedule, as_utc


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("descriptor", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_descriptors_mean_their_five_field_schedules(descriptor: str, expression: str) -> None:
    assert Schedule.parse(descriptor) == Schedule.parse(expression)


def test_fields_take_lists_ranges_steps_and_names() -> None:
    schedule = Schedule.parse("*/15 9-17/4 1,15 JAN-mar mon-fri")

    assert schedule.minutes == {0, 15, 30, 45}
    assert schedule.hours == {9, 13, 17}
    assert schedule.days_of_month == {1, 15}
    assert schedule.months == {1, 2, 3}
    assert schedule.days_of_week == {1, 2, 3, 4, 5}


def test_a_single_value_with_a_step_runs_to_the_end_of_the_field() -> None:
    assert Schedule.parse("50/5 * * * *").minutes == {50, 55}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 9 * *", '"0 9 * *" has 4 fields; expected 5 (minute hour day-of-month month day-of-week)'),
        (
            "0 9 * * * *",
            '"0 9 * * * *" has 6 fields; expected 5 (minute hour day-of-month month day-of-week)',
        ),
        ("60 * * * *", 'minute "60": 60 is outside 0-59'),
        ("0 24 * * *", 'hour "24": 24 is outside 0-23'),
        ("0 0 0 * *", 'day of month "0": 0 is outside 1-31'),
        ("0 0 * 13 *", 'month "13": 13 is outside 1-12'),
        ("0 0 * * 7", 'day of week "7": 7 is outside 0-6'),
        ("*/0 * * * *", 'minute "*/0": the step must be a positive integer'),
        ("*/x * * * *", 'minute "*/x": the step must be a positive integer'),
        ("0 17-9 * * *", 'hour "17-9": the range starts after it ends'),
        (
            "0 0 * * funday",
            'day of week "funday": "funday" is not a number or one of sun, mon, tue, wed, thu, fri, sat',
        ),
        ("0 nine * * *", 'hour "nine": "nine" is not a number'),
        (
            "@fortnightly",
            'unknown descriptor "@fortnightly" (expected one of @yearly, @annually, @monthly, @weekly, @daily, '
            "@midnight, @hourly)",
        ),
    ],
)
def test_invalid_expressions_say_which_field_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(CronError) as caught:
        Schedule.parse(expression)

    assert str(caught.value) == message


def test_next_after_is_strictly_after_the_given_instant() -> None:
    schedule = Schedule.parse("0 9 * * *")

    assert schedule.next_after(at(2026, 3, 2, 9, 0)) == at(2026, 3, 3, 9, 0)
    assert schedule.next_after(at(2026, 3, 2, 8, 59, 59)) == at(2026, 3, 2, 9, 0)


def test_weekday_schedule_skips_the_weekend() -> None:
    saturday = at(2026, 3, 7, 12, 0)

    assert Schedule.parse("0 9 * * mon-fri").next_after(saturday) == at(2026, 3, 9, 9, 0)


def test_restricted_day_of_month_and_day_of_week_fire_on_either() -> None:
    schedule = Schedule.parse("0 0 13 * fri")

    assert schedule.next_after(at(2026, 3, 1)) == at(2026, 3, 6)  # a Friday, not the 13th
    assert schedule.matches(at(2026, 3, 13))  # the 13th, a Friday
    assert schedule.matches(at(2026, 4, 13))  # the 13th, a Monday


def test_an_unrestricted_day_of_week_leaves_only_the_day_of_month() -> None:
    schedule = Schedule.parse("0 0 13 * *")

    assert not schedule.matches(at(2026, 3, 6))
    assert schedule.next_after(at(2026, 3, 1)) == at(2026, 3, 13)


def test_a_stepped_star_counts_as_restricted() -> None:
    schedule = Schedule.parse("0 0 */2 * mon")  # odd days of the month, or Mondays

    assert schedule.matches(at(2026, 3, 2))  # even day, Monday
    assert schedule.matches(at(2026, 3, 3))  # odd day, Tuesday
    assert not schedule.matches(at(2026, 3, 4))  # even day, Wednesday


def test_next_after_crosses_the_year_end() -> None:
    assert Schedule.parse("@yearly").next_after(at(2026, 6, 1)) == at(2027, 1, 1)


def test_february_29_waits_for_a_leap_year() -> None:
    schedule = Schedule.parse("0 0 29 2 *")

    assert schedule.fires()
    assert schedule.next_after(at(2026, 3, 1)) == at(2028, 2, 29)


def test_a_date_that_never_exists_never_fires() -> None:
    schedule = Schedule.parse("0 0 30 2 *")

    assert not schedule.fires()
    assert schedule.next_after(at(2026, 1, 1)) is None


def test_an_impossible_date_still_fires_when_the_day_of_week_is_restricted() -> None:
    schedule = Schedule.parse("0 0 31 4 sun")

    assert schedule.fires()
    assert schedule.next_after(at(2026, 1, 1)) == at(2026, 4, 5)


def test_times_are_read_in_utc() -> None:
    schedule = Schedule.parse("0 9 * * *")
    nine_in_paris = datetime(2026, 1, 5, 9, 0, tzinfo=timezone(timedelta(hours=1)))

    assert not schedule.matches(nine_in_paris)
    assert schedule.matches(datetime(2026, 1, 5, 9, 0))  # naive means UTC
    assert schedule.next_after(nine_in_paris) == at(2026, 1, 5, 9, 0)


def test_as_utc_converts_aware_times_and_labels_naive_ones() -> None:
    assert as_utc(datetime(2026, 1, 5, 10, 0, tzinfo=timezone(timedelta(hours=1)))) == at(2026, 1, 5, 9, 0)
    assert as_utc(datetime(2026, 1, 5, 10, 0)).tzinfo is UTC
