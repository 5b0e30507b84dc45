"""What a CapacityWindow's Temporal Schedule, its workflow (`workflows/capacity_window.py`) and its two activities
say to each other: one typed object per input and result."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

RAISE_WINDOW_REPLICAS = "raise_window_replicas"
"""The activity that raises the target's `spec.replicas` to the window's, remembering what it replaced."""
RESTORE_WINDOW_REPLICAS = "restore_window_replicas"
"""The activity that puts back what the raise replaced, unless someone changed the replicas meanwhile."""


class Target(BaseModel):
    """The object a window scales, as the Kubernetes API addresses it."""

    kind: str
    api_version: str
    name: str
    namespace: str | None = None

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


class CapacityWindowRun(BaseModel):
    """The Schedule's action: one window, raised `lead_seconds` before it opens and restored when it closes."""

    cluster: str
    window: str
    target: Target
    replicas: int
    lead_seconds: float
    duration_seconds: float
    opens_at: datetime | None = None
    """When the window opens; None (a Schedule's run): the time the Schedule fired plus the lead."""
    activity_timeout_seconds: float = 60.0


class RaiseInput(BaseModel):
    window: str
    target: Target
    replicas: int
    opens: datetime
    closes: datetime


class RaiseResult(BaseModel):
    """What the raise did and why; `changed` False leaves nothing to restore."""

    found: bool = True
    changed: bool = False
    previous: int | None = None
    """The replicas the raise replaced (or found at or above the window's)."""
    applied: int | None = None
    """The replicas the raise set."""
    reason: str = ""


class RestoreInput(BaseModel):
    window: str
    target: Target
    previous: int
    applied: int


class RestoreResult(BaseModel):
    restored: bool = False
    current: int | None = None
    """The replicas found when the window closed."""
    reason: str = ""
