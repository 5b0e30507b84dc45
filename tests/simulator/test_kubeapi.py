"""The node agent's small Kubernetes client, without a server: reading a kubeconfig, and which errors are tried
again and how often."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from simulator.kubeapi import KubeApiError, load_kubeconfig, retrying

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443/", **cluster}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_a_kubeconfig_with_inline_ca_and_a_token(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path / "config",
        {"certificate-authority-data": base64.b64encode(CA.encode()).decode()},
        {"token": "s3cret"},
    )

    credential = load_kubeconfig(path)

    assert credential.server == "https://127.0.0.1:6443"
    assert credential.ca_pem == CA
    assert credential.headers() == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(credential)


def test_a_kubeconfig_with_files_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text(CA)
    path = kubeconfig(
        tmp_path / "config",
        {"certificate-authority": "ca.crt"},
        {"client-certificate": "node.crt", "client-key": "node.key"},
    )

    credential = load_kubeconfig(path)

    assert credential.ca_pem == CA
    assert (credential.cert_file, credential.key_file) == (tmp_path / "node.crt", tmp_path / "node.key")
    assert credential.headers() == {}


def test_a_kubeconfig_without_credentials_is_refused(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"certificate-authority-data": ""}, {"exec": {"command": "x"}})

    with pytest.raises(ValueError, match="neither a token nor a client certificate"):
        load_kubeconfig(path)


@pytest.mark.parametrize(
    ("status", "transient"), [(0, True), (429, True), (500, True), (503, True), (401, False), (409, False)]
)
def test_which_errors_are_transient(status: int, transient: bool) -> None:
    assert KubeApiError(status, "Reason", "message").transient is transient


async def test_transient_errors_are_tried_again_a_bounded_number_of_times() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KubeApiError(503, "ServiceUnavailable", "try later")
        return "done"

    assert await retrying(flaky, attempts=5, max_wait=timedelta(milliseconds=1)) == "done"
    assert len(calls) == 3

    async def down() -> str:
        calls.append(1)
        raise KubeApiError(0, "ClientConnectorError", "no answer")

    calls.clear()
    with pytest.raises(KubeApiError, match="no answer"):
        await retrying(down, attempts=4, max_wait=timedelta(milliseconds=1))
    assert len(calls) == 4


async def test_a_refusal_is_not_tried_again() -> None:
    calls: list[int] = []

    async def unauthorized() -> str:
        calls.append(1)
        raise KubeApiError(401, "Unauthorized", "Unauthorized")

    with pytest.raises(KubeApiError, match="401"):
        await retrying(unauthorized, attempts=5, max_wait=timedelta(milliseconds=1))
    assert len(calls) == 1
