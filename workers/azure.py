"""The worker's Azure: its settings from the environment, its credential, and the cloud provider built on them.

Variables (see docs/operations.md): `NODEWRIGHT_AZURE_SUBSCRIPTION_ID`, `NODEWRIGHT_AZURE_RESOURCE_GROUP` (the node
resource group), `NODEWRIGHT_AZURE_LOCATION` (else `NODEWRIGHT_REGION`), `NODEWRIGHT_CLUSTER_NAME`,
`NODEWRIGHT_AZURE_SUBNET_ID`, `NODEWRIGHT_KUBERNETES_VERSION`, `NODEWRIGHT_NODE_IMAGE_VERSION`,
`NODEWRIGHT_SSH_PUBLIC_KEY`, `NODEWRIGHT_KUBELET_IDENTITY_ID` (optional), `NODEWRIGHT_CLUSTER_ENDPOINT`,
`NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET`, `NODEWRIGHT_AZURE_POLL_SECONDS` and `NODEWRIGHT_AZURE_CREATE_WAIT_SECONDS`
(optional), for Windows nodes `NODEWRIGHT_WINDOWS_ADMIN_SECRET`, `NODEWRIGHT_WINDOWS_LICENSE_TYPE` and
`NODEWRIGHT_IMAGE_GALLERY_SUBSCRIPTION_ID` (optional), `NODEWRIGHT_AZURE_CLOUD` (the cloud: `AzurePublicCloud`,
`AzureUSGovernment`, `AzureChinaCloud`, as the AKS provider's `ARM_CLOUD` names them), and
`NODEWRIGHT_ARM_ENDPOINT` / `NODEWRIGHT_ARM_CA_FILE` to use an ARM emulator instead of the cloud's ARM (and its
Entra ID instead of the cloud's authority).
`NODEWRIGHT_AZURE_CREDENTIAL` says what signs in (`activities.azure.credentials`): `workloadIdentity` (the default
on Azure: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID` and `AZURE_FEDERATED_TOKEN_FILE` must be set), `servicePrincipal`
(`AZURE_CLIENT_ID`, `AZURE_TENANT_ID` and `AZURE_CLIENT_SECRET` or `AZURE_CLIENT_CERTIFICATE_PATH`) or
`managedIdentity` (optionally `AZURE_CLIENT_ID`); against an emulator it defaults to a static token. Whatever is
missing or invalid, a file named that does not exist included, is reported in one message that names every
variable (`AzureSettingsError`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver
from azure.core.credentials_async import AsyncTokenCredential

from activities.azure import AzureCloudProvider, AzureSettings, AzureSettingsError
from activities.azure.clients import ArmEndpoint, azure_cloud_provider, azure_session, transport
from activities.azure.credentials import CredentialKind, CredentialSettings, make_credential
from activities.azure.prices import PriceSettings
from activities.catalog_source import CatalogSource
from core.clouds import AZURE_PUBLIC_CLOUD, AzureCloud, UnknownCloudError, cloud_named
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog
from simulator.aks import ClusterInfo
from simulator.arm import StaticTokenCredential
from workers.settings import ENV_PREFIX, Settings

AZURE_VARIABLES: dict[str, str] = {
    "subscription_id": "AZURE_SUBSCRIPTION_ID",
    "resource_group": "AZURE_RESOURCE_GROUP",
    "location": "AZURE_LOCATION",
    "subnet_id": "AZURE_SUBNET_ID",
    "kubernetes_version": "KUBERNETES_VERSION",
    "node_image_version": "NODE_IMAGE_VERSION",
    "ssh_public_key": "SSH_PUBLIC_KEY",
    "kubelet_identity_id": "KUBELET_IDENTITY_ID",
    "cluster_endpoint": "CLUSTER_ENDPOINT",
    "bootstrap_token_secret": "BOOTSTRAP_TOKEN_SECRET",
    "cluster_name": "CLUSTER_NAME",
    "image_gallery_subscription_id": "IMAGE_GALLERY_SUBSCRIPTION_ID",
    "windows_admin_secret": "WINDOWS_ADMIN_SECRET",
    "windows_license_type": "WINDOWS_LICENSE_TYPE",
}
"""AzureSettings fields and their variables (after `NODEWRIGHT_`)."""
REGION_VARIABLE = "REGION"
POLL_VARIABLE = "AZURE_POLL_SECONDS"
CREATE_WAIT_VARIABLE = "AZURE_CREATE_WAIT_SECONDS"
SECONDS_VARIABLES = {POLL_VARIABLE: "poll_interval", CREATE_WAIT_VARIABLE: "create_wait"}
"""Optional AzureSettings durations and their variables (after `NODEWRIGHT_`), in seconds."""
ARM_ENDPOINT_VARIABLE = "ARM_ENDPOINT"
ARM_CA_FILE_VARIABLE = "ARM_CA_FILE"
CLOUD_VARIABLE = "AZURE_CLOUD"
CREDENTIAL_VARIABLE = "AZURE_CREDENTIAL"
TOKEN_FILE_VARIABLE = "AZURE_FEDERATED_TOKEN_FILE"
WORKLOAD_IDENTITY_VARIABLES = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", TOKEN_FILE_VARIABLE)
SERVICE_PRINCIPAL_VARIABLES = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID")
CLIENT_SECRET_VARIABLE = "AZURE_CLIENT_SECRET"
CERTIFICATE_VARIABLE = "AZURE_CLIENT_CERTIFICATE_PATH"
CERTIFICATE_PASSWORD_VARIABLE = "AZURE_CLIENT_CERTIFICATE_PASSWORD"
EMULATOR_SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEmulatorKeyForTheSimulatedAKSOnly nodewright"
"""A placeholder public key for VMs of the simulated AKS (nobody logs in to them)."""


@dataclass(frozen=True, slots=True)
class AzureConfig:
    """How the worker reaches Azure: the provider's settings, its cloud, what signs in, and the emulator's endpoint
    when not the cloud's ARM."""

    settings: AzureSettings
    endpoint: ArmEndpoint | None = None
    cloud: AzureCloud = AZURE_PUBLIC_CLOUD
    credential: CredentialSettings | None = None
    """None: a static token, against an emulator."""


def _variable(field: str) -> str:
    return ENV_PREFIX + AZURE_VARIABLES.get(field, field.upper())


def load_azure(settings: Settings, environ: Mapping[str, str] | None = None) -> AzureConfig:
    """The worker's Azure settings from the environment; `AzureSettingsError` naming every missing or invalid
    variable at once (workload identity's included when the endpoint is Azure's)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {
        field: env[ENV_PREFIX + variable]
        for field, variable in AZURE_VARIABLES.items()
        if env.get(ENV_PREFIX + variable)
    }
    values["cluster_name"] = settings.cluster_name
    values.setdefault("location", settings.region)
    problems: list[str] = []
    for variable, field in SECONDS_VARIABLES.items():
        raw = env.get(ENV_PREFIX + variable)
        if not raw:
            continue
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if 0 <= seconds < 10**6:
            values[field] = timedelta(seconds=seconds)
        else:
            problems.append(
                f"invalid Azure setting {ENV_PREFIX}{variable}: not a number of seconds (0 or more)"
            )
    endpoint = _endpoint(env, problems)
    cloud = _cloud(env, problems)
    credential = _credential(env, endpoint is not None, problems)
    try:
        azure = AzureSettings.load(values, name=_variable)
    except AzureSettingsError as error:
        problems.insert(0, str(error))
        raise AzureSettingsError("; ".join(problems)) from None
    if problems:
        raise AzureSettingsError("; ".join(problems))
    return AzureConfig(azure, endpoint, cloud, credential)


def _cloud(env: Mapping[str, str], problems: list[str]) -> AzureCloud:
    name = env.get(ENV_PREFIX + CLOUD_VARIABLE)
    if not name:
        return AZURE_PUBLIC_CLOUD
    try:
        return cloud_named(name)
    except UnknownCloudError as error:
        problems.append(f"invalid Azure setting {ENV_PREFIX}{CLOUD_VARIABLE}: {error}")
        return AZURE_PUBLIC_CLOUD


def _credential(env: Mapping[str, str], emulator: bool, problems: list[str]) -> CredentialSettings | None:
    """What signs in, with every variable it needs, or None (a static token) against an emulator by default."""
    variable = ENV_PREFIX + CREDENTIAL_VARIABLE
    raw = env.get(variable)
    if not raw and emulator:
        return None
    kinds = {kind.value.lower(): kind for kind in CredentialKind}
    kind = kinds.get((raw or CredentialKind.WORKLOAD_IDENTITY.value).strip().lower())
    if kind is None:
        problems.append(
            f"invalid Azure setting {variable}: {raw!r} is not one of {', '.join(k.value for k in CredentialKind)}"
        )
        return None

    def value(name: str) -> str | None:
        return env.get(name) or None

    if kind is CredentialKind.WORKLOAD_IDENTITY:
        missing = [name for name in WORKLOAD_IDENTITY_VARIABLES if not env.get(name)]
        if missing:
            problems.append(f"missing workload identity variables: {', '.join(missing)}")
        token = value(TOKEN_FILE_VARIABLE)
        if token and not os.path.isfile(token):
            # The kubelet mounts the projected token before the container starts: a file missing now stays so.
            problems.append(
                f"invalid Azure setting {TOKEN_FILE_VARIABLE}: no file {token} (the ServiceAccount token the "
                "workload identity webhook projects into pods labelled azure.workload.identity/use=true, whose "
                "ServiceAccount is annotated azure.workload.identity/client-id)"
            )
    if kind is CredentialKind.SERVICE_PRINCIPAL:
        missing = [name for name in SERVICE_PRINCIPAL_VARIABLES if not env.get(name)]
        if missing:
            problems.append(f"missing service principal variables: {', '.join(missing)}")
        certificate = value(CERTIFICATE_VARIABLE)
        if not value(CLIENT_SECRET_VARIABLE) and not certificate:
            problems.append(
                f"a service principal needs {CLIENT_SECRET_VARIABLE} or {CERTIFICATE_VARIABLE} (a PEM file with "
                "the certificate and its private key)"
            )
        if certificate and not os.path.isfile(certificate):
            problems.append(f"invalid Azure setting {CERTIFICATE_VARIABLE}: no file {certificate}")
    return CredentialSettings(
        kind=kind,
        client_id=value("AZURE_CLIENT_ID"),
        tenant_id=value("AZURE_TENANT_ID"),
        federated_token_file=value(TOKEN_FILE_VARIABLE),
        client_secret=value(CLIENT_SECRET_VARIABLE) if kind is CredentialKind.SERVICE_PRINCIPAL else None,
        certificate_path=value(CERTIFICATE_VARIABLE) if kind is CredentialKind.SERVICE_PRINCIPAL else None,
        certificate_password=value(CERTIFICATE_PASSWORD_VARIABLE),
    )


def _endpoint(env: Mapping[str, str], problems: list[str]) -> ArmEndpoint | None:
    url = env.get(ENV_PREFIX + ARM_ENDPOINT_VARIABLE)
    ca_file = env.get(ENV_PREFIX + ARM_CA_FILE_VARIABLE) or None
    if not url:
        if ca_file:
            problems.append(
                f"{ENV_PREFIX}{ARM_CA_FILE_VARIABLE} is set without {ENV_PREFIX}{ARM_ENDPOINT_VARIABLE}"
            )
        return None
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.netloc:
        problems.append(
            f"invalid Azure setting {ENV_PREFIX}{ARM_ENDPOINT_VARIABLE}: expected an https URL "
            "(the Azure SDK sends its token only over HTTPS)"
        )
    if ca_file and not os.path.isfile(ca_file):
        problems.append(f"invalid Azure setting {ENV_PREFIX}{ARM_CA_FILE_VARIABLE}: no file {ca_file}")
    return ArmEndpoint(url.rstrip("/"), ca_file)


def emulator_config(info: ClusterInfo, poll_interval: timedelta = timedelta(seconds=0.1)) -> AzureConfig:
    """The Azure config for a simulated AKS, from what it says about itself (the demo and tests)."""
    if info.arm_endpoint is None:
        raise AzureSettingsError("the simulated AKS does not serve its ARM emulator")
    settings = AzureSettings(
        subscription_id=info.subscription_id,
        resource_group=info.resource_group,
        location=info.location,
        cluster_name=info.cluster_name,
        subnet_id=info.subnet_id,
        kubernetes_version=info.kubernetes_version,
        node_image_version=info.node_image_version,
        ssh_public_key=EMULATOR_SSH_KEY,
        cluster_endpoint=info.api_server,
        bootstrap_token_secret=info.bootstrap_token_secret,
        windows_admin_secret=info.windows_admin_secret,
        poll_interval=poll_interval,
        heartbeat_interval=timedelta(seconds=1),
    )
    return AzureConfig(settings, ArmEndpoint(info.arm_endpoint, info.arm_ca_file))


def emulator_environment(info: ClusterInfo, poll_seconds: float = 0.1) -> dict[str, str]:
    """The `NODEWRIGHT_*` variables that point a `nodewright worker` at the emulated Azure (tests, benchmarks and
    `nodewright cluster`, which prints them; `GET /_emulator/aks` on the emulator gives `info`)."""
    if info.arm_endpoint is None or info.arm_ca_file is None:
        raise AzureSettingsError("the simulated AKS does not serve its ARM emulator")
    values = {
        "AZURE_SUBSCRIPTION_ID": info.subscription_id,
        "AZURE_RESOURCE_GROUP": info.resource_group,
        "AZURE_LOCATION": info.location,
        "AZURE_SUBNET_ID": info.subnet_id,
        "CLUSTER_NAME": info.cluster_name,
        "KUBERNETES_VERSION": info.kubernetes_version,
        "NODE_IMAGE_VERSION": info.node_image_version,
        "SSH_PUBLIC_KEY": EMULATOR_SSH_KEY,
        "CLUSTER_ENDPOINT": info.api_server,
        "BOOTSTRAP_TOKEN_SECRET": info.bootstrap_token_secret,
        **({"WINDOWS_ADMIN_SECRET": info.windows_admin_secret} if info.windows_admin_secret else {}),
        POLL_VARIABLE: f"{poll_seconds:g}",
        ARM_ENDPOINT_VARIABLE: info.arm_endpoint,
        ARM_CA_FILE_VARIABLE: info.arm_ca_file,
    }
    return {ENV_PREFIX + name: value for name, value in values.items()}


def authority_host(config: AzureConfig) -> str:
    """Where the worker's credential asks for tokens: its cloud's Entra ID authority, or the emulator's own, which
    serves Entra ID beside ARM (as the AKS provider takes its authority from its cloud's environment, a custom one
    included, and never from `AZURE_AUTHORITY_HOST`, which the workload identity webhook sets)."""
    if config.endpoint is None:
        return config.cloud.authority_host
    return urlsplit(config.endpoint.url).netloc


def price_settings(config: AzureConfig) -> PriceSettings:
    """Where the worker reads live prices: the cloud's Retail Prices API (none but the public cloud has one), or,
    in the public cloud, the emulator's copy of it."""
    if config.cloud.retail_prices is None:
        return PriceSettings(url=None)
    if config.endpoint is None:
        return PriceSettings(url=config.cloud.retail_prices)
    ca_file = Path(config.endpoint.ca_file) if config.endpoint.ca_file else None
    return PriceSettings(url=f"{config.endpoint.url}/api/retail/prices", ca_file=ca_file)


@contextlib.asynccontextmanager
async def cloud_provider(
    cluster: ClusterAPI,
    config: AzureConfig,
    catalog: AzureCatalog | CatalogSource | None = None,
    *,
    rotated_tokens: bool = True,
    resolver: AbstractResolver | None = None,
    ca_file: str | None = None,
) -> AsyncIterator[AzureCloudProvider]:
    """The provider for the block, signed in as `config.credential` says (a static token on an emulator by
    default), in its cloud; launches join with rotated bootstrap tokens too unless rotation is off
    (`rotated_tokens`). `resolver` resolves Azure's host names and `ca_file` is a CA to trust besides the
    endpoint's: tests serve a cloud's own host names from an emulator with both."""
    ca_file = ca_file or (config.endpoint.ca_file if config.endpoint else None)
    async with azure_session(ca_file, resolver) as session:
        credential: AsyncTokenCredential = (
            StaticTokenCredential()
            if config.credential is None
            else make_credential(config.credential, authority_host(config), transport(session))
        )
        async with (
            credential,
            azure_cloud_provider(
                cluster,
                config.settings,
                credential,
                config.endpoint,
                catalog,
                rotated_tokens=rotated_tokens,
                cloud=config.cloud,
                session=session,
                prices=price_settings(config),
            ) as provider,
        ):
            yield provider
