"""Karpenter's consolidation decision: given where the candidates' pods would go, delete, replace, or keep.

Consolidation is always m nodes to 0 or to 1. If every pod fits on the remaining nodes, the candidates are
deleted. If the pods need one new node, it must be strictly cheaper than the candidates together: every
instance type whose worst launch price is not below their price is dropped, and a replacement that could
be spot or on-demand is made spot-only (the price filter assumed spot; failing to launch is better than
launching a dearer on-demand node). Several candidates merged into one node face one more filter, checked
on the options before they are made spot-only: if one of the candidates' own instance types is among them,
the replacement must be cheaper than that candidate, or deleting the others and keeping it would disrupt
less for the same saving. Replacing spot with spot is behind a setting, and a single spot node
is only replaced when at least 15 cheaper types remain, the launch being limited to the 15 cheapest so the
new node is not itself immediately replaceable. Pools with the Balanced policy also ask that the savings,
as a share of the pool's cost, be at least half the disruption, as a share of the pool's disruption.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core import labels
from core.api.nodepool import ConsolidationPolicy
from core.disruption.candidates import Candidate
from core.disruption.commands import BlockReason, Decision, Reason, format_price
from core.disruption.replacements import Catalog, Priced
from core.disruption.simulation import Outcome
from core.scheduling.requirements import Operator, Requirement

MIN_SPOT_TO_SPOT_OPTIONS = 15
BALANCED_THRESHOLD = 0.5
"""The Balanced policy's k = 2: savings share divided by disruption share must reach 1/k."""

SPOT_ONLY = Requirement.new(labels.CAPACITY_TYPE, Operator.IN, [labels.CAPACITY_TYPE_SPOT])


@dataclass(frozen=True, slots=True)
class Consolidation:
    """A consolidation worth doing: delete the candidates, or replace them with one cheaper node."""

    decision: Decision
    replacement: Priced | None
    savings_micros: int


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """What a NodePool costs per hour and how much disruption moving all its pods would be."""

    price_micros: int
    disruption: float


def candidates_price(candidates: Sequence[Candidate]) -> int:
    """What the candidates cost per hour together (unknown prices count as zero)."""
    return sum(candidate.price_micros or 0 for candidate in candidates)


def decide(
    candidates: Sequence[Candidate],
    outcome: Outcome,
    catalogs: Mapping[str, Catalog],
    spot_to_spot: bool,
) -> Consolidation | Reason:
    """Karpenter's decision for removing `candidates`, whose pods would go as `outcome` says.

    With several candidates (multi-node consolidation) the replacement must also be cheaper than any
    candidate whose own instance type is among its options, compared before the options are narrowed to
    spot: otherwise keeping that candidate and deleting the others would disrupt less."""
    if outcome.exceeded is not None:
        return Reason(
            BlockReason.MULTIPLE_REPLACEMENTS,
            f"can't remove without creating at least {outcome.exceeded} nodes (consolidation replaces with at most one)",
        )
    if not outcome.scheduled:
        return Reason(BlockReason.PODS_UNSCHEDULABLE, outcome.describe_problems())
    price = candidates_price(candidates)
    if not outcome.nodeclaims:
        return Consolidation(Decision.DELETE, None, price)
    if len(outcome.nodeclaims) > 1:
        return Reason(
            BlockReason.MULTIPLE_REPLACEMENTS,
            f"can't remove without creating {len(outcome.nodeclaims)} nodes (consolidation replaces with at most one)",
        )
    claim = outcome.nodeclaims[0]
    priced = Priced.of(claim, catalogs[claim.nodepool])
    spot_to_spot_move = all(
        candidate.capacity_type == labels.CAPACITY_TYPE_SPOT for candidate in candidates
    ) and priced.requirements.get(labels.CAPACITY_TYPE).has(labels.CAPACITY_TYPE_SPOT)
    if spot_to_spot_move:
        if not spot_to_spot:
            return Reason(
                BlockReason.SPOT_TO_SPOT_DISABLED,
                "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
            )
        priced = priced.narrowed(priced.rows, SPOT_ONLY)
    cheaper = priced.cheaper_than(price)
    if not cheaper:
        return _not_cheaper(priced, price)
    narrowed = priced.narrowed(cheaper)
    unmet = narrowed.unmet_min_values()
    if unmet is not None:
        return Reason(BlockReason.MIN_VALUES, unmet)
    own = _own_type_price(candidates, narrowed) if len(candidates) > 1 else None
    capacity = narrowed.requirements.get(labels.CAPACITY_TYPE)
    if capacity.has(labels.CAPACITY_TYPE_SPOT) and capacity.has(labels.CAPACITY_TYPE_ON_DEMAND):
        narrowed = narrowed.narrowed(narrowed.rows, SPOT_ONLY)
    if own is not None:
        name, limit = own
        below = narrowed.cheaper_than(limit)
        if not below:
            return Reason(
                BlockReason.NOT_CHEAPER,
                f"replacement would not be cheaper than candidate type {name} at {format_price(limit)}/h: "
                "deleting the other candidates disrupts less",
            )
        narrowed = narrowed.narrowed(below)
        unmet = narrowed.unmet_min_values()
        if unmet is not None:
            return Reason(BlockReason.MIN_VALUES, unmet)
    if spot_to_spot_move and len(candidates) == 1:
        return _spot_to_spot_single(narrowed, price)
    return _replace(narrowed, price)


def _own_type_price(candidates: Sequence[Candidate], priced: Priced) -> tuple[str, int] | None:
    """The cheapest candidate whose instance type is among the replacement's options, as (type, price)."""
    names = priced.catalog.types.names
    options = {names[row] for row in priced.rows}
    own = [
        (candidate.price_micros, candidate.instance_type.name)
        for candidate in candidates
        if candidate.instance_type is not None
        and candidate.price_micros is not None
        and candidate.instance_type.name in options
    ]
    if not own:
        return None
    price, name = min(own)
    return name, price


def _spot_to_spot_single(narrowed: Priced, price: int) -> Consolidation | Reason:
    """A single spot node is replaced only with at least 15 cheaper options, launched from the cheapest."""
    if len(narrowed.rows) < MIN_SPOT_TO_SPOT_OPTIONS:
        return Reason(
            BlockReason.SPOT_TO_SPOT_TOO_FEW_OPTIONS,
            f"SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_OPTIONS} cheaper instance type options "
            f"than the current candidate to consolidate, got {len(narrowed.rows)}",
        )
    # Launching from only the cheapest options keeps the new node among them, so that it is not itself
    # replaced by a cheaper one at the next pass.
    keep = max(MIN_SPOT_TO_SPOT_OPTIONS, narrowed.min_values_prefix())
    return _replace(narrowed.narrowed(narrowed.rows[:keep]), price)


def _replace(priced: Priced, price: int) -> Consolidation | Reason:
    launch = priced.launch()
    if launch is None:
        # Forcing spot can leave cheaper types with no offering to launch: Karpenter's launch would fail.
        return Reason(BlockReason.NOT_CHEAPER, "no offering of a cheaper instance type can be launched")
    return Consolidation(Decision.REPLACE, priced, price - launch[1].price_micros)


def _not_cheaper(priced: Priced, price: int) -> Reason:
    cheapest = priced.cheapest()
    if cheapest is None:
        return Reason(BlockReason.NOT_CHEAPER, "no replacement instance type can be launched")
    return Reason(
        BlockReason.NOT_CHEAPER,
        f"replacement would not be cheaper: {format_price(cheapest)} vs {format_price(price)}/h",
    )


def balanced_verdict(
    candidates: Sequence[Candidate], consolidation: Consolidation, totals: Mapping[str, PoolTotals]
) -> Reason | None:
    """Why a Balanced NodePool among the candidates' pools refuses the move, or None when all approve.

    Each Balanced pool gets the share of the savings its candidates' prices make up, and is charged the
    disruption of its own candidates."""
    price = candidates_price(candidates)
    for pool in sorted({candidate.nodepool.name for candidate in candidates}):
        mine = [candidate for candidate in candidates if candidate.nodepool.name == pool]
        if mine[0].nodepool.spec.disruption.consolidation_policy is not ConsolidationPolicy.BALANCED:
            continue
        total = totals[pool]
        share = candidates_price(mine) / price if price else 1 / len({c.nodepool.name for c in candidates})
        savings = consolidation.savings_micros * share
        disruption = sum(candidate.reschedule_cost for candidate in mine)
        score = (
            (savings / total.price_micros) / (disruption / total.disruption)
            if total.price_micros > 0 and total.disruption > 0
            else 0.0
        )
        if score < BALANCED_THRESHOLD:
            return Reason(
                BlockReason.BALANCED,
                f'NodePool "{pool}" has the Balanced policy and the move scores {score:.2f} (below {BALANCED_THRESHOLD}): '
                f"it saves {savings / total.price_micros:.1%} of the pool's cost for "
                f"{disruption / total.disruption:.1%} of its disruption",
            )
    return None
