"""The API server of the simulated AKS: Kubernetes objects in memory, and the controllers that act on them.

Objects are `core.api` models, stored by kind, namespace and name. Every change takes the next
resourceVersion and appends a `WatchEvent` to a log that a watcher can read from any version it has seen.
Deletion follows the API server: an object with finalizers is only marked (deletionTimestamp) and goes away
when its last finalizer is removed. Evictions honour PodDisruptionBudgets as `policy/v1` does.

The controllers that run inside kube-controller-manager run here, synchronously after every change:
workloads (Deployment, ReplicaSet, StatefulSet, Job) keep their pods at the desired replicas, DaemonSets run
one pod on every node they tolerate and select, and pods bound to a node that no longer exists are removed
(a workload then recreates them, pending). Running them inside the change keeps the store consistent
between two requests, which is what makes the simulation deterministic.

Stored objects are never changed in place: a change stores a new revision that shares its unchanged parts
with the old one (see `revision`). Readers must not change what they get; writers hand over what they pass.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import (
    DEFAULT_NAMESPACE,
    Condition,
    DaemonSet,
    Deployment,
    Event,
    Job,
    Node,
    Pod,
    PodDisruptionBudget,
    PodPhase,
    PodStatus,
    ReplicaSet,
    StatefulSet,
    Toleration,
    TolerationOperator,
    UnhealthyPodEvictionPolicy,
    Workload,
    is_terminal,
    selects,
    tolerates,
)
from core.api.kube import is_pod_ready as is_ready
from core.api.manifests import MAX_REPLICAS, without_nulls, workload_pods
from core.api.meta import InvalidObjectError, KubeModel, ObjectMeta, OwnerReference, TaintEffect, problems_of
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.cluster import EventType, WatchEvent
from core.errors import ConflictError, InvalidError, NotFoundError, PDBViolationError
from core.scheduling.pods import InvalidPodConstraint, compile_constraints
from core.scheduling.requirements import Requirements

KubeObject = Any
"""A `core.api` model with `metadata` (Pod, Node, NodeClaim, Deployment, ...)."""

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind the simulated API server serves, with where it lives in the REST API."""

    name: str
    api_version: str
    plural: str
    namespaced: bool
    model: type[BaseModel]
    validate: Callable[[Mapping[str, Any]], Any] | None = None
    """The CRD parser that checks every rule (Karpenter's kinds); plain validation when None."""
    other_versions: tuple[str, ...] = ()
    """Older versions a manifest may be written in; the object is stored in `api_version`."""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def parse(self, document: Mapping[str, Any]) -> KubeObject:
        """The document as a model; raises `InvalidError` naming the object, the field path and the rule."""
        try:
            if self.validate is not None:
                obj = self.validate(document)
            else:
                try:
                    obj = self.model.model_validate(without_nulls(document))
                except ValidationError as error:
                    raise InvalidObjectError(
                        self.name, _document_name(document, self.namespaced), problems_of(error)
                    ) from None
        except InvalidObjectError as error:
            raise InvalidError(str(error), code="Invalid") from None
        if not obj.metadata.name and not obj.metadata.generate_name:
            raise InvalidError(f"{self.name}: metadata.name: Field required", code="Invalid")
        if isinstance(obj, Workload) and _replicas(obj) > MAX_REPLICAS:
            raise InvalidError(
                f"{self.name} {obj.metadata.name}: more than the {MAX_REPLICAS} replicas one workload may have",
                code="Invalid",
            )
        if self.namespaced:
            obj.metadata.namespace = obj.metadata.namespace or DEFAULT_NAMESPACE
        else:
            obj.metadata.namespace = None
        return obj

    def manifest(self, obj: KubeObject) -> dict[str, Any]:
        """The object as JSON, the way the API server returns it."""
        body: dict[str, Any] = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"apiVersion": self.api_version, "kind": self.name, **body}


POD = Kind("Pod", "v1", "pods", True, Pod)
EVENT = Kind("Event", "v1", "events", True, Event)
NODE = Kind("Node", "v1", "nodes", False, Node)
DEPLOYMENT = Kind("Deployment", "apps/v1", "deployments", True, Deployment)
REPLICASET = Kind("ReplicaSet", "apps/v1", "replicasets", True, ReplicaSet)
STATEFULSET = Kind("StatefulSet", "apps/v1", "statefulsets", True, StatefulSet)
DAEMONSET = Kind("DaemonSet", "apps/v1", "daemonsets", True, DaemonSet)
JOB = Kind("Job", "batch/v1", "jobs", True, Job)
PDB = Kind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, PodDisruptionBudget)
NODEPOOL = Kind("NodePool", "karpenter.sh/v1", "nodepools", False, NodePool, NodePool.parse)
NODECLAIM = Kind("NodeClaim", "karpenter.sh/v1", "nodeclaims", False, NodeClaim, NodeClaim.parse)


class Secret(KubeModel):
    """A core/v1 Secret: `data` values are base64, as the API serves them. Only the simulator writes them."""

    metadata: ObjectMeta
    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)


SECRET = Kind("Secret", "v1", "secrets", True, Secret)
NODECLASS = Kind(
    "AKSNodeClass",
    "karpenter.azure.com/v1beta1",
    "aksnodeclasses",
    False,
    AKSNodeClass,
    AKSNodeClass.parse,
    other_versions=("karpenter.azure.com/v1alpha2",),
)

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        POD,
        EVENT,
        NODE,
        DEPLOYMENT,
        REPLICASET,
        STATEFULSET,
        DAEMONSET,
        JOB,
        PDB,
        NODEPOOL,
        NODECLAIM,
        NODECLASS,
        SECRET,
    )
}
WORKLOADS = frozenset({DEPLOYMENT.name, REPLICASET.name, STATEFULSET.name, JOB.name})
SCALABLE = frozenset({DEPLOYMENT.name, REPLICASET.name, STATEFULSET.name})
SNAPSHOT_KINDS = (NODEPOOL, NODECLAIM, NODECLASS, NODE, POD, DAEMONSET, PDB)
"""What the scheduler reads (`core.api.manifests.Manifests`); workloads are there as their pods."""


def kind_of(document: Any) -> Kind:
    """The kind a manifest is of; `InvalidError` for a document that is not one of the kinds served here."""
    if not isinstance(document, Mapping):
        raise InvalidError(f"expected a Kubernetes object (a mapping), not {type(document).__name__}")
    name, api_version = document.get("kind"), document.get("apiVersion")
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise InvalidError(f"kind {name!r} is not served by the simulated AKS; it serves {', '.join(KINDS)}")
    if api_version != kind.api_version and api_version not in kind.other_versions:
        raise InvalidError(
            f"{name} {_document_name(document, kind.namespaced)}: apiVersion: use {kind.api_version}"
        )
    return kind


def key_of(obj: KubeObject) -> Key:
    return obj.metadata.namespace or "", obj.metadata.name


def revision(obj: KubeObject) -> KubeObject:
    """A copy to build the next revision of a stored object from: its own metadata, every other part shared.

    Stored objects are never changed in place, so revisions can share what they do not change.
    """
    copy = obj.model_copy()
    copy.metadata = obj.metadata.model_copy()
    return copy


def set_condition(conditions: list[Condition], condition: Condition) -> list[Condition]:
    """The conditions with this one in place of any of the same type."""
    return [*(existing for existing in conditions if existing.type != condition.type), condition]


class Write(StrEnum):
    """Which part of an object an update replaces."""

    OBJECT = "object"
    """metadata (labels, annotations, finalizers, owners) and spec, as a PUT of the resource does."""
    STATUS = "status"
    """status only, as a PUT of the status subresource does."""
    ALL = "all"
    """everything but identity: what the simulated controllers and kubelet write."""


DAEMON_TOLERATIONS = (
    Toleration(key="node.kubernetes.io/not-ready", operator=TolerationOperator.EXISTS),
    Toleration(key="node.kubernetes.io/unreachable", operator=TolerationOperator.EXISTS),
    Toleration(key="node.kubernetes.io/disk-pressure", operator=TolerationOperator.EXISTS),
    Toleration(key="node.kubernetes.io/memory-pressure", operator=TolerationOperator.EXISTS),
    Toleration(key="node.kubernetes.io/pid-pressure", operator=TolerationOperator.EXISTS),
    Toleration(key="node.kubernetes.io/unschedulable", operator=TolerationOperator.EXISTS),
)
"""What the DaemonSet controller adds to every daemon pod."""


@dataclass(slots=True)
class _Dirty:
    """What the controllers must look at after a change."""

    workloads: set[tuple[str, str, str]] = field(default_factory=set)
    daemonsets: set[Key] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    gone_nodes: set[str] = field(default_factory=set)
    bound_pods: set[Key] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.workloads or self.daemonsets or self.nodes or self.gone_nodes or self.bound_pods)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ClusterState:
    """The objects of one simulated cluster, their change log, and the controllers that keep pods in line."""

    def __init__(
        self, seed: int = 0, history_limit: int = 100_000, clock: Callable[[], datetime] = _utcnow
    ) -> None:
        self.resource_version = 0
        self.scheduling_generation = 0
        """Moves whenever something the kube-scheduler reads changes (pods come, go or bind; nodes change)."""
        self._clock = clock
        self._uids = uuid.uuid5(uuid.NAMESPACE_OID, f"nodewright-simulator/{seed}")
        self._incarnations: Counter[str] = Counter()
        self._objects: dict[str, dict[Key, KubeObject]] = {name: {} for name in KINDS}
        self._pods_by_node: dict[str, set[Key]] = {}
        self._log: list[WatchEvent] = []
        self._history_limit = max(1, history_limit)
        self._first_logged = 1
        self._changed = asyncio.Event()
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        # controller bookkeeping: which workload made each pod, from which template
        self._owned: dict[tuple[str, str, str], set[Key]] = {}
        self._owner_of: dict[Key, tuple[str, str, str]] = {}
        self._template_of: dict[Key, str] = {}
        self._desired: dict[tuple[str, str, str], tuple[str, dict[str, Pod]]] = {}
        """Per workload (until it changes): its template hash and the pods it wants, by name."""
        self._dirty = _Dirty()
        self._reconciling = False

    # --- reading -----------------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str | None = None) -> KubeObject | None:
        """The stored object (read it, never change it), or None."""
        info = KINDS[kind]
        return self._objects[kind].get(((namespace or DEFAULT_NAMESPACE) if info.namespaced else "", name))

    def objects(self, kind: str, namespace: str | None = None) -> list[KubeObject]:
        """The objects of a kind, in one namespace or all, sorted by namespace and name."""
        objects = self._objects[kind]
        return [objects[key] for key in sorted(objects) if namespace is None or key[0] == namespace]

    def pods(self) -> list[Pod]:
        return self.objects(POD.name)

    def nodes(self) -> list[Node]:
        return self.objects(NODE.name)

    def pods_on_node(self, node_name: str) -> list[Pod]:
        """The pods bound to the node, sorted."""
        pods = self._objects[POD.name]
        return [pods[key] for key in sorted(self._pods_by_node.get(node_name, ()))]

    # --- the change log ----------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change (the simulation loop wakes up on it)."""
        self._listeners.append(listener)

    def events_since(self, since: int) -> list[WatchEvent]:
        """The events after resource version `since`, oldest first.

        Raises `ConflictError` with code "Expired" when the log no longer reaches back that far: the watcher
        must list again and watch from the list's version, as with a 410 from the API server.
        """
        if since < self._first_logged - 1:
            raise ConflictError(
                f"too old resource version: {since} (the oldest kept is {self._first_logged})", code="Expired"
            )
        return self._log[max(0, since - self._first_logged + 1) :]

    async def wait_for_change(self, since: int, timeout: float | None = None) -> bool:
        """Wait until the resource version passes `since`; False on timeout or when the state is closed."""
        while self.resource_version <= since and not self._closed:
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), timeout)
            except TimeoutError:
                return False
        return self.resource_version > since

    def close(self) -> None:
        """Release every watcher (the server is shutting down)."""
        self._closed = True
        self._changed.set()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- writing -----------------------------------------------------------------------------------------

    def create(self, kind: str, obj: KubeObject) -> KubeObject:
        """Store a new object with a uid and creationTimestamp; `ConflictError` (AlreadyExists) if it exists."""
        info = KINDS[kind]
        self._create(info, obj)
        self._reconcile()
        return obj

    def update(self, kind: str, obj: KubeObject, write: Write = Write.OBJECT) -> KubeObject:
        """Replace part of a stored object (`write`) with the parts of `obj`, which the store takes over;
        the stored object after the update.

        A `metadata.resourceVersion` in `obj` is a precondition (`ConflictError` when the object changed
        since). No finalizer may be added to an object being deleted; removing the last one deletes it.
        """
        info = KINDS[kind]
        key = self._key(info, obj.metadata.namespace, obj.metadata.name)
        current = self._objects[kind].get(key)
        if current is None:
            raise NotFoundError(f'{kind} "{_display(key)}" not found', code="NotFound")
        wanted = obj.metadata.resource_version
        if wanted and wanted != current.metadata.resource_version:
            raise ConflictError(
                f'Operation cannot be fulfilled on {info.plural} "{obj.metadata.name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                code="Conflict",
            )
        updated = revision(current)
        if write in (Write.OBJECT, Write.ALL):
            added = set(obj.metadata.finalizers) - set(current.metadata.finalizers)
            if current.metadata.deletion_timestamp is not None and added:
                raise InvalidError(
                    f'{kind} "{_display(key)}": metadata.finalizers: Forbidden: no new finalizers can be added '
                    "if the object is being deleted",
                    code="Invalid",
                )
            for name in ("labels", "annotations", "finalizers", "owner_references"):
                setattr(updated.metadata, name, getattr(obj.metadata, name).copy())
            updated.spec = obj.spec
        if write in (Write.STATUS, Write.ALL) and hasattr(updated, "status"):
            updated.status = obj.status
        result = self._commit(info, current, updated)
        self._reconcile()
        return result

    def delete(self, kind: str, name: str, namespace: str | None = None) -> KubeObject:
        """Delete the object, or mark it for deletion while it has finalizers; its last state is returned."""
        info = KINDS[kind]
        key = self._key(info, namespace, name)
        current = self._objects[kind].get(key)
        if current is None:
            raise NotFoundError(f'{kind} "{_display(key)}" not found', code="NotFound")
        if not current.metadata.finalizers:
            self._remove(info, key)
        elif current.metadata.deletion_timestamp is None:
            marked = revision(current)
            marked.metadata.deletion_timestamp = self._clock()
            self._store(info, marked, EventType.MODIFIED)
            current = marked
        self._reconcile()
        return current

    def apply(self, documents: Iterable[Any]) -> list[str]:
        """Create or update every object, as `kubectl apply` does; one line per object saying what happened.

        All documents are checked first: if any is invalid, nothing is applied and `InvalidError` lists
        every problem.
        """
        parsed: list[tuple[Kind, KubeObject]] = []
        problems: list[str] = []
        for document in documents:
            try:
                kind = kind_of(document)
                parsed.append((kind, kind.parse(document)))
            except InvalidError as error:
                problems.append(str(error))
        if problems:
            raise InvalidError("\n".join(problems), code="Invalid")
        results = []
        for kind, obj in parsed:
            current = self._objects[kind.name].get(key_of(obj))
            if current is None:
                self._create(kind, obj)
                action = "created"
            else:
                updated = revision(current)
                updated.metadata.labels = dict(obj.metadata.labels)
                updated.metadata.annotations = dict(obj.metadata.annotations)
                updated.spec = obj.spec
                action = "unchanged" if updated == current else "configured"
                self._commit(kind, current, updated)
            results.append(f"{kind.name.lower()}/{_display(key_of(obj))} {action}")
        self._reconcile()
        return results

    def scale(self, kind: str, name: str, namespace: str | None, replicas: int) -> KubeObject:
        """Set `spec.replicas` of a Deployment, ReplicaSet or StatefulSet."""
        if kind not in SCALABLE:
            raise InvalidError(
                f"{kind} cannot be scaled; scale a {', '.join(sorted(SCALABLE))}", code="Invalid"
            )
        if not 0 <= replicas <= MAX_REPLICAS:
            raise InvalidError(
                f"spec.replicas: {replicas} is not between 0 and {MAX_REPLICAS}", code="Invalid"
            )
        current = self.get(kind, name, namespace)
        if current is None:
            raise NotFoundError(f'{kind} "{namespace}/{name}" not found', code="NotFound")
        updated = revision(current)
        updated.spec = current.spec.model_copy(update={"replicas": replicas})
        result = self._commit(KINDS[kind], current, updated)
        self._reconcile()
        return result

    def bind(self, namespace: str, name: str, node_name: str) -> Pod:
        """Bind a pending pod to a node (the Binding subresource): PodScheduled becomes True."""
        pod = self.get(POD.name, name, namespace)
        if pod is None:
            raise NotFoundError(f'Pod "{namespace}/{name}" not found', code="NotFound")
        if pod.spec.node_name:
            raise ConflictError(f"pod {namespace}/{name} is already assigned to node {pod.spec.node_name}")
        bound = revision(pod)
        bound.spec = pod.spec.model_copy(update={"node_name": node_name})
        scheduled = set_condition(pod.status.conditions, Condition(type="PodScheduled", status="True"))
        bound.status = pod.status.model_copy(update={"conditions": scheduled})
        result: Pod = self.update(POD.name, bound, Write.ALL)
        return result

    def evict(self, namespace: str, name: str) -> None:
        """Delete the pod if the PodDisruptionBudget selecting it allows; `PDBViolationError` if not now."""
        pod = self.get(POD.name, name, namespace)
        if pod is None:
            raise NotFoundError(f'Pod "{namespace}/{name}" not found', code="NotFound")
        # As the eviction API does: pods that are finished, pending or already going need no budget.
        exempt = is_terminal(pod) or pod.status.phase == PodPhase.PENDING or pod.metadata.deletion_timestamp
        if not exempt:
            budgets = [
                pdb
                for pdb in self.objects(PDB.name, namespace)
                if selects(pdb.spec.selector, pod.metadata.labels)
            ]
            if len(budgets) > 1:
                raise InvalidError(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                    "support.",
                    code="Invalid",
                )
            if budgets:
                self._check_budget(budgets[0], pod)
        self.delete(POD.name, name, namespace)

    # --- internals ---------------------------------------------------------------------------------------

    def _key(self, kind: Kind, namespace: str | None, name: str) -> Key:
        return ((namespace or DEFAULT_NAMESPACE) if kind.namespaced else "", name)

    def _check_budget(self, pdb: PodDisruptionBudget, pod: Pod) -> None:
        matching = [
            other
            for other in self.objects(POD.name, pod.metadata.namespace)
            if selects(pdb.spec.selector, other.metadata.labels) and not is_terminal(other)
        ]
        healthy = sum(
            1 for other in matching if is_ready(other) and other.metadata.deletion_timestamp is None
        )
        desired = _desired_healthy(pdb, len(matching))
        if is_ready(pod):
            allowed = healthy - desired > 0
        else:
            always = pdb.spec.unhealthy_pod_eviction_policy == UnhealthyPodEvictionPolicy.ALWAYS_ALLOW
            allowed = always or healthy >= desired
        if not allowed:
            raise PDBViolationError(
                f"Cannot evict pod as it would violate the pod's disruption budget "
                f"{pdb.metadata.namespace}/{pdb.metadata.name} ({healthy} healthy, {desired} needed).",
                code="DisruptionBudget",
            )

    def _uid(self, kind: str, key: Key) -> str:
        # Derived from the seed and the object's identity, not drawn in call order, so concurrent activity
        # (the kubelet registering while a client creates pods) cannot change which object gets which uid.
        identity = f"{kind}/{key[0]}/{key[1]}"
        self._incarnations[identity] += 1
        return str(uuid.uuid5(self._uids, f"{identity}/{self._incarnations[identity]}"))

    def _create(self, kind: Kind, obj: KubeObject) -> None:
        metadata: ObjectMeta = obj.metadata
        if kind.namespaced:
            metadata.namespace = metadata.namespace or DEFAULT_NAMESPACE
        if not metadata.name and metadata.generate_name:
            prefix = f"{kind.name}/{metadata.namespace or ''}/{metadata.generate_name}"
            self._incarnations[prefix] += 1
            metadata.name = metadata.generate_name + _suffix(
                f"{self._uids}/{prefix}/{self._incarnations[prefix]}"
            )
        key = self._key(kind, metadata.namespace, metadata.name)
        if key in self._objects[kind.name]:
            raise ConflictError(f'{kind.plural} "{_display(key)}" already exists', code="AlreadyExists")
        metadata.uid = self._uid(kind.name, key)
        metadata.creation_timestamp = self._clock()
        metadata.deletion_timestamp = None
        if isinstance(obj, Pod) and obj.status.phase is None:
            obj.status.phase = PodPhase.PENDING
        self._store(kind, obj, EventType.ADDED)

    def _commit(self, kind: Kind, current: KubeObject, updated: KubeObject) -> KubeObject:
        """Store an updated object (nothing happens if nothing changed); gone once being deleted without finalizers."""
        updated.metadata.resource_version = current.metadata.resource_version
        if updated == current:
            return current
        if updated.metadata.deletion_timestamp is not None and not updated.metadata.finalizers:
            self._remove(kind, key_of(current))
            return updated
        self._store(kind, updated, EventType.MODIFIED)
        return updated

    def _store(self, kind: Kind, obj: KubeObject, event: EventType) -> None:
        key = key_of(obj)
        old = self._objects[kind.name].get(key)
        self._objects[kind.name][key] = obj
        self._record(kind, obj, event)
        self._changed_object(kind, key, old, obj)

    def _remove(self, kind: Kind, key: Key) -> None:
        old = self._objects[kind.name].pop(key)
        self._record(kind, old, EventType.DELETED)
        self._changed_object(kind, key, old, None)

    def _record(self, kind: Kind, obj: KubeObject, event: EventType) -> None:
        self.resource_version += 1
        obj.metadata.resource_version = str(self.resource_version)
        self._log.append(
            WatchEvent(
                type=event,
                kind=kind.name,
                name=obj.metadata.name,
                namespace=obj.metadata.namespace,
                resource_version=self.resource_version,
                object=kind.manifest(obj),
            )
        )
        if len(self._log) > self._history_limit:
            dropped = len(self._log) - self._history_limit * 3 // 4
            del self._log[:dropped]
            self._first_logged += dropped
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in self._listeners:
            listener()

    def _changed_object(self, kind: Kind, key: Key, old: KubeObject | None, new: KubeObject | None) -> None:
        """Keep the indexes, and tell the controllers what to look at."""
        dirty = self._dirty
        if kind is POD:
            old_node = old.spec.node_name if old is not None else None
            new_node = new.spec.node_name if new is not None else None
            if old is None or new is None or old_node != new_node:
                self.scheduling_generation += 1
            if old_node and old_node != new_node:
                self._pods_by_node[old_node].discard(key)
                if not self._pods_by_node[old_node]:
                    del self._pods_by_node[old_node]
            if new_node:
                self._pods_by_node.setdefault(new_node, set()).add(key)
                dirty.bound_pods.add(key)
            if new is None:
                self._template_of.pop(key, None)
                owner = self._owner_of.pop(key, None)
                if owner is not None:
                    self._owned[owner].discard(key)
                    if owner[0] == DAEMONSET.name:
                        dirty.daemonsets.add((owner[1], owner[2]))
                    else:
                        dirty.workloads.add(owner)
        elif kind is NODE:
            self.scheduling_generation += 1
            if new is None:
                dirty.gone_nodes.add(key[1])
            else:
                dirty.nodes.add(key[1])
        elif kind is DAEMONSET or kind.name in WORKLOADS:
            owner = (kind.name, *key)
            self._desired.pop(owner, None)
            if new is not None:
                if kind is DAEMONSET:
                    dirty.daemonsets.add(key)
                else:
                    dirty.workloads.add(owner)
            else:
                for pod_key in sorted(self._owned.pop(owner, set())):
                    self._owner_of.pop(pod_key, None)
                    if pod_key in self._objects[POD.name]:
                        self._remove(POD, pod_key)

    def _reconcile(self) -> None:
        """Run the controllers until they have nothing left to do."""
        if self._reconciling:
            return
        self._reconciling = True
        try:
            while self._dirty:
                dirty, self._dirty = self._dirty, _Dirty()
                for name in sorted(dirty.gone_nodes):
                    for key in sorted(self._pods_by_node.get(name, ())):
                        self._remove(POD, key)
                for key in sorted(dirty.bound_pods):
                    pod = self._objects[POD.name].get(key)
                    node_name = pod.spec.node_name if pod is not None else None
                    if node_name and ("", node_name) not in self._objects[NODE.name]:
                        self._remove(POD, key)
                for owner in sorted(dirty.workloads):
                    self._reconcile_workload(owner)
                daemonsets = self._objects[DAEMONSET.name]
                nodes = self._objects[NODE.name]
                pairs = {(ds, node) for ds in dirty.daemonsets if ds in daemonsets for node in nodes}
                pairs |= {
                    (ds, ("", name)) for name in dirty.nodes if ("", name) in nodes for ds in daemonsets
                }
                for ds_key, node_key in sorted(pairs):
                    self._reconcile_daemon(daemonsets[ds_key], nodes[node_key])
        finally:
            self._reconciling = False

    def _desired_pods(self, owner: tuple[str, str, str], workload: KubeObject) -> tuple[str, dict[str, Pod]]:
        """The pods the workload wants now by name, and the hash of its template (cached until it changes)."""
        cached = self._desired.get(owner)
        if cached is None:
            pods = {pod.metadata.name: pod for pod in workload_pods(workload)}
            cached = self._desired[owner] = (_template_hash(workload), pods)
        return cached

    def _reconcile_workload(self, owner: tuple[str, str, str]) -> None:
        workload = self._objects[owner[0]].get((owner[1], owner[2]))
        if workload is None:
            return
        template, desired = self._desired_pods(owner, workload)
        owned = self._owned.setdefault(owner, set())
        for key in sorted(owned):
            if key[1] not in desired or self._template_of.get(key) != template:
                self._remove(POD, key)
        for name, pod in desired.items():
            key = (owner[1], name)
            if key in self._objects[POD.name]:
                continue
            self._adopt(owner, template, _fresh_copy(pod))

    def _reconcile_daemon(self, daemonset: DaemonSet, node: Node) -> None:
        namespace = daemonset.metadata.namespace or DEFAULT_NAMESPACE
        owner = (DAEMONSET.name, namespace, daemonset.metadata.name)
        template = _template_hash(daemonset)
        name = f"{daemonset.metadata.name}-{_suffix(node.metadata.name)}"
        key = (namespace, name)
        existing = self._objects[POD.name].get(key)
        if existing is not None:
            if self._template_of.get(key) == template or self._owner_of.get(key) != owner:
                return
            self._remove(POD, key)
        if node.metadata.deletion_timestamp is not None or not _daemon_fits(daemonset, node):
            return
        spec = daemonset.spec.template.spec.model_copy(deep=True)
        spec.node_name = node.metadata.name
        spec.tolerations = [*spec.tolerations, *DAEMON_TOLERATIONS]
        pod = Pod(
            metadata=ObjectMeta(
                name=name,
                namespace=namespace,
                labels=dict(daemonset.spec.template.metadata.labels),
                annotations=dict(daemonset.spec.template.metadata.annotations),
                owner_references=[
                    OwnerReference(
                        api_version=DAEMONSET.api_version,
                        kind=DAEMONSET.name,
                        name=daemonset.metadata.name,
                        uid=daemonset.metadata.uid,
                        controller=True,
                        block_owner_deletion=True,
                    )
                ],
            ),
            spec=spec,
            status=PodStatus(
                phase=PodPhase.PENDING, conditions=[Condition(type="PodScheduled", status="True")]
            ),
        )
        self._adopt(owner, template, pod)

    def _adopt(self, owner: tuple[str, str, str], template: str, pod: Pod) -> None:
        key = key_of(pod)
        self._owned.setdefault(owner, set()).add(key)
        self._owner_of[key] = owner
        self._template_of[key] = template
        self._create(POD, pod)


def _daemon_fits(daemonset: DaemonSet, node: Node) -> bool:
    """Whether the DaemonSet runs a pod on the node: its NoSchedule and NoExecute taints are tolerated and the
    node selector and required node affinity match the node's labels."""
    tolerations = [*daemonset.spec.template.spec.tolerations, *DAEMON_TOLERATIONS]
    for taint in node.spec.taints:
        if taint.effect != TaintEffect.PREFER_NO_SCHEDULE and not tolerates(tolerations, taint):
            return False
    try:
        constraints = compile_constraints(Pod(spec=daemonset.spec.template.spec), respect_preferences=False)
    except InvalidPodConstraint:
        return False
    node_labels = {labels.HOSTNAME: node.metadata.name, **node.metadata.labels}
    offered = Requirements.from_labels(node_labels)
    return any(offered.compatible(term, frozenset()) is None for term in constraints.node_terms)


def _desired_healthy(pdb: PodDisruptionBudget, expected: int) -> int:
    """How many matching pods must stay healthy (policy/v1; percentages round up)."""
    spec = pdb.spec
    if spec.min_available is not None:
        return _scaled(spec.min_available, expected)
    if spec.max_unavailable is not None:
        return max(0, expected - _scaled(spec.max_unavailable, expected))
    return 0


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value.removesuffix("%")) * total / 100)


def _replicas(workload: Workload) -> int:
    if isinstance(workload, Job):
        spec = workload.spec
        return spec.parallelism if spec.completions is None else min(spec.parallelism, spec.completions)
    return workload.spec.replicas


def _template_hash(workload: Workload) -> str:
    text = json.dumps(workload.spec.template.model_dump(mode="json", by_alias=True), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fresh_copy(pod: Pod) -> Pod:
    """A pod to create from a cached desired pod: its own metadata, spec and status."""
    return pod.model_copy(
        update={
            "metadata": pod.metadata.model_copy(deep=True),
            "spec": pod.spec.model_copy(deep=True),
            "status": PodStatus(phase=PodPhase.PENDING),
        }
    )


_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(text: str) -> str:
    """Five characters derived from the text, from the alphabet Kubernetes uses in generated names."""
    number = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    characters = []
    for _ in range(5):
        number, digit = divmod(number, len(_SUFFIX_ALPHABET))
        characters.append(_SUFFIX_ALPHABET[digit])
    return "".join(characters)


def _display(key: Key) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def _document_name(document: Mapping[str, Any], namespaced: bool) -> str:
    """`namespace/name` (namespace defaulted) or `name`, for messages, from a document of any shape."""
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    if namespaced and name:
        return f"{metadata.get('namespace') or DEFAULT_NAMESPACE}/{name}"
    return name
