"""An Azure Resource Manager emulator that the real Azure SDK clients talk to over HTTPS.

It serves the ARM endpoints nodewright calls, with the paths, status codes, headers and bodies Azure uses,
so the provider runs its real `azure-mgmt-compute` / `azure-mgmt-network` code (LRO pollers, paging, retries,
error mapping) against it. Point a client at it with `base_url=<url>`, `connection_verify=<ca.pem>` and a
`StaticTokenCredential`; `RunningArm.client_options()` gives those keyword arguments.

Served, under `/subscriptions/{sub}` (any `api-version` is accepted but one is required; resource groups and
names are case-insensitive):

- `resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}`: PUT (201, or 200 when it exists,
  with `Azure-AsyncOperation`), GET (`$expand=instanceView` adds statuses), PATCH (tags), DELETE (202 with
  `Azure-AsyncOperation` and `Location`).
- `resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{nic}`: PUT (201/200 with
  `Azure-AsyncOperation`), GET, PATCH (tags), DELETE (202 with `Location`, which answers 202 until done, then 204).
- `resourceGroups/{rg}/providers/Microsoft.Compute/disks/{disk}`: GET, DELETE (the managed OS disks VMs make).
- `[resourceGroups/{rg}/]providers/{namespace}/{type}`: GET lists, paged with `nextLink` (`$skiptoken`).
- `providers/Microsoft.Compute/skus`: the Resource SKUs of the region (`$filter=location eq '<region>'`).
- `providers/{namespace}/locations/{region}/operations/{id}`: LRO status `{"name", "status", "startTime",
  "endTime", "error"}`; with `monitor=true` (and `.../operationResults/{id}` for the network) it is a Location URL:
  202 while running, then 200 (create) or 204 (delete), or 400 with the error.

Behaviour that follows Azure:
- Every request needs `Authorization: Bearer <token>` (401 `AuthenticationFailed`; 401 `InvalidAuthenticationToken`
  when `ArmSettings.token` is set and differs) and `api-version` (400 `MissingApiVersionParameter`). Errors are
  `{"error": {"code", "message"[, "target"]}}`.
- An LRO answers `InProgress` to `create_polls` / `delete_polls` status reads, then ends. Reading the resource
  itself (GET) also moves its operation on, so a caller that lost its poller and GETs still sees progress.
- VM create: the body is stored as given plus `id`, `name`, `type`, `properties.provisioningState`, `vmId`,
  `timeCreated`, the OS disk's `osType` and managed disk id. `osProfile.customData` (and `adminPassword`) are
  accepted, validated (base64, at most 87,380 characters), kept apart in `Resource.custom_data`, and never
  returned, listed or logged. A size missing from the catalog, restricted (`ArmState.restrict`) or outside its
  zones gives 409 `SkuNotAvailable`; a NIC reference that does not exist 400 `InvalidResourceReference`;
  accelerated networking on a size without it 400 `VMSizeIsNotPermittedToEnableAcceleratedNetworking`; an
  ephemeral OS disk larger than its placement 400 `InvalidParameter`. A PUT on an existing VM is an update:
  changing `zones` or `customData` gives 409 `PropertyChangeNotAllowed`; a PUT while it is being deleted 409
  `OperationNotAllowed`. A managed (non-ephemeral) OS disk becomes a `disks` resource.
- VM delete removes NICs and the OS disk whose `deleteOption` is `Delete` and detaches the others; a NIC still
  attached to a VM cannot be deleted (400 `NicInUse`), nor an attached disk (409 `OperationNotAllowed`). A
  delete that overtakes a create cancels it (`Canceled`, `OperationPreempted`). DELETE of something absent
  is 204, as ARM does.
- Resource SKUs come from the shipped catalog (`core.instancetypes.catalog`): `vCPUs`, `MemoryGB`,
  `CpuArchitectureType` (x64/Arm64), `GPUs`, `HyperVGenerations`, `LowPriorityCapable`, `PremiumIO`,
  `AcceleratedNetworkingEnabled`, `EphemeralOSDiskSupported`, `SupportedEphemeralOSDiskPlacements`,
  `MaxResourceVolumeMB` (temp disk in MiB), `NvmeDiskSizeInMiB`, `CachedDiskBytes`, `EncryptionAtHostSupported`,
  `TrustedLaunchDisabled`, `UltraSSDAvailable`; `family` is the quota family; `locationInfo[0].zones` the
  size's zones; restrictions of type `Location` or `Zone` with reason `NotAvailableForSubscription`. A few
  `disks` SKUs are listed too, as the real API mixes resource types.

Injected faults (`ArmState.add_fault`, or JSON `POST /_emulator/faults`) and what the async SDK raises for each.
Every fault can be narrowed by method, resource type, name, VM size, zone and capacity type, and limited to
`times` firings. Classify by `e.error.code`, not by exception class (409 maps to `ResourceExistsError`).

| Fault | HTTP | `e.error.code` | Raised |
| --- | --- | --- | --- |
| `Fault.sku_not_available` | 409 on the PUT | `SkuNotAvailable` | `ResourceExistsError` |
| `Fault.quota_exceeded("family")` | 409 on the PUT | `OperationNotAllowed` (`<family> Cores quota`) | `ResourceExistsError` |
| `Fault.quota_exceeded("spot")` | 409 on the PUT | `OperationNotAllowed` (`LowPriorityCores`) | `ResourceExistsError` |
| `Fault.quota_exceeded("regional")` | 409 on the PUT | `OperationNotAllowed` (`Total Regional Cores`) | `ResourceExistsError` |
| `Fault.fail_late(code)` (1) | 201, LRO `Failed` | the code | `HttpResponseError`, status 200 (2) |
| `Fault.throttle(retry_after)` | 429 + `Retry-After` | `TooManyRequests` (3) | `HttpResponseError` 429 (4) |
| `Fault.transient(500)` | 500 | `InternalServerError` | `HttpResponseError` 500 (4) |
| `Fault.transient(503)` | 503 | `ServiceUnavailable` | `HttpResponseError` 503 (4) |
| `Fault(action="reject", code=..)` | the code's (5) | as given | `HttpResponseError` or a subclass |
| `Fault.slow(polls)` | LRO `InProgress` `polls` times | none | nothing: the poller polls longer |
| `Fault.drop_response()` | done, connection closed | none | `ServiceRequestError` (4) (6) |

(1) `AllocationFailed`, `ZonalAllocationFailed`, `OverconstrainedAllocationRequest`,
`OverconstrainedZonalAllocationRequest`. (2) From `poller.result()`: the failing poll is answered 200, and the VM
stays with provisioningState `Failed` until deleted. (3) Settable, e.g. ARM's `SubscriptionRequestsThrottled`;
key throttling on status 429. (4) Only once azure-core's retries run out: it retries 429 (after Retry-After),
500 and 503, and lost responses. (5) 409 for `SkuNotAvailable`, `OperationNotAllowed`
and the allocation codes, 429, 500, 503 for theirs, 400 for unknown codes; `status` overrides.
(6) aiohttp reports the closed connection as "Server disconnected", which azure-core
maps to `ServiceRequestError` (as if the request had not been sent) and retries for every method.
Quota messages carry `Current Limit: N` (`quota_limit`; the provider caches longer for 0).

Counters (`ArmState.counters`) record what was made and removed, so tests can prove a retried create made
one VM.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import copy
import logging
import random
import re
import socket
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from azure.core.credentials import AccessToken, AccessTokenInfo, TokenRequestOptions
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.instancetypes.catalog import AzureCatalog, AzureSku, load_shipped_catalog
from simulator.arm_tls import server_tls
from simulator.retail_prices import add_retail_prices

logger = logging.getLogger(__name__)

Json = dict[str, Any]

DEFAULT_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
DEFAULT_RESOURCE_GROUP = "MC_nodewright_nodewright_eastus"
DEFAULT_TOKEN = "arm-emulator-token"
CUSTOM_DATA_MAX_CHARS = 87_380
"""Azure's limit on `osProfile.customData` (base64 characters)."""
GIB = 2**30


# --- credentials -----------------------------------------------------------------------------------------


class StaticTokenCredential:
    """An async token credential that always hands out the same bearer token (azure-core ships none).

    Works with every async Azure SDK client; `scopes` records what the clients asked for.
    """

    def __init__(self, token: str = DEFAULT_TOKEN, lifetime: timedelta = timedelta(hours=1)) -> None:
        self.token = token
        self.lifetime = lifetime
        self.scopes: list[str] = []
        self.closed = False

    def _expires_on(self) -> int:
        return int(time.time() + self.lifetime.total_seconds())

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.scopes.extend(scopes)
        return AccessToken(self.token, self._expires_on())

    async def get_token_info(
        self, *scopes: str, options: TokenRequestOptions | None = None
    ) -> AccessTokenInfo:
        self.scopes.extend(scopes)
        return AccessTokenInfo(self.token, self._expires_on())

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> StaticTokenCredential:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


# --- errors ----------------------------------------------------------------------------------------------


class ArmError(Exception):
    """An ARM error response: HTTP status and `{"error": {"code", "message"[, "target"]}}`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        target: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.target = target
        self.headers = headers or {}

    def body(self) -> Json:
        error: Json = {"code": self.code, "message": self.message}
        if self.target is not None:
            error["target"] = self.target
        return {"error": error}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status, headers=self.headers)


ALLOCATION_CODES = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
_STATUS_OF_CODE = {
    "SkuNotAvailable": 409,
    "OperationNotAllowed": 409,
    "TooManyRequests": 429,
    "SubscriptionRequestsThrottled": 429,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
    "ResourceNotFound": 404,
    "NotFound": 404,
    "Conflict": 409,
    **dict.fromkeys(ALLOCATION_CODES, 409),
}
"""The HTTP status an error code is answered with when a fault rejects a request and names no status."""

_ALLOCATION_GUIDANCE = (
    "Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"
)
_OVERCONSTRAINED = (
    "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too "
    "restrictive. Please remove some constraints and try again. Constraints applied are:\n"
)


class QuotaScope(StrEnum):
    """Which quota an `OperationNotAllowed` quota error reports as exceeded."""

    FAMILY = "family"
    SPOT = "spot"
    REGIONAL = "regional"


def sku_not_available_message(vm_size: str, region: str) -> str:
    return (
        f"The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {vm_size}' "
        f"is currently not available in location '{region}'. Please try another size or deploy to a different "
        "location or zones. See https://aka.ms/azureskunotavailable for details."
    )


def quota_message(scope: QuotaScope, quota_family: str, region: str, limit: int, required: int) -> str:
    """Azure's quota message; the provider keys on `Family Cores quota`, `LowPriorityCores`, the regional
    wording and `Current Limit: 0`."""
    name = {
        QuotaScope.FAMILY: f"{quota_family} Cores",
        QuotaScope.SPOT: "LowPriorityCores",
        QuotaScope.REGIONAL: "Total Regional Cores",
    }[scope]
    return (
        f"Operation could not be completed as it results in exceeding approved {name} quota. Additional details - "
        f"Deployment Model: Resource Manager, Location: {region}, Current Limit: {limit}, Current Usage: {limit}, "
        f"Additional Required: {required}, (Minimum) New Limit Required: {limit + required}. Submit a request for "
        "Quota increase at https://aka.ms/ProdportalCRP by specifying parameters listed in the 'Details' section "
        "for deployment to succeed. Please read more about quota limits at "
        "https://docs.microsoft.com/en-us/azure/azure-supportability/per-vm-quota-requests"
    )


def default_message(code: str, vm_size: str, zone: str, region: str, retry_after: float) -> str:
    """Azure's wording for an error code, for faults that give none."""
    in_zone = f" in zone '{zone}'" if zone else ""
    messages = {
        "SkuNotAvailable": sku_not_available_message(vm_size, region),
        "AllocationFailed": "Allocation failed. We do not have sufficient capacity for the requested VM size in "
        f"this region. {_ALLOCATION_GUIDANCE}",
        "ZonalAllocationFailed": "Allocation failed. We do not have sufficient capacity for the requested VM size "
        f"in this zone{in_zone}. {_ALLOCATION_GUIDANCE}",
        "OverconstrainedAllocationRequest": _OVERCONSTRAINED
        + "  - Networking Constraints (such as Accelerated Networking or IPv6)\n  - VM Size\n",
        "OverconstrainedZonalAllocationRequest": _OVERCONSTRAINED
        + "  - Availability Zone\n  - Networking Constraints (such as Accelerated Networking or IPv6)\n  - VM Size\n",
        "TooManyRequests": f"The request is being throttled. Please retry after {retry_after:g} seconds. Refer to "
        "https://aka.ms/arm-throttling for additional information.",
        "SubscriptionRequestsThrottled": "Number of requests for this subscription exceeded the limit. Please try "
        f"again after '{retry_after:g}' seconds. Refer to https://aka.ms/arm-throttling for additional information.",
        "InternalServerError": "Encountered internal server error. Please retry the request.",
        "ServiceUnavailable": "The service is currently unavailable. Please retry the request later.",
    }
    return messages.get(code, f"The operation failed with error code '{code}'.")


# --- faults ----------------------------------------------------------------------------------------------


class FaultAction(StrEnum):
    REJECT = "reject"
    """Answer the request with an ARM error instead of doing it."""
    FAIL_LATE = "fail_late"
    """Accept a PUT (201), then end its operation `Failed` with the error."""
    THROTTLE = "throttle"
    """Answer 429 with `Retry-After`."""
    SLOW = "slow"
    """Let a PUT's or DELETE's operation answer `InProgress` `polls` times."""
    DROP_RESPONSE = "drop_response"
    """Do the request, then close the connection without answering."""


class Fault(BaseModel):
    """A failure injected into the requests it matches. Unset filters match everything.

    Zones are logical (`"1"`); `"eastus-1"` is read as `"1"`, and `"0"` or `""` mean regional (no zone).
    Capacity types are `spot` or `on-demand` (`Spot`, `Low` and `Regular` are read as those). VM size, zone and
    capacity type match VM requests only (from the PUT body, or the stored VM for other methods).
    """

    model_config = ConfigDict(validate_assignment=True)

    action: FaultAction
    id: str = ""
    code: str = ""
    """The ARM error code; required for reject and fail_late, `TooManyRequests` by default for throttle."""
    message: str = ""
    """The error message; Azure's wording for the code when empty."""
    status: int | None = Field(default=None, ge=400, le=599)
    """For reject: the HTTP status; by default the one Azure uses for the code (400 for unknown codes)."""
    quota: QuotaScope | None = None
    """For `OperationNotAllowed`: the quota whose message is reported."""
    quota_limit: int = Field(default=10, ge=0)
    """The `Current Limit` in a quota message (the provider caches longer when it is 0)."""
    retry_after: float = Field(default=1.0, ge=0.0)
    """For throttle: the Retry-After header, in seconds."""
    polls: int = Field(default=3, ge=0)
    """For slow: how many status reads answer `InProgress`."""
    method: str | None = None
    resource: str | None = None
    """`virtualMachines`, `networkInterfaces`, `disks`, `skus` or `operations`."""
    name: str | None = None
    vm_size: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    times: int | None = Field(default=None, ge=1)
    """How many times the fault fires before it is removed; forever when unset."""

    @field_validator("method")
    @classmethod
    def _upper(cls, value: str | None) -> str | None:
        return None if value is None else value.upper()

    @field_validator("zone")
    @classmethod
    def _logical_zone(cls, value: str | None) -> str | None:
        return None if value is None else logical_zone(value)

    @field_validator("capacity_type")
    @classmethod
    def _capacity_type(cls, value: str | None) -> str | None:
        return None if value is None else capacity_type_of(value)

    @model_validator(mode="after")
    def _code_given(self) -> Fault:
        if self.action in (FaultAction.REJECT, FaultAction.FAIL_LATE) and not self.code:
            raise ValueError(f"a {self.action} fault needs an error code")
        return self

    def matches(self, call: Call) -> bool:
        wanted = (
            self.method,
            _lower(self.resource),
            _lower(self.name),
            _lower(self.vm_size),
            self.zone,
            self.capacity_type,
        )
        actual = (
            call.method,
            call.resource.lower(),
            call.name.lower(),
            _lower(call.vm_size),
            call.zone,
            call.capacity_type,
        )
        return all(want is None or want == got for want, got in zip(wanted, actual, strict=True))

    # Readable constructors for the faults tests use most.

    @classmethod
    def sku_not_available(cls, vm_size: str | None = None, zone: str | None = None, **filters: Any) -> Fault:
        """VM creates answered 409 `SkuNotAvailable`."""
        return cls(action=FaultAction.REJECT, code="SkuNotAvailable", **_vm_put(vm_size, zone, filters))

    @classmethod
    def quota_exceeded(
        cls, scope: QuotaScope | str, vm_size: str | None = None, limit: int = 10, **filters: Any
    ) -> Fault:
        """VM creates answered 409 `OperationNotAllowed` with the quota message of `scope`."""
        return cls(
            action=FaultAction.REJECT,
            code="OperationNotAllowed",
            quota=QuotaScope(scope),
            quota_limit=limit,
            **_vm_put(vm_size, None, filters),
        )

    @classmethod
    def fail_late(
        cls, code: str, vm_size: str | None = None, zone: str | None = None, **filters: Any
    ) -> Fault:
        """VM creates accepted, whose operation then ends `Failed` with `code` (an allocation failure)."""
        return cls(action=FaultAction.FAIL_LATE, code=code, **_vm_put(vm_size, zone, filters))

    @classmethod
    def throttle(cls, retry_after: float = 1.0, **filters: Any) -> Fault:
        """429 with Retry-After on the matching requests."""
        return cls(action=FaultAction.THROTTLE, retry_after=retry_after, **filters)

    @classmethod
    def transient(cls, status: Literal[500, 503] = 500, **filters: Any) -> Fault:
        """500 `InternalServerError` or 503 `ServiceUnavailable` on the matching requests."""
        code = "InternalServerError" if status == 500 else "ServiceUnavailable"
        return cls(action=FaultAction.REJECT, code=code, status=status, **filters)

    @classmethod
    def slow(cls, polls: int, method: str = "DELETE", **filters: Any) -> Fault:
        """Operations (deletes by default) that answer `InProgress` `polls` times before they end."""
        return cls(action=FaultAction.SLOW, polls=polls, method=method, **filters)

    @classmethod
    def drop_response(cls, **filters: Any) -> Fault:
        """Requests that are carried out but whose response is lost (the connection is closed)."""
        return cls(action=FaultAction.DROP_RESPONSE, **filters)


def _vm_put(vm_size: str | None, zone: str | None, filters: dict[str, Any]) -> dict[str, Any]:
    return {"method": "PUT", "resource": "virtualMachines", "vm_size": vm_size, "zone": zone, **filters}


def _lower(value: str | None) -> str | None:
    return None if value is None else value.lower()


def logical_zone(zone: str) -> str:
    """`"1"` for `"1"` or `"eastus-1"`; `""` for regional (`"0"` or `""`)."""
    logical = zone.rsplit("-", 1)[-1]
    return "" if logical == "0" else logical


def capacity_type_of(value: str) -> str:
    """`spot` for Karpenter's `spot` and Azure's `Spot`/`Low` priorities, `on-demand` for the rest."""
    return "spot" if value.lower() in ("spot", "low") else "on-demand"


@dataclass(frozen=True, slots=True)
class Call:
    """What a fault can match a request on."""

    method: str
    resource: str
    name: str = ""
    vm_size: str | None = None
    zone: str | None = None
    capacity_type: str | None = None


# --- settings, counters, resources and operations --------------------------------------------------------


class ArmSettings(BaseModel):
    """The subscription and region the emulator plays, and how long its operations take."""

    model_config = ConfigDict(validate_assignment=True)

    subscription_id: str = DEFAULT_SUBSCRIPTION
    region: str = "eastus"
    resource_group: str = DEFAULT_RESOURCE_GROUP
    """The node resource group the Python helpers (`ArmState.vm`, ...) default to."""
    resource_groups: list[str] = Field(default_factory=list)
    """Resource groups that exist (404 `ResourceGroupNotFound` for others); empty means any."""
    token: str | None = None
    """When set, the only bearer token accepted."""
    create_polls: int = Field(default=1, ge=0)
    """`InProgress` answers before a create operation ends."""
    delete_polls: int = Field(default=1, ge=0)
    page_size: int = Field(default=100, ge=1)
    """Items per page of a list; more are behind `nextLink`."""
    sku_page_size: int | None = Field(default=None, ge=1)
    """Items per page of the Resource SKUs list; one page when unset."""
    poll_retry_after: float = Field(default=0.0, ge=0.0)
    """The Retry-After sent with LRO responses. Azure sends some seconds, which overrides the client's
    polling interval; 0 keeps tests fast."""
    seed: int = 0
    """Seeds the generated ids (vmId, operation ids, resource GUIDs)."""


@dataclass(slots=True)
class Counters:
    """What the emulator was asked to do and did."""

    vms_created: int = 0
    nics_created: int = 0
    disks_created: int = 0
    vms_deleted: int = 0
    nics_deleted: int = 0
    disks_deleted: int = 0
    faults_fired: int = 0
    responses_dropped: int = 0
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    """Requests by `"<METHOD> <resource>"`, e.g. `"PUT virtualMachines"`, `"GET operations"`."""

    def to_json(self) -> Json:
        data = asdict(self)
        data["requests"] = dict(sorted(self.requests.items()))
        return data


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the emulator saw it (never its body)."""

    method: str
    resource: str
    name: str
    status: int
    at: float
    """The emulator's monotonic clock when the request arrived."""
    client_port: int | None = None
    """The client's TCP port: requests on one kept-alive connection share it."""


class ResourceType(StrEnum):
    VIRTUAL_MACHINE = "Microsoft.Compute/virtualMachines"
    NETWORK_INTERFACE = "Microsoft.Network/networkInterfaces"
    DISK = "Microsoft.Compute/disks"

    @property
    def namespace(self) -> str:
        return self.value.split("/")[0]

    @property
    def short(self) -> str:
        return self.value.split("/")[1]


_TYPES = {(t.namespace.lower(), t.short.lower()): t for t in ResourceType}
ResourceKey = tuple[ResourceType, str, str]


def _key(resource_type: ResourceType, resource_group: str, name: str) -> ResourceKey:
    return (resource_type, resource_group.lower(), name.lower())


class ProvisioningState(StrEnum):
    CREATING = "Creating"
    UPDATING = "Updating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETING = "Deleting"
    CANCELED = "Canceled"


@dataclass(slots=True)
class Resource:
    """A stored resource. `body` is exactly what GET returns; `custom_data` never leaves the emulator."""

    type: ResourceType
    resource_group: str
    name: str
    body: Json
    custom_data: str | None = None
    operation: str | None = None
    failure: Json | None = None
    """The error its last create ended with; Azure shows it in the instance view of a failed VM."""
    """The operation in progress on it, if any."""

    @property
    def id(self) -> str:
        return str(self.body["id"])

    @property
    def properties(self) -> Json:
        properties: Json = self.body.setdefault("properties", {})
        return properties

    @property
    def provisioning_state(self) -> str:
        return str(self.properties.get("provisioningState", ""))

    @provisioning_state.setter
    def provisioning_state(self, value: ProvisioningState) -> None:
        self.properties["provisioningState"] = value.value

    @property
    def tags(self) -> dict[str, str]:
        return dict(self.body.get("tags") or {})

    def view(self) -> Json:
        """A copy of the body, safe to send."""
        return copy.deepcopy(self.body)


class OperationKind(StrEnum):
    CREATE = "create"
    DELETE = "delete"


class OperationStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"


@dataclass(slots=True)
class Operation:
    """A long-running operation: `polls_left` more status reads answer InProgress, then it ends."""

    id: str
    kind: OperationKind
    key: ResourceKey
    polls_left: int
    started: datetime
    error: Json | None = None
    """The error it ends with (a late failure)."""
    status: OperationStatus = OperationStatus.IN_PROGRESS
    ended: datetime | None = None

    def to_json(self) -> Json:
        body: Json = {"name": self.id, "status": self.status.value, "startTime": _iso(self.started)}
        if self.ended is not None:
            body["endTime"] = _iso(self.ended)
        if self.status in (OperationStatus.FAILED, OperationStatus.CANCELED) and self.error is not None:
            body["error"] = self.error
        return body


@dataclass(frozen=True, slots=True)
class Restriction:
    """A size the subscription may not use in the region (`zones` empty) or in some zones."""

    vm_size: str
    zones: frozenset[str] = frozenset()
    reason: str = "NotAvailableForSubscription"


def _iso(moment: datetime) -> str:
    return moment.isoformat()


# --- the state -------------------------------------------------------------------------------------------


class ArmState:
    """Everything the emulator holds: resources, operations, faults, restrictions and counters.

    Tests read it to assert outcomes and write faults into it; the HTTP layer is a thin shell around it.
    """

    def __init__(
        self,
        settings: ArmSettings | None = None,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings or ArmSettings()
        self.catalog: AzureCatalog = load_shipped_catalog(self.settings.region)
        self.counters = Counters()
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=10_000)
        self.on_change: Callable[[], None] = lambda: None
        """Called after a resource was created, changed state or removed (the simulator hooks kubelets here)."""
        self._clock = clock or time.monotonic
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._random = random.Random(self.settings.seed)
        self._resources: dict[ResourceKey, Resource] = {}
        self._operations: dict[str, Operation] = {}
        self._faults: list[Fault] = []
        self._fault_ids = 0
        self._restrictions: dict[str, Restriction] = {}
        self._next_ip = 4

    # --- Python helpers for tests ------------------------------------------------------------------------

    def vm(self, name: str, resource_group: str | None = None) -> Resource | None:
        return self.resource(ResourceType.VIRTUAL_MACHINE, name, resource_group)

    def nic(self, name: str, resource_group: str | None = None) -> Resource | None:
        return self.resource(ResourceType.NETWORK_INTERFACE, name, resource_group)

    def disk(self, name: str, resource_group: str | None = None) -> Resource | None:
        return self.resource(ResourceType.DISK, name, resource_group)

    def resource(
        self, resource_type: ResourceType, name: str, resource_group: str | None = None
    ) -> Resource | None:
        """The stored resource (in the settings' resource group by default), without moving operations on."""
        return self._resources.get(_key(resource_type, resource_group or self.settings.resource_group, name))

    def resource_at(self, key: ResourceKey) -> Resource | None:
        return self._resources.get(key)

    def resources(self, resource_type: ResourceType | None = None) -> list[Resource]:
        """Every stored resource (of one type), by type, resource group and name."""
        return [
            resource
            for key, resource in sorted(self._resources.items())
            if resource_type is None or key[0] is resource_type
        ]

    def operation(self, operation_id: str) -> Operation | None:
        return self._operations.get(operation_id)

    def now(self) -> float:
        """The emulator's monotonic clock (request records carry it)."""
        return self._clock()

    def sku(self, vm_size: str) -> AzureSku | None:
        return self._skus.get(vm_size.lower())

    @cached_property
    def _skus(self) -> dict[str, AzureSku]:
        return {sku.name.lower(): sku for sku in self.catalog.skus}

    # --- faults and restrictions -------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> Fault:
        """Inject a fault; it gets an id (`f1`, `f2`, ...) to remove it by."""
        self._fault_ids += 1
        stored = fault.model_copy(update={"id": f"f{self._fault_ids}"})
        self._faults.append(stored)
        return stored.model_copy()

    def faults(self) -> list[Fault]:
        return [fault.model_copy() for fault in self._faults]

    def remove_fault(self, fault_id: str) -> bool:
        before = len(self._faults)
        self._faults = [fault for fault in self._faults if fault.id != fault_id]
        return len(self._faults) < before

    def clear_faults(self) -> None:
        self._faults = []

    def restrict(
        self, vm_size: str, zones: Iterable[str] = (), reason: str = "NotAvailableForSubscription"
    ) -> None:
        """Restrict a size for the subscription: in the whole region (no zones) or in the given zones.

        The Resource SKUs list shows the restriction, and VM creates that hit it get 409 `SkuNotAvailable`.
        """
        self._restrictions[vm_size.lower()] = Restriction(
            vm_size, frozenset(logical_zone(zone) for zone in zones), reason
        )

    def clear_restrictions(self) -> None:
        self._restrictions = {}

    def fire(self, call: Call, actions: Iterable[FaultAction]) -> Fault | None:
        """The first fault of these actions that matches the call; it fires (its count goes down)."""
        wanted = set(actions)
        for index, fault in enumerate(self._faults):
            if fault.action not in wanted or not fault.matches(call):
                continue
            if fault.times is not None:
                if fault.times > 1:
                    self._faults[index] = fault.model_copy(update={"times": fault.times - 1})
                else:
                    del self._faults[index]
            self.counters.faults_fired += 1
            logger.info(
                "ARM emulator: fault %s (%s %s) fired on %s %s",
                fault.id,
                fault.action,
                fault.code,
                call.method,
                call.resource,
            )
            return fault
        return None

    def fault_error(self, fault: Fault, call: Call) -> ArmError:
        """The ARM error a reject or throttle fault answers with."""
        if fault.action is FaultAction.THROTTLE:
            code = fault.code or "TooManyRequests"
            return ArmError(
                429,
                code,
                fault.message or default_message(code, "", "", self.settings.region, fault.retry_after),
                headers={"Retry-After": f"{fault.retry_after:g}"},
            )
        error = self._error(fault, call)
        return ArmError(fault.status or _STATUS_OF_CODE.get(fault.code, 400), error["code"], error["message"])

    def _error(self, fault: Fault, call: Call) -> Json:
        vm_size = call.vm_size or ""
        message = fault.message
        if not message and fault.quota is not None:
            sku = self.sku(vm_size)
            message = quota_message(
                fault.quota,
                (sku.quota_family if sku else None) or "standardDSv3Family",
                self.settings.region,
                fault.quota_limit,
                sku.vcpus if sku else 2,
            )
        if not message:
            message = default_message(
                fault.code, vm_size, call.zone or "", self.settings.region, fault.retry_after
            )
        return {"code": fault.code, "message": message}

    # --- resources: shared -------------------------------------------------------------------------------

    def resource_id(self, resource_type: ResourceType, resource_group: str, name: str) -> str:
        return (
            f"/subscriptions/{self.settings.subscription_id}/resourceGroups/{resource_group}"
            f"/providers/{resource_type.value}/{name}"
        )

    def check_scope(self, subscription: str, resource_group: str | None) -> None:
        if subscription.lower() != self.settings.subscription_id.lower():
            raise ArmError(
                404, "SubscriptionNotFound", f"The subscription '{subscription}' could not be found."
            )
        groups = {group.lower() for group in self.settings.resource_groups}
        if resource_group is not None and groups and resource_group.lower() not in groups:
            raise ArmError(
                404, "ResourceGroupNotFound", f"Resource group '{resource_group}' could not be found."
            )

    def find(self, resource_type: ResourceType, resource_group: str, name: str) -> Resource | None:
        """The resource, after moving its pending operation on by one step (a GET counts as progress)."""
        resource = self._resources.get(_key(resource_type, resource_group, name))
        if resource is not None and resource.operation is not None:
            self._step(self._operations[resource.operation])
            resource = self._resources.get(_key(resource_type, resource_group, name))
        return resource

    def get(self, resource_type: ResourceType, resource_group: str, name: str) -> Resource:
        resource = self.find(resource_type, resource_group, name)
        if resource is None:
            raise ArmError(
                404,
                "ResourceNotFound",
                f"The Resource '{resource_type.value}/{name}' under resource group '{resource_group}' was not "
                "found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
            )
        return resource

    def list_resources(self, resource_type: ResourceType, resource_group: str | None) -> list[Resource]:
        return [
            resource
            for key, resource in sorted(self._resources.items())
            if key[0] is resource_type and (resource_group is None or key[1] == resource_group.lower())
        ]

    def update_tags(
        self, resource_type: ResourceType, resource_group: str, name: str, body: Json
    ) -> Resource:
        """PATCH: only `tags` is applied (what the provider's in-place tag updates send)."""
        resource = self.get(resource_type, resource_group, name)
        _check_tags(body)
        if "tags" in body:
            resource.body["tags"] = dict(body["tags"] or {})
            self.on_change()
        return resource

    def _check_location(self, resource_type: ResourceType, body: Json) -> None:
        location = body.get("location")
        if not isinstance(location, str) or not location:
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        if location.replace(" ", "").lower() != self.settings.region.lower():
            raise ArmError(
                400,
                "LocationNotAvailableForResourceType",
                f"The provided location '{location}' is not available for resource type '{resource_type.value}'. "
                f"List of available regions for the resource type is '{self.settings.region}'.",
            )

    def _new_id(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def _start(
        self, kind: OperationKind, resource: Resource, polls: int, error: Json | None = None
    ) -> Operation:
        operation = Operation(
            id=self._new_id(),
            kind=kind,
            key=_key(resource.type, resource.resource_group, resource.name),
            polls_left=polls,
            started=self._wall_clock(),
            error=error,
        )
        self._operations[operation.id] = operation
        resource.operation = operation.id
        return operation

    def _polls(self, call: Call, default: int) -> int:
        slow = self.fire(call, (FaultAction.SLOW,))
        return default if slow is None else slow.polls

    def poll(self, operation_id: str) -> Operation:
        """Read an operation's status: it moves on by one step."""
        operation = self._operations.get(operation_id)
        if operation is None:
            raise ArmError(404, "NotFound", f"The operation '{operation_id}' was not found.")
        self._step(operation)
        return operation

    def _step(self, operation: Operation) -> None:
        if operation.status is not OperationStatus.IN_PROGRESS:
            return
        if operation.polls_left > 0:
            operation.polls_left -= 1
            return
        self._finish(operation)

    def _finish(self, operation: Operation) -> None:
        operation.ended = self._wall_clock()
        operation.status = OperationStatus.FAILED if operation.error else OperationStatus.SUCCEEDED
        resource = self._resources.get(operation.key)
        if resource is None:
            return
        resource.operation = None
        if operation.kind is OperationKind.DELETE:
            self._remove(resource)
        elif operation.error:
            resource.provisioning_state = ProvisioningState.FAILED
            resource.failure = operation.error
        else:
            resource.provisioning_state = ProvisioningState.SUCCEEDED
            if resource.type is ResourceType.VIRTUAL_MACHINE:
                self._attach_nics(resource)
        self.on_change()

    def _cancel(self, resource: Resource) -> None:
        """A delete overtakes a pending create: that operation ends Canceled."""
        if resource.operation is None:
            return
        pending = self._operations[resource.operation]
        if pending.kind is OperationKind.CREATE and pending.status is OperationStatus.IN_PROGRESS:
            pending.status = OperationStatus.CANCELED
            pending.ended = self._wall_clock()
            pending.error = {
                "code": "OperationPreempted",
                "message": "Operation execution has been preempted by a more recent operation.",
            }
        resource.operation = None

    def begin_delete(
        self, resource_type: ResourceType, resource_group: str, name: str, call: Call
    ) -> Operation | None:
        """Start deleting; `None` when there is nothing to delete (ARM then answers 204)."""
        resource = self.resource(resource_type, name, resource_group)
        if resource is None:
            return None
        if resource.operation is not None:
            pending = self._operations[resource.operation]
            if pending.kind is OperationKind.DELETE:
                return pending
        self._check_deletable(resource)
        self._cancel(resource)
        resource.provisioning_state = ProvisioningState.DELETING
        operation = self._start(OperationKind.DELETE, resource, self._polls(call, self.settings.delete_polls))
        self.on_change()
        return operation

    def _check_deletable(self, resource: Resource) -> None:
        if resource.type is ResourceType.NETWORK_INTERFACE:
            vm_id = (resource.properties.get("virtualMachine") or {}).get("id")
            if vm_id and self._by_id(vm_id) is not None:
                raise ArmError(
                    400,
                    "NicInUse",
                    f"Network Interface {resource.id} is used by existing resource {vm_id}. In order to delete "
                    "the network interface, it must be dissociated from the resource. To learn more, see "
                    "aka.ms/deletenic.",
                )
        if resource.type is ResourceType.DISK:
            vm_id = resource.body.get("managedBy")
            if vm_id and self._by_id(vm_id) is not None:
                raise ArmError(409, "OperationNotAllowed", f"Disk {resource.name} is attached to VM {vm_id}.")

    def _by_id(self, resource_id: str) -> Resource | None:
        parts = resource_id.strip("/").split("/")
        if len(parts) != 8 or parts[0].lower() != "subscriptions" or parts[4].lower() != "providers":
            return None
        resource_type = _TYPES.get((parts[5].lower(), parts[6].lower()))
        if resource_type is None:
            return None
        return self._resources.get(_key(resource_type, parts[3], parts[7]))

    def _remove(self, resource: Resource) -> None:
        del self._resources[_key(resource.type, resource.resource_group, resource.name)]
        if resource.type is ResourceType.VIRTUAL_MACHINE:
            self.counters.vms_deleted += 1
            self._release_attachments(resource)
        elif resource.type is ResourceType.NETWORK_INTERFACE:
            self.counters.nics_deleted += 1
        else:
            self.counters.disks_deleted += 1

    def _release_attachments(self, vm: Resource) -> None:
        """What a VM delete does to its NICs and OS disk: delete those marked Delete, detach the others."""
        for reference in _nic_references(vm.body):
            nic = self._by_id(str(reference.get("id", "")))
            if nic is None:
                continue
            if (reference.get("properties") or {}).get("deleteOption") == "Delete":
                self._remove(nic)
            else:
                nic.properties.pop("virtualMachine", None)
        os_disk = _os_disk(vm.body)
        disk = self._by_id(str((os_disk.get("managedDisk") or {}).get("id", "")))
        if disk is not None:
            if os_disk.get("deleteOption") == "Delete":
                self._remove(disk)
            else:
                disk.body.pop("managedBy", None)
                disk.properties["diskState"] = "Unattached"

    # --- network interfaces ------------------------------------------------------------------------------

    def put_nic(
        self, resource_group: str, name: str, body: Json, call: Call
    ) -> tuple[int, Resource, Operation]:
        """Create or update a NIC: 201 or 200 with an operation that ends Succeeded."""
        resource_type = ResourceType.NETWORK_INTERFACE
        self._check_location(resource_type, body)
        _check_tags(body)
        existing = self.resource(resource_type, name, resource_group)
        if existing is not None and existing.provisioning_state == ProvisioningState.DELETING:
            raise ArmError(
                409,
                "AnotherOperationInProgress",
                f"Another operation on this or dependent resource is in progress. Resource: {existing.id}",
            )
        nic_id = self.resource_id(resource_type, resource_group, name)
        stored = copy.deepcopy(body)
        stored.update(id=nic_id, name=name, type=resource_type.value, etag=f'W/"{self._new_id()}"')
        properties: Json = stored.setdefault("properties", {})
        previous = existing.properties if existing is not None else {}
        properties["resourceGuid"] = previous.get("resourceGuid") or self._new_id()
        properties.setdefault("enableAcceleratedNetworking", False)
        properties.setdefault("enableIPForwarding", False)
        properties["nicType"] = "Standard"
        for key in ("virtualMachine", "macAddress"):
            if key in previous:
                properties[key] = previous[key]
        old_ips = {
            ipc.get("name"): (ipc.get("properties") or {}).get("privateIPAddress")
            for ipc in previous.get("ipConfigurations") or []
        }
        for index, ip_configuration in enumerate(properties.get("ipConfigurations") or []):
            ip_name = ip_configuration.setdefault("name", f"ipconfig{index + 1}")
            ip_configuration["id"] = f"{nic_id}/ipConfigurations/{ip_name}"
            ip_configuration["type"] = f"{resource_type.value}/ipConfigurations"
            ip_properties: Json = ip_configuration.setdefault("properties", {})
            ip_properties.setdefault("privateIPAllocationMethod", "Dynamic")
            ip_properties.setdefault("privateIPAddressVersion", "IPv4")
            ip_properties.setdefault("primary", index == 0)
            if (
                ip_properties["privateIPAllocationMethod"] == "Dynamic"
                or "privateIPAddress" not in ip_properties
            ):
                ip_properties["privateIPAddress"] = old_ips.get(ip_name) or self._allocate_ip()
            ip_properties["provisioningState"] = ProvisioningState.SUCCEEDED.value
        resource = Resource(resource_type, resource_group, name, stored)
        if existing is None:
            self.counters.nics_created += 1
        operation = self._store(
            resource, existing, call, ProvisioningState.UPDATING, provision=existing is None
        )
        return (200 if existing is not None else 201), resource, operation

    def _allocate_ip(self) -> str:
        address = self._next_ip
        self._next_ip += 1
        return f"10.224.{address // 256}.{address % 256}"

    # --- virtual machines --------------------------------------------------------------------------------

    def put_vm(
        self, resource_group: str, name: str, body: Json, call: Call
    ) -> tuple[int, Resource, Operation]:
        """Create or update a VM: 201 (200 for an update) with an operation; see the module docstring."""
        resource_type = ResourceType.VIRTUAL_MACHINE
        properties = _object(body.get("properties", {}), "properties")
        os_profile = _object(properties.get("osProfile", {}), "properties.osProfile")
        custom_data = os_profile.get("customData")
        existing = self.resource(resource_type, name, resource_group)
        if existing is not None:
            self._check_update(existing, body, custom_data)
        self._check_location(resource_type, body)
        _check_tags(body)
        vm_size = _object(properties.get("hardwareProfile", {}), "properties.hardwareProfile").get("vmSize")
        if not isinstance(vm_size, str) or not vm_size:
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'hardwareProfile.vmSize' is missing (null).",
                target="hardwareProfile.vmSize",
            )
        sku = self._available_sku(vm_size, call.zone or "")
        nics = self._referenced_nics(body)
        self._check_accelerated_networking(sku, nics, name)
        self._check_ephemeral_os_disk(sku, _os_disk(body))
        if custom_data is not None:
            _check_custom_data(custom_data)

        vm_id = self.resource_id(resource_type, resource_group, name)
        stored = copy.deepcopy(body)
        stored.update(id=vm_id, name=name, type=resource_type.value)
        stored_properties: Json = stored.setdefault("properties", {})
        stored_os_profile = stored_properties.get("osProfile")
        if isinstance(stored_os_profile, dict):
            stored_os_profile.pop("customData", None)
            stored_os_profile.pop("adminPassword", None)
        if existing is not None:
            stored_properties["vmId"] = existing.properties.get("vmId")
            stored_properties["timeCreated"] = existing.properties.get("timeCreated")
        else:
            stored_properties["vmId"] = self._new_id()
            stored_properties["timeCreated"] = _iso(self._wall_clock())
        os_disk = stored_properties.setdefault("storageProfile", {}).setdefault("osDisk", {})
        os_disk.setdefault("osType", "Linux")
        existing_disk_name = _os_disk(existing.body).get("name") if existing is not None else None
        os_disk.setdefault("name", existing_disk_name or f"{name}_OsDisk_1_{self._new_id().replace('-', '')}")
        disk = (
            self._os_disk_resource(resource_group, stored, os_disk)
            if "diffDiskSettings" not in os_disk
            else None
        )

        resource = Resource(resource_type, resource_group, name, stored, custom_data)
        if existing is not None and custom_data is None:
            resource.custom_data = existing.custom_data
        if existing is None:
            self.counters.vms_created += 1
        disk_key = _key(ResourceType.DISK, resource_group, str(os_disk["name"]))
        if disk is not None and disk_key not in self._resources:
            self._resources[disk_key] = disk
            self.counters.disks_created += 1
        for nic in nics:
            nic.properties["virtualMachine"] = {"id": vm_id}
        # A failed or canceled VM is provisioned again by a PUT, as Azure does.
        provision = existing is None or existing.provisioning_state in (
            ProvisioningState.FAILED,
            ProvisioningState.CANCELED,
        )
        operation = self._store(resource, existing, call, ProvisioningState.CREATING, provision)
        return (201 if existing is None else 200), resource, operation

    def _store(
        self,
        resource: Resource,
        existing: Resource | None,
        call: Call,
        while_provisioning: ProvisioningState,
        provision: bool,
    ) -> Operation:
        """Store what a PUT made and return the operation that answers it.

        A PUT repeated while the create still runs (a client retry after a lost response) joins that operation.
        Otherwise a new one starts; slow and fail-late faults apply when something is provisioned.
        """
        self._resources[_key(resource.type, resource.resource_group, resource.name)] = resource
        pending = self._operations.get(existing.operation) if existing and existing.operation else None
        if existing is not None and pending is not None and pending.status is OperationStatus.IN_PROGRESS:
            resource.operation = pending.id
            resource.provisioning_state = ProvisioningState(existing.provisioning_state)
            self.on_change()
            return pending
        late = self.fire(call, (FaultAction.FAIL_LATE,)) if provision else None
        polls = self._polls(call, self.settings.create_polls) if provision else 0
        resource.provisioning_state = while_provisioning if provision else ProvisioningState.UPDATING
        operation = self._start(
            OperationKind.CREATE, resource, polls, self._error(late, call) if late is not None else None
        )
        self.on_change()
        return operation

    def _check_update(self, existing: Resource, body: Json, custom_data: Any) -> None:
        if existing.provisioning_state == ProvisioningState.DELETING:
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'put' is not allowed on VM '{existing.name}' since the VM is marked for deletion. You "
                "can only retry the Delete operation (or wait for an ongoing one to complete).",
            )
        if sorted(body.get("zones") or []) != sorted(existing.body.get("zones") or []):
            raise ArmError(
                409, "PropertyChangeNotAllowed", "Changing property 'zones' is not allowed.", target="zones"
            )
        if custom_data is not None and custom_data != existing.custom_data:
            raise ArmError(
                409,
                "PropertyChangeNotAllowed",
                "Changing property 'customData' is not allowed.",
                target="customData",
            )

    def _available_sku(self, vm_size: str, zone: str) -> AzureSku:
        """The catalog size, if the subscription may create it in that zone; else 409 SkuNotAvailable."""
        sku = self.sku(vm_size)
        restriction = self._restrictions.get(vm_size.lower())
        zones = self.catalog.zones if sku is None or sku.zones is None else sku.zones
        unavailable = (
            sku is None
            or (restriction is not None and (not restriction.zones or zone in restriction.zones))
            or (zone != "" and zone not in zones)
        )
        if unavailable or sku is None:
            raise ArmError(409, "SkuNotAvailable", sku_not_available_message(vm_size, self.settings.region))
        return sku

    def _referenced_nics(self, body: Json) -> list[Resource]:
        nics = []
        for index, reference in enumerate(_nic_references(body)):
            nic_id = str(reference.get("id", ""))
            nic = self._by_id(nic_id)
            if nic is None or nic.type is not ResourceType.NETWORK_INTERFACE:
                raise ArmError(
                    400,
                    "InvalidResourceReference",
                    f"Resource {nic_id} referenced by resource {body.get('name') or 'the virtual machine'} was not "
                    "found. Please make sure that the referenced resource exists, and that both resources are in "
                    "the same region.",
                    target=f"networkProfile.networkInterfaces[{index}].id",
                )
            nics.append(nic)
        return nics

    def _check_accelerated_networking(self, sku: AzureSku, nics: list[Resource], vm_name: str) -> None:
        for index, nic in enumerate(nics):
            if nic.properties.get("enableAcceleratedNetworking") and not sku.accelerated_networking:
                raise ArmError(
                    400,
                    "VMSizeIsNotPermittedToEnableAcceleratedNetworking",
                    f"Virtual Machine size {sku.name} is not in the allowed list of VM sizes for accelerated "
                    f"networking to be enabled on the VM at index {index} for VM {vm_name}.",
                )

    def _check_ephemeral_os_disk(self, sku: AzureSku, os_disk: Json) -> None:
        diff = os_disk.get("diffDiskSettings")
        if not isinstance(diff, dict):
            return
        placement = str(diff.get("placement") or "CacheDisk")
        capacity = _placement_bytes(sku, placement)
        size_gb = int(os_disk.get("diskSizeGB") or 30)
        if not sku.ephemeral_os_disk_supported or capacity is None or size_gb * GIB > capacity:
            raise ArmError(
                400,
                "InvalidParameter",
                f"OS disk of Ephemeral VM with size greater than {capacity // GIB if capacity else 0} GB is not "
                f"allowed for VM size {sku.name} when the DiffDiskPlacement is {placement}.",
                target="osDisk.diskSizeGB",
            )

    def _os_disk_resource(self, resource_group: str, vm: Json, os_disk: Json) -> Resource:
        disk_type = ResourceType.DISK
        name = str(os_disk["name"])
        disk_id = self.resource_id(disk_type, resource_group, name)
        managed = os_disk.setdefault("managedDisk", {})
        managed["id"] = disk_id
        managed.setdefault("storageAccountType", "Premium_LRS")
        image = (vm["properties"].get("storageProfile") or {}).get("imageReference") or {}
        body: Json = {
            "id": disk_id,
            "name": name,
            "type": disk_type.value,
            "location": vm.get("location"),
            "managedBy": vm["id"],
            "sku": {"name": managed["storageAccountType"]},
            "properties": {
                "osType": "Linux",
                "diskSizeGB": int(os_disk.get("diskSizeGB") or 30),
                "diskState": "Attached",
                "provisioningState": ProvisioningState.SUCCEEDED.value,
                "creationData": {"createOption": "FromImage", "imageReference": dict(image)},
                "timeCreated": _iso(self._wall_clock()),
            },
        }
        if vm.get("zones"):
            body["zones"] = list(vm["zones"])
        return Resource(disk_type, resource_group, name, body)

    def _attach_nics(self, vm: Resource) -> None:
        for reference in _nic_references(vm.body):
            nic = self._by_id(str(reference.get("id", "")))
            if nic is not None:
                nic.properties.setdefault("macAddress", self._mac_address())
                nic.properties["primary"] = bool((reference.get("properties") or {}).get("primary", True))

    def _mac_address(self) -> str:
        return "-".join(f"{byte:02X}" for byte in (0x00, 0x0D, 0x3A, *self._random.randbytes(3)))

    # --- resource SKUs -----------------------------------------------------------------------------------

    def resource_skus(self) -> list[Json]:
        """The Resource SKUs of the region: every catalog size (with its restrictions), then a few disk SKUs."""
        region = self.settings.region
        zones = list(self.catalog.zones)
        disks = [
            {
                "resourceType": "disks",
                "name": name,
                "tier": tier,
                "size": size,
                "family": family,
                "locations": [region],
                "locationInfo": [{"location": region, "zones": zones, "zoneDetails": []}],
                "capabilities": [{"name": "MaxSizeGiB", "value": "4"}, {"name": "MinSizeGiB", "value": "0"}],
                "restrictions": [],
            }
            for name, tier, size, family in (
                ("Premium_LRS", "Premium", "P1", "PremiumSSD"),
                ("StandardSSD_LRS", "Standard", "E1", "StandardSSD"),
                ("Standard_LRS", "Standard", "S4", "StandardHDD"),
            )
        ]
        vms = [
            resource_sku(sku, self.catalog, self._restrictions.get(sku.name.lower()))
            for sku in self.catalog.skus
        ]
        return vms + disks


def _object(value: Any, path: str) -> Json:
    if not isinstance(value, dict):
        raise ArmError(
            400, "InvalidRequestContent", f"The request content was invalid: '{path}' is not an object."
        )
    return value


def _nic_references(vm: Json) -> list[Json]:
    network_profile = (vm.get("properties") or {}).get("networkProfile") or {}
    return [
        reference
        for reference in network_profile.get("networkInterfaces") or []
        if isinstance(reference, dict)
    ]


def _os_disk(vm: Json) -> Json:
    storage = (vm.get("properties") or {}).get("storageProfile") or {}
    os_disk = storage.get("osDisk") or {}
    return os_disk if isinstance(os_disk, dict) else {}


_RESERVED_TAG_CHARACTERS = frozenset("<>%&\\?/")


def _check_tags(body: Json) -> None:
    """Tags are a string map whose names avoid ARM's reserved characters (the provider maps `/` to `_`)."""
    tags = body.get("tags")
    if tags is None:
        return
    if not isinstance(tags, dict) or not all(isinstance(value, str) for value in tags.values()):
        raise ArmError(
            400, "InvalidRequestContent", "The request content was invalid: 'tags' is not a string map."
        )
    reserved = sorted(name for name in tags if set(name) & _RESERVED_TAG_CHARACTERS)
    if reserved:
        raise ArmError(
            400,
            "InvalidTagNameCharacters",
            f"The tag names '{','.join(reserved)}' have reserved characters '<,>,%,&,\\,?,/' or control characters.",
        )


def _check_custom_data(custom_data: Any) -> None:
    message = (
        f"Custom data in OSProfile must be in Base64 encoding and with a maximum length of {CUSTOM_DATA_MAX_CHARS} "
        "characters."
    )
    if not isinstance(custom_data, str) or len(custom_data) > CUSTOM_DATA_MAX_CHARS:
        raise ArmError(400, "InvalidParameter", message, target="customData")
    try:
        base64.b64decode(custom_data, validate=True)
    except binascii.Error:
        raise ArmError(400, "InvalidParameter", message, target="customData") from None


def _placement_bytes(sku: AzureSku, placement: str) -> int | None:
    """Room for an ephemeral OS disk in a placement, as the SKU capabilities describe it."""
    temp = int((sku.temp_disk_gib or 0) * GIB)
    if placement == "NvmeDisk":
        return temp if sku.temp_disk_nvme else None
    if placement == "CacheDisk":
        return int(sku.cached_disk_gib * GIB) if sku.cached_disk_gib else None
    if placement == "ResourceDisk":
        return temp if temp and not sku.temp_disk_nvme else None
    return None


def _flag(value: bool) -> str:
    return "True" if value else "False"


def resource_sku(sku: AzureSku, catalog: AzureCatalog, restriction: Restriction | None = None) -> Json:
    """A catalog size as the Resource SKUs API describes it (`resourceType` `virtualMachines`)."""
    capabilities: list[tuple[str, str]] = []
    nvme = bool(sku.temp_disk_nvme)
    if sku.temp_disk_gib is not None:
        capabilities.append(("MaxResourceVolumeMB", "0" if nvme else str(int(sku.temp_disk_gib * 1024))))
    capabilities += [
        ("OSVhdSizeMB", "1047552"),
        ("vCPUs", str(sku.vcpus)),
        ("MemoryPreservingMaintenanceSupported", "True"),
    ]
    if sku.hyperv_generations:
        capabilities.append(("HyperVGenerations", ",".join(sku.hyperv_generations)))
    capabilities += [
        ("MemoryGB", f"{sku.memory_gib:g}"),
        ("CpuArchitectureType", "Arm64" if sku.architecture == "arm64" else "x64"),
    ]
    if sku.low_priority_capable is not None:
        capabilities.append(("LowPriorityCapable", _flag(sku.low_priority_capable)))
    capabilities += [("PremiumIO", _flag(sku.premium_io)), ("VMDeploymentTypes", "IaaS")]
    capabilities.append(("vCPUsAvailable", str(sku.vcpus)))
    if sku.gpu_count:
        capabilities.append(("GPUs", str(sku.gpu_count)))
    if sku.ephemeral_os_disk_supported is not None:
        capabilities.append(("EphemeralOSDiskSupported", _flag(sku.ephemeral_os_disk_supported)))
        if sku.ephemeral_os_disk_supported:
            placements = (
                ["NvmeDisk"] if nvme else ["ResourceDisk"] + (["CacheDisk"] if sku.cached_disk_gib else [])
            )
            capabilities.append(("SupportedEphemeralOSDiskPlacements", ",".join(placements)))
    if nvme and sku.temp_disk_gib:
        capabilities.append(("NvmeDiskSizeInMiB", str(int(sku.temp_disk_gib * 1024))))
    if sku.encryption_at_host_supported is not None:
        capabilities.append(("EncryptionAtHostSupported", _flag(sku.encryption_at_host_supported)))
    if sku.cached_disk_gib:
        capabilities.append(("CachedDiskBytes", str(int(sku.cached_disk_gib * GIB))))
    if sku.ultra_ssd_available is not None:
        capabilities.append(("UltraSSDAvailable", _flag(sku.ultra_ssd_available)))
    if sku.trusted_launch_disabled is not None:
        capabilities.append(("TrustedLaunchDisabled", _flag(sku.trusted_launch_disabled)))
    capabilities.append(("AcceleratedNetworkingEnabled", _flag(sku.accelerated_networking)))

    region = catalog.region
    zones = catalog.zones if sku.zones is None else sku.zones
    tier, _, size = sku.name.partition("_")
    body: Json = {
        "resourceType": "virtualMachines",
        "name": sku.name,
        "tier": tier,
        "size": size,
        "locations": [region],
        "locationInfo": [{"location": region, "zones": list(zones), "zoneDetails": []}],
        "capabilities": [{"name": name, "value": value} for name, value in capabilities],
        "restrictions": [],
    }
    if sku.quota_family:
        body["family"] = sku.quota_family
    if restriction is not None:
        info: Json = {"locations": [region]}
        if restriction.zones:
            info["zones"] = sorted(restriction.zones)
        body["restrictions"].append(
            {
                "type": "Zone" if restriction.zones else "Location",
                "values": [region],
                "restrictionInfo": info,
                "reasonCode": restriction.reason,
            }
        )
    return body


# --- HTTP ------------------------------------------------------------------------------------------------

STATE_KEY = web.AppKey("arm_state", ArmState)
_LOCATION_FILTER = re.compile(r"^\s*location\s+eq\s+'([^']*)'\s*$", re.IGNORECASE)


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

    @property
    def resource(self) -> str:
        if self.operation is not None:
            return "operations"
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
    resource_type = _TYPES.get((rest_lower[1], rest_lower[2]))
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
        raise ArmError(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
            headers={
                "WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/common", '
                'error="invalid_token", error_description="The authentication failed because of missing '
                "'Authorization' header.\""
            },
        )
    if state.settings.token is not None and token.strip() != state.settings.token:
        raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")


async def _json_body(request: web.Request) -> Json:
    try:
        body = await request.json()
    except ValueError as error:
        raise ArmError(
            400,
            "InvalidRequestContent",
            f"The request content was invalid and could not be deserialized: {error}",
        ) from None
    return _object(body, "the request body")


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
        body = await _json_body(request) if request.method in ("PUT", "PATCH") else None
        return route, body

    def _call(self, method: str, route: _Route, body: Json | None) -> Call:
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
    """`/_emulator/...`: faults, restrictions, counters and a resource summary, as JSON (no auth)."""
    parts = [part for part in request.path.split("/") if part][1:]
    method = request.method
    if parts == ["faults"] and method == "GET":
        return web.json_response({"value": [fault.model_dump(mode="json") for fault in state.faults()]})
    if parts == ["faults"] and method == "POST":
        try:
            fault = Fault.model_validate(await _json_body(request))
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
        body = await _json_body(request)
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
    raise ArmError(404, "NotFound", f"No emulator endpoint {method} {request.path}.")


def create_arm_app(state: ArmState) -> web.Application:
    """The aiohttp application serving ARM (and the `/_emulator` control API) from `state`."""
    app = web.Application()
    app[STATE_KEY] = state
    add_retail_prices(app, state.catalog)  # prices.azure.com's API, on this host (before the catch-all)
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

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_arm(state: ArmState, ca_dir: Path, host: str = "127.0.0.1", port: int = 0) -> RunningArm:
    """Serve `state` over HTTPS on `host:port` (a free port for 0) in the running event loop.

    The CA's PEM is written to `ca_dir`; close the result when done.
    """
    tls = server_tls(ca_dir)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(create_arm_app(state), access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, ssl_context=tls.server_context)
    await site.start()
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if family == socket.AF_INET6 else host
    return RunningArm(f"https://{url_host}:{bound_port}", tls.ca_pem, state, runner)


@contextlib.asynccontextmanager
async def serve_arm(
    region: str = "eastus",
    subscription: str = DEFAULT_SUBSCRIPTION,
    *,
    resource_group: str = DEFAULT_RESOURCE_GROUP,
    host: str = "127.0.0.1",
    port: int = 0,
    ca_dir: Path | None = None,
    **settings: Any,
) -> AsyncIterator[RunningArm]:
    """An emulator served in the current event loop for the duration of the block.

    `settings` are further `ArmSettings` fields (`create_polls`, `page_size`, `token`, `seed`, ...). The CA file
    goes to `ca_dir`, or to a temporary directory removed afterwards.
    """
    state = ArmState(
        ArmSettings(region=region, subscription_id=subscription, resource_group=resource_group, **settings)
    )
    with contextlib.ExitStack() as stack:
        directory = ca_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="arm-emulator-")))
        running = await start_arm(state, directory, host, port)
        try:
            yield running
        finally:
            await running.close()
