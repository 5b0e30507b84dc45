"""What a VM's custom data tells the node agent that boots on it.

The custom data is the base64 bash script the AKS provider renders (scriptless mode): `export NAME=value`
lines, among them `API_SERVER_NAME`, `TLS_BOOTSTRAP_TOKEN`, `KUBELET_FLAGS` (with `--node-labels` and
`--register-with-taints`), `KUBERNETES_VERSION` and `NODE_IMAGE_VERSION`. Whether the token is good is the API
server's to say (TLS bootstrap, `simulator.nodeagent`). Nothing here logs the token or puts it in an error
message.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from dataclasses import dataclass, field

from core.api.meta import Taint, TaintEffect

TOKEN_VARIABLE = "TLS_BOOTSTRAP_TOKEN"


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
