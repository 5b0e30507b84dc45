"""CapacityWindow (`nodewright.io/v1alpha1`): capacity on a schedule, a nodewright extension beyond Karpenter.

"From 08:00 to 18:00 on weekdays keep this static NodePool (or CapacityBuffer) at N": a CapacityWindow points at
the object to scale (`targetRef`) and says when (`schedule`, five-field cron in UTC exactly as NodePool disruption
budgets spell it, with `duration`), how many (`replicas`) and how early (`leadTime`, so the nodes have started by
the time the window opens). It is our own object in our own API group: the NodePools and CapacityBuffers it points
at stay exactly as Karpenter reads them; only their `spec.replicas` changes, for the window's time.

Parsing enforces what the CRD schema enforces, plus the rules CEL cannot say (a cron that parses and fires, a
duration longer than zero); `core.capacity_window` checks what needs more than the object (a schedule its lead
time can shift exactly, another window on the same target).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from core import labels
from core.api.meta import ObjectMeta, StrictKubeModel
from core.api.nodepool import (
    ConditionedStatus,
    Duration,
    Problem,
    duration_timedelta,
    parse_manifest,
    raise_problems,
)
from core.cron import CronError, Schedule

API_VERSION = f"{labels.NODEWRIGHT_DOMAIN}/v1alpha1"

DEFAULT_LEAD_TIME = "5m"
"""How long before the window opens its replicas are raised, unless the window says: an AKS node takes one to three
minutes from the VM create to a Ready Node, and pods then need their images; five minutes has them running when the
window opens. Shorten it for pools that start faster, lengthen it for large images or GPU drivers."""


class TargetKind(StrEnum):
    NODEPOOL = "NodePool"
    CAPACITY_BUFFER = "CapacityBuffer"


TARGET_API_VERSIONS = {
    TargetKind.NODEPOOL: "karpenter.sh/v1",
    TargetKind.CAPACITY_BUFFER: "autoscaling.x-k8s.io/v1beta1",
}
"""The version of each kind a window scales; its group is the one `targetRef.apiGroup` must name."""


def target_group(kind: TargetKind) -> str:
    return TARGET_API_VERSIONS[kind].partition("/")[0]


class CapacityWindowConditionType(StrEnum):
    READY = "Ready"
    VALIDATION_SUCCEEDED = "ValidationSucceeded"


class TargetReference(StrictKubeModel):
    """The object whose `spec.replicas` the window sets: a static NodePool (cluster-scoped) or a CapacityBuffer
    (namespaced)."""

    api_group: str
    kind: TargetKind
    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = Field(default=None, min_length=1, max_length=63)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if self.api_group != target_group(self.kind):
            problems.append(
                (
                    ("apiGroup",),
                    f'a {self.kind} is in group "{target_group(self.kind)}", not "{self.api_group}"',
                )
            )
        if self.kind is TargetKind.NODEPOOL and self.namespace is not None:
            problems.append((("namespace",), "a NodePool is cluster-scoped: leave namespace out"))
        if self.kind is TargetKind.CAPACITY_BUFFER and self.namespace is None:
            problems.append((("namespace",), "a CapacityBuffer is namespaced: give its namespace"))
        raise_problems("targetRef", problems)
        return self

    @property
    def api_version(self) -> str:
        return TARGET_API_VERSIONS[self.kind]

    def describe(self) -> str:
        """`NodePool fixed`, `CapacityBuffer team-a/spare`."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


class CapacityWindowSpec(StrictKubeModel):
    target_ref: TargetReference
    schedule: str
    """When each window opens: five-field cron in UTC, as NodePool disruption budgets write it."""
    duration: Duration
    """How long each window stays open (hours, minutes and seconds: "10h", "30m", "45s")."""
    replicas: int = Field(ge=0)
    """The target's `spec.replicas` while the window is open (never lowered: a target already above keeps its)."""
    lead_time: Duration = DEFAULT_LEAD_TIME
    """How long before the window opens the replicas are raised (`DEFAULT_LEAD_TIME`)."""

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        try:
            if not Schedule.parse(self.schedule).fires():
                problems.append((("schedule",), f'"{self.schedule}" never fires: no such date exists'))
        except CronError as error:
            problems.append((("schedule",), str(error)))
        if duration_timedelta(self.duration) == timedelta(0):
            problems.append((("duration",), "must be longer than 0s"))
        raise_problems("spec", problems)
        return self

    def cron(self) -> Schedule:
        return Schedule.parse(self.schedule)

    @property
    def window(self) -> timedelta:
        return duration_timedelta(self.duration) or timedelta(0)

    @property
    def lead(self) -> timedelta:
        return duration_timedelta(self.lead_time) or timedelta(0)


class CapacityWindowStatus(ConditionedStatus):
    schedule_id: str | None = Field(default=None, alias="scheduleID")
    """The Temporal Schedule that raises and restores the target (find, pause or trigger it in the Temporal UI)."""
    active: bool | None = None
    """Whether a window is open now."""
    next_window_opens: datetime | None = None
    """When the open window opened, or the next one opens."""
    next_window_closes: datetime | None = None
    replaced_replicas: int | None = None
    """The target's replicas the open window replaced, which it restores when it closes."""
    restored_replicas: int | None = None
    """The replicas the last window restored when it closed."""


class CapacityWindow(StrictKubeModel):
    """A `nodewright.io/v1alpha1` CapacityWindow (cluster-scoped); build one with `CapacityWindow.parse(manifest)`."""

    api_version: Literal["nodewright.io/v1alpha1"] = "nodewright.io/v1alpha1"
    kind: Literal["CapacityWindow"] = "CapacityWindow"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: CapacityWindowSpec
    status: CapacityWindowStatus = Field(default_factory=CapacityWindowStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest; raises `InvalidObjectError` naming every broken rule with its field path."""
        return parse_manifest(cls, "CapacityWindow", raw)

    @property
    def name(self) -> str:
        return self.metadata.name
