"""A NodePool's instance types as arrays, so that filtering hundreds of types for a pod is a few numpy calls.

Karpenter filters instance types one by one for every pod it tries on a NodeClaim. Here each question
("which types are compatible with these requirements", "which have an available offering in these zones",
"which still fit these requests") is answered for all types at once and memoized by requirement, because
the same requirements come back for every pod of a deployment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from core.instancetypes.types import InstanceType
from core.scheduling.requirements import Operator, Requirement, Requirements

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

NO_PRICE = np.iinfo(np.int64).max
"""Sentinel price of a type that has no available compatible offering."""
HELD_AT = 2**53
"""The largest amount (of a resource, or micro-dollars of a price) the arrays hold; larger ones are held at it.
It is more than any node has (9 billion cores, 8 PiB) and any price ($9 billion an hour), so a request beyond it
still fits nowhere; yet sums of a thousand such amounts stay within int64, where a quantity Kubernetes allows (up
to 2^63-1) or an overlay's price would overflow the arrays."""


def held(amount: int) -> int:
    """`amount` within plus or minus `HELD_AT`."""
    return max(-HELD_AT, min(HELD_AT, amount))


class ResourceAxes:
    """A fixed order of resource names, so that resource lists become integer vectors."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(dict.fromkeys(names))
        self.index = {name: position for position, name in enumerate(self.names)}

    def vector(self, resources: dict[str, int]) -> IntArray:
        """The resource list as a vector; names outside the axes are ignored (callers include them all)."""
        vector = np.zeros(len(self.names), dtype=np.int64)
        for name, amount in resources.items():
            position = self.index.get(name)
            if position is not None:
                vector[position] = held(amount)
        return vector

    def resources(self, vector: IntArray) -> dict[str, int]:
        """A vector as a resource list, omitting zeros."""
        return {name: int(amount) for name, amount in zip(self.names, vector.tolist(), strict=True) if amount}


def _intersects(type_requirement: Requirement, requirement: Requirement) -> bool:
    if type_requirement.is_negative() and requirement.is_negative():
        return True
    return type_requirement.has_intersection(requirement)


KeyIndex = tuple[dict[str, list[Requirement]], dict[str, IntArray]]

_INDEXES: OrderedDict[tuple[int, ...], tuple[list[Requirements], KeyIndex]] = OrderedDict()
_INDEXES_KEPT = 16
_INDEXES_LOCK = threading.Lock()


def _index_by_key(items: Sequence[Requirements]) -> KeyIndex:
    """`_index_of`, kept for the last few sequences of the same objects: a catalog's instance types and their
    offerings stay the same objects from one plan to the next, and indexing them is half of setting up a
    simulation. The entry holds the objects, so their ids cannot be reused while it is kept; the index is
    shared, read it only."""
    key = tuple(map(id, items))
    with _INDEXES_LOCK:
        hit = _INDEXES.get(key)
        if hit is not None:
            _INDEXES.move_to_end(key)
            return hit[1]
    index = _index_of(items)
    with _INDEXES_LOCK:
        _INDEXES[key] = (list(items), index)
        if len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return index


def _index_of(items: Sequence[Requirements]) -> KeyIndex:
    """For every key any item defines: the distinct requirements on it (an item without the key counts as
    DoesNotExist) and, per item, which of them it has. A question about a key is then answered once per
    distinct requirement and spread to all items with one gather."""
    keys = sorted({requirement.key for requirements in items for requirement in requirements})
    distinct_by_key: dict[str, list[Requirement]] = {}
    positions_by_key: dict[str, IntArray] = {}
    for key in keys:
        distinct: dict[Requirement, int] = {}
        positions = np.empty(len(items), dtype=np.int64)
        for row, requirements in enumerate(items):
            requirement = (
                requirements.get(key)
                if requirements.has(key)
                else Requirement.new(key, Operator.DOES_NOT_EXIST)
            )
            positions[row] = distinct.setdefault(requirement, len(distinct))
        distinct_by_key[key] = list(distinct)
        positions_by_key[key] = positions
    return distinct_by_key, positions_by_key


class InstanceTypeSet:
    """Instance types with their allocatable, capacity and offerings in arrays, and memoized filters."""

    def __init__(self, instance_types: Sequence[InstanceType], axes: ResourceAxes) -> None:
        self.types = list(instance_types)
        self.axes = axes
        self.names = [instance_type.name for instance_type in self.types]
        count = len(self.types)
        self.capacity = np.zeros((count, len(axes.names)), dtype=np.int64)
        self.allocatable = np.zeros((count, len(axes.names)), dtype=np.int64)
        for row, instance_type in enumerate(self.types):
            self.capacity[row] = axes.vector(instance_type.capacity)
            self.allocatable[row] = axes.vector(instance_type.allocatable())

        self._distinct, self._positions = _index_by_key([it.requirements for it in self.types])
        self._key_masks: dict[Requirement, BoolArray] = {}

        offerings = [(row, offering) for row, it in enumerate(self.types) for offering in it.offerings]
        self.offering_type = np.array([row for row, _ in offerings], dtype=np.int64)
        self.offering_price = np.array(
            [held(offering.price_micros) for _, offering in offerings], dtype=np.int64
        )
        self.offering_available = np.array([offering.available for _, offering in offerings], dtype=np.bool_)
        self.offerings = [offering for _, offering in offerings]
        self._offering_distinct, self._offering_positions = _index_by_key(
            [offering.requirements for offering in self.offerings]
        )
        self._offering_keys = sorted(self._offering_distinct)
        self._offering_masks: dict[tuple[Requirement, ...], BoolArray] = {}
        self._price_cache: dict[tuple[Requirement, ...], IntArray] = {}
        self.all_types: BoolArray = np.ones(count, dtype=np.bool_)

    def __len__(self) -> int:
        return len(self.types)

    def compatible(self, requirements: Requirements) -> BoolArray:
        """Types whose labels intersect the requirements on every key the types define."""
        mask = self.all_types
        for requirement in requirements:
            key_mask = self._key_mask(requirement)
            if key_mask is not None:
                mask = mask & key_mask
        return mask

    def _key_mask(self, requirement: Requirement) -> BoolArray | None:
        cached = self._key_masks.get(requirement)
        if cached is not None:
            return cached
        distinct = self._distinct.get(requirement.key)
        if distinct is None:
            return None
        verdicts = np.array([_intersects(candidate, requirement) for candidate in distinct], dtype=np.bool_)
        mask = verdicts[self._positions[requirement.key]]
        self._key_masks[requirement] = mask
        return mask

    def _offering_signature(self, requirements: Requirements) -> tuple[Requirement, ...]:
        return tuple(requirements.get(key) for key in self._offering_keys if requirements.has(key))

    def offering_mask(self, requirements: Requirements) -> BoolArray:
        """Offerings that are available and compatible with the requirements (zone, capacity type, ...)."""
        signature = self._offering_signature(requirements)
        cached = self._offering_masks.get(signature)
        if cached is not None:
            return cached
        mask = self.offering_available.copy()
        for requirement in signature:
            distinct = self._offering_distinct[requirement.key]
            verdicts = np.array(
                [_intersects(candidate, requirement) for candidate in distinct], dtype=np.bool_
            )
            mask &= verdicts[self._offering_positions[requirement.key]]
        self._offering_masks[signature] = mask
        return mask

    def cheapest_prices(self, requirements: Requirements) -> IntArray:
        """Per type, the price of its cheapest available compatible offering (`NO_PRICE` when it has none)."""
        signature = self._offering_signature(requirements)
        cached = self._price_cache.get(signature)
        if cached is not None:
            return cached
        mask = self.offering_mask(requirements)
        prices = np.full(len(self.types), NO_PRICE, dtype=np.int64)
        np.minimum.at(prices, self.offering_type[mask], self.offering_price[mask])
        self._price_cache[signature] = prices
        return prices

    def has_offering(self, requirements: Requirements) -> BoolArray:
        """Types with at least one available offering compatible with the requirements."""
        offered: BoolArray = self.cheapest_prices(requirements) != NO_PRICE
        return offered

    def defined_keys(self) -> list[str]:
        """Label keys at least one of the types defines."""
        return list(self._distinct)

    def values_of(self, key: str, rows: IntArray) -> set[str]:
        """The label values the given types have for a key (for minValues)."""
        distinct = self._distinct.get(key)
        if distinct is None:
            return set()
        values: set[str] = set()
        for position in np.unique(self._positions[key][rows]).tolist():
            values.update(distinct[position].values)
        return values
