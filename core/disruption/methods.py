"""Karpenter's disruption methods, each taking what it can from the candidates left.

Expiration comes first: it is forceful, ignores budgets, do-not-disrupt and PDBs, and only counts against
the budgets of what follows. Then the methods in Karpenter's order: emptiness deletes every empty,
quiet node the `Empty` budget allows in one command; drift replaces drifted nodes one at a time (empty
ones together); multi-node consolidation looks for the longest prefix of the cheapest-to-disrupt
candidates that can be deleted or replaced by one cheaper node; single-node consolidation tries every
remaining candidate alone.

A NodeClaim with a terminationGracePeriod bounds its drain, so drift takes it despite pods that block
eviction; for drift and expiration alike, pods with do-not-disrupt or behind a PDB that never allows an
eviction are not made room for: they stay until the grace period ends and are deleted then.

Karpenter runs one command per pass and starts over; commands only fill the remaining nodes and use up
budgets and PDBs, so a candidate a method refused stays refused, and each method here runs to exhaustion
before the next instead of starting over after every command.
"""

from __future__ import annotations

from collections.abc import Sequence

from core import labels
from core.api.nodepool import ConsolidationPolicy, DisruptionReason
from core.capacity_buffer import buffer_of, is_virtual
from core.disruption.candidates import Candidate
from core.disruption.commands import EXPIRED, BlockReason, Method, Reason
from core.disruption.consolidation import (
    Consolidation,
    PoolTotals,
    balanced_verdict,
    candidates_price,
    decide,
)
from core.disruption.replacements import Priced
from core.disruption.simulation import Outcome
from core.disruption.state import PlanState

MAX_MULTI_NODE_CANDIDATES = 100


def _by_disruption_cost(candidates: Sequence[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda candidate: (candidate.disruption_cost, candidate.name))


def _replacements(state: PlanState, outcome: Outcome) -> list[Priced]:
    return [Priced.of(claim, state.catalogs[claim.nodepool]) for claim in outcome.nodeclaims]


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
        expired_at = (
            f"expired at {candidate.expires_at:%Y-%m-%d %H:%M:%S} "
            f"(expireAfter {candidate.nodeclaim.spec.expire_after})"
        )
        state.execute(
            Method.EXPIRATION,
            EXPIRED,
            [candidate],
            outcome,
            replacements,
            _savings([candidate], replacements),
            {candidate.name: state.with_staying(candidate, expired_at)},
        )


BUFFER_PODS_SUFFIX = " (kept for CapacityBuffer "


def buffer_pods_reason(candidate: Candidate) -> Reason:
    """Karpenter's sentence for a node whose only pods are CapacityBuffers' virtual pods, naming the buffers."""
    buffers = sorted({key for pod in candidate.reschedulable if (key := buffer_of(pod)) is not None})
    message = f'Node "{candidate.name}" has buffer pods{BUFFER_PODS_SUFFIX}{", ".join(buffers)})'
    return Reason(BlockReason.BUFFER_PODS, message)


def emptiness(state: PlanState) -> None:
    """Delete every empty, quiet candidate the `Empty` budgets allow, in one command."""
    chosen: list[Candidate] = []
    per_pool: dict[str, int] = {}
    for candidate in _by_disruption_cost(state.candidates()):
        if not candidate.empty:
            if all(is_virtual(pod) for pod in candidate.reschedulable):
                state.keep(candidate, buffer_pods_reason(candidate), Method.EMPTINESS)
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
        (candidate for candidate in state.candidates() if candidate.drift is not None),
        key=lambda candidate: (candidate.drifted_at, candidate.name),
    )
    details = {
        c.name: state.with_staying(c, f"{c.drift.reason}: {c.drift.message}")
        for c in drifted
        if c.drift is not None
    }
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
        if candidate.empty or not state.available(candidate):
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
    """Why consolidation may not consider the candidate at all (before budgets and simulation), in the
    order Karpenter asks: consolidation disabled, the policy, the quiet period, the price, the pods."""
    pool = candidate.nodepool
    quiet = candidate.quiet
    if quiet is not None and quiet.code is BlockReason.CONSOLIDATION_DISABLED:
        return quiet
    if pool.spec.disruption.consolidation_policy is ConsolidationPolicy.WHEN_EMPTY:
        return Reason(
            BlockReason.WHEN_EMPTY,
            f'NodePool "{pool.name}" has consolidationPolicy WhenEmpty and the node has '
            f"{len(candidate.reschedulable)} pods to move",
        )
    if quiet is not None:
        return quiet
    missing = [
        what
        for what, value in (
            (f"label {labels.ZONE}", candidate.zone),
            (f"label {labels.CAPACITY_TYPE}", candidate.capacity_type),
            ("an offering of its instance type in its zone and capacity type", candidate.price_micros),
        )
        if value is None
    ]
    if missing:
        return Reason(BlockReason.PRICE_UNKNOWN, f"cannot price the node: missing {', '.join(missing)}")
    return state.pod_blocker(candidate)


def _evaluate(
    state: PlanState, candidates: Sequence[Candidate], stop_early: bool = False
) -> tuple[Outcome, Consolidation | Reason]:
    """Simulate removing the candidates (the trial stays open) and decide as Karpenter would. No pod moves
    onto a node whose pods changed within its NodePool's consolidateAfter. With `stop_early` the trial
    stops once it needs a second node, since consolidation never launches two; without, a refusal names
    the pods that cannot move, as Karpenter's events do."""
    names = [candidate.name for candidate in candidates]
    outcome = state.sandbox.simulate(
        names,
        max_nodeclaims=1 if stop_early else None,
        closed=state.report.under_consolidate_after,
    )
    verdict = decide(candidates, outcome, state.catalogs, state.options.spot_to_spot_consolidation)
    if isinstance(verdict, Consolidation):
        balanced = balanced_verdict(candidates, verdict, pool_totals(state))
        if balanced is not None:
            return outcome, balanced
    return outcome, verdict


def pool_totals(state: PlanState) -> dict[str, PoolTotals]:
    """What each NodePool costs and how much moving all its pods would disrupt (for the Balanced policy)."""
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


def _multi_node_prefix(state: PlanState) -> list[Candidate]:
    """The consolidation candidates multi-node consolidation may take together: cheapest to disrupt
    first, as many of each pool as its `Underutilized` budget allows, at most 100."""
    prefix: list[Candidate] = []
    per_pool: dict[str, int] = {}
    for candidate in _by_disruption_cost(state.candidates()):
        pool = candidate.nodepool.name
        if candidate.empty or consolidation_blocker(state, candidate) is not None:
            continue
        if state.budget_blocker(candidate, DisruptionReason.UNDERUTILIZED, per_pool.get(pool, 0)) is not None:
            continue
        prefix.append(candidate)
        per_pool[pool] = per_pool.get(pool, 0) + 1
    return prefix[:MAX_MULTI_NODE_CANDIDATES]


def _longest_prefix(
    state: PlanState, prefix: Sequence[Candidate]
) -> tuple[int, Outcome, Consolidation] | None:
    """The longest prefix (at least 2 candidates) that consolidates, by binary search over its length as
    Karpenter searches; its trial is left open for the caller to execute."""
    best: int | None = None
    low, high = 1, len(prefix) - 1
    while low <= high:
        middle = (low + high) // 2
        outcome, verdict = _evaluate(state, prefix[: middle + 1], stop_early=True)
        if isinstance(verdict, Consolidation):
            best, low = middle + 1, middle + 1
            if low > high:
                return best, outcome, verdict
        else:
            high = middle - 1
        state.sandbox.rollback()
    if best is None:
        return None
    # The best trial was rolled back when a longer one was tried: run it again.
    outcome, verdict = _evaluate(state, prefix[:best], stop_early=True)
    if not isinstance(verdict, Consolidation):
        raise AssertionError("a consolidation found by the search must hold when simulated again")
    return best, outcome, verdict


def multi_node_consolidation(state: PlanState) -> None:
    """Repeatedly take the longest prefix of the candidates that can be deleted together or replaced by
    one cheaper node."""
    while True:
        prefix = _multi_node_prefix(state)
        found = _longest_prefix(state, prefix)
        if found is None:
            return
        length, outcome, verdict = found
        _execute(state, Method.MULTI_NODE_CONSOLIDATION, prefix[:length], outcome, verdict)


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
    for candidate in _interleaved(state.candidates()):
        if not state.available(candidate):
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
