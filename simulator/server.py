"""The simulated AKS: the Kubernetes API (objects, watch, eviction, scale) over HTTP, the Azure Resource Manager
its VMs live in (the ARM emulator, `simulator.arm`, over HTTPS), and the simulation loop that boots VMs into
Nodes and moves pods on.

It plays the part Karpenter's KWOK provider plays for Karpenter: a cluster and a cloud that behave like the
real ones, in one process, so that workers can be killed and restarted without losing the cluster. The cloud
is reached only through ARM, with the real Azure SDK, exactly as on Azure; the HTTP API adds what a test or
the demo needs around it: `/aks` (where ARM is and what the worker must be told about the cluster), ARM faults
(`/faults`), ARM counters (`/counters`), a VM whose kubelet never registers (`/kubelet/never-register`), the
custom data a VM received (`/arm/custom-data/{vm}`, what a test checks the bootstrap against) and `/settings`.
At start the cluster gets its bootstrap token Secret (`simulator.nodeboot`).

Kubernetes paths follow the API server (`/api/v1/namespaces/default/pods`, `/apis/karpenter.sh/v1/nodeclaims`,
`.../status`, `.../eviction`, `.../scale`). Objects are JSON manifests; PUT takes `metadata.resourceVersion`
as a precondition; PATCH is a JSON merge patch. Errors are JSON `{"code", "message", "providerCode", ...}`
where `code` names the `core.errors` class without its `Error` suffix (`NotFound`, `InsufficientCapacity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.api.manifests import ManifestError, load_yaml
from core.api.meta import problems_of
from core.errors import (
    CloudError,
    ConflictError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    PDBViolationError,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)
from simulator.aks import ClusterInfo as ClusterInfo  # re-exported: callers still import it from here
from simulator.aks import merge_patch as merge_patch
from simulator.arm import ArmSettings, ArmState, Fault, start_arm
from simulator.kubelet import Kubelet, KubeletSettings
from simulator.kubescheduler import KubeScheduler
from simulator.nodeboot import BOOTSTRAP_NAMESPACE, bootstrap_token_secret, cluster_tokens
from simulator.state import (
    KINDS,
    POD,
    SCALABLE,
    SECRET,
    SNAPSHOT_KINDS,
    ClusterState,
    Kind,
    Write,
    kind_of,
)

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8181
DEFAULT_ARM_PORT = 8182
STEP_GAP = 0.01
"""The shortest time between two simulation steps: a burst of requests is handled in one step."""


class SimulatorSettings(BaseModel):
    """Everything the simulated AKS can be told. Durations are seconds in JSON."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    seed: int = 0
    scheduler_interval: timedelta = timedelta(seconds=0.2)
    """The kube-scheduler runs when pods or nodes changed, at most once per interval."""
    watch_heartbeat: timedelta = timedelta(seconds=10)
    """An idle watch stream sends an empty line this often, so clients notice a dead connection."""
    history_limit: int = Field(default=200_000, ge=1)
    """Watch events kept; a watch from an older version gets 410 Expired."""
    cluster_name: str = "nodewright"
    """The cluster whose VMs (by the `karpenter.azure.com_cluster` tag) boot into Nodes."""
    kubernetes_version: str = Field(default="1.33.5", pattern=r"^\d+\.\d+\.\d+$")
    """The API server's version (what a worker's `NODEWRIGHT_KUBERNETES_VERSION` should say)."""
    node_image_version: str = "202512.18.0"
    """The AKS node image version a worker boots when the AKSNodeClass status names no images."""
    arm: ArmSettings = Field(default_factory=ArmSettings)
    kubelet: KubeletSettings = Field(default_factory=KubeletSettings)

    @classmethod
    def instant(cls, seed: int = 0) -> SimulatorSettings:
        """No delays anywhere: VMs boot, register and turn Ready at once (tests and benchmarks)."""
        zero = timedelta(0)
        return cls(
            seed=seed,
            scheduler_interval=zero,
            arm=ArmSettings(seed=seed),
            kubelet=KubeletSettings(
                boot_delay=zero,
                registration_delay=zero,
                node_ready_delay=zero,
                startup_taint_delay=zero,
                pod_ready_delay=zero,
            ),
        )


FIXED_SETTINGS = (
    ("seed",),
    ("history_limit",),
    ("cluster_name",),
    ("kubernetes_version",),
    ("arm", "subscription_id"),
    ("arm", "resource_group"),
    ("arm", "resource_groups"),
    ("arm", "region"),
    ("arm", "token"),
    ("arm", "seed"),
)
"""Settings that name the cluster or shape its history; only delays and intervals change at run time."""


def update_settings(settings: SimulatorSettings, patch: Mapping[str, Any]) -> SimulatorSettings:
    """Apply a merge patch to the settings in place (components hold them); `InvalidError` if not allowed."""
    try:
        wanted = SimulatorSettings.model_validate(merge_patch(settings.model_dump(mode="json"), patch))
    except ValidationError as error:
        raise InvalidError("settings: " + "; ".join(problems_of(error)), code="Invalid") from None
    for path in FIXED_SETTINGS:
        if functools.reduce(getattr, path, wanted) != functools.reduce(getattr, path, settings):
            raise InvalidError(
                f"settings: {'.'.join(path)} cannot change while the simulator runs", code="Invalid"
            )
    for name in SimulatorSettings.model_fields:
        value = getattr(wanted, name)
        if isinstance(value, BaseModel):
            section = getattr(settings, name)
            for field_name in type(value).model_fields:
                setattr(section, field_name, getattr(value, field_name))
        else:
            setattr(settings, name, value)
    return settings


class Simulator:
    """The cluster state, the ARM emulator's state, the kubelet model and the kube-scheduler, and the loop that
    drives them."""

    def __init__(
        self, settings: SimulatorSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or SimulatorSettings()
        seed = self.settings.seed
        self.state = ClusterState(seed=seed, history_limit=self.settings.history_limit)
        self.arm = ArmState(self.settings.arm, clock=clock)
        token_secret = bootstrap_token_secret(seed)
        self.state.create(SECRET.name, token_secret)
        self.bootstrap_token_secret = f"{BOOTSTRAP_NAMESPACE}/{token_secret.metadata.name}"
        self.kubelet = Kubelet(
            self.state, self.arm, self.settings.kubelet, self.settings.cluster_name, self._bootstrap_tokens
        )
        self.scheduler = KubeScheduler(self.state)
        self.arm_endpoint: str | None = None
        self.arm_ca_file: str | None = None
        self._clock = clock
        self._wake = asyncio.Event()
        self.state.add_listener(self.wake)
        self.arm.on_change = self.wake

    def _bootstrap_tokens(self) -> frozenset[str]:
        secrets = self.state.objects(SECRET.name, BOOTSTRAP_NAMESPACE)
        return cluster_tokens({secret.metadata.name: secret for secret in secrets})

    def info(self) -> ClusterInfo:
        settings = self.settings
        arm = settings.arm
        return ClusterInfo(
            cluster_name=settings.cluster_name,
            subscription_id=arm.subscription_id,
            resource_group=arm.resource_group,
            location=arm.region,
            subnet_id=(
                f"/subscriptions/{arm.subscription_id}/resourceGroups/{arm.resource_group}/providers/"
                "Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
            ),
            kubernetes_version=settings.kubernetes_version,
            node_image_version=settings.node_image_version,
            api_server=f"{settings.cluster_name}-dns-12345678.hcp.{arm.region}.azmk8s.io",
            bootstrap_token_secret=self.bootstrap_token_secret,
            arm_endpoint=self.arm_endpoint,
            arm_ca_file=self.arm_ca_file,
        )

    def wake(self) -> None:
        """Step soon: something changed (an object, a VM, or the delays that decide what is due)."""
        self._wake.set()

    def step(self) -> float | None:
        """Move everything that is due; when the next thing falls due, if anything waits."""
        now = self._clock()
        interval = self.settings.scheduler_interval.total_seconds()
        due = [self.kubelet.step(now), self.scheduler.step(now, interval)]
        return min((at for at in due if at is not None), default=None)

    async def run(self) -> None:
        """Step whenever something changed or falls due, until cancelled. A step that fails is logged and
        the next one tries again: the simulator stays up for the processes that depend on it."""
        while True:
            self._wake.clear()
            started = self._clock()
            try:
                due = self.step()
            except Exception:
                logger.exception("simulation step failed")
                due = started + 1.0
            timeout = None if due is None else max(0.0, due - self._clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            await asyncio.sleep(max(0.0, started + STEP_GAP - self._clock()))


# --- errors on the wire -----------------------------------------------------------------------------------

_STATUS: dict[type[CloudError], int] = {
    NotFoundError: 404,
    ConflictError: 409,
    InvalidError: 422,
    InsufficientCapacityError: 409,
    QuotaExceededError: 409,
    ThrottledError: 429,
    PDBViolationError: 429,
    TransientError: 503,
}


def error_response(error: CloudError) -> web.Response:
    """The error as JSON: `code` is the `core.errors` class name without `Error`, plus its typed details."""
    body: dict[str, Any] = {
        "code": type(error).__name__.removesuffix("Error"),
        "message": str(error),
        "providerCode": error.code,
    }
    headers: dict[str, str] = {}
    if isinstance(error, InsufficientCapacityError | QuotaExceededError):
        body["offering"] = asdict(error.offering)
    if isinstance(error, QuotaExceededError):
        body["scope"] = error.scope
    if isinstance(error, ThrottledError):
        body["retryAfterSeconds"] = error.retry_after_seconds
        headers["Retry-After"] = str(max(1, round(error.retry_after_seconds)))
    status = (
        410 if isinstance(error, ConflictError) and error.code == "Expired" else _STATUS.get(type(error), 500)
    )
    return web.json_response(body, status=status, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except CloudError as error:
        return error_response(error)
    except web.HTTPNotFound:
        return error_response(NotFoundError(f"no route for {request.method} {request.path}", code="NotFound"))
    except web.HTTPMethodNotAllowed:
        return error_response(
            InvalidError(f"{request.method} is not allowed on {request.path}", code="MethodNotAllowed")
        )


# --- the HTTP API -----------------------------------------------------------------------------------------

_ROUTES: dict[tuple[str, str, str], Kind] = {
    (kind.group, api_version.rpartition("/")[2], kind.plural): kind
    for kind in KINDS.values()
    for api_version in (kind.api_version, *kind.other_versions)
}


async def _json(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError as error:
        raise InvalidError(f"the request body is not JSON: {error}", code="Invalid") from None


def _model(model: type[BaseModel], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise InvalidError(f"{model.__name__}: " + "; ".join(problems_of(error)), code="Invalid") from None


def _dump(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def _lookup(manifest: Mapping[str, Any], path: str) -> str:
    value: Any = manifest
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def _field_selector(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """`spec.nodeName=node-a,status.phase!=Running` over any dotted path of the manifest."""
    terms = []
    for term in filter(None, text.split(",")):
        negate = "!=" in term
        path, _, value = term.partition("!=" if negate else "=")
        terms.append((path.strip(), value.lstrip("=").strip(), negate))
    return lambda manifest: all((_lookup(manifest, path) == value) != negate for path, value, negate in terms)


def _label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Equality-based selectors: `app=web`, `app==web`, `tier!=db`, `gpu` (exists), `!gpu` (absent)."""
    terms: list[tuple[str, str, str]] = []
    for term in filter(None, (part.strip() for part in text.split(","))):
        if "!=" in term:
            key, _, value = term.partition("!=")
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, _, value = term.partition("=")
            terms.append(("=", key.strip(), value.lstrip("=").strip()))
        elif term.startswith("!"):
            terms.append(("absent", term[1:].strip(), ""))
        else:
            terms.append(("exists", term, ""))

    def holds(labels: Mapping[str, str], operator: str, key: str, value: str) -> bool:
        match operator:
            case "=":
                return labels.get(key) == value
            case "!=":
                return labels.get(key) != value
            case "absent":
                return key not in labels
        return key in labels

    return lambda labels: all(holds(labels, *term) for term in terms)


class _Api:
    """The request handlers, bound to one simulator."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        self.state = simulator.state
        self.arm = simulator.arm

    def routes(self) -> list[web.RouteDef]:
        routes = [
            web.get("/healthz", self.health),
            web.get("/snapshot", self.snapshot),
            web.post("/apply", self.apply),
            web.get("/watch", self.watch),
            web.get("/aks", self.cluster_info),
            web.get("/arm/custom-data/{vm}", self.custom_data),
            web.post("/kubelet/never-register", self.never_register),
            web.get("/counters", self.counters),
            web.get("/faults", self.list_faults),
            web.post("/faults", self.add_fault),
            web.delete("/faults", self.clear_faults),
            web.delete("/faults/{id}", self.remove_fault),
            web.get("/settings", self.get_settings),
            web.patch("/settings", self.patch_settings),
        ]
        for prefix in ("/api/{version}", "/apis/{group}/{version}"):
            for scope in ("/namespaces/{namespace}", ""):
                base = f"{prefix}{scope}/{{plural}}"
                routes += [
                    web.get(base, self.list_objects),
                    web.post(base, self.create_object),
                    web.get(base + "/{name}", self.get_object),
                    web.put(base + "/{name}", self.replace_object),
                    web.patch(base + "/{name}", self.patch_object),
                    web.delete(base + "/{name}", self.delete_object),
                    web.get(base + "/{name}/{subresource}", self.get_subresource),
                    web.put(base + "/{name}/{subresource}", self.replace_subresource),
                    web.patch(base + "/{name}/{subresource}", self.patch_subresource),
                    web.post(base + "/{name}/{subresource}", self.post_subresource),
                ]
        return routes

    # --- cluster-wide ------------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "resourceVersion": self.state.resource_version})

    async def snapshot(self, request: web.Request) -> web.Response:
        """Every object the scheduler reads, at one resource version."""
        items = [kind.manifest(obj) for kind in SNAPSHOT_KINDS for obj in self.state.objects(kind.name)]
        return web.json_response({"resourceVersion": self.state.resource_version, "items": items})

    async def apply(self, request: web.Request) -> web.Response:
        """Manifests as YAML or JSON text (one object, a list, or a `List`), created or updated."""
        try:
            documents = load_yaml(await request.text(), "request body")
        except ManifestError as error:
            raise InvalidError(str(error), code="Invalid") from None
        # A JSON array is one YAML document holding every object.
        objects = [
            item
            for document in documents
            for item in (document if isinstance(document, list) else [document])
        ]
        return web.json_response({"results": self.state.apply(objects)})

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """Newline-delimited WatchEvents after `resourceVersion`, filtered by `kind` (repeatable), forever."""
        try:
            since = int(request.query.get("resourceVersion") or 0)
        except ValueError:
            raise InvalidError("resourceVersion must be an integer", code="Invalid") from None
        kinds = set(request.query.getall("kind", []))
        self.state.events_since(since)  # a version too old fails now, as a 410, before the stream starts
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        heartbeat = self.simulator.settings.watch_heartbeat.total_seconds()
        with contextlib.suppress(ConnectionResetError, ConflictError):
            while not self.state.closed:
                lines = []
                for event in self.state.events_since(since):
                    since = event.resource_version
                    if not kinds or event.kind in kinds:
                        lines.append(event.model_dump_json() + "\n")
                if lines:
                    await response.write("".join(lines).encode())
                if not await self.state.wait_for_change(since, heartbeat) and not self.state.closed:
                    await response.write(b"\n")
        return response

    # --- Kubernetes objects ------------------------------------------------------------------------------

    def _kind(self, request: web.Request) -> Kind:
        info = request.match_info
        kind = _ROUTES.get((info.get("group", ""), info["version"], info["plural"]))
        if kind is None:
            raise NotFoundError(
                f"the server could not find the requested resource ({request.path})", code="NotFound"
            )
        return kind

    def _namespace(self, request: web.Request, kind: Kind) -> str | None:
        namespace = request.match_info.get("namespace")
        if namespace is not None and not kind.namespaced:
            raise NotFoundError(f"{kind.name} is not namespaced", code="NotFound")
        return namespace

    def _current(self, request: web.Request, kind: Kind) -> Any:
        name, namespace = request.match_info["name"], self._namespace(request, kind)
        obj = self.state.get(kind.name, name, namespace)
        if obj is None:
            where = f"{namespace}/{name}" if namespace else name
            raise NotFoundError(f'{kind.plural} "{where}" not found', code="NotFound")
        return obj

    def _parse(self, request: web.Request, kind: Kind, body: Any) -> Any:
        if isinstance(body, dict):
            body.setdefault("apiVersion", kind.api_version)
            body.setdefault("kind", kind.name)
        if kind_of(body) is not kind:
            raise InvalidError(f"the body is a {body.get('kind')}, not a {kind.name}", code="Invalid")
        obj = kind.parse(body)
        namespace = request.match_info.get("namespace")
        if namespace is not None and kind.namespaced and body.get("metadata", {}).get("namespace") is None:
            obj.metadata.namespace = namespace
        if namespace is not None and obj.metadata.namespace != namespace:
            raise InvalidError(
                "the namespace of the object does not match the namespace of the request", code="Invalid"
            )
        name = request.match_info.get("name")
        if name is not None and obj.metadata.name != name:
            raise InvalidError(
                f"the name of the object does not match the name of the request ({name})", code="Invalid"
            )
        return obj

    async def list_objects(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        namespace = self._namespace(request, kind)
        fields = _field_selector(request.query.get("fieldSelector", ""))
        selected = _label_selector(request.query.get("labelSelector", ""))
        items = [
            manifest
            for obj in self.state.objects(kind.name, namespace)
            if selected(obj.metadata.labels) and fields(manifest := kind.manifest(obj))
        ]
        return web.json_response(
            {
                "apiVersion": kind.api_version,
                "kind": f"{kind.name}List",
                "metadata": {"resourceVersion": str(self.state.resource_version)},
                "items": items,
            }
        )

    async def create_object(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        self._namespace(request, kind)
        obj = self.state.create(kind.name, self._parse(request, kind, await _json(request)))
        return web.json_response(kind.manifest(obj), status=201)

    async def get_object(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        return web.json_response(kind.manifest(self._current(request, kind)))

    async def replace_object(self, request: web.Request, write: Write = Write.OBJECT) -> web.Response:
        kind = self._kind(request)
        self._current(request, kind)
        obj = self.state.update(kind.name, self._parse(request, kind, await _json(request)), write)
        return web.json_response(kind.manifest(obj))

    async def patch_object(self, request: web.Request, write: Write = Write.OBJECT) -> web.Response:
        kind = self._kind(request)
        current = kind.manifest(self._current(request, kind))
        patched = merge_patch(current, await _json(request))
        obj = self.state.update(kind.name, self._parse(request, kind, patched), write)
        return web.json_response(kind.manifest(obj))

    async def delete_object(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        current = self._current(request, kind)
        last = self.state.delete(kind.name, current.metadata.name, current.metadata.namespace)
        return web.json_response(kind.manifest(last))

    def _subresource(self, request: web.Request, kind: Kind, allowed: tuple[str, ...]) -> str:
        subresource = request.match_info["subresource"]
        if subresource not in allowed or (subresource == "scale" and kind.name not in SCALABLE):
            raise NotFoundError(f"{kind.plural} have no {subresource} subresource here", code="NotFound")
        return subresource

    async def get_subresource(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        if self._subresource(request, kind, ("status", "scale")) == "status":
            return await self.get_object(request)
        return web.json_response(self._scale(kind, self._current(request, kind)))

    async def replace_subresource(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        if self._subresource(request, kind, ("status", "scale")) == "status":
            return await self.replace_object(request, Write.STATUS)
        return await self._set_scale(request, kind, await _json(request))

    async def patch_subresource(self, request: web.Request) -> web.Response:
        kind = self._kind(request)
        if self._subresource(request, kind, ("status", "scale")) == "status":
            return await self.patch_object(request, Write.STATUS)
        current = self._scale(kind, self._current(request, kind))
        return await self._set_scale(request, kind, merge_patch(current, await _json(request)))

    async def post_subresource(self, request: web.Request) -> web.Response:
        """The eviction API: `POST .../pods/{name}/eviction`."""
        kind = self._kind(request)
        self._subresource(request, kind, ("eviction",) if kind is POD else ())
        pod = self._current(request, kind)
        self.state.evict(pod.metadata.namespace, pod.metadata.name)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"}, status=201)

    def _scale(self, kind: Kind, obj: Any) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": obj.metadata.name, "namespace": obj.metadata.namespace},
            "spec": {"replicas": obj.spec.replicas},
        }

    async def _set_scale(self, request: web.Request, kind: Kind, body: Any) -> web.Response:
        replicas = body.get("spec", {}).get("replicas") if isinstance(body, Mapping) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InvalidError("spec.replicas: an integer is required", code="Invalid")
        current = self._current(request, kind)
        obj = self.state.scale(kind.name, current.metadata.name, current.metadata.namespace, replicas)
        return web.json_response(self._scale(kind, obj))

    # --- the cloud ---------------------------------------------------------------------------------------

    async def cluster_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.simulator.info().model_dump(mode="json"))

    async def custom_data(self, request: web.Request) -> web.Response:
        """The base64 custom data a VM was created with (ARM never returns it; a VM's agent reads it on boot)."""
        vm = self.arm.vm(request.match_info["vm"])
        if vm is None or vm.custom_data is None:
            raise NotFoundError(f"no VM {request.match_info['vm']!r} with custom data", code="NotFound")
        return web.json_response({"customData": vm.custom_data})

    async def never_register(self, request: web.Request) -> web.Response:
        body = await _json(request)
        vm = body.get("vm") if isinstance(body, Mapping) else None
        if not isinstance(vm, str) or not vm:
            raise InvalidError("never-register: 'vm' (a VM name) is required", code="Invalid")
        self.simulator.kubelet.never_register(vm)
        return web.json_response({})

    async def counters(self, request: web.Request) -> web.Response:
        return web.json_response(self.arm.counters.to_json())

    async def list_faults(self, request: web.Request) -> web.Response:
        return web.json_response({"items": [_dump(fault) for fault in self.arm.faults()]})

    async def add_fault(self, request: web.Request) -> web.Response:
        fault: Fault = _model(Fault, await _json(request))
        return web.json_response(_dump(self.arm.add_fault(fault)), status=201)

    async def clear_faults(self, request: web.Request) -> web.Response:
        self.arm.clear_faults()
        return web.json_response({})

    async def remove_fault(self, request: web.Request) -> web.Response:
        if not self.arm.remove_fault(request.match_info["id"]):
            raise NotFoundError(f"no fault with id {request.match_info['id']!r}", code="NotFound")
        return web.json_response({})

    async def get_settings(self, request: web.Request) -> web.Response:
        return web.json_response(self.simulator.settings.model_dump(mode="json"))

    async def patch_settings(self, request: web.Request) -> web.Response:
        body = await _json(request)
        if not isinstance(body, Mapping):
            raise InvalidError("settings: expected a JSON object", code="Invalid")
        settings = update_settings(self.simulator.settings, body)
        self.simulator.wake()
        return web.json_response(settings.model_dump(mode="json"))


_LOOP: web.AppKey[asyncio.Task[None]] = web.AppKey("simulation-loop", asyncio.Task)


def create_app(simulator: Simulator) -> web.Application:
    """The aiohttp application serving the simulator; its loop runs while the application does."""
    app = web.Application(middlewares=[_errors])
    app.add_routes(_Api(simulator).routes())

    async def start(app: web.Application) -> None:
        app[_LOOP] = asyncio.create_task(simulator.run(), name="simulated-aks")

    async def release_watchers(app: web.Application) -> None:
        simulator.state.close()

    async def stop(app: web.Application) -> None:
        app[_LOOP].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app[_LOOP]

    app.on_startup.append(start)
    app.on_shutdown.append(release_watchers)
    app.on_cleanup.append(stop)
    return app


@contextlib.asynccontextmanager
async def serve(
    settings: SimulatorSettings | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    arm_port: int = 0,
    ca_dir: Path | None = None,
) -> AsyncIterator[str]:
    """Serve the simulated AKS (HTTP) and its ARM (HTTPS) while the block runs; yields the AKS base URL.

    Port 0 picks a free port. The ARM emulator's CA certificate goes to `ca_dir` (a temporary directory, removed
    afterwards, when unset); `GET /aks` tells where both are.
    """
    simulator = Simulator(settings)
    with contextlib.ExitStack() as stack:
        directory = ca_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="simulated-aks-")))
        arm = await start_arm(simulator.arm, directory, host, arm_port)
        simulator.arm_endpoint, simulator.arm_ca_file = arm.url, str(arm.ca_pem)
        runner = web.AppRunner(create_app(simulator), access_log=None, shutdown_timeout=1.0)
        try:
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound_host, bound_port = runner.addresses[0][:2]
            logger.info(
                "simulated AKS listening on %s:%d (seed %d), its ARM on %s (CA certificate %s)",
                bound_host,
                bound_port,
                simulator.settings.seed,
                arm.url,
                arm.ca_pem,
            )
            yield f"http://{host}:{bound_port}"
        finally:
            await runner.cleanup()
            await arm.close()


async def run(
    settings: SimulatorSettings | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    arm_port: int = DEFAULT_ARM_PORT,
    ca_dir: Path | None = None,
) -> None:
    """Serve the simulated AKS on `host:port` and its ARM on `host:arm_port` until cancelled."""
    async with serve(settings, host, port, arm_port, ca_dir):
        await asyncio.Event().wait()
