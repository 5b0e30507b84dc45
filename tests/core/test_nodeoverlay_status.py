"""The conditions a NodeOverlay gets from its verdict: ValidationSucceeded and its root Ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.api.nodeoverlay import NodeOverlay
from core.instancetypes.overlay import OverlayVerdict
from core.nodeoverlay_status import nodeoverlay_conditions

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def overlay(conditions: list[dict[str, object]] | None = None) -> NodeOverlay:
    return NodeOverlay.parse(
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "o", "generation": 2, "creationTimestamp": "2026-11-26T11:00:00Z"},
            "spec": {"requirements": [{"key": "kubernetes.io/os", "operator": "Exists"}], "price": "1"},
            "status": {"conditions": conditions or []},
        }
    )


def table(conditions: object) -> dict[str, tuple[str, str, str]]:
    assert isinstance(conditions, list)
    return {c.type: (c.status, c.reason, c.message) for c in conditions}


def test_a_valid_overlay_is_ready() -> None:
    conditions = nodeoverlay_conditions(overlay(), OverlayVerdict(True), NOW)
    assert table(conditions) == {
        "ValidationSucceeded": ("True", "ValidationSucceeded", ""),
        "Ready": ("True", "Ready", ""),
    }
    assert conditions is not None and all(c.observed_generation == 2 for c in conditions)


def test_a_conflict_makes_it_not_ready_and_a_repeat_changes_nothing() -> None:
    verdict = OverlayVerdict(False, "Conflict", "conflict with another overlay")
    conditions = nodeoverlay_conditions(overlay(), verdict, NOW)
    assert table(conditions) == {
        "ValidationSucceeded": ("False", "Conflict", "conflict with another overlay"),
        "Ready": ("False", "UnhealthyDependents", "ValidationSucceeded=False"),
    }
    assert conditions is not None
    written = overlay([c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions])
    assert nodeoverlay_conditions(written, verdict, NOW + timedelta(minutes=5)) is None
    healed = nodeoverlay_conditions(written, OverlayVerdict(True), NOW + timedelta(minutes=5))
    assert table(healed)["Ready"] == ("True", "Ready", "")
