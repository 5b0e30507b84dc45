"""The Kubernetes activities against the simulated AKS: NodeClaim objects, conditions, events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import ActivityEnvironment

from activities.kube import KubeActivities
from core.messages import ConditionUpdate, PlannedNodeClaim
from simulator.client import SimulatorClient
from simulator.server import SimulatorSettings, serve


@pytest.fixture
async def sim() -> AsyncIterator[SimulatorClient]:
    async with serve(SimulatorSettings.instant(3)) as url, SimulatorClient(url) as client:
        yield client


def planned(name: str = "default-abcde", pods: list[str] | None = None) -> PlannedNodeClaim:
    return PlannedNodeClaim(
        name=name,
        nodepool="default",
        nodeclass="default",
        instance_type_options=["Standard_D2s_v5"],
        launch_candidates=[],
        requirements=[{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
        labels={"karpenter.sh/nodepool": "default"},
        pods=pods or [],
    )


async def events(sim: SimulatorClient, reason: str) -> list[dict[str, object]]:
    return [event for event in await sim.list_objects("Event") if event["reason"] == reason]


async def test_created_nodeclaims_nominate_their_pods(sim: SimulatorClient) -> None:
    activities = KubeActivities(sim)
    await ActivityEnvironment().run(
        activities.create_nodeclaims, [planned(pods=["default/web-1", "default/web-2"])]
    )
    claim = await sim.get_nodeclaim("default-abcde")
    assert claim is not None and "karpenter.sh/termination" in claim.metadata.finalizers
    nominated = await events(sim, "Nominated")
    assert sorted(e["involvedObject"]["name"] for e in nominated) == ["web-1", "web-2"]  # type: ignore[index]
    assert all(e["message"] == "Pod should schedule on: nodeclaim/default-abcde" for e in nominated)


async def test_ready_follows_launched_registered_initialized(sim: SimulatorClient) -> None:
    activities = KubeActivities(sim)
    environment = ActivityEnvironment()
    await environment.run(activities.create_nodeclaims, [planned()])
    for condition in ("Launched", "Registered"):
        await environment.run(
            activities.update_nodeclaim, ConditionUpdate(name="default-abcde", type=condition, status="True")
        )
        claim = await sim.get_nodeclaim("default-abcde")
        assert claim is not None and not claim.status.is_true("Ready")
    await environment.run(
        activities.update_nodeclaim, ConditionUpdate(name="default-abcde", type="Initialized", status="True")
    )
    claim = await sim.get_nodeclaim("default-abcde")
    assert claim is not None and claim.status.is_true("Ready")


async def test_a_launch_failure_is_recorded_as_a_warning_event(sim: SimulatorClient) -> None:
    activities = KubeActivities(sim)
    environment = ActivityEnvironment()
    await environment.run(activities.create_nodeclaims, [planned()])
    update = ConditionUpdate(
        name="default-abcde",
        type="Launched",
        status="False",
        reason="LaunchFailed",
        message="no offering could be launched",
        event_reason="InsufficientCapacityError",
        event_type="Warning",
    )
    assert await environment.run(activities.update_nodeclaim, update)
    [event] = await events(sim, "InsufficientCapacityError")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "NodeClaim"  # type: ignore[index]
    assert not await environment.run(
        activities.update_nodeclaim, update.model_copy(update={"name": "missing"})
    )
