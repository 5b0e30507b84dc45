"""Karpenter's event recorder rules: repeats within the window are dropped, per reason and object."""

from __future__ import annotations

from datetime import timedelta

from core.events import DEFAULT_DEDUPE_TIMEOUT, Deduper, dedupe_key, dedupe_rule


def test_a_repeat_is_dropped_until_its_window_has_passed() -> None:
    deduper = Deduper()
    key = dedupe_key("Node", "uid-1", "FailedDraining", "Failed to drain node, x")
    assert deduper.admit(key, 0.0, DEFAULT_DEDUPE_TIMEOUT)
    assert not deduper.admit(key, 119.9, DEFAULT_DEDUPE_TIMEOUT)
    assert deduper.admit(key, 120.0, DEFAULT_DEDUPE_TIMEOUT)
    assert not deduper.admit(key, 200.0, DEFAULT_DEDUPE_TIMEOUT)  # the window restarts with the one published


def test_the_same_reason_on_another_object_or_another_reason_is_not_a_repeat() -> None:
    deduper = Deduper()
    assert deduper.admit(dedupe_key("Pod", "uid-1", "FailedScheduling", "a"), 0, timedelta(minutes=5))
    assert deduper.admit(dedupe_key("Pod", "uid-2", "FailedScheduling", "a"), 0, timedelta(minutes=5))
    assert deduper.admit(dedupe_key("Pod", "uid-1", "Nominated", "a"), 0, timedelta(minutes=2))
    # FailedScheduling is the same event whatever the message (Karpenter dedupes on the pod's UID alone).
    assert not deduper.admit(dedupe_key("Pod", "uid-1", "FailedScheduling", "b"), 1, timedelta(minutes=5))
    # The reason is compared case-insensitively, as Karpenter's key lower-cases it.
    assert dedupe_key("Pod", "u", "failedscheduling", "") == dedupe_key("Pod", "u", "FailedScheduling", "")


def test_karpenters_windows_and_which_reasons_include_their_detail() -> None:
    assert dedupe_rule("Pod", "FailedScheduling").timeout == timedelta(minutes=5)
    assert dedupe_rule("Node", "Unconsolidatable").timeout == timedelta(minutes=15)
    assert dedupe_rule("NodeClaim", "NodeRepairBlocked").timeout == timedelta(minutes=15)
    assert dedupe_rule("NodePool", "DisruptionBlocked").timeout == timedelta(minutes=1)
    assert dedupe_rule("Node", "DisruptionBlocked") == dedupe_rule("Pod", "Nominated")
    assert dedupe_rule("Pod", "Nominated").timeout == timedelta(minutes=2)
    launching = "DisruptionLaunching"
    assert dedupe_key("NodeClaim", "u", launching, "Launching NodeClaim: Drifted") != dedupe_key(
        "NodeClaim", "u", launching, "Launching NodeClaim: Underutilized"
    )
    assert dedupe_key("Node", "u", "DisruptionBlocked", "a") == dedupe_key(
        "Node", "u", "DisruptionBlocked", "b"
    )
    assert dedupe_key("NodePool", "u", "DisruptionBlocked", "a") != dedupe_key(
        "NodePool", "u", "DisruptionBlocked", "b"
    )


def test_the_oldest_are_forgotten_beyond_capacity() -> None:
    deduper = Deduper(capacity=2)
    for uid in ("a", "b", "c"):
        assert deduper.admit(("r", uid), 0, DEFAULT_DEDUPE_TIMEOUT)
    assert deduper.admit(("r", "a"), 1, DEFAULT_DEDUPE_TIMEOUT)  # forgotten: published again
    assert not deduper.admit(("r", "c"), 1, DEFAULT_DEDUPE_TIMEOUT)
