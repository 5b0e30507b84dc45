"""Five-field cron schedules, as NodePool disruption budgets write them (`0 9 * * mon-fri`, `@daily`).

Karpenter reads budget schedules with the standard cron grammar of its Go cron library, always in UTC, and
asks one question: when is the next minute the schedule fires after a given instant. This module answers
the same question without a clock: the caller passes the instant.

Grammar: minute, hour, day of month, month and day of week, separated by whitespace. A field is a comma
list of `*`, `?`, `n`, `a-b`, each optionally followed by `/step`; `n/step` means `n-max/step`. Months take
the names jan..dec and days of week sun..sat (case-insensitive); Sunday is 0. The descriptors `@yearly`,
`@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and `@hourly` stand for their usual schedules.
When the day-of-month or the day-of-week field is unrestricted (`*` or `?`), a day must match both; when
both are restricted, a day matching either fires, as in Vixie cron.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

SEARCH_YEARS = 5
"""How far ahead `next_after` looks before deciding a schedule never fires (the Go library's horizon)."""

_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
_DAY_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day of month", 1, 31, {}),
    _Field("month", 1, 12, _MONTH_NAMES),
    _Field("day of week", 0, 6, _DAY_NAMES),
)


class CronError(ValueError):
    """A schedule that is not a valid five-field cron expression; the message says which part and why."""


@dataclass(frozen=True)
class Schedule:
    """A parsed cron schedule: the allowed values of each field, in UTC."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    any_day_of_month: bool
    any_day_of_week: bool

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Parse a five-field expression or a descriptor; raises `CronError` naming the bad field."""
        expression = text.strip()
        if expression.startswith("@"):
            if expression not in _DESCRIPTORS:
                raise CronError(
                    f'unknown descriptor "{expression}" (expected one of {", ".join(_DESCRIPTORS)})'
                )
            expression = _DESCRIPTORS[expression]
        parts = expression.split()
        if len(parts) != len(_FIELDS):
            raise CronError(
                f'"{text}" has {len(parts)} fields; expected 5 (minute hour day-of-month month day-of-week)'
            )
        parsed = [_parse_field(part, field) for part, field in zip(parts, _FIELDS, strict=True)]
        (minutes, _), (hours, _), (days, any_day), (months, _), (weekdays, any_weekday) = parsed
        return cls(minutes, hours, days, months, weekdays, any_day, any_weekday)

    def fires(self) -> bool:
        """Whether some date matches: false for day-month pairs that never exist, such as February 30."""
        if self.any_day_of_month or not self.any_day_of_week:
            return True
        return any(day <= _longest_month(month) for month in self.months for day in self.days_of_month)

    def matches(self, moment: datetime) -> bool:
        """Whether the schedule fires in the minute containing `moment` (naive times are read as UTC)."""
        moment = as_utc(moment)
        return (
            moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self._day_matches(moment)
        )

    def next_after(self, moment: datetime) -> datetime | None:
        """The first minute strictly after `moment` at which the schedule fires, or None within 5 years."""
        current = as_utc(moment).replace(second=0, microsecond=0) + timedelta(minutes=1)
        horizon = current.year + SEARCH_YEARS
        while current.year <= horizon:
            if current.month not in self.months:
                current = _first_of_next_month(current)
            elif not self._day_matches(current):
                current = (current + timedelta(days=1)).replace(hour=0, minute=0)
            elif current.hour not in self.hours:
                current = (current + timedelta(hours=1)).replace(minute=0)
            elif current.minute not in self.minutes:
                current += timedelta(minutes=1)
            else:
                return current
        return None

    def _day_matches(self, moment: datetime) -> bool:
        in_month = moment.day in self.days_of_month
        in_week = (moment.weekday() + 1) % 7 in self.days_of_week
        if self.any_day_of_month or self.any_day_of_week:
            return in_month and in_week
        return in_month or in_week


def _parse_field(text: str, field: _Field) -> tuple[frozenset[int], bool]:
    """The values a field allows, and whether it is unrestricted (`*` or `?` without a step above 1)."""
    values: set[int] = set()
    unrestricted = False
    for item in text.split(","):
        span, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f'{field.name} "{item}": the step must be a positive integer')
            step = int(step_text)
        if span in ("*", "?"):
            low, high = field.low, field.high
            unrestricted = unrestricted or step == 1
        else:
            first, dash, last = span.partition("-")
            low = _parse_value(first, field, item)
            high = _parse_value(last, field, item) if dash else (field.high if step_text else low)
            if low > high:
                raise CronError(f'{field.name} "{item}": the range starts after it ends')
        values.update(range(low, high + 1, step))
    return frozenset(values), unrestricted


def _parse_value(text: str, field: _Field, item: str) -> int:
    named = field.names.get(text.lower())
    if named is not None:
        return named
    if not text.isdigit():
        raise CronError(f'{field.name} "{item}": "{text}" is not a number{_name_hint(field)}')
    value = int(text)
    if not field.low <= value <= field.high:
        raise CronError(f'{field.name} "{item}": {value} is outside {field.low}-{field.high}')
    return value


def _name_hint(field: _Field) -> str:
    return f" or one of {', '.join(field.names)}" if field.names else ""


def _longest_month(month: int) -> int:
    return calendar.monthrange(2024, month)[1]  # a leap year, so February 29 counts as a date that exists


def _first_of_next_month(moment: datetime) -> datetime:
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.replace(year=year, month=month, day=1, hour=0, minute=0)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
