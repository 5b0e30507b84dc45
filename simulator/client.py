"""An HTTP client of the simulated AKS: a `core.cluster.ClusterAPI`, plus the helpers the demo and tests use
(apply, scale, the cluster's facts, ARM faults and counters). The cloud itself is reached through ARM with the
Azure SDK (`activities.azure`), never through this client.

Errors come back as the typed errors of `core.errors`, rebuilt from the server's JSON (`code` names the
class). Changes to a Node or a NodeClaim's metadata are read-modify-write with the object's resourceVersion
as a precondition, retried on conflict, so a concurrent change by the kubelet model is never overwritten.
Deleting or evicting something that is already gone counts as done.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import collections
import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, wait_random_exponential

from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Event, Node, Pod
from core.api.manifests import Manifests, parse_manifests
from core.api.meta import Taint
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.cluster import WatchEvent
from core.errors import (
    CloudError,
    ConflictError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    PDBViolationError,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)
from simulator.arm import Counters, Fault
from simulator.server import ClusterInfo, SimulatorSettings
from simulator.state import (
    EVENT,
    KINDS,
    NODE,
    NODECLAIM,
    NODECLASS,
    NODEPOOL,
    POD,
    SECRET,
    Kind,
    KubeObject,
    Secret,
)

_ERRORS: dict[str, type[CloudError]] = {
    cls.__name__.removesuffix("Error"): cls
    for cls in (
        NotFoundError,
        ConflictError,
        TransientError,
        InvalidError,
        InsufficientCapacityError,
        QuotaExceededError,
        ThrottledError,
        PDBViolationError,
    )
}
_BY_STATUS: dict[int, type[CloudError]] = {
    404: NotFoundError,
    409: ConflictError,
    410: ConflictError,
    422: InvalidError,
}


def decode_error(status: int, body: Any) -> CloudError:
    """The typed error for an error response (see `simulator.server.error_response` for the shape)."""
    details: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    message = str(details.get("message") or f"HTTP {status}")
    code = str(details.get("providerCode") or "")
    cls = _ERRORS.get(str(details.get("code")))
    if cls is InsufficientCapacityError:
        return InsufficientCapacityError(message, Offering(**details["offering"]), code=code)
    if cls is QuotaExceededError:
        return QuotaExceededError(
            message, Offering(**details["offering"]), details.get("scope", "family"), code
        )
    if cls is ThrottledError:
        return ThrottledError(message, float(details.get("retryAfterSeconds", 1.0)), code=code)
    if cls is None:
        cls = TransientError if status >= 500 else _BY_STATUS.get(status, InvalidError)
    return cls(message, code=code)


def _decode(raw: bytes) -> Any:
    """The JSON body, or None for an empty or non-JSON one (a proxy's error page)."""
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return None


def _path(
    kind: Kind, name: str | None = None, namespace: str | None = None, subresource: str | None = None
) -> str:
    path = f"/apis/{kind.api_version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{kind.plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def _kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise InvalidError(f"unknown kind {name!r}; the simulator serves {', '.join(KINDS)}") from None


class SimulatorClient:
    """The simulated AKS over HTTP. Use it as an async context manager, or call `close()`."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        conflict_retries: int = 20,
        reconnect_max_wait: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._conflict_retries = conflict_retries
        self._reconnect_max_wait = reconnect_max_wait
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        # Created on first use, inside the event loop that will use it.
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        text: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; the decoded JSON answer, or the typed error. Lost connections are TransientError."""
        try:
            async with self._http().request(
                method, self.base_url + path, json=body, data=text, params=params
            ) as response:
                payload = _decode(await response.read())
                if response.status >= 400:
                    raise decode_error(response.status, payload)
                return payload
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as error:
            raise TransientError(
                f"{method} {path}: {error or type(error).__name__}", code="ConnectionError"
            ) from error

    async def _get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call("GET", _path(kind, name, namespace))
        except NotFoundError:
            return None
        return result

    async def _list(
        self, kind: Kind, namespace: str | None = None, fields: str = "", labels: str = ""
    ) -> builtins.list[dict[str, Any]]:
        params = {
            key: value for key, value in (("fieldSelector", fields), ("labelSelector", labels)) if value
        }
        body = await self._call("GET", _path(kind, namespace=namespace), params=params)
        items: builtins.list[dict[str, Any]] = body["items"]
        return items

    async def _delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        try:
            await self._call("DELETE", _path(kind, name, namespace))
        except NotFoundError:
            return

    async def _read_modify_write(
        self, kind: Kind, name: str, change: Callable[[KubeObject], None]
    ) -> dict[str, Any] | None:
        """Apply `change` to the latest version and write it back, again on conflict; None if it is gone."""
        for _ in range(self._conflict_retries):
            current = await self._get(kind, name)
            if current is None:
                return None
            obj = kind.parse(current)
            change(obj)
            try:
                result: dict[str, Any] = await self._call("PUT", _path(kind, name), kind.manifest(obj))
            except NotFoundError:
                return None
            except ConflictError as error:
                if error.code != "Conflict":
                    raise
                continue
            return result
        raise ConflictError(f"{kind.name} {name} kept changing; gave up after {self._conflict_retries} tries")

    # --- ClusterAPI --------------------------------------------------------------------------------------

    async def snapshot(self) -> Manifests:
        """Every object the scheduler reads, at one resource version."""
        manifests, _ = await self.snapshot_with_version()
        return manifests

    async def snapshot_with_version(self) -> tuple[Manifests, int]:
        """The snapshot and its resource version, to watch from."""
        body = await self._call("GET", "/snapshot")
        return parse_manifests(body["items"], "simulator"), int(body["resourceVersion"])

    async def get_node(self, name: str) -> Node | None:
        raw = await self._get(NODE, name)
        return None if raw is None else Node.model_validate(raw)

    async def find_node_by_provider_id(self, provider_id: str) -> Node | None:
        items = await self._list(NODE, fields=f"spec.providerID={provider_id}")
        return Node.model_validate(items[0]) if items else None

    async def get_nodeclaim(self, name: str) -> NodeClaim | None:
        raw = await self._get(NODECLAIM, name)
        return None if raw is None else NodeClaim.parse(raw)

    async def list_pods_on_node(self, node_name: str) -> builtins.list[Pod]:
        return [
            Pod.model_validate(item) for item in await self._list(POD, fields=f"spec.nodeName={node_name}")
        ]

    async def get_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's data, base64-decoded; `InvalidError` (naming the Secret and key, never a value) when a
        value is not base64 text."""
        raw = await self._get(SECRET, name, namespace)
        if raw is None:
            return None
        secret = Secret.model_validate(raw)
        data = {}
        for key, value in secret.data.items():
            try:
                data[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise InvalidError(
                    f"Secret {namespace}/{name}: data.{key} is not base64-encoded text", code="Invalid"
                ) from None
        return data

    async def get_nodepool(self, name: str) -> NodePool | None:
        raw = await self._get(NODEPOOL, name)
        return None if raw is None else NodePool.parse(raw)

    async def get_nodeclass(self, name: str) -> AKSNodeClass | None:
        raw = await self._get(NODECLASS, name)
        return None if raw is None else AKSNodeClass.parse(raw)

    async def record_event(self, event: Event) -> None:
        """Publish an Event; failures are swallowed, as an event recorder's are."""
        with contextlib.suppress(CloudError):
            await self._call(
                "POST", _path(EVENT, namespace=event.metadata.namespace or "default"), EVENT.manifest(event)
            )

    async def create_nodeclaim(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Create it, or return the existing one with the same name."""
        for _ in range(self._conflict_retries):
            try:
                return NodeClaim.parse(
                    await self._call("POST", _path(NODECLAIM), NODECLAIM.manifest(nodeclaim))
                )
            except ConflictError as error:
                if error.code != "AlreadyExists":
                    raise
            existing = await self.get_nodeclaim(nodeclaim.name)
            if existing is not None:
                return existing
        raise ConflictError(f"NodeClaim {nodeclaim.name} kept appearing and disappearing")

    async def update_nodeclaim_status(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Replace the status (conditions, providerID, nodeName, capacity, allocatable)."""
        body = NODECLAIM.manifest(nodeclaim)
        body["metadata"].pop("resourceVersion", None)
        return NodeClaim.parse(
            await self._call("PUT", _path(NODECLAIM, nodeclaim.name, subresource="status"), body)
        )

    async def patch_nodeclaim_metadata(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
    ) -> NodeClaim | None:
        def change(claim: NodeClaim) -> None:
            claim.metadata.labels.update(labels or {})
            claim.metadata.annotations.update(annotations or {})
            gone = set(remove_finalizers or ())
            claim.metadata.finalizers = [item for item in claim.metadata.finalizers if item not in gone]

        raw = await self._read_modify_write(NODECLAIM, name, change)
        return None if raw is None else NodeClaim.parse(raw)

    async def patch_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        add_taints: builtins.list[Taint] | None = None,
        remove_taint_keys: builtins.list[str] | None = None,
        add_finalizers: builtins.list[str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
        unschedulable: bool | None = None,
    ) -> Node | None:
        """Change the node's labels, taints (removals first, so a key can be replaced), finalizers or
        cordon; None when the node is gone."""

        def change(node: Node) -> None:
            node.metadata.labels.update(labels or {})
            removed = set(remove_taint_keys or ())
            taints = [taint for taint in node.spec.taints if taint.key not in removed]
            for taint in add_taints or ():
                if not any((held.key, held.effect) == (taint.key, taint.effect) for held in taints):
                    taints.append(taint.model_copy())
            node.spec.taints = taints
            finalizers = [
                item for item in node.metadata.finalizers if item not in set(remove_finalizers or ())
            ]
            finalizers += [item for item in add_finalizers or () if item not in finalizers]
            node.metadata.finalizers = finalizers
            if unschedulable is not None:
                node.spec.unschedulable = unschedulable

        raw = await self._read_modify_write(NODE, name, change)
        return None if raw is None else Node.model_validate(raw)

    async def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the eviction API; `PDBViolationError` when a budget forbids it now."""
        try:
            await self._call("POST", _path(POD, name, namespace, "eviction"), {"apiVersion": "policy/v1"})
        except NotFoundError:
            return

    async def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        await self._delete(POD, name, namespace)

    async def delete_node(self, name: str) -> None:
        await self._delete(NODE, name)

    async def delete_nodeclaim(self, name: str) -> None:
        await self._delete(NODECLAIM, name)

    def watch(self, since: int = 0) -> AsyncGenerator[WatchEvent, None]:
        """Changes after resource version `since`, forever, reconnecting (from the last event seen) when the
        stream breaks. `ConflictError` with code "Expired" when `since` is older than the server keeps."""
        return self.watch_kinds(since)

    async def watch_kinds(
        self, since: int = 0, kinds: Iterable[str] = ()
    ) -> AsyncGenerator[WatchEvent, None]:
        """`watch`, only for the given kinds (all when empty)."""
        params = [("kind", kind) for kind in kinds]
        retrying = retry_if_exception_type(
            (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError)
        )
        while True:
            async for attempt in AsyncRetrying(
                retry=retrying, wait=wait_random_exponential(multiplier=0.05, max=self._reconnect_max_wait)
            ):
                with attempt:
                    response = await self._http().get(
                        self.base_url + "/watch",
                        params=[("resourceVersion", str(since)), *params],
                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total),
                    )
            async with response:
                if response.status >= 400:
                    raise decode_error(response.status, _decode(await response.read()))
                buffer = b""
                try:
                    async for chunk in response.content.iter_any():
                        *lines, buffer = (buffer + chunk).split(b"\n")
                        for line in lines:
                            if line.strip():
                                event = WatchEvent.model_validate_json(line)
                                since = event.resource_version
                                yield event
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError):
                    pass
            await asyncio.sleep(0)

    # --- demo and test helpers ---------------------------------------------------------------------------

    async def wait_until_ready(self, timeout: float = 30.0) -> None:
        """Wait for the server to answer (it may still be starting); `TransientError` after `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await self._call("GET", "/healthz")
                return
            except TransientError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(0.1)

    async def apply(self, manifests: str | Iterable[Mapping[str, Any]]) -> builtins.list[str]:
        """Create or update objects from YAML text or manifests; one line per object (`deployment/default/web
        created`). `InvalidError` listing every problem if any object is invalid (then nothing is applied)."""
        text = manifests if isinstance(manifests, str) else json.dumps([dict(item) for item in manifests])
        body = await self._call("POST", "/apply", text=text)
        results: builtins.list[str] = body["results"]
        return results

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        """Set the replicas of a Deployment, ReplicaSet or StatefulSet."""
        await self._call(
            "PUT", _path(_kind(kind), name, namespace, "scale"), {"spec": {"replicas": replicas}}
        )

    async def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """Any object's manifest, or None."""
        return await self._get(_kind(kind), name, namespace)

    async def list_objects(
        self, kind: str, namespace: str | None = None, field_selector: str = "", label_selector: str = ""
    ) -> builtins.list[dict[str, Any]]:
        """Manifests of a kind, in one namespace or all, optionally filtered by field and label selectors."""
        return await self._list(_kind(kind), namespace, field_selector, label_selector)

    async def delete_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete (or, with finalizers, mark for deletion) any object; one already gone counts as done."""
        await self._delete(_kind(kind), name, namespace)

    async def list_nodes(self) -> builtins.list[Node]:
        return [Node.model_validate(item) for item in await self._list(NODE)]

    async def list_nodeclaims(self) -> builtins.list[NodeClaim]:
        return [NodeClaim.parse(item) for item in await self._list(NODECLAIM)]

    async def list_pods(self, namespace: str | None = None, label_selector: str = "") -> builtins.list[Pod]:
        return [Pod.model_validate(item) for item in await self._list(POD, namespace, labels=label_selector)]

    async def add_fault(self, fault: Fault) -> Fault:
        """Inject a fault into the simulated ARM; the stored fault has its id."""
        body = await self._call("POST", "/faults", fault.model_dump(mode="json", exclude_none=True))
        return Fault.model_validate(body)

    async def faults(self) -> builtins.list[Fault]:
        body = await self._call("GET", "/faults")
        return [Fault.model_validate(item) for item in body["items"]]

    async def remove_fault(self, fault_id: str) -> None:
        await self._call("DELETE", f"/faults/{quote(fault_id, safe='')}")

    async def clear_faults(self) -> None:
        await self._call("DELETE", "/faults")

    async def counters(self) -> Counters:
        """What the simulated ARM was asked to do and did (VMs created and deleted, requests by kind, ...)."""
        body = dict(await self._call("GET", "/counters"))
        body["requests"] = collections.Counter(body.get("requests") or {})
        return Counters(**body)

    async def cluster_info(self) -> ClusterInfo:
        """Where the simulated ARM is and what a worker must know about the cluster (no secrets)."""
        return ClusterInfo.model_validate(await self._call("GET", "/aks"))

    async def never_register(self, vm_name: str) -> None:
        """Make the kubelet of this VM never register its Node (a node whose boot fails)."""
        await self._call("POST", "/kubelet/never-register", {"vm": vm_name})

    async def custom_data(self, vm_name: str) -> str:
        """The base64 custom data the VM was created with, as its agent would read it on boot (tests only)."""
        body = await self._call("GET", f"/arm/custom-data/{quote(vm_name, safe='')}")
        return str(body["customData"])

    async def settings(self) -> SimulatorSettings:
        return SimulatorSettings.model_validate(await self._call("GET", "/settings"))

    async def update_settings(self, patch: Mapping[str, Any]) -> SimulatorSettings:
        """Change delays and intervals at run time (a merge patch, durations in seconds)."""
        return SimulatorSettings.model_validate(await self._call("PATCH", "/settings", dict(patch)))
