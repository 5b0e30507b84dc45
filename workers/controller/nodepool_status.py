"""The controller's NodePool status writer: Karpenter's `nodepool.counter`, `nodepool.validation` and
`nodepool.readiness`, computed from what the controller's watch already keeps (`core.nodepool_status`).

It reads nothing from the API server. Each watch event updates a compact record of the object (a NodeClaim or
Node as the few fields the counter reads); a change makes the writer recompute every NodePool's status once the
watch has been quiet for `debounce_seconds` (or after `max_wait_seconds` of constant change), and patch the
status subresource of those whose status differs, with the resourceVersion it saw as precondition. Its first
pass waits for the watch's initial listing to go quiet, so a restart does not write a count lower than the
truth. A NodePool that fails validation gets ValidationSucceeded False; no object, however malformed, stops the
writer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import labels
from core.api.condition_set import conditions_json, readable_conditions
from core.api.meta import InvalidObjectError
from core.api.nodepool import NodePool, is_managed_manifest
from core.cluster import ClusterAPI, EventType, WatchEvent
from core.errors import CloudError
from core.nodepool_status import (
    CountedNode,
    NodeClassState,
    NodePoolFacts,
    counted_capacity,
    nodeclass_state,
    nodepool_status,
    nodepool_usage,
)
from core.quantity import QuantityError
from core.resources import Resources, parse_resources

logger = logging.getLogger("nodewright.nodepool.status")


def _resources(raw: Any) -> Resources | None:
    try:
        return parse_resources(raw) if isinstance(raw, Mapping) else None
    except (QuantityError, ValueError, TypeError):
        return None


def _time(raw: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Claim:
    nodepool: str | None
    provider_id: str
    capacity: Resources | None
    deleting: bool


@dataclass(frozen=True, slots=True)
class _Node:
    nodepool: str | None
    provider_id: str
    capacity: Resources | None
    initialized: bool
    deleting: bool


def _claim(raw: Mapping[str, Any]) -> _Claim:
    metadata, status = raw.get("metadata") or {}, raw.get("status") or {}
    terminating = any(
        isinstance(c, Mapping) and c.get("type") == "InstanceTerminating" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return _Claim(
        nodepool=(metadata.get("labels") or {}).get(labels.NODEPOOL),
        provider_id=str(status.get("providerID") or ""),
        capacity=_resources(status.get("capacity")),
        deleting=metadata.get("deletionTimestamp") is not None or terminating,
    )


def _node(raw: Mapping[str, Any]) -> _Node:
    metadata = raw.get("metadata") or {}
    node_labels = metadata.get("labels") or {}
    return _Node(
        nodepool=node_labels.get(labels.NODEPOOL),
        provider_id=str((raw.get("spec") or {}).get("providerID") or ""),
        capacity=_resources((raw.get("status") or {}).get("capacity")),
        initialized=node_labels.get(labels.INITIALIZED) == "true",
        deleting=metadata.get("deletionTimestamp") is not None,
    )


def counted_nodes(claims: Iterable[_Claim], nodes: Iterable[_Node]) -> list[CountedNode]:
    """NodeClaims and Nodes paired by providerID, each pair (or lone one) counted once."""
    by_provider: dict[str, _Node] = {}
    lone: list[_Node] = []
    for node in nodes:
        if node.provider_id:
            by_provider[node.provider_id] = node
        else:
            lone.append(node)
    counted = []
    for claim in claims:
        node = by_provider.pop(claim.provider_id, None) if claim.provider_id else None
        initialized = node is not None and node.initialized
        counted.append(
            CountedNode(
                nodepool=node.nodepool if node is not None else claim.nodepool,
                capacity=counted_capacity(claim.capacity, node.capacity if node else None, initialized),
                deleting=claim.deleting,
            )
        )
    counted.extend(
        CountedNode(nodepool=node.nodepool, capacity=dict(node.capacity or {}), deleting=node.deleting)
        for node in [*lone, *by_provider.values()]
    )
    return counted


def validation_error(raw: Mapping[str, Any]) -> str | None:
    """Why the NodePool fails validation (every broken rule with its field path), or None."""
    try:
        NodePool.parse(raw)
    except InvalidObjectError as error:
        return "; ".join(error.problems)
    return None


def status_differs(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether writing `wanted` would change the status (quantities compared by value, conditions by content)."""
    return (
        _resources(current.get("resources")) != _resources(wanted["resources"])
        or current.get("nodes") != wanted["nodes"]
        or conditions_json(readable_conditions(current)) != wanted["conditions"]
    )


class NodePoolStatusWriter:
    """Keeps the NodePool status of the cluster the controller watches."""

    def __init__(
        self, cluster: ClusterAPI, debounce_seconds: float = 1.0, max_wait_seconds: float = 10.0
    ) -> None:
        self.cluster = cluster
        self.debounce_seconds = debounce_seconds
        self.max_wait_seconds = max_wait_seconds
        """A watch that is never quiet (a thousand nodes joining) still gets its statuses written this often."""
        self._nodepools: dict[str, dict[str, Any]] = {}
        self._validation: dict[str, tuple[object, str | None]] = {}
        """Per NodePool, its generation (or resourceVersion) and why it failed validation then."""
        self._nodeclasses: dict[str, NodeClassState] = {}
        self._claims: dict[str, _Claim] = {}
        self._nodes: dict[str, _Node] = {}
        self._changed = asyncio.Event()

    def observe(self, event: WatchEvent) -> None:
        """Record what this status depends on of a watched object."""
        deleted = event.type is EventType.DELETED
        try:
            if event.kind == "NodePool":
                self._keep(self._nodepools, event.name, None if deleted else event.object)
            elif event.kind == "AKSNodeClass":
                self._keep(self._nodeclasses, event.name, None if deleted else nodeclass_state(event.object))
            elif event.kind == "NodeClaim":
                self._keep(self._claims, event.name, None if deleted else _claim(event.object))
            elif event.kind == "Node":
                self._keep(self._nodes, event.name, None if deleted else _node(event.object))
            else:
                return
        except (AttributeError, TypeError, ValueError) as error:  # a malformed object is left out
            logger.debug("nodepool status skips %s %s: %s", event.kind, event.name, error)
        self._changed.set()

    @staticmethod
    def _keep(store: dict[str, Any], name: str, value: Any) -> None:
        if value is None:
            store.pop(name, None)
        else:
            store[name] = value

    async def run(self) -> None:
        """Write statuses after each quiet period that follows a change, until cancelled."""
        while True:
            await self._changed.wait()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.max_wait_seconds
            # Until the watch has been quiet for a debounce period, or for at most `max_wait_seconds`.
            while self._changed.is_set() and loop.time() < deadline:
                self._changed.clear()
                await asyncio.sleep(self.debounce_seconds)
            self._changed.clear()
            try:
                await self.write(datetime.now(UTC))
            except Exception:  # the controller goes on whatever happens here; the next change tries again
                logger.exception("could not write NodePool statuses")

    def wanted(self, now: datetime) -> dict[str, tuple[str, dict[str, Any]]]:
        """Per NodePool whose status should change: its resourceVersion and the status to write."""
        usage = nodepool_usage(counted_nodes(self._claims.values(), self._nodes.values()))
        changes = {}
        for name, raw in self._nodepools.items():
            try:
                change = self._wanted(name, raw, usage, now)
            except Exception as error:  # one bad NodePool never stops the others
                logger.warning("cannot compute the status of NodePool %s: %s", name, error)
                continue
            if change is not None:
                changes[name] = change
        return changes

    def _wanted(
        self, name: str, raw: Mapping[str, Any], usage: Mapping[str, Resources], now: datetime
    ) -> tuple[str, dict[str, Any]] | None:
        metadata = raw.get("metadata") or {}
        if not is_managed_manifest(raw):
            return None  # not a NodePool of this provider, as Karpenter leaves it alone
        reference = raw["spec"]["template"]["spec"]["nodeClassRef"]
        generation = metadata.get("generation") or metadata.get("resourceVersion")
        known = self._validation.get(name)
        if known is None or known[0] != generation:
            known = (generation, validation_error(raw))
            self._validation[name] = known
        current = raw.get("status") or {}
        facts = NodePoolFacts(
            generation=metadata.get("generation"),
            created=_time(metadata.get("creationTimestamp")),
            conditions=readable_conditions(current),
            validation_error=known[1],
            nodeclass=self._nodeclasses.get(str(reference.get("name") or "")),
            usage=usage.get(name, {}),
        )
        status = nodepool_status(facts, now)
        if not status_differs(current, status):
            return None
        return str(metadata.get("resourceVersion") or ""), status

    async def write(self, now: datetime) -> int:
        """Patch every NodePool whose status should change; how many were written."""
        written = 0
        for name, (version, status) in self.wanted(now).items():
            try:
                if await self.cluster.patch_status("NodePool", name, status, version):
                    written += 1
            except CloudError as error:
                logger.warning("could not write the status of NodePool %s: %s", name, error)
                self._changed.set()  # try again after the next quiet period
        for name in set(self._validation) - set(self._nodepools):
            del self._validation[name]
        return written
