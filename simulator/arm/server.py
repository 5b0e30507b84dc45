"""The emulator over HTTPS: ARM's routes (resources, lists, Resource SKUs, operation status, the VM action
`simulateEviction`), the Scheduled Events of its VMs (`imds`), the `/_emulator` control API, and serving it in the
running event loop (`start_arm`, `serve_arm`, `RunningArm`, with the task that evicts Spot VMs at their
deadlines)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import ValidationError

from simulator.arm.credentials import DEFAULT_TOKEN, StaticTokenCredential
from simulator.arm.errors import ArmError
from simulator.arm.faults import Call, Fault, FaultAction, capacity_type_of, logical_zone
from simulator.arm.imds import scheduled_events_routes
from simulator.arm.resources import (
    RESOURCE_TYPES,
    Json,
    Operation,
    OperationKind,
    OperationStatus,
    ProvisioningState,
    Resource,
    ResourceType,
    json_object,
)
from simulator.arm.state import ArmState
from simulator.arm.store import DEFAULT_RESOURCE_GROUP, DEFAULT_SUBSCRIPTION, ArmSettings, RequestRecord
from simulator.arm.subnets import get_subnet
from simulator.arm_tls import DEFAULT_HOSTS, server_tls
from simulator.retail_prices import add_retail_prices

logger = logging.getLogger(__name__)

STATE_KEY = web.AppKey("arm_state", ArmState)
_LOCATION_FILTER = re.compile(r"^\s*location\s+eq\s+'([^']*)'\s*$", re.IGNORECASE)
_VM_ACTIONS = {"simulateeviction": "simulateEviction"}


@dataclass(frozen=True, slots=True)
class _Route:
    """A parsed ARM path."""

    subscription: str
    resource_group: str | None = None
    resource_type: ResourceType | None = None
    name: str | None = None
    skus: bool = False
    operation: str | None = None
    namespace: str = ""
    monitor: bool = False
    """A Location (operation result) URL rather than an Azure-AsyncOperation status URL."""
    action: str | None = None
    """A POST action on the resource (`simulateEviction`)."""
    vnet: str | None = None
    """The virtual network of a subnet (`name`)."""
    extension: str | None = None
    """An extension of the VM `name` (`virtualMachines/<vm>/extensions/<extension>`)."""

    @property
    def resource(self) -> str:
        if self.operation is not None:
            return "operations"
        if self.vnet is not None:
            return "subnets"
        if self.extension is not None:
            return "extensions"
        if self.skus:
            return "skus"
        return self.resource_type.short if self.resource_type else ""


def _route(request: web.Request) -> _Route:
    parts = [part for part in request.path.split("/") if part]
    lower = [part.lower() for part in parts]
    not_found = ArmError(
        404, "NotFound", f"No HTTP resource was found that matches the request URI '{request.path}'."
    )
    if len(parts) < 2 or lower[0] != "subscriptions":
        raise not_found
    subscription = parts[1]
    rest, rest_lower = parts[2:], lower[2:]
    resource_group = None
    if len(rest) >= 2 and rest_lower[0] == "resourcegroups":
        resource_group, rest, rest_lower = rest[1], rest[2:], rest_lower[2:]
    if len(rest) < 3 or rest_lower[0] != "providers":
        raise not_found
    namespace = rest[1]
    locations = resource_group is None and len(rest) == 6 and rest_lower[2] == "locations"
    if locations and rest_lower[4] in ("operations", "operationresults"):
        monitor = rest_lower[4] == "operationresults" or request.query.get("monitor", "").lower() == "true"
        return _Route(subscription, namespace=namespace, operation=rest[5], monitor=monitor)
    if (
        resource_group is None
        and len(rest) == 3
        and (rest_lower[1], rest_lower[2]) == ("microsoft.compute", "skus")
    ):
        return _Route(subscription, skus=True, namespace=namespace)
    if (
        resource_group is not None
        and len(rest) == 6
        and (rest_lower[1], rest_lower[2], rest_lower[4])
        == ("microsoft.network", "virtualnetworks", "subnets")
    ):
        return _Route(subscription, resource_group, name=rest[5], namespace=namespace, vnet=rest[3])
    resource_type = RESOURCE_TYPES.get((rest_lower[1], rest_lower[2]))
    if (
        resource_group is not None
        and resource_type is ResourceType.VIRTUAL_MACHINE
        and len(rest) == 5
        and rest_lower[4] in _VM_ACTIONS
    ):
        return _Route(
            subscription,
            resource_group,
            resource_type,
            rest[3],
            namespace=namespace,
            action=_VM_ACTIONS[rest_lower[4]],
        )
    if (
        resource_group is not None
        and resource_type is ResourceType.VIRTUAL_MACHINE
        and len(rest) == 6
        and rest_lower[4] == "extensions"
    ):
        return _Route(
            subscription, resource_group, resource_type, rest[3], namespace=namespace, extension=rest[5]
        )
    if resource_type is None or len(rest) > 4:
        raise ArmError(
            404,
            "InvalidResourceType",
            f"The resource type '{'/'.join(rest[2:3])}' could not be found in the namespace '{namespace}' for api "
            f"version '{request.query.get('api-version', '')}'.",
        )
    name = rest[3] if len(rest) == 4 else None
    return _Route(subscription, resource_group, resource_type, name, namespace=namespace)


def _check_auth(state: ArmState, request: web.Request) -> None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        authority = state.settings.azure_cloud.authority_host
        raise ArmError(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
            headers={
                "WWW-Authenticate": f'Bearer authorization_uri="https://{authority}/common", '
                'error="invalid_token", error_description="The authentication failed because of missing '
                "'Authorization' header.\""
            },
        )
    if state.settings.token is not None and token.strip() != state.settings.token:
        raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
    if state.directory.enforced:
        problem = state.directory.check_bearer(token.strip())
        if problem is not None:
            raise ArmError(401, *problem)


async def json_body(request: web.Request) -> Json:
    """The request's JSON object; 400 `InvalidRequestContent` for anything else."""
    try:
        body = await request.json()
    except ValueError as error:
        raise ArmError(
            400,
            "InvalidRequestContent",
            f"The request content was invalid and could not be deserialized: {error}",
        ) from None
    return json_object(body, "the request body")


def _vm_call(method: str, name: str, vm: Json | None) -> Call:
    if vm is None:
        return Call(method, ResourceType.VIRTUAL_MACHINE.short, name)
    properties = vm.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    hardware = properties.get("hardwareProfile")
    hardware = hardware if isinstance(hardware, dict) else {}
    zones = vm.get("zones")
    zones = zones if isinstance(zones, list) else []
    return Call(
        method,
        ResourceType.VIRTUAL_MACHINE.short,
        name,
        vm_size=str(hardware.get("vmSize") or ""),
        zone=logical_zone(str(zones[0])) if zones else "",
        capacity_type=capacity_type_of(str(properties.get("priority") or "Regular")),
    )


class _Arm:
    """The ARM request handler: one instance per app, over one state."""

    def __init__(self, state: ArmState) -> None:
        self.state = state

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_emulator/"):
            try:
                return await _control(self.state, request)
            except ArmError as error:
                return error.response()
        state = self.state
        arrived = state.now()
        call = Call(request.method, "", "")
        try:
            route, body = await self._parse(request)
            call = self._call(request.method, route, body)
            fault = state.fire(call, (FaultAction.THROTTLE, FaultAction.REJECT))
            if fault is not None:
                raise state.fault_error(fault, call)
            response = self._dispatch(request, route, body, call)
        except ArmError as error:
            response = error.response()
        state.counters.requests[f"{request.method} {call.resource or '?'}"] += 1
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        state.requests.append(
            RequestRecord(
                call.method,
                call.resource,
                call.name,
                response.status,
                arrived,
                peer[1] if isinstance(peer, tuple) else None,
                request.host,
            )
        )
        drop = state.fire(call, (FaultAction.DROP_RESPONSE,)) is not None
        logger.debug(
            "ARM emulator: %s %s -> %d%s",
            request.method,
            request.path,
            response.status,
            " (dropped)" if drop else "",
        )
        if drop and request.transport is not None:
            state.counters.responses_dropped += 1
            request.transport.abort()
        return response

    async def _parse(self, request: web.Request) -> tuple[_Route, Json | None]:
        """The route and JSON body of an authenticated ARM request."""
        _check_auth(self.state, request)
        if "api-version" not in request.query:
            raise ArmError(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
        route = _route(request)
        self.state.check_scope(route.subscription, route.resource_group)
        body = await json_body(request) if request.method in ("PUT", "PATCH") else None
        return route, body

    def _call(self, method: str, route: _Route, body: Json | None) -> Call:
        if route.extension is not None:
            return Call(method, route.resource, route.extension)
        if route.resource_type is ResourceType.VIRTUAL_MACHINE and route.name is not None:
            if body is None and route.resource_group is not None:
                stored = self.state.resource(route.resource_type, route.name, route.resource_group)
                return _vm_call(method, route.name, stored.body if stored else None)
            return _vm_call(method, route.name, body)
        return Call(method, route.resource, route.name or route.operation or "")

    def _dispatch(self, request: web.Request, route: _Route, body: Json | None, call: Call) -> web.Response:
        state = self.state
        method = request.method
        api_version = request.query["api-version"]
        base = f"{request.scheme}://{request.host}"
        if route.operation is not None:
            _allow(method, "GET")
            return self._operation(request, route)
        if route.skus:
            _allow(method, "GET")
            return self._skus(request)
        if route.vnet is not None and route.resource_group is not None and route.name is not None:
            _allow(method, "GET")
            return web.json_response(get_subnet(state.settings, route.resource_group, route.vnet, route.name))
        assert route.resource_type is not None
        resource_type = route.resource_type
        if route.name is None:
            _allow(method, "GET")
            return _page(
                request,
                [r.view() for r in state.list_resources(resource_type, route.resource_group)],
                state.settings.page_size,
            )
        if route.resource_group is None:
            raise ArmError(
                404, "NotFound", f"No HTTP resource was found that matches the request URI '{request.path}'."
            )
        group, name = route.resource_group, route.name
        if route.extension is not None:
            return self._extension(method, group, name, route.extension, body)
        if route.action == "simulateEviction":
            _allow(method, "POST")
            state.simulate_eviction(group, name)
            return web.Response(status=204)
        if method == "GET":
            return web.json_response(_with_instance_view(request, state.get(resource_type, group, name)))
        if method == "PATCH":
            _allow(method, "PATCH", supported=resource_type is not ResourceType.DISK)
            assert body is not None
            return web.json_response(state.update_tags(resource_type, group, name, body).view())
        if method == "PUT" and resource_type is not ResourceType.DISK:
            assert body is not None
            put = state.put_vm if resource_type is ResourceType.VIRTUAL_MACHINE else state.put_nic
            status, resource, operation = put(group, name, body, call)
            headers = {
                "Azure-AsyncOperation": self._operation_url(base, resource_type, operation, api_version),
                **self._retry_after(),
            }
            return web.json_response(resource.view(), status=status, headers=headers)
        if method == "DELETE":
            deleting = state.begin_delete(resource_type, group, name, call)
            if deleting is None:
                return web.Response(status=204)
            location = self._operation_url(base, resource_type, deleting, api_version, monitor=True)
            headers = {"Location": location, **self._retry_after()}
            if resource_type is not ResourceType.NETWORK_INTERFACE:
                headers["Azure-AsyncOperation"] = self._operation_url(
                    base, resource_type, deleting, api_version
                )
            return web.Response(status=202, headers=headers)
        raise _method_not_allowed(method)

    def _extension(self, method: str, group: str, vm_name: str, name: str, body: Json | None) -> web.Response:
        """A VM extension's PUT (done at once), GET or DELETE."""
        state = self.state
        if method == "PUT":
            assert body is not None
            status, view = state.put_extension(group, vm_name, name, body)
            return web.json_response(view, status=status)
        if method == "GET":
            return web.json_response(state.get_extension(group, vm_name, name))
        if method == "DELETE":
            return web.Response(status=200 if state.delete_extension(group, vm_name, name) else 204)
        raise _method_not_allowed(method)

    def _retry_after(self) -> dict[str, str]:
        return {"Retry-After": f"{self.state.settings.poll_retry_after:g}"}

    def _operation_url(
        self,
        base: str,
        resource_type: ResourceType,
        operation: Operation,
        api_version: str,
        monitor: bool = False,
    ) -> str:
        prefix = (
            f"{base}/subscriptions/{self.state.settings.subscription_id}/providers/{resource_type.namespace}"
            f"/locations/{self.state.settings.region}"
        )
        if monitor and resource_type.namespace == "Microsoft.Network":
            return f"{prefix}/operationResults/{operation.id}?api-version={api_version}"
        suffix = "monitor=true&" if monitor else ""
        return f"{prefix}/operations/{operation.id}?{suffix}api-version={api_version}"

    def _operation(self, request: web.Request, route: _Route) -> web.Response:
        assert route.operation is not None
        operation = self.state.poll(route.operation)
        if not route.monitor:
            return web.json_response(operation.to_json(), headers=self._retry_after())
        if operation.status is OperationStatus.IN_PROGRESS:
            return web.Response(status=202, headers={"Location": str(request.url), **self._retry_after()})
        if operation.status is not OperationStatus.SUCCEEDED:
            error = operation.error or {"code": "OperationFailed", "message": "The operation failed."}
            return web.json_response({"error": error}, status=400)
        if operation.kind is OperationKind.DELETE:
            return web.Response(status=204)
        resource = self.state.resource_at(operation.key)
        return web.json_response(resource.view() if resource else {}, status=200)

    def _skus(self, request: web.Request) -> web.Response:
        region = self.state.settings.region
        skus = self.state.resource_skus()
        raw_filter = request.query.get("$filter")
        if raw_filter is not None:
            match = _LOCATION_FILTER.match(raw_filter)
            if match is None:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The filter '{raw_filter}' is not supported: use location eq '<region>'.",
                )
            if match.group(1).replace(" ", "").lower() != region.lower():
                skus = []
        return _page(request, skus, self.state.settings.sku_page_size or max(len(skus), 1))


def _allow(method: str, allowed: str, supported: bool = True) -> None:
    if method != allowed or not supported:
        raise _method_not_allowed(method)


def _method_not_allowed(method: str) -> ArmError:
    return ArmError(
        405, "MethodNotAllowed", f"The requested resource does not support http method '{method}'."
    )


def _with_instance_view(request: web.Request, resource: Resource) -> Json:
    view = resource.view()
    if (
        resource.type is ResourceType.VIRTUAL_MACHINE
        and request.query.get("$expand", "").lower() == "instanceview"
    ):
        state = resource.provisioning_state
        status: Json = {
            "code": f"ProvisioningState/{state.lower()}",
            "level": "Info",
            "displayStatus": f"Provisioning {state.lower()}",
        }
        if state == ProvisioningState.FAILED and resource.failure is not None:
            # As Azure does: the failed status names the error code and carries its message.
            status["code"] = f"ProvisioningState/failed/{resource.failure.get('code', '')}"
            status["level"] = "Error"
            status["message"] = resource.failure.get("message", "")
        statuses = [status]
        if state == ProvisioningState.SUCCEEDED:
            statuses.append({"code": "PowerState/running", "level": "Info", "displayStatus": "VM running"})
        view["properties"]["instanceView"] = {"statuses": statuses}
    return view


def _page(request: web.Request, items: list[Json], page_size: int) -> web.Response:
    """One page of a list, with `nextLink` (the same URL, `$skiptoken` advanced) when more remain."""
    token = request.query.get("$skiptoken", "0")
    if not token.isdigit():
        raise ArmError(400, "InvalidParameter", f"The skip token '{token}' is not valid.")
    start = int(token)
    body: Json = {"value": items[start : start + page_size]}
    if start + page_size < len(items):
        body["nextLink"] = str(request.url.update_query({"$skiptoken": str(start + page_size)}))
    return web.json_response(body)


# --- the control API -------------------------------------------------------------------------------------


async def _control(state: ArmState, request: web.Request) -> web.Response:
    """`/_emulator/...`: faults, restrictions, counters, a resource summary, Spot evictions (`evict`, with an
    optional `noticeSeconds`) and VMs that vanish with no notice (`vanish`), as JSON (no auth)."""
    parts = [part for part in request.path.split("/") if part][1:]
    method = request.method
    if parts == ["faults"] and method == "GET":
        return web.json_response({"value": [fault.model_dump(mode="json") for fault in state.faults()]})
    if parts == ["faults"] and method == "POST":
        try:
            fault = Fault.model_validate(await json_body(request))
        except ValidationError as error:
            raise ArmError(400, "InvalidFault", str(error)) from None
        return web.json_response(state.add_fault(fault).model_dump(mode="json"), status=201)
    if parts == ["faults"] and method == "DELETE":
        state.clear_faults()
        return web.Response(status=204)
    if len(parts) == 2 and parts[0] == "faults" and method == "DELETE":
        if not state.remove_fault(parts[1]):
            raise ArmError(404, "NotFound", f"No fault with id '{parts[1]}'.")
        return web.Response(status=204)
    if parts == ["restrictions"] and method == "POST":
        body = await json_body(request)
        vm_size = body.get("vm_size")
        if not isinstance(vm_size, str) or not vm_size:
            raise ArmError(400, "InvalidRestriction", "'vm_size' is required.")
        state.restrict(vm_size, [str(zone) for zone in body.get("zones") or []])
        return web.Response(status=201)
    if parts == ["restrictions"] and method == "DELETE":
        state.clear_restrictions()
        return web.Response(status=204)
    if parts == ["counters"] and method == "GET":
        return web.json_response(state.counters.to_json())
    if parts == ["resources"] and method == "GET":
        return web.json_response({"value": [resource.view() for resource in state.resources()]})
    if parts == ["evict"] and method == "POST":
        body = await json_body(request)
        notice = body.get("noticeSeconds")
        if notice is not None and (
            isinstance(notice, bool) or not isinstance(notice, int | float) or notice < 0
        ):
            raise ArmError(
                400, "InvalidRequestContent", "'noticeSeconds' must be a number of seconds, 0 or more."
            )
        event = state.simulate_eviction(
            _resource_group(state, body),
            _vm_name(body),
            None if notice is None else timedelta(seconds=notice),
        )
        return web.json_response(event.to_json())
    if parts == ["vanish"] and method == "POST":
        body = await json_body(request)
        state.vanish(_resource_group(state, body), _vm_name(body))
        return web.Response(status=204)
    raise ArmError(404, "NotFound", f"No emulator endpoint {method} {request.path}.")


def _vm_name(body: Json) -> str:
    vm = body.get("vm")
    if not isinstance(vm, str) or not vm:
        raise ArmError(400, "InvalidRequestContent", "'vm' (a VM name) is required.")
    return vm


def _resource_group(state: ArmState, body: Json) -> str:
    return str(body.get("resourceGroup") or state.settings.resource_group)


def create_arm_app(state: ArmState, routes: Iterable[web.RouteDef] = ()) -> web.Application:
    """The aiohttp application serving ARM (and the `/_emulator` control API) from `state`; `routes` are more
    control endpoints (what the emulated AKS adds under `/_emulator`)."""
    app = web.Application()
    app[STATE_KEY] = state
    add_retail_prices(app, state.catalog)  # prices.azure.com's API, on this host (before the catch-all)
    app.add_routes(scheduled_events_routes(state))
    app.add_routes(state.directory.routes())  # Entra ID's token endpoint and IMDS's managed identity token
    app.add_routes(routes)
    app.router.add_route("*", "/{tail:.*}", _Arm(state).handle)
    return app


# --- serving ---------------------------------------------------------------------------------------------


@dataclass
class RunningArm:
    """A served emulator: its base URL, the CA file clients trust, and its state."""

    url: str
    ca_pem: Path
    state: ArmState
    runner: web.AppRunner
    evictor: asyncio.Task[None] | None = None
    """Evicts Spot VMs at their deadlines."""

    def client_options(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for an async Azure management client against this emulator, tuned for tests:
        no polling delay, few quick retries."""
        return {
            "base_url": self.url,
            "connection_verify": str(self.ca_pem),
            "polling_interval": 0,
            "retry_total": 3,
            "retry_backoff_factor": 0.01,
            "retry_backoff_max": 0.05,
            **overrides,
        }

    def credential(self) -> StaticTokenCredential:
        return StaticTokenCredential(self.state.settings.token or DEFAULT_TOKEN)

    def resolver(self, names: Iterable[str]) -> AbstractResolver:
        """An aiohttp resolver that sends `names` (on any port) to this emulator and refuses every other name, so
        clients that call a cloud's hosts reach the emulator and nothing else."""
        return EmulatorResolver(self.url, frozenset(names))

    async def close(self) -> None:
        if self.evictor is not None:
            self.evictor.cancel()
            await asyncio.wait({self.evictor})
        await self.runner.cleanup()


class EmulatorResolver(AbstractResolver):
    """Resolves some host names to an emulator's address and port; any other name fails to resolve."""

    def __init__(self, url: str, names: frozenset[str]) -> None:
        parts = urlsplit(url)
        self.address, self.port, self.names = parts.hostname or "127.0.0.1", parts.port or 443, names

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host not in self.names:
            raise OSError(f"the emulator's resolver knows no host {host!r}")
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": self.port,
                "family": socket.AF_INET6 if ":" in self.address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


async def _evict_when_due(state: ArmState) -> None:
    """Evict Spot VMs at their deadlines, and end the operations that end on their own (a VM's create that
    takes `vm_create_seconds`) at theirs (the state's wall clock), until cancelled."""
    wake = asyncio.Event()
    state.on_eviction_scheduled = wake.set
    state.on_timed = wake.set
    while True:
        wake.clear()
        try:
            state.evict_due()
            state.end_due()
            times = [moment for moment in (state.next_eviction(), state.next_due()) if moment is not None]
            due = min(times, default=None)
        except Exception:
            logger.exception(
                "ARM emulator: evicting Spot VMs or ending operations failed; trying again in a second"
            )
            due = state.wall_clock() + timedelta(seconds=1)
        timeout = None if due is None else max(0.0, (due - state.wall_clock()).total_seconds())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)


async def start_arm(
    state: ArmState,
    ca_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    routes: Iterable[web.RouteDef] = (),
    names: Iterable[str] = (),
) -> RunningArm:
    """Serve `state` over HTTPS on `host:port` (a free port for 0) in the running event loop, with the extra
    control `routes`; its certificate is good for loopback and for the host `names` (a cloud's, which clients
    resolve to it with `RunningArm.resolver`).

    The CA's PEM is written to `ca_dir`; close the result when done.
    """
    tls = server_tls(ca_dir, (*DEFAULT_HOSTS, *names))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(create_arm_app(state, routes), access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=tls.server_context)
    await site.start()
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if family == socket.AF_INET6 else host
    evictor = asyncio.create_task(_evict_when_due(state), name="arm-evictor")
    return RunningArm(f"https://{url_host}:{bound_port}", tls.ca_pem, state, runner, evictor)


@contextlib.asynccontextmanager
async def serve_arm(
    region: str = "eastus",
    subscription: str = DEFAULT_SUBSCRIPTION,
    *,
    resource_group: str = DEFAULT_RESOURCE_GROUP,
    host: str = "127.0.0.1",
    port: int = 0,
    ca_dir: Path | None = None,
    names: Iterable[str] = (),
    **settings: Any,
) -> AsyncIterator[RunningArm]:
    """An emulator served in the current event loop for the duration of the block.

    `settings` are further `ArmSettings` fields (`create_polls`, `page_size`, `token`, `cloud`, `seed`, ...). The
    CA file goes to `ca_dir`, or to a temporary directory removed afterwards; `names` are host names its
    certificate is good for besides loopback's.
    """
    state = ArmState(
        ArmSettings(region=region, subscription_id=subscription, resource_group=resource_group, **settings)
    )
    with contextlib.ExitStack() as stack:
        directory = ca_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="arm-emulator-")))
        running = await start_arm(state, directory, host, port, names=names)
        try:
            yield running
        finally:
            await running.close()
