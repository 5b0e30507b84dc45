"""The instance metadata service's Scheduled Events, served for every VM of the emulator.

A VM reads `GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01` with the header
`Metadata: true`, and approves events with a `POST` of `{"StartRequests": [{"EventId": ...}]}` to the same URL.
The emulator serves all its VMs from one place, so the VM is named in the query:

- `GET /_emulator/metadata/scheduledevents?vm=<name>[&resourceGroup=<rg>]&api-version=...`: the document
  (`simulator.arm.evictions`);
- `POST` to the same URL: starts the events named (200, empty body, as IMDS answers).

As IMDS, it needs `Metadata: true` and an `api-version` (400 otherwise), needs no bearer token, and its errors are
`{"error": "<message>"}`. The resource group defaults to the emulator's node resource group; a VM that does not
exist is 404.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web

from simulator.arm.errors import ArmError
from simulator.arm.resources import Json
from simulator.arm.state import ArmState

SCHEDULED_EVENTS_PATH = "/_emulator/metadata/scheduledevents"
SCHEDULED_EVENTS_API_VERSION = "2020-07-01"


Handler = Callable[[web.Request], Awaitable[web.Response]]


def _error(status: int, message: str) -> ArmError:
    return ArmError(status, "", message)


def _imds_errors(handler: Handler) -> Handler:
    """Errors as IMDS writes them: `{"error": "<message>"}`."""

    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except ArmError as error:
            return web.json_response({"error": error.message}, status=error.status)

    return handle


def _vm(request: web.Request) -> tuple[str, str | None]:
    """The VM the request is about, after IMDS's own checks."""
    if request.headers.get("Metadata", "").lower() != "true":
        raise _error(400, "Bad request. Required metadata header not specified")
    if not request.query.get("api-version"):
        raise _error(
            400,
            "Bad request. api-version was not specified in the request. For more information refer to "
            "aka.ms/azureimds",
        )
    vm = request.query.get("vm")
    if not vm:
        raise _error(400, "Bad request. The emulator serves every VM: name one with ?vm=<name>.")
    return vm, request.query.get("resourceGroup")


def scheduled_events_routes(state: ArmState) -> list[web.RouteDef]:
    """The Scheduled Events endpoints over `state`."""

    async def get(request: web.Request) -> web.Response:
        vm, group = _vm(request)
        return web.json_response(state.scheduled_events(vm, group))

    async def start(request: web.Request) -> web.Response:
        vm, group = _vm(request)
        try:
            body = await request.json()
        except ValueError:
            raise _error(400, "Bad request. The body is not JSON.") from None
        requests = body.get("StartRequests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not all(
            isinstance(item, dict) and isinstance(item.get("EventId"), str) for item in requests
        ):
            raise _error(400, 'Bad request. Expected {"StartRequests": [{"EventId": "<id>"}, ...]}.')
        starts: list[Json] = requests
        state.start_events(vm, [item["EventId"] for item in starts], group)
        return web.Response(status=200)

    return [
        web.get(SCHEDULED_EVENTS_PATH, _imds_errors(get)),
        web.post(SCHEDULED_EVENTS_PATH, _imds_errors(start)),
    ]
