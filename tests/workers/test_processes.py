"""The long-running commands as a user runs them: a kubeconfig that cannot be used is one line and exit code 2,
and `nodewright cluster` (the same start and stop as the demo's) ends every process it started on SIGINT or
SIGTERM, however it was started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from workers.controlplane.run import ControlPlane, free_port

NODEWRIGHT = Path(sys.executable).parent / "nodewright"


def run_controller(tmp_path: Path, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NODEWRIGHT_KUBECONFIG": kubeconfig,
        "NODEWRIGHT_METRICS_PORT": "0",
        "NODEWRIGHT_HEALTH_PROBE_PORT": "0",
        "NODEWRIGHT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    return subprocess.run(
        [str(NODEWRIGHT), "controller"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def unreachable_kubeconfig(tmp_path: Path, plane: ControlPlane) -> str:
    """The control plane's kubeconfig, pointed at a port nothing listens on."""
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = tmp_path / "unreachable"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_a_missing_kubeconfig_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    done = run_controller(tmp_path, str(tmp_path / "nowhere"))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(tmp_path / "nowhere") in line


def test_an_unreachable_api_server_is_one_line_and_exit_code_2(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    done = run_controller(tmp_path, unreachable_kubeconfig(tmp_path, control_plane))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "127.0.0.1" in line
    assert "Traceback" not in done.stderr


def children(pid: int) -> set[int]:
    """Every process descended from `pid`, now."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_local_cluster_stops_every_process_it_started(tmp_path: Path, signum: signal.Signals) -> None:
    # Started as a background job of a non-interactive shell would be: SIGINT ignored on entry.
    process = subprocess.Popen(
        [str(NODEWRIGHT), "cluster", "--dir", str(tmp_path / "cluster")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line or process.poll() is None, "".join(lines)
        lines.append(line)
        if "Press Ctrl-C" in line:
            break
    output = "".join(lines)
    assert "export KUBECONFIG=" in output and "NODEWRIGHT_ARM_ENDPOINT" in output, output
    started = children(process.pid)
    assert len(started) >= 5, f"expected etcd, kube-apiserver, kcm, kube-scheduler and kwok: {started}"

    process.send_signal(signum)
    assert process.wait(timeout=60) == 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in started if alive(pid)]
