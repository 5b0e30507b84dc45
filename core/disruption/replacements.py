"""The NodeClaims a command launches: priced the way Karpenter prices a consolidation replacement.

A replacement keeps every instance type the simulation allowed, cheapest first. Consolidation may narrow
it (only types cheaper than the candidates, spot only); the launch is then the cheapest available offering
left, spot before on-demand at equal price, as the AKS provider picks it. Prices compare by the *worst*
launch price of a type, the most expensive offering it could land on for the capacity type it would use
(reserved, then spot, then on-demand), so that a replacement is cheaper whichever zone it lands in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core import labels
from core.disruption.commands import Replacement
from core.instancetypes.types import InstanceType, Offering
from core.scheduling.requirements import Operator, Requirement, Requirements
from core.scheduling.results import NewNodeClaim

LAUNCH_PREFERENCE = (labels.CAPACITY_TYPE_RESERVED, labels.CAPACITY_TYPE_SPOT, labels.CAPACITY_TYPE_ON_DEMAND)
"""The capacity type a NodeClaim launches with when its requirements allow several."""


def compatible(offering: Offering, requirements: Requirements) -> bool:
    """Whether an offering (zone, capacity type, ...) satisfies the requirements on its keys."""
    return all(
        requirements.get(requirement.key).has(value)
        for requirement in offering.requirements
        for value in requirement.values
    )


def offerings(instance_type: InstanceType, requirements: Requirements) -> list[Offering]:
    """The type's available offerings the requirements allow."""
    return [o for o in instance_type.offerings if o.available and compatible(o, requirements)]


def worst_launch_price(instance_type: InstanceType, requirements: Requirements) -> int | None:
    """The most the type could cost when launched under the requirements, None when it cannot launch."""
    allowed = offerings(instance_type, requirements)
    for capacity_type in LAUNCH_PREFERENCE:
        prices = [o.price_micros for o in allowed if o.capacity_type == capacity_type]
        if prices:
            return max(prices)
    return None


@dataclass(frozen=True, slots=True)
class Priced:
    """A simulated NodeClaim with its instance types resolved, cheapest first, and its requirements."""

    claim: NewNodeClaim
    options: tuple[InstanceType, ...]
    requirements: Requirements

    @classmethod
    def of(cls, claim: NewNodeClaim, types: Mapping[str, InstanceType]) -> Priced:
        """The claim's instance type options as objects (they come cheapest first from the scheduler)."""
        options = tuple(types[name] for name in claim.instance_type_options if name in types)
        return cls(claim, options, Requirements.from_dicts(claim.requirements))

    def cheapest(self) -> int | None:
        """The lowest worst-case launch price among the options."""
        prices = [
            price for it in self.options if (price := worst_launch_price(it, self.requirements)) is not None
        ]
        return min(prices, default=None)

    def narrowed(self, options: Sequence[InstanceType], requirement: Requirement | None = None) -> Priced:
        """The same claim limited to some of its options and, optionally, one more requirement; options
        left without an offering the requirements allow are dropped."""
        requirements = self.requirements.copy()
        if requirement is not None:
            requirements.add(requirement)
        kept = [it for it in options if offerings(it, requirements)]
        requirements.add(Requirement.new(labels.INSTANCE_TYPE, Operator.IN, [it.name for it in kept]))
        return Priced(self.claim, tuple(kept), requirements)

    def cheaper_than(self, price: int) -> list[InstanceType]:
        """The options whose worst launch price is below `price`, in order."""
        return [
            it
            for it in self.options
            if (worst := worst_launch_price(it, self.requirements)) is not None and worst < price
        ]

    def unmet_min_values(self) -> str | None:
        """The first minValues requirement the options no longer cover, as a sentence; None when met."""
        for requirement in self.requirements:
            if requirement.min_values is None:
                continue
            values = {
                value
                for it in self.options
                if it.requirements.has(requirement.key)
                for value in it.requirements.get(requirement.key).values
                if requirement.has(value)
            }
            if len(values) < requirement.min_values:
                return (
                    f"minValues requirement is not met for label {requirement.key} "
                    f"({len(values)} of {requirement.min_values} values left among cheaper types)"
                )
        return None

    def min_values_prefix(self) -> int:
        """How many of the cheapest options it takes to cover every minValues requirement."""
        needed = [r for r in self.requirements if r.min_values is not None]
        seen: dict[str, set[str]] = {r.key: set() for r in needed}
        for count, it in enumerate(self.options, start=1):
            for requirement in needed:
                if it.requirements.has(requirement.key):
                    seen[requirement.key].update(
                        v for v in it.requirements.get(requirement.key).values if requirement.has(v)
                    )
            if all(len(seen[r.key]) >= (r.min_values or 0) for r in needed):
                return count
        return len(self.options)

    def launch(self) -> tuple[InstanceType, Offering] | None:
        """The offering the provider would launch: cheapest, spot first at equal price, then by zone."""
        best: tuple[tuple[int, bool, str, str], InstanceType, Offering] | None = None
        for it in self.options:
            for offering in offerings(it, self.requirements):
                key = (
                    offering.price_micros,
                    offering.capacity_type != labels.CAPACITY_TYPE_SPOT,
                    offering.zone,
                    it.name,
                )
                if best is None or key < best[0]:
                    best = (key, it, offering)
        return None if best is None else (best[1], best[2])

    def replacement(self, name: str) -> Replacement:
        """The NodeClaim to launch, under the name pod moves refer to it by."""
        launch = self.launch()
        capacity_types = sorted(
            {o.capacity_type for it in self.options for o in offerings(it, self.requirements)}
        )
        node_labels = dict(self.claim.labels)
        if launch is not None:
            instance_type, offering = launch
            node_labels.update(instance_type.node_labels(offering))
            node_labels[labels.INSTANCE_TYPE] = instance_type.name
        return Replacement(
            name=name,
            nodepool=self.claim.nodepool,
            instance_type=launch[0].name if launch else None,
            zone=launch[1].zone if launch else None,
            capacity_type=launch[1].capacity_type if launch else None,
            price_micros=launch[1].price_micros if launch else None,
            instance_type_options=tuple(it.name for it in self.options),
            capacity_types=tuple(capacity_types),
            requirements=tuple(self.requirements.to_dicts()),
            labels=dict(sorted(node_labels.items())),
            taints=tuple(self.claim.taints),
            pods=tuple(self.claim.pods),
        )
