"""Start and stop a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
each a process of its own on loopback, and a kubeconfig for it.

The API server authenticates an admin by a static token (group `system:masters`), nodes by client certificates
signed by the cluster CA, and joining nodes by bootstrap token, with the Node and RBAC authorizers and the
NodeRestriction admission plugin, as on AKS. At start it gets what kubeadm would have made: the bootstrap token
Secret, the ClusterRoleBindings that let bootstrapping nodes ask for and be granted a client certificate, and
the CRDs from `deploy/crds/`. kwok keeps every Node annotated `kwok.x-k8s.io/node: fake` Ready and runs the
pods bound to it; the node agent of the emulated Azure (`simulator.nodeagent`) adds that annotation when it
registers a Node.

The child processes die with the process that started them (PR_SET_PDEATHSIG), so a killed test run or demo
leaves nothing behind.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import secrets
import shutil
import socket
import ssl
import string
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from workers.controlplane.build import Binaries, ensure_binaries
from workers.controlplane.pki import Pki, make_pki
from workers.processes import die_with_parent

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
BOOTSTRAP_NAMESPACE = "kube-system"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/16"
REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_CRDS = REPOSITORY / "deploy" / "crds"
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits
NODE_LEASE_SECONDS = 120
"""The Leases kwok keeps for its Nodes, renewed every quarter of it as a kubelet renews its own (a kubelet's
are 40 s: a third of the renewals lets thousands of simulated nodes share two cores with everything else)."""
NODE_MONITOR_GRACE_SECONDS = 150
"""How long kube-controller-manager waits for a Node's Lease renewal before it marks the Node Unknown (50 s
by default, for 40 s Leases)."""


class ControlPlaneError(RuntimeError):
    """The control plane did not start; the message names the process and the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class BootstrapToken:
    token_id: str
    token_secret: str = field(repr=False)

    @classmethod
    def generate(cls) -> BootstrapToken:
        return cls(
            "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(6)),
            "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(16)),
        )

    @property
    def secret_name(self) -> str:
        return f"bootstrap-token-{self.token_id}"

    @property
    def reference(self) -> str:
        """`<namespace>/<name>`, as `NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET` takes it."""
        return f"{BOOTSTRAP_NAMESPACE}/{self.secret_name}"

    def secret(self) -> dict[str, object]:
        return _secret(
            self.secret_name,
            "bootstrap.kubernetes.io/token",
            {
                "token-id": self.token_id,
                "token-secret": self.token_secret,
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            },
        )


def _secret(name: str, kind: str, data: dict[str, str]) -> dict[str, object]:
    """A Secret of `kind` in the bootstrap namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": BOOTSTRAP_NAMESPACE},
        "type": kind,
        "stringData": data,
    }


@dataclass(frozen=True, slots=True)
class WindowsAdmin:
    """The admin account of the cluster's Windows nodes (AKS's `windowsProfile`), as the operator keeps it in a
    `kubernetes.io/basic-auth` Secret for nodewright (`NODEWRIGHT_WINDOWS_ADMIN_SECRET`)."""

    username: str
    password: str = field(repr=False)
    secret_name: str = "nodewright-windows-admin"

    @classmethod
    def generate(cls) -> WindowsAdmin:
        """`azureuser` with a random password that meets AKS's rules (every character class, 24 characters)."""
        classes = (string.ascii_lowercase, string.ascii_uppercase, string.digits, "!#%+-.:=@^_~")
        chosen = [secrets.choice(alphabet) for alphabet in classes]
        chosen += [secrets.choice("".join(classes)) for _ in range(24 - len(chosen))]
        secrets.SystemRandom().shuffle(chosen)
        return cls("azureuser", "".join(chosen))

    @property
    def reference(self) -> str:
        return f"{BOOTSTRAP_NAMESPACE}/{self.secret_name}"

    def secret(self) -> dict[str, object]:
        return _secret(
            self.secret_name,
            "kubernetes.io/basic-auth",
            {"username": self.username, "password": self.password},
        )


def _binding(name: str, role: str, group: str) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


BOOTSTRAP_BINDINGS = (
    # kubeadm's names: bootstrapping nodes may create CSRs, and their node-client CSRs are approved at once;
    # nodes may renew their own client certificates.
    _binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", "system:bootstrappers"),
    _binding(
        "kubeadm:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:bootstrappers",
    ),
    _binding(
        "kubeadm:node-autoapprove-certificate-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    ),
)


@dataclass
class ControlPlane:
    """A running control plane. `kubeconfig` is an admin's; `ca_file` is the cluster CA (it signs the API
    server's certificate and authenticates nodes' client certificates)."""

    directory: Path
    binaries: Binaries
    server: str
    ca_file: Path
    kubeconfig: Path
    admin_token: str = field(repr=False)
    bootstrap_token: BootstrapToken
    windows_admin: WindowsAdmin = field(default_factory=WindowsAdmin.generate)
    """The Windows nodes' admin account, in a Secret made with the bootstrap token's."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    """How each process was started (`start_process` starts one again)."""

    @property
    def bootstrap_token_secret(self) -> str:
        return self.bootstrap_token.reference

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this control plane; `check` raises with its stderr on failure."""
        done = subprocess.run(
            [str(self.binaries.path("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done

    def apply(self, documents: list[dict[str, object]] | str) -> str:
        # As JSON documents (JSON is YAML): PyYAML leaves a string such as "742e77" unquoted, which kubectl's
        # YAML 1.2 reads as a number (a bootstrap token id, say).
        text = documents if isinstance(documents, str) else "\n---\n".join(json.dumps(d) for d in documents)
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text).stdout

    def log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    @property
    def audit_log(self) -> Path:
        """Where the API server writes its audit events, when started with an audit policy."""
        return self.log("audit")

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise ControlPlaneError(f"{name} exited with code {process.returncode}: {self._tail(name)}")

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill_process(self, name: str) -> None:
        """SIGKILL one process (`etcd`, `kube-apiserver`, ...), as a crash would end it."""
        process = self.processes[name]
        if process.poll() is None:
            process.kill()
        process.wait()

    def start_process(self, name: str, timeout: float = 60.0) -> None:
        """Start a killed process again with its first command line (the same ports and state); for the API
        server, returns once it is ready."""
        if self.processes[name].poll() is None:
            raise ControlPlaneError(f"{name} is running")
        _start(self, name, self.commands[name])
        if name == "kube-apiserver":
            context = ssl.create_default_context(cafile=str(self.ca_file))
            _wait_until(self, "kube-apiserver", lambda: _readyz(self, context), timeout)

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process, the API server's clients first, etcd last."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + grace
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            if process.poll() is None:
                process.kill()
                process.wait()
        self.processes.clear()


def _kubeconfig(server: str, ca_file: Path, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "nodewright-local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [
            {"name": "nodewright-local", "context": {"cluster": "nodewright-local", "user": "admin"}}
        ],
        "current-context": "nodewright-local",
    }


def _start(plane: ControlPlane, name: str, command: list[str]) -> None:
    plane.commands[name] = command
    log = plane.log(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        plane.processes[name] = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            cwd=plane.directory,
        )


def _wait_until(plane: ControlPlane, what: str, ready: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        plane.check_alive()
        if callable(ready) and ready():
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{what} was not ready within {timeout:g} s")
        time.sleep(0.1)


def _readyz(plane: ControlPlane, context: ssl.SSLContext) -> bool:
    request = urllib.request.Request(
        plane.server + "/readyz", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _kwok_stages(binaries: Binaries, directory: Path) -> Path:
    """kwok's stages in one file (it takes one `-c`)."""
    combined = directory / "kwok-stages.yaml"
    combined.write_text("\n---\n".join(path.read_text().strip() for path in binaries.stages) + "\n")
    return combined


def start_control_plane(
    directory: Path,
    *,
    binaries: Binaries | None = None,
    crds: Path | None = DEFAULT_CRDS,
    timeout: float = 60.0,
    audit_policy: Mapping[str, object] | None = None,
) -> ControlPlane:
    """Start a control plane whose state and logs live in `directory` (made fresh: anything there is removed).

    Builds the binaries first if they are not cached. Returns once the API server is ready, the bootstrap
    objects and CRDs exist and the `default` ServiceAccount has been made (pods can be created). With an
    `audit_policy` (an `audit.k8s.io/v1` Policy), the API server writes the requests it selects to
    `audit_log`, one JSON event per line.
    """
    binaries = binaries or ensure_binaries()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    # The first address of the Service range is the `kubernetes` Service's, which pods reach the API server at.
    pki: Pki = make_pki(directory / "pki", str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[1]))
    etcd_port, peer_port, api_port, kwok_port = free_port(), free_port(), free_port(), free_port()
    admin_token = secrets.token_hex(16)
    tokens = directory / "tokens.csv"
    tokens.write_text(f'{admin_token},admin,admin,"system:masters"\n')
    tokens.chmod(0o600)
    server = f"https://127.0.0.1:{api_port}"
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, pki.ca_cert, admin_token), sort_keys=False))
    kubeconfig.chmod(0o600)
    plane = ControlPlane(
        directory, binaries, server, pki.ca_cert, kubeconfig, admin_token, BootstrapToken.generate()
    )
    try:
        _launch(plane, pki, etcd_port, peer_port, api_port, kwok_port, timeout, audit_policy)
        _bootstrap(plane, crds, timeout)
    except BaseException:
        plane.stop()
        raise
    return plane


def _launch(
    plane: ControlPlane,
    pki: Pki,
    etcd_port: int,
    peer_port: int,
    api_port: int,
    kwok_port: int,
    timeout: float,
    audit_policy: Mapping[str, object] | None,
) -> None:
    binaries, directory, kubeconfig = plane.binaries, plane.directory, str(plane.kubeconfig)
    audit: list[str] = []
    if audit_policy is not None:
        policy = directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(dict(audit_policy), sort_keys=False))
        plane.audit_log.parent.mkdir(parents=True, exist_ok=True)
        audit = ["--audit-policy-file", str(policy), "--audit-log-path", str(plane.audit_log)]
        audit += ["--audit-log-format", "json"]
    _start(
        plane,
        "etcd",
        [
            str(binaries.path("etcd")),
            "--data-dir", str(directory / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",  # a throwaway local cluster: durability of etcd's disk is not the point
            "--log-level", "warn",
        ],
    )  # fmt: skip
    _start(
        plane,
        "kube-apiserver",
        [
            str(binaries.path("kube-apiserver")),
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1",
            "--secure-port", str(api_port),
            "--endpoint-reconciler-type", "none",
            "--tls-cert-file", str(pki.serving_cert),
            "--tls-private-key-file", str(pki.serving_key),
            "--client-ca-file", str(pki.ca_cert),
            "--token-auth-file", str(directory / "tokens.csv"),
            "--enable-bootstrap-token-auth",
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki.service_account_public_key),
            "--service-account-signing-key-file", str(pki.service_account_key),
            "--service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE,
            "--allow-privileged",
            "--max-requests-inflight", "1000",
            "--max-mutating-requests-inflight", "500",
            *audit,
        ],
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    _wait_until(plane, "kube-apiserver", lambda: _readyz(plane, context), timeout)
    auth = ["--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig]
    auth += ["--authorization-kubeconfig", kubeconfig]
    _start(
        plane,
        "kube-controller-manager",
        [
            str(binaries.path("kube-controller-manager")),
            *auth,
            "--service-account-private-key-file", str(pki.service_account_key),
            "--root-ca-file", str(pki.ca_cert),
            "--use-service-account-credentials",
            "--cluster-signing-cert-file", str(pki.ca_cert),
            "--cluster-signing-key-file", str(pki.ca_key),
            # Without the TTL controller, which re-annotates every Node as the cluster grows past 100, 500, 1,000
            # nodes for kubelets' Secret caches (kwok's nodes have none).
            "--controllers",
            "*,bootstrapsigner,tokencleaner,-nodeipam,-cloud-node-lifecycle,-service,-route,-ttl",
            "--node-monitor-grace-period", f"{NODE_MONITOR_GRACE_SECONDS}s",
            "--leader-elect=false",
            "--secure-port", "0",
            "--kube-api-qps", "200",
            "--kube-api-burst", "400",
            "--concurrent-deployment-syncs", "10",
            "--concurrent-replicaset-syncs", "10",
        ],
    )  # fmt: skip
    _start(
        plane,
        "kube-scheduler",
        [
            str(binaries.path("kube-scheduler")),
            *auth,
            "--leader-elect=false",
            "--secure-port", "0",
            "--kube-api-qps", "200",
            "--kube-api-burst", "400",
        ],
    )  # fmt: skip
    _start(
        plane,
        "kwok",
        [
            str(binaries.path("kwok")),
            "--kubeconfig", kubeconfig,
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
            "--server-address", f"127.0.0.1:{kwok_port}",
            # Without Leases, its Nodes' only heartbeat is the status it writes every 10 to 20 minutes, and
            # kube-controller-manager marks each Unknown after the grace period (and kwok Ready again).
            "--node-lease-duration-seconds", str(NODE_LEASE_SECONDS),
            "-c", str(_kwok_stages(binaries, directory)),
        ],
    )  # fmt: skip


def _bootstrap(plane: ControlPlane, crds: Path | None, timeout: float) -> None:
    plane.apply([plane.bootstrap_token.secret(), plane.windows_admin.secret(), *BOOTSTRAP_BINDINGS])
    if crds is not None and crds.is_dir() and any(crds.glob("*.yaml")):
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))

        def established() -> bool:
            # `kubectl wait` fails at once, rather than waiting, on a CRD whose status has no conditions yet (one
            # just created, on a busy machine): ask again until every CRD is Established.
            done = plane.kubectl(
                "wait", "--for=condition=Established", "--timeout=10s", "crd", "--all", check=False
            )
            return done.returncode == 0

        _wait_until(plane, "the CRDs (Established)", established, 60)

    def default_service_account() -> bool:
        return plane.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0

    _wait_until(
        plane, "the default ServiceAccount (kube-controller-manager)", default_service_account, timeout
    )


@contextlib.contextmanager
def control_plane(directory: Path, **options: object) -> Iterator[ControlPlane]:
    """A control plane for the duration of the block."""
    plane = start_control_plane(directory, **options)  # type: ignore[arg-type]
    try:
        yield plane
    finally:
        plane.stop()
