"""Status conditions with a root `Ready`, as Karpenter and the AKS provider keep them (awslabs/operatorpkg).

An object declares the conditions its `Ready` depends on. Setting any of them recomputes `Ready`: True (reason
`Ready`) once every dependent is True at the object's generation; otherwise False (`UnhealthyDependents`) when a
dependent is False at the current generation, else Unknown (`ReconcilingDependents`), with a message listing the
unhealthy dependents newest first ("SubnetsReady=False"). A dependent never set starts Unknown
(`AwaitingReconciliation`). Each condition carries the generation it was computed for, and its
lastTransitionTime moves only when its status changes, so computing the same conditions again changes nothing
and a writer can skip the write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.api.nodepool import ConditionStatus, StatusCondition

READY = "Ready"
AWAITING_RECONCILIATION = ("AwaitingReconciliation", "object is awaiting reconciliation")
UNHEALTHY_DEPENDENTS = "UnhealthyDependents"
RECONCILING_DEPENDENTS = "ReconcilingDependents"


class ConditionSet:
    """The conditions of one object, changed in place; `conditions` is the list to write back."""

    def __init__(
        self,
        conditions: Iterable[StatusCondition],
        dependents: Sequence[str],
        generation: int | None,
        created: datetime | None,
        now: datetime,
        root: str = READY,
    ) -> None:
        self.conditions = [condition.model_copy() for condition in conditions]
        self.dependents = [dependent for dependent in dict.fromkeys(dependents) if dependent != root]
        self.root = root
        self.generation = generation
        self.created = created
        self.now = now.replace(microsecond=0)
        for condition_type in (root, *self.dependents):
            if self.get(condition_type) is None:
                self.set_unknown(condition_type, *AWAITING_RECONCILIATION)

    def get(self, condition_type: str) -> StatusCondition | None:
        """The condition of this type, or None."""
        return next((c for c in self.conditions if c.type == condition_type), None)

    def set_true(self, condition_type: str, reason: str | None = None, message: str = "") -> bool:
        """Set it True; the reason defaults to the condition type, as operatorpkg's `SetTrue`."""
        return self.set(condition_type, ConditionStatus.TRUE, reason or condition_type, message)

    def set_false(self, condition_type: str, reason: str, message: str) -> bool:
        """Set it False with why; the root turns False too."""
        return self.set(condition_type, ConditionStatus.FALSE, reason, message)

    def set_unknown(self, condition_type: str, reason: str, message: str) -> bool:
        """Set it Unknown (not yet known); the root turns Unknown unless a dependent is False."""
        return self.set(condition_type, ConditionStatus.UNKNOWN, reason, message)

    def clear(self, condition_type: str) -> bool:
        """Remove a condition that is not the root nor a dependent (one that holds only sometimes, as Karpenter's
        `Drifted`), as operatorpkg's `Clear`; whether it was there."""
        if condition_type == self.root or condition_type in self.dependents:
            raise ValueError(
                f"{condition_type} is {self.root} or one of its dependents: it cannot be cleared"
            )
        old = self.get(condition_type)
        if old is None:
            return False
        self.conditions.remove(old)
        return True

    def set(self, condition_type: str, status: ConditionStatus, reason: str, message: str) -> bool:
        """Set one condition (and recompute the root); whether anything changed."""
        new = StatusCondition(
            type=condition_type,
            status=status,
            reason=reason,
            message=message,
            observed_generation=self.generation,
        )
        old = self.get(condition_type)
        if old is not None:
            new.last_transition_time = old.last_transition_time if old.status == status else self.now
            if new == old:
                return False
            self.conditions.remove(old)
        elif condition_type == self.root or condition_type in self.dependents:
            # A dependent never set was, in effect, Unknown since the object was created.
            new.last_transition_time = self.created or self.now
        else:
            new.last_transition_time = self.now
        self.conditions.append(new)
        self.conditions.sort(key=self._order)
        if condition_type != self.root:
            self._recompute_root()
        return True

    def _order(self, condition: StatusCondition) -> tuple[bool, datetime]:
        return (condition.type == self.root, condition.last_transition_time or self.now)

    def _recompute_root(self) -> None:
        unhealthy = [
            c
            for c in self.conditions
            if c.type in self.dependents
            and (c.status is not ConditionStatus.TRUE or c.observed_generation != self.generation)
        ]
        if not unhealthy:
            self.set_true(self.root)
            return
        unhealthy.sort(key=lambda c: c.last_transition_time or self.now, reverse=True)
        failed = any(
            c.status is ConditionStatus.FALSE and c.observed_generation == self.generation for c in unhealthy
        )
        self.set(
            self.root,
            ConditionStatus.FALSE if failed else ConditionStatus.UNKNOWN,
            UNHEALTHY_DEPENDENTS if failed else RECONCILING_DEPENDENTS,
            ", ".join(f"{c.type}={c.status}" for c in unhealthy),
        )


def conditions_json(conditions: Iterable[StatusCondition]) -> list[dict[str, object]]:
    """Conditions as the API server stores them (camelCase, RFC 3339 times, unset fields left out)."""
    return [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions]


def readable_conditions(status: Mapping[str, Any]) -> list[StatusCondition]:
    """The conditions of a status as read from the API server; one that does not parse is dropped (the writer
    rewrites it)."""
    found = []
    for raw in status.get("conditions") or []:
        try:
            found.append(StatusCondition.model_validate(raw))
        except ValueError:
            continue
    return found
