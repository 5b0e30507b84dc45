"""The solver behind the repack: which candidate nodes to retire, where their pods go, and which instance types
to launch for them, as a mixed-integer program solved by HiGHS; and the same problem's linear relaxation, whose
optimum no plan can beat.

Pods are grouped into classes (same requests, same places they may go), so a class's variables count pods
instead of naming them. For each candidate node `r` says whether it retires; a retired candidate's pods must all
be placed (on room left on nodes that stay, a kept candidate's included, or on new nodes), a kept one keeps its
pods and only its free room takes others. A new node is a slot that takes at most one instance type; its pods
must fit that type's allocatable less DaemonSet overhead. Linear limits bound the retirement (the NodePools'
budgets, the PDBs' allowed evictions, the pods one command may move), and the saving must reach a minimum and a
share of what the retired candidates cost.

The program knows requests, taints, labels, instance types and, when given, the zones each class may go to (a
zonal topology spread): a new node is then in one zone its type launches in, and holds only pods that zone
admits. Other topology, affinity between pods, host ports, volumes and minValues are left to the scheduling
simulation, which verifies every proposal (`repack`). So the
program is a relaxation of what a plan may do, and its relaxation in turn (`relaxed_savings`: retirements,
pod counts and new nodes fractional, nodes of the same kind pooled) bounds from above what any plan can save.

Everything here is deterministic: the search is bounded by a number of branch-and-bound nodes, not by time,
unless the caller passes a time limit (its deadline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt

from core.scheduling.instancetypeset import BoolArray, IntArray

FloatArray = npt.NDArray[np.float64]

MICROS = 1_000_000.0
"""The savings row is in dollars per hour; the objective is in micro-dollars per hour (prices as they are), so
that the search's tolerances sit far below one micro-dollar."""
ABSOLUTE_GAP = 0.1
"""The search stops when its best plan is proven within this many micro-dollars per hour of the optimum."""
MOVE_WEIGHT = 0.2
"""What one moved pod costs in the objective (micro-dollars per hour): among plans that save the same, fewer
moves. Twice the search's absolute gap, so that the search tells such plans apart; at most 10 micro-dollars
($0.00001/h) for the 50 pods a command may move, so it only outweighs a price difference smaller than that. The
bounds leave it out."""
INTEGER_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class Limit:
    """At most `limit` of the weighted retirements: sum(weights[n] * retire[n]) <= limit."""

    weights: IntArray
    limit: int


@dataclass(frozen=True, slots=True)
class PackingProblem:
    """Candidates (N), destination nodes (D), pod classes (G), instance types (T) and resources (R)."""

    requests: IntArray
    """(G, R): what one pod of each class asks for."""
    counts: IntArray
    """(G, N): pods of each class on each candidate, that must move if it retires."""
    price: IntArray
    """(N,): what each candidate costs per hour, in micro-dollars."""
    candidate_free: IntArray
    """(N, R): room left on each candidate while it stays."""
    kind: IntArray
    """(N,): the destination each candidate's room belongs to."""
    free: IntArray
    """(D, R): room left on each destination while every candidate of it stays."""
    admits: BoolArray
    """(G, D): whether a pod of the class may go to the destination."""
    headroom: IntArray
    """(T, R): allocatable less DaemonSet overhead of each instance type."""
    type_price: IntArray
    """(T,): what a new node of each type costs per hour, in micro-dollars."""
    fits: BoolArray
    """(G, T): whether a new node of the type may hold a pod of the class."""
    limits: tuple[Limit, ...] = ()
    min_savings: int = 0
    min_savings_percent: float = 0.0
    """The saving must also reach this share (in percent) of the retired candidates' price."""
    slots: int = 0
    """How many new nodes a solution may launch at most."""
    exclude: tuple[frozenset[int], ...] = ()
    """Sets of candidates a solution may not retire exactly."""
    fixed: frozenset[int] | None = None
    """When set, exactly these candidates retire."""
    zones: BoolArray | None = None
    """(G, Z): the zones a new node may be in to hold a pod of the class (its zonal topology spread); None:
    zones left out, a new node may be anywhere."""
    type_zones: BoolArray | None = None
    """(T, Z): whether a new node of the type can launch in the zone (with `zones`)."""


@dataclass(frozen=True, slots=True)
class Packing:
    """A solution: the candidates to retire, where their pods go, and the new nodes."""

    retire: tuple[int, ...]
    moves: IntArray
    """(G, D): pods of each class sent to each destination."""
    launches: tuple[tuple[int, IntArray], ...]
    """Per new node: its instance type and how many pods of each class it holds."""
    savings: int
    """What the solution saves per hour, in micro-dollars (candidates' prices less the new nodes')."""
    zones: tuple[int | None, ...] = ()
    """Per new node, its zone (a column of `PackingProblem.zones`), None when the problem left zones out."""


class _Model:
    """A linear program built column by column and row by row, handed to HiGHS at once."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def column(self, cost: float, upper: float, integer: bool, lower: float = 0.0) -> int:
        self.cost.append(cost)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, terms: Sequence[tuple[int, float]], lower: float, upper: float) -> None:
        for column, value in terms:
            if value != 0.0:
                self.index.append(column)
                self.value.append(value)
        self.starts.append(len(self.index))
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    def solve(
        self, mip: bool, max_nodes: int | None = None, time_limit: float | None = None
    ) -> tuple[highspy.Highs, bool]:
        """The solved model, and whether it found a solution."""
        lp = highspy.HighsLp()
        lp.num_col_ = len(self.cost)
        lp.num_row_ = len(self.row_lower)
        lp.col_cost_ = np.array(self.cost)
        lp.col_lower_ = np.array(self.lower)
        lp.col_upper_ = np.array(self.upper)
        lp.row_lower_ = np.array(self.row_lower)
        lp.row_upper_ = np.array(self.row_upper)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(self.index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(self.value)
        if mip:
            lp.integrality_ = [
                highspy.HighsVarType.kInteger if integer else highspy.HighsVarType.kContinuous
                for integer in self.integer
            ]
        highs = highspy.Highs()  # type: ignore[no-untyped-call]
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("mip_rel_gap", 0.0)
        highs.setOptionValue("mip_abs_gap", ABSOLUTE_GAP)
        if max_nodes is not None:
            highs.setOptionValue("mip_max_nodes", max_nodes)
        if time_limit is not None:
            highs.setOptionValue("time_limit", max(0.01, time_limit))
        highs.passModel(lp)
        highs.run()
        solved = highs.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
        return highs, solved


def _scales(problem: PackingProblem) -> FloatArray:
    """Per resource, a unit that keeps the coefficients near 1 (bytes of memory next to cores)."""
    largest = np.maximum(
        np.max(problem.headroom, axis=0, initial=0), np.max(problem.requests, axis=0, initial=0)
    )
    return np.where(largest > 0, largest, 1).astype(np.float64)


def _used(problem: PackingProblem) -> list[int]:
    """The resources some pod asks for (the others cannot bind)."""
    return [k for k in range(problem.requests.shape[1]) if problem.requests[:, k].any()]


def _retirements(
    model: _Model, problem: PackingProblem, integer: bool, move_weight: float = MOVE_WEIGHT
) -> list[int]:
    """One column per candidate (retire or not), with its limits, exclusions and fixings; each pod it would move
    costs `move_weight`."""
    retire = []
    for n in range(problem.price.size):
        upper = 1.0
        lower = 0.0
        if problem.fixed is not None:
            lower = upper = 1.0 if n in problem.fixed else 0.0
        moved = float(problem.counts[:, n].sum())
        retire.append(model.column(-float(problem.price[n]) + move_weight * moved, upper, integer, lower))
    for limit in problem.limits:
        terms = [(retire[n], float(w)) for n, w in enumerate(limit.weights.tolist()) if w]
        if terms:
            model.row(terms, -highspy.kHighsInf, float(limit.limit))
    for excluded in problem.exclude:
        terms = [(retire[n], 1.0 if n in excluded else -1.0) for n in range(len(retire))]
        model.row(terms, -highspy.kHighsInf, len(excluded) - 1.0)
    return retire


def _destinations(
    model: _Model, problem: PackingProblem, retire: list[int], integer: bool, scales: FloatArray
) -> tuple[dict[tuple[int, int], int], list[list[tuple[int, float]]]]:
    """Columns of pods sent to destinations, their room rows, and each class's balance so far."""
    groups = problem.requests.shape[0]
    total = problem.counts.sum(axis=1)
    moves: dict[tuple[int, int], int] = {}
    balance: list[list[tuple[int, float]]] = [
        [(retire[n], -float(problem.counts[g, n])) for n in range(len(retire)) if problem.counts[g, n]]
        for g in range(groups)
    ]
    for d in range(problem.free.shape[0]):
        for g in range(groups):
            if problem.admits[g, d] and total[g]:
                column = model.column(0.0, float(total[g]), integer)
                moves[(g, d)] = column
                balance[g].append((column, 1.0))
    owners: dict[int, list[int]] = {}
    for n, d in enumerate(problem.kind.tolist()):
        owners.setdefault(d, []).append(n)
    for d in range(problem.free.shape[0]):
        for k in _used(problem):
            terms = [
                (moves[(g, d)], problem.requests[g, k] / scales[k]) for g in range(groups) if (g, d) in moves
            ]
            if not terms:
                continue
            terms += [(retire[n], problem.candidate_free[n, k] / scales[k]) for n in owners.get(d, ())]
            model.row(terms, -highspy.kHighsInf, problem.free[d, k] / scales[k])
    return moves, balance


_Slots = list[tuple[dict[int, int], dict[int, int], dict[int, int]]]
"""Per slot: its type columns, the pods of each class it holds, and its zone columns (by zone)."""


def _packing_model(
    problem: PackingProblem, floor: int, percent: float = 0.0, move_weight: float = MOVE_WEIGHT
) -> tuple[_Model, list[int], dict[tuple[int, int], int], _Slots]:
    """The mixed-integer program: its retirement columns, pod moves and slots; the saving at least `floor` and
    `percent` of the retired candidates' price."""
    model = _Model()
    scales = _scales(problem)
    retire = _retirements(model, problem, integer=True, move_weight=move_weight)
    moves, balance = _destinations(model, problem, retire, integer=True, scales=scales)
    groups, types = problem.fits.shape
    total = problem.counts.sum(axis=1)
    slots: _Slots = []
    previous: list[int] | None = None
    for _ in range(problem.slots):
        chosen = {
            t: model.column(float(problem.type_price[t]), 1.0, True)
            for t in range(types)
            if problem.fits[:, t].any()
        }
        if not chosen:
            break
        model.row([(column, 1.0) for column in chosen.values()], -highspy.kHighsInf, 1.0)
        if previous is not None:  # slots fill in order: no two solutions differ by which slot is used
            model.row(
                [(column, 1.0) for column in chosen.values()] + [(column, -1.0) for column in previous],
                -highspy.kHighsInf,
                0.0,
            )
        previous = list(chosen.values())
        held = {}
        for g in range(groups):
            if total[g] and problem.fits[g].any():
                column = model.column(0.0, float(total[g]), True)
                held[g] = column
                balance[g].append((column, 1.0))
                # The pods of a class go only on a slot whose type may hold them.
                model.row(
                    [(column, 1.0)] + [(chosen[t], -float(total[g])) for t in chosen if problem.fits[g, t]],
                    -highspy.kHighsInf,
                    0.0,
                )
        for k in _used(problem):
            terms = [(held[g], problem.requests[g, k] / scales[k]) for g in held]
            terms += [(chosen[t], -problem.headroom[t, k] / scales[k]) for t in chosen]
            model.row(terms, -highspy.kHighsInf, 0.0)
        slots.append((chosen, held, _slot_zones(model, problem, chosen, held)))
    for terms in balance:
        if terms:
            model.row(terms, 0.0, 0.0)
    launched = [(column, problem.type_price[t]) for chosen, _, _ in slots for t, column in chosen.items()]
    spent = [(column, -price / MICROS) for column, price in launched]
    model.row(
        [(retire[n], problem.price[n] / MICROS) for n in range(len(retire))] + spent,
        floor / MICROS,
        highspy.kHighsInf,
    )
    if percent > 0:
        # What the new nodes cost stays within the share of the retired candidates' price the saving leaves.
        kept = 1.0 - percent / 100
        model.row(
            [(retire[n], kept * problem.price[n] / MICROS) for n in range(len(retire))] + spent,
            0.0,
            highspy.kHighsInf,
        )
    return model, retire, moves, slots


def _slot_zones(
    model: _Model, problem: PackingProblem, chosen: dict[int, int], held: dict[int, int]
) -> dict[int, int]:
    """A used slot is in exactly one zone, one its type launches in, and holds only pods that zone admits."""
    if problem.zones is None or problem.type_zones is None or not problem.zones.shape[1]:
        return {}
    total = problem.counts.sum(axis=1)
    zones = {z: model.column(0.0, 1.0, True) for z in range(problem.zones.shape[1])}
    model.row(
        [(column, 1.0) for column in zones.values()] + [(column, -1.0) for column in chosen.values()],
        0.0,
        0.0,
    )
    for t, column in chosen.items():
        for z in np.flatnonzero(~problem.type_zones[t]).tolist():
            model.row([(column, 1.0), (zones[z], 1.0)], -highspy.kHighsInf, 1.0)
    for g, column in held.items():
        if problem.zones[g].all():
            continue
        model.row(
            [(column, 1.0)]
            + [(zones[z], -float(total[g])) for z in np.flatnonzero(problem.zones[g]).tolist()],
            -highspy.kHighsInf,
            0.0,
        )
    return zones


def solve_packing(
    problem: PackingProblem, max_nodes: int = 2000, time_limit: float | None = None
) -> Packing | None:
    """The cheapest way to retire candidates and re-home their pods that saves at least `min_savings` and
    `min_savings_percent` of what it retires, or None when there is none (or none was found within the search's
    bounds)."""
    model, retire, moves, slots = _packing_model(
        problem, max(problem.min_savings, 1), problem.min_savings_percent
    )
    groups = problem.requests.shape[0]
    highs, solved = model.solve(mip=True, max_nodes=max_nodes, time_limit=time_limit)
    if not solved:
        return None
    values = np.asarray(highs.getSolution().col_value)
    retired = tuple(n for n, column in enumerate(retire) if values[column] > 0.5)
    sent = np.zeros(problem.admits.shape, dtype=np.int64)
    for (g, d), column in moves.items():
        sent[g, d] = round(values[column])
    launches = []
    zones: list[int | None] = []
    for chosen, held, in_zone in slots:
        picked = [t for t, column in chosen.items() if values[column] > 0.5]
        if not picked:
            continue
        pods = np.zeros(groups, dtype=np.int64)
        for g, column in held.items():
            pods[g] = round(values[column])
        if pods.any():
            launches.append((picked[0], pods))
            zones.append(next((z for z, column in in_zone.items() if values[column] > 0.5), None))
    savings = int(problem.price[list(retired)].sum()) - sum(int(problem.type_price[t]) for t, _ in launches)
    return Packing(retired, sent, tuple(launches), savings, tuple(zones))


def savings_bound(
    problem: PackingProblem, max_nodes: int = 2000, time_limit: float | None = None
) -> tuple[int, bool] | None:
    """An upper bound on what any plan can save (micro-dollars per hour), and whether it is the program's
    optimum (else the bound its search proved when it stopped early); None when it proved none. The minimum
    saving and its share do not apply; give `slots` as many as there are pods, so that the program is a relaxation of every
    plan."""
    model, _, _, _ = _packing_model(problem, 0, move_weight=0.0)
    highs, _ = model.solve(mip=True, max_nodes=max_nodes, time_limit=time_limit)
    if highs.getModelStatus() not in (
        highspy.HighsModelStatus.kOptimal,
        highspy.HighsModelStatus.kSolutionLimit,
        highspy.HighsModelStatus.kTimeLimit,
        highspy.HighsModelStatus.kIterationLimit,
    ):
        return None
    dual = highs.getInfo().mip_dual_bound
    if not np.isfinite(dual):
        return None
    # Prices are whole micro-dollars, so is any plan's saving: the bound rounds to the nearest (the solver's
    # tolerances are far below one).
    optimal = highs.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return max(0, int(np.floor(-dual + 0.5))), optimal


def relaxed_savings(problem: PackingProblem, time_limit: float | None = None) -> int | None:
    """An upper bound on what any plan can save (micro-dollars per hour), from the linear relaxation: candidates
    retire in fractions, pods split, new nodes come in fractions of a node of each type; None if HiGHS could not
    solve it. The minimum saving and slot count do not apply."""
    model = _Model()
    scales = _scales(problem)
    retire = _retirements(model, problem, integer=False, move_weight=0.0)
    _, balance = _destinations(model, problem, retire, integer=False, scales=scales)
    groups, types = problem.fits.shape
    total = problem.counts.sum(axis=1)
    for t in range(types):
        holders = [g for g in range(groups) if problem.fits[g, t] and total[g]]
        if not holders:
            continue
        nodes = model.column(float(problem.type_price[t]), highspy.kHighsInf, False)
        held = {}
        for g in holders:
            held[g] = model.column(0.0, float(total[g]), False)
            balance[g].append((held[g], 1.0))
        for k in _used(problem):
            terms = [(held[g], problem.requests[g, k] / scales[k]) for g in held]
            model.row([*terms, (nodes, -problem.headroom[t, k] / scales[k])], -highspy.kHighsInf, 0.0)
    for terms in balance:
        if terms:
            model.row(terms, 0.0, 0.0)
    highs, solved = model.solve(mip=False, time_limit=time_limit)
    if not solved or highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    objective = highs.getInfo().objective_function_value
    # Rounded up, and a tolerance's worth more, so that the bound is never above a plan.
    return max(0, int(np.ceil(-objective)) + 1)
