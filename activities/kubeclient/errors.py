"""The API server's failures as the typed errors of `core.errors`, and `ClusterConfigError` for a cluster that
cannot be used as configured.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from core.errors import CloudError, ConflictError, InvalidError, NotFoundError, ThrottledError, TransientError


class ClusterConfigError(Exception):
    """The cluster cannot be used as configured: no kubeconfig, an unknown context, an unreachable API server or
    refused credentials. The message is one line that names the file, the context or the server."""


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def status_body(error: ApiException) -> dict[str, Any]:
    """The `Status` object of an error response (empty when the body is not one)."""
    try:
        body = json.loads(error.body) if error.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(error: ApiException, status: Mapping[str, Any]) -> float:
    header = str((error.headers or {}).get("Retry-After") or "")
    with contextlib.suppress(ValueError):
        return float(header)
    seconds = (status.get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) else 1.0


def status_error(code: int, status: Mapping[str, Any], retry_after: float = 1.0) -> CloudError:
    """The typed error for an API status code and its `Status` object; the message is the API server's (for
    an invalid object it names the field)."""
    message = str(status.get("message") or f"HTTP {code} {status.get('reason') or ''}".strip())
    reason = str(status.get("reason") or "")
    if code == 404:
        return NotFoundError(message, code=reason or "NotFound")
    if code == 409:
        return ConflictError(message, code=reason or "Conflict")
    if code == 410:
        return ConflictError(message, code="Expired")
    if code == 429:
        causes = (status.get("details") or {}).get("causes") or ()
        budgets = [c for c in causes if isinstance(c, dict) and c.get("reason") == "DisruptionBudget"]
        if budgets:
            reason = "DisruptionBudget"  # the eviction API's answer when a PodDisruptionBudget forbids it now
            # Which budget, and why: "The disruption budget web needs 2 healthy pods and has 2 currently".
            details = "; ".join(str(cause.get("message")) for cause in budgets if cause.get("message"))
            message = f"{message.rstrip('.')}: {details}" if details else message
        return ThrottledError(message, retry_after, code=reason or "TooManyRequests")
    if code >= 500 or code == 0:
        return TransientError(message, code=reason or "InternalError")
    return InvalidError(message, code=reason or "Invalid")


def api_error(error: ApiException) -> CloudError:
    """The typed error for an `ApiException` (404 NotFound, 409 Conflict, 400/422 Invalid, 429 Throttled with its
    Retry-After, 5xx Transient; 401/403 are Invalid, as retrying will not help)."""
    status = status_body(error)
    if not status and error.reason:
        status = {"message": one_line(error.reason)}
    return status_error(int(error.status or 0), status, _retry_after(error, status))


def connection_error(what: str, error: BaseException) -> TransientError:
    return TransientError(f"{what}: {root_cause(error)}", code="ConnectionError")


def root_cause(error: BaseException) -> str:
    """The root cause of a connection failure in a few words ("[Errno 111] Connection refused")."""
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    text = one_line(error) or type(error).__name__
    return text.rpartition("Failed to establish a new connection: ")[2]
