"""How classified failures cross into Temporal: as `ApplicationError`s whose type is the error kind.

Capacity, quota and invalid-request errors are non-retryable (retrying the same offering cannot help; the
workflow moves to the next one); so is a conflict over a resource another cluster owns (`NotOwned`: it stays
theirs however often we ask). Throttling retries after the cloud's Retry-After; everything else, a refused
credential included (`Credential`: an administrator mends it while the activity retries), is left to the
activity's retry policy.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from core.errors import (
    CloudError,
    ConflictError,
    CredentialError,
    ErrorKind,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    QuotaExceededError,
    ThrottledError,
)
from core.messages import LaunchFailure, OfferingChoice

NOT_OWNED = "NotOwned"
"""The code of a conflict over a resource another cluster owns (the Azure provider's delete and adopt)."""


def launch_failure(error: CloudError, offering: OfferingChoice) -> ApplicationError:
    """A launch error as Temporal should see it; capacity and quota failures carry the offering they rule out."""
    if isinstance(error, InsufficientCapacityError | QuotaExceededError):
        kind = (
            ErrorKind.INSUFFICIENT_CAPACITY
            if isinstance(error, InsufficientCapacityError)
            else ErrorKind.QUOTA_EXCEEDED
        )
        failure = LaunchFailure(
            instance_type=offering.instance_type,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            kind=kind,
            message=str(error),
        )
        return ApplicationError(str(error), failure, type=kind, non_retryable=True)
    return as_application_error(error)


def as_application_error(error: CloudError) -> ApplicationError:
    """Any classified error as an `ApplicationError` with the retry behaviour its kind calls for."""
    if isinstance(error, ThrottledError):
        return ApplicationError(
            str(error),
            type=ErrorKind.THROTTLED,
            next_retry_delay=timedelta(seconds=max(1.0, error.retry_after_seconds)),
        )
    if isinstance(error, CredentialError):
        return ApplicationError(str(error), type=ErrorKind.CREDENTIAL)
    if isinstance(error, InvalidError):
        return ApplicationError(str(error), type=ErrorKind.INVALID, non_retryable=True)
    if isinstance(error, NotFoundError):
        return ApplicationError(str(error), type=ErrorKind.NOT_FOUND, non_retryable=True)
    if isinstance(error, ConflictError) and error.code == NOT_OWNED:
        return ApplicationError(str(error), type=ErrorKind.CONFLICT, non_retryable=True)
    return ApplicationError(str(error), type=type(error).__name__)
