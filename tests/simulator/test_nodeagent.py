"""The node agent against a real control plane: a VM the ARM emulator boots joins by TLS bootstrap with the token
of its custom data and registers its own Node as `system:node:<name>`; kwok makes it Ready; the startup taints
go; a wrong or expired token never joins; a deleted VM's node turns Unknown; a Spot VM's eviction shows as
`PreemptionScheduled=True` for its whole notice (kwok keeps it), then the node turns Unknown; so does a VM that
vanishes. And the emulated AKS's control API.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from cryptography import x509

from activities.azure.bootstrap import bootstrap_request, render_script
from activities.azure.names import NodeNames, nic_id
from activities.azure.vm import azure_zones, nic_body, node_tags, vm_body
from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import LaunchRequest
from core.instancetypes.azure import kube_reserved, memory_capacity
from core.instancetypes.catalog import load_shipped_catalog
from core.resources import format_resources
from simulator.aks import AksSettings, EmulatedAks, serve_aks
from simulator.aks_client import AksEmulatorClient
from simulator.arm import Fault
from simulator.kubeapi import (
    STRATEGIC_MERGE_PATCH,
    KubeApi,
    KubeApiError,
    KubeCredential,
    load_kubeconfig,
    node_path,
)
from simulator.nodeagent import (
    CSR_PATH,
    KWOK_ANNOTATION,
    NODE_CONFIG_ANNOTATION,
    NODECLAIM_PATH,
    PREEMPTION_CONDITION,
    NodeAgent,
    NodeAgentSettings,
    Phase,
    cancel_until_done,
    node_allocatable,
    node_capacity,
    preemption_message,
    provider_id,
    shipped_instance_types,
)
from simulator.nodeboot import NodeBootstrap
from tests.builders import configured_nodeclass_spec
from tests.cluster import eventually as wait_for
from workers.controlplane.run import BootstrapToken, ControlPlane

T = TypeVar("T")

IMAGE_VERSION = "AKSUbuntu-2204gen2containerd-202512.18.0"
IMAGE = {
    "communityGalleryImageId": "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/"
    "2204gen2containerd/versions/202512.18.0"
}
UNREGISTERED = Taint(key=labels.UNREGISTERED_TAINT, effect=TaintEffect.NO_EXECUTE)
STARTUP = Taint(key="node.cilium.io/agent-not-ready", value="true", effect=TaintEffect.NO_EXECUTE)
TAGGED_STARTUP = Taint(key="example.com/agent-not-ready", effect=TaintEffect.NO_SCHEDULE)


async def eventually(check: Callable[[], Awaitable[T]], what: str, timeout: float = 30.0) -> T:
    """`tests.cluster.eventually` with this module's longer default: agents on a loaded machine take seconds."""
    return await wait_for(check, timeout, what)


@dataclass
class Cluster:
    """An emulated AKS around the shared control plane, the SDK clients of its ARM, and an admin."""

    plane: ControlPlane
    aks: EmulatedAks
    compute: ComputeManagementClient
    network: NetworkManagementClient
    admin: KubeApi

    @property
    def token(self) -> str:
        token = self.plane.bootstrap_token
        return f"{token.token_id}.{token.token_secret}"

    async def launch(
        self,
        name: str,
        token: str,
        *,
        startup_taints: tuple[Taint, ...] = (),
        tags: dict[str, str] | None = None,
        api_server: str | None = None,
        capacity_type: str = "on-demand",
        nodeclass: AKSNodeClass | None = None,
        instance_type: str = "Standard_D4s_v5",
    ) -> str:
        """A NIC and a VM for NodeClaim `name`, made through ARM as the Azure provider makes them, with the
        bootstrap rendered for this cluster, `token` and `nodeclass`; the VM's name."""
        info = self.aks.info
        sku = load_shipped_catalog(info.location).sku(instance_type)
        request = LaunchRequest(
            name=name,
            nodepool="default",
            instance_type=instance_type,
            zone=f"{info.location}-1",
            capacity_type=capacity_type,
            labels={labels.NODEPOOL: "default", labels.CAPACITY_TYPE: capacity_type},
            taints=[UNREGISTERED, *startup_taints],
            tags=tags or {},
        )
        names = NodeNames.of(name)
        group = info.resource_group
        max_pods = nodeclass.resolved_max_pods() if nodeclass is not None else 250
        script = render_script(
            bootstrap_request(request, nodeclass, sku, info.kubernetes_version, IMAGE_VERSION, max_pods),
            api_server or info.api_server,
            token,
        )
        vm_tags = node_tags(info.cluster_name, request.nodepool, name, request.tags)
        nic = nic_body(
            name=names.nic,
            location=info.location,
            subnet_id=info.subnet_id,
            accelerated_networking=False,
            tags=vm_tags,
        )
        await (await self.network.network_interfaces.begin_create_or_update(group, names.nic, nic)).result()
        body = vm_body(
            names=names,
            location=info.location,
            sku=sku,
            zone=request.zone,
            capacity_type=request.capacity_type,
            os_disk_size_gb=nodeclass.spec.os_disk_size_gb if nodeclass is not None else 30,
            image=IMAGE,
            nic_id=nic_id(info.subscription_id, group, names.nic),
            admin_username="azureuser",
            ssh_public_key="ssh-ed25519 AAAA test",
            custom_data=base64.b64encode(script.encode()).decode(),
            tags=vm_tags,
        )
        assert azure_zones(request.zone, info.location) == ["1"]
        poller = await self.compute.virtual_machines.begin_create_or_update(group, names.vm, body)
        await poller.result()
        return names.vm

    async def delete_vm(self, vm_name: str) -> None:
        poller = await self.compute.virtual_machines.begin_delete(self.aks.info.resource_group, vm_name)
        await poller.result()

    async def node(self, name: str) -> dict[str, Any] | None:
        return await self.admin.get(node_path(name))

    async def agent_phase(self, vm_name: str, *phases: Phase) -> Phase | None:
        agent = self.aks.agents.agent(vm_name)
        return agent.phase if agent is not None and agent.phase in phases else None


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(control_plane: ControlPlane) -> AsyncIterator[Cluster]:
    settings = AksSettings.instant(seed=5)
    settings.cluster_name = f"c-{uuid.uuid4().hex[:8]}"
    async with serve_aks(
        settings,
        api_server=control_plane.server,
        ca_file=control_plane.ca_file,
        bootstrap_token_secret=control_plane.bootstrap_token_secret,
        addon_kubeconfig=control_plane.kubeconfig,
    ) as aks:
        options = aks.arm.client_options()
        credential = aks.arm.credential()
        subscription = aks.info.subscription_id
        async with (
            ComputeManagementClient(credential, subscription, **options) as compute,
            NetworkManagementClient(credential, subscription, **options) as network,
            KubeApi(load_kubeconfig(control_plane.kubeconfig)) as admin,
        ):
            yield Cluster(control_plane, aks, compute, network, admin)


def taint_keys(node: dict[str, Any]) -> set[str]:
    return {taint["key"] for taint in node["spec"].get("taints") or []}


def ready(node: dict[str, Any] | None) -> str | None:
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def nodeclaim(name: str, *startup_taints: Taint) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels.NODEPOOL: "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            "requirements": [{"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
            "startupTaints": [taint.model_dump(mode="json", exclude_none=True) for taint in startup_taints],
        },
    }


def claim_name() -> str:
    return f"default-{uuid.uuid4().hex[:6]}"


async def test_a_booted_vm_joins_by_tls_bootstrap_and_registers_its_own_node(cluster: Cluster) -> None:
    name = claim_name()
    await cluster.admin.create(NODECLAIM_PATH, nodeclaim(name, STARTUP))
    vm = await cluster.launch(
        name,
        cluster.token,
        startup_taints=(STARTUP, TAGGED_STARTUP),
        tags={"nodewright/startup-taints": TAGGED_STARTUP.key},
    )

    node = await eventually(lambda: cluster.node(vm), "the Node is registered")
    agent = cluster.aks.agents.agent(vm)
    assert agent is not None and agent.csr_name is not None

    # The CSR was made by the bootstrap token's user, approved by kube-controller-manager and signed.
    csr = await cluster.admin.get(f"{CSR_PATH}/{agent.csr_name}")
    assert csr is not None
    assert csr["spec"]["username"] == f"system:bootstrap:{cluster.plane.bootstrap_token.token_id}"
    assert "system:bootstrappers" in csr["spec"]["groups"]
    assert csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert {c["type"]: c["status"] for c in csr["status"]["conditions"]} == {"Approved": "True"}
    certificate = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
    assert certificate.subject.rfc4514_string() == f"CN=system:node:{vm},O=system:nodes"

    # That certificate is the node's identity, and the Node was written by the agent alone (then kwok).
    credential = agent.credential
    assert credential is not None
    async with KubeApi(credential) as as_node:
        review = await as_node.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert review["status"]["userInfo"]["username"] == f"system:node:{vm}"
    assert "system:nodes" in review["status"]["userInfo"]["groups"]
    managers = {entry["manager"] for entry in node["metadata"]["managedFields"]}
    assert managers <= {
        "nodewright-node-agent",
        "nodewright-cluster-addon",
        "kwok",
        "kube-controller-manager",
    }
    spec_owners = [
        e["manager"] for e in node["metadata"]["managedFields"] if "f:providerID" in str(e["fieldsV1"])
    ]
    assert spec_owners == ["nodewright-node-agent"]

    # What the kubelet flags and the VM say.
    info = cluster.aks.info
    assert node["spec"]["providerID"] == provider_id(info.subscription_id, info.resource_group, vm)
    node_labels = node["metadata"]["labels"]
    assert node_labels[labels.NODEPOOL] == "default"
    assert node_labels[labels.HOSTNAME] == vm
    assert node_labels["kubernetes.azure.com/node-image-version"] == IMAGE_VERSION
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert node["status"]["capacity"]["cpu"] == "4"
    assert node["status"]["capacity"]["pods"] == "250"
    assert node["status"]["allocatable"]["cpu"] == "3860m"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{info.kubernetes_version}"

    # kwok makes it Ready; then the startup taint goes (by the add-on credential) and the others stay.
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the node is initialized")
    node = await cluster.node(vm)
    assert node is not None and ready(node) == "True"
    assert STARTUP.key not in taint_keys(node)
    assert TAGGED_STARTUP.key not in taint_keys(node)
    assert labels.UNREGISTERED_TAINT in taint_keys(node)
    taint_owners = [
        e["manager"] for e in node["metadata"]["managedFields"] if "f:taints" in str(e["fieldsV1"])
    ]
    # NodeRestriction: a node may not change its taints, so the add-on removed them. The taint list is atomic: its
    # owner is its last writer, the add-on, or kube-controller-manager when it took the not-ready taint off after.
    assert taint_owners in (["nodewright-cluster-addon"], ["kube-controller-manager"])

    # The VM goes: the node stops posting its status and leaves kwok.
    await cluster.delete_vm(vm)

    async def unknown() -> dict[str, Any] | None:
        current = await cluster.node(vm)
        return current if ready(current) == "Unknown" else None

    node = await eventually(unknown, "the Node is Unknown")
    condition = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert condition["reason"] == "NodeStatusUnknown"
    assert condition["message"] == "Kubelet stopped posting node status."
    assert KWOK_ANNOTATION not in (node["metadata"].get("annotations") or {})
    await asyncio.sleep(0.5)
    assert ready(await cluster.node(vm)) == "Unknown"
    await cluster.admin.request("DELETE", node_path(vm))
    await cluster.admin.request("DELETE", f"{NODECLAIM_PATH}/{name}")


async def test_a_node_shows_what_its_aksnodeclass_configured(cluster: Cluster) -> None:
    """kubelet, maxPods, linuxOSConfig, FIPS, LocalDNS and artifact streaming, each as the Node shows it: labels,
    capacity and allocatable, and (emulator only) the node-config annotation."""
    nodeclass = AKSNodeClass.parse(
        {"kind": "AKSNodeClass", "metadata": {"name": "configured"}, "spec": configured_nodeclass_spec()}
    )
    name = claim_name()
    vm = await cluster.launch(name, cluster.token, nodeclass=nodeclass)
    node = await eventually(lambda: cluster.node(vm), "the Node is registered")

    node_labels = node["metadata"]["labels"]
    assert node_labels["kubernetes.azure.com/fips_enabled"] == "true"
    assert node_labels["kubernetes.azure.com/localdns-state"] == "enabled"
    assert node_labels["kubernetes.azure.com/artifactstreaming-enabled"] == "true"
    assert "kubernetes.azure.com/accelerator" not in node_labels  # a D4s_v5 has no GPU
    # Capacity: the size's CPU and memory, maxPods, the OS disk; allocatable less kube-reserved and eviction.
    sku = load_shipped_catalog(cluster.aks.info.location).sku("Standard_D4s_v5")
    memory = memory_capacity(sku.memory_gib, 0.075)
    reserved = kube_reserved(sku.vcpus, sku.memory_gib)
    assert node["status"]["capacity"] == format_resources(
        {"cpu": 4000, "memory": memory, "pods": 42, "ephemeral-storage": 128 * 10**9}
    )
    assert node["status"]["allocatable"] == format_resources(
        {
            "cpu": 4000 - reserved["cpu"],
            "memory": memory - reserved["memory"] - 750 * 2**20,
            "pods": 42,
            "ephemeral-storage": 128 * 10**9,
        }
    )
    config = json.loads(node["metadata"]["annotations"][NODE_CONFIG_ANNOTATION])
    assert {
        key: config["kubelet"][key] for key in ("cpu-manager-policy", "max-pods", "image-gc-high-threshold")
    } == {
        "cpu-manager-policy": "static",
        "max-pods": "42",
        "image-gc-high-threshold": "70",
    }
    assert config["kubelet"]["topology-manager-policy"] == "single-numa-node"
    assert config["kubelet"]["pod-max-pids"] == "4096"
    assert config["sysctls"] == {
        "net.core.somaxconn": "16384",
        "net.ipv4.ip_local_port_range": "32000 60000",
        "net.ipv4.tcp_tw_reuse": "1",
        "vm.max_map_count": "262144",
    }
    variables = config["variables"]
    assert (variables["THP_ENABLED"], variables["SWAP_FILE_SIZE_MB"]) == ("madvise", "2048")
    assert (
        variables["SHOULD_ENABLE_LOCALDNS"] == "true"
        and "bind 169.254.10.11" in variables["LOCALDNS_GENERATED_COREFILE"]
    )
    await cluster.delete_vm(vm)
    await cluster.admin.request("DELETE", node_path(vm))


async def test_a_vm_made_again_with_the_same_name_takes_its_node_over(cluster: Cluster) -> None:
    name = claim_name()
    vm = await cluster.launch(name, cluster.token)
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the first VM's node is initialized")
    await cluster.delete_vm(vm)

    async def stopped() -> bool:
        return ready(await cluster.node(vm)) == "Unknown"

    await eventually(stopped, "the first VM's node stopped")

    await cluster.launch(name, cluster.token)

    await eventually(
        lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the second VM's node is initialized"
    )
    node = await cluster.node(vm)
    assert node is not None and ready(node) == "True"
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    await cluster.delete_vm(vm)
    await cluster.admin.request("DELETE", node_path(vm))


class ApiServerOutage:
    """A port in front of the API server that refuses connections, as an API server that is down, until `end()`
    makes it pass every connection through (TLS and all) to the real one."""

    def __init__(self, server: str) -> None:
        self.upstream = server.removeprefix("https://").rstrip("/").rpartition(":")
        self._down = socket.socket()
        self._down.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._down.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        self.port = self._down.getsockname()[1]
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def end(self) -> None:
        self._down.close()
        self._server = await asyncio.start_server(self._pass, "127.0.0.1", self.port, reuse_address=True)

    async def _pass(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = self.upstream
        up_reader, up_writer = await asyncio.open_connection(host, int(port))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        self._down.close()
        if self._server is not None:
            self._server.close()


async def test_an_agent_keeps_joining_through_an_api_server_outage_as_a_kubelet_does(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    settings = cluster.aks.agents.settings
    settings.api_max_backoff = timedelta(milliseconds=10)
    settings.rejoin_max_backoff = timedelta(milliseconds=200)
    outage = ApiServerOutage(cluster.plane.server)
    try:
        vm = await cluster.launch(claim_name(), cluster.token, api_server=outage.address)

        async def retried() -> bool:
            agent = cluster.aks.agents.agent(vm)
            return agent is not None and agent.retries >= 3

        await eventually(retried, "the agent tries again while the API server is down")
        assert await cluster.agent_phase(vm, Phase.BOOTSTRAPPING) is Phase.BOOTSTRAPPING
        await outage.end()
        await eventually(
            lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the node joins once the API server answers"
        )
    finally:
        await outage.close()
        defaults = NodeAgentSettings()
        settings.api_max_backoff, settings.rejoin_max_backoff = (
            defaults.api_max_backoff,
            defaults.rejoin_max_backoff,
        )
    retries = [
        r.getMessage() for r in caplog.records if vm in r.getMessage() and "tries again" in r.getMessage()
    ]
    assert retries and all(cluster.token not in line for line in retries)
    node = await cluster.node(vm)
    assert node is not None and ready(node) == "True"
    await cluster.delete_vm(vm)
    await cluster.admin.request("DELETE", node_path(vm))


async def test_a_csr_made_by_a_try_whose_answer_was_lost_is_waited_for(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy API server made the CSR but its answer never came: the try again finds it there (409) and the
    agent waits for it to be signed, as a kubelet would, instead of giving up on the node."""
    real_create = KubeApi.create
    lost: list[str] = []

    async def answer_lost_once(self: KubeApi, path: str, body: Mapping[str, Any]) -> Any:
        made = await real_create(self, path, body)
        if path == CSR_PATH and not lost:
            lost.append(body["metadata"]["name"])
            raise KubeApiError(0, "Timeout", "no answer within the request's timeout")
        return made

    monkeypatch.setattr(KubeApi, "create", answer_lost_once)
    vm = await cluster.launch(claim_name(), cluster.token)
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the node joins")
    agent = cluster.aks.agents.agent(vm)
    assert agent is not None and lost == [agent.csr_name]
    assert ready(await cluster.node(vm)) == "True"
    await cluster.delete_vm(vm)
    await cluster.admin.request("DELETE", node_path(vm))


async def test_a_crashed_agent_is_replaced_and_its_node_joins_again(cluster: Cluster) -> None:
    vm = await cluster.launch(claim_name(), cluster.token)
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the node joins")
    first = cluster.aks.agents.agent(vm)
    assert first is not None
    async with AksEmulatorClient(cluster.aks.arm.url, cluster.aks.arm.ca_pem) as client:
        await client.crash_agent(vm)
        with pytest.raises(Exception, match="has no node agent"):
            await client.crash_agent("aks-nothing")

    async def replaced() -> NodeAgent | None:
        agent = cluster.aks.agents.agent(vm)
        return (
            agent if agent is not None and agent is not first and agent.phase is Phase.INITIALIZED else None
        )

    second = await eventually(replaced, "a new agent joins")
    assert second.csr_name != first.csr_name, "the new agent bootstraps its own credential"
    assert ready(await cluster.node(vm)) == "True"
    await cluster.delete_vm(vm)
    await cluster.admin.request("DELETE", node_path(vm))


async def refused(cluster: Cluster, vm: str, caplog: pytest.LogCaptureFixture, secret: str) -> None:
    """The VM's node was refused: no Node, one warning naming the VM and never the token."""
    await eventually(lambda: cluster.agent_phase(vm, Phase.REFUSED), "the node is refused")
    assert await cluster.node(vm) is None
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and vm in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert "401" in warnings[0]
    assert all(secret not in r.getMessage() for r in caplog.records)


async def test_a_wrong_token_never_joins(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    wrong = f"{cluster.plane.bootstrap_token.token_id}.0123456789abcdef"
    vm = await cluster.launch(claim_name(), wrong)

    await refused(cluster, vm, caplog, "0123456789abcdef")


async def test_a_refused_token_is_tried_again_within_the_grace(cluster: Cluster) -> None:
    """As a kubelet restarted by systemd: an API server that just started refuses bootstrap tokens for a while."""
    settings = cluster.aks.agents.settings
    settings.bootstrap_refusal_grace = timedelta(seconds=60)
    try:
        wrong = f"{cluster.plane.bootstrap_token.token_id}.0123456789abcdef"
        vm = await cluster.launch(claim_name(), wrong)

        async def retried() -> bool:
            agent = cluster.aks.agents.agent(vm)
            return agent is not None and agent.retries >= 2

        await eventually(retried, "the agent tries again")
        assert await cluster.agent_phase(vm, Phase.BOOTSTRAPPING) is Phase.BOOTSTRAPPING
        settings.bootstrap_refusal_grace = timedelta(0)
        await eventually(lambda: cluster.agent_phase(vm, Phase.REFUSED), "refused once the grace is over")
    finally:
        settings.bootstrap_refusal_grace = NodeAgentSettings().bootstrap_refusal_grace
    await cluster.delete_vm(vm)


async def test_an_expired_token_never_joins(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    expired = BootstrapToken.generate()
    secret = expired.secret()
    secret["stringData"]["expiration"] = (datetime.now(UTC) - timedelta(hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    await asyncio.to_thread(cluster.plane.apply, [secret])
    try:
        vm = await cluster.launch(claim_name(), f"{expired.token_id}.{expired.token_secret}")

        await refused(cluster, vm, caplog, expired.token_secret)
    finally:
        await asyncio.to_thread(
            cluster.plane.kubectl,
            "delete",
            "secret",
            "-n",
            "kube-system",
            expired.secret_name,
            "--ignore-not-found",
        )


async def test_a_vm_that_never_registers_makes_no_csr_and_no_node(cluster: Cluster) -> None:
    name = claim_name()
    vm = NodeNames.of(name).vm
    cluster.aks.agents.never_register(vm)
    await cluster.launch(name, cluster.token)

    await eventually(lambda: cluster.agent_phase(vm, Phase.NEVER_REGISTERS), "the agent gives up at once")
    agent = cluster.aks.agents.agent(vm)
    assert agent is not None and agent.csr_name is None
    assert await cluster.node(vm) is None
    await cluster.delete_vm(vm)


async def test_the_control_api(cluster: Cluster) -> None:
    aks = cluster.aks
    async with AksEmulatorClient(aks.arm.url, aks.arm.ca_pem) as client:
        assert await client.cluster_info() == aks.info
        assert aks.info.api_server == cluster.plane.server.removeprefix("https://")
        assert aks.info.bootstrap_token_secret == cluster.plane.bootstrap_token_secret

        fault = await client.add_fault(Fault.throttle(retry_after=2, resource="skus"))
        assert [f.id for f in await client.faults()] == [fault.id]
        await client.remove_fault(fault.id)
        await client.add_fault(Fault.transient(500, resource="skus"))
        await client.clear_faults()
        assert await client.faults() == []

        before = (await client.counters()).vms_created
        name = claim_name()
        vm = NodeNames.of(name).vm
        await client.never_register(vm)
        await cluster.launch(name, cluster.token)
        assert (await client.counters()).vms_created == before + 1
        custom_data = await client.custom_data(vm)
        assert cluster.token in base64.b64decode(custom_data).decode()
        await eventually(lambda: cluster.agent_phase(vm, Phase.NEVER_REGISTERS), "never registers")

        settings = await client.update_settings({"agent": {"boot_delay": 2.5}})
        assert settings.agent.boot_delay == timedelta(seconds=2.5)
        assert aks.agents.settings.boot_delay == timedelta(seconds=2.5)
        await client.update_settings({"agent": {"boot_delay": 0}})
        with pytest.raises(Exception, match="cluster_name cannot change"):
            await client.update_settings({"cluster_name": "other"})
        with pytest.raises(Exception, match="No VM"):
            await client.custom_data("aks-nothing")
        await cluster.delete_vm(vm)


async def test_the_api_server_certificate_is_verified_with_the_cluster_ca(cluster: Cluster) -> None:
    """A node image with another CA does not trust the API server (nothing is switched off)."""
    wrong = KubeCredential(cluster.plane.server, cluster.aks.arm.ca_pem.read_text(), token=cluster.token)
    async with KubeApi(wrong) as api:
        with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await api.request("GET", "/version")


def condition(node: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


async def test_a_spot_node_reports_its_preemption_then_stops_when_its_vm_is_evicted(cluster: Cluster) -> None:
    aks = cluster.aks
    vm = await cluster.launch(claim_name(), cluster.token, capacity_type="spot")
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the spot node is initialized")

    # The real SDK call, with the notice shrunk through the settings.
    async with AksEmulatorClient(aks.arm.url, aks.arm.ca_pem) as client:
        await client.update_settings({"arm": {"eviction_notice": 8}})
        try:
            await cluster.compute.virtual_machines.simulate_eviction(aks.info.resource_group, vm)
        finally:
            await client.update_settings({"arm": {"eviction_notice": 30}})
        [event] = (await client.scheduled_events(vm))["Events"]
    not_before = parsedate_to_datetime(event["NotBefore"])

    async def preemption() -> dict[str, Any] | None:
        return condition(await cluster.node(vm), PREEMPTION_CONDITION)

    reported = await eventually(preemption, "the node reports PreemptionScheduled")
    assert (reported["status"], reported["reason"]) == ("True", "SpotEvictionIncoming")
    assert reported["message"] == (
        f"Preempt Scheduled: {event['NotBefore']}. For more information, see https://aka.ms/aks/scheduledevents. "
        f"EventId: {event['EventId']}"
    )
    # Parsed as the AKS provider's interruption handling parses it: the deadline and the event.
    parsed = re.search(
        r"Preempt Scheduled:\s*(?P<at>[^.]+)\..*EventId:\s*(?P<id>[0-9A-F-]{36})", reported["message"]
    )
    assert parsed is not None
    assert parsedate_to_datetime(parsed["at"]) == not_before
    assert parsed["id"] == event["EventId"]
    assert datetime.fromisoformat(reported["lastTransitionTime"]) <= datetime.now(UTC)
    # Written by the node itself, through the status subresource.
    node = await cluster.node(vm)
    assert node is not None
    writers = [
        (entry["manager"], entry.get("subresource"))
        for entry in node["metadata"]["managedFields"]
        if PREEMPTION_CONDITION in str(entry.get("fieldsV1"))
    ]
    assert writers == [("nodewright-node-agent", "status")]

    # kwok patches Node status by strategic merge on condition type: make it write the node's status again (it
    # sets Ready back to True), and the condition, which the agent writes only once, is still there.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    not_ready = {"type": "Ready", "status": "False", "reason": "Test", "message": "kwok sets it back"}
    not_ready |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
    await cluster.admin.patch(
        node_path(vm, "status"), {"status": {"conditions": [not_ready]}}, STRATEGIC_MERGE_PATCH
    )

    async def ready_again() -> dict[str, Any] | None:
        current = await cluster.node(vm)
        return (
            current
            if (condition(current, "Ready") or {}).get("reason") != "Test" and ready(current) == "True"
            else None
        )

    node = await eventually(ready_again, "kwok rewrote the node's status")
    assert condition(node, PREEMPTION_CONDITION) == reported

    # The condition holds for the whole notice; at NotBefore the VM is deleted and the node stops.
    while aks.arm.state.vm(vm) is not None:
        assert condition(await cluster.node(vm), PREEMPTION_CONDITION) == reported
        await asyncio.sleep(0.1)
    assert datetime.now(UTC) >= not_before
    assert aks.arm.state.counters.vms_evicted == 1

    async def unknown() -> dict[str, Any] | None:
        current = await cluster.node(vm)
        return current if ready(current) == "Unknown" else None

    node = await eventually(unknown, "the evicted VM's node is Unknown")
    assert condition(node, PREEMPTION_CONDITION) == reported
    await cluster.admin.request("DELETE", node_path(vm))


async def test_a_vanished_vms_node_stops(cluster: Cluster) -> None:
    aks = cluster.aks
    vm = await cluster.launch(claim_name(), cluster.token)
    await eventually(lambda: cluster.agent_phase(vm, Phase.INITIALIZED), "the node is initialized")

    async with AksEmulatorClient(aks.arm.url, aks.arm.ca_pem) as client:
        await client.vanish(vm)

    async def unknown() -> bool:
        return ready(await cluster.node(vm)) == "Unknown"

    await eventually(unknown, "the vanished VM's node is Unknown")
    assert condition(await cluster.node(vm), PREEMPTION_CONDITION) is None
    await cluster.admin.request("DELETE", node_path(vm))


def test_the_kubelet_reserves_what_its_flags_say() -> None:
    boot = NodeBootstrap(
        token="t",
        kubelet={
            "max-pods": "30",
            "kube-reserved": "cpu=100m,memory=1Gi",
            "system-reserved": "cpu=50m",
            "eviction-hard": "memory.available<750Mi,nodefs.available<10%",
        },
    )
    instance_type = shipped_instance_types("eastus")["standard_d2s_v3"]
    capacity = node_capacity(instance_type, boot, {"storageProfile": {"osDisk": {"diskSizeGB": 64}}})
    assert capacity["pods"] == 30 and capacity["ephemeral-storage"] == 64 * 10**9
    allocatable = node_allocatable(capacity, boot)
    assert allocatable["cpu"] == capacity["cpu"] - 150
    assert allocatable["memory"] == capacity["memory"] - 2**30 - 750 * 2**20
    assert allocatable["pods"] == 30
    # Without reservations (a bootstrap that sets none), allocatable is capacity.
    assert node_allocatable(capacity, NodeBootstrap(token="t")) == capacity


def test_the_preemption_message_is_the_one_aks_writes() -> None:
    event = {
        "EventId": "40B7BD88-C56E-44E4-93F6-75CEDACE2869",
        "EventType": "Preempt",
        "EventStatus": "Scheduled",
    }
    scheduled = {**event, "NotBefore": "Tue, 24 Nov 2026 14:00:30 GMT"}
    assert preemption_message(scheduled) == (
        "Preempt Scheduled: Tue, 24 Nov 2026 14:00:30 GMT. For more information, see "
        "https://aka.ms/aks/scheduledevents. EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869"
    )
    started = {**event, "EventStatus": "Started", "NotBefore": ""}
    assert preemption_message(started) == (
        "Preempt Started. For more information, see https://aka.ms/aks/scheduledevents. "
        "EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869"
    )


async def test_a_task_that_takes_a_cancellation_for_something_else_is_cancelled_again() -> None:
    """A cancellation that arrives as an HTTP timeout fires can become a timeout error, which the agent's retry
    loop carries on from: stopping an agent, or all of them, cancels until the task has ended."""
    swallowed: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_until_done([task], every=0.05), timeout=5)
    assert task.cancelled() and swallowed == [1]
