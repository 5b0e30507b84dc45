"""The conditions the lifecycle's activities write, against a real API server: Registered and Initialized
Unknown with Karpenter's reasons while they wait, and the drain's Drained with Karpenter's minimum drain time."""

from __future__ import annotations

import uuid
from typing import cast

from activities.kube import KubeActivities
from activities.lifecycle import LifecycleActivities
from core.cloudprovider import CloudProvider
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import DrainInput, InitializeInput, RegisterInput
from tests.activities.test_kube import planned_claim
from tests.cluster import activity_environment
from workers.simulated_aks import SimulatedAks


async def test_a_drained_node_counts_as_drained_only_after_the_minimum_drain_time(aks: SimulatedAks) -> None:
    name, _ = await planned_claim(aks)
    node = f"aks-empty-{uuid.uuid4().hex[:6]}"
    await aks.kube.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}])
    activities = KubeActivities(aks.kube)
    environment = activity_environment()

    early = await environment.run(
        activities.drain_node, DrainInput(node=node, nodeclaim=name, min_drain_seconds=3600)
    )
    assert early.remaining == 0 and 3590 < early.settle_seconds <= 3600
    claim = await aks.kube.get_nodeclaim(name)
    draining = claim.status.condition("Drained") if claim is not None else None
    assert draining is not None and (draining.status, draining.reason, draining.message) == (
        "Unknown",
        "Draining",
        "Draining",
    )

    done = await environment.run(activities.drain_node, DrainInput(node=node, nodeclaim=name))
    assert (done.remaining, done.settle_seconds) == (0, 0)
    claim = await aks.kube.get_nodeclaim(name)
    drained = claim.status.condition("Drained") if claim is not None else None
    assert drained is not None and (drained.status, drained.reason) == ("True", "Drained")
    assert drained.last_transition_time is not None and draining.last_transition_time is not None
    assert drained.last_transition_time >= draining.last_transition_time

    # An attempt retried after one that marked it Drained (its worker killed before it answered) is done too.
    again = await environment.run(
        activities.drain_node, DrainInput(node=node, nodeclaim=name, min_drain_seconds=5)
    )
    assert (again.remaining, again.settle_seconds) == (0, 0)


async def test_registration_and_initialization_say_what_they_wait_for(aks: SimulatedAks) -> None:
    name, _ = await planned_claim(aks)
    activities = LifecycleActivities(aks.kube, cast(CloudProvider, None), load_shipped_catalog("eastus"))
    environment = activity_environment()
    provider_id = (
        f"azure:///subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/virtualMachines/{name}"
    )

    missing = RegisterInput(nodeclaim=name, provider_id=provider_id)
    assert await environment.run(activities.register_nodeclaim, missing) is None
    claim = await aks.kube.get_nodeclaim(name)
    registered = claim.status.condition("Registered") if claim is not None else None
    assert registered is not None and (registered.status, registered.reason, registered.message) == (
        "Unknown",
        "NodeNotFound",
        "Node not registered with cluster",
    )

    node = f"aks-{uuid.uuid4().hex[:6]}"
    startup = {"key": "example.com/agent-not-ready", "value": "true", "effect": "NoSchedule"}
    manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node},
        "spec": {"taints": [startup]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]},
    }
    await aks.kube.apply([manifest])
    request = InitializeInput(nodeclaim=name, node=node, startup_taints=[startup["key"]])

    async def initialized() -> tuple[str, str, str]:
        await environment.run(activities.initialize_nodeclaim, request)
        found = await aks.kube.get_nodeclaim(name)
        condition = found.status.condition("Initialized") if found is not None else None
        assert condition is not None
        return condition.status.value, condition.reason, condition.message

    assert await initialized() == ("Unknown", "NodeNotReady", "Node status is NotReady")
    manifest["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    await aks.kube.apply([manifest])
    await aks.kube.patch_node(node, remove_taint_keys=["node.kubernetes.io/not-ready"])
    assert await initialized() == (
        "Unknown",
        "StartupTaintsExist",
        'StartupTaint "example.com/agent-not-ready=true:NoSchedule" still exists',
    )
    found = await aks.kube.get_nodeclaim(name)
    ready = found.status.condition("Ready") if found is not None else None
    assert ready is not None and (ready.status.value, ready.reason) == ("Unknown", "ReconcilingDependents")
