"""The worker's Azure in each cloud, against the ARM emulator serving that cloud's own host names (its certificate
is good for them and the worker's connection pool resolves them to it): the catalog start and a launch go to the
cloud's ARM, tokens come from the cloud's authority for the cloud's scope, live prices are read from the public
Retail Prices API in the public cloud only; and the same worker in each credential kind signs in with the
credential it was given, which the emulator's Entra ID checks before its ARM takes the token."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from activities.azure.clients import azure_session
from activities.azure.credentials import CredentialKind
from activities.azure.provider import AzureCloudProvider
from activities.catalog_source import CatalogSource
from activities.errors import launch_failure
from core.cloudprovider import LaunchRequest
from core.clouds import AZURE_CHINA_CLOUD, AZURE_PUBLIC_CLOUD, AZURE_US_GOVERNMENT, AzureCloud
from core.errors import CredentialError
from core.messages import OfferingChoice
from simulator.arm import RunningArm, serve_arm
from simulator.arm.entra import Application, Federation, jwks, sign_jwt
from simulator.retail_prices import RETAIL_PRICES_KEY
from tests.activities.azure.test_clients import SecretOnly
from tests.cluster import eventually
from workers.azure import AzureConfig, cloud_provider, load_azure
from workers.schedules import catalog_refresh
from workers.serve import CatalogStart
from workers.settings import load_settings

SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
GROUP = "MC_rg_cluster_westeurope"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT = "5e6f7a8b-0000-4000-8000-00000000c11e"
SECRET = "a-client-secret-only-the-emulator-knows"
ISSUER = "https://oidc.prod-aks.azure.com/00000000-0000-0000-0000-000000000000/"
SERVICE_ACCOUNT = "system:serviceaccount:nodewright:nodewright"
AZURE = {
    "NODEWRIGHT_AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
    "NODEWRIGHT_AZURE_RESOURCE_GROUP": GROUP,
    "NODEWRIGHT_AZURE_SUBNET_ID": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/"
    "Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet",
    "NODEWRIGHT_KUBERNETES_VERSION": "1.33.5",
    "NODEWRIGHT_NODE_IMAGE_VERSION": "202512.18.0",
    "NODEWRIGHT_SSH_PUBLIC_KEY": "ssh-ed25519 AAAA admin",
    "NODEWRIGHT_CLUSTER_ENDPOINT": "cluster-dns-1.hcp.westeurope.azmk8s.io",
    "NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET": "kube-system/bootstrap-token-abcdef",
    "NODEWRIGHT_AZURE_POLL_SECONDS": "0",
}


@contextlib.asynccontextmanager
async def cloud_emulator(cloud: AzureCloud, region: str = "westeurope") -> AsyncIterator[RunningArm]:
    async with serve_arm(
        region, SUBSCRIPTION, resource_group=GROUP, cloud=cloud.name, names=cloud.host_names
    ) as arm:
        yield arm


@dataclass
class Worker:
    provider: AzureCloudProvider
    catalogs: CatalogSource


@contextlib.asynccontextmanager
async def worker(arm: RunningArm, config: AzureConfig) -> AsyncIterator[Worker]:
    """The worker's provider over the cloud's host names, resolved to the emulator."""
    catalogs = CatalogSource.shipped(config.settings.location)
    resolver = arm.resolver(config.cloud.host_names)
    async with cloud_provider(
        SecretOnly(), config, catalogs, resolver=resolver, ca_file=str(arm.ca_pem)
    ) as provider:  # type: ignore[arg-type]
        yield Worker(provider, catalogs)


OFFERING = OfferingChoice(
    instance_type="Standard_D2s_v5", zone="westeurope-1", capacity_type="on-demand", price_micros=1
)


def launch(name: str) -> LaunchRequest:
    return LaunchRequest(
        name=name,
        nodepool="default",
        instance_type="Standard_D2s_v5",
        zone="westeurope-1",
        capacity_type="on-demand",
    )


@pytest.mark.parametrize(
    "cloud", [AZURE_PUBLIC_CLOUD, AZURE_US_GOVERNMENT, AZURE_CHINA_CLOUD], ids=lambda c: c.name
)
async def test_each_cloud_s_requests_go_to_its_own_endpoints_with_its_own_scope(
    cloud: AzureCloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with cloud_emulator(cloud) as arm:
        arm.state.directory.register(Application(TENANT, CLIENT, secret=SECRET))
        environ = {
            **AZURE,
            "NODEWRIGHT_AZURE_CLOUD": cloud.name.upper() if cloud is AZURE_CHINA_CLOUD else cloud.name,
            "NODEWRIGHT_AZURE_CREDENTIAL": "servicePrincipal",
            "AZURE_CLIENT_ID": CLIENT,
            "AZURE_TENANT_ID": TENANT,
            "AZURE_CLIENT_SECRET": SECRET,
        }
        config = load_azure(load_settings(region="westeurope", cluster_name="prod"), environ=environ)
        assert config.cloud is cloud
        async with worker(arm, config) as started:
            result = await catalog_refresh(started.provider, started.catalogs).refresh(required=True)
            instance = await started.provider.create(launch("default-abcde"))

        assert result.refreshed and instance.name == "default-abcde"
        arm_hosts = {record.host for record in arm.state.requests}
        assert arm_hosts == {cloud.resource_manager.removeprefix("https://")}
        assert {"GET skus", "PUT networkInterfaces", "PUT virtualMachines"} <= set(
            arm.state.counters.requests
        )
        assert all(record.status != 401 for record in arm.state.requests)  # ARM took the token every time
        [token] = arm.state.directory.requests  # one token, cached for every call
        assert (token.host, token.path, token.scope, token.grant, token.status) == (
            cloud.authority_host,
            f"/{TENANT}/oauth2/v2.0/token",
            f"{cloud.audience}/.default",
            "client_secret",
            200,
        )
        prices = arm.runner.app[RETAIL_PRICES_KEY]
        if cloud.retail_prices is None:
            # As the AKS provider: no live prices outside the public cloud; spot is priced as on-demand.
            assert prices.hosts == [] and not result.prices_refreshed
            b12ms = started.catalogs.current.sku("Standard_B12ms")
            assert b12ms.spot_price_micros == b12ms.on_demand_price_micros
        else:
            assert set(prices.hosts) == {"prices.azure.com"} and result.prices_refreshed


async def test_a_token_for_another_cloud_s_audience_is_refused_by_entra_and_arm() -> None:
    async with cloud_emulator(AZURE_US_GOVERNMENT) as arm:
        directory = arm.state.directory
        directory.register(Application(TENANT, CLIENT, secret=SECRET))
        form = {
            "grant_type": "client_credentials",
            "client_id": CLIENT,
            "client_secret": SECRET,
            "scope": AZURE_PUBLIC_CLOUD.scope,
        }
        async with azure_session(str(arm.ca_pem), arm.resolver(AZURE_US_GOVERNMENT.host_names)) as session:
            assert session is not None
            url = f"https://login.microsoftonline.us/{TENANT}/oauth2/v2.0/token"
            async with session.post(url, data=form) as response:
                assert response.status == 400
                assert (await response.json())["error_codes"] == [500011]  # no such resource in this cloud
        public_token = directory._issue(CLIENT, AZURE_PUBLIC_CLOUD.audience, "client_secret")
        assert directory.check_bearer(public_token) == (
            "InvalidAuthenticationTokenAudience",
            "The access token has been obtained for wrong audience or resource 'https://management.azure.com'. It "
            "should exactly match with one of the allowed audiences 'https://management.usgovcloudapi.net/'.",
        )
        assert directory.check_bearer("made-up") == (
            "InvalidAuthenticationToken",
            "The access token is invalid.",
        )


# --- credentials -------------------------------------------------------------------------------------------


async def signed_in(arm: RunningArm, environ: dict[str, str]) -> str:
    """Start the worker's Azure from `environ` in the public cloud, list its VMs, and return the grant the
    emulator's Entra ID signed it in with."""
    config = load_azure(load_settings(region="westeurope", cluster_name="prod"), environ={**AZURE, **environ})
    async with worker(arm, config) as started:
        assert await started.provider.list() == []
    assert [record.status for record in arm.state.requests] == [200]
    [token] = arm.state.directory.requests
    assert token.status == 200 and token.client_id in (CLIENT, "system")
    return token.grant


async def test_a_service_principal_signs_in_with_its_client_secret_and_nothing_else() -> None:
    secret = {
        "NODEWRIGHT_AZURE_CREDENTIAL": "servicePrincipal",
        "AZURE_CLIENT_ID": CLIENT,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_CLIENT_SECRET": SECRET,
    }
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        arm.state.directory.register(Application(TENANT, CLIENT, secret=SECRET))
        assert await signed_in(arm, secret) == "client_secret"
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        arm.state.directory.register(Application(TENANT, CLIENT, secret="another one"))
        with pytest.raises(
            CredentialError, match=f"service principal {CLIENT} \\(client secret\\) could not sign in: "
        ):
            await signed_in(arm, secret)
        assert list(arm.state.requests) == []  # ARM was never called


async def test_a_service_principal_signs_in_with_its_certificate(tmp_path: Path) -> None:
    issued = trustme.CA().issue_cert("nodewright-service-principal", key_type=trustme.KeyType.RSA)
    pem = tmp_path / "certificate.pem"
    pem.write_bytes(issued.private_key_and_cert_chain_pem.bytes())
    certificate = x509.load_pem_x509_certificate(issued.cert_chain_pems[0].bytes())
    environ = {
        "NODEWRIGHT_AZURE_CREDENTIAL": "servicePrincipal",
        "AZURE_CLIENT_ID": CLIENT,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_CLIENT_CERTIFICATE_PATH": str(pem),
    }
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        arm.state.directory.register(Application(TENANT, CLIENT, certificate=certificate))
        assert await signed_in(arm, environ) == "client_certificate"
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        other = x509.load_pem_x509_certificate(trustme.CA().issue_cert("other").cert_chain_pems[0].bytes())
        arm.state.directory.register(Application(TENANT, CLIENT, certificate=other))
        with pytest.raises(CredentialError, match=r"AADSTS700027: service principal .* \(certificate\)"):
            await signed_in(arm, environ)


async def test_a_refused_credential_is_waited_for_at_the_start_and_retried_at_a_launch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Workload identity whose managed identity has no federated credential for the worker's ServiceAccount yet
    (Entra ID's AADSTS700213): the start and a launch both name the credential and Entra ID's code and retry, and
    both succeed once an administrator adds the federated credential, without a restart."""
    issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    environ = {**workload_identity(tmp_path, issuer_key), "NODEWRIGHT_AZURE_CREDENTIAL": "workloadIdentity"}
    config = load_azure(load_settings(region="westeurope", cluster_name="prod"), environ={**AZURE, **environ})
    named = f"workload identity {CLIENT}"
    published = jwks({"issuer-key": issuer_key.public_key()})
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm, worker(arm, config) as started:
        federate(arm, published, subject="system:serviceaccount:default:default")
        with pytest.raises(CredentialError) as refused:
            await started.provider.create(launch("default-abcde"))
        assert refused.value.code == "AADSTS700213" and f"{named} could not sign in" in str(refused.value)
        assert not launch_failure(refused.value, OFFERING).non_retryable

        start = CatalogStart("westeurope", signed_in_as=named)
        with caplog.at_level(logging.WARNING, logger="nodewright"):
            building = asyncio.create_task(
                start.build(catalog_refresh(started.provider, started.catalogs), max_wait_seconds=0.05)
            )
            reason = await eventually(
                lambda: _refused(start), what="the start waiting for Azure to take the credential"
            )
            federate(
                arm, published
            )  # `az identity federated-credential create` for the worker's ServiceAccount
            await asyncio.wait_for(building, 30)
        instance = await started.provider.create(launch("default-abcde"))

    assert reason.startswith(f"no instance types for region westeurope yet: Azure refused {named}: listing ")
    assert "AADSTS700213" in reason
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for Azure")]
    assert waits and all(f"Azure refused {named}: " in line for line in waits)
    assert await start.ready() is None and instance.name == "default-abcde"


async def _refused(start: CatalogStart) -> str | None:
    reason = await start.ready()
    return reason if reason is not None and "Azure refused" in reason else None


def workload_identity(directory: Path, issuer_key: rsa.RSAPrivateKey) -> dict[str, str]:
    """What the workload identity webhook gives a pod: its client and tenant, and its ServiceAccount's token (for
    Entra ID's audience) in a file."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": SERVICE_ACCOUNT,
        "aud": "api://AzureADTokenExchange",
        "iat": now,
        "exp": now + 3600,
    }
    token_file = directory / "azure-identity-token"
    token_file.write_text(sign_jwt(claims, issuer_key))
    return {
        "AZURE_CLIENT_ID": CLIENT,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
    }


def federate(arm: RunningArm, published: dict[str, Any], subject: str = SERVICE_ACCOUNT) -> None:
    arm.state.directory.publish_issuer(ISSUER, published)
    arm.state.directory.register(Application(TENANT, CLIENT, federation=Federation(ISSUER, subject)))


async def test_workload_identity_signs_in_with_the_federated_service_account_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cloud's authority wins over the one the webhook names (the resolver knows no other host), as the AKS
    # provider's cloud configuration does.
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://login.elsewhere.example/")
    issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    environ = workload_identity(tmp_path, issuer_key)
    published = jwks({"issuer-key": issuer_key.public_key()})
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        federate(arm, published)
        assert await signed_in(arm, environ) == "federated_token"  # the default credential
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        federate(arm, published, subject="system:serviceaccount:other:other")
        with pytest.raises(
            CredentialError, match=f"AADSTS700213: workload identity {CLIENT} could not sign in"
        ):
            await signed_in(arm, environ)
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        # Signed by a key the issuer does not publish.
        other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        federate(arm, jwks({"issuer-key": other_key.public_key()}))
        with pytest.raises(CredentialError, match="AADSTS700027"):
            await signed_in(arm, environ)


async def test_against_an_emulator_s_endpoint_the_worker_signs_in_at_the_emulator_s_entra_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`NODEWRIGHT_ARM_ENDPOINT` makes the emulator the worker's Azure: ARM and Entra ID both (a pod of the chart
    on the local control plane reaches nothing else), whatever `AZURE_AUTHORITY_HOST` says."""
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.com/")
    issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    async with serve_arm("westeurope", SUBSCRIPTION, resource_group=GROUP) as arm:
        federate(arm, jwks({"issuer-key": issuer_key.public_key()}))
        environ = {
            **AZURE,
            **workload_identity(tmp_path, issuer_key),
            "NODEWRIGHT_AZURE_CREDENTIAL": "workloadIdentity",  # as the chart sets it (else a static token)
            "NODEWRIGHT_ARM_ENDPOINT": arm.url,
            "NODEWRIGHT_ARM_CA_FILE": str(arm.ca_pem),
        }
        config = load_azure(load_settings(region="westeurope", cluster_name="prod"), environ=environ)
        assert config.credential is not None and config.credential.kind is CredentialKind.WORKLOAD_IDENTITY
        catalogs = CatalogSource.shipped("westeurope")
        async with cloud_provider(SecretOnly(), config, catalogs) as provider:  # type: ignore[arg-type]
            assert await provider.list() == []
    emulator = urlsplit(arm.url).netloc
    assert [(r.host, r.status) for r in arm.state.requests] == [(emulator, 200)]
    [token] = arm.state.directory.requests
    assert (token.host, token.client_id, token.grant, token.status) == (
        emulator,
        CLIENT,
        "federated_token",
        200,
    )


async def test_the_node_s_managed_identity_signs_in_through_imds(monkeypatch: pytest.MonkeyPatch) -> None:
    async with cloud_emulator(AZURE_PUBLIC_CLOUD) as arm:
        # azure-identity's own switch for where IMDS is; the emulator serves IMDS's token path.
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", arm.url)
        arm.state.directory.assign_managed_identity(CLIENT)
        environ = {"NODEWRIGHT_AZURE_CREDENTIAL": "managedIdentity", "AZURE_CLIENT_ID": CLIENT}
        assert await signed_in(arm, environ) == "managed_identity"
        [token] = arm.state.directory.requests
        assert (token.path, token.scope) == (
            "/metadata/identity/oauth2/token",
            "https://management.azure.com",
        )
