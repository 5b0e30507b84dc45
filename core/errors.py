"""The small set of failures every external system is mapped to, so workflows decide by kind, not by text.

Karpenter's taxonomy: one class and one predicate per kind. Capacity and quota errors carry the offering
they rule out, so the caller can mark it unavailable and move on to the next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorKind(StrEnum):
    """Error kinds as they cross process boundaries (Temporal failure types, HTTP error bodies)."""

    NOT_FOUND = "NotFound"
    CONFLICT = "Conflict"
    TRANSIENT = "Transient"
    INVALID = "Invalid"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    QUOTA_EXCEEDED = "QuotaExceeded"
    THROTTLED = "Throttled"
    PDB_VIOLATION = "PDBViolation"
    NODECLAIM_DELETED = "NodeClaimDeleted"
    """A launch found its NodeClaim gone or being deleted, and made nothing."""
    CREDENTIAL = "Credential"
    """The cloud refused the worker's identity (`CredentialError`)."""


OFFERING_ERROR_KINDS = (ErrorKind.INSUFFICIENT_CAPACITY, ErrorKind.QUOTA_EXCEEDED)
"""After these, the lifecycle marks the offering unavailable and tries the next one."""


class CloudError(Exception):
    """Base of every classified failure; `code` is the provider's own error code when there is one."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class NotFoundError(CloudError):
    """The object does not exist (for a delete, that counts as done)."""


class ConflictError(CloudError):
    """The object changed or exists in another form; re-read and retry."""


class TransientError(CloudError):
    """A failure that may pass on its own (5xx, timeouts, lost responses)."""


class InvalidError(CloudError):
    """The request itself is wrong; retrying will not help."""


class CredentialError(CloudError):
    """The cloud refused the worker's identity, not the request: its credential could not sign in (an expired or
    revoked secret, a federated token Entra ID does not trust, a token file it cannot read), the cloud refused its
    token, or the identity lacks the role the operation needs. Retried while it lasts, with the reason shown where
    a user looks: an administrator mends it (a new secret, a federated credential, a role assignment) without a
    restart, and no offering is to blame."""


@dataclass(frozen=True, slots=True)
class Offering:
    """An instance type in a zone with a capacity type: what capacity and quota errors rule out."""

    instance_type: str
    zone: str
    capacity_type: str


class InsufficientCapacityError(CloudError):
    """The cloud has no capacity for this offering now (SkuNotAvailable, AllocationFailed, ...)."""

    def __init__(self, message: str, offering: Offering, code: str = "") -> None:
        super().__init__(message, code)
        self.offering = offering


class QuotaExceededError(CloudError):
    """The subscription's quota (family, regional or spot cores) does not allow this offering."""

    def __init__(self, message: str, offering: Offering, scope: str = "family", code: str = "") -> None:
        super().__init__(message, code)
        self.offering = offering
        self.scope = scope


class ThrottledError(CloudError):
    """Too many requests; retry after the given number of seconds."""

    def __init__(self, message: str, retry_after_seconds: float, code: str = "") -> None:
        super().__init__(message, code)
        self.retry_after_seconds = retry_after_seconds


class PDBViolationError(CloudError):
    """An eviction a PodDisruptionBudget does not allow now (HTTP 429 from the eviction API)."""


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, NotFoundError)


def is_insufficient_capacity(error: BaseException) -> bool:
    return isinstance(error, InsufficientCapacityError)


def is_quota_exceeded(error: BaseException) -> bool:
    return isinstance(error, QuotaExceededError)


def is_throttled(error: BaseException) -> bool:
    return isinstance(error, ThrottledError)
