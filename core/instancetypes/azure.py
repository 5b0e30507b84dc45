"""Azure instance types, built the way the AKS Karpenter provider builds them.

From a region's catalog and the AKSNodeClass settings that change instance types, this module decides which
VM sizes are offered (and says why the others are not), and gives each size Karpenter's capacity, overhead,
labels and offerings: one on-demand and one spot offering per zone, plus the regional zone "0".

The provider computes reservations and memory in float64; the same float arithmetic is used here so that
every value matches it to the unit. Where the shipped catalog does not know a capability the provider reads,
the rule that reads the gap is stated next to the filter or label that uses it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from core import labels
from core.instancetypes.catalog import AzureCatalog, AzureSku
from core.instancetypes.types import MICROS_PER_DOLLAR, InstanceType, Offering, Overhead
from core.instancetypes.windows import windows_on_demand_price, windows_spot_price
from core.resources import AMD_GPU, CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS, Resources
from core.scheduling.requirements import Operator, Requirement, Requirements

MIB = 2**20
GIB = 2**30

MISSING_PRICE_MICROS = 999 * MICROS_PER_DOLLAR
"""The provider's `MissingPrice`: sizes without a price are still offered, but never chosen on price."""

REGIONAL_ZONE = "0"
"""The zone label AKS writes on VMs placed without a zone."""

EVICTION_MEMORY_AVAILABLE = 750 * MIB
"""`--eviction-hard=memory.available<750Mi`, which the provider always sets."""

RESTRICTED_SIZES = frozenset(
    {
        # too small for AKS
        "Standard_A0",
        "Standard_A1",
        "Standard_A1_v2",
        "Standard_B1s",
        "Standard_B1ms",
        "Standard_F1",
        "Standard_F1s",
        "Basic_A0",
        "Basic_A1",
        "Basic_A2",
        "Basic_A3",
        "Basic_A4",
        # the provider excludes these after problems with them
        "Standard_E64i_v3",
        "Standard_E64is_v3",
    }
)

MIN_VCPUS = 2
MIN_MEMORY_GIB = 3.5
LOCAL_DNS_MIN_VCPUS = 4
LOCAL_DNS_MIN_MEMORY_MIB = 244
"""LocalDNS needs 256 MB, which the provider rounds to 244 MiB."""

# kube-reserved brackets: (upper bound, rate of the amount between the previous bound and this one)
_CPU_RESERVED_BRACKETS = ((1.0, 0.06), (2.0, 0.04), (4.0, 0.02), (math.inf, 0.01))
_MEMORY_RESERVED_BRACKETS = ((4.0, 0.25), (8.0, 0.20), (16.0, 0.10), (128.0, 0.06), (math.inf, 0.02))

OS_LINUX = "linux"
OS_WINDOWS = "windows"
WINDOWS_SYSTEM_RESERVED_MEMORY = 2 * GIB
"""What AKS adds to the kube-reserved memory of a Windows node for the OS itself (a node of 8 GiB reserves
1843Mi + 2048Mi = 3891Mi), which has no hard eviction threshold instead of the 750Mi."""
AKS_MODES = ("system", "user")
PRIORITY_REGULAR = "regular"
PRIORITY_SPOT = "spot"
PLACEMENT_ZONAL = "zonal"
PLACEMENT_REGIONAL = "regional"
NVIDIA = "nvidia"
AMD = "amd"
ARM64 = "arm64"
AMD64 = "amd64"


class ImageFamily(StrEnum):
    UBUNTU = "Ubuntu"
    UBUNTU_2204 = "Ubuntu2204"
    UBUNTU_2404 = "Ubuntu2404"
    AZURE_LINUX = "AzureLinux"
    WINDOWS_2022 = "Windows2022"
    WINDOWS_2025 = "Windows2025"

    @property
    def windows_build(self) -> str | None:
        """The `node.kubernetes.io/windows-build` of nodes with this family (major.minor.build, as the kubelet
        writes it); None for Linux."""
        return _WINDOWS_BUILDS.get(self)

    @property
    def os(self) -> str:
        """The `kubernetes.io/os` of nodes with this family."""
        return OS_LINUX if self.windows_build is None else OS_WINDOWS

    def os_sku(self) -> str:
        """The `kubernetes.azure.com/os-sku` value of nodes with this image family."""
        if self.windows_build is not None:
            return self.value
        return "AzureLinux" if self is ImageFamily.AZURE_LINUX else "Ubuntu"

    def gpu_os_names(self) -> frozenset[str]:
        """The GPU registry's OS identifiers that make a GPU size usable with this image family."""
        if self.windows_build is not None:
            return frozenset({"windows"})
        if self is ImageFamily.AZURE_LINUX:
            return frozenset({"azurelinux", "azurelinux3"})
        return frozenset({"ubuntu"})


_WINDOWS_BUILDS = {ImageFamily.WINDOWS_2022: "10.0.20348", ImageFamily.WINDOWS_2025: "10.0.26100"}


class GpuMode(StrEnum):
    DRIVER = "Driver"
    """AKS installs the GPU driver, which it can do for NVIDIA only."""
    NONE = "None"
    """No driver install (GPU Operator setups): every registered GPU size is offered."""


@dataclass(frozen=True, slots=True)
class NodeClassSettings:
    """The AKSNodeClass fields (and one operator option) that shape the instance types."""

    os_disk_size_gb: int = 128
    max_pods: int = 250
    image_family: ImageFamily = ImageFamily.UBUNTU
    encryption_at_host: bool = False
    trusted_launch: bool = False
    gpu_mode: GpuMode = GpuMode.DRIVER
    artifact_streaming: bool = False
    """Whether `artifactStreaming.enabled` is explicitly true."""
    local_dns: bool = False
    """Whether LocalDNS resolves to enabled."""
    fips: bool = False
    """Whether nodes run in FIPS mode (`fipsMode` FIPS, or Windows Server 2025): they carry
    `kubernetes.azure.com/fips_enabled=true`."""
    memory_overhead_percent: float = 0.075
    """The operator option `VM_MEMORY_OVERHEAD_PERCENT`: memory the hypervisor keeps from the VM."""


DEFAULT_SETTINGS = NodeClassSettings()


# --- VM size names -------------------------------------------------------------------------------------

_SIZE_NAME = re.compile(
    r"""
    ^(?P<family>[A-Z])
    (?P<subfamily>[A-Z]?[A-Z]?)
    (?P<cpus>[0-9]+)
    -?(?P<constrained>[0-9]*)
    (?P<features>[abcdeiflmnotspPr]+|C+|NP|)
    _?(?:NDR_)?
    (?:(?P<accelerator>(?:xl_)?[A-Z]+[0-9]+[A-Z]*)_?)?
    (?:_cc_)?(?:_[0-9]+_)?(?:_MI300X_)?(?:_H100_)?
    (?P<version>[vV][1-9])?
    (?:_Promo)?$
    """,
    re.VERBOSE,
)
"""The Azure VM naming convention: family, sub-family, vCPUs, constrained vCPUs, additive features,
accelerator, version (https://learn.microsoft.com/azure/virtual-machines/vm-naming-conventions)."""


@dataclass(frozen=True, slots=True)
class SizeName:
    """The parts of a VM size name, e.g. `NC24ads_A100_v4`: N, C, 24, ads, A100, v4."""

    family: str
    subfamily: str
    cpus: str
    constrained_cpus: str
    features: str
    accelerator: str | None
    version: str

    @property
    def series(self) -> str:
        """Family, sub-family, features and version without the vCPU count: `NCads_v4`, `Ds_v3`, `Bms`."""
        version = f"_{self.version}" if self.version else ""
        return f"{self.family}{self.subfamily}{self.features}{version}"

    @property
    def version_number(self) -> str:
        """The version without its `v`, and "1" for names without a version."""
        return self.version[1:] if self.version else "1"


def size_of(name: str) -> str:
    """The size part of a VM size name: `Standard_D2s_v3` -> `D2s_v3`."""
    return name.split("_", 1)[1] if name.startswith(("Standard_", "Basic_")) else name


def parse_size_name(name: str) -> SizeName | None:
    """Split a VM size name (with or without its tier prefix) into its parts; `None` if it does not parse."""
    match = _SIZE_NAME.match(size_of(name))
    if match is None:
        return None
    accelerator = match["accelerator"]
    return SizeName(
        family=match["family"],
        subfamily=match["subfamily"],
        cpus=match["cpus"],
        constrained_cpus=match["constrained"],
        features=match["features"],
        accelerator=accelerator.removeprefix("xl_") if accelerator else None,
        version=match["version"] or "",
    )


# --- which sizes are offered ---------------------------------------------------------------------------


class FilterReason(StrEnum):
    """Why a VM size is not offered as an instance type."""

    UNPARSABLE_NAME = "UnparsableName"
    RESTRICTED_SIZE = "RestrictedSize"
    TOO_FEW_VCPUS = "TooFewVCPUs"
    TOO_LITTLE_MEMORY = "TooLittleMemory"
    UNSUPPORTED_GPU = "UnsupportedGPU"
    CONSTRAINED_VCPUS = "ConstrainedVCPUs"
    CONFIDENTIAL = "Confidential"
    GPU_IMAGE_FAMILY = "GPUImageFamily"
    ENCRYPTION_AT_HOST = "EncryptionAtHost"
    LOCAL_DNS = "LocalDNS"
    GPU_DRIVER_MODE = "GPUDriverMode"
    ARTIFACT_STREAMING = "ArtifactStreaming"
    TRUSTED_LAUNCH = "TrustedLaunch"
    WINDOWS_ARCHITECTURE = "WindowsArchitecture"

    @property
    def message(self) -> str:
        """The reason as a sentence fragment: "Standard_A0 is not offered: <message>"."""
        return _FILTER_MESSAGES[self]


_FILTER_MESSAGES = {
    FilterReason.UNPARSABLE_NAME: "its name does not follow the Azure VM naming convention",
    FilterReason.RESTRICTED_SIZE: "AKS or the Karpenter provider does not support this size",
    FilterReason.TOO_FEW_VCPUS: f"it has fewer than {MIN_VCPUS} vCPUs",
    FilterReason.TOO_LITTLE_MEMORY: f"it has less than {MIN_MEMORY_GIB} GiB of memory",
    FilterReason.UNSUPPORTED_GPU: "its GPU is not in the provider's list of supported GPU sizes",
    FilterReason.CONSTRAINED_VCPUS: "it is a constrained-vCPU size",
    FilterReason.CONFIDENTIAL: "confidential sizes (DC*, EC*) are not supported",
    FilterReason.GPU_IMAGE_FAMILY: "its GPU is not supported on the AKSNodeClass image family",
    FilterReason.ENCRYPTION_AT_HOST: "it does not support encryption at host, which the AKSNodeClass enables",
    FilterReason.LOCAL_DNS: (
        f"LocalDNS needs at least {LOCAL_DNS_MIN_VCPUS} vCPUs and {LOCAL_DNS_MIN_MEMORY_MIB} MiB of memory"
    ),
    FilterReason.GPU_DRIVER_MODE: "gpu.mode Driver can install drivers for NVIDIA GPUs only",
    FilterReason.ARTIFACT_STREAMING: "artifact streaming, enabled by the AKSNodeClass, has no arm64 support",
    FilterReason.TRUSTED_LAUNCH: "it does not support Trusted Launch, which the AKSNodeClass enables",
    FilterReason.WINDOWS_ARCHITECTURE: "AKS runs Windows Server on amd64 sizes only",
}


def memory_mib(sku: AzureSku) -> int:
    """Memory in MiB, truncated: the value of the `sku-memory` labels."""
    return int(sku.memory_gib * 1024)


def supports_trusted_launch(sku: AzureSku) -> bool:
    """Whether the size can boot a Trusted Launch image: Gen2, and the capability is not disabled."""
    return "V2" in sku.hyperv_generations and sku.trusted_launch_disabled is not True


@dataclass(frozen=True, slots=True)
class SizeTraits:
    """What the AKSNodeClass's rules read of a size, from any catalog; `None` where the catalog does not say,
    which the rules read as supported (a user's catalog says little, the shipped ones not everything)."""

    cpu_millis: int
    memory_mib: int
    architecture: str
    gpu_manufacturer: str | None
    """`nvidia` or `amd` for a size with supported GPUs, `None` without."""
    gpu_os: frozenset[str] | None = None
    """The OSes the size's GPUs are supported on (`ImageFamily.gpu_os_names`)."""
    encryption_at_host: bool | None = None
    trusted_launch: bool | None = None

    @classmethod
    def of(cls, sku: AzureSku) -> SizeTraits:
        """An Azure size's traits; a GPU the registry does not list counts as none (that size is never
        offered)."""
        return cls(
            cpu_millis=sku.vcpus * 1000,
            memory_mib=memory_mib(sku),
            architecture=sku.architecture,
            gpu_manufacturer=sku.gpu_manufacturer,
            gpu_os=sku.gpu_os,
            encryption_at_host=sku.encryption_at_host_supported,
            trusted_launch=supports_trusted_launch(sku),
        )


def nodeclass_filter_reason(traits: SizeTraits, settings: NodeClassSettings) -> FilterReason | None:
    """Why an AKSNodeClass with these settings cannot launch a size, or `None` if it can: the provider's rules
    that depend on the AKSNodeClass, the first failing one winning. Every catalog goes through them."""
    gpu = traits.gpu_manufacturer
    checks = (
        (
            gpu is not None
            and traits.gpu_os is not None
            and not traits.gpu_os & settings.image_family.gpu_os_names(),
            FilterReason.GPU_IMAGE_FAMILY,
        ),
        (
            settings.encryption_at_host and traits.encryption_at_host is False,
            FilterReason.ENCRYPTION_AT_HOST,
        ),
        (
            settings.local_dns
            and (
                traits.cpu_millis < LOCAL_DNS_MIN_VCPUS * 1000 or traits.memory_mib < LOCAL_DNS_MIN_MEMORY_MIB
            ),
            FilterReason.LOCAL_DNS,
        ),
        (
            settings.gpu_mode is GpuMode.DRIVER and gpu is not None and gpu != NVIDIA,
            FilterReason.GPU_DRIVER_MODE,
        ),
        (settings.artifact_streaming and traits.architecture == ARM64, FilterReason.ARTIFACT_STREAMING),
        (settings.trusted_launch and traits.trusted_launch is False, FilterReason.TRUSTED_LAUNCH),
        (
            settings.image_family.os == OS_WINDOWS and traits.architecture != AMD64,
            FilterReason.WINDOWS_ARCHITECTURE,
        ),
    )
    return next((reason for failed, reason in checks if failed), None)


def nodeclass_requirements(settings: NodeClassSettings) -> list[Requirement]:
    """The labels an AKSNodeClass gives every node it launches, whatever the size: the OS SKU of its image
    family, and `fips_enabled`, which AKS writes on FIPS nodes only."""
    return [
        _in(labels.AKS_OS_SKU, [settings.image_family.os_sku()]),
        (
            _in(labels.AKS_FIPS_ENABLED, ["true"])
            if settings.fips
            else Requirement.new(labels.AKS_FIPS_ENABLED, Operator.DOES_NOT_EXIST)
        ),
    ]


def filter_reason(sku: AzureSku, settings: NodeClassSettings = DEFAULT_SETTINGS) -> FilterReason | None:
    """Why the provider would not offer this size with these settings, or `None` if it would.

    The first failing rule wins: first the rules for every AKSNodeClass, then those that depend on it
    (`nodeclass_filter_reason`). Encryption at host is read as supported when the catalog does not know (only
    the sizes with Resource SKU data say), so that enabling it does not empty the catalog.
    """
    size = parse_size_name(sku.name)
    checks = (
        (size is None, FilterReason.UNPARSABLE_NAME),
        (sku.name in RESTRICTED_SIZES, FilterReason.RESTRICTED_SIZE),
        (sku.vcpus < MIN_VCPUS, FilterReason.TOO_FEW_VCPUS),
        (sku.memory_gib < MIN_MEMORY_GIB, FilterReason.TOO_LITTLE_MEMORY),
        (sku.gpu_count > 0 and sku.gpu_manufacturer is None, FilterReason.UNSUPPORTED_GPU),
        (size is not None and size.constrained_cpus != "", FilterReason.CONSTRAINED_VCPUS),
        (size_of(sku.name).startswith(("DC", "EC")), FilterReason.CONFIDENTIAL),
    )
    failed = next((reason for failed, reason in checks if failed), None)
    return failed or nodeclass_filter_reason(SizeTraits.of(sku), settings)


# --- capacity and overhead -----------------------------------------------------------------------------


def _bracketed(brackets: tuple[tuple[float, float], ...], amount: float) -> float:
    total = 0.0
    lower = 0.0
    for upper, rate in brackets:
        if lower > amount:
            break
        total += (min(upper, amount) - lower) * rate
        lower = upper
    return total


def kube_reserved(vcpus: int, memory_gib: float) -> Resources:
    """The provider's kube-reserved CPU (millicores) and memory (whole MiB, in bytes) for a VM size.

    CPU: 6 % of the first core, 4 % of the second, 2 % of cores 3-4, 1 % of the rest. Memory: 25 % of the
    first 4 GiB, 20 % of the next 4, 10 % of the next 8, 6 % up to 128 GiB, 2 % above.
    """
    cpu_millis = int(1000 * _bracketed(_CPU_RESERVED_BRACKETS, float(vcpus)))
    memory = int(1024 * _bracketed(_MEMORY_RESERVED_BRACKETS, memory_gib))
    return {CPU: cpu_millis, MEMORY: memory * MIB}


def memory_capacity(memory_gib: float, overhead_percent: float) -> int:
    """Memory a node reports, in bytes: the whole GiB of the size minus the hypervisor's share, rounded up."""
    whole = int(memory_gib) * GIB
    return whole - math.ceil(whole * overhead_percent)


def _gigabytes(gib: float) -> int:
    return math.floor(Fraction(gib) * GIB / 10**9)


def ephemeral_os_max_size_gb(sku: AzureSku) -> int:
    """The largest ephemeral OS disk the size can hold, in GB (10^9 bytes); 0 when it cannot hold one.

    The provider takes the first non-empty placement of: local NVMe disk, cache disk, resource (temp) disk.
    NVMe temp storage is read as supporting the NvmeDisk placement.
    """
    if not sku.ephemeral_os_disk_supported:
        return 0
    temp = sku.temp_disk_gib or 0.0
    if sku.temp_disk_nvme:
        return _gigabytes(temp)
    return _gigabytes(sku.cached_disk_gib or temp)


def nodeclass_capacity(settings: NodeClassSettings) -> Resources:
    """What the AKSNodeClass decides of a node's capacity, whatever its size and whichever catalog the size comes
    from: the pods its kubelet takes (maxPods) and the ephemeral storage of its OS disk (osDiskSizeGB)."""
    return {EPHEMERAL_STORAGE: settings.os_disk_size_gb * 10**9, PODS: settings.max_pods}


def capacity(sku: AzureSku, settings: NodeClassSettings = DEFAULT_SETTINGS) -> Resources:
    """What a node of this size reports as capacity (GPUs only when the size has registered ones)."""
    resources: Resources = {
        CPU: sku.vcpus * 1000,
        MEMORY: memory_capacity(sku.memory_gib, settings.memory_overhead_percent),
        **nodeclass_capacity(settings),
    }
    gpu_resource = {NVIDIA: NVIDIA_GPU, AMD: AMD_GPU}.get(sku.gpu_manufacturer or "")
    if gpu_resource is not None and sku.gpu_count > 0:
        resources[gpu_resource] = sku.gpu_count
    return resources


def node_kube_reserved(sku: AzureSku, family: ImageFamily = ImageFamily.UBUNTU) -> Resources:
    """The kube-reserved a node of this size and family gets: the brackets, plus 2 GiB of memory on Windows."""
    reserved = kube_reserved(sku.vcpus, sku.memory_gib)
    if family.os == OS_WINDOWS:
        reserved[MEMORY] += WINDOWS_SYSTEM_RESERVED_MEMORY
    return reserved


def eviction_threshold(family: ImageFamily = ImageFamily.UBUNTU) -> Resources:
    """`--eviction-hard`'s memory: 750Mi on Linux; none on Windows, whose kubelet AKS runs without one."""
    return {} if family.os == OS_WINDOWS else {MEMORY: EVICTION_MEMORY_AVAILABLE}


def overhead(sku: AzureSku, family: ImageFamily = ImageFamily.UBUNTU) -> Overhead:
    """kube-reserved by the provider's brackets, no system-reserved, and the 750Mi memory eviction; on Windows,
    2 GiB more kube-reserved memory and no eviction threshold, as AKS configures Windows kubelets."""
    return Overhead(
        kube_reserved=node_kube_reserved(sku, family), eviction_threshold=eviction_threshold(family)
    )


# --- offerings -----------------------------------------------------------------------------------------


def offering_zones(sku: AzureSku, catalog: AzureCatalog) -> list[str]:
    """Zone label values the size is offered in: `<region>-<n>` per zone, then "0" for regional placement."""
    zones = catalog.zones if sku.zones is None else sku.zones
    return [f"{catalog.region}-{zone}" for zone in sorted(zones)] + [REGIONAL_ZONE]


def _in(key: str, values: Iterable[str]) -> Requirement:
    return Requirement.new(key, Operator.IN, values)


def _offering(
    sku: AzureSku,
    zone: str,
    capacity_type: str,
    price_micros: int,
    available: bool,
    unavailable: frozenset[tuple[str, str, str]],
) -> Offering:
    regional = zone == REGIONAL_ZONE
    priority = PRIORITY_SPOT if capacity_type == labels.CAPACITY_TYPE_SPOT else PRIORITY_REGULAR
    # The catalog knows ultra SSD per region only; zonal offerings would need per-zone capabilities.
    ultra_ssd = ("true", "false") if regional and sku.ultra_ssd_available else ("false",)
    return Offering(
        zone=zone,
        capacity_type=capacity_type,
        price_micros=price_micros,
        available=available and (sku.name, zone, capacity_type) not in unavailable,
        requirements=Requirements(
            [
                _in(labels.CAPACITY_TYPE, [capacity_type]),
                _in(labels.AKS_SCALESET_PRIORITY, [priority]),
                _in(labels.AKS_PRIORITY, [priority]),
                _in(labels.ZONE, [zone]),
                _in(labels.PLACEMENT_SCOPE, [PLACEMENT_REGIONAL if regional else PLACEMENT_ZONAL]),
                _in(labels.SKU_STORAGE_ULTRA_SSD, ultra_ssd),
            ]
        ),
    )


def offerings(
    sku: AzureSku,
    catalog: AzureCatalog,
    unavailable: Collection[tuple[str, str, str]] = frozenset(),
    settings: NodeClassSettings = DEFAULT_SETTINGS,
) -> tuple[Offering, ...]:
    """One on-demand and one spot offering per zone, each unavailable when `unavailable` lists it.

    Sizes missing from the provider's known-SKU list, and sizes without a price, cost the 999 $/h penalty.
    Spot is available only for low-priority-capable sizes with a spot price: no spot price is invented,
    so a size without one keeps an unavailable spot offering at the penalty price. Windows nodes cost the
    Windows rate (`core.instancetypes.windows`) unless the cluster brings its license
    (`AzureCatalog.windows_license_included`).
    """
    blocked = frozenset(unavailable)

    def priced(price_micros: int | None) -> int:
        if price_micros is None or not sku.karpenter_known_sku:
            return MISSING_PRICE_MICROS
        return price_micros

    on_demand_price, spot_price = priced(sku.on_demand_price_micros), priced(sku.spot_price_micros)
    if settings.image_family.os == OS_WINDOWS and catalog.windows_license_included:
        on_demand_price = priced(windows_on_demand_price(sku))
        spot_price = priced(windows_spot_price(sku))
    spot_possible = sku.low_priority_capable is True and sku.spot_price_micros is not None
    result: list[Offering] = []
    for zone in offering_zones(sku, catalog):
        result.append(_offering(sku, zone, labels.CAPACITY_TYPE_ON_DEMAND, on_demand_price, True, blocked))
        result.append(_offering(sku, zone, labels.CAPACITY_TYPE_SPOT, spot_price, spot_possible, blocked))
    return tuple(result)


# --- labels --------------------------------------------------------------------------------------------


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _in_or_absent(key: str, value: str | None) -> Requirement:
    return Requirement.new(key, Operator.DOES_NOT_EXIST) if value is None else _in(key, [value])


def _union(offers: Iterable[Offering], key: str) -> Requirement:
    """The values the offerings allow for `key`; with no offering, none (the label cannot be selected)."""
    values: set[str] = set()
    for offering in offers:
        values.update(offering.requirements.get(key).values)
    # `Requirement.new` refuses an empty `In`; the raw form with no values is what Karpenter builds then.
    return Requirement(key, False, values)


def requirements(
    sku: AzureSku,
    size: SizeName,
    catalog: AzureCatalog,
    offers: tuple[Offering, ...],
    settings: NodeClassSettings,
) -> Requirements:
    """Every label a node of this size gets; zone, capacity type, placement scope and ultra SSD come from the
    available offerings only."""
    available = [offering for offering in offers if offering.available]
    registered_gpu = sku.gpu_manufacturer is not None
    ephemeral_gb = ephemeral_os_max_size_gb(sku)
    generations = sorted(generation.removeprefix("V") for generation in sku.hyperv_generations)
    cpus = str(sku.vcpus)
    mib = str(memory_mib(sku))
    return Requirements(
        [
            _in(labels.INSTANCE_TYPE, [sku.name]),
            _in(labels.ARCH, [sku.architecture]),
            _in(labels.OS, [settings.image_family.os]),
            _in_or_absent(labels.WINDOWS_BUILD, settings.image_family.windows_build),
            _in(labels.REGION, [catalog.region]),
            _union(available, labels.ZONE),
            _union(available, labels.CAPACITY_TYPE),
            _union(available, labels.PLACEMENT_SCOPE),
            _union(available, labels.SKU_STORAGE_ULTRA_SSD),
            _in(labels.SKU_NAME, [sku.name]),
            _in(labels.SKU_FAMILY, [size.family]),
            _in(labels.SKU_SERIES, [size.series]),
            _in(labels.SKU_VERSION, [size.version_number]),
            _in(labels.SKU_CPU, [cpus]),
            _in(labels.AKS_SKU_CPU, [cpus]),
            _in(labels.SKU_MEMORY, [mib]),
            _in(labels.AKS_SKU_MEMORY, [mib]),
            _in(labels.SKU_NETWORKING_ACCELERATED, [_flag(sku.accelerated_networking)]),
            _in(labels.SKU_STORAGE_PREMIUM_CAPABLE, [_flag(sku.premium_io)]),
            _in_or_absent(
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE, str(ephemeral_gb) if ephemeral_gb > 0 else None
            ),
            _in(labels.SKU_GPU_COUNT, [str(sku.gpu_count if registered_gpu else 0)]),
            _in_or_absent(labels.SKU_GPU_MANUFACTURER, sku.gpu_manufacturer),
            _in_or_absent(labels.SKU_GPU_NAME, size.accelerator if registered_gpu else None),
            (
                _in(labels.SKU_HYPERV_GENERATION, generations)
                if generations
                else Requirement.new(labels.SKU_HYPERV_GENERATION, Operator.DOES_NOT_EXIST)
            ),
            _in(labels.AKS_MODE, AKS_MODES),
            _in(labels.AKS_SCALESET_PRIORITY, [PRIORITY_REGULAR, PRIORITY_SPOT]),
            _in(labels.AKS_PRIORITY, [PRIORITY_REGULAR, PRIORITY_SPOT]),
            *nodeclass_requirements(settings),
        ]
    )


# --- entry points --------------------------------------------------------------------------------------


def azure_instance_types(
    catalog: AzureCatalog,
    settings: NodeClassSettings = DEFAULT_SETTINGS,
    unavailable: Collection[tuple[str, str, str]] = frozenset(),
    reuse: Collection[InstanceType] = (),
) -> list[InstanceType]:
    """The instance types a NodePool with these AKSNodeClass settings can launch, sorted by name.

    `unavailable` holds (size, zone, capacity type) triples known to be out of capacity; their offerings are
    unavailable and leave the instance type's zone and capacity-type labels.

    `reuse` may hold the instance types of the same catalog and settings built without `unavailable`: each size
    `unavailable` does not name is taken from them as it is (instance types are immutable), so a plan that rules out
    a few offerings shares the rest of the catalog (tens of MB) with the plans that rule out others.
    """
    blocked = frozenset(unavailable)
    named = {size for size, _zone, _capacity_type in blocked}
    reused = {instance_type.name: instance_type for instance_type in reuse if instance_type.name not in named}
    result = []
    for sku in catalog.skus:
        if sku.name in reused:
            result.append(reused[sku.name])
            continue
        size = parse_size_name(sku.name)
        if size is None or filter_reason(sku, settings) is not None:
            continue
        offers = offerings(sku, catalog, blocked, settings)
        result.append(
            InstanceType(
                name=sku.name,
                requirements=requirements(sku, size, catalog, offers, settings),
                offerings=offers,
                capacity=capacity(sku, settings),
                overhead=overhead(sku, settings.image_family),
            )
        )
    return sorted(result, key=lambda instance_type: instance_type.name)


def filtered_out(
    catalog: AzureCatalog, settings: NodeClassSettings = DEFAULT_SETTINGS
) -> dict[str, FilterReason]:
    """Each size of the catalog that is not offered with these settings, with the reason."""
    return {sku.name: reason for sku in catalog.skus if (reason := filter_reason(sku, settings)) is not None}
