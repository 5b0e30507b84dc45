"""Faults injected into the emulator's requests: what they do (`FaultAction`), which requests they match
(`Call`) and readable constructors for the ones tests use most. The state fires them (`ArmState.fire`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.arm.errors import QuotaScope


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
    rate: float | None = Field(default=None, gt=0.0, le=1.0)
    """Fire on this fraction of the matching requests, drawn from the emulator's seeded generator (a cloud that
    fails now and then); on every one when unset."""

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
