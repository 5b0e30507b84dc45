"""An Azure Resource Manager emulator that the real Azure SDK clients talk to over HTTPS.

It serves the ARM endpoints nodewright calls, with the paths, status codes, headers and bodies Azure uses,
so the provider runs its real `azure-mgmt-compute` / `azure-mgmt-network` code (LRO pollers, paging, retries,
error mapping) against it. Point a client at it with `base_url=<url>`, `connection_verify=<ca.pem>` and a
`StaticTokenCredential`; `RunningArm.client_options()` gives those keyword arguments.

Served, under `/subscriptions/{sub}` (any `api-version` is accepted but one is required; resource groups and
names are case-insensitive):

- `resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{vm}`: PUT (201, or 200 when it exists,
  with `Azure-AsyncOperation`), GET (`$expand=instanceView` adds statuses), PATCH (tags), DELETE (202 with
  `Azure-AsyncOperation` and `Location`); POST `.../simulateEviction` (204) schedules a Spot VM's eviction.
- `resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{nic}`: PUT (201/200 with
  `Azure-AsyncOperation`), GET, PATCH (tags), DELETE (202 with `Location`, which answers 202 until done, then 204).
- `resourceGroups/{rg}/providers/Microsoft.Compute/disks/{disk}`: GET, DELETE (the managed OS disks VMs make).
- `resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet}`: GET of the cluster's
  subnet and those in `ArmSettings.subnets`; 404 for any other (`simulator.arm.subnets`).
- `[resourceGroups/{rg}/]providers/{namespace}/{type}`: GET lists, paged with `nextLink` (`$skiptoken`).
- `providers/Microsoft.Compute/skus`: the Resource SKUs of the region (`$filter=location eq '<region>'`).
- `providers/{namespace}/locations/{region}/operations/{id}`: LRO status `{"name", "status", "startTime",
  "endTime", "error"}`; with `monitor=true` (and `.../operationResults/{id}` for the network) it is a Location URL:
  202 while running, then 200 (create) or 204 (delete), or 400 with the error.

Behaviour that follows Azure:
- Every request needs `Authorization: Bearer <token>` (401 `AuthenticationFailed`; 401 `InvalidAuthenticationToken`
  when `ArmSettings.token` is set and differs, or when `entra`'s directory has registrations and did not issue it
  for the audience of the cloud played, `ArmSettings.cloud`) and `api-version` (400 `MissingApiVersionParameter`).
  Errors are `{"error": {"code", "message"[, "target"]}}`.
- Microsoft Entra ID's token endpoint (`POST /{tenant}/oauth2/v2.0/token`: client secret, certificate-signed client
  assertion, federated token) and IMDS's managed identity token (`GET /metadata/identity/oauth2/token`), for the
  applications and identities `ArmState.directory` registers (`entra`). With `names` its certificate is good for a
  cloud's host names, and `RunningArm.resolver(names)` resolves them to it, so clients call `management.azure.com`,
  `login.microsoftonline.us` and the like and reach the emulator; every request records the host it was sent to.
- An LRO answers `InProgress` to `create_polls` / `delete_polls` status reads, then ends. A VM's create takes
  `vm_create_seconds` from its PUT (0 by default; Azure's take tens of seconds): reads before then answer
  `InProgress`, and it ends then whether or not anyone reads it, as Azure's do (a slow fault's polls must be read
  as well). Reading the resource itself (GET) also moves its operation on, so a caller that lost its poller and
  GETs still sees progress.
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
- Spot eviction (`evictions`): `simulateEviction` on a Spot VM with `evictionPolicy: Delete` posts a `Preempt`
  Scheduled Event whose `NotBefore` is `ArmSettings.eviction_notice` (30 s) away, and at that time the VM is
  deleted (NICs and OS disk following their `deleteOption`); a VM that is not Spot gets 409 `OperationNotAllowed`.
  Each VM's Scheduled Events are served as IMDS serves them (`imds`: `GET /_emulator/metadata/scheduledevents
  ?vm=<name>&api-version=2020-07-01` with `Metadata: true`; `POST` `{"StartRequests": [...]}` starts an event
  at once).
- Resource SKUs come from the shipped catalog of its region (`core.instancetypes.catalog`; any region: one the
  shipped price table lacks gets eastus's sizes and prices): `vCPUs`, `MemoryGB`,
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

Counters (`ArmState.counters`) record what was made and removed (and evicted, and vanished), so tests can prove
a retried create made one VM.

The control API (`/_emulator`, no auth) injects and lists faults (`faults`), restricts sizes (`restrictions`),
reads `counters` and `resources`, evicts a Spot VM with an optional notice of its own (`POST evict`
`{"vm": name, "noticeSeconds": n}`, answered with the Preempt event) and removes a VM with no notice at all
(`POST vanish` `{"vm": name}`, 204); both take an optional `resourceGroup`.

The package holds one module per part: `errors` (ARM errors and Azure's messages), `faults` (what can be
injected and what it matches), `resources` (stored resources and shared body checks), `store` (settings,
counters and the core of the state), `operations` (long-running operations), `nics` and `vms` (the resource
types), `evictions` (Spot evictions, Scheduled Events and vanishing VMs), `skus` (Resource SKUs), `state`
(`ArmState`, all of them together), `credentials` (a static bearer token for the SDK clients), `entra` (Entra ID's
token endpoint and IMDS's managed identity token), `imds` (the Scheduled Events endpoint) and `server` (the HTTPS
application, the control API and serving).
"""

from simulator.arm.credentials import DEFAULT_TOKEN, StaticTokenCredential
from simulator.arm.errors import ALLOCATION_CODES, ArmError, QuotaScope
from simulator.arm.evictions import EventStatus, EventType, ScheduledEvent, rfc1123
from simulator.arm.faults import Call, Fault, FaultAction, capacity_type_of, logical_zone
from simulator.arm.resources import (
    Operation,
    OperationKind,
    OperationStatus,
    ProvisioningState,
    Resource,
    ResourceKey,
    ResourceType,
)
from simulator.arm.server import STATE_KEY, RunningArm, create_arm_app, serve_arm, start_arm
from simulator.arm.skus import Restriction, resource_sku
from simulator.arm.state import ArmState
from simulator.arm.store import (
    DEFAULT_RESOURCE_GROUP,
    DEFAULT_SUBSCRIPTION,
    ArmSettings,
    Counters,
    RequestRecord,
)

__all__ = [
    "ALLOCATION_CODES",
    "DEFAULT_RESOURCE_GROUP",
    "DEFAULT_SUBSCRIPTION",
    "DEFAULT_TOKEN",
    "STATE_KEY",
    "ArmError",
    "ArmSettings",
    "ArmState",
    "Call",
    "Counters",
    "EventStatus",
    "EventType",
    "Fault",
    "FaultAction",
    "Operation",
    "OperationKind",
    "OperationStatus",
    "ProvisioningState",
    "QuotaScope",
    "RequestRecord",
    "Resource",
    "ResourceKey",
    "ResourceType",
    "Restriction",
    "RunningArm",
    "ScheduledEvent",
    "StaticTokenCredential",
    "capacity_type_of",
    "create_arm_app",
    "logical_zone",
    "resource_sku",
    "rfc1123",
    "serve_arm",
    "start_arm",
]
