"""The Kubernetes side of the activities against a real API server: NodeClaims created by planning for the pods
kube-scheduler could not place, their conditions, and Karpenter's `events.k8s.io/v1` events."""

from __future__ import annotations

from typing import Any, cast

import pytest

from activities.kube import KubeActivities
from activities.lifecycle import LifecycleActivities
from activities.planning import PlanningActivities
from core import labels
from core.cloudprovider import CloudProvider
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import ConditionUpdate, InitializeInput, LifecycleInput, PlanInput
from tests.cluster import activity_environment, apply_examples, events, record_calls, scale_pending
from workers.simulated_aks import SimulatedAks

UNINITIALIZED = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}
"""A not-ready taint nothing on the test control plane takes off (no cloud node controller runs)."""


def ready_node(name: str) -> dict[str, Any]:
    """A Node that is Ready but still carries `UNINITIALIZED`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": [UNINITIALIZED]},
        "status": {
            "allocatable": {"cpu": "2", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


async def planned_claim(aks: SimulatedAks, replicas: int = 2) -> tuple[str, list[str]]:
    """Scale the pinned example deployment, wait until kube-scheduler finds no node for its pods, and let one
    plan create a NodeClaim for them; its name and the pods."""
    await apply_examples(aks.kube)
    pods = await scale_pending(aks.kube, "inflate", replicas)
    started: list[str] = []

    async def start(request: LifecycleInput) -> None:
        started.append(request.nodeclaim.name)

    planning = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), start)
    plan = await activity_environment().run(planning.plan_provisioning, PlanInput(cluster="test"))
    assert plan.pods == replicas and plan.nodeclaims, f"planning saw no pending pods: {plan}"
    assert started == [claim.name for claim in plan.nodeclaims]
    return plan.nodeclaims[0].name, pods


async def test_planning_creates_nodeclaims_and_nominates_their_pods(aks: SimulatedAks) -> None:
    name, pods = await planned_claim(aks)
    claim = await aks.kube.get_nodeclaim(name)
    assert claim is not None and "karpenter.sh/termination" in claim.metadata.finalizers
    # Owned by the NodePool as it exists: an owner reference to any other UID gets the NodeClaim deleted by the
    # garbage collector.
    pool = await aks.kube.get_object("NodePool", "default")
    assert pool is not None
    owners = [(o.kind, o.name, o.uid) for o in claim.metadata.owner_references]
    assert owners == [("NodePool", "default", pool["metadata"]["uid"])]
    assert claim.requirements().get("node.kubernetes.io/instance-type").values == {"Standard_D4ps_v5"}
    nominated = await events(aks.kube, "Nominated", {pod.partition("/")[2] for pod in pods})
    assert sorted(f"default/{e['regarding']['name']}" for e in nominated) == pods
    assert all(e["note"] == f"Pod should schedule on: nodeclaim/{name}" for e in nominated)
    assert all(
        (e["type"], e["regarding"]["kind"], e["reportingController"]) == ("Normal", "Pod", "karpenter")
        for e in nominated
    )


async def test_ready_follows_launched_registered_initialized(aks: SimulatedAks) -> None:
    name, _ = await planned_claim(aks)
    activities = KubeActivities(aks.kube)
    environment = activity_environment()
    for condition in ("Launched", "Registered"):
        await environment.run(
            activities.update_nodeclaim, ConditionUpdate(name=name, type=condition, status="True")
        )
        claim = await aks.kube.get_nodeclaim(name)
        assert claim is not None and claim.status.is_true(condition) and not claim.status.is_true("Ready")
    await environment.run(
        activities.update_nodeclaim, ConditionUpdate(name=name, type="Initialized", status="True")
    )
    claim = await aks.kube.get_nodeclaim(name)
    assert claim is not None and claim.status.is_true("Ready")


async def test_a_launch_failure_is_recorded_as_a_warning_event(aks: SimulatedAks) -> None:
    name, _ = await planned_claim(aks)
    activities = KubeActivities(aks.kube)
    environment = activity_environment()
    update = ConditionUpdate(
        name=name,
        type="Launched",
        status="False",
        reason="LaunchFailed",
        message="no offering could be launched",
        event_reason="InsufficientCapacityError",
        event_type="Warning",
    )
    assert await environment.run(activities.update_nodeclaim, update)
    [event] = await events(aks.kube, "InsufficientCapacityError", {name})
    assert (event["type"], event["regarding"]["kind"], event["regarding"]["apiVersion"]) == (
        "Warning",
        "NodeClaim",
        "karpenter.sh/v1",
    )
    assert event["note"] == "no offering could be launched"
    claim = await aks.kube.get_nodeclaim(name)
    launched = claim.status.condition("Launched") if claim is not None else None
    assert launched is not None and (launched.status, launched.reason) == ("False", "LaunchFailed")
    assert not await environment.run(
        activities.update_nodeclaim, update.model_copy(update={"name": "missing"})
    )


async def test_a_ready_node_is_initialized_only_once_kubernetes_not_ready_taints_are_gone(
    aks: SimulatedAks,
) -> None:
    name, _ = await planned_claim(aks)
    node = ready_node("aks-initializing")
    await aks.kube.apply([node])
    activities = LifecycleActivities(aks.kube, cast(CloudProvider, None), load_shipped_catalog("eastus"))
    request = InitializeInput(nodeclaim=name, node="aks-initializing")

    state = await activity_environment().run(activities.initialize_nodeclaim, request)
    # The API server's admission adds not-ready to a new Node, too; kube-controller-manager takes it off.
    assert state.ready and UNINITIALIZED["key"] in state.ephemeral_taints_remaining
    assert not state.initialized  # kube-scheduler could not bind the pods nominated to it yet

    await aks.kube.patch_node("aks-initializing", remove_taint_keys=list(labels.KNOWN_EPHEMERAL_TAINTS))
    state = await activity_environment().run(activities.initialize_nodeclaim, request)
    assert state.initialized
    claim = await aks.kube.get_nodeclaim(name)
    assert claim is not None and claim.status.is_true("Initialized")


async def test_the_look_after_registration_reads_the_node_only_when_the_patch_answer_shows_it_waiting(
    aks: SimulatedAks, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, _ = await planned_claim(aks)
    node = ready_node("aks-joining")
    await aks.kube.apply([node])
    reads: list[str] = []
    record_calls(monkeypatch, aks.kube._core, "read_node", reads, lambda args: args[0])
    activities = LifecycleActivities(aks.kube, cast(CloudProvider, None), load_shipped_catalog("eastus"))
    request = InitializeInput(nodeclaim=name, node="aks-joining")

    # Registration's patch answers with a not-ready taint still on; the cloud's node controller takes it off a
    # moment later. The look reads the Node again rather than wait for a signal on what the patch showed.
    await aks.kube.patch_node("aks-joining", labels={labels.REGISTERED: "true"})
    aks.kube._core.patch_node("aks-joining", {"spec": {"taints": []}})
    reads.clear()
    state = await activity_environment().run(activities.initialize_nodeclaim, request)
    assert state.initialized and reads == ["aks-joining"]

    # When the patch's answer shows the Node initializable, it stands: no read (and the initialized label's
    # patch starts from it too).
    await aks.kube.apply([{**node, "metadata": {"name": "aks-joined"}}])
    await aks.kube.patch_node(
        "aks-joined",
        labels={labels.REGISTERED: "true"},
        remove_taint_keys=list(labels.KNOWN_EPHEMERAL_TAINTS),
    )
    reads.clear()
    joined = request.model_copy(update={"node": "aks-joined"})
    state = await activity_environment().run(activities.initialize_nodeclaim, joined)
    assert state.initialized and reads == []


async def test_deleting_a_nodeclaim_its_lifecycle_never_registered_deletes_its_node(
    aks: SimulatedAks,
) -> None:
    """A Node that joined after its NodeClaim's deletion began (the lifecycle never registered it) goes with the
    NodeClaim, as Karpenter deletes every Node with the NodeClaim's providerID; another Node stays."""
    name, _ = await planned_claim(aks)
    provider_id = (
        f"azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-{name}"
    )
    activities = KubeActivities(aks.kube)
    environment = activity_environment()
    await environment.run(
        activities.update_nodeclaim,
        ConditionUpdate(name=name, type="Launched", status="True", provider_id=provider_id),
    )
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "spec": {"providerID": provider}}
        for node, provider in ((f"aks-{name}", provider_id), (f"aks-{name}-other", f"{provider_id}-other"))
    ]
    await aks.kube.apply(nodes)

    await environment.run(activities.delete_nodeclaim, name)

    assert await aks.kube.get_nodeclaim(name) is None
    assert await aks.kube.get_node(f"aks-{name}") is None
    assert await aks.kube.get_node(f"aks-{name}-other") is not None
    await aks.kube.delete_node(f"aks-{name}-other")
