"""Whether a disruption command still holds after its validation wait, and why not when it does not.

Karpenter re-checks emptiness and consolidation commands after `commandValidationDelay`: emptiness keeps the
candidates that are still empty and still allowed, consolidation needs the same candidates, the same decision and
a replacement no dearer. Here the re-check compares the command with a fresh plan. When the command is abandoned,
the reason is the one that applies to it: a fresh command that takes the node, a reason the same method gives
for keeping it or one that keeps it from every method (do-not-disrupt, a PDB, a nomination), or, for emptiness,
that the node is no longer empty. A reason only another method gave (single-node consolidation's
"SpotToSpotConsolidation is disabled" for a node emptiness chose) is not one.
"""

from __future__ import annotations

from core.disruption.commands import BlockReason, Decision, Method
from core.messages import DisruptionCommand, DisruptionPassRecord, KeptReason

CONSOLIDATION = frozenset({Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION, Method.REPACK})
ANY_METHOD = frozenset(
    {
        BlockReason.NOT_MANAGED,
        BlockReason.NODEPOOL_NOT_FOUND,
        BlockReason.NOT_INITIALIZED,
        BlockReason.DELETING,
        BlockReason.DISRUPTING,
        BlockReason.EXPIRING,
        BlockReason.NOMINATED,
        BlockReason.DO_NOT_DISRUPT_NODE,
        BlockReason.DO_NOT_DISRUPT_POD,
        BlockReason.POD_DISRUPTION_BUDGET,
    }
)
"""Reasons that keep a node from every voluntary disruption, whichever method reported them (a method checks
the pods only of the nodes it considers: a do-not-disrupt pod that landed on an empty node is reported by
consolidation, and it is why emptiness gave up too). The others (budgets per disruption reason, prices,
spot-to-spot, the consolidation policy) hold for the method that gave them only."""


def validate(command: DisruptionCommand, fresh: DisruptionPassRecord) -> tuple[DisruptionCommand | None, str]:
    """The command as it may still execute after the validation wait, or None and why not.

    Emptiness keeps the candidates a fresh plan still finds empty; consolidation needs the same candidates
    chosen by the same method with the same decision, and a replacement no dearer than planned."""
    nodes = [candidate.node for candidate in command.candidates]
    if command.method == Method.EMPTINESS:
        still = {
            candidate.node
            for planned in fresh.commands
            if planned.method == Method.EMPTINESS
            for candidate in planned.candidates
        }
        kept = [candidate for candidate in command.candidates if candidate.node in still]
        if kept:
            return command.model_copy(update={"candidates": kept}), ""
        return None, abandonment_reason(command, fresh)
    for planned in fresh.commands:
        if {c.node for c in planned.candidates} != set(nodes):
            continue
        if (planned.method, planned.decision) != (command.method, command.decision):
            return None, f"a fresh plan would now {planned.decision} them by {planned.method}"
        if command.decision == Decision.REPLACE and command.method == Method.REPACK:
            # A repack launches several replacements: together they must be no dearer.
            planned_total = sum(r.price_micros or 0 for r in command.replacements)
            fresh_total = sum(r.price_micros or 0 for r in planned.replacements)
            if fresh_total > planned_total:
                return None, "the replacements would now cost more than planned"
        elif command.decision == Decision.REPLACE:
            before = command.replacements[0].price_micros if command.replacements else None
            after = planned.replacements[0].price_micros if planned.replacements else None
            if before is not None and after is not None and after > before:
                return None, "the replacement would now cost more than planned"
        return command, ""
    return None, abandonment_reason(command, fresh)


def abandonment_reason(command: DisruptionCommand, fresh: DisruptionPassRecord) -> str:
    """Why a fresh plan does not take the command's candidates as the command did, for the first candidate
    whose fate explains it: another command takes it, or the command's method (or every method) keeps it."""
    taken = {
        candidate.node: planned
        for planned in fresh.commands
        for candidate in planned.candidates
        if planned.method != command.method
    }
    kept = {node.node: node.reasons for node in fresh.kept}
    for candidate in command.candidates:
        node = candidate.node
        if node in taken:
            planned = taken[node]
            return f"a fresh plan would now {planned.decision} {node} by {planned.method}"
        reason = next((r for r in kept.get(node, ()) if _applies(r, command.method)), None)
        if reason is not None:
            return f"{node}: {reason.message}"
    if command.method == Method.EMPTINESS:
        present = [c.node for c in command.candidates if c.node in kept]
        if present:
            return f"{present[0]}: the node is no longer empty"
        return "the candidates are gone"
    return "a fresh plan no longer chooses these candidates together"


def _applies(reason: KeptReason, method: str) -> bool:
    """A reason given for every method or of a kind that holds for every method, by the command's method, or
    (consolidation) by either consolidation."""
    if reason.method is None or reason.method == method or reason.code in ANY_METHOD:
        return True
    return method in CONSOLIDATION and reason.method in CONSOLIDATION
