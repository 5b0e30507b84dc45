"""The controller's part in static NodePools: start or signal each static pool's workflow (`static/<cluster>/<pool>`)
when its `replicas` changes or one of its NodeClaims goes, as Karpenter's static controllers watch NodePools and
NodeClaims. With the StaticCapacity gate off, a static NodePool is not acted on: it gets a warning (log and event
naming `spec.replicas`) once per value.
"""

from __future__ import annotations

import logging
from typing import Any

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from activities.kube import kube_event
from core import labels
from core.api.nodepool import is_managed_manifest
from core.cluster import ClusterAPI, EventType, WatchEvent
from core.static_capacity import gate_off_message
from core.static_messages import StaticPoolChanged, StaticPoolInput
from workflows.static import StaticNodePoolWorkflow, static_id

logger = logging.getLogger("nodewright.controller")

GATE_DISABLED = "FeatureGateDisabled"
"""The event reason on a static NodePool while the StaticCapacity gate is off."""


def _ready(manifest: dict[str, Any]) -> bool:
    conditions = (manifest.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _replicas(manifest: dict[str, Any]) -> int | None:
    value = (manifest.get("spec") or {}).get("replicas")
    return value if isinstance(value, int) else None


def _initialized(manifest: dict[str, Any]) -> bool:
    conditions = (manifest.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)


class StaticPools:
    def __init__(
        self, client: Client, cluster: ClusterAPI, task_queue: str, enabled: bool, template: StaticPoolInput
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.task_queue = task_queue
        self.enabled = enabled
        """The StaticCapacity feature gate."""
        self.template = template
        """The workflow input every static pool starts with (its nodepool filled in)."""
        self._replicas: dict[str, int] = {}
        """Each static NodePool's replicas, as last acted on."""
        self._ready: set[str] = set()
        """Static NodePools last seen Ready."""
        self._deleting: set[str] = set()
        """NodeClaims of static pools already seen deleting."""
        self._initialized: set[str] = set()
        """NodeClaims of static pools already seen Initialized (a drifted node's replacement lets it go then)."""

    async def observe(self, event: WatchEvent) -> None:
        if event.kind == "NodePool":
            await self._nodepool(event)
        elif event.kind == "NodeClaim" and self.enabled:
            await self._nodeclaim(event)

    async def _nodepool(self, event: WatchEvent) -> None:
        # Another provider's NodePool is not this controller's to scale or warn of, as Karpenter's static
        # controllers skip a NodePool its cloud provider does not manage.
        replicas = _replicas(event.object) if is_managed_manifest(event.object) else None
        if event.type is EventType.DELETED or replicas is None:
            self._ready.discard(event.name)
            if self._replicas.pop(event.name, None) is not None and self.enabled:
                await self._signal(event.name, f"NodePool {event.name} deleted or no longer static")
            return
        before = self._replicas.get(event.name)
        became_ready = _ready(event.object) and event.name not in self._ready
        if _ready(event.object):
            self._ready.add(event.name)
        else:
            self._ready.discard(event.name)
        if before == replicas:
            if became_ready and self.enabled:
                await self._signal(event.name, f"NodePool {event.name} became Ready")
            return
        self._replicas[event.name] = replicas
        if not self.enabled:
            await self._warn(event, replicas)
            return
        why = (
            f"replicas {before} -> {replicas}"
            if before is not None
            else f"static NodePool seen, replicas {replicas}"
        )
        await self._signal(event.name, why)

    async def _nodeclaim(self, event: WatchEvent) -> None:
        metadata = event.object.get("metadata") or {}
        pool = (metadata.get("labels") or {}).get(labels.NODEPOOL)
        if pool not in self._replicas:
            return
        if event.type is EventType.DELETED:
            seen = event.name in self._deleting
            self._deleting.discard(event.name)
            self._initialized.discard(event.name)
            if not seen:
                await self._signal(pool, f"nodeclaim {event.name} deleted")
        elif metadata.get("deletionTimestamp"):
            if event.name not in self._deleting:
                self._deleting.add(event.name)
                await self._signal(pool, f"nodeclaim {event.name} deleted")
        elif event.name not in self._initialized and _initialized(event.object):
            self._initialized.add(event.name)
            await self._signal(pool, f"nodeclaim {event.name} initialized")

    async def _signal(self, nodepool: str, why: str) -> None:
        try:
            await self.client.start_workflow(
                StaticNodePoolWorkflow.run,
                self.template.model_copy(update={"nodepool": nodepool}),
                id=static_id(self.template.cluster, nodepool),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                start_signal="changed",
                start_signal_args=[StaticPoolChanged(why=why)],
                static_summary=f"static NodePool {nodepool}",
                static_details=f"holds NodePool {nodepool} at its spec.replicas",
            )
        except RPCError as error:
            logger.warning("could not signal the static NodePool %s (%s): %s", nodepool, why, error)

    async def _warn(self, event: WatchEvent, replicas: int) -> None:
        message = gate_off_message(event.name, replicas)
        logger.warning(message)
        uid = (event.object.get("metadata") or {}).get("uid")
        await self.cluster.record_event(
            kube_event("NodePool", event.name, GATE_DISABLED, message, warning=True, uid=uid)
        )
