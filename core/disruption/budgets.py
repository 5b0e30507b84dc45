"""NodePool disruption budgets with Karpenter's arithmetic, counted down as a plan takes nodes.

For one NodePool and one reason (Empty, Drifted, Underutilized), the budgets that apply are those listing
the reason or listing none; of those, the ones active now (no schedule, or within `duration` after the
schedule fired) each allow `nodes` of the pool's total, a count or a percentage rounded up. The pool may
have the smallest of these disrupting at once, minus the nodes already disrupting (NotReady or being
deleted, whatever deletes them), never below zero. No active budget means no limit.

`total` counts the pool's initialized nodes that Karpenter manages; `disrupting` those of them NotReady
or marked for deletion. Both are counted by the caller from the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.api.nodepool import Budget, DisruptionReason, NodePool
from core.cron import as_utc

MAX_WINDOW_EXTENSIONS = 2000
"""How many overlapping schedule hits `window_end` follows before deciding the window never closes."""


def window_end(budget: Budget, now: datetime) -> datetime | None:
    """When an active scheduled budget stops being active: the end of its window, extended by every later
    hit that fires before the window closes. None for budgets without a schedule or windows that never
    close (a schedule firing more often than its duration)."""
    schedule, window = budget.cron(), budget.window
    if schedule is None or window is None:
        return None
    hit = schedule.next_after(as_utc(now) - window)
    if hit is None or hit > as_utc(now):
        return None
    end = hit + window
    for _ in range(MAX_WINDOW_EXTENSIONS):
        following = schedule.next_after(hit)
        if following is None or following > end:
            return end
        hit, end = following, following + window
    return None


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    """What the budgets of one NodePool allow for one reason at one instant."""

    nodepool: str
    reason: DisruptionReason
    total: int
    limit: int | None
    """The smallest active budget for the reason; None when no budget for it is active."""
    until: datetime | None
    """When the budgets that set `limit` stop being active; None if they never do."""

    def allowed(self, disrupting: int) -> int | None:
        """How many more nodes may start disrupting while `disrupting` already are; None without a limit."""
        return None if self.limit is None else max(0, self.limit - disrupting)


def budget_limit(pool: NodePool, reason: DisruptionReason, total: int, now: datetime) -> BudgetLimit:
    """The limit the pool's budgets set for `reason` over `total` nodes at `now`, and until when."""
    active = [
        (budget, budget.node_limit(total))
        for budget in pool.spec.disruption.budgets
        if budget.applies_to(reason) and budget.is_active(now)
    ]
    if not active:
        return BudgetLimit(pool.name, reason, total, None, None)
    limit = min(value for _, value in active)
    ends = [window_end(budget, now) for budget, value in active if value == limit]
    # The limit rises only once every budget setting it has closed; one that never closes keeps it.
    until = None if any(end is None for end in ends) else max(end for end in ends if end is not None)
    return BudgetLimit(pool.name, reason, total, limit, until)


def _clock(moment: datetime, now: datetime) -> str:
    moment, now = as_utc(moment), as_utc(now)
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    if moment - now < timedelta(days=7):
        return moment.strftime("%a %H:%M")
    return moment.strftime("%Y-%m-%d %H:%M")


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """One NodePool and reason in a plan: the limit, what was disrupting before, and what the plan took."""

    limit: BudgetLimit
    disrupting_before: int
    taken: int

    def to_json(self) -> dict[str, object]:
        limit = self.limit
        return {
            "nodepool": limit.nodepool,
            "reason": limit.reason.value,
            "nodes": limit.total,
            "limit": limit.limit,
            "disrupting": self.disrupting_before,
            "allowed": limit.allowed(self.disrupting_before),
            "taken_by_plan": self.taken,
            "until": as_utc(limit.until).isoformat().replace("+00:00", "Z") if limit.until else None,
        }


class Budgets:
    """The budgets of every NodePool during one plan: each node a command takes counts as disrupting
    for every reason of its pool, as Karpenter counts the nodes it marked for deletion."""

    def __init__(
        self,
        pools: Iterable[NodePool],
        totals: Mapping[str, int],
        disrupting: Mapping[str, int],
        now: datetime,
    ) -> None:
        self._now = now
        self._limits = {
            (pool.name, reason): budget_limit(pool, reason, totals.get(pool.name, 0), now)
            for pool in pools
            for reason in DisruptionReason
        }
        self._before = dict(disrupting)
        self._disrupting = dict(disrupting)
        self._taken: dict[str, int] = {}

    def allowed(self, nodepool: str, reason: DisruptionReason) -> int | None:
        """How many more of the pool's nodes may start disrupting for `reason`; None when unlimited."""
        limit = self._limits.get((nodepool, reason))
        if limit is None:
            return 0
        return limit.allowed(self._disrupting.get(nodepool, 0))

    def permits(self, nodepool: str, reason: DisruptionReason, chosen: int = 0) -> bool:
        """Whether one more of the pool's nodes may start disrupting for `reason`, besides `chosen` nodes
        a command being assembled already holds."""
        allowed = self.allowed(nodepool, reason)
        return allowed is None or allowed - chosen > 0

    def take(self, nodepool: str, count: int = 1) -> None:
        """Count `count` more of the pool's nodes as disrupting."""
        self._disrupting[nodepool] = self._disrupting.get(nodepool, 0) + count
        self._taken[nodepool] = self._taken.get(nodepool, 0) + count

    def explain(self, nodepool: str, reason: DisruptionReason, chosen: int = 0) -> str:
        """Why the pool may not disrupt one more node for `reason` (besides `chosen`), e.g. "budget for
        reason Underutilized is 0 until 09:00"."""
        limit = self._limits.get((nodepool, reason))
        if limit is None:
            return f'NodePool "{nodepool}" is not known'
        disrupting = self._disrupting.get(nodepool, 0) + chosen
        if limit.limit == 0:
            text = f"budget for reason {reason.value} is 0"
        else:
            text = (
                f"budget for reason {reason.value} allows {limit.limit} of {limit.total} nodes "
                f"and {disrupting} are disrupting"
            )
        if limit.until is not None:
            text += f" until {_clock(limit.until, self._now)}"
        return text

    def statuses(self) -> list[BudgetStatus]:
        """Every pool and reason, sorted, for the plan's report."""
        return [
            BudgetStatus(limit, self._before.get(pool, 0), self._taken.get(pool, 0))
            for (pool, _), limit in sorted(self._limits.items(), key=lambda item: (item[0][0], item[0][1]))
        ]
