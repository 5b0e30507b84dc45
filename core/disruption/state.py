"""A disruption plan while it is being built: the commands so far and what they changed.

Each command is what one of Karpenter's disruption passes would start. Once started, its candidates count
against their NodePools' budgets, their pods' evictions against their PDBs, the nodes receiving their pods
are nominated (Karpenter will not disrupt a node it just planned pods onto), and the simulation keeps the
pods where the command put them, so that the next command sees the cluster the previous one leaves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.api.nodepool import DisruptionReason
from core.disruption.budgets import Budgets
from core.disruption.candidates import Candidate, NodeReport, pod_blocker
from core.disruption.commands import (
    Blocked,
    BlockReason,
    Command,
    Decision,
    Method,
    PodMove,
    Reason,
    Repacked,
)
from core.disruption.options import DisruptionOptions
from core.disruption.pdb import PdbLimits
from core.disruption.replacements import Catalog, Priced
from core.disruption.simulation import Outcome, Sandbox


class PlanState:
    """The commands chosen so far and the cluster as they leave it."""

    def __init__(
        self,
        report: NodeReport,
        sandbox: Sandbox,
        budgets: Budgets,
        pdbs: PdbLimits,
        catalogs: Mapping[str, Catalog],
        options: DisruptionOptions,
        staying: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """`staying` holds, per candidate, the pods that stay on it until its terminationGracePeriod ends
        (see `staying_pods`): trials do not move them, and commands say so."""
        self.report = report
        self.sandbox = sandbox
        self.budgets = budgets
        self.pdbs = pdbs
        self.catalogs = catalogs
        self.options = options
        self.staying = staying or {}
        self.commands: list[Command] = []
        self._reasons: dict[str, list[Reason]] = {}
        self._taken: set[str] = set()
        self._launched = 0

    def candidates(self) -> list[Candidate]:
        """The candidates a method may still take, in the report's order (see `available`)."""
        return [candidate for candidate in self.report.candidates if self.available(candidate)]

    def available(self, candidate: Candidate) -> bool:
        """Whether a method may still take the candidate: no command took it, no command moves pods
        onto it (it is nominated, and kept with that reason), and its NodePool was asked for."""
        if candidate.name in self._taken:
            return False
        if candidate.name in self.sandbox.received:
            self.keep(
                candidate, Reason(BlockReason.NOMINATED, "an earlier command moves pods onto this node")
            )
            return False
        if self.options.nodepools is not None and candidate.nodepool.name not in self.options.nodepools:
            self.keep(
                candidate, Reason(BlockReason.NOT_SELECTED, "its NodePool is not among those asked for")
            )
            return False
        return True

    def keep(self, candidate: Candidate, reason: Reason, method: Method | None = None) -> None:
        """Record why the candidate stays (a reason given twice is kept once)."""
        reasons = self._reasons.setdefault(candidate.name, [])
        stamped = Reason(reason.code, reason.message, method if method is not None else reason.method)
        if all((r.code, r.message) != (stamped.code, stamped.message) for r in reasons):
            reasons.append(stamped)

    def pod_blocker(self, candidate: Candidate, eventual: bool = False) -> Reason | None:
        """Why the candidate's pods keep it now, given the evictions planned so far."""
        return pod_blocker(candidate, self.pdbs, eventual)

    def with_staying(self, candidate: Candidate, detail: str) -> str:
        """The command's detail for the candidate, naming the pods that stay until its grace period ends."""
        staying = self.staying.get(candidate.name)
        if not staying:
            return detail
        grace = candidate.nodeclaim.spec.termination_grace_period
        return (
            f"{detail}; until its terminationGracePeriod ({grace}) ends, {len(staying)} pods stay: "
            + "; ".join(staying[key] for key in sorted(staying))
        )

    def budget_blocker(
        self, candidate: Candidate, reason: DisruptionReason, chosen: int = 0
    ) -> Reason | None:
        """Why the candidate's NodePool may not disrupt one more node for `reason` (besides `chosen`)."""
        pool = candidate.nodepool.name
        if self.budgets.permits(pool, reason, chosen):
            return None
        return Reason(BlockReason.BUDGET, self.budgets.explain(pool, reason, chosen))

    def execute(
        self,
        method: Method,
        reason: str,
        candidates: Sequence[Candidate],
        outcome: Outcome | None,
        replacements: Sequence[Priced],
        savings_micros: int,
        detail: Mapping[str, str] | None = None,
        repacked: Repacked | None = None,
    ) -> Command:
        """Start a command: its trial (or, for nodes with nothing to move, a trivial one) is kept, its
        candidates taken from their budgets, their pods' evictions counted against PDBs."""
        if outcome is None:
            outcome = self.sandbox.simulate([candidate.name for candidate in candidates])
        names = [self._next_name() for _ in replacements]
        self.sandbox.commit(names)
        for candidate in candidates:
            self._taken.add(candidate.name)
            self._reasons.pop(candidate.name, None)
            self.budgets.take(candidate.nodepool.name)
            self.pdbs.evict(candidate.pods)
        moves = tuple(
            PodMove(
                placement.pod,
                placement.source,
                names[placement.nodeclaim] if placement.nodeclaim is not None else placement.destination,
                placement.problem,
            )
            for placement in outcome.placements
        )
        command = Command(
            method=method,
            reason=reason,
            decision=Decision.REPLACE if replacements else Decision.DELETE,
            candidates=tuple(c.summary((detail or {}).get(c.name)) for c in candidates),
            replacements=tuple(
                priced.replacement(name) for priced, name in zip(replacements, names, strict=True)
            ),
            savings_micros=savings_micros,
            pods_moved=moves,
            repacked=repacked,
        )
        self.commands.append(command)
        return command

    def settle(self, nodes: Sequence[str]) -> None:
        """Place the pods of nodes already leaving before planning anything: they take room first, and
        the nodes they land on are nominated, as Karpenter's provisioner would make them."""
        movable = [node for node in nodes if self.sandbox.can_try(node)]
        if movable:
            outcome = self.sandbox.simulate(movable)
            self.sandbox.commit([f"provisioned-{index}" for index in range(len(outcome.nodeclaims))])

    def _next_name(self) -> str:
        self._launched += 1
        return f"replacement-{self._launched}"

    def blocked(self) -> list[Blocked]:
        """Every node no command took, with its reasons, by node name."""
        unasked = (Reason(BlockReason.NOT_SELECTED, "no method that ran could disrupt it"),)
        kept = [
            Blocked(
                c.name, c.nodeclaim.name, c.nodepool.name, tuple(self._reasons.get(c.name, ())) or unasked
            )
            for c in self.report.candidates
            if c.name not in self._taken
        ]
        return sorted([*self.report.rejected, *kept], key=lambda blocked: blocked.node)
