"""Node bootstrap as the simulated cluster sees it: the bootstrap token Secret, and what a VM's custom data tells
its kubelet.

The cluster holds a kubeadm-style bootstrap token (`kube-system/bootstrap-token-<id>`, type
`bootstrap.kubernetes.io/token`, data `token-id` and `token-secret`), made at start from the seed. A VM's custom
data is the base64 bash script the AKS provider renders (scriptless mode): `export NAME=value` lines, among
them `API_SERVER_NAME`, `TLS_BOOTSTRAP_TOKEN`, `KUBELET_FLAGS` (with `--node-labels` and
`--register-with-taints`), `KUBERNETES_VERSION` and `NODE_IMAGE_VERSION`. A kubelet whose token is not the
cluster's cannot join, as TLS bootstrapping would refuse it. Nothing here logs the token or puts it in an error message.
"""

from __future__ import annotations

import base64
import binascii
import random
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.api.meta import ObjectMeta, Taint, TaintEffect

if TYPE_CHECKING:
    from simulator.state import Secret

BOOTSTRAP_NAMESPACE = "kube-system"
BOOTSTRAP_SECRET_TYPE = "bootstrap.kubernetes.io/token"
TOKEN_VARIABLE = "TLS_BOOTSTRAP_TOKEN"
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def bootstrap_token_secret(seed: int) -> Secret:
    """The cluster's bootstrap token Secret: a 6-character id and a 16-character secret drawn from the seed."""
    # The home-made cluster's Secret, imported here so that reading custom data does not need that cluster.
    from simulator.state import Secret

    draw = random.Random(f"{seed}/bootstrap-token")
    token_id = "".join(draw.choice(_TOKEN_ALPHABET) for _ in range(6))
    token_secret = "".join(draw.choice(_TOKEN_ALPHABET) for _ in range(16))
    return Secret(
        metadata=ObjectMeta(name=f"bootstrap-token-{token_id}", namespace=BOOTSTRAP_NAMESPACE),
        type=BOOTSTRAP_SECRET_TYPE,
        data={
            "token-id": _b64(token_id),
            "token-secret": _b64(token_secret),
            "usage-bootstrap-authentication": _b64("true"),
            "usage-bootstrap-signing": _b64("true"),
            "auth-extra-groups": _b64("system:bootstrappers:kubeadm:default-node-token"),
        },
    )


def token_of(secret: Secret) -> str | None:
    """`<token-id>.<token-secret>` of a bootstrap token Secret; None for any other Secret."""
    if secret.type != BOOTSTRAP_SECRET_TYPE:
        return None
    try:
        token_id = base64.b64decode(secret.data.get("token-id", "")).decode()
        token_secret = base64.b64decode(secret.data.get("token-secret", "")).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return f"{token_id}.{token_secret}" if token_id and token_secret else None


@dataclass(frozen=True, slots=True)
class NodeBootstrap:
    """What a kubelet reads from its VM's custom data. `token` is compared, never shown (`repr` leaves it out)."""

    token: str = field(repr=False)
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    kubernetes_version: str = ""
    node_image_version: str = ""
    api_server: str = ""
    """`API_SERVER_NAME`: the API server's host (and port), reached over HTTPS."""


class BootstrapError(ValueError):
    """The custom data is not a bootstrap this kubelet can run (the message never quotes it)."""


def variables(script: str) -> dict[str, str]:
    """The `export NAME=value` assignments of a bash script, values unquoted as bash would."""
    found: dict[str, str] = {}
    for line in script.splitlines():
        text = line.strip()
        if not text.startswith("export "):
            continue
        name, equals, value = text.removeprefix("export ").partition("=")
        if not equals or not name.isidentifier():
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            raise BootstrapError(f"the value of {name} is not valid shell quoting") from None
        found[name] = " ".join(words)
    return found


def _flags(text: str) -> dict[str, str]:
    """`--name=value` kubelet flags."""
    flags: dict[str, str] = {}
    for word in shlex.split(text):
        name, equals, value = word.partition("=")
        if word.startswith("--") and equals:
            flags[name.removeprefix("--")] = value
    return flags


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise BootstrapError(f"--node-labels: {item!r} is not key=value")
        labels[key] = value
    return labels


def _taints(text: str) -> tuple[Taint, ...]:
    """`key=value:Effect` or `key:Effect`, comma-separated, as `--register-with-taints` takes them."""
    taints = []
    for item in filter(None, text.split(",")):
        head, colon, effect = item.rpartition(":")
        key, _, value = head.partition("=")
        if not colon or not key:
            raise BootstrapError(f"--register-with-taints: {item!r} is not key[=value]:Effect")
        try:
            taints.append(Taint(key=key, value=value or None, effect=TaintEffect(effect)))
        except ValueError:
            raise BootstrapError(f"--register-with-taints: {effect!r} is not a taint effect") from None
    return tuple(taints)


def read_custom_data(custom_data: str) -> NodeBootstrap:
    """The kubelet's view of a VM's base64 custom data; `BootstrapError` when it carries no bootstrap."""
    try:
        script = base64.b64decode(custom_data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise BootstrapError("the custom data is not base64 text") from None
    found = variables(script)
    token = found.get(TOKEN_VARIABLE)
    if not token:
        raise BootstrapError(f"the custom data sets no {TOKEN_VARIABLE}")
    flags = _flags(found.get("KUBELET_FLAGS", ""))
    return NodeBootstrap(
        token=token,
        labels=_labels(flags.get("node-labels", "")),
        taints=_taints(flags.get("register-with-taints", "")),
        kubernetes_version=found.get("KUBERNETES_VERSION", ""),
        node_image_version=found.get("NODE_IMAGE_VERSION", ""),
        api_server=found.get("API_SERVER_NAME", ""),
    )


def cluster_tokens(secrets: Mapping[str, Secret]) -> frozenset[str]:
    """The tokens the API server accepts: those of `kube-system/bootstrap-token-<id>` Secrets matching their name."""
    tokens = set()
    for name, secret in secrets.items():
        token = token_of(secret)
        if token is not None and name == f"bootstrap-token-{token.partition('.')[0]}":
            tokens.add(token)
    return frozenset(tokens)
