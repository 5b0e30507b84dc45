"""The simulated Azure compute: virtual machines created from LaunchRequests, with the real catalog, boot and
delete delays, and faults a test or the demo injects.

Instances are keyed by name, which comes from the NodeClaim: creating a name that exists returns the existing
instance, never a second one, so a retried or replayed launch is safe. Counters record how many creates were
attempted and how many instances were made and deleted, so a test can prove that nothing was made twice.
Every choice that could vary (uids, which calls a probabilistic fault hits) derives from the seed.
"""

from __future__ import annotations

import builtins
import functools
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from core.cloudprovider import Instance, InstanceState, LaunchRequest
from core.errors import (
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    QuotaExceededError,
    ThrottledError,
)
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import InstanceType

CLUSTER_TAG = "karpenter.azure.com_cluster"
NODEPOOL_TAG = "karpenter.sh_nodepool"
BILLING_TAG = "compute.aks.billing"


@functools.cache
def shipped_instance_types(region: str) -> dict[str, InstanceType]:
    """The VM sizes of the shipped catalog of a region, by name (built once per region)."""
    catalog = load_shipped_catalog(region)
    return {instance_type.name: instance_type for instance_type in azure_instance_types(catalog)}


class ComputeSettings(BaseModel):
    """Where the simulated VMs live and how long they take."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    cluster_name: str = "nodewright"
    subscription_id: str = "00000000-0000-0000-0000-000000000000"
    resource_group: str = "MC_nodewright_nodewright_eastus"
    region: str = "eastus"
    boot_delay: timedelta = timedelta(seconds=1)
    """From create to a running VM (whose kubelet then registers)."""
    delete_delay: timedelta = timedelta(seconds=1)
    """From delete to the VM being gone."""


class FaultType(StrEnum):
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    QUOTA_EXCEEDED = "QuotaExceeded"
    THROTTLED = "Throttled"
    NEVER_REGISTER = "NeverRegister"
    """The VM is created and runs, but its kubelet never registers a Node."""


class Operation(StrEnum):
    CREATE = "create"
    GET = "get"
    LIST = "list"
    DELETE = "delete"


_DEFAULT_CODES = {
    FaultType.INSUFFICIENT_CAPACITY: "SkuNotAvailable",
    FaultType.QUOTA_EXCEEDED: "OperationNotAllowed",
    FaultType.THROTTLED: "TooManyRequests",
    FaultType.NEVER_REGISTER: "",
}


class Fault(BaseModel):
    """A failure injected into matching calls. Unset filters match everything.

    Capacity, quota and never-register faults apply to creates; throttling applies to the `operations` listed.
    A fault fires `times` times (forever when unset), each matching call with the given `probability`
    (drawn from the seed), and is removed when used up.
    """

    type: FaultType
    id: str = ""
    name: str | None = None
    """The instance (NodeClaim) name."""
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    operations: list[Operation] = Field(default_factory=lambda: [Operation.CREATE])
    times: int | None = Field(default=None, ge=1)
    probability: float = Field(default=1.0, ge=0.0, le=1.0)
    retry_after_seconds: float = Field(default=1.0, ge=0.0)
    scope: str = "family"
    """For quota faults: which quota ran out (family, regional, spot)."""
    code: str = ""
    """The Azure error code reported; a typical one for the fault type when empty."""

    def matches(self, operation: Operation, name: str | None, request: LaunchRequest | None) -> bool:
        if operation not in self.operations:
            return False
        if self.name is not None and self.name != name:
            return False
        filters = (self.instance_type, self.zone, self.capacity_type)
        if request is None:
            return all(value is None for value in filters)
        actual = (request.instance_type, request.zone, request.capacity_type)
        return all(wanted is None or wanted == value for wanted, value in zip(filters, actual, strict=True))


class Counters(BaseModel):
    """What the simulated cloud was asked to do, and did."""

    creates_attempted: int = 0
    instances_created: int = 0
    deletes_attempted: int = 0
    instances_deleted: int = 0
    gets: int = 0
    lists: int = 0
    faults_fired: int = 0


@dataclass(slots=True)
class Machine:
    """A VM with what the kubelet model needs to know about it."""

    instance: Instance
    request: LaunchRequest
    instance_type: InstanceType
    registers: bool
    created_at: float
    running_since: float | None = None
    deleting_since: float | None = None


class Compute:
    """Simulated Azure VMs for one cluster: create, get, list and delete, with delays and injected faults."""

    def __init__(
        self,
        settings: ComputeSettings,
        instance_types: Mapping[str, InstanceType],
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.counters = Counters()
        self.on_change: Callable[[], None] = lambda: None
        self._types = instance_types
        self._seed = seed
        self._clock = clock or time.monotonic
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._machines: dict[str, Machine] = {}
        self._faults: list[tuple[Fault, random.Random]] = []
        self._fault_ids = 0

    # --- the CloudProvider operations ----------------------------------------------------------------------

    def create(self, request: LaunchRequest) -> Instance:
        """Create the VM, or return the one with this name; capacity, quota and throttling faults raise."""
        self.counters.creates_attempted += 1
        self._throttle(Operation.CREATE, request.name, request)
        existing = self._machines.get(request.name)
        if existing is not None:
            return existing.instance.model_copy(deep=True)
        instance_type = self._types.get(request.instance_type)
        if instance_type is None:
            raise InvalidError(
                f"the VM size {request.instance_type!r} is not offered in {self.settings.region}",
                code="InvalidParameter",
            )
        offering = Offering(request.instance_type, request.zone, request.capacity_type)
        available = {(o.zone, o.capacity_type): o.available for o in instance_type.offerings}
        if (request.zone, request.capacity_type) not in available:
            raise InvalidError(
                f"{request.instance_type} has no {request.capacity_type} offering in zone {request.zone!r}",
                code="InvalidParameter",
            )
        if not available[request.zone, request.capacity_type]:
            raise InsufficientCapacityError(
                f"{request.instance_type} is not available for {request.capacity_type} in {request.zone}",
                offering,
                code="SkuNotAvailable",
            )
        fault = self._fire(
            Operation.CREATE,
            request.name,
            request,
            (FaultType.INSUFFICIENT_CAPACITY, FaultType.QUOTA_EXCEEDED),
        )
        if fault is not None and fault.type is FaultType.INSUFFICIENT_CAPACITY:
            raise InsufficientCapacityError(
                f"allocation failed: no {request.capacity_type} capacity for {request.instance_type} in "
                f"{request.zone}",
                offering,
                code=fault.code or _DEFAULT_CODES[fault.type],
            )
        if fault is not None:
            raise QuotaExceededError(
                f"operation could not be completed as it results in exceeding the approved {fault.scope} quota "
                f"for {request.instance_type}",
                offering,
                scope=fault.scope,
                code=fault.code or _DEFAULT_CODES[fault.type],
            )
        never = self._fire(Operation.CREATE, request.name, request, (FaultType.NEVER_REGISTER,))
        now = self._clock()
        machine = Machine(
            instance=Instance(
                name=request.name,
                provider_id=self.provider_id(request.name),
                instance_type=request.instance_type,
                zone=request.zone,
                capacity_type=request.capacity_type,
                state=InstanceState.CREATING,
                tags={
                    **request.tags,
                    CLUSTER_TAG: self.settings.cluster_name,
                    NODEPOOL_TAG: request.nodepool,
                    BILLING_TAG: "linux",
                },
                created_at=self._wall_clock(),
            ),
            request=request,
            instance_type=instance_type,
            registers=never is None,
            created_at=now,
        )
        self._machines[request.name] = machine
        self.counters.instances_created += 1
        self.advance(now)
        self.on_change()
        return machine.instance.model_copy(deep=True)

    def get(self, name: str) -> Instance:
        """The VM with this name; `NotFoundError` when there is none."""
        self.counters.gets += 1
        self._throttle(Operation.GET, name, None)
        machine = self._machines.get(name)
        if machine is None:
            raise NotFoundError(f"the VM {name!r} was not found", code="ResourceNotFound")
        return machine.instance.model_copy(deep=True)

    def list(self) -> list[Instance]:
        """The VMs tagged for this cluster, sorted by name."""
        self.counters.lists += 1
        self._throttle(Operation.LIST, None, None)
        return [
            machine.instance.model_copy(deep=True)
            for name, machine in sorted(self._machines.items())
            if machine.instance.tags.get(CLUSTER_TAG) == self.settings.cluster_name
        ]

    def delete(self, name: str) -> None:
        """Start deleting the VM (gone after the delete delay); `NotFoundError` when there is none."""
        self.counters.deletes_attempted += 1
        self._throttle(Operation.DELETE, name, None)
        machine = self._machines.get(name)
        if machine is None:
            raise NotFoundError(f"the VM {name!r} was not found", code="ResourceNotFound")
        if machine.deleting_since is None:
            machine.deleting_since = self._clock()
            machine.instance.state = InstanceState.DELETING
            self.advance(machine.deleting_since)
            self.on_change()

    # --- what the kubelet model and the simulation loop read -----------------------------------------------

    def machines(self) -> builtins.list[Machine]:
        """Every VM that exists (running, booting or being deleted), sorted by name."""
        return [self._machines[name] for name in sorted(self._machines)]

    def machine(self, name: str) -> Machine | None:
        return self._machines.get(name)

    def provider_id(self, name: str) -> str:
        """The AKS provider ID of a VM (the resource group lower-cased, as AKS writes it)."""
        settings = self.settings
        return (
            f"azure:///subscriptions/{settings.subscription_id}/resourceGroups/{settings.resource_group.lower()}"
            f"/providers/Microsoft.Compute/virtualMachines/{name}"
        )

    def advance(self, now: float) -> float | None:
        """Finish the boots and deletes that are due; the time of the next one, if any."""
        boot = self.settings.boot_delay.total_seconds()
        gone = self.settings.delete_delay.total_seconds()
        due: list[float] = []
        changed = False
        for name, machine in sorted(self._machines.items()):
            if machine.deleting_since is not None:
                if now >= machine.deleting_since + gone:
                    del self._machines[name]
                    self.counters.instances_deleted += 1
                    changed = True
                else:
                    due.append(machine.deleting_since + gone)
            elif machine.running_since is None:
                if now >= machine.created_at + boot:
                    machine.running_since = now
                    machine.instance.state = InstanceState.RUNNING
                    changed = True
                else:
                    due.append(machine.created_at + boot)
        if changed:
            self.on_change()
        return min(due, default=None)

    # --- faults --------------------------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> Fault:
        """Inject a fault; it gets an id (`f1`, `f2`, ...) to remove it by."""
        self._fault_ids += 1
        stored = fault.model_copy(update={"id": f"f{self._fault_ids}"})
        self._faults.append((stored, random.Random(f"{self._seed}/{stored.id}")))
        return stored.model_copy()

    def faults(self) -> builtins.list[Fault]:
        return [fault.model_copy() for fault, _ in self._faults]

    def remove_fault(self, fault_id: str) -> None:
        before = len(self._faults)
        self._faults = [(fault, draw) for fault, draw in self._faults if fault.id != fault_id]
        if len(self._faults) == before:
            raise NotFoundError(f"no fault with id {fault_id!r}", code="NotFound")

    def clear_faults(self) -> None:
        self._faults = []

    def _fire(
        self,
        operation: Operation,
        name: str | None,
        request: LaunchRequest | None,
        types: tuple[FaultType, ...],
    ) -> Fault | None:
        """The first fault of these types that matches the call and hits it (its count goes down)."""
        for index, (fault, draw) in enumerate(self._faults):
            if fault.type not in types or not fault.matches(operation, name, request):
                continue
            if fault.probability < 1.0 and draw.random() >= fault.probability:
                continue
            if fault.times is not None:
                remaining = fault.times - 1
                if remaining:
                    self._faults[index] = (fault.model_copy(update={"times": remaining}), draw)
                else:
                    del self._faults[index]
            self.counters.faults_fired += 1
            return fault
        return None

    def _throttle(self, operation: Operation, name: str | None, request: LaunchRequest | None) -> None:
        fault = self._fire(operation, name, request, (FaultType.THROTTLED,))
        if fault is not None:
            raise ThrottledError(
                f"too many {operation} requests; retry after {fault.retry_after_seconds:g} s",
                fault.retry_after_seconds,
                code=fault.code or _DEFAULT_CODES[fault.type],
            )
