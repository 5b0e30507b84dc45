"""The unavailable-offerings cache: which (VM size, zone, capacity type) launches failed recently, and until when.

It works like the AKS provider's cache. A launch failure marks offerings unavailable for a time that depends
on the failure (section 4 of the provider research): quota and allocation failures for an hour, on-demand
`SkuNotAvailable` for 23 hours, a quota error whose limit is not zero for 10 minutes (long enough to walk
down the sizes of a family, short enough to use the quota that is left). Three kinds of entry:

- one offering: `(size, zone, capacity type)`;
- a quota family in a zone for a capacity type, with a vCPU threshold: every size of the family with at
  least that many vCPUs is blocked there. Marking an offering lowers its family's threshold to the size's
  vCPUs, so a failed Standard_D16s_v3 also blocks D32s_v3 and D64s_v3 in that zone, but not D8s_v3;
- all spot, in every zone, after a low-priority (spot) cores quota error.

An entry lasts until its latest mark. The sequence number moves only when availability changes (something
new is blocked, a threshold drops, or an entry expires), so a caller can rebuild instance types only then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from activities.azure.errors import CapacityFailure
from core import labels
from core.instancetypes.azure import REGIONAL_ZONE, offering_zones
from core.instancetypes.catalog import AzureCatalog, AzureSku
from core.messages import UnavailableOffering

SPOT_QUOTA_TTL = timedelta(hours=1)
ZERO_QUOTA_TTL = timedelta(hours=1)
"""A family quota error with `Current Limit: 0`: the subscription has no quota for the family at all."""
LOW_QUOTA_TTL = timedelta(minutes=10)
SKU_NOT_AVAILABLE_SPOT_TTL = timedelta(hours=1)
SKU_NOT_AVAILABLE_ON_DEMAND_TTL = timedelta(hours=23)
ALLOCATION_FAILURE_TTL = timedelta(hours=1)

CAPACITY_TYPES = (labels.CAPACITY_TYPE_ON_DEMAND, labels.CAPACITY_TYPE_SPOT)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Block:
    """Why an offering is unavailable, and until when."""

    reason: CapacityFailure
    until: datetime


@dataclass(frozen=True, slots=True)
class _FamilyBlock:
    min_vcpus: int
    block: Block


class UnavailableOfferings:
    """Offerings recent launch failures ruled out, shared by every launch of one process."""

    def __init__(self, clock: Callable[[], datetime] = utc_now) -> None:
        self._clock = clock
        self._offerings: dict[tuple[str, str, str], Block] = {}
        self._families: dict[tuple[str, str, str], _FamilyBlock] = {}
        self._spot: Block | None = None
        self._sequence = 0

    @property
    def sequence(self) -> int:
        """A number that changes whenever the set of unavailable offerings changes."""
        self._expire()
        return self._sequence

    # --- reading -------------------------------------------------------------------------------------------

    def blocked(self, sku: AzureSku, zone: str, capacity_type: str) -> Block | None:
        """Why this offering is unavailable now, or `None` when it is available."""
        self._expire()
        return self._lookup(sku, zone, capacity_type)

    def _lookup(self, sku: AzureSku, zone: str, capacity_type: str) -> Block | None:
        if capacity_type == labels.CAPACITY_TYPE_SPOT and self._spot is not None:
            return self._spot
        family = self._families.get(_family_key(sku, zone, capacity_type)) if sku.quota_family else None
        if family is not None and sku.vcpus >= family.min_vcpus:
            return family.block
        return self._offerings.get((sku.name, zone, capacity_type))

    def is_unavailable(self, sku: AzureSku, zone: str, capacity_type: str) -> bool:
        return self.blocked(sku, zone, capacity_type) is not None

    def unavailable(self, catalog: AzureCatalog) -> list[UnavailableOffering]:
        """Every offering of the catalog that is unavailable now, with its reason and expiry."""
        self._expire()
        found = []
        for sku in catalog.skus:
            for zone in offering_zones(sku, catalog):
                for capacity_type in CAPACITY_TYPES:
                    block = self._lookup(sku, zone, capacity_type)
                    if block is not None:
                        found.append(
                            UnavailableOffering(
                                instance_type=sku.name,
                                zone=zone,
                                capacity_type=capacity_type,
                                until=block.until,
                                reason=block.reason.value,
                            )
                        )
        return found

    # --- marking -------------------------------------------------------------------------------------------

    def mark(
        self, sku: AzureSku, zone: str, capacity_type: str, ttl: timedelta, reason: CapacityFailure
    ) -> None:
        """Block one offering, and every size of its quota family in that zone with at least as many vCPUs."""
        self._expire()
        block = Block(reason, self._clock() + ttl)
        key = (sku.name, zone, capacity_type)
        changed = key not in self._offerings
        self._offerings[key] = _later(self._offerings.get(key), block)
        if sku.quota_family:
            family_key = _family_key(sku, zone, capacity_type)
            existing = self._families.get(family_key)
            min_vcpus = sku.vcpus if existing is None else min(existing.min_vcpus, sku.vcpus)
            changed = changed or existing is None or min_vcpus < existing.min_vcpus
            self._families[family_key] = _FamilyBlock(
                min_vcpus, _later(existing.block if existing else None, block)
            )
        if changed:
            self._sequence += 1

    def mark_all_spot(self, ttl: timedelta, reason: CapacityFailure) -> None:
        """Block spot for every size in every zone (the subscription's spot cores quota is used up)."""
        self._expire()
        if self._spot is None:
            self._sequence += 1
        self._spot = _later(self._spot, Block(reason, self._clock() + ttl))

    def record(
        self,
        failure: CapacityFailure,
        sku: AzureSku,
        zone: str,
        capacity_type: str,
        catalog: AzureCatalog,
        quota_limit_zero: bool = False,
    ) -> None:
        """Mark what a launch failure of (sku, zone, capacity type) rules out, with the provider's scope and TTL.

        `catalog` gives the size's zones. A zonal attempt's placement scope is every zone of the size; a
        regional attempt's (zone "0") is "0" alone, so a failed zonal launch leaves regional placement usable
        and the reverse. A regional cores quota error marks nothing: no other size or zone would help.
        """
        zones = offering_zones(sku, catalog)
        scope = [REGIONAL_ZONE] if zone == REGIONAL_ZONE else [z for z in zones if z != REGIONAL_ZONE]
        both = CAPACITY_TYPES
        one = (capacity_type,)
        match failure:
            case CapacityFailure.SPOT_QUOTA:
                self.mark_all_spot(SPOT_QUOTA_TTL, failure)
            case CapacityFailure.FAMILY_QUOTA:
                self._mark_each(
                    sku, zones, one, ZERO_QUOTA_TTL if quota_limit_zero else LOW_QUOTA_TTL, failure
                )
            case CapacityFailure.SKU_NOT_AVAILABLE:
                ttl = (
                    SKU_NOT_AVAILABLE_SPOT_TTL
                    if capacity_type == labels.CAPACITY_TYPE_SPOT
                    else SKU_NOT_AVAILABLE_ON_DEMAND_TTL
                )
                self._mark_each(sku, scope, one, ttl, failure)
            case CapacityFailure.ZONAL_ALLOCATION_FAILED:
                self._mark_each(sku, [zone], both, ALLOCATION_FAILURE_TTL, failure)
            case CapacityFailure.ALLOCATION_FAILED:
                self._mark_each(sku, scope, both, ALLOCATION_FAILURE_TTL, failure)
            case CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION:
                self._mark_each(sku, [zone], one, ALLOCATION_FAILURE_TTL, failure)
            case CapacityFailure.OVERCONSTRAINED_ALLOCATION:
                self._mark_each(sku, scope, one, ALLOCATION_FAILURE_TTL, failure)
            case CapacityFailure.REGIONAL_QUOTA:
                pass

    def _mark_each(
        self,
        sku: AzureSku,
        zones: Iterable[str],
        capacity_types: Iterable[str],
        ttl: timedelta,
        reason: CapacityFailure,
    ) -> None:
        for zone in zones:
            for capacity_type in capacity_types:
                self.mark(sku, zone, capacity_type, ttl, reason)

    def _expire(self) -> None:
        now = self._clock()
        before = len(self._offerings) + len(self._families) + (self._spot is not None)
        self._offerings = {key: block for key, block in self._offerings.items() if block.until > now}
        self._families = {key: family for key, family in self._families.items() if family.block.until > now}
        if self._spot is not None and self._spot.until <= now:
            self._spot = None
        if len(self._offerings) + len(self._families) + (self._spot is not None) != before:
            self._sequence += 1


def _family_key(sku: AzureSku, zone: str, capacity_type: str) -> tuple[str, str, str]:
    return ((sku.quota_family or "").lower(), zone, capacity_type)


def _later(existing: Block | None, new: Block) -> Block:
    """The new mark, lasting at least as long as the one it replaces."""
    if existing is None or new.until >= existing.until:
        return new
    return Block(new.reason, existing.until)
