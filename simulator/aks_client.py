"""A client of the emulated AKS's control API (`/_emulator` on the ARM emulator, `simulator.aks`): faults and
counters of its ARM, what a worker must know about the cluster, the custom data a VM got, VMs whose node never
joins, Spot evictions and VMs that vanish, a VM's Scheduled Events as it reads them, the settings, and identities
federated with a ServiceAccount. The cloud
itself is reached through ARM with the Azure SDK, and Kubernetes through its API server: never through this
client.

Errors come back as the typed errors of `core.errors`: 404 `NotFoundError`, other 4xx `InvalidError`, 5xx and
lost connections `TransientError`, each carrying the emulator's ARM error code (the Scheduled Events endpoint
answers as IMDS does, with a message and no code).
"""

from __future__ import annotations

import builtins
import collections
import json
import ssl
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp

from core.errors import CloudError, InvalidError, NotFoundError, TransientError
from simulator.aks import AksSettings, ClusterInfo
from simulator.arm import Counters, Fault, ScheduledEvent
from simulator.arm.imds import SCHEDULED_EVENTS_API_VERSION, SCHEDULED_EVENTS_PATH
from simulator.workload_identity import FederatedIdentity


def decode_error(status: int, body: Any) -> CloudError:
    """The typed error for an ARM-style error response `{"error": {"code", "message"}}`."""
    error = body.get("error") if isinstance(body, Mapping) else None
    details: Mapping[str, Any] = error if isinstance(error, Mapping) else {"message": error}
    message = str(details.get("message") or f"HTTP {status}")
    code = str(details.get("code") or "")
    if status == 404:
        return NotFoundError(message, code=code or "NotFound")
    if status >= 500:
        return TransientError(message, code=code or "ServerError")
    return InvalidError(message, code=code or "Invalid")


class AksEmulatorClient:
    """The control API of an emulated AKS at `base_url` (its ARM endpoint), verified with `ca_file`. Use it as
    an async context manager, or call `close()`."""

    def __init__(self, base_url: str, ca_file: Path | str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._ca_file = str(ca_file)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
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
        # Made on first use, inside the event loop that uses it.
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=self._ca_file))
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; the decoded JSON answer (None when empty), or the typed error."""
        try:
            async with self._http().request(
                method, self.base_url + path, json=body, params=params, headers=headers
            ) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise TransientError(
                f"{method} {path}: {error or type(error).__name__}", code="ConnectionError"
            ) from error
        try:
            payload = json.loads(raw) if raw.strip() else None
        except ValueError:
            payload = None
        if status >= 400:
            raise decode_error(status, payload)
        return payload

    async def add_fault(self, fault: Fault) -> Fault:
        """Inject a fault into the emulated ARM; the stored fault has its id."""
        body = await self._call("POST", "/_emulator/faults", fault.model_dump(mode="json", exclude_none=True))
        return Fault.model_validate(body)

    async def faults(self) -> builtins.list[Fault]:
        body = await self._call("GET", "/_emulator/faults")
        return [Fault.model_validate(item) for item in body["value"]]

    async def remove_fault(self, fault_id: str) -> None:
        await self._call("DELETE", f"/_emulator/faults/{quote(fault_id, safe='')}")

    async def clear_faults(self) -> None:
        await self._call("DELETE", "/_emulator/faults")

    async def counters(self) -> Counters:
        """What the emulated ARM was asked to do and did (VMs created and deleted, requests by kind, ...)."""
        body = dict(await self._call("GET", "/_emulator/counters"))
        body["requests"] = collections.Counter(body.get("requests") or {})
        return Counters(**body)

    async def resources(self) -> builtins.list[dict[str, Any]]:
        """Every resource the emulated ARM holds (VMs, NICs, disks), as ARM shows them."""
        body = await self._call("GET", "/_emulator/resources")
        return [dict(item) for item in body["value"]]

    async def cluster_info(self) -> ClusterInfo:
        """Where the emulated ARM is and what a worker must know about the cluster (no secrets)."""
        return ClusterInfo.model_validate(await self._call("GET", "/_emulator/aks"))

    async def never_register(self, vm_name: str) -> None:
        """Make the node of this VM never join (a node whose boot fails)."""
        await self._call("POST", "/_emulator/never-register", {"vm": vm_name})

    async def crash_agent(self, vm_name: str) -> None:
        """Crash the node agent of this VM; a new one joins from the start (a kubelet restarted)."""
        await self._call("POST", "/_emulator/crash-agent", {"vm": vm_name})

    async def custom_data(self, vm_name: str) -> str:
        """The base64 custom data the VM was created with, as its agent reads it on boot (tests only)."""
        body = await self._call("GET", f"/_emulator/custom-data/{quote(vm_name, safe='')}")
        return str(body["customData"])

    async def evict(self, vm_name: str, notice: timedelta | None = None) -> ScheduledEvent:
        """Evict a Spot VM as ARM's `simulateEviction` does, with `notice` instead of the settings' when given:
        its Preempt event (the VM is deleted at the event's `not_before`)."""
        body: dict[str, Any] = {"vm": vm_name}
        if notice is not None:
            body["noticeSeconds"] = notice.total_seconds()
        return ScheduledEvent.from_json(await self._call("POST", "/_emulator/evict", body))

    async def vanish(self, vm_name: str) -> None:
        """Remove a VM at once, with no notice (a host failure, or a delete nobody was told about)."""
        await self._call("POST", "/_emulator/vanish", {"vm": vm_name})

    async def scheduled_events(self, vm_name: str) -> dict[str, Any]:
        """The VM's Scheduled Events document, read as the VM reads IMDS."""
        return dict(await self._imds("GET", vm_name))

    async def start_events(self, vm_name: str, *event_ids: str) -> None:
        """Approve the VM's events, as the VM does through IMDS: they start at once."""
        await self._imds(
            "POST", vm_name, {"StartRequests": [{"EventId": event_id} for event_id in event_ids]}
        )

    async def _imds(self, method: str, vm_name: str, body: Any = None) -> Any:
        return await self._call(
            method,
            SCHEDULED_EVENTS_PATH,
            body,
            params={"vm": vm_name, "api-version": SCHEDULED_EVENTS_API_VERSION},
            headers={"Metadata": "true"},
        )

    async def federate(self, namespace: str, service_account: str) -> FederatedIdentity:
        """A user-assigned identity federated with the ServiceAccount (the emulated AKS runs workload identity)."""
        body = {"namespace": namespace, "serviceAccount": service_account}
        return FederatedIdentity.model_validate(
            await self._call("POST", "/_emulator/workload-identity", body)
        )

    async def settings(self) -> AksSettings:
        return AksSettings.model_validate(await self._call("GET", "/_emulator/settings"))

    async def update_settings(self, patch: Mapping[str, Any]) -> AksSettings:
        """Change delays and timings at run time (a JSON merge patch, durations in seconds)."""
        return AksSettings.model_validate(await self._call("PATCH", "/_emulator/settings", dict(patch)))
