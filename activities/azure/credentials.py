"""How the worker signs in to Azure: workload identity (the default, as the AKS provider runs), a service principal
(a client secret, or a certificate), or the node's managed identity (IMDS), each in its cloud's Entra ID authority
(or an emulator's).

The credentials are azure-identity's async ones, made from a `CredentialSettings` (which the worker reads from the
variables Azure's SDKs read: `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, `AZURE_FEDERATED_TOKEN_FILE`,
`AZURE_CLIENT_SECRET`, `AZURE_CLIENT_CERTIFICATE_PATH`, `AZURE_CLIENT_CERTIFICATE_PASSWORD`). A transport may be
given, so that they share the worker's connection pool to Azure (and its CA, against an emulator). Nothing secret
is ever printed: the secret and the password stay out of `repr`.

A credential that cannot sign in says which one it is (`NamedCredential`): its failure, whether Entra ID's answer
or a file it cannot read, is a `ClientAuthenticationError` that names the credential kind and its client, which
`activities.azure.errors` classifies as a `CredentialError` wherever the token was needed (a launch, the worker's
catalog start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import ClientAuthenticationError
from azure.core.pipeline.transport import AioHttpTransport
from azure.identity.aio import (
    CertificateCredential,
    ClientSecretCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)


class CredentialKind(StrEnum):
    """What the worker signs in as (`NODEWRIGHT_AZURE_CREDENTIAL`; the chart's `azure.credential`)."""

    WORKLOAD_IDENTITY = "workloadIdentity"
    """A user-assigned managed identity federated with the pod's ServiceAccount (AKS workload identity)."""
    SERVICE_PRINCIPAL = "servicePrincipal"
    """An Entra ID application, with a client secret or a certificate."""
    MANAGED_IDENTITY = "managedIdentity"
    """The managed identity of the node the pod runs on, from IMDS (a user-assigned one when a client id is given)."""


@dataclass(frozen=True, slots=True)
class CredentialSettings:
    kind: CredentialKind
    client_id: str | None = None
    tenant_id: str | None = None
    federated_token_file: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    certificate_path: str | None = None
    certificate_password: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        """For log lines: what signs in, never with what."""
        if self.kind is CredentialKind.MANAGED_IDENTITY:
            return f"the node's managed identity{f' {self.client_id}' if self.client_id else ''}"
        if self.kind is CredentialKind.SERVICE_PRINCIPAL:
            proof = "certificate" if self.certificate_path else "client secret"
            return f"service principal {self.client_id} ({proof})"
        return f"workload identity {self.client_id}"


class CredentialFileError(ClientAuthenticationError):
    """A file the credential signs in with (the federated token, the certificate) cannot be read."""


class NamedCredential(AsyncTokenCredential):
    """A credential whose failures to sign in name it (`CredentialSettings.describe`)."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self.name = name

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        try:
            token: AccessToken = await self._inner.get_token(*scopes, **kwargs)
        except (ClientAuthenticationError, OSError) as error:
            raise self._failure(error) from error
        return token

    async def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        try:
            token: AccessTokenInfo = await self._inner.get_token_info(*scopes, options=options)
        except (ClientAuthenticationError, OSError) as error:
            raise self._failure(error) from error
        return token

    def _failure(self, error: ClientAuthenticationError | OSError) -> ClientAuthenticationError:
        if isinstance(error, ClientAuthenticationError):
            return ClientAuthenticationError(
                message=f"{self.name} could not sign in: {error.message}", response=error.response
            )
        return CredentialFileError(message=f"{self.name} could not sign in: {error}")

    async def close(self) -> None:
        await self._inner.close()

    async def __aexit__(self, *args: Any) -> None:
        await self.close()


def make_credential(
    settings: CredentialSettings, authority_host: str, transport: AioHttpTransport | None = None
) -> NamedCredential:
    """The async credential of `settings`, asking the Entra ID at `authority_host` (a cloud's authority, or an
    emulator's `host:port`) for tokens, named in its failures. Given explicitly, the authority wins over
    `AZURE_AUTHORITY_HOST` in azure-identity, as the AKS provider's cloud configuration wins over it in the Go SDK."""
    return NamedCredential(_credential(settings, authority_host, transport), settings.describe())


def _credential(
    settings: CredentialSettings, authority_host: str, transport: AioHttpTransport | None
) -> AsyncTokenCredential:
    options: dict[str, Any] = {"authority": authority_host}
    if transport is not None:
        options["transport"] = transport
    if settings.kind is CredentialKind.MANAGED_IDENTITY:
        options.pop("authority")
        return ManagedIdentityCredential(client_id=settings.client_id, **options)
    tenant, client = settings.tenant_id or "", settings.client_id or ""
    if settings.kind is CredentialKind.SERVICE_PRINCIPAL:
        if settings.certificate_path:
            return CertificateCredential(
                tenant, client, settings.certificate_path, password=settings.certificate_password, **options
            )
        return ClientSecretCredential(tenant, client, settings.client_secret or "", **options)
    return WorkloadIdentityCredential(
        tenant_id=tenant, client_id=client, token_file_path=settings.federated_token_file, **options
    )
