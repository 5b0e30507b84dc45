"""Process settings from the environment (`NODEWRIGHT_*`), shared by the worker, the controller and the dev server.

Every process reads the same variables, so one `export` configures the whole stack. A bad value stops the
process with a message naming the variable to fix, not a pydantic traceback; a secret's value is never
printed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.bootstrap_token_messages import ROTATION_PERIOD_SECONDS
from core.features import FeatureGates, MinValuesPolicy, parse_feature_gates
from core.repack_defaults import (
    DEFAULT_DEADLINE_SECONDS,
    DEFAULT_MAX_PODS_MOVED,
    DEFAULT_MIN_SAVINGS_MICROS,
    DEFAULT_MIN_SAVINGS_PERCENT,
)

ENV_PREFIX = "NODEWRIGHT_"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
"""Where a pod finds its own namespace (the service account's mount)."""
SECRET_FIELDS = frozenset({"temporal_api_key"})
"""Fields whose values never appear in a message."""
TLS_FILE_FIELDS = ("temporal_tls_cert_file", "temporal_tls_key_file", "temporal_tls_ca_file")


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"

    @classmethod
    def _missing_(cls, value: object) -> LogLevel | None:
        # Accept `debug` as well as `DEBUG`, as Python's logging does.
        return cls.__members__.get(value.upper()) if isinstance(value, str) else None


class LogFormat(StrEnum):
    """How a process writes its log: Karpenter's console-like lines, or one JSON object per line (as zap's
    production encoder writes them) for a log pipeline."""

    TEXT = "text"
    JSON = "json"


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


def pod_namespace(
    environ: dict[str, str] | None = None, service_account_file: Path = SERVICE_ACCOUNT_NAMESPACE
) -> str:
    """The namespace this process runs in: `POD_NAMESPACE` (the downward API), else the in-pod service
    account's namespace file, else `default`."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        return service_account_file.read_text().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True, slots=True)
class TemporalConnection:
    """How to reach Temporal: the address and namespace, and for a secured server the TLS material (read from
    its files when the process starts) and the Temporal Cloud API key. `tls` without any material is TLS with
    the system's root certificates."""

    address: str
    namespace: str = "default"
    tls: bool = False
    server_root_ca: bytes | None = None
    server_name: str | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)


class Settings(BaseSettings):
    """Where Temporal and the Kubernetes API server are, and the provisioner's timings; see docs/operations.md for each
    variable."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, populate_by_name=True)

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
    """A launched NodeClaim whose Node has not registered this long after the launch is deleted (Karpenter's
    15 min)."""
    launch_timeout_seconds: float = Field(default=300.0, gt=0)
    """A NodeClaim not launched this long after its lifecycle started is deleted (Karpenter's `LaunchTimeout`,
    5 min)."""
    region: str = Field(default="eastus", pattern=r"^[a-z0-9]+$")
    log_level: LogLevel = LogLevel.INFO
    disruption_poll_seconds: float = Field(default=10.0, gt=0)
    """Between passes of the disruption loop (Karpenter polls every 10 s)."""
    disruption_validation_seconds: float = Field(default=15.0, ge=0)
    """How long a consolidation decision must hold before it executes (Karpenter's 15 s)."""
    feature_gates: str = Field(
        default="", validation_alias=AliasChoices("NODEWRIGHT_FEATURE_GATES", "FEATURE_GATES")
    )
    """Karpenter's feature gates, e.g. `SpotToSpotConsolidation=true,NodeRepair=true` (`FEATURE_GATES`, as
    Karpenter reads it, or `NODEWRIGHT_FEATURE_GATES`); unnamed gates keep Karpenter v1.14's defaults."""
    min_values_policy: MinValuesPolicy = Field(
        default=MinValuesPolicy.STRICT,
        validation_alias=AliasChoices("NODEWRIGHT_MIN_VALUES_POLICY", "MIN_VALUES_POLICY"),
    )
    """Karpenter's MIN_VALUES_POLICY: Strict, or BestEffort to relax minValues rather than not launch."""
    repack_enabled: bool = True
    """The repack after Karpenter's consolidation (`core.disruption.repack`), and the steered drain of every
    consolidation command; false: Karpenter's alone, drained as Karpenter drains."""
    repack_min_savings_per_hour: float = Field(default=DEFAULT_MIN_SAVINGS_MICROS / 1_000_000, ge=0)
    """A repack command saves at least this many dollars per hour."""
    repack_min_savings_percent: float = Field(default=DEFAULT_MIN_SAVINGS_PERCENT, ge=0, le=100)
    """And at least this share (in percent) of the price of the nodes it retires."""
    repack_max_pods_moved: int = Field(default=DEFAULT_MAX_PODS_MOVED, ge=1)
    """A repack command evicts at most this many pods."""
    repack_deadline_seconds: float = Field(default=DEFAULT_DEADLINE_SECONDS, gt=0)
    """How long one plan's repack may search."""
    repair_not_ready_seconds: float = Field(default=600.0, ge=0)
    """How long a Node may be Ready=False or Unknown before node repair replaces it (the AKS provider's 10 min)."""
    catalog_refresh_seconds: float = Field(default=12 * 3600.0, gt=0)
    """Between refreshes of the instance types and prices from the Resource SKUs and Retail Prices APIs."""
    garbage_collection_seconds: float = Field(default=120.0, gt=0)
    """Between garbage collections of VMs and NICs without a NodeClaim (and NodeClaims without a VM)."""
    bootstrap_token_rotation_seconds: float = Field(default=ROTATION_PERIOD_SECONDS, ge=0)
    """Between rotations of the node bootstrap token (12 hours: each token is valid for two periods, kubeadm's 24
    hours); 0 turns rotation off, and launches join with the configured token alone."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """Where this process serves `/metrics` (Karpenter's 8080); 0: not at all."""
    health_probe_port: int = Field(default=8081, ge=0, le=65535)
    """Where this process serves `/healthz` and `/readyz` (Karpenter's 8081); 0: not at all."""
    log_format: LogFormat = LogFormat.TEXT
    temporal_tls: bool = False
    """Connect to Temporal over TLS, trusting the system's CAs; implied by any other `temporal_tls_*` setting
    and by `temporal_api_key`."""
    temporal_tls_cert_file: str | None = None
    """The client certificate for mTLS (PEM); with `temporal_tls_key_file`."""
    temporal_tls_key_file: str | None = None
    temporal_tls_ca_file: str | None = None
    """The CA that signs the server's certificate, when it is not one the system trusts."""
    temporal_tls_server_name: str | None = None
    """The name to expect on the server's certificate (and to send as SNI), when it is not the address's host."""
    temporal_api_key: SecretStr | None = None
    """A Temporal Cloud API key; implies TLS."""
    leader_election: bool = True
    """Whether the controller runs only while it holds the Lease (`false` for debugging, as Karpenter's
    `DISABLE_LEADER_ELECTION`)."""
    leader_election_name: str = Field(
        default="nodewright-leader-election", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253
    )
    leader_election_namespace: str = Field(
        default_factory=pod_namespace, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63
    )
    leader_election_lease_seconds: int = Field(default=10, ge=1)
    """How long a Lease not seen renewed stays its holder's (client-go's leaseDuration; Karpenter's 15)."""
    leader_election_renew_seconds: float = Field(default=8.0, gt=0)
    """How long the leader keeps trying to renew before it gives up leading (renewDeadline; Karpenter's 10)."""
    leader_election_retry_seconds: float = Field(default=2.0, gt=0)
    """Between tries to acquire or renew (retryPeriod; Karpenter's 2)."""
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    """How long a stopping worker lets its running activities finish before it cancels them (Temporal then
    retries them on another worker)."""
    worker_workflow_tasks: int = Field(default=16, ge=2)
    """How many workflow tasks one worker process holds at once (`workers.worker.WORKFLOW_TASKS`)."""
    worker_activities: int = Field(default=256, ge=1)
    """How many activities one worker process runs at once (`workers.worker.ACTIVITY_SLOTS`): launches waiting on
    their VMs' creates, drains, plans."""
    worker_informer: bool = True
    """Whether a worker's plans read what watches keep (`activities.informer`) instead of listing every object."""
    worker_lifecycle_sandbox: bool = False
    """Whether the NodeClaim lifecycle runs in the Temporal SDK's workflow sandbox (`workflows.nodeclaim`)."""

    @field_validator("feature_gates")
    @classmethod
    def _known_gates(cls, value: str) -> str:
        parse_feature_gates(value)
        return value

    @property
    def gates(self) -> FeatureGates:
        """The feature gates in force: Karpenter v1.14's defaults with `feature_gates` applied."""
        return parse_feature_gates(self.feature_gates)

    @field_validator("bootstrap_token_rotation_seconds")
    @classmethod
    def _rotation_interval(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("0 (off) or at least 1 (a Temporal Schedule's shortest interval)")
        return value

    @field_validator("temporal_address")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        split_address(value)
        return value

    @field_validator(*TLS_FILE_FIELDS, "temporal_tls_server_name", "temporal_api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # A chart sets every variable and leaves the unused ones empty.
        return None if value == "" else value

    @field_validator(*TLS_FILE_FIELDS)
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Path(value).read_bytes()
            except OSError as error:
                raise ValueError(f"cannot read {value}: {error.strerror or error}") from None
        return value

    @model_validator(mode="after")
    def _client_pair(self) -> Self:
        if (self.temporal_tls_cert_file is None) != (self.temporal_tls_key_file is None):
            raise ValueError(
                f"{env_var('temporal_tls_cert_file')} and {env_var('temporal_tls_key_file')} go together "
                "(the client certificate and its key, for mTLS): set both or neither"
            )
        return self

    @model_validator(mode="after")
    def _leader_election_timings(self) -> Self:
        lease, renew, retry = (
            self.leader_election_lease_seconds,
            self.leader_election_renew_seconds,
            self.leader_election_retry_seconds,
        )
        if not retry < renew < lease:
            raise ValueError(
                f"{env_var('leader_election_retry_seconds')}={retry:g} < "
                f"{env_var('leader_election_renew_seconds')}={renew:g} < "
                f"{env_var('leader_election_lease_seconds')}={lease} must hold: a leader retries its renewal "
                "within the deadline, and gives up leading before the others may take the Lease"
            )
        return self

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
    def registration_ttl(self) -> timedelta:
        return timedelta(seconds=self.registration_ttl_seconds)

    @property
    def launch_timeout(self) -> timedelta:
        return timedelta(seconds=self.launch_timeout_seconds)

    @property
    def shutdown_grace(self) -> timedelta:
        return timedelta(seconds=self.shutdown_grace_seconds)

    def temporal_connection(self) -> TemporalConnection:
        """Where Temporal is and how to authenticate, with the TLS files read now; `SettingsError` naming the
        variable when a file cannot be read."""
        files: dict[str, bytes | None] = {}
        for name in TLS_FILE_FIELDS:
            path = getattr(self, name)
            try:
                files[name] = None if path is None else Path(path).read_bytes()
            except OSError as error:
                raise SettingsError(f"{env_var(name)}={path!r}: cannot read it: {error.strerror}") from None
        api_key = self.temporal_api_key.get_secret_value() if self.temporal_api_key else None
        return TemporalConnection(
            address=self.temporal_address,
            namespace=self.temporal_namespace,
            tls=self.temporal_tls
            or any(value is not None for value in files.values())
            or self.temporal_tls_server_name is not None
            or api_key is not None,
            server_root_ca=files["temporal_tls_ca_file"],
            server_name=self.temporal_tls_server_name,
            client_cert=files["temporal_tls_cert_file"],
            client_key=files["temporal_tls_key_file"],
            api_key=api_key,
        )


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
                name = str(detail["loc"][0])
                value = "(hidden)" if name in SECRET_FIELDS else repr(detail["input"])
                variable = name if name.isupper() else env_var(name)  # an alias names its variable itself
                problems.append(f"{variable}={value}: {message}")
            else:
                problems.append(message)
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems)) from None
