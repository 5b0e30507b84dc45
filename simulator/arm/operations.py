"""Long-running operations: a PUT or DELETE answers at once with an operation that reads `InProgress` a few
times, then ends (Succeeded, Failed with a late error, or Canceled by a delete that overtakes a create). Reading
the resource moves its operation on too. `Operations` is the part of the state that starts, steps and finishes
them, and stores, finds and removes resources as they do."""

from __future__ import annotations

from datetime import datetime, timedelta

from simulator.arm.errors import ArmError
from simulator.arm.faults import Call, Fault, FaultAction
from simulator.arm.resources import (
    Json,
    Operation,
    OperationKind,
    OperationStatus,
    ProvisioningState,
    Resource,
    ResourceType,
    check_tags,
    resource_key,
)
from simulator.arm.store import ArmStore


class Operations(ArmStore):
    """Starts, steps and finishes operations, and stores, finds and removes the resources they act on.

    Resource types hook into the ends of an operation: `_provisioned` after a create succeeded, `_released`
    after a resource was removed.
    """

    def find(self, resource_type: ResourceType, resource_group: str, name: str) -> Resource | None:
        """The resource, after moving its pending operation on by one step (a GET counts as progress)."""
        resource = self._resources.get(resource_key(resource_type, resource_group, name))
        if resource is not None and resource.operation is not None:
            self._step(self._operations[resource.operation])
            resource = self._resources.get(resource_key(resource_type, resource_group, name))
        return resource

    def get(self, resource_type: ResourceType, resource_group: str, name: str) -> Resource:
        resource = self.find(resource_type, resource_group, name)
        if resource is None:
            raise self.not_found(resource_type, resource_group, name)
        return resource

    @staticmethod
    def not_found(resource_type: ResourceType, resource_group: str, name: str) -> ArmError:
        """ARM's 404 for a resource that does not exist."""
        return ArmError(
            404,
            "ResourceNotFound",
            f"The Resource '{resource_type.value}/{name}' under resource group '{resource_group}' was not "
            "found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )

    def update_tags(
        self, resource_type: ResourceType, resource_group: str, name: str, body: Json
    ) -> Resource:
        """PATCH: only `tags` is applied (what the provider's in-place tag updates send)."""
        resource = self.get(resource_type, resource_group, name)
        check_tags(body)
        if "tags" in body:
            resource.body["tags"] = dict(body["tags"] or {})
            self.on_change()
        return resource

    def _start(
        self,
        kind: OperationKind,
        resource: Resource,
        polls: int,
        error: Json | None = None,
        least: timedelta = timedelta(0),
        on_its_own: bool = False,
    ) -> Operation:
        started = self._wall_clock()
        operation = Operation(
            id=self._new_id(),
            kind=kind,
            key=resource_key(resource.type, resource.resource_group, resource.name),
            polls_left=polls,
            started=started,
            not_before=started + least if least else None,
            on_its_own=on_its_own and bool(least),
            error=error,
        )
        self._operations[operation.id] = operation
        resource.operation = operation.id
        if operation.on_its_own:
            self._timed.add(operation.id)
            self.on_timed()
        return operation

    def end_due(self) -> None:
        """End the operations that end on their own and whose time has come."""
        now = self._wall_clock()
        for operation in self._running_timed():
            if self._due(operation, now):
                self._finish(operation)

    def next_due(self) -> datetime | None:
        """When the next operation that ends on its own is due."""
        due = [
            operation.not_before for operation in self._running_timed() if operation.not_before is not None
        ]
        return min(due, default=None)

    def _running_timed(self) -> list[Operation]:
        """The operations that end on their own and still run (forgetting those that ended otherwise)."""
        running = [self._operations[key] for key in self._timed]
        running = [operation for operation in running if operation.status is OperationStatus.IN_PROGRESS]
        self._timed = {operation.id for operation in running}
        return running

    @staticmethod
    def _due(operation: Operation, now: datetime) -> bool:
        return (
            operation.on_its_own
            and operation.status is OperationStatus.IN_PROGRESS
            and operation.not_before is not None
            and now >= operation.not_before
        )

    @staticmethod
    def _polls(slow: Fault | None, default: int) -> int:
        """`InProgress` answers before an operation ends: a slow fault's, else `default`."""
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
        if self._due(operation, self._wall_clock()):
            self._finish(operation)
            return
        if operation.polls_left > 0:
            operation.polls_left -= 1
            return
        if operation.not_before is not None and self._wall_clock() < operation.not_before:
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
            self._provisioned(resource)
        self.on_change()

    def _provisioned(self, resource: Resource) -> None:
        """What a succeeded create does besides ending: nothing, unless a resource type says otherwise."""

    def _released(self, resource: Resource) -> None:
        """What removing a resource does to others: nothing, unless a resource type says otherwise."""

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
        polls = self._polls(self.fire(call, (FaultAction.SLOW,)), self.settings.delete_polls)
        operation = self._start(OperationKind.DELETE, resource, polls)
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

    def _remove(self, resource: Resource) -> None:
        del self._resources[resource_key(resource.type, resource.resource_group, resource.name)]
        if resource.type is ResourceType.VIRTUAL_MACHINE:
            self.counters.vms_deleted += 1
        elif resource.type is ResourceType.NETWORK_INTERFACE:
            self.counters.nics_deleted += 1
        else:
            self.counters.disks_deleted += 1
        self._released(resource)

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
        self._resources[resource_key(resource.type, resource.resource_group, resource.name)] = resource
        pending = self._operations.get(existing.operation) if existing and existing.operation else None
        if existing is not None and pending is not None and pending.status is OperationStatus.IN_PROGRESS:
            resource.operation = pending.id
            resource.provisioning_state = ProvisioningState(existing.provisioning_state)
            self.on_change()
            return pending
        late = self.fire(call, (FaultAction.FAIL_LATE,)) if provision else None
        slow = self.fire(call, (FaultAction.SLOW,)) if provision else None
        polls = self._polls(slow, self.settings.create_polls) if provision else 0
        resource.provisioning_state = while_provisioning if provision else ProvisioningState.UPDATING
        least = (
            timedelta(seconds=self.settings.vm_create_seconds)
            if provision and resource.type is ResourceType.VIRTUAL_MACHINE
            else timedelta(0)
        )
        operation = self._start(
            OperationKind.CREATE,
            resource,
            polls,
            self._error(late, call) if late is not None else None,
            least,
            on_its_own=slow is None,
        )
        self.on_change()
        return operation
