"""The core of the emulator's state: its settings, what it stores (resources, operations, faults, restrictions),
counters and request records, lookups by name and id, and fault firing. Resource types add their behaviour in
`operations`, `nics` and `vms`; `state.ArmState` puts them together."""

from __future__ import annotations

import collections
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.clouds import AzureCloud, cloud_named
from core.instancetypes.catalog import AzureCatalog, AzureSku, load_shipped_catalog
from simulator.arm.entra import Directory
from simulator.arm.errors import STATUS_OF_CODE, ArmError, default_message, quota_message
from simulator.arm.faults import Call, Fault, FaultAction, logical_zone
from simulator.arm.resources import (
    RESOURCE_TYPES,
    Json,
    Operation,
    Resource,
    ResourceKey,
    ResourceType,
    resource_key,
)
from simulator.arm.skus import Restriction, resource_skus

logger = logging.getLogger(__name__)

DEFAULT_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
DEFAULT_RESOURCE_GROUP = "MC_nodewright_nodewright_eastus"


class ArmSettings(BaseModel):
    """The subscription and region the emulator plays, and how long its operations take."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    subscription_id: str = DEFAULT_SUBSCRIPTION
    region: str = "eastus"
    """Any region: the shipped catalog of a region of the price table, else eastus's sizes at eastus's prices."""
    cloud: str = "AzurePublicCloud"
    """The cloud it plays (`core.clouds` names): the token audience its Entra ID and ARM accept."""
    resource_group: str = DEFAULT_RESOURCE_GROUP
    """The node resource group the Python helpers (`ArmState.vm`, ...) default to."""
    resource_groups: list[str] = Field(default_factory=list)
    """Resource groups that exist (404 `ResourceGroupNotFound` for others); empty means any."""
    token: str | None = None
    """When set, the only bearer token accepted."""
    create_polls: int = Field(default=1, ge=0)
    """`InProgress` answers before a create operation ends."""
    delete_polls: int = Field(default=1, ge=0)
    vm_create_seconds: float = Field(default=0.0, ge=0.0)
    """How long a VM's create takes, from its PUT: status reads before then answer `InProgress` whatever
    `create_polls` says, and it ends then whether or not anyone reads it (unless a slow fault holds it: then
    its polls must be read as well). Azure's VM creates take tens of seconds (30 to 90 are common); 0 keeps
    tests fast, and creates end by their `create_polls` reads."""
    page_size: int = Field(default=100, ge=1)
    """Items per page of a list; more are behind `nextLink`."""
    sku_page_size: int | None = Field(default=None, ge=1)
    """Items per page of the Resource SKUs list; one page when unset."""
    poll_retry_after: float = Field(default=0.0, ge=0.0)
    """The Retry-After sent with LRO responses. Azure sends some seconds, which overrides the client's
    polling interval; 0 keeps tests fast."""
    seed: int = 0
    """Seeds the generated ids (vmId, operation ids, resource GUIDs)."""
    eviction_notice: timedelta = Field(default=timedelta(seconds=30), ge=timedelta(0))
    """From a Spot VM's eviction being scheduled (its Preempt Scheduled Event) to the VM being evicted; Azure
    gives at least 30 s (seconds in JSON)."""
    subnets: list[str] = Field(default_factory=list)
    """Subnet IDs that exist besides the cluster's own (`aks-vnet-12345678/aks-subnet` in the node resource
    group, `simulator.arm.subnets`)."""

    @field_validator("cloud")
    @classmethod
    def _known_cloud(cls, name: str) -> str:
        return cloud_named(name).name

    @property
    def azure_cloud(self) -> AzureCloud:
        return cloud_named(self.cloud)


@dataclass(slots=True)
class Counters:
    """What the emulator was asked to do and did."""

    vms_created: int = 0
    nics_created: int = 0
    disks_created: int = 0
    vms_deleted: int = 0
    nics_deleted: int = 0
    disks_deleted: int = 0
    vms_evicted: int = 0
    """Spot VMs deleted by their eviction."""
    vms_vanished: int = 0
    """VMs removed with no notice (`ArmState.vanish`)."""
    faults_fired: int = 0
    responses_dropped: int = 0
    fired_by_fault: dict[str, int] = field(default_factory=dict)
    """How often each fault fired, by its id."""
    vms_created_again: list[str] = field(default_factory=list)
    """VMs created under the name of a VM created before (an instance made twice for one NodeClaim, whose name
    its VM's is), in creation order."""
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
    host: str = ""
    """The host the request was sent to (its `Host` header), e.g. `management.usgovcloudapi.net`."""


class ArmStore:
    """What the emulator holds, and the lookups, faults and restrictions every resource type shares."""

    def __init__(
        self,
        settings: ArmSettings | None = None,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings or ArmSettings()
        self.catalog: AzureCatalog = load_shipped_catalog(self.settings.region, fallback=True)
        self.counters = Counters()
        self.directory = Directory(self.settings.azure_cloud)
        """Entra ID's applications and managed identities, and the tokens issued (`simulator.arm.entra`)."""
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=10_000)
        self.on_change: Callable[[], None] = lambda: None
        """Called after a resource was created, changed state or removed (the node agents wake up on it)."""
        self.on_timed: Callable[[], None] = lambda: None
        """Called after an operation that ends on its own started (the server's clock task wakes up on it)."""
        self._clock = clock or time.monotonic
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._random = random.Random(self.settings.seed)
        self._resources: dict[ResourceKey, Resource] = {}
        self._operations: dict[str, Operation] = {}
        self._timed: set[str] = set()
        """The operations that end on their own and may still be running (the clock task looks at these only)."""
        self._faults: list[Fault] = []
        self._fault_ids = 0
        self._restrictions: dict[str, Restriction] = {}
        self._next_ip = 4
        self._vm_names: set[str] = set()
        """Lower-cased names of every VM ever created."""

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
        return self._resources.get(
            resource_key(resource_type, resource_group or self.settings.resource_group, name)
        )

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

    def wall_clock(self) -> datetime:
        """The emulator's wall clock (UTC): creation times, operation times, eviction deadlines."""
        return self._wall_clock()

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

    def resource_skus(self) -> list[Json]:
        """The Resource SKUs of the region, with the restrictions in force."""
        return resource_skus(self.catalog, self._restrictions)

    def fire(self, call: Call, actions: Iterable[FaultAction]) -> Fault | None:
        """The first fault of these actions that matches the call; it fires (its count goes down)."""
        wanted = set(actions)
        for index, fault in enumerate(self._faults):
            if fault.action not in wanted or not fault.matches(call):
                continue
            if fault.rate is not None and self._random.random() >= fault.rate:
                continue
            if fault.times is not None:
                if fault.times > 1:
                    self._faults[index] = fault.model_copy(update={"times": fault.times - 1})
                else:
                    del self._faults[index]
            self.counters.faults_fired += 1
            self.counters.fired_by_fault[fault.id] = self.counters.fired_by_fault.get(fault.id, 0) + 1
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
        return ArmError(fault.status or STATUS_OF_CODE.get(fault.code, 400), error["code"], error["message"])

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

    def list_resources(self, resource_type: ResourceType, resource_group: str | None) -> list[Resource]:
        return [
            resource
            for key, resource in sorted(self._resources.items())
            if key[0] is resource_type and (resource_group is None or key[1] == resource_group.lower())
        ]

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

    def _by_id(self, resource_id: str) -> Resource | None:
        parts = resource_id.strip("/").split("/")
        if len(parts) != 8 or parts[0].lower() != "subscriptions" or parts[4].lower() != "providers":
            return None
        resource_type = RESOURCE_TYPES.get((parts[5].lower(), parts[6].lower()))
        if resource_type is None:
            return None
        return self._resources.get(resource_key(resource_type, parts[3], parts[7]))
