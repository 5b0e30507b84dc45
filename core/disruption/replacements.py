"""The NodeClaims a command launches: priced the way Karpenter prices a consolidation replacement.

A replacement keeps every instance type the simulation allowed, cheapest first. Consolidation may narrow
it (only types cheaper than the candidates, spot only); the launch is then the cheapest available offering
left, spot before on-demand at equal price, as the AKS provider picks it. Prices compare by the *worst*
launch price of a type, the most expensive offering it could land on for the capacity type it would use
(reserved, then spot, then on-demand), so that a replacement is cheaper whichever zone it lands in.

Prices are computed over the scheduler's arrays of instance types and offerings (`InstanceTypeSet`), so
that pricing a replacement with hundreds of options costs a few numpy calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core import labels
from core.disruption.commands import Replacement
from core.instancetypes.types import InstanceType, Offering
from core.resources import format_resources
from core.scheduling.instancetypeset import NO_PRICE, BoolArray, InstanceTypeSet, IntArray
from core.scheduling.requirements import Operator, Requirement, Requirements
from core.scheduling.results import NewNodeClaim

LAUNCH_PREFERENCE = (labels.CAPACITY_TYPE_RESERVED, labels.CAPACITY_TYPE_SPOT, labels.CAPACITY_TYPE_ON_DEMAND)
"""The capacity type a NodeClaim launches with when its requirements allow several."""


class Catalog:
    """A NodePool's instance types and offerings as the scheduler holds them, looked up by name."""

    def __init__(self, types: InstanceTypeSet) -> None:
        self.types = types
        self.row = {name: row for row, name in enumerate(types.names)}
        capacity_types = np.array([offering.capacity_type for offering in types.offerings])
        self._of_capacity_type = {kind: capacity_types == kind for kind in LAUNCH_PREFERENCE}

    def worst_prices(self, offered: BoolArray) -> IntArray:
        """Per type, its worst launch price among the offered offerings (`NO_PRICE` when it has none)."""
        types = self.types
        worst = np.full(len(types), NO_PRICE, dtype=np.int64)
        for kind in LAUNCH_PREFERENCE:
            mask = offered & self._of_capacity_type[kind]
            dearest = np.full(len(types), -1, dtype=np.int64)
            np.maximum.at(dearest, types.offering_type[mask], types.offering_price[mask])
            worst = np.where((worst == NO_PRICE) & (dearest >= 0), dearest, worst)
        return worst


@dataclass(frozen=True, slots=True)
class Priced:
    """A simulated NodeClaim with its instance type options (rows of the catalog, cheapest first) and its
    requirements."""

    claim: NewNodeClaim
    catalog: Catalog
    rows: tuple[int, ...]
    requirements: Requirements

    @classmethod
    def of(cls, claim: NewNodeClaim, catalog: Catalog) -> Priced:
        """The claim as the scheduler made it (its options come cheapest first)."""
        rows = tuple(catalog.row[name] for name in claim.instance_type_options if name in catalog.row)
        return cls(claim, catalog, rows, Requirements.from_dicts(claim.requirements))

    @property
    def options(self) -> tuple[InstanceType, ...]:
        """The instance types the NodeClaim may launch as."""
        return tuple(self.catalog.types.types[row] for row in self.rows)

    def _offered(self) -> BoolArray:
        return self.catalog.types.offering_mask(self.requirements)

    def worst_prices(self) -> list[int | None]:
        """Each option's worst launch price under the requirements (None when it cannot launch)."""
        worst = self.catalog.worst_prices(self._offered())
        return [None if worst[row] == NO_PRICE else int(worst[row]) for row in self.rows]

    def cheapest(self) -> int | None:
        """The lowest worst-case launch price among the options."""
        return min((price for price in self.worst_prices() if price is not None), default=None)

    def cheaper_than(self, price: int) -> tuple[int, ...]:
        """The options (as rows, in order) whose worst launch price is below `price`."""
        worst = self.worst_prices()
        return tuple(
            row for row, cost in zip(self.rows, worst, strict=True) if cost is not None and cost < price
        )

    def narrowed(self, rows: Sequence[int], requirement: Requirement | None = None) -> Priced:
        """The same claim limited to some of its options and, optionally, one more requirement; options
        left without an offering the requirements allow are dropped."""
        requirements = self.requirements.copy()
        if requirement is not None:
            requirements.add(requirement)
        launchable = self.catalog.types.has_offering(requirements)
        kept = tuple(row for row in rows if launchable[row])
        if kept:
            names = [self.catalog.types.names[row] for row in kept]
            requirements.add(Requirement.new(labels.INSTANCE_TYPE, Operator.IN, names))
        return Priced(self.claim, self.catalog, kept, requirements)

    def _values(self, requirement: Requirement, rows: Sequence[int]) -> set[str]:
        found = self.catalog.types.values_of(requirement.key, np.array(rows, dtype=np.int64))
        return {value for value in found if requirement.has(value)}

    def unmet_min_values(self) -> str | None:
        """The first minValues requirement the options no longer cover, as a sentence; None when met."""
        for requirement in self.requirements:
            if requirement.min_values is None:
                continue
            values = self._values(requirement, self.rows)
            if len(values) < requirement.min_values:
                return (
                    f"minValues requirement is not met for label {requirement.key} "
                    f"({len(values)} of {requirement.min_values} values left among cheaper types)"
                )
        return None

    def min_values_prefix(self) -> int:
        """How many of the cheapest options it takes to cover every minValues requirement."""
        needed = [r for r in self.requirements if r.min_values is not None]
        for count in range(1, len(self.rows) + 1):
            prefix = self.rows[:count]
            if all(len(self._values(r, prefix)) >= (r.min_values or 0) for r in needed):
                return count
        return len(self.rows)

    def _columns(self) -> list[int]:
        """The offerings (columns of the catalog) the NodeClaim could launch on."""
        types = self.catalog.types
        wanted = np.zeros(len(types), dtype=np.bool_)
        wanted[list(self.rows)] = True
        columns: list[int] = np.flatnonzero(self._offered() & wanted[types.offering_type]).tolist()
        return columns

    def launch(self) -> tuple[InstanceType, Offering] | None:
        """The offering the provider would launch: cheapest, spot first at equal price, then by zone."""
        types = self.catalog.types
        columns = self._columns()
        if not columns:
            return None

        def preference(column: int) -> tuple[int, bool, str, str]:
            offering = types.offerings[column]
            name = types.names[int(types.offering_type[column])]
            return (
                offering.price_micros,
                offering.capacity_type != labels.CAPACITY_TYPE_SPOT,
                offering.zone,
                name,
            )

        best = min(columns, key=preference)
        return types.types[int(types.offering_type[best])], types.offerings[best]

    def capacity_types(self) -> tuple[str, ...]:
        """The capacity types the NodeClaim may launch with."""
        offerings = self.catalog.types.offerings
        return tuple(sorted({offerings[column].capacity_type for column in self._columns()}))

    def replacement(self, name: str) -> Replacement:
        """The NodeClaim to launch, under the name pod moves refer to it by."""
        launch = self.launch()
        node_labels: dict[str, str] = {}
        if launch is not None:
            instance_type, offering = launch
            node_labels.update(instance_type.node_labels(offering))
            node_labels[labels.INSTANCE_TYPE] = instance_type.name
            node_labels[labels.ZONE] = offering.zone
            node_labels[labels.CAPACITY_TYPE] = offering.capacity_type
        node_labels.update(self.claim.nodeclaim_labels)
        return Replacement(
            name=name,
            nodepool=self.claim.nodepool,
            instance_type=launch[0].name if launch else None,
            zone=launch[1].zone if launch else None,
            capacity_type=launch[1].capacity_type if launch else None,
            price_micros=launch[1].price_micros if launch else None,
            instance_type_options=tuple(self.catalog.types.names[row] for row in self.rows),
            capacity_types=self.capacity_types(),
            requirements=tuple(self.requirements.to_dicts()),
            labels=dict(sorted(node_labels.items())),
            nodeclaim_labels=dict(self.claim.nodeclaim_labels),
            taints=tuple(self.claim.taints),
            pods=tuple(self.claim.pods),
            requests=format_resources(self.claim.requests),
        )
