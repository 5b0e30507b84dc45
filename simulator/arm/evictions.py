"""Spot evictions, and the Scheduled Events a VM reads from its instance metadata service (IMDS).

On Azure a Spot VM is evicted with notice: IMDS (`GET http://169.254.169.254/metadata/scheduledevents`) posts a
`Preempt` event whose `NotBefore` (RFC 1123, GMT) is at least 30 s away, and at that time the VM is evicted;
with `evictionPolicy: Delete` it is deleted. ARM's `simulateEviction` action starts the same sequence on demand
(Azure says within 30 minutes of the call; here the event is posted at once). Here:

- `simulate_eviction` schedules the eviction of a Spot VM: one `Preempt` event, `NotBefore` the settings'
  `eviction_notice` from now (rounded up to the whole second, so the deadline is exactly the time the event
  shows). A VM that is not Spot gets 409 `OperationNotAllowed` (the code Azure uses for operations a VM's state
  forbids; the exact wording Azure uses here could not be checked, so the message is ours). A Spot VM with
  `evictionPolicy: Deallocate` (or none, which Azure reads as Deallocate) is refused the same way, saying that
  the emulator does not emulate deallocation. Asking again while an eviction is pending changes nothing.
- `scheduled_events` is a VM's Scheduled Events document as IMDS serves it (api-version 2020-07-01):
  `{"DocumentIncarnation": n, "Events": [{"EventId", "EventType", "ResourceType", "Resources", "EventStatus",
  "NotBefore", "Description", "EventSource", "DurationInSeconds"}]}`. `DocumentIncarnation` starts at 0 and
  goes up by one whenever the document changes. A Preempt event has `ResourceType` `VirtualMachine`,
  `Resources` the VM's name, `EventSource` `Platform` and `DurationInSeconds` -1 (unknown, as IMDS says for
  evictions); its `Description` is ours (not checked against Azure's).
- `start_events` is what a VM's `POST` of `{"StartRequests": [{"EventId": ...}]}` does: an approved event starts
  at once (`EventStatus` `Started`, `NotBefore` empty, as IMDS shows started events) and the VM is evicted.
- `evict_due` evicts the VMs whose `NotBefore` has come (`simulator.arm.server` runs it at the deadlines). The
  VM is deleted as a Delete eviction policy does, without an ARM operation: its NICs and OS disk follow their
  `deleteOption` as in a normal delete, a pending create or update is canceled, and its document goes with it.
  A VM already being deleted, or gone (or made again under the same name, another `vmId`), is left alone.
- `vanish` removes a VM at once with no notice at all (a host failure, or a delete nobody was told about), so
  garbage collection can be tested; its NICs and disk follow their `deleteOption` too.

Times come from the state's wall clock, so a test that passes its own clock (and stops the served emulator's
evictor, `RunningArm.evictor`) is deterministic: advance it, then call `evict_due`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from enum import StrEnum
from typing import Any

from simulator.arm.errors import ArmError
from simulator.arm.operations import Operations
from simulator.arm.resources import Json, ProvisioningState, Resource, ResourceKey, ResourceType, resource_key

logger = logging.getLogger(__name__)

PREEMPT_DESCRIPTION = "The Spot virtual machine is being evicted because Azure needs its capacity back."
"""The `Description` of a Preempt event (plausible; Azure's own wording was not available to check)."""
_RUNNING = frozenset({ProvisioningState.SUCCEEDED.value, ProvisioningState.UPDATING.value})


class EventType(StrEnum):
    PREEMPT = "Preempt"


class EventStatus(StrEnum):
    SCHEDULED = "Scheduled"
    STARTED = "Started"


def rfc1123(moment: datetime) -> str:
    """A time as IMDS writes `NotBefore`: `Mon, 19 Sep 2016 18:29:47 GMT`."""
    return format_datetime(moment, usegmt=True)


@dataclass(slots=True)
class ScheduledEvent:
    """One event of a Scheduled Events document."""

    id: str
    type: EventType
    resources: list[str]
    not_before: datetime
    """When it starts (UTC, whole seconds): the eviction's deadline."""
    status: EventStatus = EventStatus.SCHEDULED
    description: str = PREEMPT_DESCRIPTION
    source: str = "Platform"
    duration_seconds: int = -1

    def to_json(self) -> Json:
        """The event as IMDS serves it (a started event has no `NotBefore`)."""
        return {
            "EventId": self.id,
            "EventType": self.type.value,
            "ResourceType": "VirtualMachine",
            "Resources": list(self.resources),
            "EventStatus": self.status.value,
            "NotBefore": rfc1123(self.not_before) if self.status is EventStatus.SCHEDULED else "",
            "Description": self.description,
            "EventSource": self.source,
            "DurationInSeconds": self.duration_seconds,
        }

    @classmethod
    def from_json(cls, body: Json, not_before: datetime | None = None) -> ScheduledEvent:
        """The event of an IMDS document (`not_before` when the document shows none: a started event)."""
        raw = str(body.get("NotBefore") or "")
        moment = parsedate_to_datetime(raw) if raw else not_before
        if moment is None:
            raise ValueError(f"event {body.get('EventId')} has no NotBefore")
        return cls(
            id=str(body["EventId"]),
            type=EventType(body["EventType"]),
            resources=[str(name) for name in body.get("Resources") or []],
            not_before=moment,
            status=EventStatus(body["EventStatus"]),
            description=str(body.get("Description") or ""),
            source=str(body.get("EventSource") or ""),
            duration_seconds=int(body.get("DurationInSeconds", -1)),
        )


@dataclass(slots=True)
class _Document:
    """A VM's Scheduled Events: it belongs to one machine (`vm_id`), not to a name."""

    vm_id: str
    incarnation: int = 0
    events: list[ScheduledEvent] = field(default_factory=list)

    def to_json(self) -> Json:
        return {"DocumentIncarnation": self.incarnation, "Events": [event.to_json() for event in self.events]}


class Evictions(Operations):
    """Spot evictions with their Scheduled Events, and VMs that vanish."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._documents: dict[ResourceKey, _Document] = {}
        self.on_eviction_scheduled: Callable[[], None] = lambda: None
        """Called when an eviction's deadline was set or moved (the served emulator's evictor wakes up)."""

    def simulate_eviction(
        self, resource_group: str, name: str, notice: timedelta | None = None
    ) -> ScheduledEvent:
        """Schedule the eviction of a Spot VM `notice` from now (the settings' `eviction_notice` by default);
        the pending Preempt event if there is one already."""
        vm = self._existing_vm(resource_group, name)
        properties = vm.properties
        priority = str(properties.get("priority") or "Regular")
        if priority.lower() not in ("spot", "low"):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'simulateEviction' is not allowed on VM '{vm.name}': it is not a Spot virtual machine "
                f"(priority '{priority}').",
            )
        if str(properties.get("evictionPolicy") or "Deallocate").lower() != "delete":
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'simulateEviction' on VM '{vm.name}' would deallocate it (evictionPolicy "
                f"'{properties.get('evictionPolicy') or 'Deallocate'}'), which the ARM emulator does not emulate; "
                "use evictionPolicy 'Delete'.",
            )
        if vm.provisioning_state not in _RUNNING:
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'simulateEviction' is not allowed on VM '{vm.name}' since its provisioning state is "
                f"'{vm.provisioning_state}'.",
            )
        document = self._document(vm)
        pending = next((event for event in document.events if event.type is EventType.PREEMPT), None)
        if pending is not None:
            return pending
        wait = self.settings.eviction_notice if notice is None else notice
        deadline = self.wall_clock() + wait
        if deadline.microsecond:
            deadline = deadline.replace(microsecond=0) + timedelta(seconds=1)
        event = ScheduledEvent(self._new_id().upper(), EventType.PREEMPT, [vm.name], deadline)
        document.events.append(event)
        document.incarnation += 1
        logger.info(
            "ARM emulator: Spot VM %s will be evicted at %s (event %s)", vm.name, rfc1123(deadline), event.id
        )
        self.on_eviction_scheduled()
        return event

    def scheduled_events(self, name: str, resource_group: str | None = None) -> Json:
        """The VM's Scheduled Events document, as IMDS serves it; 404 `ResourceNotFound` when there is no VM."""
        vm = self._existing_vm(resource_group or self.settings.resource_group, name)
        return self._document(vm).to_json()

    def start_events(self, name: str, event_ids: Iterable[str], resource_group: str | None = None) -> None:
        """Approve events (a VM's StartRequests): they start now. 400 `InvalidParameter` for an unknown id."""
        vm = self._existing_vm(resource_group or self.settings.resource_group, name)
        document = self._document(vm)
        by_id = {event.id.lower(): event for event in document.events}
        wanted = [str(event_id) for event_id in event_ids]
        unknown = [event_id for event_id in wanted if event_id.lower() not in by_id]
        if unknown:
            raise ArmError(
                400, "InvalidParameter", f"No scheduled event {', '.join(unknown)} for VM '{vm.name}'."
            )
        changed = False
        for event_id in wanted:
            event = by_id[event_id.lower()]
            if event.status is EventStatus.SCHEDULED:
                event.status = EventStatus.STARTED
                event.not_before = min(event.not_before, self.wall_clock())
                changed = True
        if changed:
            document.incarnation += 1
            self.on_eviction_scheduled()

    def next_eviction(self) -> datetime | None:
        """The earliest pending eviction deadline."""
        return min(
            (event.not_before for document in self._documents.values() for event in document.events),
            default=None,
        )

    def evict_due(self) -> list[str]:
        """Evict the VMs whose deadline has come; the names of those deleted."""
        now = self.wall_clock()
        evicted = []
        for key, document in list(self._documents.items()):
            if not any(event.not_before <= now for event in document.events):
                continue
            del self._documents[key]
            vm = self._resources.get(key)
            if vm is None or str(vm.properties.get("vmId") or "") != document.vm_id:
                continue
            if vm.provisioning_state == ProvisioningState.DELETING:
                continue
            self._cancel(vm)
            self._remove(vm)
            self.counters.vms_evicted += 1
            evicted.append(vm.name)
            logger.info("ARM emulator: Spot VM %s was evicted (deleted)", vm.name)
        if evicted:
            self.on_change()
        return evicted

    def vanish(self, resource_group: str, name: str) -> None:
        """Remove a VM at once, with no notice and no operation; 404 `ResourceNotFound` when there is none."""
        vm = self._existing_vm(resource_group, name)
        self._cancel(vm)
        self._remove(vm)
        self.counters.vms_vanished += 1
        logger.info("ARM emulator: VM %s vanished", vm.name)
        self.on_change()

    def _released(self, resource: Resource) -> None:
        """A VM's Scheduled Events go with it."""
        super()._released(resource)
        if resource.type is ResourceType.VIRTUAL_MACHINE:
            self._documents.pop(resource_key(resource.type, resource.resource_group, resource.name), None)

    def _existing_vm(self, resource_group: str, name: str) -> Resource:
        vm = self.resource(ResourceType.VIRTUAL_MACHINE, name, resource_group)
        if vm is None:
            raise self.not_found(ResourceType.VIRTUAL_MACHINE, resource_group, name)
        return vm

    def _document(self, vm: Resource) -> _Document:
        key = resource_key(vm.type, vm.resource_group, vm.name)
        vm_id = str(vm.properties.get("vmId") or "")
        document = self._documents.get(key)
        if document is None or document.vm_id != vm_id:
            document = self._documents[key] = _Document(vm_id)
        return document
