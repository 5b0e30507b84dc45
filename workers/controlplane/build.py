"""Build the control plane's binaries from the Go module proxy with the machine's Go, once per version.

Kubernetes' `k8s.io/kubernetes` module and etcd's server module carry `replace` directives, so `go install
module@version` refuses them; they are built from a throwaway wrapper module that requires them and repeats
their replaces against published versions. kwok and helm (for the chart's tests) install directly. The binaries
land in
`<cache>/bin/<versions>/`, never in the repository; a complete directory is reused as it is, and a directory that
lacks one binary builds only that one.

Karpenter's kwok controller (the lifecycle benchmark's peer) is an optional build, on first use by
`ensure_karpenter` (or `python -m workers.controlplane.build --karpenter`), into `<cache>/bin/karpenter-<version>/`
with its CRDs; `ensure_binaries` never builds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"
HELM_VERSION = "3.22.0"
KARPENTER_VERSION = "1.14.1"
"""Karpenter's kwok controller, the peer of `benchmarks/lifecycle.py --peer karpenter` (an optional build, not
part of `ensure_binaries`). v1.14.1 is the newest v1.14 patch the machine's Go 1.26.8 builds: v1.14.3 requires
go 1.26.10, and the build runs with GOTOOLCHAIN=local."""
KARPENTER_CRDS = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)
"""Karpenter's own CRDs for its kwok provider (paths in the `sigs.k8s.io/karpenter` module)."""
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = (*KUBERNETES_COMMANDS, "etcd", "kwok", "helm")
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
"""kwok's own stages (under its module's `kustomize/stage/`): Nodes turn Ready and keep their Lease; pods run,
complete and go away when deleted."""

CACHE_VARIABLE = "NODEWRIGHT_CACHE_DIR"


class BuildError(RuntimeError):
    """The binaries could not be built; the message says what to do."""


def cache_root() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nodewright"


@dataclass(frozen=True, slots=True)
class Binaries:
    """Where each built binary and kwok's stage files are."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def stages(self) -> list[Path]:
        return [self.directory / "kwok-stages" / Path(name).name for name in KWOK_STAGES]

    def complete(self) -> bool:
        return all(self.path(name).is_file() for name in BINARIES) and all(p.is_file() for p in self.stages)


def binaries_dir(root: Path | None = None) -> Binaries:
    tag = f"k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}"
    return Binaries((root or cache_root()) / "bin" / tag)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not installed (no `go` on PATH): the local Kubernetes control plane is built from Kubernetes' "
            "own Go modules on first use. Install Go 1.24 or newer and run again."
        )
    return go


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise BuildError(f"`{' '.join(command)}` failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _staging_replaces(go: str, env: dict[str, str], work: Path) -> list[str]:
    """k8s.io/kubernetes points its staging modules at `./staging/...`; a wrapper needs published versions."""
    listing = _run([go, "mod", "download", "-json", f"k8s.io/kubernetes@v{KUBERNETES_VERSION}"], work, env)
    gomod = Path(json.loads(listing)["GoMod"]).read_text()
    staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod, re.MULTILINE)))
    if not staging:
        raise BuildError(f"k8s.io/kubernetes v{KUBERNETES_VERSION}: no staging replaces found in its go.mod")
    published = "v0." + KUBERNETES_VERSION.partition(".")[2]
    return [f"replace {module} => {module} {published}" for module in staging]


def _version_flags() -> str:
    major, minor, _ = KUBERNETES_VERSION.split(".")
    values = {
        "gitVersion": f"v{KUBERNETES_VERSION}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
    }
    return " ".join(
        f"-X {package}.{name}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in values.items()
    )


def _build_kubernetes(go: str, env: dict[str, str], work: Path, out: Path) -> None:
    module = work / "kubernetes"
    module.mkdir()
    replaces = "\n".join(_staging_replaces(go, env, module))
    (module / "go.mod").write_text(
        f"module nodewright.local/controlplane\n\ngo 1.24\n\n"
        f"require k8s.io/kubernetes v{KUBERNETES_VERSION}\n\n{replaces}\n"
    )
    imports = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{name}"' for name in KUBERNETES_COMMANDS)
    (module / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    _run([go, "mod", "tidy"], module, env)
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in KUBERNETES_COMMANDS]
    _run([go, "build", "-ldflags", _version_flags(), "-o", str(out), *packages], module, env)


def _build_etcd(go: str, env: dict[str, str], work: Path, out: Path) -> None:
    module = work / "etcd"
    module.mkdir()
    (module / "go.mod").write_text(
        f"module nodewright.local/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v{ETCD_VERSION}\n"
    )
    (module / "tools.go").write_text(
        '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n'
    )
    _run([go, "mod", "tidy"], module, env)
    _run([go, "build", "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3"], module, env)


def _build_kwok(go: str, env: dict[str, str], work: Path, out: Path) -> None:
    _run([go, "install", f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}"], work, {**env, "GOBIN": str(out)})
    listing = _run([go, "mod", "download", "-json", f"sigs.k8s.io/kwok@v{KWOK_VERSION}"], work, env)
    source = Path(json.loads(listing)["Dir"]) / "kustomize" / "stage"
    stages = out / "kwok-stages"
    stages.mkdir(exist_ok=True)
    for name in KWOK_STAGES:
        if not (source / name).is_file():
            raise BuildError(f"kwok v{KWOK_VERSION}: no stage {name} under {source}")
        shutil.copyfile(source / name, stages / Path(name).name)


def _build_helm(go: str, env: dict[str, str], work: Path, out: Path) -> None:
    _run([go, "install", f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}"], work, {**env, "GOBIN": str(out)})


@contextlib.contextmanager
def exclusive(directory: Path, waiting: str, progress: Callable[[str], None]) -> Iterator[bool]:
    """Held while this process builds into `directory` (a lock file beside it): two processes (test workers, a demo
    beside a test run, two benchmarks) never build into one directory at once. A process that finds the lock held
    says `waiting` and waits; the block gets whether it waited (the other may have built everything meanwhile)."""
    with (directory.parent / f"{directory.name}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(waiting)
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield True
        else:
            yield False


def ensure_binaries(
    root: Path | None = None, progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
) -> Binaries:
    """The cached binaries, built first when any is missing (about 10 minutes once on 2 cores)."""
    binaries = binaries_dir(root)
    if binaries.complete():
        return binaries
    directory = binaries.directory
    directory.mkdir(parents=True, exist_ok=True)
    waiting = (
        f"waiting for another process's build of the control plane binaries into {directory} "
        "(it holds the build lock; up to about 10 minutes)"
    )
    with exclusive(directory, waiting, progress) as waited:
        if waited and binaries.complete():
            progress(f"the other process's build finished: control plane binaries ready in {directory}")
        if not binaries.complete():
            _build_all(_go(), binaries, progress)
    return binaries


def _build_all(go: str, binaries: Binaries, progress: Callable[[str], None]) -> None:
    directory = binaries.directory
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    steps: list[tuple[str, Callable[[str, dict[str, str], Path, Path], None], tuple[str, ...]]] = [
        (
            f"Kubernetes v{KUBERNETES_VERSION} ({', '.join(KUBERNETES_COMMANDS)})",
            _build_kubernetes,
            KUBERNETES_COMMANDS,
        ),
        (f"etcd v{ETCD_VERSION}", _build_etcd, ("etcd",)),
        (f"kwok v{KWOK_VERSION}", _build_kwok, ("kwok",)),
        (f"helm v{HELM_VERSION}", _build_helm, ("helm",)),
    ]
    with tempfile.TemporaryDirectory(prefix="nodewright-build-") as scratch:
        for number, (title, build, names) in enumerate(steps, 1):
            if all(binaries.path(name).is_file() for name in names) and (
                build is not _build_kwok or all(p.is_file() for p in binaries.stages)
            ):
                continue
            progress(
                f"building {title} from the Go module proxy into {directory} "
                f"(step {number} of {len(steps)}; about 10 minutes in all, once)"
            )
            work = Path(scratch) / str(number)
            work.mkdir()
            build(go, env, work, directory)
    if not binaries.complete():
        raise BuildError(f"the build finished but {directory} is incomplete")
    progress(f"control plane binaries ready in {directory}")


@dataclass(frozen=True, slots=True)
class KarpenterBinary:
    """Karpenter's kwok controller and its CRDs, built from the module `sigs.k8s.io/karpenter`."""

    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / "karpenter-kwok"

    @property
    def crds(self) -> Path:
        return self.directory / "crds"

    def complete(self) -> bool:
        return self.binary.is_file() and all(
            (self.crds / Path(name).name).is_file() for name in KARPENTER_CRDS
        )


def karpenter_dir(root: Path | None = None) -> KarpenterBinary:
    return KarpenterBinary((root or cache_root()) / "bin" / f"karpenter-{KARPENTER_VERSION}")


def _build_karpenter(go: str, env: dict[str, str], work: Path, out: KarpenterBinary) -> None:
    module = f"sigs.k8s.io/karpenter@v{KARPENTER_VERSION}"
    (work / "go.mod").write_text(
        f"module nodewright.local/karpenter\n\ngo 1.24\n\nrequire sigs.k8s.io/karpenter v{KARPENTER_VERSION}\n"
    )
    (work / "tools.go").write_text(
        '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/karpenter/kwok"\n'
    )
    _run([go, "mod", "tidy"], work, env)
    _run([go, "build", "-o", str(out.binary), "sigs.k8s.io/karpenter/kwok"], work, env)
    source = Path(json.loads(_run([go, "mod", "download", "-json", module], work, env))["Dir"])
    out.crds.mkdir(exist_ok=True)
    for name in KARPENTER_CRDS:
        if not (source / name).is_file():
            raise BuildError(f"{module}: no CRD {name} under {source}")
        shutil.copyfile(source / name, out.crds / Path(name).name)


def ensure_karpenter(
    root: Path | None = None, progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
) -> KarpenterBinary:
    """Karpenter's kwok controller, built first if it is not cached (a few minutes once on 2 cores)."""
    karpenter = karpenter_dir(root)
    if karpenter.complete():
        return karpenter
    karpenter.directory.mkdir(parents=True, exist_ok=True)
    waiting = f"waiting for another process's build of Karpenter into {karpenter.directory}"
    with exclusive(karpenter.directory, waiting, progress):
        if not karpenter.complete():
            progress(
                f"building Karpenter v{KARPENTER_VERSION}'s kwok controller from the Go module proxy into "
                f"{karpenter.directory} (a few minutes, once)"
            )
            env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
            with tempfile.TemporaryDirectory(prefix="nodewright-build-karpenter-") as scratch:
                _build_karpenter(_go(), env, Path(scratch), karpenter)
            if not karpenter.complete():
                raise BuildError(f"the build finished but {karpenter.directory} is incomplete")
            progress(f"Karpenter ready in {karpenter.directory}")
    return karpenter


if __name__ == "__main__":
    try:
        if sys.argv[1:] == ["--karpenter"]:
            print(ensure_karpenter().directory)
            sys.exit(0)
        print(ensure_binaries().directory)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
