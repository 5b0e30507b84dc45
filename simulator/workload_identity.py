"""AKS workload identity on the emulated AKS (`az aks create --enable-oidc-issuer --enable-workload-identity`): Entra
ID trusts the cluster's service-account issuer, a ServiceAccount gets a federated identity, and the mutating
admission webhook gives the pods that use it what Azure's SDKs read.

- The issuer: at start, the API server's OIDC discovery document (`/.well-known/openid-configuration`) and the key
  set it names (`jwks_uri`: `/openid/v1/jwks`) are read and published to the emulated Entra ID
  (`Directory.publish_issuer`), as AKS publishes its cluster's issuer; Entra ID checks every federated token's
  signature against those keys. The tokens are the API server's own, from the TokenRequest API.
- `federate(namespace, service_account)`: a user-assigned identity with a federated credential for the issuer,
  subject `system:serviceaccount:<namespace>:<service account>` and audience `api://AzureADTokenExchange` (what
  `az identity create` and `az identity federated-credential create` make); its client id is what the
  ServiceAccount's `azure.workload.identity/client-id` annotation names.
- The webhook: a real `MutatingWebhookConfiguration` (the name, selector, rules and failure policy of
  azure-workload-identity's chart) whose URL is this emulator's, so the API server calls it for every pod created
  with the label `azure.workload.identity/use: "true"`. It mutates as the webhook's v1.5 does: every container not
  named in the pod's `azure.workload.identity/skip-containers` gets `AZURE_CLIENT_ID` (the ServiceAccount's
  annotation), `AZURE_TENANT_ID` (its `azure.workload.identity/tenant-id`, else the cluster's tenant),
  `AZURE_FEDERATED_TOKEN_FILE` and `AZURE_AUTHORITY_HOST` (the emulated cloud's Entra ID: this emulator) unless it
  sets them itself, and the read-only mount of the projected volume `azure-identity-token` at
  /var/run/secrets/azure/tokens: a ServiceAccount token for the audience `api://AzureADTokenExchange`, valid for
  the pod's or the ServiceAccount's `azure.workload.identity/service-account-token-expiration` (3600 to 86400 s;
  3600 by default), which the kubelet asks the TokenRequest API for. (The webhook's v1.6 moves the file to
  /var/run/secrets/azure/wi/token/; the variables name it either way.)
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from simulator.arm.entra import TOKEN_EXCHANGE_AUDIENCE, Application, Directory, Federation
from simulator.kubeapi import KubeApi, KubeApiError

logger = logging.getLogger(__name__)

Json = dict[str, Any]
USE_LABEL = "azure.workload.identity/use"
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
TENANT_ID_ANNOTATION = "azure.workload.identity/tenant-id"
EXPIRATION_ANNOTATION = "azure.workload.identity/service-account-token-expiration"
SKIP_CONTAINERS_ANNOTATION = "azure.workload.identity/skip-containers"
TOKEN_VOLUME = "azure-identity-token"
TOKEN_DIRECTORY = "/var/run/secrets/azure/tokens"
TOKEN_FILE = f"{TOKEN_DIRECTORY}/{TOKEN_VOLUME}"
DEFAULT_EXPIRATION_SECONDS = 3600
EXPIRATION_RANGE = (3600, 86400)
MUTATE_PATH = "/_emulator/workload-identity/mutate-v1-pod"
WEBHOOK_CONFIGURATION = "azure-wi-webhook-mutating-webhook-configuration"
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
JWKS_MEDIA_TYPE = "application/jwk-set+json"


class MutationError(ValueError):
    """The pod cannot be admitted as it is; the message says why."""


class FederatedIdentity(BaseModel):
    """A user-assigned identity federated with a ServiceAccount (`POST /_emulator/workload-identity`)."""

    model_config = ConfigDict(frozen=True)

    client_id: str
    tenant_id: str
    issuer: str
    subject: str


def _expiration(pod: Json, account: Json) -> int:
    raw = (pod["metadata"].get("annotations") or {}).get(EXPIRATION_ANNOTATION) or (
        account["metadata"].get("annotations") or {}
    ).get(EXPIRATION_ANNOTATION)
    if not raw:
        return DEFAULT_EXPIRATION_SECONDS
    try:
        seconds = int(raw)
    except ValueError:
        raise MutationError(f"{EXPIRATION_ANNOTATION} {raw!r} is not a number of seconds") from None
    low, high = EXPIRATION_RANGE
    if not low <= seconds <= high:
        raise MutationError(
            f"token expiration {seconds} not valid. Expected value to be between {low} and {high}"
        )
    return seconds


def mutation(pod: Json, account: Json, tenant_id: str, authority_host: str) -> list[Json]:
    """The JSON patch the webhook answers for `pod` of ServiceAccount `account`; the same patch applied twice
    changes nothing more (the API server may call again after other webhooks)."""
    annotations = account["metadata"].get("annotations") or {}
    values = {
        "AZURE_CLIENT_ID": annotations.get(CLIENT_ID_ANNOTATION, ""),
        "AZURE_TENANT_ID": annotations.get(TENANT_ID_ANNOTATION, tenant_id),
        "AZURE_FEDERATED_TOKEN_FILE": TOKEN_FILE,
        "AZURE_AUTHORITY_HOST": authority_host,
    }
    skipped = {
        name.strip()
        for name in (pod["metadata"].get("annotations") or {}).get(SKIP_CONTAINERS_ANNOTATION, "").split(";")
    }
    spec = pod["spec"]
    patch: list[Json] = []
    for field in ("initContainers", "containers"):
        if not spec.get(field):
            continue
        containers = copy.deepcopy(spec[field])
        for container in containers:
            if container["name"] in skipped:
                continue
            env = container.setdefault("env", [])
            present = {variable["name"] for variable in env}
            env.extend({"name": k, "value": v} for k, v in values.items() if v and k not in present)
            mounts = [m for m in container.get("volumeMounts") or [] if m["name"] != TOKEN_VOLUME]
            container["volumeMounts"] = [
                *mounts,
                {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIRECTORY, "readOnly": True},
            ]
        patch.append({"op": "add", "path": f"/spec/{field}", "value": containers})
    volumes = spec.get("volumes") or []
    if not any(
        (source.get("serviceAccountToken") or {}).get("path") == TOKEN_VOLUME
        for volume in volumes
        for source in (volume.get("projected") or {}).get("sources") or []
    ):
        token = {
            "path": TOKEN_VOLUME,
            "expirationSeconds": _expiration(pod, account),
            "audience": TOKEN_EXCHANGE_AUDIENCE,
        }
        volume = {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}
        patch.append({"op": "add", "path": "/spec/volumes", "value": [*volumes, volume]})
    return patch


def webhook_configuration(url: str, ca_pem: bytes) -> Json:
    """The MutatingWebhookConfiguration that sends the API server's pod creations to `url`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"azure-workload-identity.io/system": "true"}},
        "webhooks": [
            {
                "name": "mutation.azure-workload-identity.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "objectSelector": {"matchLabels": {USE_LABEL: "true"}},
                "reinvocationPolicy": "IfNeeded",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "sideEffects": "None",
                "timeoutSeconds": 10,
            }
        ],
    }


class WorkloadIdentity:
    """The cluster's workload identity: its issuer in Entra ID, its federated identities and its webhook (served by
    the ARM emulator's server: `routes`). `start` once the server has its URL; `stop` removes the webhook."""

    def __init__(self, api: KubeApi, directory: Directory, tenant_id: str) -> None:
        self.api = api
        self.directory = directory
        self.tenant_id = tenant_id
        self.issuer: str | None = None
        self.authority_host = ""

    def routes(self) -> list[web.RouteDef]:
        return [web.post(MUTATE_PATH, self._mutate)]

    async def start(self, url: str, ca_pem: Path) -> str:
        """Publish the API server's issuer to Entra ID and register the webhook at `url` (the emulator's, whose
        certificate `ca_pem` signs); the issuer's URL."""
        discovery = await self.api.request("GET", "/.well-known/openid-configuration")
        issuer = str(discovery["issuer"])
        key_set = await self.api.request("GET", urlsplit(discovery["jwks_uri"]).path, accept=JWKS_MEDIA_TYPE)
        self.directory.publish_issuer(issuer, key_set)
        self.issuer, self.authority_host = issuer, f"{url}/"
        # A configuration left by an emulator that did not stop would send pods to a server that is gone.
        await self._remove_webhook()
        await self.api.create(
            WEBHOOK_CONFIGURATIONS, webhook_configuration(url + MUTATE_PATH, ca_pem.read_bytes())
        )
        return issuer

    async def stop(self) -> None:
        try:
            await self._remove_webhook()
        except KubeApiError as error:
            logger.warning("could not remove the workload identity webhook: %s", error)

    async def _remove_webhook(self) -> None:
        try:
            await self.api.request("DELETE", f"{WEBHOOK_CONFIGURATIONS}/{WEBHOOK_CONFIGURATION}")
        except KubeApiError as error:
            if error.status != 404:
                raise

    def federate(self, namespace: str, service_account: str) -> FederatedIdentity:
        """A user-assigned identity whose federated credential trusts the ServiceAccount's tokens (its client id is
        the same for the same ServiceAccount)."""
        if self.issuer is None:
            raise RuntimeError("workload identity has not started")
        subject = f"system:serviceaccount:{namespace}:{service_account}"
        client_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.issuer}#{subject}"))
        self.directory.register(
            Application(self.tenant_id, client_id, federation=Federation(self.issuer, subject))
        )
        return FederatedIdentity(
            client_id=client_id, tenant_id=self.tenant_id, issuer=self.issuer, subject=subject
        )

    async def _mutate(self, request: web.Request) -> web.Response:
        admission = (await request.json())["request"]
        pod = admission["object"]
        namespace = admission.get("namespace") or pod["metadata"].get("namespace") or "default"
        name = pod["spec"].get("serviceAccountName") or "default"
        answer: Json = {"uid": admission["uid"], "allowed": True}
        try:
            account = await self.api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            if account is None:
                raise MutationError(f'serviceaccounts "{name}" not found')
            patch = mutation(pod, account, self.tenant_id, self.authority_host)
        except (MutationError, KubeApiError) as error:
            answer |= {"allowed": False, "status": {"code": 400, "message": str(error)}}
        else:
            answer |= {
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            }
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
        )
