"""The planning activity's retry: a NodeClaim an earlier attempt created but could not start a lifecycle for
gets its lifecycle on the next attempt, and is not created twice."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.planning import PlanningActivities
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import LifecycleInput, PlanInput
from simulator.client import SimulatorClient
from simulator.server import SimulatorSettings, serve

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"


@pytest.fixture
async def sim() -> AsyncIterator[SimulatorClient]:
    async with serve(SimulatorSettings.instant(5)) as url, SimulatorClient(url) as client:
        for path in sorted(EXAMPLES.glob("*.yaml")):
            await client.apply(path.read_text())
        yield client


class Crash(Exception):
    """The worker dying between creating a NodeClaim and starting its lifecycle."""


async def test_a_retried_plan_starts_what_the_failed_attempt_created(sim: SimulatorClient) -> None:
    await sim.scale("Deployment", "default", "inflate", 2)
    started: list[str] = []

    async def crash(request: LifecycleInput) -> None:
        raise Crash

    async def record(request: LifecycleInput) -> None:
        started.append(request.nodeclaim.name)

    catalog = load_shipped_catalog("eastus")
    first = ActivityEnvironment()
    request = PlanInput(cluster="test", batch=1)
    for _ in range(50):
        if [pod for pod in await sim.list_pods() if pod.metadata.labels.get("app") == "inflate"]:
            try:
                await first.run(PlanningActivities(sim, catalog, crash).plan_provisioning, request)
            except Crash:
                break
    [orphan] = await sim.list_nodeclaims()

    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(first.info, attempt=2)
    plan = await retry.run(PlanningActivities(sim, catalog, record).plan_provisioning, request)

    assert started[0] == orphan.name
    assert plan.nodeclaims == []  # the pods fit the NodeClaim the first attempt made
    assert [claim.name for claim in await sim.list_nodeclaims()] == [orphan.name]
