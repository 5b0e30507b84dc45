"""`nodewright worker` and `nodewright controller` as child processes, configured through the environment as a
Helm chart configures them, with probes on ports of their own (never the default 8080/8081, which another
process on the machine may hold), their output in a log file that failure messages quote."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

from workers.controlplane.run import free_port

NODEWRIGHT = Path(sys.executable).parent / "nodewright"


@dataclass
class Component:
    """One `nodewright <command>` process; `env` adds to (or, with None, removes from) this process's."""

    command: str
    log_path: Path
    env: dict[str, str | None] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self) -> Component:
        assert NODEWRIGHT.exists(), f"{NODEWRIGHT} is missing: install the project (`make test` does)"
        env = {
            **os.environ,
            "NODEWRIGHT_HEALTH_PROBE_PORT": str(self.health_port),
            "NODEWRIGHT_METRICS_PORT": str(self.metrics_port),
        }
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            [str(NODEWRIGHT), self.command, *self.args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def wait(self, timeout: float) -> int:
        """The exit code, once the process has exited (the test fails after `timeout`)."""
        assert self.process is not None
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.process.wait), timeout)
        except TimeoutError:
            raise AssertionError(
                f"{self.command} still runs after {timeout:g} s\n{self.log_tail()}"
            ) from None

    def stop(self) -> None:
        """SIGKILL whatever still runs, and close the log."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def check_alive(self) -> None:
        if self.process is not None and (code := self.process.poll()) is not None:
            raise AssertionError(f"{self.command} exited with code {code}\n{self.log_tail()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return f"{self.command} log (end):\n" + "\n".join(self.log().splitlines()[-lines:])

    async def get(self, path: str, port: int | None = None) -> tuple[int, str] | None:
        """Status and body of GET `path` on the probe port (or `port`); None while nothing answers."""
        url = f"http://127.0.0.1:{port or self.health_port}{path}"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
                session.get(url) as response,
            ):
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def readyz(self) -> tuple[int, str] | None:
        self.check_alive()
        return await self.get("/readyz")

    async def ready(self) -> bool:
        answer = await self.readyz()
        return answer is not None and answer[0] == 200


async def until(
    check: Callable[[], Awaitable[object]], timeout: float, what: str, *components: Component
) -> float:
    """Poll `check` (an async callable) every 0.1 s until it is truthy; the seconds it took. Fails after
    `timeout` with the components' logs."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            logs = "\n".join(component.log_tail() for component in components)
            raise AssertionError(f"{what}: not within {timeout:g} s\n{logs}")
        await asyncio.sleep(0.1)
