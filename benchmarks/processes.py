"""The processes a benchmark starts on a control plane (the autoscaler's, the emulated Azure), and what they
cost: each one's CPU seconds and peak memory read from /proc, and the machine's busy time none of them used.
Shared by the benchmarks that run the system (lifecycle, consolidation)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workers.processes import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
"""The checkout every process runs from."""
STARTUP_SECONDS = 60.0
MACHINE = "machine"
"""`cpu_of`'s key for the whole machine's busy time."""


def log_path(logs: Path, name: str) -> Path:
    """Where the process called `name` ("worker 1", ...) writes its output."""
    return logs / f"{name.replace(' ', '-')}.log"


@contextlib.asynccontextmanager
async def child_process(
    args: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A process of the system, from this checkout, for the duration of the block; its output goes to `log`."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # A benchmark stopped by a signal leaves no worker behind to eat the next run's CPU.
            preexec_fn=die_with_parent,
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(process.wait), 10)
        except TimeoutError:
            process.kill()
            await asyncio.to_thread(process.wait)


def figures_of(command: Sequence[str], what: str) -> dict[str, Any] | None:
    """Run one run of a benchmark in a fresh process (so that each peak is its own) and return the figures it
    printed as its last line of JSON, or None, said on stderr, if it printed none. Temporal's core writes its
    warnings (payloads over 512 KB) to stdout too: the figures are the last line."""
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, text=True)
    lines = done.stdout.strip().splitlines()
    try:
        figures: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        print(f"{what} failed (exit code {done.returncode}) without figures", file=sys.stderr)
        return None
    return figures


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def first_exit(processes: Mapping[str, subprocess.Popen[bytes]]) -> str:
    """ "NAME exited with code N" for the first of the processes that has exited, else ""."""
    for name, process in processes.items():
        if process.poll() is not None:
            return f"{name} exited with code {process.returncode}"
    return ""


async def until(
    what: str,
    ready: Callable[[], Awaitable[bool]],
    processes: Mapping[str, subprocess.Popen[bytes]],
    logs: Path,
) -> None:
    """Until `ready()` holds; fails naming the process that exited (with the end of its log) or the timeout."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while not await ready():
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode}:\n" + tail(log_path(logs, name))
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {STARTUP_SECONDS:g} s")
        await asyncio.sleep(0.2)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    return inodes


def connections(pid: int, port: int) -> int:
    """How many established TCP connections the process holds to this local port."""
    rows = [line.split() for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]]
    inodes = _socket_inodes(pid)
    return sum(
        int(row[2].rpartition(":")[2], 16) == port and row[3] == "01" and row[9] in inodes for row in rows
    )


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> int:
    """A live process's peak resident memory (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return 0


def temporal_pid() -> int:
    """The dev server: the child process of this one running the `temporal` binary."""
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"temporal"):
                    return int(pid)
    raise RuntimeError("the Temporal dev server process was not found")


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """Each process's CPU seconds so far, and under `machine` the whole machine's (all cores, busy time)."""
    seconds = {name: cpu_seconds(pid) for name, pid in pids.items()}
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    seconds[MACHINE] = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    return seconds


def others(cpu: dict[str, float]) -> dict[str, float]:
    """Per-process CPU seconds, with the machine's busy time that none of them used as `others`."""
    ours = {name: value for name, value in cpu.items() if name != MACHINE}
    return {**ours, "others": max(0.0, cpu.get(MACHINE, 0.0) - sum(ours.values()))}


def cpu_since(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    """`others` of the CPU seconds each process (and the machine) used since `before` (a `cpu_of`)."""
    return others({name: value - before[name] for name, value in cpu_of(pids).items()})


def conclude(
    row: dict[str, Any], print_table: Callable[[], None], problems: list[str], as_json: bool
) -> None:
    """The end of a run that judges itself (chaos, fuzz, upgrade, soak): its table, its figures as JSON when asked,
    and exit code 1 naming every problem found."""
    print_table()
    if as_json:
        print(json.dumps(row))
    if problems:
        print("FAILED: " + "; ".join(problems))
        sys.exit(1)
