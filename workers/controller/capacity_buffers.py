"""The controller's part in CapacityBuffers: Karpenter's `capacitybuffer` controller, and what wakes the provisioner
for them.

With the CapacityBuffer gate on, the controller's watch also follows CapacityBuffers, PodTemplates, Deployments,
StatefulSets and ReplicaSets. A buffer is reconciled (`activities.capacity_buffer.reconcile_buffer`) when it
changes and when the object it names changes; a buffer ready for provisioning is kept among the provisioner's
wake-ups as `capacitybuffer/<namespace>/<name>`, signalled at once and again every requeue period (Karpenter
triggers a provisioning pass at each reconcile, every 30 s), and signalled again when a real pod binds to a
node, since that pod may have taken the buffer's room. With the gate off, each buffer found at start gets a
warning (log and event naming it) once, and nothing else happens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from activities.capacity_buffer import reconcile_buffer
from activities.kube import kube_event
from core.api.capacitybuffer import KIND, CapacityBuffer
from core.api.meta import InvalidObjectError
from core.capacity_buffer import Target, target_of
from core.cluster import ClusterAPI, EventType, WatchEvent
from core.errors import CloudError

logger = logging.getLogger("nodewright.controller")

GATE_DISABLED = "FeatureGateDisabled"
"""The event reason on a CapacityBuffer while the CapacityBuffer gate is off."""
INVALID = "InvalidCapacityBuffer"
"""The event reason on a CapacityBuffer the API server took but the model refuses."""
WAKE_PREFIX = "capacitybuffer/"
"""What a buffer's wake-up of the provisioner is called among the pending pods it is signalled with."""
TARGET_KINDS = frozenset({"PodTemplate", "Deployment", "StatefulSet", "ReplicaSet"})


def wake_key(buffer_key: str) -> str:
    return WAKE_PREFIX + buffer_key


class CapacityBuffers:
    def __init__(
        self,
        cluster: ClusterAPI,
        enabled: bool,
        wake: Callable[[list[str]], None],
        forget: Callable[[str], None],
    ) -> None:
        self.cluster = cluster
        self.enabled = enabled
        """The CapacityBuffer feature gate."""
        self.wake = wake
        """Asks the provisioner to plan for these wake-up keys (kept and requeued like pending pods)."""
        self.forget = forget
        """Drops a wake-up key: its buffer is gone or not ready."""
        self.buffers: dict[str, CapacityBuffer] = {}
        """Each buffer as last seen, by `namespace/name`."""
        self.ready: set[str] = set()
        self._by_target: dict[Target, set[str]] = {}
        self._bound: set[str] = set()
        """Pods seen bound to a node (a bind wakes the provisioner once)."""

    async def warn_disabled(self) -> None:
        """With the gate off: one warning (log and event) for each CapacityBuffer there is; none when the CRD
        is not installed."""
        if self.enabled:
            return
        try:
            found = await self.cluster.list_objects(KIND)
        except CloudError as error:
            logger.debug("no CapacityBuffers to warn about: %s", error)
            return
        for raw in found:
            metadata = raw.get("metadata") or {}
            name, namespace = str(metadata.get("name")), str(metadata.get("namespace") or "default")
            message = (
                f"CapacityBuffer {namespace}/{name}: the CapacityBuffer feature gate is off (FEATURE_GATES): "
                "the buffer is not acted on"
            )
            logger.warning(message)
            await self.cluster.record_event(
                kube_event(
                    KIND, name, GATE_DISABLED, message, namespace, warning=True, uid=metadata.get("uid")
                )
            )

    async def observe(self, event: WatchEvent) -> None:
        if not self.enabled:
            return
        if event.kind == KIND:
            await self._buffer(event)
        elif event.kind in TARGET_KINDS:
            namespace = (event.object.get("metadata") or {}).get("namespace") or "default"
            for key in sorted(self._by_target.get((event.kind, namespace, event.name), ())):
                buffer = self.buffers.get(key)
                if buffer is not None:
                    await self._reconcile(buffer)
        elif event.kind == "Pod" and self.ready:
            self._pod(event)

    def _pod(self, event: WatchEvent) -> None:
        metadata = event.object.get("metadata") or {}
        key = f"{metadata.get('namespace') or 'default'}/{event.name}"
        node = (event.object.get("spec") or {}).get("nodeName")
        if event.type is EventType.DELETED or not node:
            self._bound.discard(key)
            return
        if key in self._bound:
            return
        self._bound.add(key)
        owners = metadata.get("ownerReferences") or []
        if any(owner.get("kind") == "DaemonSet" for owner in owners):
            return
        self.wake([wake_key(buffer) for buffer in sorted(self.ready)])

    async def _buffer(self, event: WatchEvent) -> None:
        metadata = event.object.get("metadata") or {}
        key = f"{metadata.get('namespace') or 'default'}/{event.name}"
        self._untrack(key)
        if event.type is EventType.DELETED:
            return
        try:
            buffer = CapacityBuffer.parse(event.object)
        except InvalidObjectError as error:
            logger.warning("ignoring %s", error)
            await self.cluster.record_event(
                kube_event(
                    KIND,
                    event.name,
                    INVALID,
                    str(error),
                    metadata.get("namespace") or "default",
                    warning=True,
                    uid=metadata.get("uid"),
                )
            )
            return
        self.buffers[key] = buffer
        target = target_of(buffer)
        if target is not None:
            self._by_target.setdefault(target, set()).add(key)
        await self._reconcile(buffer)

    def _untrack(self, key: str) -> None:
        old = self.buffers.pop(key, None)
        if old is not None and (target := target_of(old)) is not None:
            self._by_target.get(target, set()).discard(key)
        if key in self.ready:
            self.ready.discard(key)
            self.forget(wake_key(key))

    async def _reconcile(self, buffer: CapacityBuffer) -> None:
        try:
            resolution = await reconcile_buffer(self.cluster, buffer, datetime.now(UTC))
        except (CloudError, ValueError) as error:
            logger.warning("could not reconcile CapacityBuffer %s: %s", buffer.key, error)
            return
        if resolution.ready:
            self.ready.add(buffer.key)
            self.wake([wake_key(buffer.key)])
        elif buffer.key in self.ready:
            self.ready.discard(buffer.key)
            self.forget(wake_key(buffer.key))
