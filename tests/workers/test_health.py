"""Health probes: `/healthz` answers while the loop runs; `/readyz` serves the cached verdict of the readiness
checks, with the first failing one's reason. A real `nodewright controller` is not ready until Temporal
answers, is ready once it does (leading its Lease), and not ready again when Temporal goes away."""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import uuid
from pathlib import Path

import aiohttp
import pytest

from tests.workers.component import Component, until
from workers.cli import main
from workers.controlplane.run import ControlPlane, free_port
from workers.health import Check, ProbeServerError, Readiness, serve_probes
from workers.temporal_server import DevServer


async def fine() -> str | None:
    return None


async def test_readiness_is_the_first_failing_check() -> None:
    async def down() -> str | None:
        return "cannot reach it:\n  connection refused"

    async def hangs() -> str | None:
        await asyncio.Event().wait()
        return None

    async def breaks() -> str | None:
        raise RuntimeError("boom")

    assert await Readiness([Check("a", fine)]).refresh() is None
    assert (
        await Readiness([Check("a", fine), Check("b", down)]).refresh()
        == "cannot reach it: connection refused"
    )
    assert (
        await Readiness([Check("c", hangs)], timeout_seconds=0.05).refresh() == "c: no answer within 0.05 s"
    )
    assert await Readiness([Check("d", breaks), Check("b", down)]).refresh() == "d: boom"


async def get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_probes_serve_the_cached_verdict() -> None:
    calls = 0
    reason: str | None = "Temporal: not yet"

    async def counted() -> str | None:
        nonlocal calls
        calls += 1
        return reason

    readiness = Readiness([Check("counted", counted)], period_seconds=0.05)
    port = free_port()
    async with serve_probes(port, readiness, host="127.0.0.1"):
        assert await get(port, "/healthz") == (200, "ok\n")
        await until(lambda: asyncio.sleep(0, calls > 0), 5, "a first refresh")
        assert await get(port, "/readyz") == (503, "Temporal: not yet\n")
        reason = None
        await until(lambda: asyncio.sleep(0, readiness.reason is None), 5, "the next refresh")
        before = calls
        for _ in range(20):
            assert await get(port, "/readyz") == (200, "ok\n")
        assert calls - before < 20, "every probe ran the checks"
    with pytest.raises(aiohttp.ClientError):
        await get(port, "/healthz")


async def test_port_0_serves_nothing_and_a_taken_port_names_the_variable() -> None:
    async with serve_probes(0, Readiness([Check("a", fine)])):
        pass
    port = free_port()
    async with serve_probes(port, Readiness([Check("a", fine)])):
        with pytest.raises(ProbeServerError, match=f"port {port} \\(NODEWRIGHT_HEALTH_PROBE_PORT\\)"):
            async with serve_probes(port, Readiness([Check("a", fine)])):
                pass


def test_a_taken_probe_port_stops_the_controller_with_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, control_plane: ControlPlane
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        monkeypatch.setenv("NODEWRIGHT_KUBECONFIG", str(control_plane.kubeconfig))
        monkeypatch.setenv("NODEWRIGHT_METRICS_PORT", "0")
        monkeypatch.setenv("NODEWRIGHT_HEALTH_PROBE_PORT", str(taken.getsockname()[1]))
        err = io.StringIO()
        assert main(["controller"], out=io.StringIO(), err=err) == 2
    assert err.getvalue().startswith("error: cannot serve health probes on port")


async def test_the_controller_is_ready_only_while_temporal_answers(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    server = DevServer(port=free_port(), log_path=tmp_path / "temporal.log")
    lease = f"health-{uuid.uuid4().hex[:8]}"
    controller = Component(
        "controller",
        tmp_path / "controller.log",
        {
            "NODEWRIGHT_KUBECONFIG": str(control_plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": server.target,
            "NODEWRIGHT_CLUSTER_NAME": lease,
            "NODEWRIGHT_TASK_QUEUE": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAME": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAMESPACE": "default",
        },
    ).start()
    try:

        async def answers() -> tuple[int, str] | None:
            return await controller.readyz()

        await until(answers, 60, "the probes served", controller)
        status, reason = await controller.readyz() or (0, "")
        assert status == 503 and f"not connected to Temporal at {server.target} yet" in reason
        assert await controller.get("/healthz") == (200, "ok\n")

        await server.start()
        await until(controller.ready, 60, "ready once Temporal answers", controller)

        await server.stop()

        async def not_ready() -> bool:
            answer = await controller.readyz()
            return answer is not None and answer[0] == 503 and f"Temporal at {server.target}" in answer[1]

        await until(not_ready, 30, "not ready once Temporal is gone", controller)
        assert await controller.get("/healthz") == (200, "ok\n")
        controller.signal(signal.SIGTERM)
        assert await controller.wait(timeout=30) == 0, controller.log_tail()
    finally:
        controller.stop()
        with contextlib.suppress(Exception):
            await server.stop()
