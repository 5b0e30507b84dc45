"""Status conditions kept the way Karpenter keeps them (its operatorpkg condition sets).

A Karpenter object has a root condition (Ready) and the conditions it depends on (a NodeClaim's Launched,
Registered and Initialized). Every write follows the same rules, so `kubectl get -o yaml` reads the same as
under Karpenter:

* the root and its dependents always exist: missing ones start Unknown (`AwaitingReconciliation`), dated
  from the object's creation;
* a condition keeps its lastTransitionTime while its status stays the same, and carries the object's
  generation as its observedGeneration;
* after any dependent changes, the root is recomputed: True when every dependent is True (at the current
  generation), else False when one is False, else Unknown, naming the unhealthy ones ("Registered=Unknown");
* other conditions (Drifted, Consolidatable, ...) can be cleared, which removes them;
* conditions are listed by lastTransitionTime, the root last.

Times are whole seconds, as Kubernetes' metav1.Time writes them. Nothing here reads the clock: pass `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from core.api.nodepool import ConditionedStatus, ConditionStatus, StatusCondition

AWAITING_RECONCILIATION = "AwaitingReconciliation"
AWAITING_RECONCILIATION_MESSAGE = "object is awaiting reconciliation"
RECONCILING_DEPENDENTS = "ReconcilingDependents"
UNHEALTHY_DEPENDENTS = "UnhealthyDependents"


def whole_seconds(moment: datetime) -> datetime:
    """A time as Kubernetes stores it (metav1.Time has no fraction of a second)."""
    return moment.replace(microsecond=0)


def _moment(condition: StatusCondition) -> float:
    moment = condition.last_transition_time
    if moment is None:
        return float("-inf")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True, slots=True)
class ConditionSet:
    """The root condition of an object and the conditions it depends on."""

    root: str
    dependents: tuple[str, ...]

    def is_dependent(self, condition_type: str) -> bool:
        """The root and its dependents: they always exist and cannot be cleared."""
        return condition_type == self.root or condition_type in self.dependents

    def initialize(
        self, status: ConditionedStatus, created: datetime | None, generation: int | None, now: datetime
    ) -> bool:
        """Add the root and any missing dependent as Unknown (`AwaitingReconciliation`); whether any was."""
        changed = False
        for condition_type in (self.root, *self.dependents):
            if status.condition(condition_type) is None:
                changed |= self._set(
                    status,
                    StatusCondition(
                        type=condition_type,
                        status=ConditionStatus.UNKNOWN,
                        reason=AWAITING_RECONCILIATION,
                        message=AWAITING_RECONCILIATION_MESSAGE,
                    ),
                    created,
                    generation,
                    now,
                )
        return changed

    def set(
        self,
        status: ConditionedStatus,
        condition_type: str,
        value: ConditionStatus | str,
        reason: str,
        message: str,
        created: datetime | None,
        generation: int | None,
        now: datetime,
        deleting: bool = False,
    ) -> bool:
        """Set one condition (the root and dependents first made to exist, the root then recomputed);
        whether anything changed. A True condition's reason defaults to its type, as Karpenter's are. On an
        object being deleted (whose deletion bumped its generation) every condition is taken to be current."""
        changed = False
        if deleting:
            for current in status.conditions:
                if current.observed_generation != generation:
                    current.observed_generation = generation
                    changed = True
        changed |= self.initialize(status, created, generation, now)
        value = ConditionStatus(value)
        condition = StatusCondition(
            type=condition_type,
            status=value,
            reason=reason or (condition_type if value is ConditionStatus.TRUE else ""),
            message=message,
        )
        return self._set(status, condition, created, generation, now) or changed

    def clear(self, status: ConditionedStatus, condition_type: str) -> bool:
        """Remove a condition that is not the root or a dependent; whether it was there. The rest are then
        listed by type, as operatorpkg leaves them."""
        if self.is_dependent(condition_type):
            raise ValueError(
                f"{condition_type} is {self.root} or one of its dependents: it cannot be cleared"
            )
        if status.condition(condition_type) is None:
            return False
        status.conditions = sorted(
            (condition for condition in status.conditions if condition.type != condition_type),
            key=lambda condition: condition.type,
        )
        return True

    def _set(
        self,
        status: ConditionedStatus,
        condition: StatusCondition,
        created: datetime | None,
        generation: int | None,
        now: datetime,
    ) -> bool:
        now = whole_seconds(now)
        condition.observed_generation = generation
        previous = status.condition(condition.type)
        if previous is not None:
            same = previous.status == condition.status
            condition.last_transition_time = previous.last_transition_time if same else now
            if condition == previous:
                return False
        elif self.is_dependent(condition.type) and created is not None:
            condition.last_transition_time = whole_seconds(created)
        else:
            condition.last_transition_time = now
        others = [c for c in status.conditions if c.type != condition.type]
        status.conditions = self._ordered([*others, condition])
        if condition.type != self.root:
            self._recompute_root(status, created, generation, now)
        return True

    def _ordered(self, conditions: list[StatusCondition]) -> list[StatusCondition]:
        return sorted(conditions, key=lambda condition: (condition.type == self.root, _moment(condition)))

    def _recompute_root(
        self, status: ConditionedStatus, created: datetime | None, generation: int | None, now: datetime
    ) -> None:
        unhealthy = [
            condition
            for condition in status.conditions
            if condition.type in self.dependents
            and (condition.status is not ConditionStatus.TRUE or condition.observed_generation != generation)
        ]
        if not unhealthy:
            root = StatusCondition(type=self.root, status=ConditionStatus.TRUE, reason=self.root)
            self._set(status, root, created, generation, now)
            return
        unhealthy.sort(key=_moment, reverse=True)
        failed = any(
            c.status is ConditionStatus.FALSE and c.observed_generation == generation for c in unhealthy
        )
        root = StatusCondition(
            type=self.root,
            status=ConditionStatus.FALSE if failed else ConditionStatus.UNKNOWN,
            reason=UNHEALTHY_DEPENDENTS if failed else RECONCILING_DEPENDENTS,
            message=", ".join(f"{c.type}={c.status.value}" for c in unhealthy),
        )
        self._set(status, root, created, generation, now)
