"""Builders and fixtures for the simulated AKS: a fake clock for step-by-step tests, a launch request, a VM made
in the ARM emulator's state the way the Azure provider makes it (NIC, VM with the bootstrap custom data), small
manifests, a simulator served on a real port with its client, and `eventually` for what the loop does."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest_asyncio
from aiohttp.test_utils import TestServer

from activities.azure.bootstrap import BootstrapRequest, render_script
from activities.azure.names import NodeNames, nic_id, provider_id
from activities.azure.vm import azure_zones, nic_body, node_tags, vm_body
from core import labels
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import LaunchRequest
from core.instancetypes.catalog import load_shipped_catalog
from simulator.arm import DEFAULT_SUBSCRIPTION, ArmState, Call, OperationStatus, Resource
from simulator.client import SimulatorClient
from simulator.nodeboot import BOOTSTRAP_NAMESPACE, token_of
from simulator.server import Simulator, SimulatorSettings, create_app
from simulator.state import SECRET, ClusterState

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"
UNREGISTERED = Taint(key=labels.UNREGISTERED_TAINT, effect=TaintEffect.NO_EXECUTE)

T = TypeVar("T")


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def launch_request(
    name: str = "default-abcde",
    instance_type: str = "Standard_D4s_v5",
    zone: str = "eastus-1",
    capacity_type: str = "on-demand",
    taints: list[Taint] | None = None,
    node_labels: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
) -> LaunchRequest:
    return LaunchRequest(
        name=name,
        nodepool="default",
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        labels={labels.NODEPOOL: "default", **(node_labels or {})},
        taints=[UNREGISTERED] if taints is None else taints,
        tags=tags or {},
    )


CLUSTER = "nodewright"
"""The simulator's default cluster name."""
SUBNET = (
    f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/MC_nodewright_nodewright_eastus/providers/"
    "Microsoft.Network/virtualNetworks/aks-vnet-12345678/subnets/aks-subnet"
)
IMAGE_VERSION = "AKSUbuntu-2204gen2containerd-202512.18.0"
IMAGE = {
    "communityGalleryImageId": "/CommunityGalleries/AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2/images/"
    "2204gen2containerd/versions/202512.18.0"
}


def create_vm(
    arm: ArmState,
    request: LaunchRequest,
    token: str,
    *,
    cluster: str = CLUSTER,
    custom_data: str | None = None,
    finish: bool = True,
) -> Resource:
    """A NIC and a VM for the launch, with the bodies and bootstrap the Azure provider sends, made directly in
    the emulator's state; `finish` runs the VM's create to its end. `custom_data` replaces the bootstrap."""
    names = NodeNames.of(request.name)
    group = arm.settings.resource_group
    region = arm.settings.region
    sku = load_shipped_catalog(region).sku(request.instance_type)
    tags = node_tags(cluster, request.nodepool, request.name, request.tags)
    script = render_script(
        BootstrapRequest(request, "1.33.5", IMAGE_VERSION, max_pods=250), f"{cluster}.hcp.azmk8s.io", token
    )
    nic = nic_body(name=names.nic, location=region, subnet_id=SUBNET, accelerated_networking=False, tags=tags)
    arm.put_nic(group, names.nic, nic, Call("PUT", "networkInterfaces", names.nic))
    body = vm_body(
        names=names,
        location=region,
        sku=sku,
        zone=request.zone,
        capacity_type=request.capacity_type,
        os_disk_size_gb=30,
        image=IMAGE,
        nic_id=nic_id(arm.settings.subscription_id, group, names.nic),
        admin_username="azureuser",
        ssh_public_key="ssh-ed25519 AAAA test",
        custom_data=custom_data if custom_data is not None else base64.b64encode(script.encode()).decode(),
        tags=tags,
    )
    zones = azure_zones(request.zone, region)
    call = Call(
        "PUT",
        "virtualMachines",
        names.vm,
        vm_size=request.instance_type,
        zone=zones[0] if zones else "",
        capacity_type=request.capacity_type,
    )
    _, vm, operation = arm.put_vm(group, names.vm, body, call)
    while finish and arm.poll(operation.id).status is OperationStatus.IN_PROGRESS:
        pass
    return vm


def cluster_token(simulator: Simulator) -> str:
    """The bootstrap token of the simulated cluster (from its Secret)."""
    [secret] = simulator.state.objects(SECRET.name, BOOTSTRAP_NAMESPACE)
    token = token_of(secret)
    assert token is not None
    return token


def launch(sim: Running, request: LaunchRequest) -> str:
    """A VM for the launch in the served simulator's ARM, as the provider makes it; its Node's provider ID."""
    simulator = sim.simulator
    create_vm(simulator.arm, request, cluster_token(simulator), cluster=simulator.settings.cluster_name)
    arm = simulator.arm.settings
    return provider_id(arm.subscription_id, arm.resource_group, NodeNames.of(request.name).vm)


def delete_vm(arm: ArmState, name: str) -> None:
    """Delete a launch's VM (and with it its NIC) and run the delete to its end."""
    vm_name = NodeNames.of(name).vm
    group = arm.settings.resource_group
    operation = (
        arm.begin_delete(vm.type, group, vm_name, Call("DELETE", "virtualMachines", vm_name))
        if (vm := arm.vm(vm_name))
        else None
    )
    while operation is not None and arm.poll(operation.id).status is OperationStatus.IN_PROGRESS:
        pass


def deployment(name: str, replicas: int, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    """A Deployment manifest whose pods request `cpu` and carry `app: <name>`; `spec` adds pod spec fields."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}], **spec},
            },
        },
    }


def pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def nodeclaim(
    name: str, finalizers: list[str] | None = None, startup_taints: Sequence[Taint] = ()
) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels.NODEPOOL: "default"}, "finalizers": finalizers or []},
        "spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            "requirements": [{"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
            "startupTaints": [taint.model_dump(mode="json", exclude_none=True) for taint in startup_taints],
        },
    }


def stored(state: ClusterState, kind: str, name: str, namespace: str | None = None) -> Any:
    """The stored object, which the test expects to exist."""
    obj = state.get(kind, name, namespace)
    assert obj is not None, f"{kind} {namespace or ''}/{name} is not stored"
    return obj


def example_manifests() -> str:
    """Every file of `deploy/examples/` as one multi-document YAML text."""
    return "\n---\n".join(path.read_text() for path in sorted(EXAMPLES.glob("*.yaml")))


async def eventually(check: Callable[[], Awaitable[T]], timeout: float = 5.0) -> T:
    """The first truthy result of `check`, polled until `timeout` (then the test fails)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout} s; last result: {result!r}")
        await asyncio.sleep(0.01)


@dataclass
class Running:
    simulator: Simulator
    client: SimulatorClient


@asynccontextmanager
async def serve(settings: SimulatorSettings) -> AsyncIterator[Running]:
    """A simulator served on a free port of 127.0.0.1 with its loop running, and a client for it."""
    simulator = Simulator(settings)
    server = TestServer(create_app(simulator), host="127.0.0.1")
    await server.start_server()
    client = SimulatorClient(str(server.make_url("")), timeout=10.0)
    try:
        yield Running(simulator, client)
    finally:
        await client.close()
        await server.close()


@pytest_asyncio.fixture
async def sim() -> AsyncIterator[Running]:
    """A simulator without delays."""
    async with serve(SimulatorSettings.instant(seed=1)) as running:
        yield running
