"""Karpenter's feature gates as FEATURE_GATES spells them: defaults of v1.14, named gates set, bad ones refused."""

from __future__ import annotations

import pytest

from core.features import FeatureGates, parse_feature_gates


def test_unnamed_gates_keep_karpenters_defaults() -> None:
    gates = parse_feature_gates("SpotToSpotConsolidation=true")
    assert gates == FeatureGates(spot_to_spot_consolidation=True)
    assert gates.reserved_capacity and not gates.node_repair


def test_values_and_spacing_are_read_as_karpenter_reads_them() -> None:
    gates = parse_feature_gates(" NodeRepair=True ,ReservedCapacity=FALSE,, ")
    assert (gates.node_repair, gates.reserved_capacity) == (True, False)


def test_render_reads_back_to_the_same_gates() -> None:
    gates = FeatureGates(node_repair=True, capacity_buffer=True, reserved_capacity=False)
    assert parse_feature_gates(gates.render()) == gates


def test_every_bad_entry_is_named() -> None:
    with pytest.raises(ValueError) as raised:
        parse_feature_gates("Drift=true,NodeRepair,NodeOverlay=1")
    message = str(raised.value)
    assert "'Drift' is not one of Karpenter's feature gates" in message
    assert "'NodeRepair': expected NodeRepair=true or NodeRepair=false" in message
    assert "'NodeOverlay=1'" in message


def test_gates_nodewright_does_not_implement_are_reported_when_on() -> None:
    assert FeatureGates().unsupported() == []
    gates = parse_feature_gates("NodeOverlay=true,CapacityBuffer=true,SpotToSpotConsolidation=true")
    assert gates.unsupported() == []
