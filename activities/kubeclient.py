"""The Kubernetes API through the official `kubernetes` client: `KubernetesCluster` is the `core.cluster.ClusterAPI`
of a real cluster (AKS, or the local control plane of `nodewright demo`), configured by `load_cluster` from a
kubeconfig or, inside a pod, from its service account.

The official client is synchronous, and its calls never run on the asyncio loop. Each request runs on a thread
pool of the cluster's own (`threads` workers, with urllib3's connection pool sized to match so every thread
keeps its connection alive), not on `asyncio.to_thread`'s default executor: that one is shared with everything
else in the process and sized by CPU count, so a burst of snapshot lists or drain evictions would queue behind
unrelated work, or starve it. Each watched kind streams on a thread of its own instead, because a watch blocks
for minutes and would hold a pool thread hostage; its events reach the loop through `call_soon_threadsafe`.

Responses are read as raw JSON (`_preload_content=False`) and parsed by the models of `core.api`: the client's
generated models cost a second validation pass and reject fields they do not know, which a newer API server
sends. All requests of one cluster share a token bucket (`qps`, `burst`), as client-go's rate limiter does.
Errors come back as the typed errors of `core.errors`. Changes to a Node or a NodeClaim's metadata are
read-modify-write: a JSON merge patch that carries the resourceVersion read, which the API server checks as a
precondition (409 on a concurrent change, then re-read and retry), so nobody else's change is overwritten.
Deleting or evicting something that is already gone counts as done.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import contextlib
import copy
import functools
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
from kubernetes.watch.watch import iter_resp_lines
from pydantic import BaseModel, ValidationError
from tenacity import Retrying, retry_if_exception_type, wait_random_exponential

from activities.informer import Emit, SnapshotInformer, object_key, revision
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import (
    DEFAULT_NAMESPACE,
    Deployment,
    Event,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodTemplate,
    ReplicaSet,
    Secret,
    StatefulSet,
    VolumeAttachment,
)
from core.api.manifests import ManifestError, Manifests, ParseCache, load_yaml, parse_manifests, without_nulls
from core.api.meta import OwnerReference, Taint
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.capacity_buffer import target_of
from core.cluster import EventType, WatchEvent
from core.errors import (
    CloudError,
    ConflictError,
    InvalidError,
    NotFoundError,
    PDBViolationError,
    ThrottledError,
    TransientError,
)
from core.events import NOMINATED, NOMINATION_BURST, NOMINATION_QPS, Deduper, dedupe_key, dedupe_rule

logger = logging.getLogger("nodewright.kube")

T = TypeVar("T")

DEFAULT_QPS = 200.0
DEFAULT_BURST = 300
"""client-go's defaults (5 and 10) are far too low for a controller that drains and patches nodes in bulk."""
DEFAULT_THREADS = 32
REMEMBERED_OBJECTS = 4096
"""Nodes and NodeClaims this client last read or wrote, kept as the first guess of a read-modify-write."""
JUST_WRITTEN_SECONDS = 5.0
"""How long the answer to this client's write of a Node may stand in for the read that follows it
(`node_seen`)."""
USER_AGENT = "nodewright"
"""The client's User-Agent; each process adds its part (`nodewright/worker`)."""
DEFAULT_WATCH_TIMEOUT_SECONDS = 240
"""How long one watch request lasts before the API server ends it and it is reopened from the last version."""
REPORTING_CONTROLLER = "karpenter"
FIELD_MANAGER = "nodewright"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def field_patch(current: Mapping[str, Any], merge: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A two-level merge patch (`{"metadata": {"labels": {...}, "finalizers": [...]}, "spec": {...}}`) made
    from `current`, as a JSON patch that holds only if what it changes is still as read: each label or
    annotation is set or removed on its own, and each other field is tested to be as read before it is
    replaced. Kubelet heartbeats and other writers' fields no longer make it fail, as a resourceVersion
    precondition on the whole object did. A field that was absent cannot be tested: then the
    resourceVersion is."""
    operations: list[dict[str, Any]] = []
    whole_object = False
    for section, fields in merge.items():
        held_section = current.get(section) or {}
        for field, value in fields.items():
            path = _pointer(section, field)
            held = held_section.get(field)
            if isinstance(value, dict) and isinstance(held, dict):
                for key, item in value.items():
                    if item is None:
                        if key in held:
                            operations.append({"op": "remove", "path": _pointer(section, field, key)})
                    else:
                        operations.append({"op": "add", "path": _pointer(section, field, key), "value": item})
            elif field in held_section:
                operations.append({"op": "test", "path": path, "value": held})
                operations.append({"op": "replace", "path": path, "value": value})
            else:
                whole_object = True
                operations.append({"op": "add", "path": path, "value": value})
    if whole_object:
        version = current["metadata"]["resourceVersion"]
        operations.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
    return operations


FAILED_TEST = "the server rejected our request due to an error in our request"
"""The API server's whole answer (422, reason Invalid, no details) to a JSON patch whose test failed; an
object it finds invalid is answered with the field and the rule instead."""


def _precondition_failed(error: CloudError) -> bool:
    if isinstance(error, ConflictError):
        return error.code == "Conflict"
    return error.code == "Invalid" and str(error) == FAILED_TEST


class ClusterConfigError(Exception):
    """The cluster cannot be used as configured: no kubeconfig, an unknown context, an unreachable API server or
    refused credentials. The message is one line that names the file, the context or the server."""


# --- what nodewright reads -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind nodewright reads, with where it lives in the REST API."""

    kind: str
    api_version: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def custom(self) -> tuple[str, str, str]:
        """Group, version and plural, as `CustomObjectsApi` takes them."""
        group, _, version = self.api_version.rpartition("/")
        return group, version, self.plural


POD = Resource("Pod", "v1", "pods")
NODE = Resource("Node", "v1", "nodes")
DAEMONSET = Resource("DaemonSet", "apps/v1", "daemonsets")
PDB = Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets")
NODEPOOL = Resource("NodePool", "karpenter.sh/v1", "nodepools")
NODECLAIM = Resource("NodeClaim", "karpenter.sh/v1", "nodeclaims")
NODECLASS = Resource("AKSNodeClass", "karpenter.azure.com/v1beta1", "aksnodeclasses")
NODEOVERLAY = Resource("NodeOverlay", "karpenter.sh/v1alpha1", "nodeoverlays")
"""Read only with the NodeOverlay feature gate on (`KubernetesCluster.node_overlays`)."""
CAPACITYWINDOW = Resource("CapacityWindow", "nodewright.io/v1alpha1", "capacitywindows")
"""nodewright's own extension (`core.api.capacitywindow`); listed by the controller, never watched, so a cluster
without its CRD runs as before."""
CAPACITYBUFFER = Resource("CapacityBuffer", "autoscaling.x-k8s.io/v1beta1", "capacitybuffers")
"""Read and watched only with the CapacityBuffer feature gate on (`KubernetesCluster.capacity_buffers`)."""
PODTEMPLATE = Resource("PodTemplate", "v1", "podtemplates")
DEPLOYMENT = Resource("Deployment", "apps/v1", "deployments")
STATEFULSET = Resource("StatefulSet", "apps/v1", "statefulsets")
REPLICASET = Resource("ReplicaSet", "apps/v1", "replicasets")
BUFFER_KINDS = (CAPACITYBUFFER, PODTEMPLATE, DEPLOYMENT, STATEFULSET, REPLICASET)
"""What the controller also watches with the CapacityBuffer gate on: buffers and what their templates come from."""
LEASE = Resource("Lease", "coordination.k8s.io/v1", "leases")
VOLUME_ATTACHMENT = Resource("VolumeAttachment", "storage.k8s.io/v1", "volumeattachments")

SNAPSHOT_KINDS = (NODEPOOL, NODECLAIM, NODECLASS, POD, NODE, DAEMONSET, PDB)
"""What the scheduler reads (`core.api.manifests.Manifests`)."""
WATCHED_KINDS = (POD, NODE, NODECLAIM, NODEPOOL, NODECLASS)
"""What the controller watches."""

_API_VERSIONS = {
    **{resource.kind: resource.api_version for resource in SNAPSHOT_KINDS},
    "Secret": "v1",
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "Event": "events.k8s.io/v1",
    "Lease": "coordination.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    CAPACITYWINDOW.kind: CAPACITYWINDOW.api_version,
    "PodTemplate": "v1",
    "CapacityBuffer": CAPACITYBUFFER.api_version,
}
"""The API version the administration helpers use for a kind named alone (others are looked up by discovery)."""
SCALABLE_MODELS: dict[str, type[Deployment | StatefulSet | ReplicaSet]] = {
    "Deployment": Deployment,
    "StatefulSet": StatefulSet,
    "ReplicaSet": ReplicaSet,
}
"""The models of what a CapacityBuffer's scalableRef may name."""


def _manifest(model: BaseModel) -> dict[str, Any]:
    """A model as the camelCase JSON the API server takes."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _with_kind(resource: Resource, items: Iterable[dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """List items with their apiVersion and kind, which a list response leaves out."""
    return [{**item, "apiVersion": resource.api_version, "kind": resource.kind} for item in items]


ListPage = Callable[[str | None], Mapping[str, Any]]
"""One page of a list, given the continue token of the previous page (None for the first)."""


def list_every_page(list_page: ListPage) -> tuple[builtins.list[dict[str, Any]], str]:
    """The items of every page of a list, and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = list_page(token)
        items.extend(page.get("items") or ())
        metadata = page.get("metadata") or {}
        token = metadata.get("continue") or None
        if token is None:
            return items, str(metadata.get("resourceVersion") or "")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# --- errors ----------------------------------------------------------------------------------------------


def _status_body(error: ApiException) -> dict[str, Any]:
    """The `Status` object of an error response (empty when the body is not one)."""
    try:
        body = json.loads(error.body) if error.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(error: ApiException, status: Mapping[str, Any]) -> float:
    header = str((error.headers or {}).get("Retry-After") or "")
    with contextlib.suppress(ValueError):
        return float(header)
    seconds = (status.get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) else 1.0


def status_error(code: int, status: Mapping[str, Any], retry_after: float = 1.0) -> CloudError:
    """The typed error for an API status code and its `Status` object; the message is the API server's (for
    an invalid object it names the field)."""
    message = str(status.get("message") or f"HTTP {code} {status.get('reason') or ''}".strip())
    reason = str(status.get("reason") or "")
    if code == 404:
        return NotFoundError(message, code=reason or "NotFound")
    if code == 409:
        return ConflictError(message, code=reason or "Conflict")
    if code == 410:
        return ConflictError(message, code="Expired")
    if code == 429:
        causes = (status.get("details") or {}).get("causes") or ()
        budgets = [c for c in causes if isinstance(c, dict) and c.get("reason") == "DisruptionBudget"]
        if budgets:
            reason = "DisruptionBudget"  # the eviction API's answer when a PodDisruptionBudget forbids it now
            # Which budget, and why: "The disruption budget web needs 2 healthy pods and has 2 currently".
            details = "; ".join(str(cause.get("message")) for cause in budgets if cause.get("message"))
            message = f"{message.rstrip('.')}: {details}" if details else message
        return ThrottledError(message, retry_after, code=reason or "TooManyRequests")
    if code >= 500 or code == 0:
        return TransientError(message, code=reason or "InternalError")
    return InvalidError(message, code=reason or "Invalid")


def api_error(error: ApiException) -> CloudError:
    """The typed error for an `ApiException` (404 NotFound, 409 Conflict, 400/422 Invalid, 429 Throttled with its
    Retry-After, 5xx Transient; 401/403 are Invalid, as retrying will not help)."""
    status = _status_body(error)
    if not status and error.reason:
        status = {"message": _one_line(error.reason)}
    return status_error(int(error.status or 0), status, _retry_after(error, status))


def _connection_error(what: str, error: BaseException) -> TransientError:
    return TransientError(f"{what}: {_reason(error)}", code="ConnectionError")


def _reason(error: BaseException) -> str:
    """The root cause of a connection failure in a few words ("[Errno 111] Connection refused")."""
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    text = _one_line(error) or type(error).__name__
    return text.rpartition("Failed to establish a new connection: ")[2]


# --- rate limit ------------------------------------------------------------------------------------------


class TokenBucket:
    """`qps` requests a second on average, up to `burst` at once; shared by every thread of one cluster."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"the rate limit needs qps > 0 and burst >= 1, not qps={qps}, burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 when one was there)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self) -> bool:
        """Take a token if one is there now (client-go's TryAccept); False leaves the bucket as it was."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True


# --- watch -----------------------------------------------------------------------------------------------


class WatchStream(Protocol):
    """One open watch request: its events as decoded JSON, until the server ends it."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def interrupt(self) -> None:
        """From another thread: make the reader's blocked read return now."""
        ...

    def close(self) -> None: ...


class _ResponseStream:
    """A watch response read line by line. A broken connection is a `TransientError`."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in iter_resp_lines(self._response):
                if line:
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise _connection_error("the watch stream broke", error) from error

    def interrupt(self) -> None:
        # Shuts the socket down for reading, which unblocks a read in progress on the watch thread.
        with contextlib.suppress(Exception):
            self._response.shutdown()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._response.close()
            self._response.release_conn()


class _Stopped(Exception):
    """The watch was asked to stop."""


class ListWatch:
    """One kind's list-then-watch loop, as a controller's informer runs it, on a thread of its own.

    It lists (paged) and hands on what is new or changed since the consumer last saw it (ADDED for an object
    it never saw, MODIFIED for a changed one) and a DELETED for each object that vanished between two lists,
    then watches from the list's resourceVersion with bookmarks, and reopens the watch from the last version
    seen whenever the server ends it. A 410 Gone (the version was compacted away) means list again; a broken
    connection or a 5xx means retry with jittered exponential backoff. `seen` (the resourceVersion handed on
    for each object) makes sure nothing is handed on twice. An error that retrying will not fix (403, a kind
    the server does not serve) is handed to `emit` and ends the loop.
    """

    def __init__(
        self,
        resource: Resource,
        list_page: ListPage,
        open_watch: Callable[[str], WatchStream],
        emit: Emit,
        *,
        resource_version: str | None = None,
        reconnect_max_wait: float = 5.0,
    ) -> None:
        self.resource = resource
        self.seen: dict[tuple[str, str], str] = {}
        """The resourceVersion of every object handed on, by (namespace, name)."""
        self._list_page = list_page
        self._open_watch = open_watch
        self._emit = emit
        self.resource_version = resource_version
        """Where the next watch starts: the last version listed or watched (None: list first)."""
        self._listed = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._retrying = Retrying(
            retry=retry_if_exception_type((TransientError, ThrottledError)),
            wait=wait_random_exponential(multiplier=0.1, max=reconnect_max_wait),
            sleep=self._pause,
            before_sleep=self._log_retry,
            reraise=True,
        )

    @property
    def listed(self) -> bool:
        """Whether the first list has been handed on."""
        return self._listed

    def stop(self) -> None:
        """Make `run` return soon (an open watch is interrupted); safe from any thread."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.interrupt()

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                for attempt in self._retrying:
                    with attempt:
                        self._step()
        except _Stopped:
            return
        except Exception as error:
            if not self._stop.is_set():
                self._emit(error)

    def _pause(self, seconds: float) -> None:
        """The backoff between retries, cut short by `stop`."""
        self._stop.wait(seconds)

    def _log_retry(self, state: Any) -> None:
        if not self._stop.is_set() and state.outcome is not None:
            logger.warning(
                "watching %s failed (attempt %d), retrying: %s",
                self.resource.kind,
                state.attempt_number,
                state.outcome.exception(),
            )

    def _step(self) -> None:
        """List when there is no version to watch from, else watch until the server ends the watch."""
        if self._stop.is_set():
            raise _Stopped
        try:
            if self.resource_version is None:
                self._relist()
            else:
                self._watch(self.resource_version)
        except ConflictError as error:
            if error.code != "Expired":
                raise
            self.resource_version = None  # 410 Gone: that version was compacted away, list again

    def _relist(self) -> None:
        items, version = list_every_page(self._list_page)
        current: dict[tuple[str, str], str] = {}
        for item in _with_kind(self.resource, items):
            key = object_key(item)
            item_version = str(item["metadata"].get("resourceVersion") or "")
            current[key] = item_version
            previous = self.seen.get(key)
            if previous != item_version:
                self._hand_on(EventType.ADDED if previous is None else EventType.MODIFIED, item)
        for namespace, name in sorted(self.seen.keys() - current.keys()):
            # Deleted while no watch was open: only the name and the last version seen are known.
            metadata = {"name": name, "resourceVersion": self.seen[namespace, name]}
            if namespace:
                metadata["namespace"] = namespace
            gone = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "metadata": metadata}
            self._hand_on(EventType.DELETED, gone, revision(version))
        self.seen = current
        self._listed = True
        self.resource_version = version

    def _watch(self, version: str) -> None:
        stream = self._open_watch(version)
        with self._lock:
            self._stream = stream
        try:
            if self._stop.is_set():
                raise _Stopped
            for event in stream:
                if self._stop.is_set():
                    raise _Stopped
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise status_error(int(obj.get("code") or 0), obj)
                if kind in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED):
                    self._on_event(EventType(kind), obj)
                # A bookmark only moves the version on; a broken stream resumes from here.
                self.resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _on_event(self, kind: EventType, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        version = str(obj["metadata"].get("resourceVersion") or "")
        if kind is EventType.DELETED:
            if key not in self.seen and self._listed:
                return  # a list already handed on its deletion
            self.seen.pop(key, None)
        else:
            if self.seen.get(key) == version:
                return
            self.seen[key] = version
        self._hand_on(kind, obj)

    def _hand_on(self, kind: EventType, obj: dict[str, Any], version: int | None = None) -> None:
        namespace, name = object_key(obj)
        at = revision(obj["metadata"].get("resourceVersion")) if version is None else version
        self._emit(
            WatchEvent(
                type=kind,
                kind=self.resource.kind,
                name=name,
                namespace=namespace or None,
                resource_version=at,
                object=obj,
            )
        )


# --- configuration ---------------------------------------------------------------------------------------


def load_cluster(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    threads: int = DEFAULT_THREADS,
    watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
    request_timeout_seconds: float = 30.0,
    user_agent: str = USER_AGENT,
) -> KubernetesCluster:
    """The cluster of a kubeconfig: `kubeconfig`, else `$NODEWRIGHT_KUBECONFIG`, else `$KUBECONFIG` (paths joined
    by `:` are merged), else `~/.kube/config`; in a pod (`$KUBERNETES_SERVICE_HOST`) with none of them set, the
    pod's service account. `ClusterConfigError` when the file is missing or unreadable or the context unknown;
    call `check_connection()` to find out whether the server answers and accepts the credentials."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("NODEWRIGHT_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as error:
            raise ClusterConfigError(f"in-cluster service account: {_one_line(error)}") from None
        source = "the in-cluster service account"
    else:
        source = _load_kubeconfig(path or "~/.kube/config", context, configuration)
    return KubernetesCluster(
        configuration,
        qps=qps,
        burst=burst,
        threads=threads,
        watch_timeout_seconds=watch_timeout_seconds,
        request_timeout_seconds=request_timeout_seconds,
        source=source,
        user_agent=user_agent,
    )


def _load_kubeconfig(path: str, context: str | None, configuration: k8s.Configuration) -> str:
    """Fill `configuration` from the kubeconfig; where it came from, for messages."""
    files = [Path(item).expanduser() for item in path.split(os.pathsep) if item]
    existing = [item for item in files if item.is_file()]
    if not existing:
        raise ClusterConfigError(f"kubeconfig {path}: no such file")
    for item in existing:
        if not os.access(item, os.R_OK):
            raise ClusterConfigError(f"kubeconfig {item}: permission denied")
    config_file = os.pathsep.join(str(item) for item in existing)
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file)
    except (ConfigException, yaml.YAMLError, OSError, TypeError, AttributeError) as error:
        raise ClusterConfigError(f"kubeconfig {config_file}: {_one_line(error)}") from None
    names = [str(item.get("name")) for item in contexts or () if isinstance(item, dict)]
    chosen = context or (current or {}).get("name")
    if not chosen:
        raise ClusterConfigError(f"kubeconfig {config_file} sets no current-context; name one with --context")
    if chosen not in names:
        known = ", ".join(names) or "none"
        raise ClusterConfigError(f"kubeconfig {config_file} has no context {chosen!r} (it has: {known})")
    try:
        k8s_config.load_kube_config(
            config_file, chosen, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, OSError, TypeError, ValueError) as error:
        raise ClusterConfigError(f"kubeconfig {config_file}, context {chosen}: {_one_line(error)}") from None
    return f"kubeconfig {config_file}, context {chosen}"


# --- the cluster -----------------------------------------------------------------------------------------


@dataclass
class _EventSeries:
    """An Event this client published, and how often it has been observed."""

    namespace: str
    name: str
    count: int = 1


class KubernetesCluster:
    """A Kubernetes cluster through the official client. Use it as an async context manager, or call `close()`."""

    def __init__(
        self,
        configuration: k8s.Configuration,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        threads: int = DEFAULT_THREADS,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
        request_timeout_seconds: float = 30.0,
        connect_timeout_seconds: float = 5.0,
        page_size: int = 500,
        conflict_retries: int = 20,
        reconnect_max_wait: float = 5.0,
        reporting_instance: str | None = None,
        source: str = "",
        user_agent: str = USER_AGENT,
    ) -> None:
        # Every pool thread and every watch keeps a connection of its own.
        configuration.connection_pool_maxsize = (
            threads + len(WATCHED_KINDS) + len(BUFFER_KINDS) + len(SNAPSHOT_KINDS) + 2
        )
        api_client = k8s.ApiClient(configuration)
        # The API server's audit log and metrics tell our requests apart by it.
        api_client.user_agent = user_agent
        self.api_client = api_client
        self.server: str = configuration.host
        self.source = source or self.server
        """Where the configuration came from (kubeconfig and context), for messages."""
        self.limiter = TokenBucket(qps, burst)
        self.reporting_instance = reporting_instance or socket.gethostname()
        self._core = k8s.CoreV1Api(api_client)
        self._apps = k8s.AppsV1Api(api_client)
        self._policy = k8s.PolicyV1Api(api_client)
        self._storage = k8s.StorageV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="nodewright-kube")
        self._timeout = (connect_timeout_seconds, request_timeout_seconds)
        self._watch_timeout = watch_timeout_seconds
        self._page_size = page_size
        self._conflict_retries = conflict_retries
        self._reconnect_max_wait = reconnect_max_wait
        self._remembered: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._written: dict[tuple[str, str], float] = {}
        """When this client last wrote an object it remembers, until `node_seen` takes that answer."""
        self._event_deduper = Deduper(REMEMBERED_OBJECTS)
        self.event_clock: Callable[[], float] = time.monotonic
        """The clock of the events' de-duplication windows (tests move it on)."""
        self._nominations = TokenBucket(NOMINATION_QPS, NOMINATION_BURST)
        self._event_series: OrderedDict[tuple[str, ...], _EventSeries] = OrderedDict()
        """The Events published, by what makes a repeat identical: a repeat counts on the earlier one."""
        self._parsed: ParseCache = {}
        """The last snapshot's objects as parsed: the next shares those unchanged since (read them only)."""
        self._parse_lock = threading.Lock()
        self._dynamic_client: DynamicClient | None = None
        self._dynamic_lock = threading.Lock()
        self._listers: dict[str, Callable[..., Any]] = {
            POD.kind: self._core.list_pod_for_all_namespaces,
            NODE.kind: self._core.list_node,
            DAEMONSET.kind: self._apps.list_daemon_set_for_all_namespaces,
            PDB.kind: self._policy.list_pod_disruption_budget_for_all_namespaces,
            VOLUME_ATTACHMENT.kind: self._storage.list_volume_attachment,
            PODTEMPLATE.kind: self._core.list_pod_template_for_all_namespaces,
            DEPLOYMENT.kind: self._apps.list_deployment_for_all_namespaces,
            STATEFULSET.kind: self._apps.list_stateful_set_for_all_namespaces,
            REPLICASET.kind: self._apps.list_replica_set_for_all_namespaces,
            **{
                resource.kind: functools.partial(self._custom.list_cluster_custom_object, *resource.custom)
                for resource in (NODEPOOL, NODECLAIM, NODECLASS, NODEOVERLAY, CAPACITYWINDOW, CAPACITYBUFFER)
            },
        }
        self.node_overlays = False
        """Whether snapshots include NodeOverlays (Karpenter's NodeOverlay feature gate)."""
        self.capacity_buffers = False
        """Whether snapshots include CapacityBuffers and the objects they name, and the watch follows them
        (Karpenter's CapacityBuffer feature gate)."""
        self.informer: SnapshotInformer | None = None
        """Set by `start_informer`: snapshots then read watched objects instead of listing them."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self.informer is not None:
            self.informer.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.api_client.close()

    # --- requests ----------------------------------------------------------------------------------------

    def _request(self, call: Callable[[], T], what: str) -> T:
        """One request on this thread, after the rate limiter allows it; failures as `core.errors`."""
        delay = self.limiter.reserve()
        if delay > 0:
            time.sleep(delay)
        try:
            return call()
        except ApiException as error:
            raise api_error(error) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise _connection_error(f"{what} ({self.server})", error) from error

    def _raw(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A method of the generated API classes, answered as decoded JSON."""

        def call() -> Any:
            response = method(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            try:
                data = response.data
            finally:
                response.release_conn()
            return json.loads(data) if data else None

        return self._request(call, _method_name(method))

    async def _in_thread(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args, **kwargs))

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._in_thread(self._raw, method, *args, **kwargs)

    async def _get(self, method: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call(method, *args)
        except NotFoundError:
            return None
        return result

    def _remember(self, kind: str, raw: dict[str, Any]) -> dict[str, Any]:
        """Keep the latest version of a Node or NodeClaim seen, so that the next change to it can start from it
        instead of a GET (its preconditions catch a version that is no longer the latest)."""
        key = (kind, raw["metadata"]["name"])
        self._remembered[key] = raw
        self._remembered.move_to_end(key)
        if len(self._remembered) > REMEMBERED_OBJECTS:
            forgotten, _ = self._remembered.popitem(last=False)
            self._written.pop(forgotten, None)
        return raw

    def _recall(self, kind: str, name: str) -> dict[str, Any] | None:
        self._written.pop((kind, name), None)
        return self._remembered.pop((kind, name), None)

    def _just_written(self, kind: str, name: str) -> dict[str, Any] | None:
        """What this client's write of the object answered, if that was under `JUST_WRITTEN_SECONDS` ago and no
        read took it since: the object as the server holds it after that write, which a GET would return too
        unless someone wrote since (those writes are news the watches bring)."""
        written = self._written.pop((kind, name), None)
        if written is None or time.monotonic() - written > JUST_WRITTEN_SECONDS:
            return None
        return self._remembered.get((kind, name))

    async def _delete(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(NotFoundError):
            await self._call(method, *args, **kwargs)

    def _list_page(
        self, resource: Resource, token: str | None, namespace: str | None = None, **selectors: str
    ) -> dict[str, Any]:
        """One page of a kind's list (pods alone can be listed in one namespace)."""
        lister = self._listers[resource.kind]
        if namespace is not None and resource is POD:
            lister = functools.partial(self._core.list_namespaced_pod, namespace)
        options = {key: value for key, value in selectors.items() if value}
        page: dict[str, Any] = self._raw(lister, limit=self._page_size, _continue=token, **options)
        return page

    async def _list(
        self, resource: Resource, namespace: str | None = None, **selectors: str
    ) -> builtins.list[dict[str, Any]]:
        """Every object of a kind, with its apiVersion and kind."""
        list_page = functools.partial(self._list_page, resource, namespace=namespace, **selectors)
        items, _ = await self._in_thread(list_every_page, list_page)
        return _with_kind(resource, items)

    # --- ClusterAPI: reads -------------------------------------------------------------------------------

    async def check_connection(self) -> None:
        """GET /version and list one Node: `ClusterConfigError` (one line naming the server and the kubeconfig)
        when the server does not answer, or refuses the credentials (401) or the permission to read (403)."""
        await self._in_thread(self._check_connection)

    def _check_connection(self) -> None:
        version = k8s.VersionApi(self.api_client)
        try:
            for request in (version.get_code, functools.partial(self._core.list_node, limit=1)):
                response: Any = request(_preload_content=False, _request_timeout=self._timeout)
                # Read the (small) body first: a connection released mid-response is dropped, which the
                # API server logs as a canceled request and urllib3 as a retried one.
                response.read()
                response.release_conn()
        except ApiException as error:
            status = _status_body(error).get("message") or _one_line(error.reason)
            if error.status in (401, 403):
                raise ClusterConfigError(
                    f"the API server {self.server} refused the credentials of {self.source}: "
                    f"{error.status} {_one_line(status)}"
                ) from None
            if not error.status:
                raise ClusterConfigError(
                    f"cannot reach the API server {self.server} ({self.source}): {_one_line(status)}"
                ) from None
            raise ClusterConfigError(
                f"the API server {self.server} ({self.source}) answered {error.status}: {_one_line(status)}"
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ClusterConfigError(
                f"cannot reach the API server {self.server} ({self.source}): {_reason(error)}"
            ) from None

    async def ping(self) -> None:
        """GET /version: whether the API server answers now (`TransientError` when it does not), for
        readiness probes."""
        await self._call(k8s.VersionApi(self.api_client).get_code)

    @property
    def snapshot_kinds(self) -> tuple[Resource, ...]:
        """What `snapshot` reads: `SNAPSHOT_KINDS`, and NodeOverlays and CapacityBuffers with their gates on."""
        kinds = (*SNAPSHOT_KINDS, NODEOVERLAY) if self.node_overlays else SNAPSHOT_KINDS
        return (*kinds, CAPACITYBUFFER) if self.capacity_buffers else kinds

    def start_informer(self) -> None:
        """Follow every kind `snapshot` reads with a watch (`activities.informer`), so that snapshots stop listing
        them once each kind has been listed once. For a long-running process that plans: the worker."""
        if self.informer is not None:
            return
        resources = {resource.kind: resource for resource in self.snapshot_kinds}

        def watch_for(kind: str, emit: Emit) -> ListWatch:
            resource = resources[kind]
            return ListWatch(
                resource,
                functools.partial(self._list_page, resource),
                functools.partial(self._open_watch, resource),
                emit,
                reconnect_max_wait=self._reconnect_max_wait,
            )

        self.informer = SnapshotInformer(list(resources), watch_for)
        self.informer.start()

    async def snapshot(self, *, fresh: bool = False) -> Manifests:
        """Every object the scheduler reads: from the informer when one is started and synced, else listed
        concurrently (each kind at its own resource version); `fresh` always lists. Other providers' NodePools and
        NodeClaims are left out (`Manifests.leave_other_providers`)."""
        kinds = self.snapshot_kinds
        items = None
        if self.informer is not None and not fresh:
            items = await asyncio.to_thread(self.informer.items, [resource.kind for resource in kinds])
        if items is None:
            lists = await asyncio.gather(*(self._list(resource) for resource in kinds))
            items = [item for listed in lists for item in listed]
        # Thousands of objects take seconds to parse: not on the event loop, where workflow tasks wait. Those
        # unchanged since the last snapshot are not parsed again.
        manifests = await asyncio.to_thread(self._parse_snapshot, items)
        manifests.leave_other_providers()
        if manifests.capacitybuffers:
            await self._buffer_targets(manifests)
        return manifests

    async def _buffer_targets(self, manifests: Manifests) -> None:
        """Add the PodTemplates and workloads the CapacityBuffers name (one GET each; those missing stay out,
        and the buffer's resolution says so). Not parsed as manifests: a Deployment must not become pods."""
        wanted = sorted({target for b in manifests.capacitybuffers if (target := target_of(b)) is not None})
        found = await asyncio.gather(
            *(self.get_object(kind, name, namespace) for kind, namespace, name in wanted)
        )
        for (kind, _, _), raw in zip(wanted, found, strict=True):
            if raw is None:
                continue
            try:
                if kind == PODTEMPLATE.kind:
                    manifests.podtemplates.append(PodTemplate.model_validate(without_nulls(raw)))
                else:
                    manifests.scalables.append(SCALABLE_MODELS[kind].model_validate(without_nulls(raw)))
            except ValidationError as error:
                manifests.problems.append(f"cluster: {kind} {raw['metadata'].get('name')}: {error}")

    def _parse_snapshot(self, items: builtins.list[dict[str, Any]]) -> Manifests:
        with self._parse_lock:
            return parse_manifests(items, "cluster", self._parsed)

    def node_seen(self, name: str) -> Node | None:
        raw = self._just_written(NODE.kind, name)
        if raw is None and self.informer is not None:
            raw = self.informer.get(NODE.kind, name)  # the informer's own copy: parsed, never written from
        return None if raw is None else Node.model_validate(raw)

    async def get_node(self, name: str) -> Node | None:
        raw = await self._get(self._core.read_node, name)
        return None if raw is None else Node.model_validate(self._remember(NODE.kind, raw))

    async def find_node_by_provider_id(self, provider_id: str) -> Node | None:
        # Nodes support no field selector on spec.providerID. Most clouds name the Node after the instance
        # (on Azure the VM, `.../virtualMachines/aks-default-abcde`): try that name first, so a lookup is one
        # GET, not a LIST of every Node (which made registering N nodes cost N LISTs of N Nodes).
        guess = provider_id.rstrip("/").rpartition("/")[2].lower()
        if guess:
            # The worker's informer usually holds the Node by the time its lifecycle looks (the controller's signal
            # that woke it came from a watch too). Its copy may lag: the write that follows tests the fields it
            # changes, so a stale one costs a second try, never someone else's change.
            held = self.informer.get(NODE.kind, guess) if self.informer is not None else None
            if held is not None and (held.get("spec") or {}).get("providerID") == provider_id:
                return Node.model_validate(self._remember(NODE.kind, copy.deepcopy(held)))
            node = await self.get_node(guess)
            if node is not None and node.spec.provider_id == provider_id:
                return node

        # Not under that name (or not yet there): the informer's Nodes when it follows them, so that each
        # lifecycle waiting for its Node does not LIST every Node; else a LIST.
        def matches(item: Mapping[str, Any]) -> bool:
            return (item.get("spec") or {}).get("providerID") == provider_id

        found = self.informer.matching(NODE.kind, matches) if self.informer is not None else None
        if found is None:
            found = [item for item in await self._list(NODE) if matches(item)]
        return Node.model_validate(found[0]) if found else None

    async def get_nodeclaim(self, name: str, *, cached: bool = False) -> NodeClaim | None:
        held = self.informer.get(NODECLAIM.kind, name) if cached and self.informer is not None else None
        if held is not None:  # the informer's own copy: never a write's starting point (`_remember`)
            return NodeClaim.parse(held)
        raw = await self._get(self._custom.get_cluster_custom_object, *NODECLAIM.custom, name)
        return None if raw is None else NodeClaim.parse(self._remember(NODECLAIM.kind, raw))

    async def list_pods_on_node(self, node_name: str) -> builtins.list[Pod]:
        items = await self._list(POD, field_selector=f"spec.nodeName={node_name}")
        return [Pod.model_validate(item) for item in items]

    async def list_volume_attachments(self, node_name: str) -> builtins.list[VolumeAttachment]:
        """The VolumeAttachments of a node (the API has no field selector for it: all are listed)."""
        items = await self._list(VOLUME_ATTACHMENT)
        attachments = [VolumeAttachment.model_validate(item) for item in items]
        return [attachment for attachment in attachments if attachment.spec.node_name == node_name]

    async def get_persistent_volume_claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        raw = await self._get(self._core.read_namespaced_persistent_volume_claim, name, namespace)
        return None if raw is None else PersistentVolumeClaim.model_validate(raw)

    async def read_secret(self, namespace: str, name: str) -> Secret | None:
        """The Secret with its data base64-decoded; `InvalidError` (naming the Secret and key, never a value) when
        a value is not text."""
        raw = await self._get(self._core.read_namespaced_secret, name, namespace)
        if raw is None:
            return None
        data = {}
        for key, value in (raw.get("data") or {}).items():
            try:
                data[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise InvalidError(
                    f"Secret {namespace}/{name}: data.{key} is not base64-encoded text", code="Invalid"
                ) from None
        return Secret.model_validate({**raw, "data": data})

    async def create_secret(self, secret: Mapping[str, Any]) -> Secret:
        """Create the Secret (`stringData` is stored base64-encoded, as the API server does); `ConflictError`
        (AlreadyExists) when one of its name exists."""
        namespace = secret["metadata"]["namespace"]
        created: dict[str, Any] = await self._call(
            self._core.create_namespaced_secret, namespace, dict(secret)
        )
        return Secret.model_validate({**created, "data": {}})

    async def delete_secret(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the Secret if it is still the one with this uid; False when it is gone or was replaced by
        another of the same name (which is left alone)."""
        try:
            await self._call(
                self._core.delete_namespaced_secret, name, namespace, body={"preconditions": {"uid": uid}}
            )
        except (NotFoundError, ConflictError):
            return False
        return True

    async def get_nodepool(self, name: str) -> NodePool | None:
        raw = await self._get(self._custom.get_cluster_custom_object, *NODEPOOL.custom, name)
        return None if raw is None else NodePool.parse(raw)

    async def get_nodeclass(self, name: str) -> AKSNodeClass | None:
        raw = await self._get(self._custom.get_cluster_custom_object, *NODECLASS.custom, name)
        return None if raw is None else AKSNodeClass.parse(raw)

    async def patch_nodeclass_status(self, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into the AKSNodeClass's status subresource; a NodeClass that is gone is left alone."""
        with contextlib.suppress(NotFoundError):
            await self._call(
                self._custom.patch_cluster_custom_object_status,
                *NODECLASS.custom,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
            )

    # --- ClusterAPI: writes ------------------------------------------------------------------------------

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: dict[str, Any],
        resource_version: str,
        namespace: str | None = None,
    ) -> bool:
        """A merge patch of the status subresource of a NodePool, AKSNodeClass, NodeOverlay, CapacityWindow or (in
        `namespace`) CapacityBuffer, with the resourceVersion as its precondition (none when it is empty: the
        fields patched are the caller's alone)."""
        resource = {r.kind: r for r in (NODEPOOL, NODECLASS, NODEOVERLAY, CAPACITYWINDOW, CAPACITYBUFFER)}[
            kind
        ]
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            if namespace is not None:
                group, version, plural = resource.custom
                await self._call(
                    self._custom.patch_namespaced_custom_object_status,
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                )
            else:
                await self._call(
                    self._custom.patch_cluster_custom_object_status,
                    *resource.custom,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                )
        except NotFoundError:
            return False
        except ConflictError as error:
            if error.code != "Conflict":
                raise
            return False
        return True

    async def create_nodeclaim(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Create it, or return the existing one with the same name."""
        body = _manifest(nodeclaim)
        for field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "generation"):
            body["metadata"].pop(field, None)
        for _ in range(self._conflict_retries):
            try:
                created = await self._call(self._custom.create_cluster_custom_object, *NODECLAIM.custom, body)
                if self.informer is not None:
                    # The next plan must see it (and the pods nominated to it) before its watch event comes.
                    self.informer.remember(NODECLAIM.kind, created)
                return NodeClaim.parse(self._remember(NODECLAIM.kind, created))
            except ConflictError as error:
                if error.code != "AlreadyExists":
                    raise
            existing = await self.get_nodeclaim(nodeclaim.name)
            if existing is not None:
                return existing
        raise ConflictError(f"NodeClaim {nodeclaim.name} kept appearing and disappearing")

    async def change_nodeclaim_status(
        self, name: str, change: Callable[[NodeClaim], None]
    ) -> NodeClaim | None:
        """Read-modify-write of the status: `change` edits a NodeClaim's status in place; the result replaces
        the status with the resourceVersion as a precondition, and on a conflict `change` is made again on the
        latest version. The first try starts from the version this client saw last, if any. When `change`
        changes nothing, nothing is written (a condition polled again costs no write). None when the NodeClaim
        is gone."""
        raw = self._recall(NODECLAIM.kind, name)
        for _ in range(self._conflict_retries):
            if raw is None:
                raw = await self._get(self._custom.get_cluster_custom_object, *NODECLAIM.custom, name)
                if raw is None:
                    return None
            claim = NodeClaim.parse(raw)
            before = claim.status.model_copy(deep=True)
            change(claim)
            if claim.status == before:
                self._remember(NODECLAIM.kind, raw)
                return claim
            try:
                replaced = await self._call(
                    self._custom.replace_cluster_custom_object_status,
                    *NODECLAIM.custom,
                    name,
                    _manifest(claim),
                )
            except NotFoundError:
                return None
            except ConflictError as error:
                if error.code != "Conflict":
                    raise
                raw = None
                continue
            return NodeClaim.parse(self._remember(NODECLAIM.kind, replaced))
        raise ConflictError(f"NodeClaim {name} kept changing; gave up after {self._conflict_retries} tries")

    async def _read_modify_write(
        self,
        read: Callable[[], Any],
        patch: Callable[[dict[str, Any]], Any],
        change: Callable[[dict[str, Any]], dict[str, Any]],
        kind: str,
        name: str,
    ) -> dict[str, Any] | None:
        """`change` makes a merge patch (empty: nothing to do) from the latest version; it is sent as a JSON
        patch whose preconditions are the fields it changes as they were read (`field_patch`), and made again
        when one of them changed meanwhile. The first try starts from the version this client saw last, if
        any; when that needs no change, the latest is read to make sure. None when the object is gone."""
        recalled = self._recall(kind, name)
        for attempt in range(self._conflict_retries):
            try:
                current: dict[str, Any] = recalled if recalled is not None else await self._call(read)
                body = change(current)
                if not body and recalled is not None:
                    recalled = None
                    continue
                if not body:
                    return self._remember(kind, current)
                result: dict[str, Any] = await self._call(
                    patch, field_patch(current, body), _content_type=JSON_PATCH
                )
                self._written[(kind, name)] = time.monotonic()
                return self._remember(kind, result)
            except NotFoundError:
                return None
            except (ConflictError, InvalidError) as error:
                # A failed precondition: 409 for resourceVersion, 422 for a JSON patch test.
                if not _precondition_failed(error):
                    raise
            if recalled is not None:  # only what this client remembered was out of date
                recalled = None
                continue
            await asyncio.sleep(random.uniform(0, min(1.0, 0.01 * 2**attempt)))
        raise ConflictError(f"{kind} {name} kept changing; gave up after {self._conflict_retries} tries")

    async def patch_nodeclaim_metadata(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
    ) -> NodeClaim | None:
        def change(current: dict[str, Any]) -> dict[str, Any]:
            metadata = current["metadata"]
            patch: dict[str, Any] = {}
            for field, wanted in (("labels", labels), ("annotations", annotations)):
                held = metadata.get(field) or {}
                if changed := {key: value for key, value in (wanted or {}).items() if held.get(key) != value}:
                    patch[field] = changed
            finalizers = metadata.get("finalizers") or []
            kept = [item for item in finalizers if item not in set(remove_finalizers or ())]
            if kept != finalizers:
                patch["finalizers"] = kept
            return {"metadata": patch} if patch else {}

        args = (*NODECLAIM.custom, name)
        raw = await self._read_modify_write(
            functools.partial(self._custom.get_cluster_custom_object, *args),
            functools.partial(self._custom.patch_cluster_custom_object, *args),
            change,
            NODECLAIM.kind,
            name,
        )
        return None if raw is None else NodeClaim.parse(raw)

    async def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> bool:
        """Set annotations on a NodePool or an AKSNodeClass (a merge patch of those keys alone); False when it
        is gone."""
        resource = {NODEPOOL.kind: NODEPOOL, NODECLASS.kind: NODECLASS}[kind]
        body = {"metadata": {"annotations": annotations}}
        patch = self._custom.patch_cluster_custom_object
        try:
            await self._call(patch, *resource.custom, name, body, _content_type=MERGE_PATCH)
        except NotFoundError:
            return False
        return True

    async def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None] | None = None,
        add_taints: builtins.list[Taint] | None = None,
        remove_taint_keys: builtins.list[str] | None = None,
        add_finalizers: builtins.list[str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
        unschedulable: bool | None = None,
        add_owner: OwnerReference | None = None,
    ) -> Node | None:
        """Change the node's labels, taints (removals first, so a key can be replaced), finalizers, cordon or
        owners (`add_owner`, unless one of its kind and uid is there); None when the node is gone."""

        def change(current: dict[str, Any]) -> dict[str, Any]:
            metadata, spec = current["metadata"], current.get("spec") or {}
            patch: dict[str, Any] = {}
            held = metadata.get("labels") or {}
            if changed := {key: value for key, value in (labels or {}).items() if held.get(key) != value}:
                patch.setdefault("metadata", {})["labels"] = changed
            taints = [
                taint
                for taint in spec.get("taints") or []
                if taint.get("key") not in (remove_taint_keys or ())
            ]
            for taint in add_taints or ():
                if not any(
                    (present.get("key"), present.get("effect")) == (taint.key, taint.effect)
                    for present in taints
                ):
                    taints.append(_manifest(taint))
            if taints != (spec.get("taints") or []):
                patch.setdefault("spec", {})["taints"] = taints
            finalizers = metadata.get("finalizers") or []
            wanted = [item for item in finalizers if item not in set(remove_finalizers or ())]
            wanted += [item for item in add_finalizers or () if item not in wanted]
            if wanted != finalizers:
                patch.setdefault("metadata", {})["finalizers"] = wanted
            if unschedulable is not None and unschedulable != bool(spec.get("unschedulable")):
                patch.setdefault("spec", {})["unschedulable"] = unschedulable
            owners = metadata.get("ownerReferences") or []
            if add_owner is not None and not any(
                (owner.get("kind"), owner.get("uid")) == (add_owner.kind, add_owner.uid) for owner in owners
            ):
                patch.setdefault("metadata", {})["ownerReferences"] = [*owners, _manifest(add_owner)]
            return patch

        raw = await self._read_modify_write(
            functools.partial(self._core.read_node, name),
            functools.partial(self._core.patch_node, name),
            change,
            NODE.kind,
            name,
        )
        return None if raw is None else Node.model_validate(raw)

    async def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the eviction API (policy/v1); `PDBViolationError` when a budget forbids it now. A pod
        already gone counts as evicted."""
        body = k8s.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        )
        try:
            await self._call(self._core.create_namespaced_pod_eviction, name, namespace, body)
        except NotFoundError:
            return
        except ThrottledError as error:
            # 429 with a DisruptionBudget cause; a 429 without one is the server shedding load.
            if error.code == "DisruptionBudget":
                raise PDBViolationError(str(error), code=error.code) from error
            raise

    async def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        await self._delete(
            self._core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_period_seconds
        )

    async def delete_node(self, name: str) -> None:
        await self._delete(self._core.delete_node, name)

    async def delete_nodeclaim(self, name: str) -> None:
        await self._delete(self._custom.delete_cluster_custom_object, *NODECLAIM.custom, name)

    async def record_event(self, event: Event) -> None:
        """Publish an `events.k8s.io/v1` Event from Karpenter, about the object it names with that object's UID
        (looked up when the caller did not give it), so `kubectl describe` lists it. Karpenter's recorder rules
        apply (`core.events`): a repeat within its window is dropped, Nominated events are rate-limited, and an
        identical repeat after the window counts on the earlier Event (its `series`) while that one lasts.
        Best effort: a failure is logged, never raised."""
        regarding = event.involved_object
        try:
            if not regarding.uid:
                regarding.uid = await self._uid_of(regarding.kind, regarding.name, regarding.namespace)
            identity = regarding.uid or f"{regarding.kind}/{regarding.namespace or ''}/{regarding.name}"
            rule = dedupe_rule(regarding.kind, event.reason)
            key = dedupe_key(regarding.kind, identity, event.reason, event.message)
            if not self._event_deduper.admit(key, self.event_clock(), rule.timeout):
                return
            if event.reason == NOMINATED and not self._nominations.try_take():
                return
            body = self._event_body(event)
            same = (identity, event.reason, body["type"], body["note"])
            earlier = self._event_series.pop(same, None)
            if earlier is not None and await self._in_thread(self._count_repeat, earlier, body["eventTime"]):
                self._event_series[same] = earlier
            else:
                await self._in_thread(self._post_event, body)
                self._event_series[same] = _EventSeries(
                    body["metadata"]["namespace"], body["metadata"]["name"]
                )
            while len(self._event_series) > REMEMBERED_OBJECTS:
                self._event_series.popitem(last=False)
        except Exception as error:
            logger.warning(
                "could not record event %s on %s %s: %s",
                event.reason,
                regarding.kind,
                regarding.name,
                error,
            )

    async def _uid_of(self, kind: str, name: str, namespace: str | None) -> str | None:
        """The object's UID: from the Node or NodeClaim this client last saw, else a GET (None when gone)."""
        remembered = self._remembered.get((kind, name))
        if remembered is not None and not namespace:
            return str(remembered["metadata"].get("uid") or "") or None
        try:
            found = await self.get_object(kind, name, namespace)
        except CloudError as error:  # not allowed to read it, say: the event goes without the uid
            logger.debug("event on %s %s goes without its uid: %s", kind, name, error)
            return None
        return str((found or {}).get("metadata", {}).get("uid") or "") or None

    def _count_repeat(self, series: _EventSeries, when: str) -> bool:
        """Count one more occurrence on the Event published earlier; False when that Event is gone (expired)
        or may not be changed (then a new one is published)."""
        series.count += 1
        patch = {"series": {"count": series.count, "lastObservedTime": when}}
        try:
            self._events_request("PATCH", series.namespace, patch, name=series.name)
        except (NotFoundError, InvalidError):
            return False
        return True

    def _event_body(self, event: Event) -> dict[str, Any]:
        regarding = event.involved_object
        namespace = event.metadata.namespace or regarding.namespace or DEFAULT_NAMESPACE
        when = (event.first_timestamp or event.last_timestamp or datetime.now(UTC)).astimezone(UTC)
        reference = _manifest(regarding)
        if not regarding.api_version and regarding.kind in _API_VERSIONS:
            reference["apiVersion"] = _API_VERSIONS[regarding.kind]
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": event.metadata.name or f"{regarding.name}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            # MicroTime takes exactly six fractional digits; isoformat() drops them when they are all zero.
            "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "regarding": reference,
            "reason": event.reason,
            "action": event.reason,
            "note": event.message.encode()[:1024].decode(errors="ignore"),
            "type": event.type,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.reporting_instance[:128],
        }

    def _post_event(self, body: dict[str, Any]) -> None:
        self._events_request("POST", body["metadata"]["namespace"], body)

    def _events_request(self, method: str, namespace: str, body: dict[str, Any], name: str = "") -> None:
        # Through ApiClient rather than EventsV1Api: the generated model would format eventTime with
        # isoformat(), which the API server rejects whenever the microseconds are zero.
        path = "/apis/events.k8s.io/v1/namespaces/{namespace}/events" + ("/{name}" if name else "")
        content_type = MERGE_PATCH if method == "PATCH" else "application/json"

        def call() -> None:
            request = self.api_client.param_serialize(
                method,
                path,
                path_params={"namespace": namespace, **({"name": name} if name else {})},
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*request, _request_timeout=self._timeout)
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)

        self._request(call, "count event" if name else "create event")

    # --- ClusterAPI: watch -------------------------------------------------------------------------------

    async def watch(self, since: int = 0) -> AsyncGenerator[WatchEvent, None]:
        """Changes to Pods, Nodes, NodeClaims, NodePools and AKSNodeClasses, merged in one stream, forever.

        With `since` 0 each kind is listed first (every object arrives as ADDED), then watched; otherwise the
        watch starts at that resourceVersion and lists only if it is too old. Each kind runs a `ListWatch` on
        a thread of its own; closing the generator stops them. An error retrying cannot fix (the CRDs are not
        installed, the credentials may not watch) is raised here.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent | Exception] = asyncio.Queue()

        def emit(item: WatchEvent | Exception) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        watchers = [
            ListWatch(
                resource,
                functools.partial(self._list_page, resource),
                functools.partial(self._open_watch, resource),
                emit,
                resource_version=str(since) if since else None,
                reconnect_max_wait=self._reconnect_max_wait,
            )
            for resource in self.watched_kinds
        ]
        for watcher in watchers:
            name = f"nodewright-watch-{watcher.resource.kind}"
            threading.Thread(target=watcher.run, name=name, daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            for watcher in watchers:
                watcher.stop()

    @property
    def watched_kinds(self) -> tuple[Resource, ...]:
        """What `watch` follows: `WATCHED_KINDS`, with the CapacityBuffer gate on `BUFFER_KINDS`, and with the
        NodeOverlay gate on NodeOverlays (so that one the models refuse is reported)."""
        kinds = (*WATCHED_KINDS, *BUFFER_KINDS) if self.capacity_buffers else WATCHED_KINDS
        return (*kinds, NODEOVERLAY) if self.node_overlays else kinds

    def _open_watch(self, resource: Resource, version: str) -> WatchStream:
        response = self._request(
            lambda: self._listers[resource.kind](
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _preload_content=False,
                # The server ends the watch after timeout_seconds; a read that waits much longer than that is
                # a dead connection.
                _request_timeout=(self._timeout[0], self._watch_timeout + 30),
            ),
            f"watch {resource.kind}",
        )
        return _ResponseStream(response)

    # --- leases, for leader election ---------------------------------------------------------------------
    # Only get, create and update (a replace with the resourceVersion read as its precondition), so the
    # controller's Role on leases needs no list, watch, patch or delete. The requests go through the custom
    # objects API, whose paths are those of any grouped resource: the Lease stays raw JSON (the generated
    # V1Lease model would rewrite its MicroTime fields in a format the API server does not always accept).

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The `coordination.k8s.io/v1` Lease, or None."""
        return await self._get(self._custom.get_namespaced_custom_object, *_in(LEASE, namespace), name)

    async def create_lease(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; `ConflictError` (AlreadyExists) when someone else created it first."""
        namespace = lease["metadata"]["namespace"]
        created: dict[str, Any] = await self._call(
            self._custom.create_namespaced_custom_object, *_in(LEASE, namespace), dict(lease)
        )
        return created

    async def update_lease(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the Lease; `ConflictError` (Conflict) when it changed since its `resourceVersion` was read."""
        metadata = lease["metadata"]
        replaced: dict[str, Any] = await self._call(
            self._custom.replace_namespaced_custom_object,
            *_in(LEASE, metadata["namespace"]),
            metadata["name"],
            dict(lease),
        )
        return replaced

    # --- cluster administration, for the demo and tests --------------------------------------------------

    def _dynamic(self) -> DynamicClient:
        with self._dynamic_lock:
            if self._dynamic_client is None:
                self._dynamic_client = self._request(lambda: DynamicClient(self.api_client), "discovery")
            return self._dynamic_client

    def _resource(self, kind: str, api_version: str | None = None) -> Any:
        """The discovered resource of a kind (`apiVersion` defaults to the one nodewright uses for it)."""
        wanted = {"kind": kind}
        if api_version or kind in _API_VERSIONS:
            wanted["api_version"] = api_version or _API_VERSIONS[kind]
        try:
            return self._request(lambda: self._dynamic().resources.get(**wanted), f"discover {kind}")
        except ResourceNotFoundError:
            version = f" {wanted['api_version']}" if "api_version" in wanted else ""
            raise InvalidError(f"the API server at {self.server} serves no kind {kind}{version}") from None
        except ResourceNotUniqueError:
            raise InvalidError(f"kind {kind} is served by several API groups; give its apiVersion") from None

    def _dynamic_raw(self, call: Callable[[], Any], what: str) -> Any:
        def request() -> Any:
            response = call()
            try:
                data = response.data
            finally:
                response.release_conn()
            return json.loads(data) if data else None

        return self._request(request, what)

    async def apply(self, manifests: str | Iterable[Mapping[str, Any]]) -> builtins.list[str]:
        """Server-side apply (field manager "nodewright", conflicts forced) of YAML text or manifests, in order;
        one line per object, as kubectl prints it (`deployment.apps/web serverside-applied`). A document's
        `status` is applied too, through the status subresource (which `kubectl apply` leaves out), as the
        controller that owns it would write it. `InvalidError` listing every rejected object and why, after the
        others were applied."""
        try:
            documents = load_yaml(manifests, "manifests") if isinstance(manifests, str) else list(manifests)
        except ManifestError as error:
            raise InvalidError(str(error), code="Invalid") from None
        return await self._in_thread(self._apply_all, documents)

    def _apply_all(self, documents: builtins.list[Any]) -> builtins.list[str]:
        results: list[str] = []
        problems: list[str] = []
        for number, document in enumerate(documents, start=1):
            try:
                results.append(self._apply_one(document, number))
            except CloudError as error:
                problems.append(str(error))
        if problems:
            raise InvalidError("\n".join(problems), code="Invalid")
        return results

    def _apply_one(self, document: Any, number: int) -> str:
        if not isinstance(document, Mapping):
            raise InvalidError(
                f"document {number}: expected a Kubernetes object, not {type(document).__name__}"
            )
        kind, api_version = document.get("kind"), document.get("apiVersion")
        metadata = document.get("metadata") or {}
        name = metadata.get("name")
        label = f"{kind or f'document {number}'} {name or ''}".strip()
        if not kind or not api_version or not name:
            missing = [
                field
                for field, value in (("kind", kind), ("apiVersion", api_version), ("metadata.name", name))
                if not value
            ]
            raise InvalidError(f"{label}: {', '.join(missing)}: Field required")
        resource = self._resource(str(kind), str(api_version))
        namespace = (metadata.get("namespace") or DEFAULT_NAMESPACE) if resource.namespaced else None
        body = dict(document)
        if namespace:
            body["metadata"] = {**metadata, "namespace": namespace}

        def server_side_apply(target: Any, content: dict[str, Any], what: str) -> None:
            self._dynamic_raw(
                lambda: self._dynamic().server_side_apply(
                    target,
                    body=content,
                    name=name,
                    namespace=namespace,
                    field_manager=FIELD_MANAGER,
                    force_conflicts=True,
                    serialize=False,
                    _request_timeout=self._timeout,
                ),
                what,
            )

        try:
            server_side_apply(resource, body, f"apply {label}")
            status = document.get("status")
            if status and "status" in resource.subresources:
                # What a controller would write (e.g. the AKS image controller's AKSNodeClass images): the main
                # resource ignores status, so it goes through the status subresource.
                status_body = {
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": body["metadata"],
                    "status": status,
                }
                server_side_apply(
                    resource.subresources["status"], status_body, f"apply the status of {label}"
                )
        except (InvalidError, NotFoundError, ConflictError) as error:
            where = f"{namespace}/{name}" if namespace else name
            raise InvalidError(f"{kind} {where}: {error}", code=error.code) from None
        group = resource.group
        return f"{str(kind).lower()}{'.' + group if group else ''}/{name} serverside-applied"

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        """Set the replicas of a Deployment, ReplicaSet or StatefulSet (through its scale subresource)."""

        def call() -> Any:
            scale = self._resource(kind).subresources["scale"]
            return self._dynamic().patch(
                scale,
                body={"spec": {"replicas": replicas}},
                name=name,
                namespace=namespace,
                content_type=MERGE_PATCH,
                serialize=False,
                _request_timeout=self._timeout,
            )

        await self._in_thread(self._dynamic_raw, call, f"scale {kind} {namespace}/{name}")

    async def set_replicas(
        self, kind: str, api_version: str, name: str, namespace: str | None, expected: int, replicas: int
    ) -> bool:
        """Set `spec.replicas` of any object if it still holds `expected`; False when it changed meanwhile. One
        JSON patch whose test makes the change conditional, so a value someone wrote after we read is never
        overwritten."""
        path = "/spec/replicas"
        operations = [
            {"op": "test", "path": path, "value": expected},
            {"op": "replace", "path": path, "value": replicas},
        ]

        def call() -> Any:
            return self._dynamic().patch(
                self._resource(kind, api_version),
                body=operations,
                name=name,
                namespace=namespace,
                content_type=JSON_PATCH,
                serialize=False,
                _request_timeout=self._timeout,
            )

        try:
            await self._in_thread(self._dynamic_raw, call, f"set the replicas of {kind} {name}")
        except (ConflictError, InvalidError) as error:
            if _precondition_failed(error):
                return False
            raise
        return True

    async def get_object(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> dict[str, Any] | None:
        """Any object's manifest, or None."""

        def call() -> Any:
            return self._dynamic().get(
                self._resource(kind, api_version),
                name=name,
                namespace=namespace,
                serialize=False,
                _request_timeout=self._timeout,
            )

        try:
            result: dict[str, Any] = await self._in_thread(self._dynamic_raw, call, f"get {kind} {name}")
        except NotFoundError:
            return None
        return result

    async def list_objects(
        self, kind: str, namespace: str | None = None, field_selector: str = "", label_selector: str = ""
    ) -> builtins.list[dict[str, Any]]:
        """Manifests of a kind, in one namespace or all, optionally filtered by field and label selectors."""

        def call() -> Any:
            return self._dynamic().get(
                self._resource(kind),
                namespace=namespace,
                field_selector=field_selector or None,
                label_selector=label_selector or None,
                serialize=False,
                _request_timeout=self._timeout,
            )

        body = await self._in_thread(self._dynamic_raw, call, f"list {kind}")
        api_version = str(body.get("apiVersion") or "")
        return [{**item, "apiVersion": api_version, "kind": kind} for item in body.get("items") or ()]

    async def delete_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete (or, with finalizers, mark for deletion) any object; one already gone counts as done."""

        def call() -> Any:
            return self._dynamic().delete(
                self._resource(kind),
                name=name,
                namespace=namespace,
                serialize=False,
                _request_timeout=self._timeout,
            )

        with contextlib.suppress(NotFoundError):
            await self._in_thread(self._dynamic_raw, call, f"delete {kind} {name}")

    async def list_nodes(self) -> builtins.list[Node]:
        return [Node.model_validate(item) for item in await self._list(NODE)]

    async def list_nodeclaims(self) -> builtins.list[NodeClaim]:
        return [NodeClaim.parse(item) for item in await self._list(NODECLAIM)]

    async def list_pods(self, namespace: str | None = None, label_selector: str = "") -> builtins.list[Pod]:
        items = await self._list(POD, namespace, label_selector=label_selector)
        return [Pod.model_validate(item) for item in items]


def _in(resource: Resource, namespace: str) -> tuple[str, str, str, str]:
    """Group, version, namespace and plural, as `CustomObjectsApi`'s namespaced methods take them."""
    group, version, plural = resource.custom
    return group, version, namespace, plural


def _method_name(method: Callable[..., Any]) -> str:
    inner = method.func if isinstance(method, functools.partial) else method
    return str(getattr(inner, "__name__", "request"))
