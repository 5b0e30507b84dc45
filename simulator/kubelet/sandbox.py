"""What runs inside a pod of the process kubelet, as a short program of its own (`python -m
simulator.kubelet.sandbox`), so that no namespace call is made in the kubelet's threaded process between fork and
exec:

- `pause HOSTNAME`: the pod's sandbox, as the pause container of a real pod. It makes a network, UTS and IPC
  namespace of its own, takes the pod's host name, says `ready` and sleeps until it is killed (or its kubelet
  dies). The kubelet gives that namespace its veth and address; every container of the pod joins it.
- `run SPEC`: one container. It joins the sandbox's namespaces, makes a mount namespace of its own and mounts
  the pod's volumes, /etc/hosts and /etc/resolv.conf at their paths, mounts the root filesystem read-only if
  asked, becomes the container's user, and executes the container's command: the process the kubelet watches
  is then the container's own.

The pod sees the host's filesystem as its image (the container's command comes from this machine's
virtualenv). A mount path that does not exist on the host (/var/run/secrets/kubernetes.io/serviceaccount) is
made in an overlay of its nearest existing directory, visible only to the container. A directory of the image
that the container's user may not traverse (a Python installed under /root, mode 0700) is shown through a tmpfs
holding only the image's paths, so a non-root container reaches its interpreter and nothing else of /root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from simulator.kubelet.namespaces import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWUTS,
    MS_BIND,
    MS_MOVE,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    die_with_parent,
    mount,
    no_new_privileges,
    sethostname,
    setns,
    unshare,
)

READY = "ready"
"""What `pause` prints once its namespaces exist."""
NOT_FOUND_EXIT_CODE = 127


@dataclass(frozen=True)
class Mount:
    """A bind mount of a host path (a volume's directory or file) at a path of the container."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Launch:
    """Everything `run` needs to start one container; written as JSON by the kubelet."""

    sandbox_pid: int
    kubelet_pid: int
    argv: list[str]
    env: dict[str, str]
    working_dir: str
    scratch: str
    """A directory of the kubelet's for this container (the overlays' upper and work directories)."""
    uid: int = 0
    gid: int = 0
    groups: list[int] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    read_only_root: bool = False
    no_new_privileges: bool = False
    reveal: list[str] = field(default_factory=list)
    """The image's paths the container's user must reach (the virtualenv, the interpreter, the source)."""

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Launch:
        raw = json.loads(path.read_text())
        raw["mounts"] = [Mount(**item) for item in raw["mounts"]]
        return cls(**raw)


class LaunchError(Exception):
    """The container cannot be started as specified; the message says why (it is the container's last log line)."""


def pause(hostname: str) -> None:
    die_with_parent()
    unshare(CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC)
    sethostname(hostname)
    print(READY, flush=True)
    while True:
        signal.pause()


def run(launch: Launch) -> None:
    for kind, nstype in (("net", CLONE_NEWNET), ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC)):
        fd = os.open(f"/proc/{launch.sandbox_pid}/ns/{kind}", os.O_RDONLY)
        setns(fd, nstype)
        os.close(fd)
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # A tmpfs of the pod's own at /dev/shm (the host's is shared), first used to stage the volumes (before any mount
    # hides their sources: the pod's /tmp hides the kubelet's directory) and the image's paths.
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    staged = []
    for index, item in enumerate(launch.mounts):
        stage = f"/dev/shm/volume-{index}"
        if os.path.isdir(item.source):
            os.mkdir(stage)
        else:
            Path(stage).touch()
        mount(item.source, stage, None, MS_BIND | MS_REC)
        staged.append((stage, item))
    groups = {launch.gid, *launch.groups}
    if launch.uid != 0:
        _reveal(launch.reveal, launch.uid, groups)
    overlays = _make_mount_points(launch.mounts, Path(launch.scratch))
    for stage, item in sorted(staged, key=lambda pair: len(Path(pair[1].target).parts)):
        target = os.path.realpath(item.target)
        mount(stage, target, None, MS_MOVE)
        if item.read_only:
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    if launch.read_only_root:
        for target in ("/", *overlays):
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    os.setgroups(sorted(groups))
    os.setgid(launch.gid)
    os.setuid(launch.uid)
    if launch.no_new_privileges:
        no_new_privileges()
    die_with_parent()  # after the change of user, which clears it
    if os.getppid() != launch.kubelet_pid:
        sys.exit(1)
    try:
        os.chdir(launch.working_dir)
    except OSError as error:
        raise LaunchError(f"working directory {launch.working_dir}: {error.strerror}") from None
    program = shutil.which(launch.argv[0], path=launch.env.get("PATH", os.defpath))
    if program is None:
        print(f"exec: {launch.argv[0]!r}: executable file not found in $PATH", file=sys.stderr, flush=True)
        sys.exit(NOT_FOUND_EXIT_CODE)
    os.execve(program, launch.argv, launch.env)


def _traversable(path: str, uid: int, groups: set[int]) -> bool:
    info = os.stat(path)
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _closed_ancestor(path: str, uid: int, groups: set[int]) -> str | None:
    """The topmost directory above `path` that the user cannot traverse, or None."""
    parts = Path(path).parts
    for depth in range(1, len(parts)):
        ancestor = str(Path(*parts[:depth]))
        if not _traversable(ancestor, uid, groups):
            return ancestor
    return None


def _reveal(paths: list[str], uid: int, groups: set[int]) -> None:
    """Cover each directory that hides an image path from the user with a tmpfs showing only the way to it."""
    staged = 0
    while True:
        closed = next(
            (found for path in paths if (found := _closed_ancestor(path, uid, groups)) is not None), None
        )
        if closed is None:
            return
        children = sorted(
            {
                Path(closed, Path(path).relative_to(closed).parts[0])
                for path in paths
                if Path(path).is_relative_to(closed) and path != closed
            }
        )
        stages = []
        for child in children:
            stage = f"/dev/shm/stage-{staged}"
            staged += 1
            os.mkdir(stage)
            mount(str(child), stage, None, MS_BIND | MS_REC)
            stages.append((child, stage))
        mount("tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
        for child, stage in stages:
            os.mkdir(child)
            mount(stage, str(child), None, MS_MOVE)


def _make_mount_points(mounts: list[Mount], scratch: Path) -> list[str]:
    """Make the mount points the host lacks, each in an overlay of its nearest existing directory; the overlays'
    paths. Shallow directories first, so that no overlay hides a mount point made before it."""
    overlays: list[str] = []

    def nearest(path: str) -> str:
        while not os.path.exists(path):
            path = os.path.dirname(path)
        return path

    for item in sorted(mounts, key=lambda m: len(Path(nearest(os.path.realpath(m.target))).parts)):
        target = os.path.realpath(item.target)
        if os.path.exists(target):
            continue
        ancestor = nearest(target)
        if ancestor == "/":
            raise LaunchError(
                f"cannot make the mount point {item.target}: the process kubelet makes mount points only "
                "under a directory that exists on the host, other than /"
            )
        layer = scratch / "overlay" / str(len(overlays))
        (layer / "upper").mkdir(parents=True, exist_ok=True)
        (layer / "work").mkdir(parents=True, exist_ok=True)
        mount(
            "overlay",
            ancestor,
            "overlay",
            0,
            f"lowerdir={ancestor},upperdir={layer / 'upper'},workdir={layer / 'work'}",
        )
        overlays.append(ancestor)
        if os.path.isdir(item.source):
            os.makedirs(target)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            Path(target).touch()
    return overlays


def main(argv: list[str]) -> None:
    command, argument = argv
    if command == "pause":
        pause(argument)
    elif command == "run":
        try:
            run(Launch.load(Path(argument)))
        except (LaunchError, OSError) as error:
            print(f"the process kubelet could not start the container: {error}", file=sys.stderr, flush=True)
            sys.exit(NOT_FOUND_EXIT_CODE - 1)
    else:
        raise SystemExit(f"unknown sandbox command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
