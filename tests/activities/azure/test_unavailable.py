"""The unavailable-offerings cache: scopes and TTLs of each launch failure, family thresholds, spot quota."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.azure.errors import CapacityFailure
from activities.azure.unavailable import (
    ALLOCATION_FAILURE_TTL,
    LOW_QUOTA_TTL,
    SKU_NOT_AVAILABLE_ON_DEMAND_TTL,
    SKU_NOT_AVAILABLE_SPOT_TTL,
    SPOT_QUOTA_TTL,
    ZERO_QUOTA_TTL,
    UnavailableOfferings,
)
from core.instancetypes.catalog import AzureCatalog, AzureSku

OD = "on-demand"
SPOT = "spot"
REGION = "westus2"
Z1, Z2, Z3, REGIONAL = "westus2-1", "westus2-2", "westus2-3", "0"
ALL_ZONES = (Z1, Z2, Z3, REGIONAL)


def sku(name: str, vcpus: int, family: str | None = "standardDSv3Family") -> AzureSku:
    return AzureSku(name=name, vcpus=vcpus, memory_gib=4.0 * vcpus, quota_family=family)


D4 = sku("Standard_D4s_v3", 4)
D8 = sku("Standard_D8s_v3", 8)
D16 = sku("Standard_D16s_v3", 16)
D32 = sku("Standard_D32s_v3", 32)
E8 = sku("Standard_E8s_v3", 8, family="standardESv3Family")
CATALOG = AzureCatalog(region=REGION, zones=("1", "2", "3"), skus=(D4, D8, D16, D32, E8))


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> UnavailableOfferings:
    return UnavailableOfferings(clock)


def blocked(cache: UnavailableOfferings, size: AzureSku) -> set[tuple[str, str]]:
    return {
        (zone, capacity_type)
        for zone in ALL_ZONES
        for capacity_type in (OD, SPOT)
        if cache.is_unavailable(size, zone, capacity_type)
    }


def test_marking_blocks_the_offering_and_larger_sizes_of_its_family_in_that_zone(
    cache: UnavailableOfferings,
) -> None:
    cache.mark(D16, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)

    assert blocked(cache, D16) == {(Z1, OD)}
    assert blocked(cache, D32) == {(Z1, OD)}
    assert blocked(cache, D8) == set()
    assert blocked(cache, E8) == set()


def test_the_family_threshold_only_goes_down(cache: UnavailableOfferings) -> None:
    cache.mark(D8, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)
    cache.mark(D32, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)

    assert blocked(cache, D16) == {(Z1, OD)}
    assert blocked(cache, D4) == set()


def test_a_size_without_a_quota_family_blocks_only_itself(cache: UnavailableOfferings) -> None:
    lonely = sku("Standard_X8", 8, family=None)
    bigger = sku("Standard_X16", 16, family=None)

    cache.mark(lonely, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)

    assert blocked(cache, lonely) == {(Z1, OD)}
    assert blocked(cache, bigger) == set()


ZONAL = {Z1, Z2, Z3}


@pytest.mark.parametrize(
    ("failure", "zone", "capacity_type", "expected", "ttl"),
    [
        (CapacityFailure.SKU_NOT_AVAILABLE, Z2, SPOT, {(z, SPOT) for z in ZONAL}, SKU_NOT_AVAILABLE_SPOT_TTL),
        (
            CapacityFailure.SKU_NOT_AVAILABLE,
            Z2,
            OD,
            {(z, OD) for z in ZONAL},
            SKU_NOT_AVAILABLE_ON_DEMAND_TTL,
        ),
        (CapacityFailure.SKU_NOT_AVAILABLE, REGIONAL, OD, {(REGIONAL, OD)}, SKU_NOT_AVAILABLE_ON_DEMAND_TTL),
        (CapacityFailure.ZONAL_ALLOCATION_FAILED, Z2, OD, {(Z2, OD), (Z2, SPOT)}, ALLOCATION_FAILURE_TTL),
        (
            CapacityFailure.ALLOCATION_FAILED,
            Z2,
            SPOT,
            {(z, ct) for z in ZONAL for ct in (OD, SPOT)},
            ALLOCATION_FAILURE_TTL,
        ),
        (
            CapacityFailure.ALLOCATION_FAILED,
            REGIONAL,
            OD,
            {(REGIONAL, OD), (REGIONAL, SPOT)},
            ALLOCATION_FAILURE_TTL,
        ),
        (CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION, Z2, SPOT, {(Z2, SPOT)}, ALLOCATION_FAILURE_TTL),
        (
            CapacityFailure.OVERCONSTRAINED_ALLOCATION,
            Z3,
            OD,
            {(z, OD) for z in ZONAL},
            ALLOCATION_FAILURE_TTL,
        ),
        (CapacityFailure.FAMILY_QUOTA, Z1, OD, {(z, OD) for z in ALL_ZONES}, LOW_QUOTA_TTL),
    ],
)
def test_each_failure_blocks_its_scope_for_its_ttl(
    cache: UnavailableOfferings,
    clock: Clock,
    failure: CapacityFailure,
    zone: str,
    capacity_type: str,
    expected: set[tuple[str, str]],
    ttl: timedelta,
) -> None:
    cache.record(failure, D16, zone, capacity_type, CATALOG)

    assert blocked(cache, D16) == expected
    assert blocked(cache, D32) == expected, "larger sizes of the family are blocked where D16 is"
    assert blocked(cache, D8) == set()
    clock.now += ttl - timedelta(seconds=1)
    assert blocked(cache, D16) == expected
    clock.now += timedelta(seconds=1)
    assert blocked(cache, D16) == set()


def test_a_family_quota_error_with_a_zero_limit_lasts_an_hour(
    cache: UnavailableOfferings, clock: Clock
) -> None:
    cache.record(CapacityFailure.FAMILY_QUOTA, D16, Z1, OD, CATALOG, quota_limit_zero=True)

    clock.now += ZERO_QUOTA_TTL - timedelta(seconds=1)
    assert blocked(cache, D16) == {(z, OD) for z in ALL_ZONES}
    clock.now += timedelta(seconds=1)
    assert blocked(cache, D16) == set()


def test_a_spot_quota_error_blocks_all_spot_everywhere(cache: UnavailableOfferings, clock: Clock) -> None:
    cache.record(CapacityFailure.SPOT_QUOTA, D16, Z1, SPOT, CATALOG)

    for size in (D4, D16, E8):
        assert blocked(cache, size) == {(z, SPOT) for z in ALL_ZONES}
    clock.now += SPOT_QUOTA_TTL
    assert blocked(cache, E8) == set()


def test_a_regional_quota_error_blocks_nothing(cache: UnavailableOfferings) -> None:
    cache.record(CapacityFailure.REGIONAL_QUOTA, D16, Z1, OD, CATALOG)

    assert blocked(cache, D16) == set()
    assert cache.sequence == 0


def test_a_shorter_mark_does_not_shorten_an_entry(cache: UnavailableOfferings, clock: Clock) -> None:
    cache.record(CapacityFailure.SKU_NOT_AVAILABLE, D16, Z1, OD, CATALOG)
    cache.record(CapacityFailure.FAMILY_QUOTA, D16, Z1, OD, CATALOG)

    clock.now += timedelta(hours=22)
    assert (Z1, OD) in blocked(cache, D16)


def test_the_sequence_moves_only_when_availability_changes(cache: UnavailableOfferings, clock: Clock) -> None:
    cache.mark(D16, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)
    first = cache.sequence
    assert first > 0

    clock.now += timedelta(minutes=30)
    cache.mark(D16, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)
    assert cache.sequence == first, "extending an entry changes nothing"

    cache.mark(D8, Z1, OD, ALLOCATION_FAILURE_TTL, CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION)
    second = cache.sequence
    assert second > first, "a lower family threshold blocks more"

    clock.now += ALLOCATION_FAILURE_TTL
    assert cache.sequence > second, "expiry frees offerings"


def test_the_unavailable_list_names_each_offering_with_its_reason_and_expiry(
    cache: UnavailableOfferings, clock: Clock
) -> None:
    cache.record(CapacityFailure.ZONAL_ALLOCATION_FAILED, D16, Z2, OD, CATALOG)

    listed = {
        (u.instance_type, u.zone, u.capacity_type, u.reason, u.until) for u in cache.unavailable(CATALOG)
    }

    until = clock.now + ALLOCATION_FAILURE_TTL
    assert listed == {
        (size.name, Z2, capacity_type, "ZonalAllocationFailed", until)
        for size in (D16, D32)
        for capacity_type in (OD, SPOT)
    }
