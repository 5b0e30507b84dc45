"""The worker's Azure settings from the environment: one message naming every missing or invalid variable
(workload identity's included on Azure), the emulator's endpoint instead of Azure's, and `nodewright worker`
stopping with exit code 2 and no traceback when they are wrong."""

from __future__ import annotations

import io
import os
from datetime import timedelta
from pathlib import Path

import pytest

from activities.azure import AzureSettingsError
from activities.azure.credentials import CredentialKind
from core.clouds import AZURE_CHINA_CLOUD, AZURE_PUBLIC_CLOUD, AZURE_US_GOVERNMENT
from workers.azure import load_azure, price_settings
from workers.cli import main
from workers.settings import load_settings

SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
GROUP = "MC_rg_cluster_westus2"
AZURE = {
    "NODEWRIGHT_AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
    "NODEWRIGHT_AZURE_RESOURCE_GROUP": GROUP,
    "NODEWRIGHT_AZURE_SUBNET_ID": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/"
    "Microsoft.Network/virtualNetworks/aks-vnet-1/subnets/aks-subnet",
    "NODEWRIGHT_KUBERNETES_VERSION": "1.33.5",
    "NODEWRIGHT_NODE_IMAGE_VERSION": "202512.18.0",
    "NODEWRIGHT_SSH_PUBLIC_KEY": "ssh-ed25519 AAAA admin",
    "NODEWRIGHT_CLUSTER_ENDPOINT": "cluster-dns-1.hcp.westus2.azmk8s.io",
    "NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET": "kube-system/bootstrap-token-abcdef",
}
REQUIRED = list(AZURE)


@pytest.fixture
def workload_identity(tmp_path: Path) -> dict[str, str]:
    """What the workload identity webhook gives a pod, its projected token file included."""
    token = tmp_path / "azure-identity-token"
    token.write_text("a projected service account token")
    return {
        "AZURE_CLIENT_ID": "client",
        "AZURE_TENANT_ID": "tenant",
        "AZURE_FEDERATED_TOKEN_FILE": str(token),
    }


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("NODEWRIGHT_", "AZURE_")):
            monkeypatch.delenv(name)


def test_every_missing_variable_is_named_in_one_message() -> None:
    with pytest.raises(AzureSettingsError) as raised:
        load_azure(load_settings(), environ={})
    message = str(raised.value)
    for name in REQUIRED:
        assert name in message
    assert (
        "missing workload identity variables: AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE"
        in (message)
    )


def test_invalid_values_are_named_with_the_rule(workload_identity: dict[str, str]) -> None:
    environ = {
        **AZURE,
        **workload_identity,
        "NODEWRIGHT_AZURE_SUBNET_ID": "aks-subnet",
        "NODEWRIGHT_AZURE_POLL_SECONDS": "soon",
        "NODEWRIGHT_AZURE_CREATE_WAIT_SECONDS": "-1",
    }
    with pytest.raises(AzureSettingsError) as raised:
        load_azure(load_settings(), environ=environ)
    assert "invalid Azure setting NODEWRIGHT_AZURE_SUBNET_ID" in str(raised.value)
    assert "NODEWRIGHT_AZURE_POLL_SECONDS: not a number of seconds" in str(raised.value)
    assert "NODEWRIGHT_AZURE_CREATE_WAIT_SECONDS: not a number of seconds (0 or more)" in str(raised.value)


def test_on_azure_the_region_and_cluster_come_from_the_common_settings(
    workload_identity: dict[str, str],
) -> None:
    config = load_azure(
        load_settings(region="westus2", cluster_name="prod"),
        environ={
            **AZURE,
            **workload_identity,
            "NODEWRIGHT_AZURE_POLL_SECONDS": "1.5",
            "NODEWRIGHT_AZURE_CREATE_WAIT_SECONDS": "0",
        },
    )
    assert config.endpoint is None
    settings = config.settings
    assert (settings.location, settings.cluster_name, settings.subscription_id) == (
        "westus2",
        "prod",
        SUBSCRIPTION,
    )
    assert settings.bootstrap_token_secret == "kube-system/bootstrap-token-abcdef"
    assert settings.poll_interval == timedelta(seconds=1.5)
    assert settings.create_wait == timedelta(0)


def test_an_emulator_needs_no_workload_identity_but_an_https_endpoint(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    emulator = {
        **AZURE,
        "NODEWRIGHT_ARM_ENDPOINT": "https://127.0.0.1:8766/",
        "NODEWRIGHT_ARM_CA_FILE": str(ca),
    }
    config = load_azure(load_settings(), environ=emulator)
    assert config.endpoint is not None
    assert (config.endpoint.url, config.endpoint.ca_file) == ("https://127.0.0.1:8766", str(ca))

    with pytest.raises(AzureSettingsError, match="expected an https URL"):
        load_azure(load_settings(), environ={**emulator, "NODEWRIGHT_ARM_ENDPOINT": "http://127.0.0.1:8766"})
    with pytest.raises(AzureSettingsError, match="NODEWRIGHT_ARM_CA_FILE: no file"):
        load_azure(load_settings(), environ={**emulator, "NODEWRIGHT_ARM_CA_FILE": str(tmp_path / "missing")})


def test_the_cloud_is_one_setting_by_the_providers_names(workload_identity: dict[str, str]) -> None:
    for name, expected in (
        ("AzureCloud", AZURE_PUBLIC_CLOUD),
        ("azureusgovernmentcloud", AZURE_US_GOVERNMENT),
        (" AzureChinaCloud ", AZURE_CHINA_CLOUD),
    ):
        config = load_azure(
            load_settings(), environ={**AZURE, **workload_identity, "NODEWRIGHT_AZURE_CLOUD": name}
        )
        assert config.cloud is expected
        prices = price_settings(config).url
        assert prices == (
            "https://prices.azure.com/api/retail/prices" if expected is AZURE_PUBLIC_CLOUD else None
        )
    assert load_azure(load_settings(), environ={**AZURE, **workload_identity}).cloud is AZURE_PUBLIC_CLOUD
    with pytest.raises(
        AzureSettingsError, match="invalid Azure setting NODEWRIGHT_AZURE_CLOUD: unknown Azure cloud"
    ):
        load_azure(
            load_settings(),
            environ={**AZURE, **workload_identity, "NODEWRIGHT_AZURE_CLOUD": "AzureGermanCloud"},
        )


def test_each_credential_kind_names_the_variables_it_lacks(tmp_path: Path) -> None:
    def problems(**environ: str) -> str:
        with pytest.raises(AzureSettingsError) as raised:
            load_azure(load_settings(), environ={**AZURE, **environ})
        return str(raised.value)

    assert "missing service principal variables: AZURE_CLIENT_ID, AZURE_TENANT_ID" in problems(
        NODEWRIGHT_AZURE_CREDENTIAL="servicePrincipal"
    )
    assert "needs AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH" in problems(
        NODEWRIGHT_AZURE_CREDENTIAL="servicePrincipal", AZURE_CLIENT_ID="c", AZURE_TENANT_ID="t"
    )
    missing = tmp_path / "certificate.pem"
    assert f"invalid Azure setting AZURE_CLIENT_CERTIFICATE_PATH: no file {missing}" in problems(
        NODEWRIGHT_AZURE_CREDENTIAL="servicePrincipal",
        AZURE_CLIENT_ID="c",
        AZURE_TENANT_ID="t",
        AZURE_CLIENT_CERTIFICATE_PATH=str(missing),
    )
    # The webhook mounts the token before the container starts: a file that is not there will not come.
    token = tmp_path / "tokens" / "azure-identity-token"
    assert (
        f"invalid Azure setting AZURE_FEDERATED_TOKEN_FILE: no file {token} (the ServiceAccount token the workload "
        "identity webhook projects into pods labelled azure.workload.identity/use=true"
    ) in problems(AZURE_CLIENT_ID="c", AZURE_TENANT_ID="t", AZURE_FEDERATED_TOKEN_FILE=str(token))
    assert (
        "NODEWRIGHT_AZURE_CREDENTIAL: 'password' is not one of workloadIdentity, servicePrincipal"
        in problems(NODEWRIGHT_AZURE_CREDENTIAL="password")
    )
    identity = load_azure(
        load_settings(), environ={**AZURE, "NODEWRIGHT_AZURE_CREDENTIAL": "ManagedIdentity"}
    ).credential
    assert identity is not None and (identity.kind, identity.client_id) == (
        CredentialKind.MANAGED_IDENTITY,
        None,
    )
    secret = load_azure(
        load_settings(),
        environ={
            **AZURE,
            "NODEWRIGHT_AZURE_CREDENTIAL": "servicePrincipal",
            "AZURE_CLIENT_ID": "c",
            "AZURE_TENANT_ID": "t",
            "AZURE_CLIENT_SECRET": "s3cret",
        },
    ).credential
    assert secret is not None and "s3cret" not in repr(secret)
    assert secret.describe() == "service principal c (client secret)"


def test_the_worker_stops_with_exit_code_2_and_one_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    out, err = io.StringIO(), io.StringIO()

    assert main(["worker"], out, err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: missing Azure settings: ")
    assert "NODEWRIGHT_AZURE_RESOURCE_GROUP" in lines[0] and "AZURE_FEDERATED_TOKEN_FILE" in lines[0]
    assert "NODEWRIGHT_AZURE_SUBSCRIPTION_ID" not in lines[0]
    assert "Traceback" not in err.getvalue() + out.getvalue()
