"""What the cluster costs, and a lower bound on what it could cost after any plan made now.

The bound is the cost of the nodes no method may disrupt now (not candidates, or held by do-not-disrupt pods,
PDBs that allow no eviction now, a consolidateAfter not yet passed, the WhenEmpty policy) plus the cheapest way
to hold the pods of the others, found by the solver (`core.disruption.packing`) over every candidate at once:
which retire (within each NodePool's budget, and the evictions each PDB allows now), where their pods go
(room on nodes that stay, a kept candidate's included) and which instance types to launch for the rest.

What it relaxes, and why that keeps it below every plan: it knows requests, taints and labels, not topology,
affinity between pods, host ports or minValues (leaving constraints out can only lower the optimum); it ignores
the one-command-at-a-time order, nominations and the spot and price rules of replacements (plans obey them,
the bound need not); pods that cannot move keep their nodes, as in every plan. A small cluster (a few candidates
and pods) is solved exactly, so the bound is the cheapest home of its pods under those rules (or, should the
search stop at its node limit, the bound it proved); a larger one is bounded by the linear relaxation
(candidates retiring in fractions, nodes of the same kind pooling their room, new capacity bought by the
fraction of a node), which is below the exact optimum.

Budgets, PDB allowances and consolidateAfter change between passes, so this is the bound of this pass: a later
pass, with those freed, may go lower. Left without the budgets' and PDBs' limits (`eventual`) it bounds what
passes made one after another can reach: each keeps a node with all the pods it had, or moves them all, so a
node that stays to the end still holds its own pods, as the program keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.api.nodepool import DisruptionReason
from core.disruption.candidates import Candidate
from core.disruption.methods import consolidation_blocker
from core.disruption.packing import Limit, PackingProblem, relaxed_savings, savings_bound
from core.disruption.repack import pool_types, undominated
from core.disruption.state import PlanState
from core.instancetypes.types import dollars
from core.scheduling.instancetypeset import NO_PRICE, IntArray
from core.scheduling.removal import PodFit

EXACT_CANDIDATES = 8
"""Up to this many candidates (and `EXACT_PODS` pods), the bound is the exact program's optimum."""
EXACT_PODS = 16
EXACT_SOLVER_NODES = 5_000
"""Branch-and-bound nodes the exact bound may take; stopped early, it keeps the bound the search proved."""


@dataclass(frozen=True, slots=True)
class PlanCost:
    """The cluster's cost per hour now, after the plan, and the bound no plan made now can beat."""

    now_micros: int
    after_micros: int
    bound_micros: int
    exact: bool
    """Whether the bound is the exact program's optimum (else its linear relaxation)."""

    @property
    def gap_micros(self) -> int:
        """What the plan leaves above the bound, per hour."""
        return self.after_micros - self.bound_micros

    def to_json(self) -> dict[str, object]:
        achievable = self.now_micros - self.bound_micros
        return {
            "cost_per_hour": round(dollars(self.now_micros), 6),
            "cost_after_plan_per_hour": round(dollars(self.after_micros), 6),
            "lower_bound_per_hour": round(dollars(self.bound_micros), 6),
            "gap_per_hour": round(dollars(self.gap_micros), 6),
            "gap_percent": round(100.0 * self.gap_micros / self.bound_micros, 2)
            if self.bound_micros
            else None,
            "share_of_achievable_saving": (
                round((self.now_micros - self.after_micros) / achievable, 4) if achievable > 0 else None
            ),
            "bound": "exact" if self.exact else "linear relaxation",
        }


def _disruptable(state: PlanState, candidate: Candidate) -> bool:
    """Whether some method could take the candidate in this pass, its pods leaving (only in the NodePools the
    plan was asked for)."""
    if state.options.nodepools is not None and candidate.nodepool.name not in state.options.nodepools:
        return False
    if candidate.name in {c.name for c in state.report.expiring}:
        return True
    if candidate.drift is not None and state.pod_blocker(candidate, eventual=True) is None:
        return True
    if candidate.empty:
        return candidate.quiet is None and state.pod_blocker(candidate) is None
    return consolidation_blocker(state, candidate) is None


def cluster_bound(state: PlanState, eventual: bool = False) -> tuple[int, int, bool]:
    """The cluster's cost now, the bound (both micro-dollars per hour) and whether the bound is exact; call it
    before any method ran. `eventual`: the bound of any sequence of passes, without this pass's budgets and PDB
    allowances (a later pass has those freed; a PDB that allows no eviction now still keeps its pods, and so
    does consolidateAfter)."""
    report = state.report
    now = sum(report.pool_price.values())
    candidates = [c for c in [*report.candidates, *report.expiring] if c.price_micros is not None]
    candidates = [c for c in candidates if _disruptable(state, c)]
    if not candidates:
        return now, now, True
    capacity = state.sandbox.capacity([c.name for c in candidates], closed=report.under_consolidate_after)
    fits: dict[str, list[PodFit]] = {c.name: [] for c in candidates}
    for fit in capacity.pods:
        fits[fit.node].append(fit)
    classes: dict[tuple[object, ...], int] = {}
    samples: list[PodFit] = []
    members: list[tuple[int, int]] = []
    for n, candidate in enumerate(candidates):
        for fit in fits[candidate.name]:
            key = (fit.requests.tobytes(), id(fit.nodes), tuple(id(m) for m in fit.types.values()))
            if key not in classes:
                classes[key] = len(samples)
                samples.append(fit)
            members.append((classes[key], n))
    groups, count = len(samples), len(candidates)
    counts = np.zeros((groups, count), dtype=np.int64)
    for g, n in members:
        counts[g, n] += 1
    pods = int(counts.sum())
    exact = count <= EXACT_CANDIDATES and pods <= EXACT_PODS
    rows = {name: row for row, name in enumerate(capacity.nodes)}
    admits = np.array([s.nodes for s in samples], dtype=np.bool_).reshape(groups, len(capacity.nodes))
    admits &= capacity.open
    free = np.maximum(capacity.free, 0)
    candidate_free = free[[rows[c.name] for c in candidates]]
    if exact:
        destinations = [row for row in range(len(capacity.nodes)) if admits[:, row].any()]
        index = {row: d for d, row in enumerate(destinations)}
        kind = np.array([index.get(rows[c.name], -1) for c in candidates], dtype=np.int64)
        dest_free = free[destinations]
        dest_admits = admits[:, destinations]
    else:
        # Nodes that admit the same classes pool their room: a relaxation of packing them one by one.
        signatures: dict[bytes, int] = {}
        of_row = np.full(len(capacity.nodes), -1, dtype=np.int64)
        for row in range(len(capacity.nodes)):
            if admits[:, row].any():
                of_row[row] = signatures.setdefault(admits[:, row].tobytes(), len(signatures))
        kinds = len(signatures)
        dest_free = np.zeros((kinds, len(capacity.axes)), dtype=np.int64)
        dest_admits = np.zeros((groups, kinds), dtype=np.bool_)
        for row in np.flatnonzero(of_row >= 0).tolist():
            dest_free[of_row[row]] += free[row]
            dest_admits[:, of_row[row]] = admits[:, row]
        kind = np.array([of_row[rows[c.name]] for c in candidates], dtype=np.int64)
    candidate_free = np.where((kind >= 0)[:, None], candidate_free, 0)
    kind = np.maximum(kind, 0)
    types = [
        (pool, row, int(prices[row]), headroom[row])
        for pool, prices, headroom in pool_types(state, capacity, avoid_spot=False)
        for row in np.flatnonzero(prices != NO_PRICE).tolist()
    ]
    requests = np.array([s.requests for s in samples], dtype=np.int64).reshape(groups, len(capacity.axes))
    fits_types = np.array(
        [[bool(s.types[pool][row]) for pool, row, _, _ in types] for s in samples], dtype=np.bool_
    ).reshape(groups, len(types))
    headroom = np.array([t[3] for t in types], dtype=np.int64).reshape(len(types), len(capacity.axes))
    prices = np.array([t[2] for t in types], dtype=np.int64)
    keep = undominated(headroom, prices, fits_types, requests)
    problem = PackingProblem(
        requests=requests,
        counts=counts,
        price=np.array([c.price_micros or 0 for c in candidates], dtype=np.int64),
        candidate_free=candidate_free,
        kind=kind,
        free=dest_free,
        admits=dest_admits,
        headroom=headroom[keep],
        type_price=prices[keep],
        fits=fits_types[:, keep],
        limits=() if eventual else _limits(state, candidates),
        slots=pods,
    )
    saved: int | None = None
    if exact:
        proven = savings_bound(problem, EXACT_SOLVER_NODES)
        if proven is not None:
            saved, exact = proven
    if saved is None:
        saved, exact = relaxed_savings(problem), False
    if saved is None:
        return now, 0, False
    return now, max(0, now - saved), exact


def _limits(state: PlanState, candidates: list[Candidate]) -> tuple[Limit, ...]:
    """Each NodePool's budget (the largest of its reasons'), and the evictions each PDB allows now."""
    count = len(candidates)
    expiring = {c.name for c in state.report.expiring}
    limits = []
    for pool in sorted({c.nodepool.name for c in candidates}):
        budgets = [state.budgets.allowed(pool, reason) for reason in DisruptionReason]
        if all(value is not None for value in budgets):
            weights = np.array(
                [c.nodepool.name == pool and c.name not in expiring for c in candidates], dtype=np.int64
            )
            limits.append(Limit(weights, max(value or 0 for value in budgets)))
    evictions: dict[str, tuple[int, IntArray]] = {}
    for n, candidate in enumerate(candidates):
        if candidate.name in expiring:
            continue
        for pod in candidate.pods:
            for key, allowed in state.pdbs.limits(pod):
                evictions.setdefault(key, (allowed, np.zeros(count, dtype=np.int64)))[1][n] += 1
    limits.extend(Limit(weights, allowed) for allowed, weights in evictions.values())
    return tuple(limits)
