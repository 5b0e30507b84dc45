"""Health probes, as Karpenter serves them on its `http` port (8081): `/healthz` for liveness and `/readyz` for
readiness, served by aiohttp inside the process's own event loop.

`/healthz` answers 200 whenever the loop runs: an answer proves the loop is not stuck, which is what a liveness
probe should restart the process for (a lost Temporal or API server is not cured by a restart). `/readyz`
answers 200 only when every readiness check passed, else 503 with the first failing check's one-line reason.
The checks run in the background every few seconds and the probe reads their last result (as kopf's health
reporter caches its probes): a probe never waits for the API server or Temporal, and a kubelet probing often
does not multiply the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

logger = logging.getLogger("nodewright.health")

PORT_VARIABLE = "NODEWRIGHT_HEALTH_PROBE_PORT"


@dataclass(frozen=True, slots=True)
class Check:
    """One readiness condition: `probe` returns None when it holds, else why not (one line)."""

    what: str
    probe: Callable[[], Awaitable[str | None]]


class ProbeServerError(Exception):
    """The probe port cannot be served; the message names the port and its variable."""


class Readiness:
    """The cached verdict of the checks, refreshed every `period_seconds` by `run()`; `reason` is None when
    ready, else why not."""

    def __init__(
        self, checks: Sequence[Check], period_seconds: float = 2.0, timeout_seconds: float = 5.0
    ) -> None:
        self.checks = list(checks)
        self.period_seconds = period_seconds
        self.timeout_seconds = timeout_seconds
        self.reason: str | None = "starting"

    async def refresh(self) -> str | None:
        """Run the checks in order; the first failure's reason (a check that hangs or raises fails)."""
        for check in self.checks:
            try:
                async with asyncio.timeout(self.timeout_seconds):
                    reason = await check.probe()
            except TimeoutError:
                reason = f"{check.what}: no answer within {self.timeout_seconds:g} s"
            except Exception as error:  # a broken check must not stop the others: it fails readiness
                reason = f"{check.what}: {error}"
            if reason is not None:
                return " ".join(reason.split())
        return None

    async def run(self) -> None:
        """Refresh until cancelled; changes of the verdict are logged."""
        while True:
            reason = await self.refresh()
            if reason != self.reason:
                if reason is None:
                    logger.info("ready")
                else:
                    logger.info("not ready: %s", reason)
            self.reason = reason
            await asyncio.sleep(self.period_seconds)


def probe_app(readiness: Readiness) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if readiness.reason is None:
            return web.Response(text="ok\n")
        return web.Response(status=503, text=readiness.reason + "\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


@contextlib.asynccontextmanager
async def serve_probes(port: int, readiness: Readiness, host: str = "0.0.0.0") -> AsyncIterator[None]:
    """Serve `/healthz` and `/readyz` on `port` (0: not at all) and keep `readiness` refreshed, for the block;
    `ProbeServerError` when the port cannot be bound."""
    if not port:
        yield
        return
    runner = web.AppRunner(probe_app(readiness), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as error:
            raise ProbeServerError(
                f"cannot serve health probes on port {port} ({PORT_VARIABLE}): {error.strerror or error}"
            ) from None
        refresher = asyncio.create_task(readiness.run())
        try:
            yield
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
    finally:
        await runner.cleanup()
