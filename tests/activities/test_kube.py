"""The Kubernetes side of the activities against the simulated AKS: NodeClaims created by planning, their
conditions, and Karpenter's events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.kube import KubeActivities
from activities.planning import PlanningActivities
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import ConditionUpdate, LifecycleInput, PlanInput
from simulator.client import SimulatorClient
from simulator.server import SimulatorSettings, serve

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"


@pytest.fixture
async def sim() -> AsyncIterator[SimulatorClient]:
    async with serve(SimulatorSettings.instant(3)) as url, SimulatorClient(url) as client:
        for path in sorted(EXAMPLES.glob("*.yaml")):
            await client.apply(path.read_text())
        yield client


async def events(sim: SimulatorClient, reason: str) -> list[dict[str, object]]:
    return [event for event in await sim.list_objects("Event") if event["reason"] == reason]


async def planned_claim(sim: SimulatorClient, replicas: int = 2) -> str:
    """Scale the pinned example deployment and let planning create a NodeClaim for it."""
    await sim.scale("Deployment", "default", "inflate", replicas)
    started: list[str] = []

    async def start(request: LifecycleInput) -> None:
        started.append(request.nodeclaim.name)

    planning = PlanningActivities(sim, load_shipped_catalog("eastus"), start)
    for _ in range(50):
        plan = await ActivityEnvironment().run(planning.plan_provisioning, PlanInput(cluster="test"))
        if plan.nodeclaims:
            assert started == [claim.name for claim in plan.nodeclaims]
            return plan.nodeclaims[0].name
    raise AssertionError("planning never saw the pending pods")


async def test_planning_creates_nodeclaims_and_nominates_their_pods(sim: SimulatorClient) -> None:
    name = await planned_claim(sim)
    claim = await sim.get_nodeclaim(name)
    assert claim is not None and "karpenter.sh/termination" in claim.metadata.finalizers
    assert claim.requirements().get("node.kubernetes.io/instance-type").values == {"Standard_D4ps_v5"}
    nominated = await events(sim, "Nominated")
    assert len(nominated) == 2
    assert all(e["message"] == f"Pod should schedule on: nodeclaim/{name}" for e in nominated)


async def test_ready_follows_launched_registered_initialized(sim: SimulatorClient) -> None:
    name = await planned_claim(sim)
    activities = KubeActivities(sim)
    environment = ActivityEnvironment()
    for condition in ("Launched", "Registered"):
        await environment.run(
            activities.update_nodeclaim, ConditionUpdate(name=name, type=condition, status="True")
        )
        claim = await sim.get_nodeclaim(name)
        assert claim is not None and not claim.status.is_true("Ready")
    await environment.run(
        activities.update_nodeclaim, ConditionUpdate(name=name, type="Initialized", status="True")
    )
    claim = await sim.get_nodeclaim(name)
    assert claim is not None and claim.status.is_true("Ready")


async def test_a_launch_failure_is_recorded_as_a_warning_event(sim: SimulatorClient) -> None:
    name = await planned_claim(sim)
    activities = KubeActivities(sim)
    environment = ActivityEnvironment()
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
    [event] = await events(sim, "InsufficientCapacityError")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "NodeClaim"  # type: ignore[index]
    assert not await environment.run(
        activities.update_nodeclaim, update.model_copy(update={"name": "missing"})
    )
