"""Building the control plane's binaries: a cached build is used as it is, and a machine without Go gets one
sentence saying what to install, not a traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from workers.cli import main
from workers.controlplane.build import BINARIES, BuildError, binaries_dir, ensure_binaries


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


def test_a_complete_cache_is_used_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binaries = binaries_dir(tmp_path)
    for path in [*(binaries.path(name) for name in BINARIES), *binaries.stages]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    lines: list[str] = []
    assert ensure_binaries(tmp_path, progress=lines.append) == binaries
    assert lines == []
