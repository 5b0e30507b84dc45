"""The node agent: what a booted VM of the emulated AKS does to become a Node of the real API server.

For every VM of the cluster (tag `karpenter.azure.com_cluster`) whose create has succeeded in the ARM emulator,
one agent (an asyncio task) waits the boot and registration delays, then does what the kubelet does on an AKS
node:

1. reads the VM's custom data (`simulator.nodeboot`): the bootstrap token, the API server
   (`https://<API_SERVER_NAME>`, verified with the cluster CA the node image carries), the kubelet flags and
   the versions;
2. TLS bootstrap: makes an EC P-256 key and posts a `certificates.k8s.io/v1` CertificateSigningRequest for
   `CN=system:node:<node>, O=system:nodes` (signer `kubernetes.io/kube-apiserver-client-kubelet`) as the
   bootstrap token; kube-controller-manager approves and signs it; the agent waits for the certificate (a new
   CSR after `certificate_timeout`). A token the API server refuses (wrong, expired) gets 401: one warning names the VM (never the
   token) and the node never joins;
3. with that certificate, as `system:node:<node>`, creates its Node: the labels of `--node-labels` plus the
   hostname and node image version, the taints of `--register-with-taints`, the AKS provider ID, nodeInfo, and
   the annotation `kwok.x-k8s.io/node: fake`, from which kwok keeps the Node Ready (its lease, its conditions)
   and runs the pods bound to it. Capacity is the VM size's CPU, memory and GPUs, `--max-pods` pods and the OS
   disk's size as ephemeral storage; allocatable is capacity less `--kube-reserved`, `--system-reserved` and the
   `--eviction-hard` thresholds, as a kubelet computes it. What the bootstrap configured that a Node does not
   show (the kubelet's other flags, the sysctls, transparent huge pages, swap, artifact streaming, the GPU
   driver, the LocalDNS Corefile) goes in the annotation `nodewright.io/node-config` (JSON: `kubelet`, flags by
   name without `--`; `sysctls`, by kernel name; `variables`, the other bootstrap variables, decoded). That
   annotation is the emulator's own, so that tests and users can see what a node was configured with: a real
   AKS node has none;
4. once the Node is Ready and after the startup-taint delay, removes the startup taints (the keys of the VM's
   `nodewright_startup-taints` tag and of its NodeClaim's `startupTaints`), as the add-ons that own them would.
   NodeRestriction forbids a node to change its own taints, so this uses the cluster add-on credential.

A Windows VM (`simulator.arm.vms.is_windows`) boots like a Windows node of AKS: its custom data is only a file
until a CustomScriptExtension runs it, so its agent waits for that extension (publisher `Microsoft.Compute`, type
`CustomScriptExtension`, a command that runs `CustomData.bin`: `runs_custom_data`) before it bootstraps, and never
joins without one.
Its kubelet registers the Node under the VM's computer name with what a Windows kubelet reports:
`kubernetes.io/os=windows`, `node.kubernetes.io/windows-build` (`10.0.<build>`, from the node image version
`AKSWindows-2022-containerd-gen2-20348.4529.251212`), and nodeInfo `operatingSystem: windows`,
`osImage: Windows Server 2022 Datacenter`, `kernelVersion: 10.0.20348.4529`.

Once registered, the agent also does what AKS's node-problem-detector does with the VM's Scheduled Events
(`simulator.arm.evictions`): every `scheduled_events_interval` it reads the VM's document (from the emulator's
state, the document its IMDS endpoint serves), and when a `Preempt` event appears (a Spot eviction), it sets, as
the node (the status subresource, a strategic merge keyed by condition type), the Node condition

    type: PreemptionScheduled
    status: "True"
    reason: SpotEvictionIncoming
    message: Preempt Scheduled: Tue, 24 Nov 2026 14:00:30 GMT. For more information, see
             https://aka.ms/aks/scheduledevents. EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869

(one line), the format the AKS Karpenter provider parses (`Preempt <EventStatus>[: <NotBefore>]. ...
EventId: <id>`): `NotBefore` is the event's, RFC 1123 in GMT, the eviction's deadline; once the event has started
(approved through IMDS) the message reads `Preempt Started. For more information, ...` without a time, as IMDS
shows a started event without one. `preemption_message` writes it. `lastTransitionTime` is when the agent first
saw that event. The condition is written once per event and status, never re-asserted: kwok's node stages patch
Node status by strategic merge, which keeps the conditions they do not know. When the VM is evicted it is
deleted, and the node stops as below (the condition stays, as NPD is gone with the VM).

When the VM is deleted (by its owner, by its eviction, or when it vanishes), the node stops, as a kubelet that
is gone: the agent, still as the node, removes the kwok annotation and sets its Ready condition to Unknown
(`NodeStatusUnknown`). The NodeClaim lifecycle deletes the Node object itself. A VM registers at most once;
`never_register` makes a VM's node never join.

As a kubelet does, an agent keeps trying for as long as its VM exists: an API call is retried a few times on a
transient error (no answer, 429, 5xx), and a step that still fails (the TLS bootstrap, the registration, the
wait for Ready, the startup taints; a CSR not signed in time) is started again after a backoff that doubles up
to `rejoin_max_backoff`, resuming where the agent got to (a node that registered does not bootstrap again). Only
a refusal ends its joining for good (the token or the Node refused, a CSR denied), and an error that is not
transient ends that agent only, logged. Deallocation is not emulated.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, Field

from core import labels
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import InstanceType
from core.resources import EPHEMERAL_STORAGE, PODS, Resources, format_resources, subtract
from simulator.arm import ArmError, ArmState, ProvisioningState, Resource, ResourceType
from simulator.arm.vms import is_windows
from simulator.kubeapi import (
    STRATEGIC_MERGE_PATCH,
    Json,
    KubeApi,
    KubeApiError,
    KubeCredential,
    node_path,
    retrying,
)
from simulator.nodeboot import BootstrapError, NodeBootstrap, read_custom_data

logger = logging.getLogger(__name__)

CLUSTER_TAG = "karpenter.azure.com_cluster"
NODECLAIM_TAG = "karpenter.sh_nodeclaim"
VM_PREFIX = "aks-"
STARTUP_TAINTS_TAG = "nodewright_startup-taints"
"""A VM tag listing startup taint keys (comma-separated), for VMs launched without a NodeClaim; otherwise the
startup taints are those of the NodeClaim the VM was made for."""
NODE_IMAGE_VERSION_LABEL = "kubernetes.azure.com/node-image-version"
NODE_CONFIG_ANNOTATION = "nodewright.io/node-config"
"""Emulator only: what the node's bootstrap configured (see the module)."""
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NODECLAIM_PATH = "/apis/karpenter.sh/v1/nodeclaims"
CONTAINER_RUNTIME = "containerd://1.7.27"
PREEMPTION_CONDITION = "PreemptionScheduled"
"""The Node condition AKS's node-problem-detector sets for a Spot VM's Preempt Scheduled Event."""
PREEMPTION_REASON = "SpotEvictionIncoming"
SCHEDULED_EVENTS_HELP = "https://aka.ms/aks/scheduledevents"
_BOOTED = frozenset({ProvisioningState.SUCCEEDED.value, ProvisioningState.UPDATING.value})
"""A VM in these states has finished creating (updates happen to running VMs)."""
WINDOWS_EXTENSION = ("Microsoft.Compute", "CustomScriptExtension")
"""The (publisher, type) of the extension that runs a Windows VM's custom data."""
WINDOWS_CUSTOM_DATA_FILE = "CustomData.bin"
"""Where Azure writes a Windows VM's custom data (`C:\\AzureData\\CustomData.bin`)."""
WINDOWS_SERVER_RELEASES = {"17763": "2019", "20348": "2022", "26100": "2025"}
"""Windows Server builds and their release names."""
_WINDOWS_IMAGE_VERSION = re.compile(r"-(?P<build>\d+)\.(?P<revision>\d+)\.\d+$")


@functools.cache
def shipped_instance_types(region: str) -> dict[str, InstanceType]:
    """The VM sizes of the shipped catalog of a region, by lower-cased name (built once per region)."""
    catalog = load_shipped_catalog(region, fallback=True)
    return {instance_type.name.lower(): instance_type for instance_type in azure_instance_types(catalog)}


def provider_id(subscription_id: str, resource_group: str, vm_name: str) -> str:
    """The Node `spec.providerID` of a VM, as AKS writes it (resource group lower-cased)."""
    return (
        f"azure:///subscriptions/{subscription_id}/resourceGroups/{resource_group.lower()}"
        f"/providers/Microsoft.Compute/virtualMachines/{vm_name}"
    )


class NodeAgentSettings(BaseModel):
    """How long a node takes to start, and how long and how often its agent waits for the API server."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    boot_delay: timedelta = timedelta(seconds=1)
    """From the VM's create succeeding to its agent starting."""
    registration_delay: timedelta = timedelta(seconds=1)
    """From the agent starting to its TLS bootstrap (the kubelet starting)."""
    startup_taint_delay: timedelta = timedelta(seconds=1)
    """From the Node being Ready to its startup taints being removed (the add-ons starting)."""
    certificate_timeout: timedelta = timedelta(seconds=60)
    """How long the agent waits for its CSR to be approved and signed before it sends a new one."""
    ready_timeout: timedelta = timedelta(seconds=120)
    """How long the agent waits for its Node to be Ready before it logs so and starts waiting again."""
    poll_interval: timedelta = timedelta(seconds=0.5)
    """The longest wait between two reads of the CSR or the Node (the first reads come sooner)."""
    api_attempts: int = Field(default=6, ge=1)
    """Tries of one API call that keeps failing transiently (no answer, 429, 5xx)."""
    api_max_backoff: timedelta = timedelta(seconds=2)
    rejoin_max_backoff: timedelta = Field(default=timedelta(seconds=7), gt=timedelta(0))
    """The longest wait before a failed step of joining is tried again (the kubelet's node-status backoff, 7 s)."""
    bootstrap_refusal_grace: timedelta = Field(default=timedelta(0), ge=timedelta(0))
    """How long an agent keeps trying when the API server refuses its bootstrap token (401 or 403) before it
    gives up: an API server that just started refuses bootstrap tokens until it has read their Secrets (a kubelet,
    restarted by systemd, keeps trying; 0 gives up at once, so that a wrong token shows at once)."""
    scheduled_events_interval: timedelta = Field(default=timedelta(seconds=5), gt=timedelta(0))
    """How often a registered node reads its VM's Scheduled Events (node-problem-detector's poll)."""

    @classmethod
    def instant(cls) -> NodeAgentSettings:
        """No boot, registration or startup-taint delay, and Scheduled Events read five times a second (tests
        and benchmarks)."""
        zero = timedelta(0)
        return cls(
            boot_delay=zero,
            registration_delay=zero,
            startup_taint_delay=zero,
            scheduled_events_interval=timedelta(seconds=0.2),
        )


class Phase(StrEnum):
    """How far a VM's node has come."""

    BOOTING = "Booting"
    BOOTSTRAPPING = "Bootstrapping"
    REGISTERED = "Registered"
    READY = "Ready"
    INITIALIZED = "Initialized"
    """Ready and without its startup taints."""
    NEVER_REGISTERS = "NeverRegisters"
    REFUSED = "Refused"
    """Its custom data carries no usable bootstrap, or the API server refused its token or CSR."""
    FAILED = "Failed"
    STOPPED = "Stopped"


class _Refused(Exception):
    """The node cannot join; the message says why, naming the VM and never a credential."""


class _TryAgain(Exception):
    """A step of joining did not finish in its time (a CSR not signed, a Node not Ready): start it again, as a
    restarted kubelet would."""


async def cancel_until_done(tasks: Iterable[asyncio.Task[Any]], every: float = 1.0) -> None:
    """Cancel the tasks and wait until each has ended, cancelling again every `every` seconds. An HTTP client's
    timeout that fires as the cancellation arrives can turn it into a timeout error, which a retry loop takes
    for a lost answer and carries on: one cancellation is not always the end of a task."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)


def runs_custom_data(extension: Mapping[str, Any]) -> bool:
    """Whether a VM extension (as PUT, protected settings included) runs a Windows VM's custom data."""
    properties = extension.get("properties") or {}
    command = (properties.get("protectedSettings") or {}).get("commandToExecute")
    return (
        (properties.get("publisher"), properties.get("type")) == WINDOWS_EXTENSION
        and isinstance(command, str)
        and WINDOWS_CUSTOM_DATA_FILE in command
    )


def windows_node_info(node_image_version: str) -> dict[str, str]:
    """What a Windows kubelet reports of its OS, from the AKS node image version (`...-20348.4529.251212`): the
    `windows-build` label, osImage and kernelVersion; empty when the version does not say."""
    match = _WINDOWS_IMAGE_VERSION.search(node_image_version)
    if match is None:
        return {}
    build, revision = match["build"], match["revision"]
    release = WINDOWS_SERVER_RELEASES.get(build)
    return {
        "windowsBuild": f"10.0.{build}",
        "osImage": f"Windows Server {release} Datacenter" if release else f"Windows Server (build {build})",
        "kernelVersion": f"10.0.{build}.{revision}",
    }


def _worth_retrying(error: BaseException) -> bool:
    return isinstance(error, _TryAgain) or (isinstance(error, KubeApiError) and error.transient)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def preemption_message(event: Mapping[str, Any]) -> str:
    """The PreemptionScheduled condition's message for a Preempt event of an IMDS document (see the module)."""
    not_before = event.get("NotBefore")
    head = f"Preempt {event['EventStatus']}" + (f": {not_before}" if not_before else "")
    return f"{head}. For more information, see {SCHEDULED_EVENTS_HELP}. EventId: {event['EventId']}"


def _csr_request(node: str) -> tuple[ec.EllipticCurvePrivateKey, bytes]:
    """A new key and a PEM certificate request for `system:node:<node>` in `system:nodes`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return key, request.public_bytes(serialization.Encoding.PEM)


class NodeAgent:
    """The agent of one VM; `run` is its task."""

    def __init__(self, agents: NodeAgents, vm: Resource) -> None:
        self._agents = agents
        self.vm_name = vm.name
        self.resource_group = vm.resource_group
        self.vm_id = str(vm.properties.get("vmId") or "")
        self.node_name = str((vm.properties.get("osProfile") or {}).get("computerName") or vm.name)
        self.windows = is_windows(vm.body)
        self.phase = Phase.BOOTING
        self.csr_name: str | None = None
        self.registered = False
        self.credential: KubeCredential | None = None
        """The node's own (its client certificate), once TLS bootstrap gave it one."""
        self.retries = 0
        """How many times a step of joining was started again after it failed."""
        self._first_refusal: float | None = None
        self._stop = asyncio.Event()
        self._node_api: KubeApi | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def settings(self) -> NodeAgentSettings:
        return self._agents.settings

    def stop(self) -> None:
        """The VM is gone (or going): the node stops posting its status."""
        self._stop.set()

    async def run(self) -> None:
        """Join, until the VM goes; then stop the node. A failure is logged and ends only this agent's joining:
        a node that registered still stops when its VM goes."""
        join = asyncio.create_task(self._join(), name=f"node-agent-join/{self.vm_name}")
        stopped = asyncio.create_task(self._stop.wait(), name=f"node-agent-stop/{self.vm_name}")
        try:
            await asyncio.wait({join, stopped}, return_when=asyncio.FIRST_COMPLETED)
            await cancel_until_done([join])
            if not join.cancelled() and (error := join.exception()) is not None:
                self.phase = Phase.FAILED
                logger.error("the node agent of VM %s failed", self.vm_name, exc_info=error)
            await stopped
            if self.registered:
                try:
                    await self._stop_node()
                except Exception:
                    logger.exception(
                        "node %s of VM %s could not report that it stopped", self.node_name, self.vm_name
                    )
                self.phase = Phase.STOPPED
        finally:
            join.cancel()
            stopped.cancel()
            if self._node_api is not None:
                await self._node_api.close()

    async def _join(self) -> None:
        settings = self.settings
        await asyncio.sleep((settings.boot_delay + settings.registration_delay).total_seconds())
        if self.vm_name.lower() in self._agents.never:
            self.phase = Phase.NEVER_REGISTERS
            logger.info("VM %s boots but its node never registers", self.vm_name)
            return
        if self.windows:
            await self._wait_bootstrap_extension()
        backoff = settings.poll_interval.total_seconds()
        try:
            while True:
                try:
                    await self._join_step()
                    return
                except Exception as error:
                    if not _worth_retrying(error):
                        raise
                    self.retries += 1
                    logger.warning(
                        "VM %s: its node agent tries again in %.1f s (%s): %s",
                        self.vm_name,
                        backoff,
                        self.phase.value,
                        error,
                    )
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, settings.rejoin_max_backoff.total_seconds())
        except _Refused as refused:
            self.phase = Phase.REFUSED
            logger.warning("%s", refused)
        finally:
            if self._watch is not None:
                self._watch.cancel()
                await asyncio.wait({self._watch})

    async def _wait_bootstrap_extension(self) -> None:
        """A Windows VM's custom data runs once an extension runs it: wait for that (until the VM goes)."""
        while True:
            vm = self._agents.arm.vm(self.vm_name, self.resource_group)
            if vm is not None and any(runs_custom_data(ext) for ext in vm.extensions.values()):
                return
            await asyncio.sleep(self.settings.poll_interval.total_seconds())

    async def _join_step(self) -> None:
        """Bootstrap, register and initialize, from wherever an earlier try stopped."""
        if self.credential is None:
            self.phase = Phase.BOOTSTRAPPING
            self.credential = await self._tls_bootstrap(self._bootstrap())
            self._node_api = KubeApi(self.credential)
        if not self.registered:
            await self._register(self._bootstrap())
            self.registered = True
            self.phase = Phase.REGISTERED
            logger.info("VM %s registered node %s", self.vm_name, self.node_name)
            self._watch = asyncio.create_task(
                self._watch_scheduled_events(), name=f"node-problem-detector/{self.vm_name}"
            )
        if self.phase is not Phase.INITIALIZED:
            await self._initialize()
        assert self._watch is not None
        await self._watch

    async def _initialize(self) -> None:
        """Once Ready, and after the startup-taint delay, the startup taints go."""
        if await self._wait_ready():
            self.phase = Phase.READY
            await asyncio.sleep(self.settings.startup_taint_delay.total_seconds())
            await self._agents.remove_startup_taints(self.vm_name, self.node_name)
            self.phase = Phase.INITIALIZED

    async def _watch_scheduled_events(self) -> None:
        """As node-problem-detector: report the VM's Preempt event as the PreemptionScheduled condition, once per
        event and status (see the module), until cancelled."""
        reported: tuple[str, str] | None = None
        since = ""
        while True:
            event = self._preempt_event()
            if event is not None and (event["EventId"], event["EventStatus"]) != reported:
                if reported is None or reported[0] != event["EventId"]:
                    since = _now()
                try:
                    await self._report_preemption(event, since)
                except KubeApiError as error:
                    logger.warning(
                        "node %s could not report its VM's Preempt event %s: %s",
                        self.node_name,
                        event["EventId"],
                        error,
                    )
                else:
                    reported = (event["EventId"], event["EventStatus"])
            await asyncio.sleep(self.settings.scheduled_events_interval.total_seconds())

    def _preempt_event(self) -> dict[str, Any] | None:
        """The Preempt event of the VM's Scheduled Events, if there is one (none once the VM is gone)."""
        try:
            document = self._agents.arm.scheduled_events(self.vm_name, self.resource_group)
        except ArmError:
            return None
        return next((event for event in document["Events"] if event["EventType"] == "Preempt"), None)

    async def _report_preemption(self, event: Mapping[str, Any], since: str) -> None:
        api = self._node_api
        assert api is not None
        message = preemption_message(event)
        condition = {
            "type": PREEMPTION_CONDITION,
            "status": "True",
            "reason": PREEMPTION_REASON,
            "message": message,
            "lastHeartbeatTime": _now(),
            "lastTransitionTime": since,
        }
        await self._call(
            lambda: api.patch(
                node_path(self.node_name, "status"),
                {"status": {"conditions": [condition]}},
                STRATEGIC_MERGE_PATCH,
            )
        )
        logger.info("node %s: %s=True: %s", self.node_name, PREEMPTION_CONDITION, message)

    def _bootstrap(self) -> NodeBootstrap:
        vm = self._agents.arm.vm(self.vm_name)
        if vm is None or vm.custom_data is None:
            raise _Refused(f"VM {self.vm_name} has no custom data; its node cannot join the cluster")
        try:
            boot = read_custom_data(vm.custom_data)
        except BootstrapError as error:
            raise _Refused(f"VM {self.vm_name} cannot bootstrap: {error}") from None
        if not boot.api_server:
            raise _Refused(f"VM {self.vm_name} cannot bootstrap: its custom data sets no API_SERVER_NAME")
        return boot

    async def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        return await retrying(call, self.settings.api_attempts, self.settings.api_max_backoff)

    async def _tls_bootstrap(self, boot: NodeBootstrap) -> KubeCredential:
        """The node's client certificate, from a CSR sent as the bootstrap token."""
        server = "https://" + boot.api_server.removeprefix("https://").rstrip("/")
        key, request = _csr_request(self.node_name)
        digest = hashlib.sha256(request).hexdigest()[:32]
        self.csr_name = f"node-csr-{digest}"
        csr = {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": self.csr_name},
            "spec": {
                "request": base64.b64encode(request).decode(),
                "signerName": KUBELET_SIGNER,
                "usages": ["digital signature", "client auth"],
            },
        }
        bootstrap = KubeApi(KubeCredential(server, self._agents.ca_pem, token=boot.token))
        try:
            try:
                await self._call(lambda: bootstrap.create(CSR_PATH, csr))
            except KubeApiError as error:
                if error.status == 409:
                    # A try whose answer was lost (a timeout on a busy API server) made it: its name is this
                    # request's own digest, so it is this request. A kubelet goes on to wait for it too.
                    pass
                elif error.status in (401, 403):
                    now = asyncio.get_running_loop().time()
                    self._first_refusal = self._first_refusal if self._first_refusal is not None else now
                    if now - self._first_refusal < self.settings.bootstrap_refusal_grace.total_seconds():
                        raise _TryAgain(
                            f"TLS bootstrap refused by the API server ({error.status} {error.reason}); one that "
                            "just started refuses bootstrap tokens until it has read their Secrets"
                        ) from None
                    raise _Refused(
                        f"VM {self.vm_name}: TLS bootstrap refused by the API server ({error.status} "
                        f"{error.reason}): the bootstrap token in its custom data is not accepted; the node "
                        "does not join"
                    ) from None
                else:
                    raise
            certificate = await self._wait_certificate(bootstrap)
        finally:
            await bootstrap.close()
        return self._agents.node_credential(server, self.node_name, key, certificate)

    async def _wait_certificate(self, bootstrap: KubeApi) -> bytes:
        """The signed certificate, as a kubelet waits for it: one GET, then a watch of its CSR alone."""
        assert self.csr_name is not None
        async for csr in self._states(bootstrap, CSR_PATH, self.csr_name, self.settings.certificate_timeout):
            status = (csr or {}).get("status") or {}
            for condition in status.get("conditions") or []:
                if condition.get("type") in ("Denied", "Failed") and condition.get("status") == "True":
                    raise _Refused(
                        f"VM {self.vm_name}: its certificate signing request {self.csr_name} was "
                        f"{condition['type'].lower()}: {condition.get('message') or condition.get('reason')}"
                    )
            if status.get("certificate"):
                return base64.b64decode(status["certificate"])
        raise _TryAgain(
            f"its certificate signing request {self.csr_name} was not signed within "
            f"{self.settings.certificate_timeout.total_seconds():g} s"
        )

    async def _states(
        self, api: KubeApi, collection: str, name: str, timeout: timedelta
    ) -> AsyncIterator[Json | None]:
        """The states of one object until `timeout` (None once it is gone): one GET, then a watch of that object
        alone, so a thousand agents waiting cost a thousand watches rather than a GET each every half second. A
        watch that ends or fails is followed by another GET after the poll interval."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.total_seconds()
        selector = {"fieldSelector": f"metadata.name={name}"}
        path = f"{collection}/{quote(name, safe='')}"
        while True:
            current = await self._call(lambda: api.get(path))
            yield current
            left = deadline - loop.time()
            if current is None or left <= 0:
                return
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            try:
                async for event in api.watch(collection, {**selector, "resourceVersion": version}, left):
                    if event.get("type") == "ERROR":
                        break
                    if event.get("type") == "DELETED":
                        yield None
                        return
                    yield event.get("object") or {}
            except KubeApiError as error:
                logger.debug("watching %s %s failed: %s", collection, name, error)
            if loop.time() >= deadline:
                return
            await asyncio.sleep(
                min(self.settings.poll_interval.total_seconds(), max(0.0, deadline - loop.time()))
            )

    async def _register(self, boot: NodeBootstrap) -> None:
        """Create the Node as the node. One of that name that exists already (left by an earlier VM of the same
        name, or made by hand) is taken over as a kubelet does: it becomes this node's, kept up by kwok."""
        node = self._agents.node_manifest(self.vm_name, self.node_name, boot)
        api = self._node_api
        assert api is not None
        try:
            await self._call(lambda: api.create("/api/v1/nodes", node))
        except KubeApiError as error:
            if error.status == 409:
                annotations = {"metadata": {"annotations": node["metadata"]["annotations"]}}
                await self._call(lambda: api.patch(node_path(self.node_name), annotations))
                return
            if error.status in (401, 403, 422):
                raise _Refused(
                    f"VM {self.vm_name}: the API server refused Node {self.node_name} ({error.status} "
                    f"{error.reason}): {error.message}"
                ) from None
            raise

    async def _wait_ready(self) -> bool:
        """Until the Node is Ready, watching it as a kubelet watches its own."""
        api = self._node_api
        assert api is not None
        async for node in self._states(api, "/api/v1/nodes", self.node_name, self.settings.ready_timeout):
            if node is None:
                logger.info("node %s of VM %s was deleted before it was Ready", self.node_name, self.vm_name)
                return False
            if _is_ready(node):
                return True
        raise _TryAgain(
            f"node {self.node_name} was not Ready within {self.settings.ready_timeout.total_seconds():g} s"
        )

    async def _stop_node(self) -> None:
        """As the node: leave kwok, then report the kubelet gone (what the node lifecycle controller would
        conclude once the lease expired)."""
        api = self._node_api
        assert api is not None
        path = node_path(self.node_name)
        try:
            await self._call(lambda: api.patch(path, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}}))
            now = _now()
            condition = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            await self._call(
                lambda: api.patch(
                    node_path(self.node_name, "status"),
                    {"status": {"conditions": [condition]}},
                    STRATEGIC_MERGE_PATCH,
                )
            )
        except KubeApiError as error:
            if error.status != 404:
                raise
        logger.info("VM %s is gone: node %s stopped posting its status", self.vm_name, self.node_name)


def node_capacity(
    instance_type: InstanceType | None, boot: NodeBootstrap, vm_properties: Mapping[str, Any]
) -> Resources:
    """What the kubelet reports as capacity: the size's CPU, memory and GPUs, `--max-pods`, the OS disk."""
    if instance_type is None:
        return {}
    capacity = dict(instance_type.capacity)
    if boot.max_pods is not None:
        capacity[PODS] = boot.max_pods
    disk = ((vm_properties.get("storageProfile") or {}).get("osDisk") or {}).get("diskSizeGB")
    if disk:
        capacity[EPHEMERAL_STORAGE] = int(disk) * 10**9
    return capacity


def node_allocatable(capacity: Resources, boot: NodeBootstrap) -> Resources:
    """Capacity less kube-reserved, system-reserved and the hard eviction thresholds, never below zero."""
    held = boot.kube_reserved
    for more in (boot.system_reserved, boot.eviction_hard):
        for name, amount in more.items():
            held[name] = held.get(name, 0) + amount
    return {name: max(0, amount) for name, amount in subtract(capacity, held).items() if name in capacity}


def node_config(boot: NodeBootstrap) -> str:
    """The `nodewright.io/node-config` annotation (see the module)."""
    variables = dict(boot.node)
    sysctls = {}
    for line in variables.pop("SYSCTL_CONTENT", "").splitlines():
        name, equals, value = line.partition("=")
        if equals:
            sysctls[name.strip()] = value.strip()
    return json.dumps({"kubelet": boot.kubelet, "sysctls": sysctls, "variables": variables}, sort_keys=True)


def _is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class NodeAgents:
    """The agents of the cluster's VMs: one task per booted VM, started and stopped as the ARM state changes.

    `ca_file` is the cluster CA a node image carries (it verifies the API server); `addon` is the cluster add-on
    credential that removes startup taints. Run `run()` as a task; `close()` cancels every agent.
    """

    def __init__(
        self,
        arm: ArmState,
        settings: NodeAgentSettings,
        *,
        cluster_name: str,
        ca_file: Path,
        addon: KubeApi,
        work_dir: Path | None = None,
    ) -> None:
        self.arm = arm
        self.settings = settings
        self.cluster_name = cluster_name
        self.ca_pem = ca_file.read_text()
        self.addon = addon
        self.agents: dict[str, NodeAgent] = {}
        """By lower-cased VM name."""
        self.never: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._own_dir = work_dir is None
        self._dir = work_dir or Path(tempfile.mkdtemp(prefix="node-agents-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self._types = shipped_instance_types(arm.settings.region)

    def never_register(self, vm_name: str) -> None:
        """This VM's node never joins (a node whose boot fails), e.g. to test the registration TTL."""
        self.never.add(vm_name.lower())

    def agent(self, vm_name: str) -> NodeAgent | None:
        return self.agents.get(vm_name.lower())

    def crash(self, vm_name: str) -> bool:
        """The VM's agent dies (as a kubelet that crashed, with what it held in memory) and the VM starts a new
        one, which joins from the start: TLS bootstrap again, and the Node taken over if it registered. False
        when the VM has no agent."""
        key = vm_name.lower()
        task = self._tasks.pop(key, None)
        if self.agents.pop(key, None) is None:
            return False
        if task is not None:
            task.cancel()
        self.wake()
        return True

    def wake(self) -> None:
        """Look at the VMs again (the ARM state changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Start and stop agents as VMs boot and go, until cancelled. A failed pass is logged and retried."""
        while True:
            self._wake.clear()
            try:
                self.reconcile()
            except Exception:
                logger.exception("node agents: looking at the VMs failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)

    def reconcile(self) -> None:
        """An agent for every booted VM of the cluster; a stop for every agent whose VM is gone or going."""
        present: dict[str, Resource] = {
            vm.name.lower(): vm
            for vm in self.arm.resources(ResourceType.VIRTUAL_MACHINE)
            if vm.tags.get(CLUSTER_TAG) == self.cluster_name
        }
        for key, agent in list(self.agents.items()):
            vm = present.get(key)
            # A VM of the same name made again is another machine: its node joins anew.
            vanished = vm is None or str(vm.properties.get("vmId") or "") != agent.vm_id
            if vanished or (vm is not None and vm.provisioning_state == ProvisioningState.DELETING):
                agent.stop()
            task = self._tasks.get(key)
            if vanished and (task is None or task.done()):
                del self.agents[key]
                self._tasks.pop(key, None)
        for key, vm in present.items():
            if key in self.agents or vm.provisioning_state not in _BOOTED:
                continue
            agent = NodeAgent(self, vm)
            self.agents[key] = agent
            self._tasks[key] = asyncio.create_task(agent.run(), name=f"node-agent/{vm.name}")
            self._tasks[key].add_done_callback(lambda _: self.wake())

    async def close(self) -> None:
        """Cancel every agent and forget their keys."""
        await cancel_until_done(self._tasks.values())
        self._tasks.clear()
        if self._own_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    # --- what agents share ---------------------------------------------------------------------------------

    def node_credential(
        self, server: str, node: str, key: ec.EllipticCurvePrivateKey, certificate: bytes
    ) -> KubeCredential:
        """The node's client certificate and key as files (only the owner may read them)."""
        cert_file, key_file = self._dir / f"{node}.crt", self._dir / f"{node}.key"
        key_file.touch(mode=0o600)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        cert_file.write_bytes(certificate)
        return KubeCredential(server, self.ca_pem, cert_file=cert_file, key_file=key_file)

    def node_manifest(self, vm_name: str, node_name: str, boot: NodeBootstrap) -> dict[str, Any]:
        """The Node a kubelet with these flags registers on this VM."""
        vm = self.arm.vm(vm_name)
        assert vm is not None
        properties = vm.properties
        size = str((properties.get("hardwareProfile") or {}).get("vmSize", ""))
        instance_type = self._types.get(size.lower())
        capacity = node_capacity(instance_type, boot, properties)
        node_labels = {**boot.labels, labels.HOSTNAME: node_name}
        if boot.node_image_version:
            node_labels[NODE_IMAGE_VERSION_LABEL] = boot.node_image_version
        windows = windows_node_info(boot.node_image_version) if boot.windows else {}
        if boot.windows:
            node_labels[labels.OS] = "windows"
        if "windowsBuild" in windows:
            node_labels[labels.WINDOWS_BUILD] = windows["windowsBuild"]
        version = boot.kubernetes_version
        settings = self.arm.settings
        addresses = [{"type": "Hostname", "address": node_name}]
        if address := self._private_ip(vm):
            addresses.insert(0, {"type": "InternalIP", "address": address})
        now = _now()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": node_labels,
                "annotations": {
                    KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                    NODE_CONFIG_ANNOTATION: node_config(boot),
                },
            },
            "spec": {
                "providerID": provider_id(settings.subscription_id, vm.resource_group, vm.name),
                "taints": [
                    taint.model_dump(mode="json", exclude_none=True, by_alias=True) for taint in boot.taints
                ],
            },
            "status": {
                "capacity": format_resources(capacity),
                "allocatable": format_resources(node_allocatable(capacity, boot)),
                "addresses": addresses,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "container runtime is starting",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "kubeletVersion": f"v{version.removeprefix('v')}" if version else "",
                    "operatingSystem": node_labels.get(labels.OS, "linux"),
                    "architecture": node_labels.get(labels.ARCH, "amd64"),
                    "containerRuntimeVersion": CONTAINER_RUNTIME,
                    "systemUUID": str(properties.get("vmId") or ""),
                    "machineID": str(properties.get("vmId") or "").replace("-", ""),
                    "bootID": "",
                    "kernelVersion": windows.get("kernelVersion", ""),
                    "kubeProxyVersion": "",
                    "osImage": windows.get("osImage", ""),
                },
            },
        }

    def _private_ip(self, vm: Resource) -> str | None:
        """The first private IP address of the VM's NICs (what the kubelet reports as InternalIP)."""
        network = vm.properties.get("networkProfile") or {}
        for reference in network.get("networkInterfaces") or []:
            nic = self.arm.nic(str(reference.get("id", "")).rsplit("/", 1)[-1], vm.resource_group)
            for ip in (nic.properties.get("ipConfigurations") or []) if nic else []:
                address = (ip.get("properties") or {}).get("privateIPAddress")
                if address:
                    return str(address)
        return None

    async def remove_startup_taints(self, vm_name: str, node_name: str) -> None:
        """As the cluster add-on: remove the startup taints of the VM's tag and of its NodeClaim."""
        vm = self.arm.vm(vm_name)
        tags = vm.tags if vm is not None else {}
        keys = {key for key in tags.get(STARTUP_TAINTS_TAG, "").split(",") if key}
        claim_name = tags.get(NODECLAIM_TAG) or vm_name.removeprefix(VM_PREFIX)
        attempts, backoff = self.settings.api_attempts, self.settings.api_max_backoff
        claim = await retrying(lambda: self.addon.get(f"{NODECLAIM_PATH}/{claim_name}"), attempts, backoff)
        for taint in ((claim or {}).get("spec") or {}).get("startupTaints") or []:
            keys.add(str(taint.get("key")))
        if not keys:
            return
        for _ in range(attempts):
            node = await retrying(lambda: self.addon.get(node_path(node_name)), attempts, backoff)
            if node is None:
                return
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [taint for taint in taints if taint.get("key") not in keys]
            if len(kept) == len(taints):
                return
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept},
            }
            try:
                await retrying(
                    functools.partial(self.addon.patch, node_path(node_name), patch), attempts, backoff
                )
            except KubeApiError as error:
                if error.status == 409:
                    continue  # the Node changed meanwhile: read it again
                raise
            logger.info("removed startup taints %s from node %s", ", ".join(sorted(keys)), node_name)
            return
        logger.warning("node %s kept changing; its startup taints were not removed", node_name)
