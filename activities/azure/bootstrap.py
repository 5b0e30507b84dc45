"""The node bootstrap (VM custom data), rendered inside the launch from the cluster's bootstrap token Secret.

Like the AKS provider's scriptless mode (research section 3.4), the custom data is a bash script that exports
the node's bootstrap variables and runs the provisioning script the node image ships. The variables carry the
API server, Kubernetes version, node image and TLS bootstrap token, and what the AKSNodeClass says about the
node, under the names AKS's node bootstrapping uses:

- `KUBELET_FLAGS`: the base flags, `--node-labels` (the launch's labels, plus the labels AKS writes from the
  NodeClass: `kubernetes.azure.com/fips_enabled=true` with FIPS, `kubernetes.azure.com/localdns-state`,
  `kubernetes.azure.com/artifactstreaming-enabled=true`, `kubernetes.azure.com/accelerator` on GPU sizes),
  `--max-pods`, `--kube-reserved` (the provider's brackets), `--eviction-hard=memory.available<750Mi`,
  `--register-with-taints`, and the `kubelet` block as the kubelet's own flags (`--cpu-manager-policy`,
  `--cpu-cfs-quota`, `--cpu-cfs-quota-period`, `--image-gc-high-threshold`/`--image-gc-low-threshold`
  (85/80 unless set), `--topology-manager-policy`, `--allowed-unsafe-sysctls`, `--container-log-max-size`,
  `--container-log-max-files`, `--pod-max-pids`, `--fail-swap-on`);
- `linuxOSConfig`: `SYSCTL_CONTENT` (base64 of `name=value` lines for the sysctls set), `THP_ENABLED`,
  `THP_DEFRAG`, `SWAP_FILE_SIZE_MB`;
- `ARTIFACT_STREAMING_ENABLED`;
- the GPU: `GPU_NODE`, `CONFIG_GPU_DRIVER_IF_NEEDED` (gpu.mode Driver), `GPU_DRIVER_TYPE`;
- LocalDNS: `SHOULD_ENABLE_LOCALDNS` and `LOCALDNS_GENERATED_COREFILE` (base64 of the Corefile the node-local
  DNS proxy runs, from the zone overrides).

The token comes from a kubeadm-style Secret (`kube-system/bootstrap-token-<id>`: `token-id`, `token-secret`):
the newest valid one of the configured Secret and the rotated ones (`activities.bootstrap_tokens`), read through
the ClusterAPI every few seconds at most, so a rotated token is used at once. It exists only in the rendered
script: errors name the Secret and the key, never a value, and nothing here logs.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from activities.bootstrap_tokens import launch_token, parse_secret_reference, read_tokens
from activities.recent import READS_KEPT_SECONDS, Recent
from core import labels
from core.api.aksnodeclass import (
    AKSNodeClass,
    AKSNodeClassSpec,
    GPUMode,
    KubeletConfiguration,
    LinuxOSConfiguration,
    LocalDNS,
    LocalDNSForwardDestination,
    LocalDNSProtocol,
    LocalDNSQueryLogging,
    LocalDNSServeStale,
    LocalDNSState,
    LocalDNSZoneOverride,
)
from core.api.meta import Taint
from core.api.nodepool import duration_timedelta
from core.cloudprovider import LaunchRequest
from core.cluster import ClusterAPI
from core.instancetypes.azure import ImageFamily as SizeImageFamily
from core.instancetypes.azure import eviction_threshold, node_kube_reserved, parse_size_name
from core.instancetypes.catalog import AzureSku
from core.quantity import format_bytes, parse_quantity
from core.resources import format_resources

PROVISION_SCRIPT = "/opt/azure/containers/provision.sh"
NODE_IMAGE_VERSION_LABEL = "kubernetes.azure.com/node-image-version"
LOCAL_DNS_STATE_LABEL = "kubernetes.azure.com/localdns-state"
ARTIFACT_STREAMING_LABEL = "kubernetes.azure.com/artifactstreaming-enabled"
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
BASE_KUBELET_FLAGS = (
    "--cgroup-driver=systemd",
    "--rotate-certificates=true",
)
"""Flags every AKS node's kubelet gets, before the node's own."""
WINDOWS_BASE_KUBELET_FLAGS = (
    "--cgroups-per-qos=false",
    '--enforce-node-allocatable=""',
    "--hairpin-mode=promiscuous-bridge",
    "--rotate-certificates=true",
)
"""... a Windows node's kubelet instead (Windows has no cgroups: what is reserved is not enforced)."""
WINDOWS_PROVISION_SCRIPT = "$env:SystemDrive\\AzureData\\windows\\provision.ps1"
"""The provisioning the AKS Windows node image ships, which the Windows bootstrap runs after its variables."""
IMAGE_GC_HIGH_THRESHOLD = 85
IMAGE_GC_LOW_THRESHOLD = 80
"""AKS's image garbage collection thresholds, unless the AKSNodeClass's kubelet block sets them."""
LOCAL_DNS_VNET_ADDRESS = "169.254.10.10"
"""Where the node-local DNS proxy listens for the node's own queries (the vnetDNSOverrides)."""
LOCAL_DNS_KUBE_ADDRESS = "169.254.10.11"
"""Where it listens for pods' queries (the kubeDNSOverrides)."""
AZURE_DNS = "168.63.129.16"
CLUSTER_DNS = "10.0.0.10"
"""AKS's default kube-dns service address, where ClusterCoreDNS forwards go."""

SYSCTL_NAMES = {
    "fs_aio_max_nr": "fs.aio-max-nr",
    "fs_file_max": "fs.file-max",
    "fs_inotify_max_user_watches": "fs.inotify.max_user_watches",
    "fs_nr_open": "fs.nr_open",
    "kernel_threads_max": "kernel.threads-max",
    "net_core_netdev_max_backlog": "net.core.netdev_max_backlog",
    "net_core_optmem_max": "net.core.optmem_max",
    "net_core_rmem_default": "net.core.rmem_default",
    "net_core_rmem_max": "net.core.rmem_max",
    "net_core_somaxconn": "net.core.somaxconn",
    "net_core_wmem_default": "net.core.wmem_default",
    "net_core_wmem_max": "net.core.wmem_max",
    "net_ipv4_ip_local_port_range": "net.ipv4.ip_local_port_range",
    "net_ipv4_neigh_default_gc_thresh1": "net.ipv4.neigh.default.gc_thresh1",
    "net_ipv4_neigh_default_gc_thresh2": "net.ipv4.neigh.default.gc_thresh2",
    "net_ipv4_neigh_default_gc_thresh3": "net.ipv4.neigh.default.gc_thresh3",
    "net_ipv4_tcp_fin_timeout": "net.ipv4.tcp_fin_timeout",
    "net_ipv4_tcp_keepalive_probes": "net.ipv4.tcp_keepalive_probes",
    "net_ipv4_tcp_keepalive_time": "net.ipv4.tcp_keepalive_time",
    "net_ipv4_tcp_max_syn_backlog": "net.ipv4.tcp_max_syn_backlog",
    "net_ipv4_tcp_max_tw_buckets": "net.ipv4.tcp_max_tw_buckets",
    "net_ipv4_tcp_tw_reuse": "net.ipv4.tcp_tw_reuse",
    "net_ipv4_tcp_keepalive_intvl": "net.ipv4.tcp_keepalive_intvl",
    "net_netfilter_nf_conntrack_buckets": "net.netfilter.nf_conntrack_buckets",
    "net_netfilter_nf_conntrack_max": "net.netfilter.nf_conntrack_max",
    "vm_max_map_count": "vm.max_map_count",
    "vm_swappiness": "vm.swappiness",
    "vm_vfs_cache_pressure": "vm.vfs_cache_pressure",
}
"""Each `linuxOSConfig.sysctls` field's kernel name."""


@dataclass(frozen=True, slots=True)
class BootstrapRequest:
    """What the bootstrap of one launch says about the node (everything but the token)."""

    launch: LaunchRequest
    kubernetes_version: str
    node_image_version: str
    """AKS's name of the image, e.g. `AKSUbuntu-2204gen2containerd-202512.18.0`."""
    max_pods: int
    nodeclass: AKSNodeClassSpec = field(default_factory=AKSNodeClassSpec)
    """The launch's AKSNodeClass spec (the defaults for a launch without one)."""
    kube_reserved: Mapping[str, int] = field(default_factory=dict)
    """The size's kube-reserved CPU (millicores) and memory (bytes), by the provider's brackets."""
    gpu_manufacturer: str | None = None
    """`nvidia` or `amd` for a size with registered GPUs."""
    gpu_name: str | None = None
    """The accelerator of the size name (`A100`, `A10`...), which picks the driver."""
    local_dns: bool = False
    """Whether the AKSNodeClass's LocalDNS resolves to Enabled (`status.localDNSState`)."""

    @property
    def windows(self) -> bool:
        """Whether the node runs Windows Server (its bootstrap is PowerShell, run by the CustomScriptExtension)."""
        return self.nodeclass.image_family.is_windows


def bootstrap_request(
    launch: LaunchRequest,
    nodeclass: AKSNodeClass | None,
    sku: AzureSku,
    kubernetes_version: str,
    node_image_version: str,
    max_pods: int,
) -> BootstrapRequest:
    """The bootstrap of a launch of `sku` from `nodeclass` (None: the defaults): its settings, the size's
    kube-reserved and GPU, and whether LocalDNS resolves to Enabled."""
    size = parse_size_name(sku.name)
    spec = nodeclass.spec if nodeclass is not None else AKSNodeClassSpec()
    return BootstrapRequest(
        launch=launch,
        kubernetes_version=kubernetes_version,
        node_image_version=node_image_version,
        max_pods=max_pods,
        nodeclass=spec,
        kube_reserved=node_kube_reserved(sku, SizeImageFamily(spec.image_family)),
        gpu_manufacturer=sku.gpu_manufacturer if sku.gpu_count > 0 else None,
        gpu_name=size.accelerator if size is not None else None,
        local_dns=nodeclass is not None and nodeclass.resolved_local_dns_state() is LocalDNSState.ENABLED,
    )


def _taint(taint: Taint) -> str:
    key = f"{taint.key}={taint.value}" if taint.value else taint.key
    return f"{key}:{taint.effect.value}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def node_labels(request: BootstrapRequest) -> dict[str, str]:
    """The kubelet's `--node-labels`: the launch's, and those AKS writes from the NodeClass and the size."""
    spec = request.nodeclass
    found = {
        **request.launch.labels,
        NODE_IMAGE_VERSION_LABEL: request.node_image_version,
        LOCAL_DNS_STATE_LABEL: "enabled" if request.local_dns else "disabled",
    }
    if spec.fips_enabled:
        found[labels.AKS_FIPS_ENABLED] = "true"
    if spec.artifact_streaming_enabled:
        found[ARTIFACT_STREAMING_LABEL] = "true"
    if request.gpu_manufacturer is not None:
        found[ACCELERATOR_LABEL] = request.gpu_manufacturer
    return found


def custom_kubelet_flags(kubelet: KubeletConfiguration) -> list[str]:
    """The AKSNodeClass `kubelet` block as kubelet flags (the kubelet's defaults where a field is unset)."""
    high = kubelet.image_gc_high_threshold_percent
    low = kubelet.image_gc_low_threshold_percent
    flags = [
        f"--image-gc-high-threshold={IMAGE_GC_HIGH_THRESHOLD if high is None else high}",
        f"--image-gc-low-threshold={IMAGE_GC_LOW_THRESHOLD if low is None else low}",
        f"--cpu-manager-policy={kubelet.cpu_manager_policy.value}",
        f"--cpu-cfs-quota={_bool(kubelet.cpu_cfs_quota)}",
        f"--cpu-cfs-quota-period={kubelet.cpu_cfs_quota_period}",
        f"--topology-manager-policy={kubelet.topology_manager_policy.value}",
        f"--container-log-max-size={kubelet.container_log_max_size}",
        f"--container-log-max-files={kubelet.container_log_max_files}",
        f"--pod-max-pids={-1 if kubelet.pod_pids_limit is None else kubelet.pod_pids_limit}",
    ]
    if kubelet.allowed_unsafe_sysctls:
        flags.append("--allowed-unsafe-sysctls=" + ",".join(kubelet.allowed_unsafe_sysctls))
    if kubelet.fail_swap_on is not None:
        flags.append(f"--fail-swap-on={_bool(kubelet.fail_swap_on)}")
    return flags


def _labels_text(request: BootstrapRequest) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(node_labels(request).items()))


def kubelet_arguments(request: BootstrapRequest) -> list[str]:
    """The kubelet's flags but `--node-labels`: the OS's base flags, max pods, reservations, the hard eviction
    thresholds (none on Windows) and taints, then the AKSNodeClass's kubelet block."""
    launch = request.launch
    flags = [*(WINDOWS_BASE_KUBELET_FLAGS if request.windows else BASE_KUBELET_FLAGS)]
    flags.append(f"--max-pods={request.max_pods}")
    if request.kube_reserved:
        reserved = format_resources(request.kube_reserved)
        flags.append("--kube-reserved=" + ",".join(f"{name}={amount}" for name, amount in reserved.items()))
    family = SizeImageFamily(request.nodeclass.image_family)
    thresholds = [
        f"memory.available<{format_bytes(amount)}" for amount in eviction_threshold(family).values()
    ]
    flags.append("--eviction-hard=" + (",".join(thresholds) or '""'))
    if launch.taints:
        flags.append("--register-with-taints=" + ",".join(_taint(taint) for taint in launch.taints))
    flags.extend(custom_kubelet_flags(request.nodeclass.kubelet or KubeletConfiguration()))
    return flags


def kubelet_flags(request: BootstrapRequest) -> str:
    """The kubelet's command line (`KUBELET_FLAGS`): the base flags, the node's labels, then the rest of
    `kubelet_arguments`."""
    flags = kubelet_arguments(request)
    base = len(WINDOWS_BASE_KUBELET_FLAGS if request.windows else BASE_KUBELET_FLAGS)
    flags.insert(base, f"--node-labels={_labels_text(request)}")
    return " ".join(flags)


def sysctl_content(config: LinuxOSConfiguration) -> str:
    """`name=value` lines (the content of AKS's sysctl drop-in) for the sysctls the NodeClass sets."""
    if config.sysctls is None:
        return ""
    lines = []
    for name, value in config.sysctls.model_dump(exclude_none=True).items():
        shown = int(value) if isinstance(value, bool) else value
        lines.append(f"{SYSCTL_NAMES[name]}={shown}")
    return "".join(f"{line}\n" for line in lines)


def swap_file_size_mb(size: str) -> int:
    """`swapFileSize` ("2Gi", "512M") in MiB, as AKS's `swapFileSizeMB` takes it."""
    return int(parse_quantity(size) // 2**20)


def _seconds(duration: str) -> int:
    value = duration_timedelta(duration)
    return int(value.total_seconds()) if value is not None else 0


def _zone_block(override: LocalDNSZoneOverride, address: str) -> list[str]:
    upstream = (
        AZURE_DNS if override.forward_destination is LocalDNSForwardDestination.VNET_DNS else CLUSTER_DNS
    )
    protocol = "force_tcp" if override.protocol is LocalDNSProtocol.FORCE_TCP else "prefer_udp"
    lines = [
        f"{override.zone}:53 {{",
        "    log" if override.query_logging is LocalDNSQueryLogging.LOG else "    errors",
        f"    bind {address}",
        f"    forward . {upstream} {{",
        f"        {protocol}",
        f"        policy {override.forward_policy.value.lower()}",
        f"        max_concurrent {override.max_concurrent}",
        "    }",
        f"    cache {_seconds(override.cache_duration)}s {{",
    ]
    if override.serve_stale is not LocalDNSServeStale.DISABLE:
        stale = _seconds(override.serve_stale_duration)
        lines.append(f"        serve_stale {stale}s {override.serve_stale.value.lower()}")
    return [*lines, "    }", "}"]


def local_dns_corefile(local_dns: LocalDNS) -> str:
    """The node-local DNS proxy's Corefile: one server block per zone override, the vnetDNSOverrides on the
    node's listener, the kubeDNSOverrides on the pods' one."""
    lines: list[str] = []
    for address, overrides in (
        (LOCAL_DNS_VNET_ADDRESS, local_dns.vnet_dns_overrides),
        (LOCAL_DNS_KUBE_ADDRESS, local_dns.kube_dns_overrides),
    ):
        for override in overrides:
            lines.extend(_zone_block(override, address))
    return "\n".join(lines) + "\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def nodeclass_variables(request: BootstrapRequest) -> dict[str, str]:
    """The bootstrap variables from the AKSNodeClass: OS config, artifact streaming, GPU and LocalDNS."""
    spec = request.nodeclass
    found: dict[str, str] = {}
    os_config = spec.linux_os_config
    if os_config is not None:
        if content := sysctl_content(os_config):
            found["SYSCTL_CONTENT"] = _b64(content)
        if os_config.transparent_huge_page_enabled is not None:
            found["THP_ENABLED"] = os_config.transparent_huge_page_enabled.value
        if os_config.transparent_huge_page_defrag is not None:
            found["THP_DEFRAG"] = os_config.transparent_huge_page_defrag.value
        if os_config.swap_file_size is not None:
            found["SWAP_FILE_SIZE_MB"] = str(swap_file_size_mb(os_config.swap_file_size))
    found["ARTIFACT_STREAMING_ENABLED"] = _bool(spec.artifact_streaming_enabled)
    gpu_node = request.gpu_manufacturer is not None
    found["GPU_NODE"] = _bool(gpu_node)
    found["CONFIG_GPU_DRIVER_IF_NEEDED"] = _bool(gpu_node and spec.gpu_mode is GPUMode.DRIVER)
    if gpu_node and spec.gpu_mode is GPUMode.DRIVER:
        found["GPU_DRIVER_TYPE"] = gpu_driver_type(request.gpu_name)
    found["SHOULD_ENABLE_LOCALDNS"] = _bool(request.local_dns)
    if request.local_dns and spec.local_dns is not None:
        found["LOCALDNS_GENERATED_COREFILE"] = _b64(local_dns_corefile(spec.local_dns))
    return found


def gpu_driver_type(gpu_name: str | None) -> str:
    """AKS's driver for a GPU: GRID for the A10 sizes, CUDA otherwise."""
    return "grid" if gpu_name == "A10" else "cuda"


def render(request: BootstrapRequest, api_server: str, token: str) -> str:
    """The node's bootstrap for its OS: PowerShell on Windows, bash elsewhere. It holds the token."""
    return (render_windows_script if request.windows else render_script)(request, api_server, token)


def _powershell(value: str) -> str:
    """A PowerShell single-quoted string (nothing in it is expanded; a quote is doubled)."""
    return "'" + value.replace("'", "''") + "'"


def render_windows_script(request: BootstrapRequest, api_server: str, token: str) -> str:
    """The Windows bootstrap (custom data before base64), as AKS's: a PowerShell script that the
    CustomScriptExtension copies out of `C:\\AzureData\\CustomData.bin` and runs. It sets the node's
    variables (the API server, Kubernetes version, node image, TLS bootstrap token, the kubelet's labels and
    arguments, FIPS and the GPU driver) and runs the provisioning the node image ships. It holds the token:
    never log or return it."""
    gpu_node = request.gpu_manufacturer is not None
    variables = {
        "MasterIP": api_server,
        "KubeBinariesVersion": request.kubernetes_version.removeprefix("v"),
        "NodeImageVersion": request.node_image_version,
        "TLSBootstrapToken": token,
        "KubeletNodeLabels": _labels_text(request),
        "EnableFIPS": _bool(request.nodeclass.fips_enabled),
        "ConfigGPUDriverIfNeeded": _bool(gpu_node and request.nodeclass.gpu_mode is GPUMode.DRIVER),
    }
    lines = [
        'param([string]$CSEResultFilePath = "$env:SystemDrive\\AzureData\\provision.complete")',
        "$ErrorActionPreference = 'Stop'",
        *(f"$global:{name} = {_powershell(value)}" for name, value in variables.items()),
        "$global:KubeletConfigArgs = @("
        + ", ".join(_powershell(flag) for flag in kubelet_arguments(request))
        + ")",
        f'. "{WINDOWS_PROVISION_SCRIPT}"',
    ]
    return "\n".join(lines) + "\n"


def render_script(request: BootstrapRequest, api_server: str, token: str) -> str:
    """The bootstrap script (custom data before base64). It holds the token: never log or return it."""
    variables = {
        "API_SERVER_NAME": api_server,
        "KUBERNETES_VERSION": request.kubernetes_version.removeprefix("v"),
        "NODE_IMAGE_VERSION": request.node_image_version,
        "TLS_BOOTSTRAP_TOKEN": token,
        "KUBELET_FLAGS": kubelet_flags(request),
        "KUBELET_NODE_LABELS": _labels_text(request),
        **nodeclass_variables(request),
    }
    lines = [
        "#!/bin/bash",
        "set -euo pipefail",
        *(f"export {name}={shlex.quote(value)}" for name, value in variables.items()),
        f"until [ -f {PROVISION_SCRIPT} ]; do sleep 1; done",
        f"exec {PROVISION_SCRIPT}",
    ]
    return "\n".join(lines) + "\n"


class ClusterBootstrap:
    """The provider's `Bootstrap`: the script for a launch, with the newest valid token of the cluster's (the
    configured Secret's, or with `rotated` a rotation's)."""

    def __init__(
        self,
        cluster: ClusterAPI,
        secret: str,
        api_server: str,
        keep_seconds: float = READS_KEPT_SECONDS,
        rotated: bool = True,
    ) -> None:
        self._secret = secret
        self._seed = parse_secret_reference(secret)
        self._api_server = api_server
        self._rotated = rotated
        # Read once every `keep_seconds` for all launches: a rotated token is used that much later at most.
        self._read = Recent(lambda key: cluster.read_secret(*key), keep_seconds)

    async def __call__(self, request: BootstrapRequest) -> str:
        tokens = await read_tokens(self._read, self._seed, self._rotated)
        token = launch_token(tokens, datetime.now(UTC), self._secret)
        return render(request, self._api_server, token.value)
