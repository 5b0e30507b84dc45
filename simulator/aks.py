"""The emulated AKS, as one thing to start: the Azure Resource Manager its VMs live in (`simulator.arm`, over
HTTPS, for the real Azure SDK) and the agents that turn its booted VMs into Nodes of a real Kubernetes
control plane (`simulator.nodeagent`).

Kubernetes itself is not emulated: `serve_aks` is given a running API server, the cluster CA a node image would
carry (`KUBE_CA_CRT`), the bootstrap token Secret a worker renders into custom data, and the admin kubeconfig
the cluster's add-ons act with. Tests and the demo steer it through the ARM emulator's `/_emulator` control API
(unauthenticated, like the rest of it; `simulator.aks_client` is a client):

- `GET /_emulator/aks`: `ClusterInfo`, what a worker must be told about the cluster and its Azure;
- `GET /_emulator/custom-data/{vm}`: the base64 custom data a VM was created with (ARM never returns it);
- `POST /_emulator/never-register` `{"vm": name}`: that VM's node never joins;
- `POST /_emulator/crash-agent` `{"vm": name}`: that VM's node agent crashes and a new one joins from the start
  (404 when the VM has no agent);
- `GET` and `PATCH /_emulator/settings`: the settings; a JSON merge patch changes delays and timings at run time
  (durations in seconds), never what names the cluster; among them `arm.eviction_notice` (30 s: a Spot VM's
  Preempt notice) and `agent.scheduled_events_interval` (how often nodes read their Scheduled Events);
- `POST /_emulator/evict` `{"vm": name[, "noticeSeconds": n]}`: a Spot eviction, as ARM's `simulateEviction`
  (which the Azure SDK calls) does, with a notice of its own when given: the VM's IMDS posts a `Preempt`
  Scheduled Event, its node gets the condition `PreemptionScheduled=True` (`simulator.nodeagent`), and at the
  event's `NotBefore` the VM is deleted and its node stops (Ready `Unknown`);
- `POST /_emulator/vanish` `{"vm": name}`: the VM is gone at once, with no notice (a host failure);
- `GET` and `POST /_emulator/metadata/scheduledevents?vm=<name>&api-version=2020-07-01` (`Metadata: true`): a
  VM's Scheduled Events, as its IMDS serves them, and their approval (`{"StartRequests": [{"EventId": id}]}`);
- `POST /_emulator/workload-identity` `{"namespace": ns, "serviceAccount": name}`: with `workload_identity` on, a
  user-assigned identity federated with that ServiceAccount (`simulator.workload_identity`: the cluster's OIDC
  issuer is trusted by the emulated Entra ID, and the API server sends labelled pods to the webhook this server
  serves);
- and the ARM emulator's own: `/_emulator/faults`, `/_emulator/counters`, `/_emulator/restrictions`, ....
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.arm import ArmError, ArmSettings, ArmState, RunningArm, start_arm
from simulator.arm.server import json_body
from simulator.kubeapi import KubeApi, load_kubeconfig
from simulator.nodeagent import NodeAgents, NodeAgentSettings, cancel_until_done
from simulator.workload_identity import WorkloadIdentity

logger = logging.getLogger(__name__)

DEFAULT_TENANT = "5f2c8e31-7a0d-4b6e-9c41-0d3a7e6b1f52"
"""A made-up tenant id for the emulated cloud."""
ADDON_USER_AGENT = "nodewright-cluster-addon"
"""The field manager of what the cluster add-on credential writes (startup taints removed)."""


class AksSettings(BaseModel):
    """Everything the emulated AKS can be told. Durations are seconds in JSON."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    seed: int = 0
    """Seeds the ARM emulator's generated ids (vmId, operation ids, resource GUIDs) unless `arm.seed` is set."""
    cluster_name: str = "nodewright"
    """The cluster whose VMs (by the `karpenter.azure.com_cluster` tag) boot into Nodes."""
    kubernetes_version: str | None = Field(default=None, pattern=r"^\d+\.\d+\.\d+$")
    """What the cluster reports as its version; the API server's own when unset."""
    node_image_version: str = "202512.18.0"
    """The AKS node image version a worker boots when the AKSNodeClass status names no images."""
    tenant_id: str = DEFAULT_TENANT
    """The Entra ID tenant of the cluster's subscription (what the workload identity webhook tells pods)."""
    workload_identity: bool = False
    """The OIDC issuer and workload identity (`--enable-oidc-issuer --enable-workload-identity`): Entra ID trusts
    the API server's service-account issuer, and labelled pods get their federated token
    (`simulator.workload_identity`)."""
    arm: ArmSettings = Field(default_factory=ArmSettings)
    agent: NodeAgentSettings = Field(default_factory=NodeAgentSettings)

    @model_validator(mode="after")
    def _seed_arm(self) -> AksSettings:
        if "seed" not in self.arm.model_fields_set:
            self.arm.seed = self.seed
        return self

    @classmethod
    def instant(cls, seed: int = 0) -> AksSettings:
        """No boot, registration or startup-taint delays (tests and benchmarks)."""
        return cls(seed=seed, agent=NodeAgentSettings.instant())


FIXED_SETTINGS = (
    ("seed",),
    ("cluster_name",),
    ("kubernetes_version",),
    ("node_image_version",),
    ("tenant_id",),
    ("workload_identity",),
    ("arm", "subscription_id"),
    ("arm", "resource_group"),
    ("arm", "resource_groups"),
    ("arm", "region"),
    ("arm", "cloud"),
    ("arm", "token"),
    ("arm", "seed"),
)
"""Settings that name the cluster or shape its ids; only delays and timings change at run time."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null removes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def update_settings(settings: AksSettings, patch: Mapping[str, Any]) -> AksSettings:
    """Apply a merge patch to the settings in place (the ARM state and the agents hold them); 400
    `InvalidSettings` when the result is not valid or changes a fixed setting."""
    try:
        wanted = AksSettings.model_validate(merge_patch(settings.model_dump(mode="json"), patch))
    except ValidationError as error:
        raise ArmError(400, "InvalidSettings", str(error)) from None
    for path in FIXED_SETTINGS:
        if functools.reduce(getattr, path, wanted) != functools.reduce(getattr, path, settings):
            raise ArmError(400, "InvalidSettings", f"{'.'.join(path)} cannot change while the emulator runs.")
    for section in ("arm", "agent"):
        held, new = getattr(settings, section), getattr(wanted, section)
        for name in type(new).model_fields:
            setattr(held, name, getattr(new, name))
    return settings


class ClusterInfo(BaseModel):
    """What a worker must be told about the emulated cluster and its Azure (`GET /_emulator/aks`); never a
    secret."""

    model_config = ConfigDict(frozen=True)

    cluster_name: str
    subscription_id: str
    resource_group: str
    location: str
    subnet_id: str
    kubernetes_version: str
    node_image_version: str
    api_server: str
    """`host:port` of the API server (what custom data names as `API_SERVER_NAME`; the worker's
    `NODEWRIGHT_CLUSTER_ENDPOINT`)."""
    bootstrap_token_secret: str
    """`<namespace>/<name>` of the bootstrap token Secret."""
    windows_admin_secret: str | None = None
    """`<namespace>/<name>` of the Secret with the Windows nodes' admin account (the cluster's `windowsProfile`)."""
    arm_endpoint: str | None = None
    """The ARM emulator's base URL (https), once it is served."""
    arm_ca_file: str | None = None
    """The CA certificate (PEM) that signs the emulator's certificate."""
    tenant_id: str | None = None
    """The Entra ID tenant of the cluster's subscription."""
    oidc_issuer_url: str | None = None
    """With workload identity, the cluster's service-account issuer that Entra ID trusts (AKS's
    `oidcIssuerProfile.issuerURL`)."""


@dataclass
class EmulatedAks:
    """A served emulated AKS: its ARM, what a worker must know, and the node agents."""

    arm: RunningArm
    info: ClusterInfo
    agents: NodeAgents
    settings: AksSettings
    workload_identity: WorkloadIdentity | None = None
    """With `AksSettings.workload_identity`: the issuer, the federated identities and the webhook."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _arm_errors(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ArmError as error:
            return error.response()

    return handle


class _Control:
    """The AKS endpoints of the control API."""

    def __init__(
        self,
        settings: AksSettings,
        state: ArmState,
        agents: NodeAgents,
        workload_identity: WorkloadIdentity | None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.agents = agents
        self.workload_identity = workload_identity
        self.info: ClusterInfo | None = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/_emulator/aks", _arm_errors(self.cluster_info)),
            web.get("/_emulator/custom-data/{vm}", _arm_errors(self.custom_data)),
            web.post("/_emulator/never-register", _arm_errors(self.never_register)),
            web.post("/_emulator/crash-agent", _arm_errors(self.crash_agent)),
            web.get("/_emulator/settings", _arm_errors(self.get_settings)),
            web.patch("/_emulator/settings", _arm_errors(self.patch_settings)),
            web.post("/_emulator/workload-identity", _arm_errors(self.federate)),
            *(self.workload_identity.routes() if self.workload_identity else []),
        ]

    async def cluster_info(self, request: web.Request) -> web.Response:
        if self.info is None:
            raise ArmError(503, "NotReady", "The emulated AKS is still starting.")
        return web.json_response(self.info.model_dump(mode="json"))

    async def custom_data(self, request: web.Request) -> web.Response:
        name = request.match_info["vm"]
        vm = self.state.vm(name)
        if vm is None or vm.custom_data is None:
            raise ArmError(404, "NotFound", f"No VM '{name}' with custom data.")
        return web.json_response({"customData": vm.custom_data})

    async def never_register(self, request: web.Request) -> web.Response:
        vm = (await json_body(request)).get("vm")
        if not isinstance(vm, str) or not vm:
            raise ArmError(400, "InvalidRequestContent", "'vm' (a VM name) is required.")
        self.agents.never_register(vm)
        return web.json_response({})

    async def crash_agent(self, request: web.Request) -> web.Response:
        vm = (await json_body(request)).get("vm")
        if not isinstance(vm, str) or not vm:
            raise ArmError(400, "InvalidRequestContent", "'vm' (a VM name) is required.")
        if not self.agents.crash(vm):
            raise ArmError(404, "NotFound", f"VM '{vm}' has no node agent.")
        return web.json_response({})

    async def federate(self, request: web.Request) -> web.Response:
        if self.workload_identity is None or self.workload_identity.issuer is None:
            raise ArmError(
                400, "WorkloadIdentityDisabled", "The emulated AKS runs without workload identity."
            )
        body = await json_body(request)
        namespace, account = body.get("namespace"), body.get("serviceAccount")
        if not isinstance(namespace, str) or not namespace or not isinstance(account, str) or not account:
            raise ArmError(400, "InvalidRequestContent", "'namespace' and 'serviceAccount' are required.")
        return web.json_response(self.workload_identity.federate(namespace, account).model_dump(mode="json"))

    async def get_settings(self, request: web.Request) -> web.Response:
        return web.json_response(self.settings.model_dump(mode="json"))

    async def patch_settings(self, request: web.Request) -> web.Response:
        settings = update_settings(self.settings, await json_body(request))
        self.agents.wake()
        return web.json_response(settings.model_dump(mode="json"))


async def _server_version(addon: KubeApi) -> str:
    """The API server's version without its `v` (`1.36.3`)."""
    version = await addon.request("GET", "/version")
    return str(version.get("gitVersion", "")).removeprefix("v").split("-", 1)[0].split("+", 1)[0]


@contextlib.asynccontextmanager
async def serve_aks(
    settings: AksSettings,
    *,
    api_server: str,
    ca_file: Path,
    bootstrap_token_secret: str,
    addon_kubeconfig: Path,
    windows_admin_secret: str | None = None,
    ca_dir: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[EmulatedAks]:
    """Serve the emulated AKS in the current event loop for the duration of the block.

    `api_server` is the API server (`https://host:port` or `host:port`), `ca_file` the cluster CA that nodes
    trust, `bootstrap_token_secret` the `<namespace>/<name>` of the Secret workers read the token from (and
    `windows_admin_secret` the one with Windows nodes' admin account), and
    `addon_kubeconfig` the credential of the cluster's add-ons (it removes startup taints). The ARM emulator's
    CA goes to `ca_dir`, or to a temporary directory removed afterwards.
    """
    addon = KubeApi(load_kubeconfig(addon_kubeconfig), user_agent=ADDON_USER_AGENT)
    state = ArmState(settings.arm)
    with contextlib.ExitStack() as stack:
        directory = ca_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="emulated-aks-")))
        agents = NodeAgents(
            state,
            settings.agent,
            cluster_name=settings.cluster_name,
            ca_file=ca_file,
            addon=addon,
            work_dir=directory / "nodes",
        )
        state.on_change = agents.wake
        identity = (
            WorkloadIdentity(addon, state.directory, settings.tenant_id)
            if settings.workload_identity
            else None
        )
        control = _Control(settings, state, agents, identity)
        try:
            version = settings.kubernetes_version or await _server_version(addon)
            arm = await start_arm(state, directory, host, port, routes=control.routes())
        except BaseException:
            await addon.close()
            raise
        try:
            issuer = None if identity is None else await identity.start(arm.url, arm.ca_pem)
        except BaseException:
            await arm.close()
            await addon.close()
            raise
        arm_settings = settings.arm
        control.info = ClusterInfo(
            cluster_name=settings.cluster_name,
            subscription_id=arm_settings.subscription_id,
            resource_group=arm_settings.resource_group,
            location=arm_settings.region,
            subnet_id=(
                f"/subscriptions/{arm_settings.subscription_id}/resourceGroups/{arm_settings.resource_group}"
                "/providers/Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
            ),
            kubernetes_version=version,
            node_image_version=settings.node_image_version,
            api_server=api_server.removeprefix("https://").rstrip("/"),
            bootstrap_token_secret=bootstrap_token_secret,
            windows_admin_secret=windows_admin_secret,
            arm_endpoint=arm.url,
            arm_ca_file=str(arm.ca_pem),
            tenant_id=settings.tenant_id,
            oidc_issuer_url=issuer,
        )
        task = asyncio.create_task(agents.run(), name="node-agents")
        logger.info(
            "emulated AKS %s: ARM on %s (CA certificate %s), nodes join %s",
            settings.cluster_name,
            arm.url,
            arm.ca_pem,
            control.info.api_server,
        )
        try:
            yield EmulatedAks(arm, control.info, agents, settings, identity)
        finally:
            if identity is not None:
                await identity.stop()
            await cancel_until_done([task])
            await agents.close()
            await arm.close()
            await addon.close()
