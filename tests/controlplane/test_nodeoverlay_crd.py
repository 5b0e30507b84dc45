"""The generated NodeOverlay CRD on a real API server: it accepts what the model accepts and rejects, naming the
field and with Karpenter's message, what Karpenter's CRD rejects (dry runs: nothing is stored)."""

from __future__ import annotations

from typing import Any

import pytest

from core.api.meta import InvalidObjectError
from core.api.nodeoverlay import NodeOverlay
from tests.controlplane.test_crd_validation import dry_run
from workers.controlplane.run import ControlPlane

FAMILY = {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}


def overlay(*requirements: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "overlay"},
        "spec": {"requirements": list(requirements or [FAMILY]), **spec},
    }


def model_accepts(manifest: dict[str, Any]) -> bool:
    try:
        NodeOverlay.parse(manifest)
    except InvalidObjectError:
        return False
    return True


VALID = {
    "percentage": overlay(priceAdjustment="-10%"),
    "amount": overlay(priceAdjustment="+0.1"),
    "all off": overlay(priceAdjustment="-100%"),
    "price": overlay(price="0.25", weight=10),
    "capacity": overlay(capacity={"example.com/gpu": "2"}, weight=10000),
    "nodepool and capacity type": overlay(
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
        {"key": "karpenter.azure.com/sku-cpu", "operator": "Gt", "values": ["4"]},
        price="1",
    ),
}

INVALID = {
    "price and adjustment": (
        overlay(price="1", priceAdjustment="+1"),
        "spec",
        "cannot set both 'price' and 'priceAdjustment'",
    ),
    "adjustment without sign": (overlay(priceAdjustment="10%"), "spec.priceAdjustment", "should match"),
    "more than 100% off": (overlay(priceAdjustment="-101%"), "spec.priceAdjustment", "should match"),
    "negative price": (overlay(price="-1"), "spec.price", "should match"),
    "cpu capacity": (overlay(capacity={"cpu": "1"}), "spec.capacity", "invalid resource restricted"),
    "weight 0": (overlay(weight=0), "spec.weight", "should be greater than or equal to 1"),
    "karpenter.sh key": (
        overlay({"key": "karpenter.sh/custom", "operator": "Exists"}),
        "spec.requirements[0].key",
        'label domain "karpenter.sh" is restricted',
    ),
    "hostname key": (
        overlay({"key": "kubernetes.io/hostname", "operator": "Exists"}),
        "spec.requirements[0].key",
        'label "kubernetes.io/hostname" is restricted',
    ),
    "In without values": (
        overlay({"key": "team", "operator": "In"}),
        "spec.requirements",
        "requirements with operator 'In' must have a value defined",
    ),
    "Gt with a word": (
        overlay({"key": "team", "operator": "Gt", "values": ["many"]}),
        "spec.requirements",
        "must have a single positive integer value",
    ),
}


@pytest.mark.parametrize("manifest", VALID.values(), ids=VALID.keys())
def test_the_api_server_accepts_a_valid_overlay(
    control_plane: ControlPlane, manifest: dict[str, Any]
) -> None:
    assert model_accepts(manifest)
    assert dry_run(control_plane, manifest) is None


@pytest.mark.parametrize(("manifest", "field", "message"), INVALID.values(), ids=INVALID.keys())
def test_the_api_server_rejects_an_invalid_overlay_naming_the_field(
    control_plane: ControlPlane, manifest: dict[str, Any], field: str, message: str
) -> None:
    assert not model_accepts(manifest)
    error = dry_run(control_plane, manifest)
    assert error is not None, "the API server accepted it"
    assert f"{field}: " in error and message in error, error
