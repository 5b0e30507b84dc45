"""Instance types and offerings, the vocabulary the scheduler shares with every cloud.

An instance type is a shape (capacity, overhead, labels) with offerings: one per zone and capacity type,
each with a price and an availability flag. Prices are integer micro-dollars per hour so that sums and
comparisons are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from core.resources import Resources, subtract
from core.scheduling.requirements import Requirements

MICROS_PER_DOLLAR = 1_000_000


def dollars(price_micros: int) -> float:
    """Micro-dollars as dollars, for display."""
    return price_micros / MICROS_PER_DOLLAR


def usd_to_micros(usd: float | Decimal | str) -> int:
    """A USD amount as integer micro-dollars, rounded half up (0.0000005 -> 1)."""
    amount = Decimal(str(usd)) * MICROS_PER_DOLLAR
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class Offering:
    """Where and how an instance type can be bought: one zone and one capacity type, at a price."""

    zone: str
    capacity_type: str
    price_micros: int
    available: bool
    requirements: Requirements
    """Single-valued requirements: zone, capacity type, and any provider keys (placement scope, priority)."""
    price_overlay: str | None = None
    """The NodeOverlay that set this price (`core.instancetypes.overlay`), None for the provider's own."""


@dataclass(frozen=True, slots=True)
class Overhead:
    """What the node keeps for itself; allocatable = capacity minus the sum of these."""

    kube_reserved: Resources = field(default_factory=dict)
    system_reserved: Resources = field(default_factory=dict)
    eviction_threshold: Resources = field(default_factory=dict)

    def total(self) -> Resources:
        """The three reservations added up."""
        total: Resources = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction_threshold):
            for name, amount in part.items():
                total[name] = total.get(name, 0) + amount
        return total


@dataclass(frozen=True, slots=True)
class InstanceType:
    """A VM size with its labels (as requirements), capacity, overhead and offerings."""

    name: str
    requirements: Requirements
    """Every label a node of this type gets, zone and capacity type being the union over available offerings."""
    offerings: tuple[Offering, ...]
    capacity: Resources
    overhead: Overhead = field(default_factory=Overhead)
    capacity_overlays: tuple[str, ...] = ()
    """The NodeOverlays that added extended resources to `capacity`."""

    def allocatable(self) -> Resources:
        """Capacity minus overhead, never below zero."""
        return {
            name: max(0, amount) for name, amount in subtract(self.capacity, self.overhead.total()).items()
        }

    def node_labels(self, offering: Offering) -> dict[str, str]:
        """The labels a node of this type gets when launched with this offering: every key the type or the
        offering pins to a single value."""
        result: dict[str, str] = {}
        for requirements in (self.requirements, offering.requirements):
            for requirement in requirements:
                if not requirement.complement and len(requirement.values) == 1:
                    result[requirement.key] = next(iter(requirement.values))
        return result

    def available_offerings(self) -> tuple[Offering, ...]:
        """The offerings that can be launched now."""
        return tuple(offering for offering in self.offerings if offering.available)
