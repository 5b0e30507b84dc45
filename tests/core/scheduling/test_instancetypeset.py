"""`InstanceTypeSet`'s index of the types' requirements, kept between simulations of the same type objects."""

from __future__ import annotations

from core import labels as wk
from core.scheduling import instancetypeset
from core.scheduling.instancetypeset import InstanceTypeSet, ResourceAxes
from core.scheduling.requirements import Operator, Requirement, Requirements
from tests.builders import catalog_p, instance_type


def zone_is(zone: str) -> Requirements:
    return Requirements([Requirement.new(wk.ZONE, Operator.IN, [zone])])


def test_the_same_type_objects_share_one_index_and_other_objects_get_their_own() -> None:
    axes = ResourceAxes(["cpu", "memory", "pods"])
    types = catalog_p()
    first, second = InstanceTypeSet(types, axes), InstanceTypeSet(list(types), axes)
    assert first._distinct is second._distinct
    assert first._offering_distinct is second._offering_distinct
    assert (
        first.compatible(zone_is("test-zone-2")).tolist()
        == second.compatible(zone_is("test-zone-2")).tolist()
    )

    # Types made again (as a catalog refresh or an overlay makes them) are indexed afresh: here one only offered
    # in test-zone-1.
    only_zone_1 = [instance_type(it.name, offerings=[("test-zone-1", "on-demand")]) for it in types]
    third = InstanceTypeSet(only_zone_1, axes)
    assert third._distinct is not first._distinct
    assert not third.compatible(zone_is("test-zone-2")).any()
    assert first.compatible(zone_is("test-zone-2")).all()


def test_the_kept_indexes_are_bounded() -> None:
    axes = ResourceAxes(["cpu", "memory", "pods"])
    for _ in range(instancetypeset._INDEXES_KEPT + 3):
        InstanceTypeSet([instance_type("t")], axes)
    assert len(instancetypeset._INDEXES) == instancetypeset._INDEXES_KEPT
