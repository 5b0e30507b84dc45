"""The simulated AKS driven through `SimulatorClient` over HTTP, with the simulation loop running: the paths
the NodeClaim lifecycle takes (launch, register, initialize, drain, delete) and the typed errors it relies on."""

from __future__ import annotations

import asyncio
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
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    PDBViolationError,
    QuotaExceededError,
    ThrottledError,
)
from simulator.client import SimulatorClient
from simulator.compute import Fault, FaultType
from simulator.server import SimulatorSettings
from tests.simulator.conftest import (
    UNREGISTERED,
    Running,
    deployment,
    eventually,
    example_manifests,
    launch_request,
    nodeclaim,
    pdb,
    serve,
)

ARM_NODE = Offering("Standard_D4ps_v5", "eastus-2", "on-demand")
"""The offering the examples' `inflate` deployment selects."""


def arm_request(name: str, taints: list[Taint] | None = None) -> LaunchRequest:
    return launch_request(name, ARM_NODE.instance_type, ARM_NODE.zone, ARM_NODE.capacity_type, taints=taints)


def unschedulable(pod: Pod) -> bool:
    return any(
        (c.type, c.status, c.reason) == ("PodScheduled", "False", "Unschedulable")
        for c in pod.status.conditions
    )


def running(pod: Pod) -> bool:
    return pod.status.phase == PodPhase.RUNNING and is_ready(pod)


async def app_pods(client: SimulatorClient, app: str) -> list[Pod]:
    return await client.list_pods("default", label_selector=f"app={app}")


async def ready_node(client: SimulatorClient, name: str, **request: Any) -> None:
    """Launch an instance without taints and wait for its node to be Ready."""
    await client.create(launch_request(name, taints=[], **request))

    async def ready() -> bool:
        node = await client.get_node(name)
        return node is not None and is_node_ready(node)

    await eventually(ready)


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
    instance = await client.create(arm_request("default-x"))

    node = await eventually(lambda: client.find_node_by_provider_id(instance.provider_id))
    assert node is not None
    assert node.metadata.name == "default-x"
    assert node.metadata.labels[labels.INSTANCE_TYPE] == "Standard_D4ps_v5"
    assert node.metadata.labels[labels.ARCH] == "arm64"
    assert node.spec.taints == [UNREGISTERED]

    async def daemon_running() -> bool:
        return any(running(pod) for pod in await client.list_pods_on_node("default-x"))

    await eventually(daemon_running)
    assert [pod.metadata.labels["app"] for pod in await client.list_pods_on_node("default-x")] == [
        "log-agent"
    ]

    await client.patch_node(
        "default-x", labels={labels.REGISTERED: "true"}, remove_taint_keys=[UNREGISTERED.key]
    )

    async def placed() -> list[Pod]:
        pods = await app_pods(client, "inflate")
        return pods if sum(map(running, pods)) == 3 and sum(map(unschedulable, pods)) == 2 else []

    pods = await eventually(placed)
    assert {pod.spec.node_name for pod in pods if running(pod)} == {"default-x"}


async def test_creating_an_instance_twice_makes_one(sim: Running) -> None:
    first = await sim.client.create(launch_request("default-x"))
    second = await sim.client.create(launch_request("default-x"))
    assert first == second
    counters = await sim.client.counters()
    assert (counters.creates_attempted, counters.instances_created) == (2, 1)
    assert [instance.name for instance in await sim.client.list()] == ["default-x"]


async def test_injected_faults_arrive_as_typed_errors(sim: Running) -> None:
    client = sim.client
    capacity = Fault(
        type=FaultType.INSUFFICIENT_CAPACITY,
        instance_type=ARM_NODE.instance_type,
        zone=ARM_NODE.zone,
        capacity_type=ARM_NODE.capacity_type,
        times=1,
    )
    await client.add_fault(capacity)
    await client.add_fault(Fault(type=FaultType.QUOTA_EXCEEDED, scope="spot", capacity_type="spot", times=1))
    await client.add_fault(
        Fault(type=FaultType.THROTTLED, operations=["get"], retry_after_seconds=3, times=1)
    )
    assert [fault.id for fault in await client.faults()] == ["f1", "f2", "f3"]

    with pytest.raises(InsufficientCapacityError) as capacity_error:
        await client.create(arm_request("default-x"))
    assert capacity_error.value.offering == ARM_NODE
    with pytest.raises(QuotaExceededError) as quota_error:
        await client.create(launch_request("default-y", capacity_type="spot"))
    assert quota_error.value.scope == "spot"
    with pytest.raises(ThrottledError) as throttled:
        await client.get("default-x")
    assert throttled.value.retry_after_seconds == 3
    with pytest.raises(NotFoundError):
        await client.get("default-x")
    assert (await client.counters()).instances_created == 0

    throttle_everything = await client.add_fault(Fault(type=FaultType.THROTTLED))
    await client.remove_fault(throttle_everything.id)
    await client.add_fault(Fault(type=FaultType.NEVER_REGISTER, name="default-silent"))
    await client.create(launch_request("default-silent"))
    await ready_node(client, "default-loud")
    assert await client.get_node("default-silent") is None
    assert (await client.get("default-silent")).state == "Running"


async def test_eviction_is_refused_while_the_budget_is_spent_and_allowed_once_it_recovers(
    sim: Running,
) -> None:
    client = sim.client
    await client.apply([deployment("web", 2, cpu="100m"), pdb("web", "web", minAvailable=1)])
    await ready_node(client, "default-x")

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
    await ready_node(client, "default-x")
    await client.patch_node("default-x", add_finalizers=[labels.TERMINATION_FINALIZER])

    await client.delete_node("default-x")
    node = await client.get_node("default-x")
    assert node is not None and node.metadata.deletion_timestamp is not None
    with pytest.raises(InvalidError, match="no new finalizers"):
        await client.patch_node("default-x", add_finalizers=["example.com/late"])
    assert len(await client.list_pods_on_node("default-x")) == 2

    await client.patch_node("default-x", remove_finalizers=[labels.TERMINATION_FINALIZER])
    assert await client.get_node("default-x") is None

    async def pending_again() -> list[Pod]:
        pods = await app_pods(client, "web")
        return pods if len(pods) == 2 and all(map(unschedulable, pods)) else []

    await eventually(pending_again)


async def test_concurrent_node_patches_all_land(sim: Running) -> None:
    client = sim.client
    await ready_node(client, "default-x")
    await asyncio.gather(*(client.patch_node("default-x", labels={f"patch-{i}": "yes"}) for i in range(8)))
    node = await client.get_node("default-x")
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


async def test_deleting_an_instance_makes_its_node_not_ready_and_deleting_again_is_done(sim: Running) -> None:
    client = sim.client
    await ready_node(client, "default-x")
    await client.delete("default-x")

    async def gone() -> bool:
        node = await client.get_node("default-x")
        return node is not None and not is_node_ready(node) and await client.list() == []

    await eventually(gone)
    await client.delete("default-x")
    with pytest.raises(NotFoundError):
        await client.get("default-x")


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
    with pytest.raises(InvalidError, match="not offered"):
        await client.create(launch_request(instance_type="Standard_Nope"))
    assert await client.get_nodeclaim("missing") is None
    assert await client.get_node("missing") is None


async def scenario(seed: int) -> tuple[dict[str, str], str, str]:
    """Apply the examples, scale, launch a node and wait for the pods; the uids and the node's identity."""
    async with serve(SimulatorSettings.instant(seed=seed)) as sim:
        client = sim.client
        await client.apply(example_manifests())
        await client.scale("Deployment", "default", "inflate", 2)
        instance = await client.create(arm_request("default-x", taints=[]))

        async def settled() -> list[Pod]:
            pods = await client.list_pods()
            return pods if len(pods) == 3 and all(map(running, pods)) else []

        pods = await eventually(settled)
        node = await client.get_node("default-x")
        assert node is not None
        return {pod.metadata.name: pod.metadata.uid for pod in pods}, node.metadata.uid, instance.provider_id


async def test_the_same_seed_gives_the_same_cluster() -> None:
    first, again, other = await scenario(7), await scenario(7), await scenario(8)
    assert first == again
    assert first[0].keys() == other[0].keys()
    assert set(first[0].values()).isdisjoint(other[0].values()) and first[1] != other[1]
