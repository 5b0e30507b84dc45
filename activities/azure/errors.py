"""Azure failures mapped to the error kinds of `core.errors`, by the ARM error code.

The SDK raises different exception classes for the same condition (a 409 `SkuNotAvailable` arrives as
`ResourceExistsError`, a failed long-running operation as a plain `HttpResponseError` with status 200), so the
class says little: the code in the ARM error body (`error.code`) decides, then the HTTP status. Quota errors are
the one place Azure gives no specific code: they all arrive as `OperationNotAllowed`, and only the message says
which quota ran out (the AKS provider matches the same phrases).

A failure to sign in never reaches ARM: azure-identity raises `ClientAuthenticationError` with Entra ID's answer
(`error_codes`, the `AADSTS` numbers), whose code is `AADSTS<number>`. It, and ARM's refusals of the token or of
its identity (`CREDENTIAL_CODES`), are `CredentialError`s: the identity's fault, not the request's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError, ODataV4Format

from core.errors import (
    CloudError,
    ConflictError,
    CredentialError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)

OPERATION_NOT_ALLOWED = "OperationNotAllowed"
SPOT_QUOTA_PHRASE = "LowPriorityCores"
FAMILY_QUOTA_PHRASE = "Family Cores quota"
REGIONAL_QUOTA_PHRASE = "exceeding approved Total Regional Cores quota"
ZERO_LIMIT_PHRASE = "Current Limit: 0"

DEFAULT_RETRY_AFTER_SECONDS = 5.0
"""When a 429 carries no usable Retry-After header."""
MAX_MESSAGE_LENGTH = 1200
"""Azure messages can be long; the provider cuts them to this many characters too."""
REDACTED = "[redacted]"

TRANSIENT_CODES = frozenset({"NicReservedForAnotherVm"})
"""Refusals that pass on their own: a NIC stays reserved for 180 s after its VM is deleted."""
INVALID_CODES = frozenset(
    {"InvalidParameter", "BadRequest", "InvalidRequestContent", "InvalidResourceReference", "InvalidTemplate"}
)
"""Codes of a long-running operation's failure that say the request itself was wrong (other failures of an
accepted operation may pass on their own)."""
CREDENTIAL_CODES = frozenset(
    {
        "AuthenticationFailed",
        "InvalidAuthenticationToken",
        "ExpiredAuthenticationToken",
        "InvalidAuthenticationTokenAudience",
        "InvalidAuthenticationTokenTenant",
        "AuthorizationFailed",
        "LinkedAuthorizationFailed",
    }
)
"""ARM's refusals of the worker's token (401) or of its identity (403: no role assignment for the action, here or
on a linked resource such as the subnet)."""


class CapacityFailure(StrEnum):
    """The launch failures that rule out offerings, in the order the provider matches them (first wins)."""

    SPOT_QUOTA = "LowPriorityQuota"
    FAMILY_QUOTA = "FamilyQuota"
    SKU_NOT_AVAILABLE = "SkuNotAvailable"
    ZONAL_ALLOCATION_FAILED = "ZonalAllocationFailed"
    ALLOCATION_FAILED = "AllocationFailed"
    OVERCONSTRAINED_ZONAL_ALLOCATION = "OverconstrainedZonalAllocationRequest"
    OVERCONSTRAINED_ALLOCATION = "OverconstrainedAllocationRequest"
    REGIONAL_QUOTA = "RegionalQuota"

    @property
    def quota_scope(self) -> str | None:
        """For quota failures, which quota ran out (`QuotaExceededError.scope`); `None` for capacity ones."""
        return _QUOTA_SCOPES.get(self)


_QUOTA_SCOPES = {
    CapacityFailure.SPOT_QUOTA: "spot",
    CapacityFailure.FAMILY_QUOTA: "family",
    CapacityFailure.REGIONAL_QUOTA: "regional",
}
_QUOTA_PHRASES = (
    (SPOT_QUOTA_PHRASE, CapacityFailure.SPOT_QUOTA),
    (FAMILY_QUOTA_PHRASE, CapacityFailure.FAMILY_QUOTA),
    (REGIONAL_QUOTA_PHRASE, CapacityFailure.REGIONAL_QUOTA),
)
_CAPACITY_CODES = (
    CapacityFailure.SKU_NOT_AVAILABLE,
    CapacityFailure.ZONAL_ALLOCATION_FAILED,
    CapacityFailure.ALLOCATION_FAILED,
    CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION,
    CapacityFailure.OVERCONSTRAINED_ALLOCATION,
)


@dataclass(frozen=True, slots=True)
class ArmError:
    """What an Azure failure says: HTTP status (200 for a failed long-running operation), code and message."""

    status: int | None
    code: str
    message: str
    retry_after: str | None = None
    """The raw Retry-After header."""
    details: tuple[tuple[str, str], ...] = ()
    """(code, message) of every nested detail; ARM sometimes wraps the real code in one."""
    sign_in: bool = False
    """The credential failed to get a token (Entra ID's or IMDS's answer, not ARM's)."""

    def codes(self) -> list[tuple[str, str]]:
        """(code, message) of the error itself, then of each detail."""
        return [(self.code, self.message), *self.details]


def arm_error(error: AzureError) -> ArmError:
    """The status, code, message and Retry-After header of an Azure SDK exception."""
    if isinstance(error, ClientAuthenticationError):
        return _sign_in_error(error)
    if not isinstance(error, HttpResponseError):
        return ArmError(status=None, code=type(error).__name__, message=error.message)
    body = error.error
    code = (body.code if body else None) or ""
    message = (body.message if body else None) or error.message or ""
    # Every transport's response has headers, but azure-core's common response protocol does not declare them.
    headers: Mapping[str, str] = getattr(error.response, "headers", None) or {}
    return ArmError(
        status=error.status_code,
        code=code,
        message=str(message),
        retry_after=headers.get("Retry-After"),
        details=tuple(_details(body)) if body else (),
    )


def _sign_in_error(error: ClientAuthenticationError) -> ArmError:
    """A credential's failure to get a token, coded by Entra ID's first error code (`AADSTS7000222`), else its
    OAuth error (`invalid_client`), else the exception's class (no answer: IMDS unreachable, a file unread)."""
    code = type(error).__name__
    response = error.response
    try:
        body = json.loads(response.text()) if response is not None else None
    except (ValueError, TypeError):
        body = None
    if isinstance(body, dict):
        codes = body.get("error_codes")
        if isinstance(codes, list) and codes:
            code = f"AADSTS{codes[0]}"
        elif isinstance(body.get("error"), str):
            code = body["error"]
    return ArmError(
        status=response.status_code if response is not None else None,
        code=code,
        message=error.message,
        sign_in=True,
    )


def _details(body: ODataV4Format) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for detail in body.details or []:
        found.append((detail.code or "", detail.message or ""))
        found.extend(_details(detail))
    return found


def capacity_failure(error: ArmError) -> CapacityFailure | None:
    """Which offering-ruling failure this is, if any: by code, and for `OperationNotAllowed` by the quota named."""
    found: list[CapacityFailure] = []
    for code, message in error.codes():
        if code == OPERATION_NOT_ALLOWED:
            found.extend(failure for phrase, failure in _QUOTA_PHRASES if phrase in message)
        found.extend(failure for failure in _CAPACITY_CODES if code == failure.value)
    order = list(CapacityFailure)
    return min(found, key=order.index, default=None)


def quota_limit_is_zero(error: ArmError) -> bool:
    """Whether a quota error says the limit is 0 (no quota for the family at all, which lasts longer)."""
    return any(ZERO_LIMIT_PHRASE in message for _, message in error.codes())


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; a default when unusable."""
    if value:
        text = value.strip()
        try:
            return max(0.0, float(text))
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return DEFAULT_RETRY_AFTER_SECONDS
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return DEFAULT_RETRY_AFTER_SECONDS


def classify(
    error: AzureError | ArmError,
    offering: Offering | None = None,
    redact: Collection[str] = (),
) -> CloudError:
    """The `core.errors` kind of an Azure failure.

    Capacity and quota failures become `InsufficientCapacityError` / `QuotaExceededError` for `offering` when
    one is given (a launch); a credential that cannot sign in, or a token or identity ARM refuses, is a
    `CredentialError`; then 429 is `ThrottledError` with the Retry-After delay, 5xx and connection
    failures are transient, 404 is not-found, 409 and 412 are conflicts, and other 4xx are invalid requests.
    A long-running operation that failed (status 200) is transient unless its code says the request was bad.
    Every string in `redact` is removed from the message (secrets must never reach an error).
    """
    details = error if isinstance(error, ArmError) else arm_error(error)
    message = _message(details, redact)
    code = details.code
    failure = capacity_failure(details) if offering is not None else None
    if failure is not None and offering is not None:
        scope = failure.quota_scope
        if scope is not None:
            return QuotaExceededError(message, offering, scope=scope, code=OPERATION_NOT_ALLOWED)
        # The matched code, which may have come from a detail of a wrapping error.
        return InsufficientCapacityError(message, offering, code=failure.value)
    if details.sign_in or code in CREDENTIAL_CODES:
        return CredentialError(message, code=code)
    status = details.status
    if status is None or code in TRANSIENT_CODES:
        return TransientError(message, code=code)
    if status == 429:
        return ThrottledError(message, retry_after_seconds(details.retry_after), code=code)
    if status >= 500 or status == 408:
        return TransientError(message, code=code)
    if status == 404:
        return NotFoundError(message, code=code)
    if status in (409, 412):
        return ConflictError(message, code=code)
    if status >= 400 or code in INVALID_CODES:
        return InvalidError(message, code=code)
    return TransientError(message, code=code)


def _message(details: ArmError, redact: Collection[str]) -> str:
    text = f"{details.code}: {details.message}" if details.code else details.message
    for secret in redact:
        if secret:
            text = text.replace(secret, REDACTED)
    return text[:MAX_MESSAGE_LENGTH]
