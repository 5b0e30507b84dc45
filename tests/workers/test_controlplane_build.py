"""Building the control plane's binaries: a cached build is used as it is, and a machine without Go gets one
sentence saying what to install, not a traceback."""

from __future__ import annotations

import fcntl
import io
import threading
from pathlib import Path

import pytest

from workers.cli import main
from workers.controlplane.build import (
    BINARIES,
    KARPENTER_CRDS,
    Binaries,
    BuildError,
    binaries_dir,
    ensure_binaries,
    ensure_karpenter,
    karpenter_dir,
)


def test_without_go_the_build_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BuildError, match=r"Go is not installed .*Install Go 1\.24 or newer"):
        ensure_binaries(tmp_path / "cache", progress=lambda line: None)
    assert not binaries_dir(tmp_path / "cache").complete()


def test_the_cli_reports_a_missing_go_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("NODEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    err = io.StringIO()
    code = main(["cluster", "--dir", str(tmp_path / "cluster")], io.StringIO(), err)
    assert code != 0
    [line] = err.getvalue().strip().splitlines()
    assert line.startswith("error: Go is not installed")


def _fill(binaries: Binaries) -> None:
    for path in [*(binaries.path(name) for name in BINARIES), *binaries.stages]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_waiting_for_another_build_says_so_and_uses_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the build lock: the wait is announced, and once that build is complete it is used
    (without Go, so nothing was built here)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    binaries = binaries_dir(tmp_path)
    binaries.directory.mkdir(parents=True)
    lines: list[str] = []
    waiting = threading.Event()
    result: list[Binaries] = []

    def progress(line: str) -> None:
        lines.append(line)
        waiting.set()

    with (binaries.directory.parent / f"{binaries.directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: result.append(ensure_binaries(tmp_path, progress=progress)))
        waiter.start()
        assert waiting.wait(timeout=60), "ensure_binaries never said it was waiting"
        _fill(binaries)
    waiter.join(timeout=60)
    assert result == [binaries]
    assert lines[0].startswith("waiting for another process's build of the control plane binaries")
    assert lines[1].startswith("the other process's build finished")


def test_a_complete_cache_is_used_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binaries = binaries_dir(tmp_path)
    _fill(binaries)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    lines: list[str] = []
    assert ensure_binaries(tmp_path, progress=lines.append) == binaries
    assert lines == []


def test_karpenter_is_no_part_of_the_control_plane_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make binaries` (ensure_binaries) never builds the benchmark's peer: a complete cache without Karpenter is
    complete, and nothing is built (there is no Go to build with)."""
    _fill(binaries_dir(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ensure_binaries(tmp_path, progress=lambda line: None)
    assert not karpenter_dir(tmp_path).complete()
    assert not karpenter_dir(tmp_path).directory.exists()


def test_without_go_the_karpenter_build_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    lines: list[str] = []
    with pytest.raises(BuildError, match=r"Go is not installed"):
        ensure_karpenter(tmp_path, progress=lines.append)
    assert lines[0].startswith("building Karpenter v")


def test_a_cached_karpenter_is_used_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    karpenter = karpenter_dir(tmp_path)
    for path in [karpenter.binary, *(karpenter.crds / Path(name).name for name in KARPENTER_CRDS)]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    lines: list[str] = []
    assert ensure_karpenter(tmp_path, progress=lines.append) == karpenter
    assert lines == []
