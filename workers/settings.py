"""Process settings from the environment (`NODEWRIGHT_*`), shared by the worker, the controller and the dev server.

Every process reads the same variables, so one `export` configures the whole stack. A bad value stops the
process with a message naming the variable to fix, not a pydantic traceback.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "NODEWRIGHT_"


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"

    @classmethod
    def _missing_(cls, value: object) -> LogLevel | None:
        # Accept `debug` as well as `DEBUG`, as Python's logging does.
        return cls.__members__.get(value.upper()) if isinstance(value, str) else None


class SettingsError(ValueError):
    """The environment holds a value nodewright cannot use; the message names each variable and the rule."""


def env_var(field: str) -> str:
    """The environment variable that sets a `Settings` field."""
    return f"{ENV_PREFIX}{field.upper()}"


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts in brackets) as a host and a port; ValueError says what is wrong."""
    if "://" in address:
        raise ValueError("expected host:port without a scheme, e.g. localhost:7233")
    host, colon, port_text = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError("expected host:port with a port from 1 to 65535, e.g. localhost:7233")
    return host, int(port_text)


class Settings(BaseSettings):
    """Where Temporal and the Kubernetes API server are, and the provisioner's timings; see README for each
    variable."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True)

    temporal_address: str = "localhost:7233"
    temporal_namespace: str = Field(default="default", min_length=1)
    task_queue: str = Field(default="nodewright", min_length=1)
    cluster_name: str = Field(default="nodewright-demo", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    kubeconfig: str | None = None
    """The kubeconfig to use; when unset, `KUBECONFIG`, then `~/.kube/config`, or in a pod its service account."""
    kube_context: str | None = None
    """A context of the kubeconfig other than its current one."""
    kube_qps: float = Field(default=200.0, gt=0)
    """Client-side rate limit of Kubernetes API requests per second (a token bucket of `kube_burst`); Karpenter's
    defaults (`KUBE_CLIENT_QPS`, `KUBE_CLIENT_BURST`)."""
    kube_burst: int = Field(default=300, ge=1)
    batch_idle_seconds: float = Field(default=1.0, gt=0)
    batch_max_seconds: float = Field(default=10.0, gt=0)
    registration_ttl_seconds: float = Field(default=900.0, gt=0)
    region: str = Field(default="eastus", pattern=r"^[a-z0-9]+$")
    log_level: LogLevel = LogLevel.INFO
    disruption_poll_seconds: float = Field(default=10.0, gt=0)
    """Between passes of the disruption loop (Karpenter polls every 10 s)."""
    disruption_validation_seconds: float = Field(default=15.0, ge=0)
    """How long a consolidation decision must hold before it executes (Karpenter's 15 s)."""
    catalog_refresh_seconds: float = Field(default=12 * 3600.0, gt=0)
    """Between refreshes of the instance types and prices from the Resource SKUs and Retail Prices APIs."""
    garbage_collection_seconds: float = Field(default=120.0, gt=0)
    """Between garbage collections of VMs and NICs without a NodeClaim (and NodeClaims without a VM)."""
    metrics_port: int = Field(default=8080, ge=0, le=65534)
    """Where the worker serves `/metrics` (Karpenter's 8080); the controller serves on the next port. 0: neither."""

    @field_validator("temporal_address")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        split_address(value)
        return value

    @model_validator(mode="after")
    def _batch_window(self) -> Self:
        if self.batch_max_seconds < self.batch_idle_seconds:
            raise ValueError(
                f"{env_var('batch_max_seconds')}={self.batch_max_seconds} is shorter than "
                f"{env_var('batch_idle_seconds')}={self.batch_idle_seconds}; a batch closes after at most "
                "the maximum, so it must be at least the idle time"
            )
        return self

    @property
    def batch_idle(self) -> timedelta:
        return timedelta(seconds=self.batch_idle_seconds)

    @property
    def batch_max(self) -> timedelta:
        return timedelta(seconds=self.batch_max_seconds)

    @property
    def controller_metrics_port(self) -> int:
        """The controller's `/metrics` port: the worker's plus one (0 when metrics are off)."""
        return self.metrics_port + 1 if self.metrics_port else 0

    @property
    def registration_ttl(self) -> timedelta:
        return timedelta(seconds=self.registration_ttl_seconds)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with `overrides` (e.g. command-line flags) taking precedence.

    Raises SettingsError listing every bad variable with its value and the rule it breaks.
    """
    try:
        return Settings(**overrides)
    except ValidationError as error:
        problems = []
        for detail in error.errors(include_url=False):
            message = detail["msg"].removeprefix("Value error, ")
            if detail["loc"]:
                problems.append(f"{env_var(str(detail['loc'][0]))}={detail['input']!r}: {message}")
            else:
                problems.append(message)
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems)) from None
