"""Shared fixtures: one Temporal dev server per test process, and a task queue of its own for every test.

The server is session-scoped (it starts in about 0.15 s, but its event loop must outlive every test that uses
it, hence the session loop scope set in pyproject). Under pytest-xdist each worker process starts its own
server on a free port. Tests share it safely because each one polls its own task queue and uses its own ids.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from workers.temporal_server import temporal_cli_path
from workflows.search_attributes import ALL


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


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A task queue no other test polls: the test's name (readable in the UI) plus a random suffix."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
    return f"{name}-{uuid.uuid4().hex[:8]}"
