"""The repack: after Karpenter's methods, re-home the pods of some candidates onto room on nodes that stay and onto
new nodes of any instance types their NodePools allow, where that makes the cluster cheaper.

Karpenter's consolidation deletes a node, replaces one node with one cheaper node, or merges several into one;
it never re-homes pods onto two or more new nodes (kubernetes-sigs/karpenter#1962). The repack runs last and
only on the candidates those methods left, so where they act their commands are the ones they are today.

How it searches: the candidates consolidation may take (not empty, consolidateAfter passed, not WhenEmpty,
priced, their pods free to leave, budget left) are split into groups whose pods could trade places (they share a
NodePool they may launch in or nodes they may run on), and each group into windows of a few candidates, most
wasteful first (price times the share of the node its pods leave idle). For a window a mixed-integer program
(`core.disruption.packing`, HiGHS) picks which candidates retire, where their pods go among the nodes with
the most room and up to a few new nodes, and which instance type each new node is, within the pools' budgets,
the PDBs' allowed evictions, the pods a command may move and its minimum saving (an amount per hour, and a
share of what the candidates it retires cost, so that no command saves pennies on dear nodes). The program knows
requests, taints, labels and the zones a DoNotSchedule zonal spread lets each pod go to (counted with that pod alone
away, so a command moves at most one pod of each such spread; each new node is pinned to one zone); the
scheduling simulation then places each pod where the program sent it, with every constraint the scheduler
checks (topology spread, affinity, volume topology, host ports, DaemonSet overhead, minValues, limits), and a
proposal it cannot place is dropped: the program is solved again, the pods refused on a node that stays sent
elsewhere, or without that set of candidates. Each solve takes at most a share of the deadline.

A verified proposal is priced as Karpenter prices a consolidation replacement: a replacement that may be spot or
on-demand is made spot-only; one that replaces spot capacity with spot needs the SpotToSpotConsolidation gate
and, each, at least 15 cheaper instance types, launched from the 15 cheapest; each keeps the types whose worst
launch price stays within its share of the saving, so that whichever it launches the command saves at least
the minimum; minValues must still be met, and Balanced NodePools must approve. The command's reason is
Karpenter's `Underutilized`, it is logged as Karpenter logs a consolidation, and it is validated, launched and
rolled back as one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core import labels
from core.api.kube import pod_key
from core.api.nodepool import DisruptionReason
from core.disruption.candidates import Candidate
from core.disruption.commands import Decision, Method, Repacked, format_price
from core.disruption.consolidation import (
    MIN_SPOT_TO_SPOT_OPTIONS,
    SPOT_ONLY,
    Consolidation,
    balanced_verdict,
    candidates_price,
)
from core.disruption.methods import consolidation_blocker, pool_totals
from core.disruption.options import RepackOptions, required_savings
from core.disruption.packing import Limit, Packing, PackingProblem, solve_packing
from core.disruption.replacements import Priced
from core.disruption.simulation import Outcome
from core.disruption.state import PlanState
from core.disruption.steering import Mover, Places, Steering, SteeringModel, owner_counts, spread_owner
from core.scheduling.instancetypeset import NO_PRICE, BoolArray, IntArray
from core.scheduling.removal import Capacity, PlannedNodeClaim, PodFit
from core.scheduling.requirements import Operator, Requirement

HOSTS = 16
"""Nodes that stay, besides the window's candidates, offered as destinations (those with the most room)."""
RETRIES = 4
"""Proposals of one window the simulation may refuse before the window is given up."""
SETTLING_MARGIN = 0.1
"""The share of every node's room the solver leaves unused, more at each try, when the steered drain could not
carry out a tighter packing (`steering`)."""
MAX_SOLVER_NODES = 2000
"""Branch-and-bound nodes one solve may explore (a deterministic bound on its work)."""
SOLVE_SHARE = 1 / 3
"""The share of the deadline one solve may take at most, so that a proposal the simulation refuses leaves time
for another."""


@dataclass(frozen=True, slots=True)
class NewType:
    """An instance type a new node of a window may be: its pool, its row there, and what it offers."""

    nodepool: str
    row: int
    name: str
    price: int
    """Its worst launch price under the pool's requirements (Karpenter compares replacements by it)."""
    headroom: IntArray


def eligible(state: PlanState, candidate: Candidate) -> bool:
    """Whether consolidation may take the candidate now: the filters of multi-node consolidation."""
    return (
        not candidate.empty
        and consolidation_blocker(state, candidate) is None
        and state.budget_blocker(candidate, DisruptionReason.UNDERUTILIZED) is None
    )


def pool_types(
    state: PlanState, capacity: Capacity, avoid_spot: bool
) -> list[tuple[str, IntArray, IntArray]]:
    """Per NodePool, its types' worst launch prices under its requirements (`NO_PRICE`: none) and headroom; with
    `avoid_spot`, pools that may launch spot are left out."""
    found = []
    for pool in capacity.pools:
        catalog = state.catalogs.get(pool.nodepool)
        if catalog is None:
            continue
        offered = catalog.types.offering_mask(pool.requirements)
        if avoid_spot:
            spot = [o.capacity_type == labels.CAPACITY_TYPE_SPOT for o in catalog.types.offerings]
            if (offered & np.array(spot, dtype=np.bool_)).any():
                continue
        prices = np.where(pool.launchable, catalog.worst_prices(offered), NO_PRICE)
        found.append((pool.nodepool, prices, pool.headroom))
    return found


class _Window:
    """One window's problem: its candidates, their pods in classes, the destinations and the types."""

    def __init__(
        self,
        state: PlanState,
        capacity: Capacity,
        candidates: Sequence[Candidate],
        fits: dict[str, list[PodFit]],
        options: RepackOptions,
    ) -> None:
        self.state = state
        self.capacity = capacity
        self.candidates = list(candidates)
        self._offered: dict[tuple[str, str], BoolArray] = {}
        rows = {name: row for row, name in enumerate(capacity.nodes)}
        self.rows = [rows[c.name] for c in self.candidates]
        classes: dict[tuple[object, ...], int] = {}
        self.members: list[list[tuple[int, PodFit]]] = []
        self.samples: list[PodFit] = []
        for n, candidate in enumerate(self.candidates):
            for fit in fits[candidate.name]:
                key = (
                    fit.requests.tobytes(),
                    id(fit.nodes),
                    tuple(id(m) for m in fit.types.values()),
                    fit.zones,
                )
                if key not in classes:
                    classes[key] = len(self.samples)
                    self.samples.append(fit)
                    self.members.append([])
                self.members[classes[key]].append((n, fit))
        groups = len(self.samples)
        admitted = np.zeros(len(capacity.nodes), dtype=np.bool_)
        for sample in self.samples:
            admitted |= sample.nodes
        admitted &= capacity.open
        admitted[self.rows] = False
        room = np.maximum(capacity.free, 0).astype(np.float64)
        scale = np.maximum(room.max(axis=0), 1.0)
        score = (room / scale).sum(axis=1)
        others = [row for row in np.argsort(-score, kind="stable").tolist() if admitted[row]][:HOSTS]
        self.destinations = self.rows + others
        spot = any(c.capacity_type == labels.CAPACITY_TYPE_SPOT for c in self.candidates)
        self.types: list[NewType] = []
        avoid_spot = spot and not state.options.spot_to_spot_consolidation
        for pool, prices, headroom in pool_types(state, capacity, avoid_spot):
            holds = np.zeros(prices.size, dtype=np.bool_)
            for sample in self.samples:
                holds |= sample.types.get(pool, holds)
            for row in np.flatnonzero(holds & (prices != NO_PRICE)).tolist():
                name = capacity.pool(pool).names[row]
                self.types.append(NewType(pool, row, name, int(prices[row]), headroom[row]))
        requests = np.array([s.requests for s in self.samples], dtype=np.int64)
        fits_types = np.array(
            [[bool(s.types[t.nodepool][t.row]) for t in self.types] for s in self.samples], dtype=np.bool_
        ).reshape(groups, len(self.types))
        keep = undominated(
            np.array([t.headroom for t in self.types], dtype=np.int64).reshape(
                len(self.types), len(capacity.axes)
            ),
            np.array([t.price for t in self.types], dtype=np.int64),
            fits_types,
            requests,
        )
        self.types = [self.types[t] for t in keep]
        counts = np.zeros((groups, len(self.candidates)), dtype=np.int64)
        for g, members in enumerate(self.members):
            for n, _ in members:
                counts[g, n] += 1
        free = np.maximum(capacity.free[self.destinations], 0)
        self.zones = sorted({zone for s in self.samples if s.zones is not None for zone in s.zones})
        """The zones new nodes are pinned to when some pod's zonal topology spread limits where it may go."""
        admits = np.array([s.nodes[self.destinations] for s in self.samples], dtype=np.bool_).reshape(
            groups, len(self.destinations)
        )
        in_zones = [capacity.zones[row] for row in self.destinations]
        for g, sample in enumerate(self.samples):
            if sample.zones is not None:
                admits[g] &= np.array([zone in sample.zones for zone in in_zones], dtype=np.bool_)
        self.problem = PackingProblem(
            requests=requests.reshape(groups, len(capacity.axes)),
            counts=counts,
            price=np.array([c.price_micros or 0 for c in self.candidates], dtype=np.int64),
            candidate_free=free[: len(self.rows)],
            kind=np.arange(len(self.rows), dtype=np.int64),
            free=free,
            admits=admits,
            headroom=np.array([t.headroom for t in self.types], dtype=np.int64).reshape(
                len(self.types), len(capacity.axes)
            ),
            type_price=np.array([t.price for t in self.types], dtype=np.int64),
            fits=fits_types[:, keep],
            limits=self._limits(options, fits),
            min_savings=options.min_savings_micros,
            min_savings_percent=options.min_savings_percent,
            slots=min(int(counts.sum()), len(self.candidates) + 2),
            zones=np.array(
                [[s.zones is None or zone in s.zones for zone in self.zones] for s in self.samples],
                dtype=np.bool_,
            ).reshape(groups, len(self.zones))
            if self.zones
            else None,
            type_zones=np.array(
                [
                    [bool(self._offered_in(t.nodepool, zone)[t.row]) for zone in self.zones]
                    for t in self.types
                ],
                dtype=np.bool_,
            ).reshape(len(self.types), len(self.zones))
            if self.zones
            else None,
        )

    def _offered_in(self, nodepool: str, zone: str) -> BoolArray:
        """Per instance type of the pool, whether it has an offering in the zone under the pool's requirements."""
        key = (nodepool, zone)
        found = self._offered.get(key)
        if found is None:
            catalog = self.state.catalogs[nodepool]
            pool = self.capacity.pool(nodepool)
            requirements = pool.requirements.copy()
            requirements.add(Requirement.new(labels.ZONE, Operator.IN, [zone]))
            prices = catalog.worst_prices(catalog.types.offering_mask(requirements))
            found = self._offered[key] = (prices != NO_PRICE) & pool.launchable
        return found

    def _limits(self, options: RepackOptions, fits: dict[str, list[PodFit]]) -> tuple[Limit, ...]:
        """The pools' budgets, the PDBs' allowed evictions and the pods one command may move."""
        state = self.state
        count = len(self.candidates)
        limits = [
            Limit(
                np.array([len(c.reschedulable) for c in self.candidates], dtype=np.int64),
                options.max_pods_moved,
            )
        ]
        for pool in sorted({c.nodepool.name for c in self.candidates}):
            allowed = state.budgets.allowed(pool, DisruptionReason.UNDERUTILIZED)
            if allowed is not None:
                weights = np.array([c.nodepool.name == pool for c in self.candidates], dtype=np.int64)
                limits.append(Limit(weights, allowed))
        evictions: dict[str, tuple[int, IntArray]] = {}
        for n, candidate in enumerate(self.candidates):
            for pod in candidate.pods:
                for key, allowed in state.pdbs.limits(pod):
                    weights = evictions.setdefault(key, (allowed, np.zeros(count, dtype=np.int64)))[1]
                    weights[n] += 1
        limits.extend(Limit(weights, allowed) for allowed, weights in evictions.values())
        # One pod of a zonal spread group moves per command: the zones each pod may go to were counted with it
        # alone taken away, and the simulation places the command's pods in its own order.
        spreads: dict[int, IntArray] = {}
        for n, candidate in enumerate(self.candidates):
            for fit in fits[candidate.name]:
                for group in fit.spreads:
                    spreads.setdefault(group, np.zeros(count, dtype=np.int64))[n] += 1
        limits.extend(Limit(weights, 1) for weights in spreads.values() if weights.sum() > 1)
        return tuple(limits)

    def directions(self, packing: Packing) -> tuple[dict[str, str | int], list[PlannedNodeClaim]]:
        """Where each pod of the retired candidates goes, and the NodeClaims to open: each may be any type of
        its pool that costs at most the solver's choice plus an even share of what the packing saves above the
        minimum it must save, as a consolidation's replacement may be any type cheaper than its candidates
        (Karpenter's spot-to-spot rule counts these options; `_priced` keeps those within the share the simulation
        leaves)."""
        retired = set(packing.retire)
        directions: dict[str, str | int] = {}
        for g, members in enumerate(self.members):
            leaving = [fit.key for n, fit in members if n in retired]
            targets: list[str | int] = []
            for d, count in enumerate(packing.moves[g].tolist()):
                targets += [self.capacity.nodes[self.destinations[d]]] * count
            for index, (_, pods) in enumerate(packing.launches):
                targets += [index] * int(pods[g])
            directions.update(zip(leaving, targets, strict=False))
        problem = self.problem
        required = required_savings(
            int(problem.price[list(packing.retire)].sum()), problem.min_savings, problem.min_savings_percent
        )
        share = max(0, packing.savings - required) // max(1, len(packing.launches))
        planned = []
        for (t, _), z in zip(packing.launches, packing.zones or [None] * len(packing.launches), strict=True):
            chosen = self.types[t]
            zone = None if z is None else self.zones[z]
            offered = None if zone is None else self._offered_in(chosen.nodepool, zone)
            planned.append(
                PlannedNodeClaim(
                    chosen.nodepool,
                    frozenset(
                        other.name
                        for other in self._pool_types(chosen.nodepool)
                        if other.price <= chosen.price + share and (offered is None or offered[other.row])
                    ),
                    zone,
                )
            )
        return directions, planned

    def refusals(self, directions: dict[str, str | int], outcome: Outcome) -> BoolArray:
        """(G, D): the classes the simulation would not place on a node that stays where the proposal sent
        them, so that the next solve sends them elsewhere."""
        refused = np.zeros(self.problem.admits.shape, dtype=np.bool_)
        column = {self.capacity.nodes[row]: d for d, row in enumerate(self.destinations)}
        members = {fit.key: g for g, group in enumerate(self.members) for _, fit in group}
        for placement in outcome.problems:
            where = directions.get(placement.pod)
            if isinstance(where, str) and where in column and placement.pod in members:
                refused[members[placement.pod], column[where]] = True
        return refused

    def _pool_types(self, nodepool: str) -> list[NewType]:
        capacity = self.capacity
        for pool, prices, headroom in pool_types(self.state, capacity, avoid_spot=False):
            if pool != nodepool:
                continue
            names = capacity.pool(pool).names
            return [
                NewType(pool, row, names[row], int(prices[row]), headroom[row])
                for row in np.flatnonzero(prices != NO_PRICE).tolist()
            ]
        return []


def undominated(headroom: IntArray, prices: IntArray, fits: BoolArray, requests: IntArray) -> list[int]:
    """The types no other type beats: one at most as dear, with at least as much of every resource the pods
    ask for, that may hold every class this one may (ties keep the first)."""
    used = requests.any(axis=0) if requests.size else np.zeros(headroom.shape[1], dtype=np.bool_)
    room = headroom[:, used]
    keep = []
    for t in range(prices.size):
        beats = (
            (prices <= prices[t])
            & np.all(room >= room[t], axis=1)
            & np.all(fits >= fits[:, t : t + 1], axis=0)
        )
        strictly = (prices < prices[t]) | np.any(room > room[t], axis=1)
        beats[t] = False
        earlier = np.zeros(prices.size, dtype=np.bool_)
        earlier[:t] = True
        if not (beats & (strictly | earlier)).any():
            keep.append(t)
    return keep


def _priced(
    state: PlanState, candidates: Sequence[Candidate], outcome: Outcome, options: RepackOptions
) -> tuple[list[Priced], int] | str:
    """The replacements as Karpenter would launch them, and what the command saves; or why it may not go."""
    price = candidates_price(candidates)
    replacements = [Priced.of(claim, state.catalogs[claim.nodepool]) for claim in outcome.nodeclaims]
    spot = any(c.capacity_type == labels.CAPACITY_TYPE_SPOT for c in candidates)
    narrowed = []
    for priced in replacements:
        capacity = priced.requirements.get(labels.CAPACITY_TYPE)
        may_be_spot = capacity.has(labels.CAPACITY_TYPE_SPOT)
        if spot and may_be_spot and not state.options.spot_to_spot_consolidation:
            return "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
        if may_be_spot:
            priced = priced.narrowed(priced.rows, SPOT_ONLY)
        narrowed.append(priced)
    cheapest = [priced.cheapest() for priced in narrowed]
    if any(value is None for value in cheapest):
        return "no offering of a replacement can be launched"
    required = required_savings(price, options.min_savings_micros, options.min_savings_percent)
    slack = price - sum(value or 0 for value in cheapest) - required
    if slack < 0:
        return "the replacements would not save the minimum"
    share = slack // max(1, len(narrowed))
    launched = []
    for priced, value in zip(narrowed, cheapest, strict=True):
        rows = priced.cheaper_than((value or 0) + share + 1)
        kept = priced.narrowed(rows)
        unmet = kept.unmet_min_values()
        if unmet is not None:
            return unmet
        if spot and kept.capacity_types() == (labels.CAPACITY_TYPE_SPOT,):
            if len(kept.rows) < MIN_SPOT_TO_SPOT_OPTIONS:
                return (
                    f"SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_OPTIONS} cheaper instance type options "
                    f"than the current candidate to consolidate, got {len(kept.rows)}"
                )
            kept = kept.narrowed(kept.rows[: max(MIN_SPOT_TO_SPOT_OPTIONS, kept.min_values_prefix())])
        if kept.launch() is None:
            return "no offering of a replacement can be launched"
        launched.append(kept)
    savings = price - sum(launch[1].price_micros for p in launched if (launch := p.launch()) is not None)
    if savings < required:
        return "the replacements would not save the minimum"
    decision = Decision.REPLACE if launched else Decision.DELETE
    balanced = balanced_verdict(candidates, Consolidation(decision, None, savings), pool_totals(state))
    if balanced is not None:
        return balanced.message
    return launched, savings


def steering(
    window: _Window, candidates: Sequence[Candidate], outcome: Outcome, launched: Sequence[Priced]
) -> Steering:
    """How the command's steered drain would carry it out (`core.disruption.steering`): the pods evicted one by
    one, the new nodes held back but for the one the next pod should go to, each pod put where kube-scheduler's
    scores put it among every node it may run on. Incomplete when some pod would be left without room."""
    capacity = window.capacity
    retired = {c.name for c in candidates}
    fits = {fit.key: fit for members in window.members for _, fit in members}
    pods = {pod_key(pod): pod for c in candidates for pod in c.reschedulable}
    moving = [p for p in outcome.placements if p.pod in fits]
    requests = np.array([fits[p.pod].requests for p in moving], dtype=np.int64).reshape(
        len(moving), len(capacity.axes)
    )
    admitted = np.zeros(len(capacity.nodes), dtype=np.bool_)
    for placement in moving:
        admitted |= fits[placement.pod].nodes
    smallest = requests.min(axis=0) if len(moving) else np.zeros(len(capacity.axes), dtype=np.int64)
    rows = [
        row
        for row in np.flatnonzero(
            capacity.live & admitted & np.all(capacity.free >= smallest, axis=1)
        ).tolist()
        if capacity.nodes[row] not in retired
    ]
    cpu, memory = capacity.axes.index("cpu"), capacity.axes.index("memory")
    pools = {pool.nodepool: pool for pool in capacity.pools}
    new_free, new_allocatable, new_zones, new_types, new_avoided = [], [], [], [], []
    for priced in launched:
        launch = priced.launch()
        assert launch is not None  # `_priced` refused replacements without one
        pool = pools[priced.claim.nodepool]
        row = pool.names.index(launch[0].name)
        allocatable = launch[0].allocatable()
        new_free.append(pool.headroom[row])
        new_allocatable.append((allocatable.get("cpu", 0), allocatable.get("memory", 0)))
        new_zones.append(launch[1].zone)
        new_types.append((pool.nodepool, row))
        new_avoided.append(sum(t.effect == "PreferNoSchedule" for t in priced.claim.taints))
    names = tuple(capacity.nodes[row] for row in rows) + tuple(
        f"replacement-{i + 1}" for i in range(len(launched))
    )
    width = len(capacity.axes)
    places = Places(
        names=names,
        free=np.vstack([capacity.free[rows].reshape(len(rows), width), *new_free]).reshape(len(names), width),
        allocatable=np.vstack(
            [capacity.allocatable[rows][:, [cpu, memory]].reshape(len(rows), 2), *new_allocatable]
        ).reshape(len(names), 2),
        zones=tuple(capacity.zones[row] for row in rows) + tuple(new_zones),
        held=np.array([False] * len(rows) + [True] * len(launched), dtype=np.bool_),
        avoided=np.array([int(capacity.avoided[row]) for row in rows] + new_avoided, dtype=np.int64),
    )
    index = {name: i for i, name in enumerate(names)}
    movers: list[Mover] = []
    for placement in moving:
        fit = fits[placement.pod]
        admits = np.concatenate(
            [fit.nodes[rows], np.array([bool(fit.types[p][r]) for p, r in new_types], dtype=np.bool_)]
        )
        if placement.nodeclaim is not None:
            destination: int | None = len(rows) + placement.nodeclaim
        else:
            destination = index.get(placement.destination or "")
        movers.append(
            Mover(
                placement.pod, requests[len(movers)], admits, destination, spread_owner(pods[placement.pod])
            )
        )
    owners = {mover.owner for mover in movers if mover.owner is not None}
    zones = dict(zip(capacity.nodes, capacity.zones, strict=True))
    on_place, in_zone = owner_counts(window.state.report.pods, names, zones, owners)
    source = {c.name: c.zone for c in candidates}
    model = SteeringModel(places, movers, capacity.axes, on_place, in_zone)
    return model.plan([source.get(p.source) for p in moving])


def explanation(
    candidates: Sequence[Candidate], outcome: Outcome, launched: Sequence[Priced], savings: int
) -> Repacked:
    """What the command retires and launches, who takes the pods, and why that is cheaper."""
    retired = tuple(
        f"{c.name} ({c.instance_type.name if c.instance_type else 'unknown'}, {format_price(c.price_micros or 0)}/h)"
        for c in candidates
    )
    launches = []
    for index, priced in enumerate(launched, start=1):
        launch = priced.launch()
        name, cost = (launch[0].name, launch[1].price_micros) if launch else ("unknown", 0)
        launches.append(
            f"replacement-{index} ({name}, {format_price(cost)}/h): {len(priced.claim.pods)} pods"
        )
    receiving: dict[str, int] = {}
    for placement in outcome.placements:
        if placement.nodeclaim is None and placement.destination is not None:
            receiving[placement.destination] = receiving.get(placement.destination, 0) + 1
    before = candidates_price(candidates)
    moved = len(outcome.placements)
    message = (
        f"{len(candidates)} node(s) at {format_price(before)}/h retire; their {moved} pod(s) go to "
        + (f"{len(receiving)} node(s) that stay" if receiving else "")
        + (" and " if receiving and launches else "")
        + (f"{len(launches)} new node(s) at {format_price(before - savings)}/h" if launches else "")
        + f": saves {format_price(savings)}/h"
    )
    return Repacked(
        retired,
        tuple(launches),
        tuple(f"{node}: {count} pods" for node, count in sorted(receiving.items())),
        message,
    )


class _Search:
    """The repack of one plan: windows tried in turn, each verified proposal executed at once."""

    def __init__(self, state: PlanState, options: RepackOptions) -> None:
        self.state = state
        self.options = options
        self.clock: Callable[[], float] | None = options.clock
        self.started = (
            options.started if options.started is not None else (self.clock() if self.clock else 0.0)
        )
        self.refused: set[frozenset[str]] = set()
        """Candidate sets a window could not use: not tried again in this plan."""

    def left(self) -> float | None:
        """Seconds of the deadline left (None without a clock)."""
        if self.clock is None:
            return None
        return self.options.deadline.total_seconds() - (self.clock() - self.started)

    def run(self) -> None:
        if self.options.hint:
            self._hinted()
        while True:
            left = self.left()
            if left is not None and left <= 0:
                return
            if not self._pass():
                return

    def _eligible(self) -> list[Candidate]:
        state = self.state
        return [c for c in state.candidates() if eligible(state, c) and c.reschedulable]

    def _capacity(self, candidates: Sequence[Candidate]) -> tuple[Capacity, dict[str, list[PodFit]]]:
        capacity = self.state.sandbox.capacity(
            [c.name for c in candidates], closed=self.state.report.under_consolidate_after
        )
        fits: dict[str, list[PodFit]] = {c.name: [] for c in candidates}
        for fit in capacity.pods:
            fits[fit.node].append(fit)
        return capacity, fits

    def _hinted(self) -> None:
        """The candidates of a command being validated, together and only them, first."""
        hint = self.options.hint
        chosen = [c for c in self._eligible() if c.name in hint]
        if {c.name for c in chosen} != set(hint):
            return
        capacity, fits = self._capacity(chosen)
        window = _Window(self.state, capacity, chosen, fits, self.options)
        fixed = frozenset(range(len(chosen)))
        self._try(window, fixed)

    def _pass(self) -> bool:
        """Try the windows of every group, most wasteful first; True once one command executed."""
        candidates = self._eligible()
        if not candidates:
            return False
        capacity, fits = self._capacity(candidates)
        for group in _groups(candidates, fits, capacity):
            ordered = sorted(group, key=lambda c: (-_waste(c, fits[c.name], capacity), c.name))
            size = self.options.window
            for start in range(0, len(ordered), size):
                left = self.left()
                if left is not None and left <= 0:
                    return False
                chosen = ordered[start : start + size]
                names = frozenset(c.name for c in chosen)
                if names in self.refused:
                    continue
                window = _Window(self.state, capacity, chosen, fits, self.options)
                if self._try(window, None):
                    return True
                self.refused.add(names)
        return False

    def _try(self, window: _Window, fixed: frozenset[int] | None) -> bool:
        """Solve the window, verify and price the proposal; execute it, or exclude it and solve again."""
        state = self.state
        problem = window.problem
        exclude: list[frozenset[int]] = []
        refused = np.zeros(problem.admits.shape, dtype=np.bool_)
        margin = 0.0
        for _ in range(RETRIES):
            left = self.left()
            if left is not None:
                left = min(left, self.options.deadline.total_seconds() * SOLVE_SHARE)
            attempt = PackingProblem(
                **{  # type: ignore[arg-type]
                    **_fields(problem),
                    "exclude": tuple(exclude),
                    "fixed": fixed,
                    "admits": problem.admits & ~refused,
                    "headroom": (problem.headroom * (1.0 - margin)).astype(np.int64),
                    "free": (problem.free * (1.0 - margin)).astype(np.int64),
                    "candidate_free": (problem.candidate_free * (1.0 - margin)).astype(np.int64),
                }
            )
            packing = solve_packing(attempt, MAX_SOLVER_NODES, left)
            if packing is None or not packing.retire:
                return False
            candidates = [window.candidates[n] for n in packing.retire]
            directions, planned = window.directions(packing)
            outcome = state.sandbox.simulate(
                [c.name for c in candidates],
                closed=state.report.under_consolidate_after,
                directions=directions,
                planned=planned,
            )
            verdict: tuple[list[Priced], int] | str
            verdict = (
                _priced(state, candidates, outcome, self.options)
                if outcome.scheduled
                else outcome.describe_problems()
            )
            if (
                not isinstance(verdict, str)
                and self.options.settling
                and not steering(window, candidates, outcome, verdict[0]).complete
            ):
                # Too tight for the steered drain: solve again with room to spare on every node.
                state.sandbox.rollback()
                margin += SETTLING_MARGIN
                continue
            if isinstance(verdict, str):
                state.sandbox.rollback()
                # The next solve sends the pods refused on a node that stays elsewhere; when the refusal was
                # elsewhere (a new node, a limit), it drops this set of candidates.
                new = window.refusals(directions, outcome) & ~refused
                refused |= new
                if not new.any():
                    if fixed is not None:
                        return False
                    exclude.append(frozenset(packing.retire))
                continue
            launched, savings = verdict
            state.execute(
                Method.REPACK,
                DisruptionReason.UNDERUTILIZED.value,
                candidates,
                outcome,
                launched,
                savings,
                {c.name: "repack: its pods have a cheaper home" for c in candidates},
                explanation(candidates, outcome, launched, savings),
            )
            return True
        return False


def _fields(problem: PackingProblem) -> dict[str, object]:
    return {name: getattr(problem, name) for name in PackingProblem.__dataclass_fields__}


def _waste(candidate: Candidate, fits: Sequence[PodFit], capacity: Capacity) -> float:
    """What the candidate's idle room costs: its price times the share of it its pods leave unused (of the
    resource they use most)."""
    row = capacity.nodes.index(candidate.name)
    used = np.sum([fit.requests for fit in fits], axis=0) if fits else np.zeros(len(capacity.axes))
    total = np.maximum(capacity.free[row], 0) + used
    shares = [
        used[k] / total[k]
        for k, name in enumerate(capacity.axes)
        if name in ("cpu", "memory") and total[k] > 0
    ]
    return (candidate.price_micros or 0) * (1.0 - max(shares, default=1.0))


def _groups(
    candidates: Sequence[Candidate], fits: dict[str, list[PodFit]], capacity: Capacity
) -> list[list[Candidate]]:
    """Candidates whose pods could trade places: linked when their pods may launch in a common NodePool or run
    on nodes of a common NodePool."""
    parent = list(range(len(candidates)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    seen: dict[int, set[str]] = {}
    for i, candidate in enumerate(candidates):
        places: set[str] = set()
        for fit in fits[candidate.name]:
            places.update(pool for pool, mask in fit.types.items() if mask.any())
            key = id(fit.nodes)
            if key not in seen:
                seen[key] = {
                    pool
                    for pool in (capacity.nodepools[row] for row in np.flatnonzero(fit.nodes).tolist())
                    if pool
                }
            places.update(seen[key])
        for place in places:
            if place in owner:
                parent[find(i)] = find(owner[place])
            else:
                owner[place] = i
    groups: dict[int, list[Candidate]] = {}
    for i, candidate in enumerate(candidates):
        groups.setdefault(find(i), []).append(candidate)
    return list(groups.values())


def repack(state: PlanState) -> None:
    """Re-home the pods of candidates Karpenter's methods left where a cheaper set of nodes holds them."""
    options = state.options.repack
    if options is None or not options.enabled:
        return
    _Search(state, options).run()
