"""NodeOverlays in the what-if commands: read when the NodeOverlay feature gate is on, ignored with a warning
when it is off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core import labels
from tests.workers.test_cli import NODEPOOL, ROOT, pod, run, schedule_json, write

SNAPSHOT = ROOT / "deploy" / "snapshots" / "cluster.yaml"


def overlay(name: str, requirement: dict[str, Any], **spec: Any) -> str:
    document = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": [requirement], **spec},
    }
    return "\n---\n" + json.dumps(document) + "\n"


def test_an_overlay_that_makes_a_family_cheaper_changes_the_instance_type_only_with_the_gate_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    plain = write(tmp_path, "plain.yaml", NODEPOOL + pod("a", "1", "1Gi"))
    before = schedule_json("-f", plain)["nodeclaims"][0]
    family = before["labels"][labels.SKU_FAMILY]
    # The cheapest option of another family, made cheaper than anything else.
    options = before["instance_type_options"]
    sizes = load_families(options)
    other = next(name for name in options if sizes[name] != family)
    manifests = write(
        tmp_path,
        "in.yaml",
        NODEPOOL
        + pod("a", "1", "1Gi")
        + overlay(
            "cheap-family",
            {"key": labels.SKU_FAMILY, "operator": "In", "values": [sizes[other]]},
            priceAdjustment="-99%",
        ),
    )

    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    assert document["nodeclaims"][0]["instance_type"] == before["instance_type"]
    warning = "NodeOverlay cheap-family: the NodeOverlay feature gate is off (FEATURE_GATES); ignored"
    assert warning in document["warnings"]
    assert warning in err

    monkeypatch.setenv("FEATURE_GATES", "NodeOverlay=true")
    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    claim = document["nodeclaims"][0]
    assert claim["labels"][labels.SKU_FAMILY] == sizes[other]
    assert claim["price_per_hour"] < before["price_per_hour"]
    assert not any("NodeOverlay" in warning for warning in document["warnings"])


def load_families(names: list[str]) -> dict[str, str]:
    from core.instancetypes.catalog import load_shipped_catalog
    from core.scheduling.snapshot import azure_provider

    types = azure_provider(load_shipped_catalog("eastus"))(None)
    return {it.name: it.requirements.get(labels.SKU_FAMILY).any() for it in types if it.name in names}


def savings(*files: str) -> float:
    args = [arg for path in files for arg in ("-f", path)]
    code, out, err = run("plan-disruption", *args, "--now", "2026-11-22T10:00:00Z", "-o", "json")
    assert code == 0, err
    plan: dict[str, Any] = json.loads(out)
    assert plan["commands"], plan
    return float(plan["total_savings_per_hour"])


def test_plan_disruption_savings_follow_the_overlay_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEATURE_GATES", "NodeOverlay=true")
    doubled = write(
        tmp_path,
        "overlay.yaml",
        overlay("double", {"key": "kubernetes.io/os", "operator": "Exists"}, priceAdjustment="+100%"),
    )
    plain = savings(str(SNAPSHOT))
    assert savings(str(SNAPSHOT), doubled) == pytest.approx(2 * plain)
    monkeypatch.setenv("FEATURE_GATES", "NodeOverlay=false")
    assert savings(str(SNAPSHOT), doubled) == pytest.approx(plain)


def test_an_invalid_overlay_is_an_error_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEATURE_GATES", "NodeOverlay=true")
    manifests = write(
        tmp_path,
        "in.yaml",
        NODEPOOL
        + pod("a", "1", "1Gi")
        + overlay("both", {"key": "kubernetes.io/os", "operator": "Exists"}, price="1", priceAdjustment="+1"),
    )
    code, _, err = run("schedule", "-f", manifests)
    assert code == 1
    assert "NodeOverlay both: spec: cannot set both 'price' and 'priceAdjustment'" in err
