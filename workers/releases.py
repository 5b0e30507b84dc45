"""nodewright's releases (`RELEASES.toml`), and a released tree set up beside this one for `make bench-upgrade`.

A release is a commit of main with a version and a date. Its workflow histories (`tests/histories/<version>/`) are
replayed by every later release's tests, and the upgrade benchmark runs it, then replaces its processes with the
tree at hand. The released tree is exported from git (`git archive`: it reads the repository and registers nothing
in it) into `<cache>/releases/<version>-<commit>/` with a virtualenv of its own (pip serves the pinned wheels from its
cache), once; a clone that lacks the commit (a shallow CI checkout) fetches it from `origin` first, or the error says
how to get it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from workers.controlplane.build import cache_root, exclusive
from workers.controlplane.run import REPOSITORY

RELEASES_FILE = REPOSITORY / "RELEASES.toml"
HISTORIES = REPOSITORY / "tests" / "histories"
"""Each release's recorded workflow histories are in a directory of its own here, named after its version."""
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


class ReleaseError(RuntimeError):
    """The release table is wrong, or a release's tree cannot be set up; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    commit: str
    date: date

    @property
    def short(self) -> str:
        return self.commit[:7]

    @property
    def histories(self) -> Path:
        return HISTORIES / self.version

    def __str__(self) -> str:
        return f"{self.version} ({self.short})"


def _version_key(version: str) -> tuple[int, ...]:
    match = VERSION.match(version)
    assert match is not None
    return tuple(int(part) for part in match.groups())


def read_releases(path: Path = RELEASES_FILE) -> list[Release]:
    """The releases, oldest first; `ReleaseError` naming the entry and the field when one is malformed or out of
    order."""
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ReleaseError(f"{path}: {error}") from None
    releases: list[Release] = []
    for index, entry in enumerate(table.get("release", [])):
        where = f"{path.name}: release[{index}]"
        version, commit, day = entry.get("version"), entry.get("commit"), entry.get("date")
        if not isinstance(version, str) or not VERSION.match(version):
            raise ReleaseError(f"{where}.version: {version!r} is not a version MAJOR.MINOR.PATCH")
        if not isinstance(commit, str) or not COMMIT.match(commit):
            raise ReleaseError(f"{where}.commit: {commit!r} is not a full 40-character commit id")
        if not isinstance(day, date):
            raise ReleaseError(f"{where}.date: {day!r} is not a date (YYYY-MM-DD, unquoted)")
        if releases and _version_key(version) <= _version_key(releases[-1].version):
            raise ReleaseError(f"{where}.version: {version} does not come after {releases[-1].version}")
        releases.append(Release(version, commit, day))
    if not releases:
        raise ReleaseError(f"{path}: no [[release]] entry")
    return releases


def latest_release(path: Path = RELEASES_FILE) -> Release:
    return read_releases(path)[-1]


def _git(repository: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, check=False)


def export_tree(release: Release, target: Path, repository: Path = REPOSITORY) -> None:
    """The release's files into `target` (which exists), from the commit in `repository`, fetched from `origin`
    first when the clone lacks it."""
    if _git(repository, "cat-file", "-e", f"{release.commit}^{{commit}}").returncode != 0:
        fetched = _git(repository, "fetch", "--quiet", "--depth=1", "origin", release.commit)
        if _git(repository, "cat-file", "-e", f"{release.commit}^{{commit}}").returncode != 0:
            why = fetched.stderr.decode(errors="replace").strip().splitlines()
            raise ReleaseError(
                f"release {release.version}'s commit {release.commit} is not in the clone at {repository}, and "
                f"fetching it from origin failed ({why[-1] if why else 'no reason given'}): in a shallow clone, "
                f"`git fetch --unshallow` (or `git fetch origin {release.commit}`), then run again"
            )
    with subprocess.Popen(
        ["git", "-C", str(repository), "archive", "--format=tar", release.commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as archive:
        assert archive.stdout is not None
        with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
            tar.extractall(target, filter="data")
        error = archive.stderr.read().decode(errors="replace") if archive.stderr else ""
    if archive.returncode != 0:
        raise ReleaseError(f"`git archive {release.commit}` failed: {error.strip()}")


def release_python(directory: Path) -> Path:
    """The interpreter of a released tree's virtualenv."""
    return directory / ".venv" / "bin" / "python"


def released_tree(
    release: Release,
    cache: Path | None = None,
    repository: Path = REPOSITORY,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Path:
    """The release's tree with its dependencies installed (`release_python`), set up on first use (a minute or two
    with pip's cache warm) and reused after; a setup that stopped half way is started again."""
    directory = (cache or cache_root()) / "releases" / f"{release.version}-{release.commit[:12]}"
    stamp = directory / ".venv" / ".installed"
    if stamp.is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    waiting = f"waiting for another process to set up release {release} in {directory}"
    with exclusive(directory, waiting, progress):
        if stamp.is_file():
            return directory
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        progress(f"setting up release {release} in {directory}")
        export_tree(release, directory, repository)
        for command in (
            [sys.executable, "-m", "venv", str(directory / ".venv")],
            [str(release_python(directory)), "-m", "pip", "install", "--quiet", "-e", str(directory)],
        ):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
                raise ReleaseError(f"`{' '.join(command)}` failed (exit {done.returncode}):\n{tail}")
        stamp.touch()
    return directory
