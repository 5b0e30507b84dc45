"""What a VM's custom data tells the node agent that boots on it.

On Linux the custom data is the base64 bash script the AKS provider renders (scriptless mode): `export
NAME=value` lines, among them `API_SERVER_NAME`, `TLS_BOOTSTRAP_TOKEN`, `KUBELET_FLAGS` (with `--node-labels`,
`--register-with-taints`, `--max-pods`, `--kube-reserved`, `--eviction-hard` and the AKSNodeClass's kubelet
settings), `KUBERNETES_VERSION`, `NODE_IMAGE_VERSION`, and the node settings of `activities.azure.bootstrap`
(sysctls, transparent huge pages, swap, artifact streaming, GPU driver, LocalDNS). On Windows it is the
PowerShell script of `activities.azure.bootstrap.render_windows_script`: `$global:Name = 'value'` lines
(`MasterIP`, `TLSBootstrapToken`, `KubeletNodeLabels`, `KubeBinariesVersion`, `NodeImageVersion`, `EnableFIPS`,
`ConfigGPUDriverIfNeeded`) and `$global:KubeletConfigArgs = @('--flag=value', ...)`. Whether the token is good is
the API server's to say (TLS bootstrap, `simulator.nodeagent`). Nothing here logs the token or puts it in an
error message.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass, field

from core.api.meta import Taint, TaintEffect
from core.resources import MEMORY, Resources, parse_resources

TOKEN_VARIABLE = "TLS_BOOTSTRAP_TOKEN"
NODE_VARIABLES = (
    "SYSCTL_CONTENT",
    "THP_ENABLED",
    "THP_DEFRAG",
    "SWAP_FILE_SIZE_MB",
    "ARTIFACT_STREAMING_ENABLED",
    "GPU_NODE",
    "CONFIG_GPU_DRIVER_IF_NEEDED",
    "GPU_DRIVER_TYPE",
    "SHOULD_ENABLE_LOCALDNS",
    "LOCALDNS_GENERATED_COREFILE",
)
"""The node settings a bootstrap may carry besides the kubelet's flags (base64 ones decoded when read)."""
_BASE64_VARIABLES = frozenset({"SYSCTL_CONTENT", "LOCALDNS_GENERATED_COREFILE"})
WINDOWS_TOKEN_VARIABLE = "TLSBootstrapToken"
WINDOWS_NODE_VARIABLES = ("EnableFIPS", "ConfigGPUDriverIfNeeded")
"""The node settings a Windows bootstrap carries besides the kubelet's arguments."""
_POWERSHELL_ASSIGNMENT = re.compile(r"^\$global:(?P<name>\w+)\s*=\s*(?P<value>.*)$")
_POWERSHELL_STRING = re.compile(r"'((?:[^']|'')*)'")
_EVICTION_SIGNALS = {"memory.available": MEMORY}


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
    kubelet: dict[str, str] = field(default_factory=dict)
    """The kubelet's other flags by name without `--` (`max-pods`, `cpu-manager-policy`...)."""
    node: dict[str, str] = field(default_factory=dict)
    """The `NODE_VARIABLES` the bootstrap sets, base64 ones decoded (`WINDOWS_NODE_VARIABLES` on Windows)."""
    windows: bool = False
    """Whether it is a Windows node's (PowerShell) bootstrap."""

    @property
    def max_pods(self) -> int | None:
        value = self.kubelet.get("max-pods")
        return int(value) if value else None

    @property
    def kube_reserved(self) -> Resources:
        return _reserved("kube-reserved", self.kubelet.get("kube-reserved", ""))

    @property
    def system_reserved(self) -> Resources:
        return _reserved("system-reserved", self.kubelet.get("system-reserved", ""))

    @property
    def eviction_hard(self) -> Resources:
        """`--eviction-hard` thresholds given as quantities, as the resources they hold back."""
        found: dict[str, str] = {}
        for item in filter(None, self.kubelet.get("eviction-hard", "").split(",")):
            signal, less, amount = item.partition("<")
            if signal in _EVICTION_SIGNALS and less and not amount.endswith("%"):
                found[_EVICTION_SIGNALS[signal]] = amount
        return _parsed("eviction-hard", found)


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
    return _flag_words(shlex.split(text))


def _flag_words(words: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    for word in words:
        name, equals, value = word.partition("=")
        if word.startswith("--") and equals:
            flags[name.removeprefix("--")] = value.removeprefix('"').removesuffix('"')
    return flags


def powershell_variables(script: str) -> tuple[dict[str, str], list[str]]:
    """The `$global:Name = '...'` strings of a PowerShell script, and the items of its `KubeletConfigArgs` array
    (single-quoted strings, quotes doubled inside, as `render_windows_script` writes them)."""
    found: dict[str, str] = {}
    arguments: list[str] = []
    for line in script.splitlines():
        match = _POWERSHELL_ASSIGNMENT.match(line.strip())
        if match is None:
            continue
        strings = [item.replace("''", "'") for item in _POWERSHELL_STRING.findall(match["value"])]
        if match["name"] == "KubeletConfigArgs":
            arguments = strings
        elif strings:
            found[match["name"]] = strings[0]
    return found, arguments


def _parsed(flag: str, amounts: dict[str, str]) -> Resources:
    try:
        return parse_resources(amounts)
    except ValueError:
        raise BootstrapError(f"--{flag}: an amount is not a quantity") from None


def _reserved(flag: str, text: str) -> Resources:
    """`cpu=100m,memory=1Gi`, as `--kube-reserved` and `--system-reserved` take them."""
    amounts: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        name, equals, amount = item.partition("=")
        if not equals or not name:
            raise BootstrapError(f"--{flag}: {item!r} is not resource=quantity")
        amounts[name] = amount
    return _parsed(flag, amounts)


def _node_variables(found: dict[str, str]) -> dict[str, str]:
    node: dict[str, str] = {}
    for name in NODE_VARIABLES:
        if name not in found:
            continue
        value = found[name]
        if name in _BASE64_VARIABLES:
            try:
                value = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise BootstrapError(f"{name} is not base64 text") from None
        node[name] = value
    return node


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


_REGISTRATION_FLAGS = frozenset({"node-labels", "register-with-taints"})


@dataclass(frozen=True, slots=True)
class _Names:
    """Where a bootstrap script keeps the token, the versions and the API server."""

    token: str
    kubernetes_version: str
    node_image_version: str
    api_server: str


_BASH = _Names(TOKEN_VARIABLE, "KUBERNETES_VERSION", "NODE_IMAGE_VERSION", "API_SERVER_NAME")
_POWERSHELL = _Names(WINDOWS_TOKEN_VARIABLE, "KubeBinariesVersion", "NodeImageVersion", "MasterIP")


def _bootstrap(
    found: dict[str, str], flags: dict[str, str], node_labels: str, node: dict[str, str], names: _Names
) -> NodeBootstrap:
    token = found.get(names.token)
    if not token:
        raise BootstrapError(f"the custom data sets no {names.token}")
    return NodeBootstrap(
        token=token,
        labels=_labels(node_labels),
        taints=_taints(flags.get("register-with-taints", "")),
        kubernetes_version=found.get(names.kubernetes_version, ""),
        node_image_version=found.get(names.node_image_version, ""),
        api_server=found.get(names.api_server, ""),
        kubelet={name: value for name, value in flags.items() if name not in _REGISTRATION_FLAGS},
        node=node,
        windows=names is _POWERSHELL,
    )


def read_custom_data(custom_data: str) -> NodeBootstrap:
    """The kubelet's view of a VM's base64 custom data (a bash or a PowerShell bootstrap); `BootstrapError` when
    it carries no bootstrap."""
    try:
        script = base64.b64decode(custom_data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise BootstrapError("the custom data is not base64 text") from None
    if f"$global:{WINDOWS_TOKEN_VARIABLE}" in script:
        found, arguments = powershell_variables(script)
        node = {name: found[name] for name in WINDOWS_NODE_VARIABLES if name in found}
        return _bootstrap(
            found, _flag_words(arguments), found.get("KubeletNodeLabels", ""), node, _POWERSHELL
        )
    found = variables(script)
    flags = _flags(found.get("KUBELET_FLAGS", ""))
    return _bootstrap(found, flags, flags.get("node-labels", ""), _node_variables(found), _BASH)
