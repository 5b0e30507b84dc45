"""The one image the process kubelet can run: the repository's Dockerfile, as this machine's virtualenv.

There is no container runtime here to pull or build images, and the chart's image is the Dockerfile's: a
virtualenv with nodewright installed, whose final stage sets the entrypoint (`nodewright`), the user (65532) and
the environment (the virtualenv's bin first on PATH, HOME=/tmp). `dockerfile_image` reads those from the
Dockerfile and puts this interpreter's virtualenv where the image has its own, so what runs in a pod is what the
image would run, from the same code. A pod of any other image waits with `ErrImagePull`.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DOCKERFILE = REPOSITORY / "Dockerfile"
BASE_ENVIRONMENT = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""What the base image (python:3.11-slim) sets before the Dockerfile's own ENV."""
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def instructions(path: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") and not pending:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.strip().partition(" ") for line in joined if line.strip())
    ]


def final_stage(path: Path) -> list[tuple[str, str]]:
    """The instructions from the last FROM on: what the image is made of."""
    steps = instructions(path)
    last_from = max(index for index, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


@dataclass(frozen=True)
class LocalImage:
    repository: str
    """The image's name without tag or digest: every tag and digest of it is this image."""
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    environment: Mapping[str, str]
    uid: int
    gid: int
    working_dir: str
    paths: tuple[str, ...]
    """The host directories the image is made of here (the virtualenv, the interpreter, the source)."""
    passwd: tuple[str, ...] = ()
    group: tuple[str, ...] = ()
    """The /etc/passwd and /etc/group lines the image adds (its `useradd` and `groupadd`), which a container
    sees added to the host's: a program that looks its user up (Temporal's server does) finds it."""

    def accounts(self, kind: str) -> str:
        """/etc/passwd or /etc/group as the image has it: the host's, with the image's own lines added."""
        path = Path("/etc") / kind
        host = path.read_text() if path.exists() else ""
        known = {line.split(":")[0] for line in host.splitlines()}
        added = [
            line
            for line in (self.passwd if kind == "passwd" else self.group)
            if line.split(":")[0] not in known
        ]
        return host.rstrip("\n") + "\n" + "".join(line + "\n" for line in added)

    def runs(self, reference: str) -> bool:
        name = reference.partition("@")[0]
        if ":" in name.rpartition("/")[2]:
            name = name.rpartition(":")[0]
        return name == self.repository


def dockerfile_image(repository: str, dockerfile: Path = DOCKERFILE, venv: Path | None = None) -> LocalImage:
    """The Dockerfile's final stage as image `repository`, with `venv` (this interpreter's) where the image copies
    its virtualenv (the destination of its `COPY --from`)."""
    venv = venv or Path(sys.prefix)
    steps = final_stage(dockerfile)
    copied = [
        arguments.split()[-1] for keyword, arguments in steps if keyword == "COPY" and "--from=" in arguments
    ]
    if not copied:
        raise ValueError(f"{dockerfile}: the final stage copies no virtualenv from a build stage")
    image_venv = copied[-1]
    environment = dict(BASE_ENVIRONMENT)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    uid = gid = 0
    working_dir = "/"
    for keyword, arguments in steps:
        if keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                value = _VARIABLE.sub(lambda match: environment.get(match[1] or match[2], ""), value)
                environment[name] = value.replace(image_venv, str(venv))
        elif keyword == "ENTRYPOINT":
            entrypoint = tuple(json.loads(arguments))
        elif keyword == "CMD":
            cmd = tuple(json.loads(arguments))
        elif keyword == "USER":
            user, _, group = arguments.partition(":")
            uid = int(user)
            gid = int(group) if group else uid
        elif keyword == "WORKDIR":
            working_dir = arguments
    paths = tuple(dict.fromkeys(str(Path(item).resolve()) for item in (venv, sys.base_prefix, REPOSITORY)))
    passwd, group = _accounts(arguments for keyword, arguments in steps if keyword == "RUN")
    return LocalImage(repository, entrypoint, cmd, environment, uid, gid, working_dir, paths, passwd, group)


def _accounts(commands: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The passwd and group lines of the `useradd` and `groupadd` commands in RUN instructions."""
    passwd, group = [], []
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            if not words or words[0] not in ("useradd", "groupadd"):
                continue
            options = dict(itertools.pairwise(words))
            name = words[-1]
            if words[0] == "groupadd":
                group.append(f"{name}:x:{options.get('--gid', '')}:")
            else:
                uid, gid = options.get("--uid", ""), options.get("--gid", "")
                home, shell = options.get("--home-dir", f"/home/{name}"), options.get("--shell", "/bin/sh")
                passwd.append(f"{name}:x:{uid}:{gid}::{home}:{shell}")
    return tuple(passwd), tuple(group)
