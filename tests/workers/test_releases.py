"""The release table (`RELEASES.toml`) and a released tree exported from git (`workers.releases`)."""

from __future__ import annotations

import re
import subprocess
from datetime import date
from pathlib import Path

import pytest

from workers.releases import Release, ReleaseError, export_tree, read_releases

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def table(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "RELEASES.toml"
    path.write_text("".join(f"[[release]]\n{entry}\n" for entry in entries))
    return path


def entry(version: str = "0.1.0", commit: str = COMMIT, day: str = "2026-11-29") -> str:
    return f'version = "{version}"\ncommit = "{commit}"\ndate = {day}\n'


def test_the_repository_table_lists_released_commits_of_this_repository() -> None:
    releases = read_releases()
    for release in releases:
        known = subprocess.run(
            ["git", "cat-file", "-e", f"{release.commit}^{{commit}}"], capture_output=True, check=False
        )
        assert known.returncode == 0 or _shallow(), f"{release} is not a commit of this repository"


def _shallow() -> bool:
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    return done.stdout.strip() == "true"


def test_releases_read_oldest_first(tmp_path: Path) -> None:
    releases = read_releases(table(tmp_path, entry("0.1.0"), entry("0.2.0", day="2026-12-10")))
    assert [r.version for r in releases] == ["0.1.0", "0.2.0"]
    assert releases[1] == Release("0.2.0", COMMIT, date(2026, 12, 10))


@pytest.mark.parametrize(
    ("entries", "names"),
    [
        ((entry(version="v0.1"),), "release[0].version"),
        ((entry(commit="50ac076"),), "release[0].commit"),
        ((entry(day='"yesterday"'),), "release[0].date"),
        (
            (entry("0.2.0"), entry("0.10.0"), entry("0.9.1")),
            "release[2].version: 0.9.1 does not come after 0.10.0",
        ),
        ((), "no [[release]] entry"),
    ],
)
def test_a_malformed_table_names_the_entry_and_field(
    tmp_path: Path, entries: tuple[str, ...], names: str
) -> None:
    with pytest.raises(ReleaseError, match=re.escape(names)):
        read_releases(table(tmp_path, *entries))


def _repository(path: Path) -> str:
    """A git repository with one commit of one file; its commit id."""
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "--quiet", str(path)], check=True)
    (path / "workflows").mkdir()
    (path / "workflows" / "nodeclaim.py").write_text("RELEASED = True\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "released"], check=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_release_is_exported_from_its_commit(tmp_path: Path) -> None:
    commit = _repository(tmp_path / "repo")
    (tmp_path / "repo" / "workflows" / "nodeclaim.py").write_text("RELEASED = False\n")  # not committed
    target = tmp_path / "tree"
    target.mkdir()
    export_tree(Release("0.1.0", commit, date(2026, 11, 29)), target, tmp_path / "repo")
    assert (target / "workflows" / "nodeclaim.py").read_text() == "RELEASED = True\n"
    assert not (target / ".git").exists()


def test_a_commit_the_clone_lacks_and_cannot_fetch_says_how_to_get_it(tmp_path: Path) -> None:
    _repository(tmp_path / "repo")
    with pytest.raises(
        ReleaseError, match=rf"release 0.1.0's commit {COMMIT} is not in the clone.*--unshallow"
    ):
        export_tree(Release("0.1.0", COMMIT, date(2026, 11, 29)), tmp_path, tmp_path / "repo")
