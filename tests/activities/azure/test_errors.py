"""Azure failures classified by ARM error code (then status), as the SDK raises them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import CredentialUnavailableError

from activities.azure.errors import (
    DEFAULT_RETRY_AFTER_SECONDS,
    REDACTED,
    CapacityFailure,
    arm_error,
    capacity_failure,
    classify,
    quota_limit_is_zero,
    retry_after_seconds,
)
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

OFFERING = Offering("Standard_D4s_v3", "eastus-1", "on-demand")
FAMILY_QUOTA = (
    "Operation could not be completed as it results in exceeding approved standardDSv3Family Cores quota. "
    "Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 50, "
    "Current Usage: 48, Additional Required: 4"
)
ZERO_FAMILY_QUOTA = FAMILY_QUOTA.replace("Current Limit: 50", "Current Limit: 0")
SPOT_QUOTA = "Operation could not be completed as it results in exceeding approved LowPriorityCores quota."
REGIONAL_QUOTA = (
    "Operation could not be completed as it results in exceeding approved Total Regional Cores quota."
)


class Response:
    """The parts of an SDK HTTP response that `HttpResponseError` reads."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.reason = "reason"
        self.headers = headers or {}
        self._text = json.dumps(body) if body is not None else ""

    def text(self, encoding: str | None = None) -> str:
        return self._text


def failure(
    status: int,
    code: str,
    message: str = "",
    headers: dict[str, str] | None = None,
    details: list[dict[str, str]] | None = None,
    kind: type[HttpResponseError] = HttpResponseError,
) -> HttpResponseError:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return kind(response=Response(status, {"error": body}, headers))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (failure(409, "SkuNotAvailable", kind=ResourceExistsError), CapacityFailure.SKU_NOT_AVAILABLE),
        (failure(200, "AllocationFailed"), CapacityFailure.ALLOCATION_FAILED),
        (failure(200, "ZonalAllocationFailed"), CapacityFailure.ZONAL_ALLOCATION_FAILED),
        (failure(200, "OverconstrainedAllocationRequest"), CapacityFailure.OVERCONSTRAINED_ALLOCATION),
        (
            failure(200, "OverconstrainedZonalAllocationRequest"),
            CapacityFailure.OVERCONSTRAINED_ZONAL_ALLOCATION,
        ),
    ],
)
def test_capacity_codes_rule_out_the_offering(error: HttpResponseError, expected: CapacityFailure) -> None:
    classified = classify(error, OFFERING)

    assert isinstance(classified, InsufficientCapacityError)
    assert classified.offering == OFFERING
    assert classified.code == expected.value
    assert capacity_failure(arm_error(error)) is expected


@pytest.mark.parametrize(
    ("message", "scope", "expected"),
    [
        (SPOT_QUOTA, "spot", CapacityFailure.SPOT_QUOTA),
        (FAMILY_QUOTA, "family", CapacityFailure.FAMILY_QUOTA),
        (REGIONAL_QUOTA, "regional", CapacityFailure.REGIONAL_QUOTA),
    ],
)
def test_quota_errors_say_which_quota_ran_out(message: str, scope: str, expected: CapacityFailure) -> None:
    error = failure(409, "OperationNotAllowed", message, kind=ResourceExistsError)

    classified = classify(error, OFFERING)

    assert isinstance(classified, QuotaExceededError)
    assert (classified.scope, classified.offering, classified.code) == (
        scope,
        OFFERING,
        "OperationNotAllowed",
    )
    assert capacity_failure(arm_error(error)) is expected


def test_spot_quota_is_matched_before_family_quota() -> None:
    error = failure(409, "OperationNotAllowed", f"{FAMILY_QUOTA} {SPOT_QUOTA}")

    assert capacity_failure(arm_error(error)) is CapacityFailure.SPOT_QUOTA


def test_the_quota_phrase_counts_only_with_the_quota_code() -> None:
    error = failure(400, "InvalidParameter", f"mentions {FAMILY_QUOTA}")

    assert capacity_failure(arm_error(error)) is None
    assert isinstance(classify(error, OFFERING), InvalidError)


def test_a_code_wrapped_in_a_detail_is_found() -> None:
    error = failure(
        200, "Conflict", "wrapped", details=[{"code": "ZonalAllocationFailed", "message": "zone 1"}]
    )

    classified = classify(error, OFFERING)

    assert capacity_failure(arm_error(error)) is CapacityFailure.ZONAL_ALLOCATION_FAILED
    assert isinstance(classified, InsufficientCapacityError)
    assert classified.code == "ZonalAllocationFailed"


def test_a_zero_quota_limit_is_recognised() -> None:
    assert quota_limit_is_zero(arm_error(failure(409, "OperationNotAllowed", ZERO_FAMILY_QUOTA)))
    assert not quota_limit_is_zero(arm_error(failure(409, "OperationNotAllowed", FAMILY_QUOTA)))


def test_capacity_codes_without_a_launch_are_classified_by_status() -> None:
    assert isinstance(classify(failure(409, "SkuNotAvailable", kind=ResourceExistsError)), ConflictError)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (failure(404, "ResourceNotFound", kind=ResourceNotFoundError), NotFoundError),
        (failure(409, "PropertyChangeNotAllowed", kind=ResourceExistsError), ConflictError),
        (failure(412, "PreconditionFailed"), ConflictError),
        (failure(400, "InvalidParameter", "bad vmSize"), InvalidError),
        (failure(403, "RequestDisallowedByPolicy", "denied by an Azure Policy assignment"), InvalidError),
        (failure(400, "NicReservedForAnotherVm"), TransientError),
        (failure(500, "InternalServerError"), TransientError),
        (failure(503, "ServiceUnavailable"), TransientError),
        (failure(200, "InternalExecutionError"), TransientError),
        (failure(200, "InvalidParameter"), InvalidError),
        (ServiceRequestError("connection refused"), TransientError),
        (ServiceResponseError("connection reset"), TransientError),
    ],
)
def test_other_failures_by_status_and_code(error: AzureError, kind: type[CloudError]) -> None:
    classified = classify(error, OFFERING)

    assert type(classified) is kind


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "ExpiredAuthenticationToken"),
        (401, "InvalidAuthenticationTokenTenant"),
        (403, "AuthorizationFailed"),
        (403, "LinkedAuthorizationFailed"),
    ],
)
def test_a_token_or_an_identity_arm_refuses_is_a_credential_error(status: int, code: str) -> None:
    classified = classify(
        failure(status, code, "The client 'c1' with object id 'o1' does not have ..."), OFFERING
    )

    assert type(classified) is CredentialError and classified.code == code


def test_a_credential_that_cannot_sign_in_is_a_credential_error_coded_by_entra_id() -> None:
    entra = {
        "error": "invalid_client",
        "error_description": "AADSTS7000222: The provided client secret keys for app 'c1' are expired.",
        "error_codes": [7000222],
    }
    expired = ClientAuthenticationError(message="expired", response=Response(401, entra))  # type: ignore[arg-type]
    no_codes = ClientAuthenticationError(
        message="unauthorized",
        response=Response(400, {"error": "unauthorized_client"}),  # type: ignore[arg-type]
    )
    no_answer = CredentialUnavailableError(message="no managed identity endpoint")

    assert [(type(c), c.code) for c in map(classify, (expired, no_codes, no_answer))] == [
        (CredentialError, "AADSTS7000222"),
        (CredentialError, "unauthorized_client"),
        (CredentialError, "CredentialUnavailableError"),
    ]
    assert str(classify(expired)) == "AADSTS7000222: expired"


def test_throttling_carries_the_retry_after_header() -> None:
    error = failure(429, "TooManyRequests", "slow down", headers={"Retry-After": "7"})

    classified = classify(error, OFFERING)

    assert isinstance(classified, ThrottledError)
    assert classified.retry_after_seconds == 7.0
    assert classified.code == "TooManyRequests"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("12", 12.0),
        ("0.5", 0.5),
        ("Wed, 01 Jan 2031 00:00:30 GMT", 30.0),
        ("Wed, 01 Jan 2031 00:00:00 GMT", 0.0),
        ("soon", DEFAULT_RETRY_AFTER_SECONDS),
        (None, DEFAULT_RETRY_AFTER_SECONDS),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str | None, seconds: float) -> None:
    now = datetime(2031, 1, 1, tzinfo=UTC)

    assert retry_after_seconds(header, now) == seconds


def test_the_message_keeps_the_code_and_drops_secrets() -> None:
    error = failure(400, "InvalidParameter", "customData 'c2VjcmV0' is too long")

    classified = classify(error, OFFERING, redact=("c2VjcmV0", ""))

    assert str(classified) == f"InvalidParameter: customData '{REDACTED}' is too long"
