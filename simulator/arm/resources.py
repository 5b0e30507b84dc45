"""The resources the emulator stores (VMs, NICs, managed disks), their ids and keys, and the request-body checks
every resource type shares, and the long-running operations that create and delete them (`Operation`; the
`operations` module moves them on)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from simulator.arm.errors import ArmError

Json = dict[str, Any]


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


RESOURCE_TYPES = {(t.namespace.lower(), t.short.lower()): t for t in ResourceType}
ResourceKey = tuple[ResourceType, str, str]


def resource_key(resource_type: ResourceType, resource_group: str, name: str) -> ResourceKey:
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
    """The operation in progress on it, if any."""
    failure: Json | None = None
    """The error its last create ended with; Azure shows it in the instance view of a failed VM."""
    extensions: dict[str, Json] = field(default_factory=dict)
    """A VM's extensions by lower-cased name, as PUT (protected settings included, which no GET shows)."""

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


def json_object(value: Any, path: str) -> Json:
    """`value`, which the request body must have as an object at `path`."""
    if not isinstance(value, dict):
        raise ArmError(
            400, "InvalidRequestContent", f"The request content was invalid: '{path}' is not an object."
        )
    return value


_RESERVED_TAG_CHARACTERS = frozenset("<>%&\\?/")


def check_tags(body: Json) -> None:
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
    """A long-running operation: `polls_left` more status reads answer InProgress, then it ends (not before
    `not_before`, when set)."""

    id: str
    kind: OperationKind
    key: ResourceKey
    polls_left: int
    started: datetime
    not_before: datetime | None = None
    on_its_own: bool = False
    """It ends at `not_before` whether or not anyone reads it, as Azure's operations run (a VM's create that
    takes `vm_create_seconds`); otherwise only reads move it on."""
    error: Json | None = None
    """The error it ends with (a late failure)."""
    status: OperationStatus = OperationStatus.IN_PROGRESS
    ended: datetime | None = None

    def to_json(self) -> Json:
        body: Json = {"name": self.id, "status": self.status.value, "startTime": iso(self.started)}
        if self.ended is not None:
            body["endTime"] = iso(self.ended)
        if self.status in (OperationStatus.FAILED, OperationStatus.CANCELED) and self.error is not None:
            body["error"] = self.error
        return body


def iso(moment: datetime) -> str:
    """A time as ARM writes it."""
    return moment.isoformat()
