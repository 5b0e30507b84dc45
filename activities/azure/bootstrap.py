"""The node bootstrap (VM custom data), rendered inside the launch from the cluster's bootstrap token Secret.

Like the AKS provider's scriptless mode (research section 3.4), the custom data is a bash script that exports
the node's bootstrap variables (API server, Kubernetes version, node image, the TLS bootstrap token, the kubelet
flags with `--node-labels` and `--register-with-taints`) and runs the provisioning script the node image ships.
The token comes from a kubeadm-style Secret (`kube-system/bootstrap-token-<id>`: `token-id`, `token-secret`)
read through the ClusterAPI on every launch, so a rotated token is used at once. It exists only in the rendered
script: errors name the Secret and the key, never a value, and nothing here logs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from activities.recent import READS_KEPT_SECONDS, Recent
from core.api.meta import Taint
from core.cloudprovider import LaunchRequest
from core.cluster import ClusterAPI
from core.errors import InvalidError, TransientError

PROVISION_SCRIPT = "/opt/azure/containers/provision.sh"
NODE_IMAGE_VERSION_LABEL = "kubernetes.azure.com/node-image-version"
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
_TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")
_TOKEN_SECRET = re.compile(r"^[a-z0-9]{16}$")
BASE_KUBELET_FLAGS = (
    "--image-gc-high-threshold=85",
    "--image-gc-low-threshold=80",
    "--cgroup-driver=systemd",
    "--rotate-certificates=true",
)
"""Flags every AKS node's kubelet gets, before the node's own."""


@dataclass(frozen=True, slots=True)
class BootstrapRequest:
    """What the bootstrap of one launch says about the node (everything but the token)."""

    launch: LaunchRequest
    kubernetes_version: str
    node_image_version: str
    """AKS's name of the image, e.g. `AKSUbuntu-2204gen2containerd-202512.18.0`."""
    max_pods: int


def parse_secret_reference(value: str) -> tuple[str, str]:
    """`<namespace>/<name>` as a pair; ValueError says what is wrong."""
    if not _SECRET_NAME.match(value):
        raise ValueError(f"{value!r} is not <namespace>/<name>, e.g. kube-system/bootstrap-token-abcdef")
    namespace, _, name = value.partition("/")
    return namespace, name


def _taint(taint: Taint) -> str:
    key = f"{taint.key}={taint.value}" if taint.value else taint.key
    return f"{key}:{taint.effect.value}"


def kubelet_flags(request: BootstrapRequest) -> str:
    """The kubelet's command-line flags: the base flags, then the node's labels, taints and max pods."""
    launch = request.launch
    node_labels = {**launch.labels, NODE_IMAGE_VERSION_LABEL: request.node_image_version}
    flags = [
        *BASE_KUBELET_FLAGS,
        "--node-labels=" + ",".join(f"{key}={value}" for key, value in sorted(node_labels.items())),
        f"--max-pods={request.max_pods}",
    ]
    if launch.taints:
        flags.append("--register-with-taints=" + ",".join(_taint(taint) for taint in launch.taints))
    return " ".join(flags)


def render_script(request: BootstrapRequest, api_server: str, token: str) -> str:
    """The bootstrap script (custom data before base64). It holds the token: never log or return it."""
    variables = {
        "API_SERVER_NAME": api_server,
        "KUBERNETES_VERSION": request.kubernetes_version.removeprefix("v"),
        "NODE_IMAGE_VERSION": request.node_image_version,
        "TLS_BOOTSTRAP_TOKEN": token,
        "KUBELET_FLAGS": kubelet_flags(request),
        "KUBELET_NODE_LABELS": ",".join(f"{k}={v}" for k, v in sorted(request.launch.labels.items())),
    }
    lines = [
        "#!/bin/bash",
        "set -euo pipefail",
        *(f"export {name}={shlex.quote(value)}" for name, value in variables.items()),
        f"until [ -f {PROVISION_SCRIPT} ]; do sleep 1; done",
        f"exec {PROVISION_SCRIPT}",
    ]
    return "\n".join(lines) + "\n"


def token_from(secret: Mapping[str, str], where: str) -> str:
    """`<token-id>.<token-secret>` from a bootstrap token Secret's decoded data; `InvalidError` naming the key."""
    token_id, token_secret = secret.get("token-id", ""), secret.get("token-secret", "")
    if not _TOKEN_ID.match(token_id):
        raise InvalidError(f"Secret {where}: data.token-id is missing or not 6 of [a-z0-9]", code="Invalid")
    if not _TOKEN_SECRET.match(token_secret):
        raise InvalidError(
            f"Secret {where}: data.token-secret is missing or not 16 of [a-z0-9]", code="Invalid"
        )
    return f"{token_id}.{token_secret}"


class ClusterBootstrap:
    """The provider's `Bootstrap`: the script for a launch, with the token read from the cluster's Secret."""

    def __init__(
        self, cluster: ClusterAPI, secret: str, api_server: str, keep_seconds: float = READS_KEPT_SECONDS
    ) -> None:
        self._namespace, self._name = parse_secret_reference(secret)
        self._api_server = api_server
        # Read once every `keep_seconds` for all launches: a rotated token is used that much later at most.
        self._secret = Recent(lambda key: cluster.get_secret(*key), keep_seconds)

    async def __call__(self, request: BootstrapRequest) -> str:
        where = f"{self._namespace}/{self._name}"
        secret = await self._secret((self._namespace, self._name))
        if secret is None:
            # Retryable: the launch succeeds once the Secret exists again.
            raise TransientError(f"the bootstrap token Secret {where} does not exist", code="SecretNotFound")
        return render_script(request, self._api_server, token_from(secret, where))
