"""The simulated AKS driven through `SimulatorClient` over HTTP, with the simulation loop running: the paths
the NodeClaim lifecycle takes (launch, register, initialize, drain, delete) and the typed errors it relies on."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from core import labels
from core.api.kube import Pod, PodPhase, is_node_ready
from core.api.kube import is_pod_ready as is_ready
from core.api.meta import Taint, TaintEffect
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import StatusCondition
from core.cloudprovider import LaunchRequest
from core.cluster import EventType, WatchEvent
from core.errors import (
    InvalidError,
    NotFoundError,
    Offering,
    PDBViolationError,
)
from simulator.arm import Fault
from simulator.client import SimulatorClient
from simulator.server import SimulatorSettings
from tests.simulator.conftest import (
    UNREGISTERED,
    Running,
    cluster_token,
    delete_vm,
    deployment,
    eventually,
    example_manifests,
    launch,
    launch_request,
    nodeclaim,
    pdb,
    serve,
)

ARM_NODE = Offering("Standard_D4ps_v5", "eastus-2", "on-demand")
"""The offering the examples' `inflate` deployment selects."""


def arm_request(name: str, taints: list[Taint] | None = None) -> LaunchRequest:
    """A launch of the arm64 offering, with the labels the lifecycle gives such a node."""
    identity = {
        labels.INSTANCE_TYPE: ARM_NODE.instance_type,
        labels.ZONE: ARM_NODE.zone,
        labels.CAPACITY_TYPE: ARM_NODE.capacity_type,
        labels.ARCH: "arm64",
        labels.OS: "linux",
    }
    return launch_request(
        name,
        ARM_NODE.instance_type,
        ARM_NODE.zone,
        ARM_NODE.capacity_type,
        taints=taints,
        node_labels=identity,
    )


def unschedulable(pod: Pod) -> bool:
    return any(
        (c.type, c.status, c.reason) == ("PodScheduled", "False", "Unschedulable")
        for c in pod.status.conditions
    )


def running(pod: Pod) -> bool:
    return pod.status.phase == PodPhase.RUNNING and is_ready(pod)


async def app_pods(client: SimulatorClient, app: str) -> list[Pod]:
    return await client.list_pods("default", label_selector=f"app={app}")


async def ready_node(sim: Running, name: str, **request: Any) -> str:
    """Launch a VM without taints and wait for its node to be Ready; the node's name."""
    launch(sim, launch_request(name, taints=[], **request))
    node_name = f"aks-{name}"

    async def ready() -> bool:
        node = await sim.client.get_node(node_name)
        return node is not None and is_node_ready(node)

    await eventually(ready)
    return node_name


async def test_scaled_example_pods_are_pending_and_unschedulable_without_nodes(sim: Running) -> None:
    results = await sim.client.apply(example_manifests())
    assert {"nodepool/default created", "deployment/default/inflate created"} <= set(results)

    await sim.client.scale("Deployment", "default", "inflate", 3)

    async def provisionable() -> list[Pod]:
        pods = await app_pods(sim.client, "inflate")
        return pods if len(pods) == 3 and all(map(unschedulable, pods)) else []

    pods = await eventually(provisionable)
    assert all(not pod.spec.node_name and pod.status.phase == PodPhase.PENDING for pod in pods)
    snapshot = await sim.client.snapshot()
    assert [pool.name for pool in snapshot.nodepools] == ["default"]
    assert len(snapshot.pods) == 3 and snapshot.problems == []


async def test_a_launched_instance_registers_and_takes_the_pods_that_fit_once_registered(
    sim: Running,
) -> None:
    client = sim.client
    await client.apply(example_manifests())
    await client.scale("Deployment", "default", "inflate", 5)
    provider_id = launch(sim, arm_request("default-x"))

    node = await eventually(lambda: client.find_node_by_provider_id(provider_id))
    assert node is not None
    assert node.metadata.name == "aks-default-x"
    assert node.metadata.labels[labels.INSTANCE_TYPE] == "Standard_D4ps_v5"
    assert node.metadata.labels[labels.ARCH] == "arm64"
    assert node.spec.taints == [UNREGISTERED]

    async def daemon_running() -> bool:
        return any(running(pod) for pod in await client.list_pods_on_node("aks-default-x"))

    await eventually(daemon_running)
    assert [pod.metadata.labels["app"] for pod in await client.list_pods_on_node("aks-default-x")] == [
        "log-agent"
    ]

    await client.patch_node(
        "aks-default-x", labels={labels.REGISTERED: "true"}, remove_taint_keys=[UNREGISTERED.key]
    )

    async def placed() -> list[Pod]:
        pods = await app_pods(client, "inflate")
        return pods if sum(map(running, pods)) == 3 and sum(map(unschedulable, pods)) == 2 else []

    pods = await eventually(placed)
    assert {pod.spec.node_name for pod in pods if running(pod)} == {"aks-default-x"}


async def test_the_cluster_holds_a_bootstrap_token_secret_and_says_where_its_arm_is(sim: Running) -> None:
    info = await sim.client.cluster_info()
    namespace, _, name = info.bootstrap_token_secret.partition("/")
    secret = await sim.client.get_secret(namespace, name)

    assert secret is not None and namespace == "kube-system"
    assert name == f"bootstrap-token-{secret['token-id']}"
    assert f"{secret['token-id']}.{secret['token-secret']}" == cluster_token(sim.simulator)
    assert secret["usage-bootstrap-authentication"] == "true"
    assert secret["token-secret"] not in info.model_dump_json()
    assert (info.cluster_name, info.location, info.kubernetes_version) == ("nodewright", "eastus", "1.33.5")
    assert await sim.client.get_secret("kube-system", "missing") is None


async def test_arm_faults_and_counters_go_through_the_client(sim: Running) -> None:
    client = sim.client
    first = await client.add_fault(Fault.sku_not_available(ARM_NODE.instance_type, ARM_NODE.zone, times=1))
    second = await client.add_fault(Fault.throttle(3.0, times=1))
    assert [fault.id for fault in await client.faults()] == [first.id, second.id] == ["f1", "f2"]
    assert [fault.id for fault in sim.simulator.arm.faults()] == ["f1", "f2"]
    await client.remove_fault(first.id)
    assert [fault.id for fault in await client.faults()] == ["f2"]
    with pytest.raises(NotFoundError):
        await client.remove_fault(first.id)
    await client.clear_faults()
    assert await client.faults() == []

    launch(sim, launch_request("default-x"))
    counters = await client.counters()
    assert (counters.vms_created, counters.nics_created) == (1, 1)


async def test_a_vm_told_never_to_register_gets_no_node(sim: Running) -> None:
    await sim.client.never_register("aks-default-silent")
    launch(sim, launch_request("default-silent", taints=[]))
    await ready_node(sim, "default-loud")
    assert await sim.client.get_node("aks-default-silent") is None


async def test_a_vms_custom_data_can_be_read_back_for_tests(sim: Running) -> None:
    launch(sim, launch_request("default-x"))
    custom_data = await sim.client.custom_data("aks-default-x")
    assert cluster_token(sim.simulator) in base64.b64decode(custom_data).decode()
    with pytest.raises(NotFoundError):
        await sim.client.custom_data("aks-missing")


async def test_eviction_is_refused_while_the_budget_is_spent_and_allowed_once_it_recovers(
    sim: Running,
) -> None:
    client = sim.client
    await client.apply([deployment("web", 2, cpu="100m"), pdb("web", "web", minAvailable=1)])
    await ready_node(sim, "default-x")

    async def all_running() -> list[Pod]:
        pods = await app_pods(client, "web")
        return pods if len(pods) == 2 and all(map(running, pods)) else []

    first, second = await eventually(all_running)
    await client.update_settings({"kubelet": {"pod_ready_delay": 60}})
    await client.evict_pod("default", first.metadata.name)
    with pytest.raises(PDBViolationError):
        await client.evict_pod("default", second.metadata.name)

    await client.update_settings({"kubelet": {"pod_ready_delay": 0}})

    async def evicted() -> bool:
        try:
            await client.evict_pod("default", second.metadata.name)
        except PDBViolationError:
            return False
        return True

    await eventually(evicted)
    await client.evict_pod("default", "already-gone")


async def test_a_nodeclaim_with_a_finalizer_lives_until_the_finalizer_is_removed(sim: Running) -> None:
    client = sim.client
    claim = NodeClaim.parse(nodeclaim("default-x", finalizers=[labels.TERMINATION_FINALIZER]))
    created = await client.create_nodeclaim(claim)
    assert (await client.create_nodeclaim(claim)).metadata.uid == created.metadata.uid

    launched = created.model_copy(deep=True)
    launched.status.provider_id = "azure:///subscriptions/s/resourceGroups/rg/providers/x/default-x"
    launched.status.conditions = [StatusCondition(type="Launched", status="True", reason="Launched")]
    launched.spec.taints = [Taint(key="ignored", effect=TaintEffect.NO_SCHEDULE)]
    updated = await client.update_nodeclaim_status(launched)
    assert updated.status.provider_id == launched.status.provider_id and updated.is_true(
        NodeClaimConditionType.LAUNCHED
    )
    assert updated.spec == created.spec, "a status update leaves the spec alone"

    labelled = await client.patch_nodeclaim_metadata("default-x", labels={"team": "blue"})
    assert labelled is not None and labelled.labels["team"] == "blue"

    await client.delete_nodeclaim("default-x")
    marked = await client.get_nodeclaim("default-x")
    assert marked is not None and marked.metadata.deletion_timestamp is not None

    await client.patch_nodeclaim_metadata("default-x", remove_finalizers=[labels.TERMINATION_FINALIZER])
    assert await client.get_nodeclaim("default-x") is None
    assert await client.patch_nodeclaim_metadata("default-x", labels={"x": "y"}) is None
    await client.delete_nodeclaim("default-x")


async def test_deleting_a_node_waits_for_its_finalizer_then_its_pods_are_rescheduled(sim: Running) -> None:
    client = sim.client
    await client.apply([deployment("web", 2, cpu="100m")])
    name = await ready_node(sim, "default-x")
    await client.patch_node(name, add_finalizers=[labels.TERMINATION_FINALIZER])

    await client.delete_node(name)
    node = await client.get_node(name)
    assert node is not None and node.metadata.deletion_timestamp is not None
    with pytest.raises(InvalidError, match="no new finalizers"):
        await client.patch_node(name, add_finalizers=["example.com/late"])
    assert len(await client.list_pods_on_node(name)) == 2

    await client.patch_node(name, remove_finalizers=[labels.TERMINATION_FINALIZER])
    assert await client.get_node(name) is None

    async def pending_again() -> list[Pod]:
        pods = await app_pods(client, "web")
        return pods if len(pods) == 2 and all(map(unschedulable, pods)) else []

    await eventually(pending_again)


async def test_concurrent_node_patches_all_land(sim: Running) -> None:
    client = sim.client
    name = await ready_node(sim, "default-x")
    await asyncio.gather(*(client.patch_node(name, labels={f"patch-{i}": "yes"}) for i in range(8)))
    node = await client.get_node(name)
    assert node is not None
    assert {f"patch-{i}" for i in range(8)} <= set(node.metadata.labels)


async def test_a_watch_from_a_version_replays_the_later_changes_then_follows_new_ones(sim: Running) -> None:
    client = sim.client
    _, since = await client.snapshot_with_version()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}
    await client.apply([node, node | {"metadata": {"name": "b"}}])
    await client.delete_object("Node", "a")

    stream = client.watch(since)
    replayed = [await anext(stream) for _ in range(3)]
    await client.apply([node | {"metadata": {"name": "b", "labels": {"x": "y"}}}])
    live: WatchEvent = await asyncio.wait_for(anext(stream), 5)
    await stream.aclose()

    events = [*replayed, live]
    assert [(event.type, event.name) for event in events] == [
        (EventType.ADDED, "a"),
        (EventType.ADDED, "b"),
        (EventType.DELETED, "a"),
        (EventType.MODIFIED, "b"),
    ]
    assert [event.resource_version for event in events] == [since + 1, since + 2, since + 3, since + 4]
    assert live.object["metadata"]["labels"] == {"x": "y"}


async def test_scaling_down_deletes_pods(sim: Running) -> None:
    client = sim.client
    await client.apply([deployment("web", 3)])
    assert len(await app_pods(client, "web")) == 3
    await client.scale("Deployment", "default", "web", 1)
    assert len(await app_pods(client, "web")) == 1


async def test_deleting_a_vm_makes_its_node_not_ready(sim: Running) -> None:
    client = sim.client
    name = await ready_node(sim, "default-x")
    delete_vm(sim.simulator.arm, "default-x")

    async def not_ready() -> bool:
        node = await client.get_node(name)
        return node is not None and not is_node_ready(node)

    await eventually(not_ready)
    assert sim.simulator.arm.vm(name) is None


async def test_bad_requests_are_typed_errors_that_name_the_problem(sim: Running) -> None:
    client = sim.client
    bad = deployment("web", 1)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(InvalidError, match=r"Deployment default/web: spec\.template\.spec\.containers\[0\]"):
        await client.apply([bad])
    with pytest.raises(InvalidError, match="unknown kind"):
        await client.scale("Gadget", "default", "web", 1)
    with pytest.raises(NotFoundError):
        await client.scale("Deployment", "default", "missing", 1)
    with pytest.raises(InvalidError, match="a VM name"):
        await client._call("POST", "/kubelet/never-register", {})
    assert await client.get_nodeclaim("missing") is None
    assert await client.get_node("missing") is None


async def scenario(seed: int) -> tuple[dict[str, str], str, str]:
    """Apply the examples, scale, launch a node and wait for the pods; the uids and the node's identity."""
    async with serve(SimulatorSettings.instant(seed=seed)) as sim:
        client = sim.client
        await client.apply(example_manifests())
        await client.scale("Deployment", "default", "inflate", 2)
        provider_id = launch(sim, arm_request("default-x", taints=[]))

        async def settled() -> list[Pod]:
            pods = await client.list_pods()
            return pods if len(pods) == 3 and all(map(running, pods)) else []

        pods = await eventually(settled)
        node = await client.get_node("aks-default-x")
        assert node is not None
        return {pod.metadata.name: pod.metadata.uid for pod in pods}, node.metadata.uid, provider_id


async def test_the_same_seed_gives_the_same_cluster() -> None:
    first, again, other = await scenario(7), await scenario(7), await scenario(8)
    assert first == again
    assert first[0].keys() == other[0].keys()
    assert set(first[0].values()).isdisjoint(other[0].values()) and first[1] != other[1]
