"""Karpenter's event recorder rules: which repeats of an event are dropped, and which events are rate-limited.

Karpenter publishes every event through a recorder that drops an event seen again within a window: the same
reason on the same object (named by its UID), and for a few reasons the same detail too (the disruption
reason of `DisruptionLaunching`, the command of `ConsolidationCandidate`, ...), which here is the message that
carries it. The window is two minutes unless the event says otherwise. `Nominated` events are also
rate-limited across all pods (5 a second, bursts of 10), so a plan that places thousands of pods does not
write thousands of events.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta

DEFAULT_DEDUPE_TIMEOUT = timedelta(minutes=2)
NOMINATION_QPS = 5.0
NOMINATION_BURST = 10
NOMINATED = "Nominated"
FAILED_SCHEDULING = "FailedScheduling"

_TIMEOUTS = {
    FAILED_SCHEDULING: timedelta(minutes=5),
    "Unconsolidatable": timedelta(minutes=15),
    "NodeRepairBlocked": timedelta(minutes=15),
    "NoCompatibleInstanceTypes": timedelta(minutes=1),
}
_NODEPOOL_TIMEOUTS = {"DisruptionBlocked": timedelta(minutes=1)}
"""A NodePool's budgets can change every minute."""
_BY_MESSAGE = frozenset(
    {
        "DisruptionLaunching",
        "DisruptionTerminating",
        "ConsolidationCandidate",
        "ConsolidationRejected",
        "InvalidDoNotDisruptAnnotation",
        "DoNotDisruptUntil",
        "FailedInflightCheck",
        # Karpenter's is one per NodeClaim, which it deletes; a lifecycle here moves on to its next offering,
        # and each offering that fails (and the NodeClaim given up) is worth its own warning.
        "InsufficientCapacityError",
    }
)
"""Reasons whose de-duplication values include a detail that the message carries."""
_NODEPOOL_BY_MESSAGE = frozenset({"DisruptionBlocked"})
"""A NodePool's DisruptionBlocked names the disruption reason a budget blocks, when it blocks one."""


@dataclass(frozen=True, slots=True)
class DedupeRule:
    timeout: timedelta = DEFAULT_DEDUPE_TIMEOUT
    by_message: bool = False


def dedupe_rule(kind: str, reason: str) -> DedupeRule:
    """How long an event of this reason on an object of this kind is not repeated, and whether its message
    is part of what makes it the same event."""
    if kind == "NodePool" and reason in _NODEPOOL_TIMEOUTS:
        return DedupeRule(_NODEPOOL_TIMEOUTS[reason], reason in _NODEPOOL_BY_MESSAGE)
    return DedupeRule(_TIMEOUTS.get(reason, DEFAULT_DEDUPE_TIMEOUT), reason in _BY_MESSAGE)


def dedupe_key(kind: str, identity: str, reason: str, message: str) -> tuple[str, ...]:
    """What makes two events the same for the recorder: the reason (case-insensitive), the object's identity
    (its UID; kind, namespace and name when the UID is unknown) and, for some reasons, the message."""
    key = (reason.lower(), identity)
    return (*key, message) if dedupe_rule(kind, reason).by_message else key


class Deduper:
    """Remembers which events were published and until when a repeat is dropped (at most `capacity` of them,
    the oldest forgotten first). Time is the caller's, in seconds of a monotonic clock."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._until: OrderedDict[tuple[str, ...], float] = OrderedDict()

    def admit(self, key: tuple[str, ...], now: float, timeout: timedelta) -> bool:
        """True (and remembered for `timeout`) unless the same event was admitted less than its timeout ago."""
        until = self._until.get(key)
        if until is not None and now < until:
            return False
        self._until[key] = now + timeout.total_seconds()
        self._until.move_to_end(key)
        while len(self._until) > self.capacity:
            self._until.popitem(last=False)
        return True
