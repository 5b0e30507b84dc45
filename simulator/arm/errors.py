"""ARM's error responses and the wording Azure uses for the errors the provider classifies (capacity, quota,
throttling, transient failures)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from aiohttp import web


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

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
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
STATUS_OF_CODE = {
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
