"""NodeOverlays on instance types: which ones they select, what price and capacity result, which overlay wins
(weight, then name) and which conflict."""

from __future__ import annotations

from typing import Any

import pytest

from core.api.meta import InvalidObjectError
from core.api.nodeoverlay import NodeOverlay
from core.instancetypes.overlay import (
    CAPACITY_OVERLAY_APPLIED,
    PRICE_OVERLAY_APPLIED,
    OverlayPool,
    OverlayVerdict,
    adjusted_price_micros,
    apply_overlays,
    overlay_annotations,
    precedence,
)
from core.instancetypes.types import InstanceType
from tests.builders import instance_type

ZONES = (("z1", "on-demand"), ("z1", "spot"), ("z2", "on-demand"))


def overlay(name: str, *requirements: dict[str, Any], **spec: Any) -> NodeOverlay:
    return NodeOverlay.parse(
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {"requirements": list(requirements), **spec},
        }
    )


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def types() -> dict[str, list[InstanceType]]:
    return {
        "default": [
            instance_type("small", price=1_000_000, offerings=ZONES),
            instance_type("large", 8, "16Gi", price=2_000_000, offerings=ZONES),
        ]
    }


POOLS = [OverlayPool("default", {"team": "web"})]
SMALL = req("node.kubernetes.io/instance-type", "In", "small")


def prices(
    result_types: dict[str, list[InstanceType]], pool: str = "default"
) -> dict[tuple[str, str, str], int]:
    return {
        (it.name, o.zone, o.capacity_type): o.price_micros for it in result_types[pool] for o in it.offerings
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("0.25", 250_000),
        ("3", 3_000_000),
        ("-0.5", 500_000),
        ("+0.1", 1_100_000),
        ("-10%", 900_000),
        ("+50%", 1_500_000),
        ("-100%", 0),
        ("-2", 0),
    ],
)
def test_price_and_price_adjustment(change: str, expected: int) -> None:
    assert adjusted_price_micros(1_000_000, change) == expected


def test_a_price_overlay_changes_only_the_offerings_it_selects() -> None:
    spot_small = overlay(
        "spot", SMALL, req("karpenter.sh/capacity-type", "In", "spot"), priceAdjustment="-50%"
    )
    result = apply_overlays([spot_small], POOLS, types())
    assert prices(result.instance_types) == {
        ("small", "z1", "on-demand"): 1_000_000,
        ("small", "z1", "spot"): 500_000,
        ("small", "z2", "on-demand"): 1_000_000,
        ("large", "z1", "on-demand"): 2_000_000,
        ("large", "z1", "spot"): 2_000_000,
        ("large", "z2", "on-demand"): 2_000_000,
    }
    small = result.instance_types["default"][0]
    assert [o.price_overlay for o in small.offerings] == [None, "spot", None]
    assert not any(o.price_overlay for o in result.instance_types["default"][1].offerings)
    assert result.verdicts == {"spot": OverlayVerdict(True)}


def test_overlays_select_by_nodepool_name_and_template_labels() -> None:
    other_pool = overlay("other", req("karpenter.sh/nodepool", "In", "batch"), price="9")
    by_label = overlay("team", req("team", "In", "web"), price="7")
    unknown_label = overlay("unknown", req("example.com/zone", "In", "x"), price="8")
    result = apply_overlays([other_pool, by_label, unknown_label], POOLS, types())
    assert set(prices(result.instance_types).values()) == {7_000_000}
    assert all(verdict.valid for verdict in result.verdicts.values())


def test_higher_weight_wins_the_price_and_lower_weight_fills_the_rest() -> None:
    everything = overlay("cheap-everything", req("kubernetes.io/os", "Exists"), price="0.5", weight=1)
    small_only = overlay("small", SMALL, price="0.1", weight=10)
    result = apply_overlays([everything, small_only], POOLS, types())
    assert prices(result.instance_types) == {
        **{("small", zone, ct): 100_000 for zone, ct in ZONES},
        **{("large", zone, ct): 500_000 for zone, ct in ZONES},
    }
    assert result.verdicts == {"cheap-everything": OverlayVerdict(True), "small": OverlayVerdict(True)}


def test_equal_weight_price_overlays_conflict_and_the_name_later_in_the_alphabet_wins() -> None:
    first = overlay("alpha", SMALL, price="0.3", weight=5)
    second = overlay("beta", SMALL, price="0.2", weight=5)
    result = apply_overlays([first, second], POOLS, types())
    assert [o.name for o in precedence([first, second])] == ["beta", "alpha"]
    assert result.verdicts["beta"] == OverlayVerdict(True)
    assert result.verdicts["alpha"] == OverlayVerdict(False, "Conflict", "conflict with another overlay")
    assert {price for (name, _, _), price in prices(result.instance_types).items() if name == "small"} == {
        200_000
    }


def test_a_conflicting_overlay_is_applied_nowhere() -> None:
    small = overlay("b-small", SMALL, price="0.2")
    # It overlaps on `small` only, yet does not change `large` either: all or nothing.
    everything = overlay("a-all", req("kubernetes.io/os", "Exists"), price="0.9")
    result = apply_overlays([small, everything], POOLS, types())
    assert result.verdicts["a-all"].reason == "Conflict"
    assert {price for (name, _, _), price in prices(result.instance_types).items() if name == "large"} == {
        2_000_000
    }


def test_capacity_adds_extended_resources_and_is_resolved_apart_from_price() -> None:
    price = overlay("price", SMALL, price="0.2", weight=3)
    gpus = overlay("gpus", SMALL, capacity={"example.com/gpu": "2"}, weight=3)
    more = overlay(
        "more", req("kubernetes.io/os", "Exists"), capacity={"example.com/gpu": "1", "example.com/fpga": "1"}
    )
    result = apply_overlays([price, gpus, more], POOLS, types())
    small, large = result.instance_types["default"]
    assert small.capacity["example.com/gpu"] == 2 and small.capacity["example.com/fpga"] == 1
    assert small.allocatable()["example.com/gpu"] == 2
    assert small.capacity["cpu"] == 4000
    assert large.capacity["example.com/gpu"] == 1
    assert small.capacity_overlays == ("gpus", "more")
    assert all(verdict.valid for verdict in result.verdicts.values())


def test_equal_weight_capacity_on_the_same_resource_conflicts() -> None:
    first = overlay("a", SMALL, capacity={"example.com/gpu": "1"})
    second = overlay("b", SMALL, capacity={"example.com/gpu": "2"})
    other = overlay("c", SMALL, capacity={"example.com/fpga": "2"})
    result = apply_overlays([first, second, other], POOLS, types())
    assert result.verdicts["a"].reason == "Conflict"
    assert result.verdicts["b"].valid and result.verdicts["c"].valid
    assert result.instance_types["default"][0].capacity["example.com/gpu"] == 2


def test_runtime_validation_failures_are_reported_and_not_applied() -> None:
    restricted = overlay("restricted", req("kubernetes.io/custom", "Exists"), price="0.1")
    result = apply_overlays([restricted], POOLS, types())
    verdict = result.verdicts["restricted"]
    assert not verdict.valid and verdict.reason == "RuntimeValidation"
    assert "kubernetes.io/custom" in verdict.message
    assert result.instance_types == types()


def test_the_nodeclaim_annotations_say_which_overlays_applied() -> None:
    result = apply_overlays([overlay("p", SMALL, price="0.1")], POOLS, types())
    assert overlay_annotations(result.instance_types["default"]) == {PRICE_OVERLAY_APPLIED: "true"}
    result = apply_overlays([overlay("c", SMALL, capacity={"example.com/gpu": "1"})], POOLS, types())
    assert overlay_annotations(result.instance_types["default"]) == {CAPACITY_OVERLAY_APPLIED: "true"}
    assert overlay_annotations(types()["default"]) == {}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"price": "1", "priceAdjustment": "+1"}, "cannot set both 'price' and 'priceAdjustment'"),
        ({"priceAdjustment": "-101%"}, "spec.priceAdjustment"),
        ({"priceAdjustment": "10%"}, "spec.priceAdjustment"),
        ({"price": "-1"}, "spec.price"),
        # Digits are ASCII, as in the CRD's pattern on the API server (Go): Python's \d takes others too.
        ({"price": "\u0661"}, "spec.price"),
        ({"priceAdjustment": "+\u0661\u0662%"}, "spec.priceAdjustment"),
        ({"capacity": {"cpu": "1"}}, "spec.capacity: invalid resource restricted"),
        ({"weight": 0}, "spec.weight"),
    ],
)
def test_the_model_rejects_what_karpenters_crd_rejects(spec: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidObjectError) as error:
        overlay("bad", SMALL, **spec)
    assert problem in str(error.value)
    assert "NodeOverlay bad" in str(error.value)


@pytest.mark.parametrize(
    ("requirement", "problem"),
    [
        (req("karpenter.sh/custom", "Exists"), 'label domain "karpenter.sh" is restricted'),
        (req("kubernetes.io/hostname", "Exists"), 'label "kubernetes.io/hostname" is restricted'),
        (req("team", "In"), "requirements with operator 'In' must have a value defined"),
        (req("team", "NotIn"), "requirements with operator 'NotIn' must have a value defined"),
        (req("cpu", "Gt", "many"), "must have a single positive integer value"),
    ],
)
def test_the_model_rejects_bad_requirements(requirement: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidObjectError) as error:
        overlay("bad", requirement, price="1")
    assert problem in str(error.value)
