"""Karpenter's disruption methods, each taking what it can from the candidates left.

Expiration comes first: it is forceful, ignores budgets, do-not-disrupt and PDBs, and only counts against
the budgets of what follows. Then the methods in Karpenter's order: emptiness deletes every empty,
quiet node the `Empty` budget allows in one command; drift replaces drifted nodes one at a time (empty
ones together); multi-node consolidation looks for the longest prefix of the cheapest-to-disrupt
candidates that can be deleted or replaced by one cheaper node; single-node consolidation tries every
remaining candidate alone.

Karpenter runs one command per pass and starts over; commands only fill the remaining nodes and use up
budgets and PDBs, so a candidate a method refused stays refused, and each method here runs to exhaustion
before the next instead of starting over after every command.
"""

from __future__ import annotations

from collections.abc import Sequence

from core import labels
from core.api.nodepool import ConsolidationPolicy, DisruptionReason
from core.disruption.candidates import Candidate
from core.disruption.commands import EXPIRED, BlockReason, Method, Reason
from core.disruption.consolidation import (
    Consolidation,
    PoolTotals,
    balanced_verdict,
    candidates_price,
    decide,
    without_candidate_types,
)
from core.disruption.replacements import Priced
from core.disruption.simulation import Outcome
from core.disruption.state import PlanState

MAX_MULTI_NODE_CANDIDATES = 100


def _by_disruption_cost(candidates: Sequence[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda candidate: (candidate.disruption_cost, candidate.name))


def _replacements(state: PlanState, outcome: Outcome) -> list[Priced]:
    return [Priced.of(claim, state.instance_types.get(claim.nodepool, {})) for claim in outcome.nodeclaims]


def _savings(candidates: Sequence[Candidate], replacements: Sequence[Priced]) -> int:
    launched = sum(
        launch[1].price_micros for priced in replacements if (launch := priced.launch()) is not None
    )
    return candidates_price(candidates) - launched


def expire(state: PlanState) -> None:
    """Delete every NodeClaim past its expireAfter, oldest first, whatever holds it."""
    expiring = sorted(state.report.expiring, key=lambda c: (c.expires_at, c.name))
    for candidate in expiring:
        if state.options.nodepools is not None and candidate.nodepool.name not in state.options.nodepools:
            continue
        outcome = state.sandbox.simulate([candidate.name])
        replacements = _replacements(state, outcome)
        expired_at = f"expired at {candidate.expires_at:%Y-%m-%d %H:%M:%S} (expireAfter {candidate.nodeclaim.spec.expire_after})"
        state.execute(
            Method.EXPIRATION,
            EXPIRED,
            [candidate],
            outcome,
            replacements,
            _savings([candidate], replacements),
            {candidate.name: expired_at},
        )


def emptiness(state: PlanState) -> None:
    """Delete every empty, quiet candidate the `Empty` budgets allow, in one command."""
    chosen: list[Candidate] = []
    per_pool: dict[str, int] = {}
    for candidate in _by_disruption_cost(state.candidates(Method.EMPTINESS)):
        if not candidate.empty:
            continue
        pool = candidate.nodepool.name
        reason = (
            candidate.quiet
            or state.pod_blocker(candidate)
            or state.budget_blocker(candidate, DisruptionReason.EMPTY, per_pool.get(pool, 0))
        )
        if reason is not None:
            state.keep(candidate, reason, Method.EMPTINESS)
            continue
        chosen.append(candidate)
        per_pool[pool] = per_pool.get(pool, 0) + 1
    if chosen:
        state.execute(
            Method.EMPTINESS, DisruptionReason.EMPTY.value, chosen, None, [], candidates_price(chosen)
        )


def drift(state: PlanState) -> None:
    """Replace drifted candidates, oldest drift first: all empty ones the budgets allow together, then the
    others one at a time, each once its pods have somewhere to go."""
    drifted = sorted(
        (candidate for candidate in state.candidates(Method.DRIFT) if candidate.drift is not None),
        key=lambda candidate: (candidate.drifted_at, candidate.name),
    )
    details = {c.name: f"{c.drift.reason}: {c.drift.message}" for c in drifted if c.drift is not None}
    empty: list[Candidate] = []
    per_pool: dict[str, int] = {}
    for candidate in drifted:
        if not candidate.empty:
            continue
        pool = candidate.nodepool.name
        reason = state.pod_blocker(candidate, eventual=True) or state.budget_blocker(
            candidate, DisruptionReason.DRIFTED, per_pool.get(pool, 0)
        )
        if reason is not None:
            state.keep(candidate, reason, Method.DRIFT)
            continue
        empty.append(candidate)
        per_pool[pool] = per_pool.get(pool, 0) + 1
    if empty:
        state.execute(
            Method.DRIFT, DisruptionReason.DRIFTED.value, empty, None, [], candidates_price(empty), details
        )
    for candidate in drifted:
        if candidate.empty or not state.is_open(candidate):
            continue
        reason = state.pod_blocker(candidate, eventual=True) or state.budget_blocker(
            candidate, DisruptionReason.DRIFTED
        )
        if reason is not None:
            state.keep(candidate, reason, Method.DRIFT)
            continue
        outcome = state.sandbox.simulate([candidate.name])
        if not outcome.scheduled:
            state.sandbox.rollback()
            state.keep(
                candidate, Reason(BlockReason.PODS_UNSCHEDULABLE, outcome.describe_problems()), Method.DRIFT
            )
            continue
        replacements = _replacements(state, outcome)
        state.execute(
            Method.DRIFT,
            DisruptionReason.DRIFTED.value,
            [candidate],
            outcome,
            replacements,
            _savings([candidate], replacements),
            details,
        )


def consolidation_blocker(state: PlanState, candidate: Candidate) -> Reason | None:
    """Why consolidation may not consider the candidate at all (before budgets and simulation)."""
    pool = candidate.nodepool
    if candidate.quiet is not None:
        return candidate.quiet
    if pool.spec.disruption.consolidation_policy is ConsolidationPolicy.WHEN_EMPTY:
        return Reason(
            BlockReason.WHEN_EMPTY,
            f'NodePool "{pool.name}" has consolidationPolicy WhenEmpty and the node has '
            f"{len(candidate.reschedulable)} pods to move",
        )
    if candidate.price_micros is None or candidate.zone is None or candidate.capacity_type is None:
        missing = [
            what
            for what, value in (
                (labels.ZONE, candidate.zone),
                (labels.CAPACITY_TYPE, candidate.capacity_type),
                ("an offering price", candidate.price_micros),
            )
            if value is None
        ]
        return Reason(BlockReason.PRICE_UNKNOWN, f"cannot price the node: no {', '.join(missing)}")
    return state.pod_blocker(candidate)


def _evaluate(state: PlanState, candidates: Sequence[Candidate]) -> tuple[Outcome, Consolidation | Reason]:
    """Simulate removing the candidates (the trial stays open) and decide as Karpenter would."""
    outcome = state.sandbox.simulate([candidate.name for candidate in candidates])
    verdict = decide(candidates, outcome, state.instance_types, state.options.spot_to_spot_consolidation)
    if len(candidates) > 1 and isinstance(verdict, Consolidation):
        verdict = without_candidate_types(candidates, verdict)
    if isinstance(verdict, Consolidation):
        balanced = balanced_verdict(candidates, verdict, _pool_totals(state))
        if balanced is not None:
            return outcome, balanced
    return outcome, verdict


def _pool_totals(state: PlanState) -> dict[str, PoolTotals]:
    return {
        pool: PoolTotals(price, state.report.pool_disruption.get(pool, 0.0))
        for pool, price in state.report.pool_price.items()
    }


def _execute(
    state: PlanState,
    method: Method,
    candidates: Sequence[Candidate],
    outcome: Outcome,
    verdict: Consolidation,
) -> None:
    replacements = [verdict.replacement] if verdict.replacement is not None else []
    state.execute(
        method,
        DisruptionReason.UNDERUTILIZED.value,
        candidates,
        outcome,
        replacements,
        verdict.savings_micros,
    )


def multi_node_consolidation(state: PlanState) -> None:
    """Repeatedly find the longest prefix (2 to 100) of the cheapest-to-disrupt consolidation candidates
    that can be deleted together or replaced by one cheaper node, by binary search as Karpenter does."""
    while True:
        prefix: list[Candidate] = []
        per_pool: dict[str, int] = {}
        for candidate in _by_disruption_cost(state.candidates(Method.MULTI_NODE_CONSOLIDATION)):
            pool = candidate.nodepool.name
            if candidate.empty or consolidation_blocker(state, candidate) is not None:
                continue
            if (
                state.budget_blocker(candidate, DisruptionReason.UNDERUTILIZED, per_pool.get(pool, 0))
                is not None
            ):
                continue
            prefix.append(candidate)
            per_pool[pool] = per_pool.get(pool, 0) + 1
        prefix = prefix[:MAX_MULTI_NODE_CANDIDATES]
        best: int | None = None
        low, high = 1, len(prefix) - 1
        while low <= high:
            middle = (low + high) // 2
            _, verdict = _evaluate(state, prefix[: middle + 1])
            state.sandbox.rollback()
            if isinstance(verdict, Consolidation):
                best, low = middle + 1, middle + 1
            else:
                high = middle - 1
        if best is None:
            return
        chosen = prefix[:best]
        outcome, verdict = _evaluate(state, chosen)
        if not isinstance(verdict, Consolidation):
            raise AssertionError("a consolidation found by the search must hold when simulated again")
        _execute(state, Method.MULTI_NODE_CONSOLIDATION, chosen, outcome, verdict)


def _interleaved(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates by disruption cost, taken in turn from each NodePool (pools in order of first
    appearance), so that one large pool does not starve the others."""
    by_pool: dict[str, list[Candidate]] = {}
    for candidate in _by_disruption_cost(candidates):
        by_pool.setdefault(candidate.nodepool.name, []).append(candidate)
    queues = list(by_pool.values())
    ordered: list[Candidate] = []
    for turn in range(max((len(queue) for queue in queues), default=0)):
        ordered.extend(queue[turn] for queue in queues if turn < len(queue))
    return ordered


def single_node_consolidation(state: PlanState) -> None:
    """Try each remaining candidate alone: delete it if its pods fit elsewhere, or replace it with one
    strictly cheaper node; every candidate left gets the reason it stays."""
    for candidate in _interleaved(state.candidates(Method.SINGLE_NODE_CONSOLIDATION)):
        if not state.is_open(candidate):
            continue
        method = Method.SINGLE_NODE_CONSOLIDATION
        if candidate.empty:
            if candidate.quiet is not None:
                state.keep(candidate, candidate.quiet, method)
            continue
        reason = consolidation_blocker(state, candidate) or state.budget_blocker(
            candidate, DisruptionReason.UNDERUTILIZED
        )
        if reason is not None:
            state.keep(candidate, reason, method)
            continue
        outcome, verdict = _evaluate(state, [candidate])
        if isinstance(verdict, Reason):
            state.sandbox.rollback()
            state.keep(candidate, verdict, method)
            continue
        _execute(state, method, [candidate], outcome, verdict)
