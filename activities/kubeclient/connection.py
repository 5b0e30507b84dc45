"""The connection every part of `KubernetesCluster` shares: requests, the rate limit, the objects remembered.

The official client is synchronous, and its calls never run on the asyncio loop. Each request runs on a thread
pool of the cluster's own (`threads` workers, with urllib3's connection pool sized to match so every thread
keeps its connection alive), not on `asyncio.to_thread`'s default executor: that one is shared with everything
else in the process and sized by CPU count, so a burst of snapshot lists or drain evictions would queue behind
unrelated work, or starve it. Each watched kind streams on a thread of its own instead, because a watch blocks
for minutes and would hold a pool thread hostage; its events reach the loop through `call_soon_threadsafe`.

Responses are read as raw JSON (`_preload_content=False`) and parsed by the models of `core.api`: the client's
generated models cost a second validation pass and reject fields they do not know, which a newer API server
sends. All requests of one cluster share a token bucket (`qps`, `burst`), as client-go's rate limiter does.
Errors come back as the typed errors of `core.errors` (`activities.kubeclient.errors`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.informer import SnapshotInformer, without_managed_fields
from activities.kubeclient.errors import (
    ClusterConfigError,
    api_error,
    connection_error,
    one_line,
    root_cause,
    status_body,
)
from activities.kubeclient.listwatch import ResponseStream, WatchStream, list_every_page
from activities.kubeclient.ratelimit import TokenBucket
from activities.kubeclient.resources import (
    BUFFER_KINDS,
    CAPACITYBUFFER,
    CAPACITYWINDOW,
    DAEMONSET,
    DEPLOYMENT,
    NODE,
    NODECLAIM,
    NODECLASS,
    NODEOVERLAY,
    NODEPOOL,
    PDB,
    POD,
    PODTEMPLATE,
    REPLICASET,
    SNAPSHOT_KINDS,
    STATEFULSET,
    VOLUME_ATTACHMENT,
    WATCHED_KINDS,
    Resource,
    with_kind,
)
from core.errors import NotFoundError

T = TypeVar("T")

DEFAULT_QPS = 200.0
DEFAULT_BURST = 300
"""client-go's defaults (5 and 10) are far too low for a controller that drains and patches nodes in bulk."""
DEFAULT_THREADS = 32
REMEMBERED_OBJECTS = 4096
"""Nodes and NodeClaims this client last read or wrote, kept as the first guess of a read-modify-write."""
REMEMBERED_SECONDS = 600.0
"""How long a remembered Node or NodeClaim is kept after this client last read or wrote it. Under churn nearly
every name is new, so without it the memory grew with every node the process had ever handled, up to
`REMEMBERED_OBJECTS` whole objects (a two-hour soak's worker gained 100 MB); a guess that old is often stale
anyway, and a stale guess only costs the GET it was to save."""
JUST_WRITTEN_SECONDS = 5.0
"""How long the answer to this client's write of a Node may stand in for the read that follows it
(`node_seen`)."""
USER_AGENT = "nodewright"
"""The client's User-Agent; each process adds its part (`nodewright/worker`)."""
DEFAULT_WATCH_TIMEOUT_SECONDS = 240
"""How long one watch request lasts before the API server ends it and it is reopened from the last version."""


class Connection:
    """The client's connection to one API server, and what every part of `KubernetesCluster` builds on: the
    request primitives, the objects it remembers and the gates that say which kinds it follows."""

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
        self._remembered: OrderedDict[tuple[str, str], tuple[float, dict[str, Any]]] = OrderedDict()
        """By kind and name: when this client last read or wrote the object, and the object as it was then
        (oldest first)."""
        self._clock: Callable[[], float] = time.monotonic
        """When the remembered objects were last used and this client's writes were answered."""
        self._written: dict[tuple[str, str], float] = {}
        """When this client last wrote an object it remembers, until `node_seen` takes that answer."""
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
            raise connection_error(f"{what} ({self.server})", error) from error

    def _raw(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A method of the generated API classes, answered as decoded JSON."""
        return self._decoded(
            lambda: method(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs),
            _method_name(method),
        )

    def _decoded(self, call: Callable[[], Any], what: str) -> Any:
        """A request whose raw response (`_preload_content=False`) is read, released and decoded as JSON."""

        def request() -> Any:
            response = call()
            try:
                data = response.data
            finally:
                response.release_conn()
            return json.loads(data) if data else None

        return self._request(request, what)

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
        instead of a GET (its preconditions catch a version that is no longer the latest). Kept without its
        managedFields, which no change reads; those not used for `REMEMBERED_SECONDS` are forgotten."""
        raw = without_managed_fields(raw)
        key = (kind, raw["metadata"]["name"])
        now = self._clock()
        self._remembered[key] = (now, raw)
        self._remembered.move_to_end(key)
        while self._remembered:
            oldest, (when, _) = next(iter(self._remembered.items()))
            if len(self._remembered) <= REMEMBERED_OBJECTS and now - when < REMEMBERED_SECONDS:
                break
            self._remembered.popitem(last=False)
            self._written.pop(oldest, None)
        return raw

    def _fresh(self, kept: tuple[float, dict[str, Any]] | None) -> dict[str, Any] | None:
        """A remembered object, unless it has not been used for `REMEMBERED_SECONDS`."""
        return None if kept is None or self._clock() - kept[0] >= REMEMBERED_SECONDS else kept[1]

    def _remembered_object(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._fresh(self._remembered.get((kind, name)))

    def _recall(self, kind: str, name: str) -> dict[str, Any] | None:
        """The remembered object, taken out of the memory (the write that starts from it remembers its answer)."""
        self._written.pop((kind, name), None)
        return self._fresh(self._remembered.pop((kind, name), None))

    def _forget(self, kind: str, name: str) -> None:
        """This client deletes the object: nothing to start its next change from."""
        self._recall(kind, name)

    def _just_written(self, kind: str, name: str) -> dict[str, Any] | None:
        """What this client's write of the object answered, if that was under `JUST_WRITTEN_SECONDS` ago and no
        read took it since: the object as the server holds it after that write, which a GET would return too
        unless someone wrote since (those writes are news the watches bring)."""
        written = self._written.pop((kind, name), None)
        if written is None or self._clock() - written > JUST_WRITTEN_SECONDS:
            return None
        return self._remembered_object(kind, name)

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
        return with_kind(resource, items)

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
            status = status_body(error).get("message") or one_line(error.reason)
            if error.status in (401, 403):
                raise ClusterConfigError(
                    f"the API server {self.server} refused the credentials of {self.source}: "
                    f"{error.status} {one_line(status)}"
                ) from None
            if not error.status:
                raise ClusterConfigError(
                    f"cannot reach the API server {self.server} ({self.source}): {one_line(status)}"
                ) from None
            raise ClusterConfigError(
                f"the API server {self.server} ({self.source}) answered {error.status}: {one_line(status)}"
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ClusterConfigError(
                f"cannot reach the API server {self.server} ({self.source}): {root_cause(error)}"
            ) from None

    async def ping(self) -> None:
        """GET /version: whether the API server answers now (`TransientError` when it does not), for
        readiness probes."""
        await self._call(k8s.VersionApi(self.api_client).get_code)

    # --- what this cluster follows ----------------------------------------------------------------------

    @property
    def snapshot_kinds(self) -> tuple[Resource, ...]:
        """What `snapshot` reads: `SNAPSHOT_KINDS`, and NodeOverlays and CapacityBuffers with their gates on."""
        kinds = (*SNAPSHOT_KINDS, NODEOVERLAY) if self.node_overlays else SNAPSHOT_KINDS
        return (*kinds, CAPACITYBUFFER) if self.capacity_buffers else kinds

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
        return ResponseStream(response)


def _method_name(method: Callable[..., Any]) -> str:
    inner = method.func if isinstance(method, functools.partial) else method
    return str(getattr(inner, "__name__", "request"))
