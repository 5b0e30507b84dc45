"""Validation after the wait: an abandoned command states the reason that applies to it, never one another
method gave for the same node."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.disruption import command_message, pass_record
from core.disruption.validation import abandonment_reason, validate
from core.messages import (
    DisruptedCandidate,
    DisruptionCommand,
    DisruptionPassRecord,
    KeptNode,
    KeptReason,
)
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE_SPOT,
    NOW,
    bound,
    cluster,
    node_pair,
    nodepool,
    only_command,
    plan,
)


def _command(method: str, decision: str, nodes: list[str]) -> DisruptionCommand:
    return DisruptionCommand(
        method=method,
        reason="Empty" if method == "emptiness" else "Underutilized",
        decision=decision,
        candidates=[DisruptedCandidate(node=n, nodeclaim=f"claim-{n}", nodepool="default") for n in nodes],
    )


def _record(*commands: DisruptionCommand, kept: list[KeptNode] | None = None) -> DisruptionPassRecord:
    return DisruptionPassRecord(at=datetime(2026, 1, 1, tzinfo=UTC), commands=list(commands), kept=kept or [])


def _kept(node: str, *reasons: tuple[str, str, str | None]) -> KeptNode:
    return KeptNode(
        node=node, reasons=[KeptReason(code=code, message=message, method=m) for code, message, m in reasons]
    )


def test_an_empty_spot_node_that_got_a_pod_is_abandoned_as_no_longer_empty() -> None:
    """The demo's case: emptiness chose a new spot node, a pod landed on it during the wait, and the fresh
    plan's single-node consolidation keeps it because spot-to-spot is disabled: that is not why emptiness
    gave up."""
    pool = nodepool()
    spot = node_pair("a", MOST_EXPENSIVE_SPOT)
    command = command_message(only_command(plan(cluster([pool], [spot]))))
    assert command.method == "emptiness"
    fresh = pass_record(plan(cluster([pool], [spot], [bound("a")])), NOW)
    assert any("SpotToSpotConsolidation" in r.message for kept in fresh.kept for r in kept.reasons)
    validated, why = validate(command, fresh)
    assert validated is None
    assert why == "a: the node is no longer empty"


def test_emptiness_gives_the_reason_emptiness_or_every_method_gave() -> None:
    command = _command("emptiness", "delete", ["a"])
    budget = _kept(
        "a",
        ("SpotToSpotDisabled", "SpotToSpotConsolidation is disabled", "single-node-consolidation"),
        ("Budget", "budget for reason Empty is 0", "emptiness"),
    )
    assert validate(command, _record(kept=[budget])) == (None, "a: budget for reason Empty is 0")
    blocked = _kept("a", ("DoNotDisruptPod", "do-not-disrupt pod x/y", None))
    assert validate(command, _record(kept=[blocked])) == (None, "a: do-not-disrupt pod x/y")


def test_a_node_another_method_now_takes_says_so() -> None:
    command = _command("emptiness", "delete", ["a"])
    drift = _command("drift", "replace", ["a"])
    assert validate(command, _record(drift)) == (None, "a fresh plan would now replace a by drift")


def test_emptiness_of_nodes_that_are_gone() -> None:
    assert abandonment_reason(_command("emptiness", "delete", ["a"]), _record()) == "the candidates are gone"


def test_consolidation_takes_either_consolidation_method_reason_but_not_emptiness() -> None:
    command = _command("multi-node-consolidation", "delete", ["a", "b"])
    kept = [
        _kept("a", ("Budget", "budget for reason Empty is 0", "emptiness")),
        _kept("b", ("NotCheaper", "replacement would not be cheaper", "single-node-consolidation")),
    ]
    assert validate(command, _record(kept=kept)) == (None, "b: replacement would not be cheaper")
    only_emptiness = [_kept("a", ("Budget", "budget for reason Empty is 0", "emptiness"))]
    assert validate(command, _record(kept=only_emptiness)) == (
        None,
        "a fresh plan no longer chooses these candidates together",
    )


def test_a_do_not_disrupt_pod_that_landed_on_an_empty_node_is_the_reason_whoever_reported_it() -> None:
    pool = nodepool()
    pair = node_pair("a")
    command = command_message(only_command(plan(cluster([pool], [pair]))))
    arrived = bound("a", "arrives", annotations={"karpenter.sh/do-not-disrupt": "true"})
    fresh = pass_record(plan(cluster([pool], [pair], [arrived])), NOW)
    validated, why = validate(command, fresh)
    assert validated is None
    assert why.startswith("a: ") and "do-not-disrupt" in why and "arrives" in why
