"""The objects a plan reads, kept current by watches instead of listed at every plan.

A plan reads every Pod, Node, NodeClaim, NodePool, AKSNodeClass, DaemonSet and PodDisruptionBudget. Listing them
all at each plan costs the API server a read from etcd and the worker a JSON decode of every object, about every
10 s while pods wait for kube-scheduler. `SnapshotInformer` lists each kind once and then follows its watch, as
a controller's informer does (Karpenter's cluster state reads such caches): a plan takes the objects as they
stand, and only those changed since the last plan are parsed again.

What a plan creates is written through (`remember`), so the next plan sees its own NodeClaims, and the pods
nominated to them, even before their watch events arrive. Each object is kept with the revision it was seen at,
and an older revision never replaces a newer one; a deleted object leaves a short-lived tombstone so that a late
write-through cannot bring it back.

Until every kind has been listed once, or once a kind's watch stopped on an error retrying cannot fix (a CRD
removed, a permission withdrawn), `items` answers None and the caller lists, which reports that error.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from core.cluster import EventType, WatchEvent

logger = logging.getLogger("nodewright")

TOMBSTONES = 10_000
"""How many deletions are remembered (each only guards against a write-through older than the deletion)."""

Emit = Callable[[WatchEvent | Exception], None]


class Watch(Protocol):
    """One kind's list-then-watch loop (`activities.kubeclient.listwatch.ListWatch`)."""

    @property
    def listed(self) -> bool:
        """Whether its first list has been handed on."""
        ...

    def run(self) -> None: ...

    def stop(self) -> None: ...


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """An object's namespace ("" for a cluster-scoped one) and name."""
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without its metadata's managedFields (a shallow copy when it had them): no plan and no change
    reads them, and they are a good part of an object's memory and of the dicts the garbage collector scans."""
    metadata = obj.get("metadata") or {}
    if "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {name: value for name, value in metadata.items() if name != "managedFields"}}


def revision(resource_version: str | None) -> int:
    """A resourceVersion as the etcd revision it is (0 if the server uses something else)."""
    try:
        return int(resource_version or 0)
    except ValueError:
        return 0


class SnapshotInformer:
    """Every object of some kinds, by kind, as their watches last reported them."""

    def __init__(self, kinds: Sequence[str], watch_for: Callable[[str, Emit], Watch]) -> None:
        """`watch_for(kind, emit)`: a watch of that kind handing its events (or its final error) to `emit`."""
        self.kinds = tuple(kinds)
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], tuple[int, dict[str, Any]]]] = {k: {} for k in kinds}
        self._tombstones: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._failed: dict[str, Exception] = {}
        self._watches = {kind: watch_for(kind, self._emitter(kind)) for kind in kinds}

    def start(self) -> None:
        """Start each kind's watch on a thread of its own (daemon threads: they end with the process); once."""
        for kind, watch in self._watches.items():
            threading.Thread(target=watch.run, name=f"nodewright-informer-{kind}", daemon=True).start()

    def stop(self) -> None:
        for watch in self._watches.values():
            watch.stop()

    def synced(self, kinds: Sequence[str] | None = None) -> bool:
        """Whether each kind (all by default) has been listed once and its watch still runs."""
        return all(self._watches[kind].listed and kind not in self._failed for kind in (kinds or self.kinds))

    def items(self, kinds: Sequence[str]) -> list[dict[str, Any]] | None:
        """Every object of these kinds, each kind in the order a list gives (namespace, then name); None when one
        of them is not synced (see the module's docstring). The objects are shared: read them only."""
        with self._lock:
            if not self.synced(kinds):
                return None
            return [self._objects[kind][key][1] for kind in kinds for key in sorted(self._objects[kind])]

    def matching(
        self, kind: str, matches: Callable[[Mapping[str, Any]], bool]
    ) -> list[dict[str, Any]] | None:
        """The objects of a kind that `matches` accepts, in no order; None when that kind is not followed or not
        synced (the caller lists). Shared, like `items`."""
        with self._lock:
            if kind not in self._watches or not self.synced([kind]):
                return None
            return [obj for _, obj in self._objects[kind].values() if matches(obj)]

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """One object as its watch last reported it; None when it is not there, or its kind is not followed or
        not synced (the caller reads the server). Shared, like `items`."""
        with self._lock:
            if kind not in self._watches or not self.synced([kind]):
                return None
            held = self._objects[kind].get((namespace, name))
            return held[1] if held is not None else None

    def remember(self, kind: str, obj: dict[str, Any]) -> None:
        """Write through an object this process created or changed, as the API server answered it."""
        if kind in self._objects:
            self._apply(kind, EventType.MODIFIED, obj, revision(obj["metadata"].get("resourceVersion")))

    def _emitter(self, kind: str) -> Emit:
        def emit(item: WatchEvent | Exception) -> None:
            if isinstance(item, Exception):
                with self._lock:
                    self._failed[kind] = item
                logger.warning(
                    "stopped following %s objects for plans, which list them instead: %s", kind, item
                )
                return
            self._apply(kind, item.type, item.object, item.resource_version)

        return emit

    def _apply(self, kind: str, change: EventType, obj: dict[str, Any], at: int) -> None:
        key = object_key(obj)
        obj = without_managed_fields(obj)
        tombstone = (kind, *key)
        with self._lock:
            objects = self._objects[kind]
            held = objects.get(key)
            newest = held[0] if held is not None else self._tombstones.get(tombstone, -1)
            if at < newest:
                return  # older than what is held: a late write-through, or a watch behind it
            if change is EventType.DELETED:
                objects.pop(key, None)
                self._tombstones[tombstone] = at
                self._tombstones.move_to_end(tombstone)
                if len(self._tombstones) > TOMBSTONES:
                    self._tombstones.popitem(last=False)
            else:
                objects[key] = (at, obj)
                self._tombstones.pop(tombstone, None)
