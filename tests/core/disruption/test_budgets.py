"""Budget arithmetic (karpenter-core.md 1.2): counts, percentages rounded up, schedules, reasons, the
minimum across budgets, and nodes already disrupting."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.api.nodepool import DisruptionReason
from core.disruption.budgets import Budgets, budget_limit, window_end
from tests.core.disruption.fixtures import nodepool

MONDAY_NOON = datetime(2024, 6, 3, 12, 0, tzinfo=UTC)
UNDERUTILIZED = DisruptionReason.UNDERUTILIZED
EMPTY = DisruptionReason.EMPTY
DRIFTED = DisruptionReason.DRIFTED


@pytest.mark.parametrize(
    ("nodes", "total", "limit"),
    [
        ("10%", 10, 1),
        ("30%", 10, 3),
        ("20%", 19, 4),
        ("5%", 10, 1),
        ("0%", 10, 0),
        ("100%", 7, 7),
        ("50%", 0, 0),
        ("3", 10, 3),
        ("0", 10, 0),
        ("15", 10, 15),
    ],
)
def test_nodes_as_a_count_or_a_percentage_rounded_up(nodes: str, total: int, limit: int) -> None:
    pool = nodepool(budgets=[{"nodes": nodes}])
    assert budget_limit(pool, UNDERUTILIZED, total, MONDAY_NOON).limit == limit


@pytest.mark.parametrize(
    ("budget", "active"),
    [
        ({"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, True),
        ({"nodes": "0", "schedule": "0 9 * * sat,sun", "duration": "8h"}, False),
        ({"nodes": "0", "schedule": "0 13 * * *", "duration": "8h"}, False),
        ({"nodes": "0", "schedule": "0 4 * * *", "duration": "8h1m"}, True),
        # The window closes as its duration ends: 04:00 + 8h is not active at noon.
        ({"nodes": "0", "schedule": "0 4 * * *", "duration": "8h"}, False),
        ({"nodes": "0", "schedule": "@daily", "duration": "12h1m"}, True),
        ({"nodes": "0", "schedule": "@daily", "duration": "12h"}, False),
    ],
)
def test_a_scheduled_budget_counts_only_within_its_window(budget: dict[str, Any], active: bool) -> None:
    pool = nodepool(budgets=[budget])
    limit = budget_limit(pool, UNDERUTILIZED, 10, MONDAY_NOON)
    assert limit.limit == (0 if active else None)


def test_the_smallest_active_budget_wins_and_inactive_ones_do_not_count() -> None:
    pool = nodepool(
        budgets=[
            {"nodes": "50%"},
            {"nodes": "2"},
            {"nodes": "0", "schedule": "0 0 * * sat", "duration": "24h"},
        ]
    )
    assert budget_limit(pool, UNDERUTILIZED, 10, MONDAY_NOON).limit == 2


def test_budgets_apply_to_their_reasons_only() -> None:
    pool = nodepool(
        budgets=[
            {"nodes": "0", "reasons": ["Underutilized"]},
            {"nodes": "1", "reasons": ["Drifted", "Empty"]},
            {"nodes": "30%"},
        ]
    )
    assert budget_limit(pool, UNDERUTILIZED, 10, MONDAY_NOON).limit == 0
    assert budget_limit(pool, DRIFTED, 10, MONDAY_NOON).limit == 1
    assert budget_limit(pool, EMPTY, 10, MONDAY_NOON).limit == 1


def test_no_active_budget_means_no_limit() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}])
    limit = budget_limit(pool, EMPTY, 10, MONDAY_NOON)
    assert limit.limit is None
    assert limit.allowed(disrupting=100) is None


@pytest.mark.parametrize(
    ("budgets", "disrupting", "allowed"),
    [
        ([{"nodes": "30%"}], 0, 3),
        ([{"nodes": "30%"}], 1, 2),
        ([{"nodes": "30%"}], 3, 0),
        ([{"nodes": "30%"}], 5, 0),
        ([{"nodes": "10"}], 4, 6),
    ],
)
def test_nodes_already_disrupting_use_up_the_budget(
    budgets: list[dict[str, str]], disrupting: int, allowed: int
) -> None:
    tracker = Budgets([nodepool(budgets=budgets)], {"default": 10}, {"default": disrupting}, MONDAY_NOON)
    assert tracker.allowed("default", UNDERUTILIZED) == allowed


def test_nodes_a_plan_takes_count_for_every_reason_of_their_pool() -> None:
    tracker = Budgets([nodepool(budgets=[{"nodes": "2"}])], {"default": 10}, {}, MONDAY_NOON)
    tracker.take("default")
    assert tracker.allowed("default", DRIFTED) == 1
    assert tracker.permits("default", UNDERUTILIZED)
    assert not tracker.permits("default", UNDERUTILIZED, chosen=1)
    tracker.take("default")
    assert tracker.allowed("default", EMPTY) == 0
    [status] = [s for s in tracker.statuses() if s.limit.reason is EMPTY]
    assert status.to_json() == {
        "nodepool": "default",
        "reason": "Empty",
        "nodes": 10,
        "limit": 2,
        "disrupting": 0,
        "allowed": 2,
        "taken_by_plan": 2,
        "until": None,
    }


def test_an_unknown_nodepool_allows_nothing() -> None:
    tracker = Budgets([nodepool()], {"default": 3}, {}, MONDAY_NOON)
    assert tracker.allowed("other", UNDERUTILIZED) == 0
    assert tracker.explain("other", UNDERUTILIZED) == 'NodePool "other" is not known'


def test_a_closed_budget_says_until_when() -> None:
    night = datetime(2024, 6, 3, 3, 0, tzinfo=UTC)
    pool = nodepool(budgets=[{"nodes": "0", "schedule": "0 0 * * *", "duration": "9h"}, {"nodes": "10%"}])
    tracker = Budgets([pool], {"default": 10}, {}, night)
    assert tracker.explain("default", UNDERUTILIZED) == "budget for reason Underutilized is 0 until 09:00"


def test_a_full_budget_says_how_many_are_disrupting() -> None:
    tracker = Budgets([nodepool(budgets=[{"nodes": "20%"}])], {"default": 10}, {"default": 2}, MONDAY_NOON)
    assert tracker.explain("default", DRIFTED) == (
        "budget for reason Drifted allows 2 of 10 nodes and 2 are disrupting"
    )


def test_a_window_that_ends_another_day_gives_the_day() -> None:
    friday_evening = datetime(2024, 6, 7, 20, 0, tzinfo=UTC)
    pool = nodepool(budgets=[{"nodes": "0", "schedule": "0 18 * * fri", "duration": "62h"}])
    tracker = Budgets([pool], {"default": 4}, {}, friday_evening)
    assert tracker.explain("default", EMPTY) == "budget for reason Empty is 0 until Mon 08:00"


def test_overlapping_hits_extend_the_window() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "schedule": "0 * * * *", "duration": "90m"}])
    assert window_end(pool.spec.disruption.budgets[0], MONDAY_NOON) is None
    hourly = nodepool(budgets=[{"nodes": "0", "schedule": "0 */2 * * *", "duration": "90m"}])
    assert window_end(hourly.spec.disruption.budgets[0], MONDAY_NOON) == datetime(
        2024, 6, 3, 13, 30, tzinfo=UTC
    )


def test_the_limit_holds_until_every_budget_setting_it_closes() -> None:
    pool = nodepool(
        budgets=[
            {"nodes": "0", "schedule": "0 10 * * *", "duration": "4h"},
            {"nodes": "0", "schedule": "0 11 * * *", "duration": "2h"},
        ]
    )
    assert budget_limit(pool, UNDERUTILIZED, 5, MONDAY_NOON).until == datetime(2024, 6, 3, 14, 0, tzinfo=UTC)
    always = nodepool(budgets=[{"nodes": "0", "schedule": "0 10 * * *", "duration": "4h"}, {"nodes": "0"}])
    assert budget_limit(always, UNDERUTILIZED, 5, MONDAY_NOON).until is None
