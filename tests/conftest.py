"""Shared fixtures: one Temporal dev server and one real Kubernetes control plane per test process, and a task
queue of its own for every test.

The server is session-scoped (it starts in about 0.15 s, but its event loop must outlive every test that uses
it, hence the session loop scope set in pyproject). Under pytest-xdist each worker process starts its own
server on a free port. Tests share it safely because each one polls its own task queue and uses its own ids.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; `workers.controlplane`)
starts on first use, in a few seconds once its binaries are built; tests that use it clean up what they made.
"""

from __future__ import annotations

import gc
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from workers.controlplane.run import ControlPlane, start_control_plane
from workers.temporal_server import temporal_cli_path
from workflows.search_attributes import ALL

if TYPE_CHECKING:
    from workers.simulated_aks import SimulatedAks


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A local dev server (in memory, headless) with our search attributes and the Pydantic data converter."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli_path(),
        search_attributes=ALL,
        data_converter=pydantic_data_converter,
    )
    yield env
    await env.shutdown()


@pytest.fixture(autouse=True)
def no_worker_collection_policy() -> Iterator[None]:
    """A test that runs `nodewright worker` or `controller` in this process installs their garbage collection
    policy (`workers.processes.freeze_after_full_collections`), which is meant for a process of its own. Left in
    the test process it froze everything pytest holds (nearly two million objects) and unfroze it every ten
    minutes, when the next full collection held the process for 11 to 12 s and a test waiting on a workflow
    timed out. After each test, callbacks it added are taken out and what they froze is unfrozen."""
    before = gc.callbacks[:]
    yield
    if gc.callbacks != before:
        gc.callbacks[:] = before
        gc.unfreeze()


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A task queue no other test polls: the test's name (readable in the UI) plus a random suffix."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane for this test process, with the CRDs of `deploy/crds/` installed."""
    plane = start_control_plane(tmp_path_factory.mktemp("control-plane"))
    yield plane
    plane.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def aks(control_plane: ControlPlane) -> AsyncIterator[SimulatedAks]:
    """The control plane wiped clean and an emulated Azure of the test's own whose VMs join it (`fresh_aks`):
    `aks.kube` is the Kubernetes API, `aks.emulator` the emulator's controls, `aks.azure` what a worker is
    told."""
    from tests.cluster import fresh_aks

    async with fresh_aks(control_plane) as running:
        yield running
