"""AKSNodeClass (`karpenter.azure.com/v1beta1`, also served as `v1alpha2`): how AKS nodes are built.

The NodeClass holds what the NodePool leaves to the provider: the subnet, the OS disk, the image family,
FIPS, tags, kubelet and Linux OS settings, maxPods, security, LocalDNS, GPU driver handling and artifact
streaming. Parsing enforces the Azure provider's CRD schema and CEL rules. Both served versions share one
schema, so one model reads both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from core.api.meta import NodeSelectorRequirement, ObjectMeta, StrictKubeModel
from core.api.nodepool import (
    ConditionedStatus,
    Duration,
    Problem,
    parse_manifest,
    raise_problems,
)


class ImageFamily(StrEnum):
    UBUNTU = "Ubuntu"
    """Ubuntu 22.04 or 24.04, chosen by Kubernetes version."""
    UBUNTU_2204 = "Ubuntu2204"
    UBUNTU_2404 = "Ubuntu2404"
    AZURE_LINUX = "AzureLinux"
    WINDOWS_2022 = "Windows2022"
    """Windows Server 2022 (amd64 only, no Trusted Launch image)."""
    WINDOWS_2025 = "Windows2025"
    """Windows Server 2025 (amd64 only, Kubernetes 1.32 and later, always FIPS)."""

    @property
    def is_windows(self) -> bool:
        """Whether nodes of this family run Windows Server."""
        return self in WINDOWS_FAMILIES


WINDOWS_FAMILIES = frozenset({ImageFamily.WINDOWS_2022, ImageFamily.WINDOWS_2025})
ALWAYS_FIPS_FAMILIES = frozenset({ImageFamily.WINDOWS_2025})
"""Families whose nodes always run in FIPS mode: AKS cannot turn FIPS off on Windows Server 2025."""
TRUSTED_LAUNCH_FIPS_FAMILIES = frozenset(
    {ImageFamily.UBUNTU, ImageFamily.UBUNTU_2204, ImageFamily.WINDOWS_2025}
)
"""Families with a FIPS image for Trusted Launch VMs."""
NO_TRUSTED_LAUNCH_FAMILIES = frozenset({ImageFamily.WINDOWS_2022})
"""Families without a Trusted Launch image (the AKSWindows gallery has none for Windows Server 2022)."""


class FIPSMode(StrEnum):
    FIPS = "FIPS"
    DISABLED = "Disabled"


class GPUMode(StrEnum):
    DRIVER = "Driver"
    """AKS installs the GPU driver; only GPU sizes it can install a driver for are offered."""
    NONE = "None"
    """No driver install (for the GPU Operator); every GPU size is offered."""


class NetworkPlugin(StrEnum):
    AZURE = "azure"
    NONE = "none"


class NetworkPluginMode(StrEnum):
    OVERLAY = "overlay"
    NODE_SUBNET = ""


class AKSNodeClassConditionType(StrEnum):
    READY = "Ready"
    IMAGES_READY = "ImagesReady"
    KUBERNETES_VERSION_READY = "KubernetesVersionReady"
    SUBNETS_READY = "SubnetsReady"
    VALIDATION_SUCCEEDED = "ValidationSucceeded"
    LOCAL_DNS_READY = "LocalDNSReady"


_SIZE = r"^\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$"
"""Whole-number sizes with a unit, as the AKS custom node configuration takes them ("50Mi", "2Gi")."""

_GO_DURATION = re.compile(r"[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|ms|s|m|h))+|0")


def _go_duration(text: str) -> str:
    if not _GO_DURATION.fullmatch(text):
        raise ValueError(f'"{text}" is not a duration such as "100ms"')
    return text


# --- kubelet ---------------------------------------------------------------------------------------------


class CPUManagerPolicy(StrEnum):
    NONE = "none"
    STATIC = "static"


class TopologyManagerPolicy(StrEnum):
    RESTRICTED = "restricted"
    BEST_EFFORT = "best-effort"
    NONE = "none"
    SINGLE_NUMA_NODE = "single-numa-node"


class KubeletConfiguration(StrictKubeModel):
    """The kubelet settings AKS lets a node pool customize."""

    cpu_manager_policy: CPUManagerPolicy = CPUManagerPolicy.NONE
    cpu_cfs_quota: bool = Field(default=True, alias="cpuCFSQuota")
    cpu_cfs_quota_period: Annotated[str, AfterValidator(_go_duration)] = Field(
        default="100ms", alias="cpuCFSQuotaPeriod"
    )
    image_gc_high_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCHighThresholdPercent"
    )
    image_gc_low_threshold_percent: int | None = Field(
        default=None, ge=0, le=100, alias="imageGCLowThresholdPercent"
    )
    topology_manager_policy: TopologyManagerPolicy = TopologyManagerPolicy.NONE
    allowed_unsafe_sysctls: list[str] | None = None
    container_log_max_size: str = Field(default="50Mi", pattern=_SIZE)
    container_log_max_files: int = Field(default=5, ge=2)
    pod_pids_limit: int | None = None
    fail_swap_on: bool | None = None

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        high, low = self.image_gc_high_threshold_percent, self.image_gc_low_threshold_percent
        if high is not None and low is not None and high <= low:
            raise ValueError(
                f"imageGCHighThresholdPercent ({high}) must be greater than the low threshold ({low})"
            )
        return self


# --- Linux OS configuration ------------------------------------------------------------------------------


def _between(low: int, high: int, alias: str | None = None) -> Any:
    return Field(default=None, ge=low, le=high, alias=alias)


class SysctlConfiguration(StrictKubeModel):
    """The sysctls AKS lets a node pool set, each within the range AKS accepts."""

    fs_aio_max_nr: int | None = _between(65536, 6553500)
    fs_file_max: int | None = _between(8192, 12000500)
    fs_inotify_max_user_watches: int | None = _between(781250, 2097152)
    fs_nr_open: int | None = _between(8192, 20000500)
    kernel_threads_max: int | None = _between(20, 513785)
    net_core_netdev_max_backlog: int | None = _between(1000, 3240000)
    net_core_optmem_max: int | None = _between(20480, 4194304)
    net_core_rmem_default: int | None = _between(212992, 134217728)
    net_core_rmem_max: int | None = _between(212992, 134217728)
    net_core_somaxconn: int | None = _between(4096, 3240000)
    net_core_wmem_default: int | None = _between(212992, 134217728)
    net_core_wmem_max: int | None = _between(212992, 134217728)
    net_ipv4_ip_local_port_range: str | None = Field(
        default=None, pattern=r"^\d+ \d+$", alias="netIPv4IPLocalPortRange"
    )
    net_ipv4_neigh_default_gc_thresh1: int | None = _between(128, 80000, "netIPv4NeighDefaultGcThresh1")
    net_ipv4_neigh_default_gc_thresh2: int | None = _between(512, 90000, "netIPv4NeighDefaultGcThresh2")
    net_ipv4_neigh_default_gc_thresh3: int | None = _between(1024, 100000, "netIPv4NeighDefaultGcThresh3")
    net_ipv4_tcp_fin_timeout: int | None = _between(5, 120, "netIPv4TCPFinTimeout")
    net_ipv4_tcp_keepalive_probes: int | None = _between(1, 15, "netIPv4TCPKeepaliveProbes")
    net_ipv4_tcp_keepalive_time: int | None = _between(30, 432000, "netIPv4TCPKeepaliveTime")
    net_ipv4_tcp_max_syn_backlog: int | None = _between(128, 3240000, "netIPv4TCPMaxSynBacklog")
    net_ipv4_tcp_max_tw_buckets: int | None = _between(8000, 1440000, "netIPv4TCPMaxTwBuckets")
    net_ipv4_tcp_tw_reuse: bool | None = Field(default=None, alias="netIPv4TCPTwReuse")
    net_ipv4_tcp_keepalive_intvl: int | None = _between(10, 90, "netIPv4TCPKeepaliveIntvl")
    net_netfilter_nf_conntrack_buckets: int | None = _between(65536, 524288)
    net_netfilter_nf_conntrack_max: int | None = _between(131072, 2097152)
    vm_max_map_count: int | None = _between(65530, 262144)
    vm_swappiness: int | None = _between(0, 100)
    vm_vfs_cache_pressure: int | None = _between(0, 100)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        ordered = (
            ("netCoreRmemDefault", self.net_core_rmem_default, "netCoreRmemMax", self.net_core_rmem_max),
            ("netCoreWmemDefault", self.net_core_wmem_default, "netCoreWmemMax", self.net_core_wmem_max),
            (
                "netIPv4NeighDefaultGcThresh1",
                self.net_ipv4_neigh_default_gc_thresh1,
                "netIPv4NeighDefaultGcThresh2",
                self.net_ipv4_neigh_default_gc_thresh2,
            ),
            (
                "netIPv4NeighDefaultGcThresh2",
                self.net_ipv4_neigh_default_gc_thresh2,
                "netIPv4NeighDefaultGcThresh3",
                self.net_ipv4_neigh_default_gc_thresh3,
            ),
        )
        for small_name, small, large_name, large in ordered:
            if small is not None and large is not None and small > large:
                problems.append(((small_name,), f"{small} must be <= {large_name} ({large})"))
        if self.net_ipv4_ip_local_port_range is not None:
            first, last = (int(port) for port in self.net_ipv4_ip_local_port_range.split())
            where = ("netIPv4IPLocalPortRange",)
            if not 1024 <= first <= 60999:
                problems.append((where, f"the first port ({first}) must be in [1024, 60999]"))
            if not 32768 <= last <= 65535:
                problems.append((where, f"the last port ({last}) must be in [32768, 65535]"))
            if first > last:
                problems.append((where, f"the first port ({first}) must be <= the last port ({last})"))
        raise_problems("sysctls", problems)
        return self


class TransparentHugePageEnabled(StrEnum):
    ALWAYS = "always"
    MADVISE = "madvise"
    NEVER = "never"


class TransparentHugePageDefrag(StrEnum):
    ALWAYS = "always"
    DEFER = "defer"
    DEFER_MADVISE = "defer+madvise"
    MADVISE = "madvise"
    NEVER = "never"


class LinuxOSConfiguration(StrictKubeModel):
    swap_file_size: str | None = Field(default=None, pattern=_SIZE)
    sysctls: SysctlConfiguration | None = None
    transparent_huge_page_defrag: TransparentHugePageDefrag | None = None
    transparent_huge_page_enabled: TransparentHugePageEnabled | None = None


# --- LocalDNS -------------------------------------------------------------------------------------------


class LocalDNSMode(StrEnum):
    PREFERRED = "Preferred"
    REQUIRED = "Required"
    DISABLED = "Disabled"


class LocalDNSQueryLogging(StrEnum):
    ERROR = "Error"
    LOG = "Log"


class LocalDNSProtocol(StrEnum):
    PREFER_UDP = "PreferUDP"
    FORCE_TCP = "ForceTCP"


class LocalDNSForwardDestination(StrEnum):
    CLUSTER_CORE_DNS = "ClusterCoreDNS"
    VNET_DNS = "VnetDNS"


class LocalDNSForwardPolicy(StrEnum):
    SEQUENTIAL = "Sequential"
    ROUND_ROBIN = "RoundRobin"
    RANDOM = "Random"


class LocalDNSServeStale(StrEnum):
    VERIFY = "Verify"
    IMMEDIATE = "Immediate"
    DISABLE = "Disable"


class LocalDNSState(StrEnum):
    ENABLED = "Enabled"
    DISABLED = "Disabled"


ROOT_ZONE = "."
CLUSTER_ZONE = "cluster.local"
_ZONE = (
    r"^(\.|[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?)$"
)


class LocalDNSZoneOverride(StrictKubeModel):
    """How the node-local DNS cache serves one zone."""

    zone: str = Field(min_length=1, max_length=254, pattern=_ZONE)
    query_logging: LocalDNSQueryLogging
    protocol: LocalDNSProtocol
    forward_destination: LocalDNSForwardDestination
    forward_policy: LocalDNSForwardPolicy
    max_concurrent: int = Field(ge=0)
    cache_duration: Duration
    serve_stale_duration: Duration
    serve_stale: LocalDNSServeStale

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if self.is_cluster_zone() and self.forward_destination is LocalDNSForwardDestination.VNET_DNS:
            problems.append((("forwardDestination",), f"'{CLUSTER_ZONE}' cannot be forwarded to VnetDNS"))
        if self.serve_stale is LocalDNSServeStale.VERIFY and self.protocol is LocalDNSProtocol.FORCE_TCP:
            problems.append((("serveStale",), "serveStale Verify cannot be used with protocol ForceTCP"))
        raise_problems("zone override", problems)
        return self

    def is_cluster_zone(self) -> bool:
        """Whether the zone is the cluster's own (`cluster.local` or below it)."""
        return self.zone.endswith(CLUSTER_ZONE)


class LocalDNS(StrictKubeModel):
    mode: LocalDNSMode
    vnet_dns_overrides: list[LocalDNSZoneOverride] = Field(max_length=100, alias="vnetDNSOverrides")
    kube_dns_overrides: list[LocalDNSZoneOverride] = Field(max_length=100, alias="kubeDNSOverrides")

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        for field, overrides in (
            ("vnetDNSOverrides", self.vnet_dns_overrides),
            ("kubeDNSOverrides", self.kube_dns_overrides),
        ):
            zones = [override.zone for override in overrides]
            missing = [zone for zone in (ROOT_ZONE, CLUSTER_ZONE) if zone not in zones]
            if missing:
                problems.append(
                    ((field,), f"must contain the zones '.' and 'cluster.local' (missing {missing})")
                )
            problems.extend(
                ((field, index, "zone"), f"zone {zone!r} appears more than once")
                for index, zone in enumerate(zones)
                if zone in zones[:index]
            )
        for index, override in enumerate(self.vnet_dns_overrides):
            if override.forward_destination is not LocalDNSForwardDestination.CLUSTER_CORE_DNS:
                continue
            where = ("vnetDNSOverrides", index, "forwardDestination")
            if override.zone == ROOT_ZONE:
                problems.append(
                    (where, "root zone '.' cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides")
                )
            elif not override.is_cluster_zone():
                problems.append(
                    (where, "external domains cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides")
                )
        raise_problems("localDNS", problems)
        return self


# --- the rest of the spec ------------------------------------------------------------------------------


class TrustedLaunch(StrictKubeModel):
    vtpm: bool = False
    secure_boot: bool = False


class Security(StrictKubeModel):
    encryption_at_host: bool | None = None
    trusted_launch: TrustedLaunch | None = None


class GPU(StrictKubeModel):
    mode: GPUMode = GPUMode.DRIVER


class ArtifactStreaming(StrictKubeModel):
    enabled: bool | None = None


_SUBNET_ID = (
    r"(?i)^/subscriptions/[^/]+/resourceGroups/[a-zA-Z0-9_\-().]{0,89}[a-zA-Z0-9_\-()]"
    r"/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$"
)
_TAG_KEY_FORBIDDEN = re.compile(r"[<>%&?\\]")


class AKSNodeClassSpec(StrictKubeModel):
    vnet_subnet_id: str | None = Field(default=None, pattern=_SUBNET_ID, alias="vnetSubnetID")
    os_disk_size_gb: int = Field(default=128, ge=30, le=2048, alias="osDiskSizeGB")
    image_family: ImageFamily = ImageFamily.UBUNTU
    fips_mode: FIPSMode | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    kubelet: KubeletConfiguration | None = None
    max_pods: int | None = Field(default=None, ge=10, le=250)
    security: Security | None = None
    local_dns: LocalDNS | None = Field(default=None, alias="localDNS")
    gpu: GPU | None = None
    artifact_streaming: ArtifactStreaming | None = None
    linux_os_config: LinuxOSConfiguration | None = Field(default=None, alias="linuxOSConfig")

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems = self._tag_problems()
        if self.fips_mode is FIPSMode.FIPS:
            problems.extend(self._fips_problems())
        problems.extend(self._windows_problems())
        if (
            self.linux_os_config is not None
            and self.linux_os_config.swap_file_size is not None
            and (self.kubelet is None or self.kubelet.fail_swap_on is not False)
        ):
            problems.append(
                (
                    ("kubelet", "failSwapOn"),
                    "must be set to false when linuxOSConfig.swapFileSize is specified",
                )
            )
        raise_problems("spec", problems)
        return self

    def _tag_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        for key, value in self.tags.items():
            if len(key) > 512:
                problems.append((("tags",), f"tag key {key[:40]!r}... is longer than 512 characters"))
            if _TAG_KEY_FORBIDDEN.search(key):
                problems.append(
                    (("tags",), f"tag key {key!r} must not contain '<', '>', '%', '&', '?' or '\\'")
                )
            if len(value) > 256:
                problems.append((("tags",), f"the value of tag {key!r} is longer than 256 characters"))
        return problems

    def _fips_problems(self) -> list[Problem]:
        family = self.image_family
        if family is ImageFamily.UBUNTU_2404:
            return [(("fipsMode",), "FIPS is not supported with imageFamily Ubuntu2404")]
        trusted = self.trusted_launch_enabled
        if family is ImageFamily.UBUNTU_2204 and not trusted:
            return [
                (
                    ("fipsMode",),
                    "FIPS with imageFamily Ubuntu2204 requires Trusted Launch (vtpm or secureBoot)",
                )
            ]
        if trusted and family not in TRUSTED_LAUNCH_FIPS_FAMILIES | NO_TRUSTED_LAUNCH_FAMILIES:
            return [(("fipsMode",), f"FIPS with Trusted Launch is not supported with imageFamily {family}")]
        return []

    def _windows_problems(self) -> list[Problem]:
        """What AKS refuses on Windows nodes: Linux-only settings, FIPS off on Windows Server 2025, Trusted Launch
        where the family has no image for it."""
        family = self.image_family
        problems: list[Problem] = []
        if family in NO_TRUSTED_LAUNCH_FAMILIES and self.trusted_launch_enabled:
            problems.append(
                (("security", "trustedLaunch"), f"Trusted Launch is not supported with imageFamily {family}")
            )
        if family in ALWAYS_FIPS_FAMILIES and self.fips_mode is FIPSMode.DISABLED:
            problems.append((("fipsMode",), f"FIPS cannot be disabled with imageFamily {family}"))
        if not family.is_windows:
            return problems
        if self.linux_os_config is not None:
            problems.append((("linuxOSConfig",), f"linuxOSConfig is not supported with imageFamily {family}"))
        if self.artifact_streaming_enabled:
            problems.append(
                (
                    ("artifactStreaming", "enabled"),
                    f"artifact streaming is not supported with imageFamily {family}",
                )
            )
        if self.local_dns is not None and self.local_dns.mode is not LocalDNSMode.DISABLED:
            problems.append((("localDNS", "mode"), f"LocalDNS is not supported with imageFamily {family}"))
        return problems

    @property
    def trusted_launch_enabled(self) -> bool:
        """Whether VMs launch as Trusted Launch (vTPM or Secure Boot requested)."""
        trusted = self.security.trusted_launch if self.security else None
        return trusted is not None and (trusted.vtpm or trusted.secure_boot)

    @property
    def fips_enabled(self) -> bool:
        """Whether nodes run in FIPS mode: asked for, or a family that always does (Windows Server 2025)."""
        return self.fips_mode is FIPSMode.FIPS or self.image_family in ALWAYS_FIPS_FAMILIES

    @property
    def encryption_at_host(self) -> bool:
        """Whether host-level encryption was requested (it limits the sizes offered)."""
        return bool(self.security and self.security.encryption_at_host)

    @property
    def gpu_mode(self) -> GPUMode:
        """How GPU drivers are handled; Driver unless the NodeClass says otherwise."""
        return self.gpu.mode if self.gpu else GPUMode.DRIVER

    @property
    def artifact_streaming_enabled(self) -> bool:
        """Whether artifact streaming was explicitly turned on (it excludes Arm64 sizes)."""
        return bool(self.artifact_streaming and self.artifact_streaming.enabled)

    def resolved_max_pods(
        self,
        network_plugin: NetworkPlugin | str = NetworkPlugin.AZURE,
        network_plugin_mode: NetworkPluginMode | str = NetworkPluginMode.OVERLAY,
    ) -> int:
        """maxPods as set, or the AKS default for the cluster's network plugin.

        Azure CNI with a node subnet: 30. Azure CNI overlay, or no CNI plugin (bring your own): 250.
        Anything else: the Kubernetes default of 110.
        """
        if self.max_pods is not None:
            return self.max_pods
        if network_plugin == NetworkPlugin.AZURE:
            return 250 if network_plugin_mode == NetworkPluginMode.OVERLAY else 30
        if network_plugin == NetworkPlugin.NONE:
            return 250
        return 110


class NodeImage(StrictKubeModel):
    id: str
    requirements: list[NodeSelectorRequirement] = Field(default_factory=list)


class AKSNodeClassStatus(ConditionedStatus):
    images: list[NodeImage] = Field(default_factory=list)
    kubernetes_version: str | None = None
    local_dns_state: LocalDNSState | None = Field(default=None, alias="localDNSState")


class AKSNodeClass(StrictKubeModel):
    """An AKSNodeClass; build one with `AKSNodeClass.parse(manifest)`."""

    api_version: Literal["karpenter.azure.com/v1beta1", "karpenter.azure.com/v1alpha2"] = (
        "karpenter.azure.com/v1beta1"
    )
    kind: Literal["AKSNodeClass"] = "AKSNodeClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: AKSNodeClassSpec = Field(default_factory=AKSNodeClassSpec)
    status: AKSNodeClassStatus = Field(default_factory=AKSNodeClassStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest; raises `InvalidObjectError` naming every broken rule with its field path."""
        return parse_manifest(cls, "AKSNodeClass", raw)

    @property
    def name(self) -> str:
        """The AKSNodeClass's name (`metadata.name`), which NodePools reference."""
        return self.metadata.name

    def resolved_max_pods(
        self,
        network_plugin: NetworkPlugin | str = NetworkPlugin.AZURE,
        network_plugin_mode: NetworkPluginMode | str = NetworkPluginMode.OVERLAY,
    ) -> int:
        """See `AKSNodeClassSpec.resolved_max_pods`."""
        return self.spec.resolved_max_pods(network_plugin, network_plugin_mode)

    def resolved_local_dns_state(self) -> LocalDNSState:
        """What `localDNS.mode` resolves to, as the AKS provider's status controller resolves it.

        Required: Enabled. Disabled or unset: Disabled. Preferred: Enabled only once the provider's conditions
        hold, the first of which is a Kubernetes version threshold no release meets yet, so Disabled, except
        that a NodeClass whose status already says Enabled stays Enabled (the provider never flips it back).
        """
        local_dns = self.spec.local_dns
        mode = local_dns.mode if local_dns is not None else LocalDNSMode.DISABLED
        if mode is LocalDNSMode.REQUIRED:
            return LocalDNSState.ENABLED
        if mode is LocalDNSMode.PREFERRED and self.status.local_dns_state is LocalDNSState.ENABLED:
            return LocalDNSState.ENABLED
        return LocalDNSState.DISABLED
