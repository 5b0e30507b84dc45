"""NodeOverlays applied to the instance types of each NodePool: the one place prices and capacities change.

Karpenter's `nodeoverlay` controller, as a pure function. Overlays are taken by precedence: higher `weight`
first (no weight counts as 0), then, at equal weight, the name later in the alphabet first. An overlay selects
an instance type of a NodePool when its requirements are compatible with the type's labels, the NodePool's
template labels and `karpenter.sh/nodepool`; of that type it selects the offerings (zone, capacity type) its
requirements allow. Price and capacity are resolved apart:

- each selected offering takes the `price` or `priceAdjustment` of the first overlay that sets one for it;
- each extended resource of `capacity` is added by the first overlay that names it.

An overlay that would set a price on an offering, or a resource on an instance type, that an overlay of the same
weight already set is in conflict: it is applied nowhere (all or nothing), and its ValidationSucceeded
condition is False with reason `Conflict`. One that breaks a rule Karpenter checks at runtime is applied
nowhere either (reason `RuntimeValidation`). Every reader of prices and capacity (provisioning, consolidation,
the what-if commands) gets instance types through `build_snapshot`, which calls `apply_overlays`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal

from core import labels
from core.api.nodeoverlay import CONFLICT, RUNTIME_VALIDATION, NodeOverlay
from core.instancetypes.types import MICROS_PER_DOLLAR, InstanceType, Offering
from core.resources import Resources, parse_resources
from core.scheduling.requirements import Requirements

PRICE_OVERLAY_APPLIED = "karpenter.sh/price-overlay-applied"
"""NodeClaim annotation ("true") when an overlay set the price of one of its instance types' offerings."""
CAPACITY_OVERLAY_APPLIED = "karpenter.sh/capacity-overlay-applied"
"""NodeClaim annotation ("true") when an overlay added capacity to one of its instance types."""
OVERLAY_ANNOTATIONS = (PRICE_OVERLAY_APPLIED, CAPACITY_OVERLAY_APPLIED)


def adjusted_price_micros(price_micros: int, change: str) -> int:
    """A price after an overlay's `price` (absolute, in dollars per hour) or `priceAdjustment` (`+x`/`-x`
    dollars, or `+x%`/`-x%`); never below zero."""
    if not change.startswith(("+", "-")):
        result = Decimal(change) * MICROS_PER_DOLLAR
    elif change.endswith("%"):
        result = price_micros * (1 + Decimal(change.removesuffix("%")) / 100)
    else:
        result = price_micros + Decimal(change) * MICROS_PER_DOLLAR
    return max(0, int(result.quantize(Decimal(1), rounding=ROUND_HALF_EVEN)))


@dataclass(frozen=True, slots=True)
class OverlayVerdict:
    """Whether an overlay is in force, as its ValidationSucceeded condition says."""

    valid: bool
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class OverlayPool:
    """What an overlay can select a NodePool's instance types by: its name and template labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Price:
    change: str
    overlay: str
    lowest_weight: int


@dataclass(slots=True)
class _Capacity:
    added: Resources = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    lowest_weight: int = 0
    lowest_resources: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Store:
    prices: dict[tuple[str, str, int], _Price] = field(default_factory=dict)
    capacities: dict[tuple[str, str], _Capacity] = field(default_factory=dict)


def precedence(overlays: Sequence[NodeOverlay]) -> list[NodeOverlay]:
    """The overlays in the order they are applied: weight descending, then name descending."""
    return sorted(overlays, key=lambda overlay: (overlay.weight_or_zero, overlay.name), reverse=True)


def _selected(overlay: Requirements, pool: OverlayPool, instance_type: InstanceType) -> list[int]:
    """The indexes of the offerings of `instance_type` in `pool` that the overlay's requirements select."""
    known = Requirements.from_labels({**pool.labels, labels.NODEPOOL: pool.name})
    known.add(*instance_type.requirements)
    if known.compatible(overlay) is not None:
        return []
    return [
        index
        for index, offering in enumerate(instance_type.offerings)
        if overlay.compatible(offering.requirements) is None
    ]


def _conflicts(
    store: _Store, overlay: NodeOverlay, capacity: Resources, selections: list[tuple[str, str, list[int]]]
) -> bool:
    weight = overlay.weight_or_zero
    for pool, name, indexes in selections:
        if overlay.spec.price_change is not None and any(
            (entry := store.prices.get((pool, name, index))) is not None and entry.lowest_weight == weight
            for index in indexes
        ):
            return True
        current = store.capacities.get((pool, name))
        if (
            capacity
            and current is not None
            and current.lowest_weight == weight
            and not current.lowest_resources.isdisjoint(capacity)
        ):
            return True
    return False


def _store(
    store: _Store, overlay: NodeOverlay, capacity: Resources, selections: list[tuple[str, str, list[int]]]
) -> None:
    weight, change = overlay.weight_or_zero, overlay.spec.price_change
    for pool, name, indexes in selections:
        if change is not None:
            for index in indexes:
                entry = store.prices.get((pool, name, index))
                if entry is None:
                    store.prices[pool, name, index] = _Price(change, overlay.name, weight)
                else:
                    entry.lowest_weight = weight
        if capacity:
            current = store.capacities.setdefault((pool, name), _Capacity())
            for resource, amount in capacity.items():
                if resource not in current.added:
                    current.added[resource] = amount
                    current.sources[resource] = overlay.name
            current.lowest_weight = weight
            current.lowest_resources = frozenset(capacity)


@dataclass(frozen=True, slots=True)
class OverlayResult:
    """Each NodePool's instance types with the overlays applied, and each overlay's verdict by name."""

    instance_types: dict[str, list[InstanceType]]
    verdicts: dict[str, OverlayVerdict]


def apply_overlays(
    overlays: Sequence[NodeOverlay],
    pools: Sequence[OverlayPool],
    instance_types: Mapping[str, list[InstanceType]],
) -> OverlayResult:
    """The instance types of each pool (`instance_types`, by pool name) as the overlays change them.

    Types no overlay selects are returned as they are; the others are copies with `capacity` extended and the
    selected offerings priced anew (each offering and type names the overlays that changed it)."""
    store = _Store()
    verdicts: dict[str, OverlayVerdict] = {}
    for overlay in precedence(overlays):
        problems = overlay.runtime_problems()
        if problems:
            verdicts[overlay.name] = OverlayVerdict(False, RUNTIME_VALIDATION, "; ".join(problems))
            continue
        requirements = overlay.requirements()
        capacity = parse_resources(overlay.spec.capacity)
        selections = [
            (pool.name, instance_type.name, indexes)
            for pool in pools
            for instance_type in instance_types.get(pool.name, ())
            if (indexes := _selected(requirements, pool, instance_type))
        ]
        if _conflicts(store, overlay, capacity, selections):
            verdicts[overlay.name] = OverlayVerdict(False, *CONFLICT)
            continue
        _store(store, overlay, capacity, selections)
        verdicts[overlay.name] = OverlayVerdict(True)
    adjusted = {
        pool: [_adjusted(store, pool, instance_type) for instance_type in types]
        for pool, types in instance_types.items()
    }
    return OverlayResult(adjusted, verdicts)


def _adjusted(store: _Store, pool: str, instance_type: InstanceType) -> InstanceType:
    offerings: list[Offering] = []
    changed = False
    for index, offering in enumerate(instance_type.offerings):
        price = store.prices.get((pool, instance_type.name, index))
        if price is None:
            offerings.append(offering)
            continue
        changed = True
        offerings.append(
            replace(
                offering,
                price_micros=adjusted_price_micros(offering.price_micros, price.change),
                price_overlay=price.overlay,
            )
        )
    capacity = store.capacities.get((pool, instance_type.name))
    if capacity is not None and capacity.added:
        return replace(
            instance_type,
            offerings=tuple(offerings),
            capacity={**instance_type.capacity, **capacity.added},
            capacity_overlays=tuple(dict.fromkeys(capacity.sources.values())),
        )
    return replace(instance_type, offerings=tuple(offerings)) if changed else instance_type


def overlay_annotations(instance_types: Sequence[InstanceType]) -> dict[str, str]:
    """The annotations Karpenter puts on a NodeClaim whose instance-type options an overlay changed."""
    annotations = {}
    if any(offering.price_overlay for it in instance_types for offering in it.offerings):
        annotations[PRICE_OVERLAY_APPLIED] = "true"
    if any(it.capacity_overlays for it in instance_types):
        annotations[CAPACITY_OVERLAY_APPLIED] = "true"
    return annotations
