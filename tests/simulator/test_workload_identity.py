"""Workload identity on the emulated AKS, against a real API server: the webhook the API server calls mutates a
labelled pod as AKS's does, the process kubelet's projected volume holds the API server's own token for Entra ID's
audience, and the emulated Entra ID, which trusts the API server's issuer and key set, signs the ServiceAccount's
federated identity in with it (and nobody else)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity.aio import WorkloadIdentityCredential

from activities.azure.clients import azure_session, transport
from simulator.aks import AksSettings
from simulator.arm.entra import TOKEN_EXCHANGE_AUDIENCE
from simulator.kubeapi import KubeApi, load_kubeconfig
from simulator.kubelet import volumes
from simulator.workload_identity import (
    CLIENT_ID_ANNOTATION,
    TOKEN_DIRECTORY,
    TOKEN_FILE,
    TOKEN_VOLUME,
    USE_LABEL,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_CONFIGURATIONS,
    mutation,
)
from workers.controlplane.run import ControlPlane
from workers.simulated_aks import simulated_aks


def pod(namespace: str, name: str, account: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "serviceAccountName": account,
            "nodeSelector": {"nowhere": "true"},  # never runs: the test plays its kubelet
            "containers": [
                {"name": "app", "image": "app", "env": [{"name": "AZURE_TENANT_ID", "value": "its-own"}]},
                {"name": "sidecar", "image": "sidecar"},
            ],
        },
    }


def env(container: dict[str, Any]) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in container.get("env") or []}


async def test_a_labelled_pod_gets_a_token_the_emulated_entra_id_takes_for_its_service_account(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    plane = control_plane
    namespace = f"wi-{uuid.uuid4().hex[:8]}"
    settings = AksSettings.instant(seed=11)
    settings.workload_identity = True
    async with simulated_aks(plane, settings) as aks:
        info = aks.emulated.info
        assert info.oidc_issuer_url == "https://kubernetes.default.svc.cluster.local"
        identity = await aks.emulator.federate(namespace, "app")
        assert identity.subject == f"system:serviceaccount:{namespace}:app"
        plane.kubectl("create", "namespace", namespace)
        try:
            # kubectl in a thread: the webhook the API server calls is served by this event loop.
            accounts: list[dict[str, object]] = [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "annotations": {CLIENT_ID_ANNOTATION: identity.client_id},
                    },
                }
                for name in ("app", "other")
            ]
            await asyncio.to_thread(plane.apply, accounts)
            await asyncio.to_thread(
                plane.apply,
                [
                    pod(namespace, "labelled", "app", {USE_LABEL: "true"}),
                    pod(namespace, "plain", "app", {}),
                    pod(namespace, "other", "other", {USE_LABEL: "true"}),
                ],
            )
            listed = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
            stored = {item["metadata"]["name"]: item for item in listed["items"]}

            # What the API server stored: the webhook's variables (not over the pod's own), mount and volume.
            app, sidecar = stored["labelled"]["spec"]["containers"]
            authority = f"{aks.emulated.arm.url}/"
            assert env(app) == {
                "AZURE_TENANT_ID": "its-own",
                "AZURE_CLIENT_ID": identity.client_id,
                "AZURE_FEDERATED_TOKEN_FILE": TOKEN_FILE,
                "AZURE_AUTHORITY_HOST": authority,
            }
            assert env(sidecar)["AZURE_TENANT_ID"] == info.tenant_id == settings.tenant_id
            mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIRECTORY, "readOnly": True}
            assert all(mount in container["volumeMounts"] for container in (app, sidecar))
            [token_volume] = [v for v in stored["labelled"]["spec"]["volumes"] if v["name"] == TOKEN_VOLUME]
            assert token_volume["projected"]["sources"] == [
                {
                    "serviceAccountToken": {
                        "audience": TOKEN_EXCHANGE_AUDIENCE,
                        "expirationSeconds": 3600,
                        "path": TOKEN_VOLUME,
                    }
                }
            ]
            assert not any(v["name"] == TOKEN_VOLUME for v in stored["plain"]["spec"].get("volumes") or [])

            # The kubelet's volume: the API server's token for the pod (TokenRequest), which Entra ID takes.
            async def sign_in(name: str) -> None:
                async with KubeApi(load_kubeconfig(plane.kubeconfig)) as api:
                    paths = await volumes.prepare(api, stored[name], tmp_path / name)
                token_file = paths[TOKEN_VOLUME] / TOKEN_VOLUME
                async with azure_session(info.arm_ca_file, None) as session:
                    credential = WorkloadIdentityCredential(
                        tenant_id=identity.tenant_id,
                        client_id=identity.client_id,
                        token_file_path=str(token_file),
                        authority=urlsplit(authority).netloc,
                        transport=transport(session),
                    )
                    async with credential:
                        await credential.get_token("https://management.azure.com/.default")

            await sign_in("labelled")
            with pytest.raises(ClientAuthenticationError, match="AADSTS700213"):
                await sign_in("other")  # another ServiceAccount's token: no federated credential for it
            directory = aks.emulated.arm.state.directory
            assert [(r.client_id, r.status) for r in directory.requests] == [
                (identity.client_id, 200),
                (identity.client_id, 401),
            ]
            assert directory.requests[0].grant == "federated_token"
            # The webhook's own validation: an expiration out of the webhook's range is refused.
            account = {
                "metadata": {
                    "annotations": {"azure.workload.identity/service-account-token-expiration": "60"}
                }
            }
            with pytest.raises(ValueError, match="between 3600 and 86400"):
                mutation(stored["labelled"] | {"spec": {"containers": []}}, account, "tenant", authority)
        finally:
            plane.kubectl("delete", "namespace", namespace, "--wait=false")
    # Gone with the emulator: no pod is sent to a server that stopped.
    async with KubeApi(load_kubeconfig(plane.kubeconfig)) as api:
        assert await api.get(f"{WEBHOOK_CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}") is None
