"""The CapacityWindow activities: raise the target's `spec.replicas` when a window is about to open, and put back
what the raise replaced when it closes, unless someone changed the replicas meanwhile.

Both touch only `spec.replicas` of the target, through the generic Kubernetes API with a JSON patch that tests the
value read (`KubernetesCluster.set_replicas`), so any kind with that field works (a static NodePool, a
CapacityBuffer) and a value written by someone else is never overwritten. Each says what it did in an event on
the CapacityWindow (and on the target) and in the window's status: `replacedReplicas` while a window holds the
target, `restoredReplicas` once it closed. The raise records what it replaces before it patches, so a retried
raise finds the value it replaced rather than taking its own for the user's.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Protocol

from temporalio import activity

from activities.kube import kube_event
from core.api.kube import Event
from core.capacity_window_messages import (
    RAISE_WINDOW_REPLICAS,
    RESTORE_WINDOW_REPLICAS,
    RaiseInput,
    RaiseResult,
    RestoreInput,
    RestoreResult,
    Target,
)

logger = logging.getLogger("nodewright.capacitywindow")

KIND = "CapacityWindow"
RAISED = "CapacityWindowRaised"
RESTORED = "CapacityWindowRestored"
LEFT_AS_IS = "CapacityWindowLeftAsIs"
"""Warning: someone changed the replicas while the window held them, so they were not restored."""
TARGET_MISSING = "CapacityWindowTargetMissing"
CHANGE_ATTEMPTS = 5
"""How often a raise reads and patches again when the replicas change between its read and its patch."""


class WindowCluster(Protocol):
    """What these activities need of the Kubernetes API (`KubernetesCluster` has it)."""

    async def get_object(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> dict[str, Any] | None: ...

    async def set_replicas(
        self, kind: str, api_version: str, name: str, namespace: str | None, expected: int, replicas: int
    ) -> bool: ...

    async def patch_status(
        self, kind: str, name: str, status: dict[str, Any], resource_version: str
    ) -> bool: ...

    async def record_event(self, event: Event) -> None: ...


def _replicas(manifest: dict[str, Any] | None) -> int | None:
    value = ((manifest or {}).get("spec") or {}).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CapacityWindowActivities:
    def __init__(self, cluster: WindowCluster) -> None:
        self.cluster = cluster

    @activity.defn(name=RAISE_WINDOW_REPLICAS)
    async def raise_window_replicas(self, request: RaiseInput) -> RaiseResult:
        target = request.target
        window = f"the window {_time(request.opens)} to {_time(request.closes)}"
        if datetime.now(UTC) >= request.closes:
            return RaiseResult(reason=f"{window} had closed when this run started: nothing raised")
        for _ in range(CHANGE_ATTEMPTS):
            manifest = await self._target(target)
            current = _replicas(manifest)
            if manifest is None or current is None:
                why = "is gone" if manifest is None else "has no spec.replicas"
                message = f"{target.describe()} {why}: {window} raises nothing"
                await self._event(request.window, TARGET_MISSING, message, warning=True)
                return RaiseResult(found=False, reason=message)
            resumed = await self._replaced_by_earlier_attempt(request, current)
            if resumed is not None:
                return resumed
            if current >= request.replicas:
                message = (
                    f"{target.describe()} has {current} replicas, at or above the window's {request.replicas}: "
                    f"left as is for {window}"
                )
                await self._event(request.window, RAISED, message)
                return RaiseResult(previous=current, reason=message)
            await self._status(request.window, {"replacedReplicas": current})
            if await self._set(target, current, request.replicas):
                message = (
                    f"raised {target.describe()} from {current} to {request.replicas} replicas for {window}; "
                    f"{current} is restored when it closes"
                )
                await self._event(request.window, RAISED, message, target)
                return RaiseResult(changed=True, previous=current, applied=request.replicas, reason=message)
        raise RuntimeError(f"{target.describe()}: its replicas kept changing while the window raised them")

    async def _replaced_by_earlier_attempt(self, request: RaiseInput, current: int) -> RaiseResult | None:
        """A retried raise whose earlier attempt patched the target: what that attempt replaced, from the status."""
        if activity.info().attempt == 1 or current != request.replicas:
            return None
        window = await self.cluster.get_object(KIND, request.window)
        replaced = ((window or {}).get("status") or {}).get("replacedReplicas")
        if not isinstance(replaced, int):
            return None
        message = f"raised {request.target.describe()} from {replaced} to {request.replicas} replicas (earlier attempt)"
        return RaiseResult(changed=True, previous=replaced, applied=request.replicas, reason=message)

    @activity.defn(name=RESTORE_WINDOW_REPLICAS)
    async def restore_window_replicas(self, request: RestoreInput) -> RestoreResult:
        target = request.target
        manifest = await self._target(target)
        current = _replicas(manifest)
        done: dict[str, Any] = {"replacedReplicas": None}
        if current is None:
            message = f"{target.describe()} is gone or has no spec.replicas: nothing to restore"
            await self._event(request.window, TARGET_MISSING, message, warning=True)
            await self._status(request.window, done)
            return RestoreResult(reason=message)
        if current == request.previous and activity.info().attempt > 1:
            message = f"restored {target.describe()} to {request.previous} replicas (earlier attempt)"
            return RestoreResult(restored=True, current=current, reason=message)
        if current == request.applied and await self._set(target, request.applied, request.previous):
            message = f"the window closed: restored {target.describe()} from {request.applied} to {request.previous} replicas"
            await self._event(request.window, RESTORED, message, target)
            await self._status(request.window, {**done, "restoredReplicas": request.previous})
            return RestoreResult(restored=True, current=current, reason=message)
        if current == request.applied:  # changed between the read and the patch
            current = _replicas(await self._target(target))
        message = (
            f"the window closed, but {target.describe()} has {current} replicas, not the {request.applied} it set: "
            f"someone changed them meanwhile, so they stay (the {request.previous} it replaced is not restored)"
        )
        await self._event(request.window, LEFT_AS_IS, message, target, warning=True)
        await self._status(request.window, done)
        return RestoreResult(current=current, reason=message)

    async def _target(self, target: Target) -> dict[str, Any] | None:
        return await self.cluster.get_object(target.kind, target.name, target.namespace, target.api_version)

    async def _set(self, target: Target, expected: int, replicas: int) -> bool:
        return await self.cluster.set_replicas(
            target.kind, target.api_version, target.name, target.namespace, expected, replicas
        )

    async def _status(self, window: str, status: dict[str, Any]) -> None:
        await self.cluster.patch_status(KIND, window, status, "")

    async def _event(
        self, window: str, reason: str, message: str, target: Target | None = None, warning: bool = False
    ) -> None:
        logger.info("CapacityWindow %s: %s", window, message)
        await self.cluster.record_event(kube_event(KIND, window, reason, message, warning=warning))
        if target is not None:
            await self.cluster.record_event(
                kube_event(
                    target.kind,
                    target.name,
                    reason,
                    f"CapacityWindow {window}: {message}",
                    target.namespace,
                    warning,
                )
            )
