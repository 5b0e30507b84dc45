"""Builders and fixtures for the simulated AKS: a fake clock for step-by-step tests, a launch request, small
manifests, a simulator served on a real port with its client, and `eventually` for what the loop does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest_asyncio
from aiohttp.test_utils import TestServer

from core import labels
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import LaunchRequest
from simulator.client import SimulatorClient
from simulator.server import Simulator, SimulatorSettings, create_app
from simulator.state import ClusterState

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
