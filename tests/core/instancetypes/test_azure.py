from __future__ import annotations

from typing import Any

import pytest

from core import labels
from core.instancetypes.azure import (
    MISSING_PRICE_MICROS,
    FilterReason,
    GpuMode,
    ImageFamily,
    NodeClassSettings,
    azure_instance_types,
    ephemeral_os_max_size_gb,
    filter_reason,
    filtered_out,
    kube_reserved,
    memory_capacity,
    parse_size_name,
)
from core.instancetypes.catalog import AzureCatalog, AzureSku, load_shipped_catalog
from core.instancetypes.types import InstanceType
from core.resources import AMD_GPU, CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS
from core.scheduling.requirements import Operator

MIB = 2**20


def sku(**overrides: Any) -> AzureSku:
    defaults: dict[str, Any] = {
        "name": "Standard_D4s_v5",
        "vcpus": 4,
        "memory_gib": 16.0,
        "hyperv_generations": ("V1", "V2"),
        "low_priority_capable": True,
        "on_demand_price_micros": 192_000,
        "spot_price_micros": 38_400,
    }
    return AzureSku(**{**defaults, **overrides})


def catalog(*skus: AzureSku, zones: tuple[str, ...] = ("1", "2", "3")) -> AzureCatalog:
    return AzureCatalog(region="eastus", zones=zones, skus=skus)


def only(instance_types: list[InstanceType]) -> InstanceType:
    assert len(instance_types) == 1
    return instance_types[0]


def values(instance_type: InstanceType, key: str) -> list[str]:
    return instance_type.requirements.get(key).sorted_values()


def absent(instance_type: InstanceType, key: str) -> bool:
    return instance_type.requirements.get(key).operator() is Operator.DOES_NOT_EXIST


# --- formulas -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vcpus", "memory_gib", "cpu_millis", "memory_mib"),
    [
        (4, 7, 140, 1638),
        (2, 8, 100, 1843),
        (3, 64, 120, 5611),
        (64, 256, 740, 12165),  # Standard_D64s_v3
        (24, 220, 340, 11427),  # Standard_NC24ads_A100_v4
        (8, 218.75, 180, 11402),  # Standard_M8-2ms
        (120, 8, 1299, 1843),  # float64 like the provider: 1.3 cores truncate to 1299m
    ],
)
def test_kube_reserved_brackets(vcpus: int, memory_gib: float, cpu_millis: int, memory_mib: int) -> None:
    assert kube_reserved(vcpus, memory_gib) == {CPU: cpu_millis, MEMORY: memory_mib * MIB}


@pytest.mark.parametrize(
    ("memory_gib", "expected"),
    [(8, 7945689497), (220, 218506461184), (218.75, 216520038809), (7, 6952478310), (0.75, 0)],
)
def test_memory_capacity_keeps_hypervisor_share(memory_gib: float, expected: int) -> None:
    assert memory_capacity(memory_gib, 0.075) == expected


@pytest.mark.parametrize(
    ("disks", "expected_gb"),
    [
        ({"temp_disk_gib": 16.0, "cached_disk_gib": 50.0}, 53),  # D2s_v3: cache disk first
        ({"temp_disk_gib": 512.0, "cached_disk_gib": 1600.0}, 1717),  # D64s_v3
        ({"temp_disk_gib": 7040.0, "temp_disk_nvme": True}, 7559),  # D128ds_v6: NVMe
        ({"temp_disk_gib": 150.0}, 161),  # E4d_v5: resource disk
        ({"temp_disk_gib": 0.0}, 0),
        ({"temp_disk_gib": 16.0, "cached_disk_gib": 50.0, "ephemeral_os_disk_supported": False}, 0),
        ({"temp_disk_gib": 16.0, "ephemeral_os_disk_supported": None}, 0),
    ],
)
def test_ephemeral_os_max_size(disks: dict[str, Any], expected_gb: int) -> None:
    assert ephemeral_os_max_size_gb(sku(**{"ephemeral_os_disk_supported": True, **disks})) == expected_gb


@pytest.mark.parametrize(
    ("name", "family", "series", "version", "accelerator", "constrained"),
    [
        ("Standard_A0", "A", "A", "1", None, ""),
        ("Standard_B20ms", "B", "Bms", "1", None, ""),
        ("Standard_D2_v2", "D", "D_v2", "2", None, ""),
        ("Standard_DS2_v2", "D", "DS_v2", "2", None, ""),
        ("Standard_D128ds_v6", "D", "Dds_v6", "6", None, ""),
        ("Standard_D16plds_v5", "D", "Dplds_v5", "5", None, ""),
        ("Standard_DC8s_v3", "D", "DCs_v3", "3", None, ""),
        ("Standard_M8-2ms", "M", "Mms", "1", None, "2"),
        ("Standard_NC16as_T4_v3", "N", "NCas_v3", "3", "T4", ""),
        ("Standard_NC24ads_A100_v4", "N", "NCads_v4", "4", "A100", ""),
        ("Standard_NC6s_v3", "N", "NCs_v3", "3", None, ""),
        ("Standard_NCC40ads_H100_v5", "N", "NCCads_v5", "5", "H100", ""),
    ],
)
def test_size_name_parts(
    name: str, family: str, series: str, version: str, accelerator: str | None, constrained: str
) -> None:
    size = parse_size_name(name)

    assert size is not None
    assert (size.family, size.series, size.version_number) == (family, series, version)
    assert (size.accelerator, size.constrained_cpus) == (accelerator, constrained)


def test_unparsable_size_name() -> None:
    assert parse_size_name("Standard_lowercase") is None
    assert filter_reason(sku(name="Standard_lowercase")) is FilterReason.UNPARSABLE_NAME


# --- labels of real sizes (expected values from the provider's own SKU fixture) --------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "Standard_D2s_v3",
            {
                labels.SKU_FAMILY: ["D"],
                labels.SKU_SERIES: ["Ds_v3"],
                labels.SKU_VERSION: ["3"],
                labels.SKU_CPU: ["2"],
                labels.SKU_MEMORY: ["8192"],
                labels.AKS_SKU_MEMORY: ["8192"],
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["53"],
                labels.SKU_HYPERV_GENERATION: ["1", "2"],
                labels.SKU_GPU_COUNT: ["0"],
                labels.ARCH: ["amd64"],
            },
        ),
        (
            "Standard_D16plds_v5",
            {
                labels.SKU_SERIES: ["Dplds_v5"],
                labels.SKU_VERSION: ["5"],
                labels.SKU_MEMORY: ["32768"],
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["429"],
                labels.SKU_HYPERV_GENERATION: ["2"],
                labels.ARCH: ["arm64"],
            },
        ),
        (
            "Standard_D128ds_v6",
            {labels.SKU_SERIES: ["Dds_v6"], labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["7559"]},
        ),
        (
            "Standard_B20ms",
            {
                labels.SKU_SERIES: ["Bms"],
                labels.SKU_VERSION: ["1"],
                labels.SKU_MEMORY: ["81920"],
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["32"],
            },
        ),
        (
            "Standard_NC24ads_A100_v4",
            {
                labels.SKU_FAMILY: ["N"],
                labels.SKU_SERIES: ["NCads_v4"],
                labels.SKU_GPU_NAME: ["A100"],
                labels.SKU_GPU_MANUFACTURER: ["nvidia"],
                labels.SKU_GPU_COUNT: ["1"],
                labels.SKU_MEMORY: ["225280"],
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["274"],
                labels.ZONE: ["0", "southcentralus-1", "southcentralus-3"],
            },
        ),
        (
            "Standard_E4d_v5",
            {
                labels.SKU_SERIES: ["Ed_v5"],
                labels.SKU_NETWORKING_ACCELERATED: ["true"],
                labels.SKU_STORAGE_PREMIUM_CAPABLE: ["false"],
                labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE: ["161"],
            },
        ),
    ],
)
def test_labels_of_real_sizes(name: str, expected: dict[str, list[str]]) -> None:
    instance_types = {it.name: it for it in azure_instance_types(load_shipped_catalog("southcentralus"))}
    instance_type = instance_types[name]

    assert {key: values(instance_type, key) for key in expected} == expected


def test_well_known_labels() -> None:
    instance_type = only(azure_instance_types(catalog(sku())))

    assert values(instance_type, labels.INSTANCE_TYPE) == ["Standard_D4s_v5"]
    assert values(instance_type, labels.SKU_NAME) == ["Standard_D4s_v5"]
    assert values(instance_type, labels.OS) == ["linux"]
    assert values(instance_type, labels.REGION) == ["eastus"]
    assert values(instance_type, labels.CAPACITY_TYPE) == ["on-demand", "spot"]
    assert values(instance_type, labels.PLACEMENT_SCOPE) == ["regional", "zonal"]
    assert values(instance_type, labels.AKS_SKU_CPU) == ["4"]
    assert values(instance_type, labels.AKS_MODE) == ["system", "user"]
    assert values(instance_type, labels.AKS_SCALESET_PRIORITY) == ["regular", "spot"]
    assert values(instance_type, labels.AKS_OS_SKU) == ["Ubuntu"]
    assert absent(instance_type, labels.AKS_FIPS_ENABLED)


def test_labels_absent_without_gpu_or_ephemeral_disk() -> None:
    instance_type = only(azure_instance_types(catalog(sku(ephemeral_os_disk_supported=False))))

    assert absent(instance_type, labels.SKU_GPU_NAME)
    assert absent(instance_type, labels.SKU_GPU_MANUFACTURER)
    assert absent(instance_type, labels.SKU_STORAGE_EPHEMERALOS_MAXSIZE)


def test_gpu_name_needs_an_accelerator_in_the_name() -> None:
    v100 = sku(
        name="Standard_NC6s_v3", vcpus=6, gpu_count=1, gpu_manufacturer="nvidia", gpu_os=frozenset({"ubuntu"})
    )
    instance_type = only(azure_instance_types(catalog(v100)))

    assert values(instance_type, labels.SKU_GPU_MANUFACTURER) == ["nvidia"]
    assert absent(instance_type, labels.SKU_GPU_NAME)
    assert instance_type.capacity[NVIDIA_GPU] == 1


# --- capacity and overhead --------------------------------------------------------------------------------


def test_capacity_and_overhead_follow_settings() -> None:
    settings = NodeClassSettings(os_disk_size_gb=64, max_pods=30, memory_overhead_percent=0.1)
    instance_type = only(azure_instance_types(catalog(sku(vcpus=64, memory_gib=256)), settings))

    assert instance_type.capacity == {
        CPU: 64_000,
        MEMORY: 256 * 2**30 - 27487790695,  # the 10 % share, rounded up
        EPHEMERAL_STORAGE: 64 * 10**9,
        PODS: 30,
    }
    assert instance_type.overhead.kube_reserved == {CPU: 740, MEMORY: 12165 * MIB}
    assert instance_type.overhead.system_reserved == {}
    assert instance_type.overhead.eviction_threshold == {MEMORY: 750 * MIB}


def test_shipped_eastus_types_are_consistent() -> None:
    instance_types = azure_instance_types(load_shipped_catalog("eastus"))

    assert len(instance_types) == 629
    assert [it.name for it in instance_types] == sorted(it.name for it in instance_types)
    for instance_type in instance_types:
        allocatable = instance_type.allocatable()
        assert all(allocatable[name] <= amount for name, amount in instance_type.capacity.items())
        assert allocatable[CPU] > 0 and allocatable[MEMORY] > 0, instance_type.name
        on_demand = [o for o in instance_type.offerings if o.capacity_type == labels.CAPACITY_TYPE_ON_DEMAND]
        assert on_demand and all(o.price_micros > 0 and o.available for o in on_demand), instance_type.name


# --- offerings ---------------------------------------------------------------------------------------------


def test_offering_per_zone_and_capacity_type() -> None:
    instance_type = only(azure_instance_types(catalog(sku())))

    assert [(o.zone, o.capacity_type) for o in instance_type.offerings] == [
        ("eastus-1", "on-demand"),
        ("eastus-1", "spot"),
        ("eastus-2", "on-demand"),
        ("eastus-2", "spot"),
        ("eastus-3", "on-demand"),
        ("eastus-3", "spot"),
        ("0", "on-demand"),
        ("0", "spot"),
    ]
    assert all(o.available for o in instance_type.offerings)
    assert {o.price_micros for o in instance_type.offerings if o.capacity_type == "spot"} == {38_400}
    assert values(instance_type, labels.ZONE) == ["0", "eastus-1", "eastus-2", "eastus-3"]


def test_offering_requirements() -> None:
    offers = {(o.zone, o.capacity_type): o for o in only(azure_instance_types(catalog(sku()))).offerings}

    zonal_spot = offers[("eastus-2", "spot")].requirements
    assert zonal_spot.get(labels.ZONE).sorted_values() == ["eastus-2"]
    assert zonal_spot.get(labels.CAPACITY_TYPE).sorted_values() == ["spot"]
    assert zonal_spot.get(labels.AKS_SCALESET_PRIORITY).sorted_values() == ["spot"]
    assert zonal_spot.get(labels.AKS_PRIORITY).sorted_values() == ["spot"]
    assert zonal_spot.get(labels.PLACEMENT_SCOPE).sorted_values() == ["zonal"]
    regional = offers[("0", "on-demand")].requirements
    assert regional.get(labels.AKS_PRIORITY).sorted_values() == ["regular"]
    assert regional.get(labels.PLACEMENT_SCOPE).sorted_values() == ["regional"]


def test_ultra_ssd_is_regional_only() -> None:
    offers = {o.zone: o for o in only(azure_instance_types(catalog(sku(ultra_ssd_available=True)))).offerings}

    assert offers["0"].requirements.get(labels.SKU_STORAGE_ULTRA_SSD).sorted_values() == ["false", "true"]
    assert offers["eastus-1"].requirements.get(labels.SKU_STORAGE_ULTRA_SSD).sorted_values() == ["false"]


def test_sku_zones_override_region_zones() -> None:
    zonal = only(azure_instance_types(catalog(sku(zones=("3", "1")))))
    regional = only(azure_instance_types(catalog(sku(zones=()))))
    no_zone_region = only(azure_instance_types(catalog(sku(), zones=())))

    assert [o.zone for o in zonal.offerings][::2] == ["eastus-1", "eastus-3", "0"]
    assert [o.zone for o in regional.offerings] == ["0", "0"]
    assert values(regional, labels.PLACEMENT_SCOPE) == ["regional"]
    assert [o.zone for o in no_zone_region.offerings] == ["0", "0"]


@pytest.mark.parametrize(
    "overrides",
    [{"low_priority_capable": False}, {"low_priority_capable": None}, {"spot_price_micros": None}],
)
def test_spot_unavailable_without_eligibility_or_price(overrides: dict[str, Any]) -> None:
    instance_type = only(azure_instance_types(catalog(sku(**overrides))))

    spot = [o for o in instance_type.offerings if o.capacity_type == "spot"]
    assert spot and not any(o.available for o in spot)
    assert values(instance_type, labels.CAPACITY_TYPE) == ["on-demand"]


def test_missing_spot_price_is_not_invented() -> None:
    instance_type = only(azure_instance_types(catalog(sku(spot_price_micros=None))))

    assert {o.price_micros for o in instance_type.offerings if o.capacity_type == "spot"} == {
        MISSING_PRICE_MICROS
    }


def test_unknown_sizes_get_the_penalty_price() -> None:
    instance_type = only(azure_instance_types(catalog(sku(karpenter_known_sku=False))))

    assert {o.price_micros for o in instance_type.offerings} == {999_000_000}
    assert all(o.available for o in instance_type.offerings)


def test_known_size_without_on_demand_price_gets_the_penalty_price() -> None:
    instance_type = only(azure_instance_types(catalog(sku(on_demand_price_micros=None))))

    assert {o.price_micros for o in instance_type.offerings if o.capacity_type == "on-demand"} == {
        999_000_000
    }


def test_unavailable_offerings_leave_the_labels() -> None:
    name = "Standard_D4s_v5"
    unavailable = {(name, "eastus-1", "spot"), (name, "eastus-2", "on-demand"), (name, "eastus-2", "spot")}
    instance_type = only(azure_instance_types(catalog(sku()), unavailable=unavailable))

    off = {(o.zone, o.capacity_type) for o in instance_type.offerings if not o.available}
    assert off == {("eastus-1", "spot"), ("eastus-2", "on-demand"), ("eastus-2", "spot")}
    assert values(instance_type, labels.ZONE) == ["0", "eastus-1", "eastus-3"]
    assert values(instance_type, labels.CAPACITY_TYPE) == ["on-demand", "spot"]


def test_unavailable_offerings_rebuild_only_the_sizes_they_name() -> None:
    shipped = load_shipped_catalog("eastus")
    base = azure_instance_types(shipped)
    unavailable = {("Standard_D2s_v5", "eastus-1", "spot"), ("Standard_F2s_v2", "eastus-2", "on-demand")}

    shared = azure_instance_types(shipped, unavailable=unavailable, reuse=base)

    assert shared == azure_instance_types(shipped, unavailable=unavailable)
    rebuilt = {new.name for old, new in zip(base, shared, strict=True) if old is not new}
    assert rebuilt == {"Standard_D2s_v5", "Standard_F2s_v2"}


def test_no_available_offering_leaves_nothing_to_select() -> None:
    name = "Standard_D4s_v5"
    zones = ("eastus-1", "eastus-2", "eastus-3", "0")
    unavailable = {(name, zone, "on-demand") for zone in zones}
    instance_type = only(azure_instance_types(catalog(sku(spot_price_micros=None)), unavailable=unavailable))

    assert values(instance_type, labels.ZONE) == []
    assert values(instance_type, labels.CAPACITY_TYPE) == []


# --- filters -----------------------------------------------------------------------------------------------


def test_filtered_out_of_shipped_eastus() -> None:
    assert filtered_out(load_shipped_catalog("eastus")) == {
        "Standard_B1ls": FilterReason.TOO_FEW_VCPUS,
        "Standard_B1ms": FilterReason.RESTRICTED_SIZE,
        "Standard_B1s": FilterReason.RESTRICTED_SIZE,
        "Standard_B2ats_v2": FilterReason.TOO_LITTLE_MEMORY,
        "Standard_B2pts_v2": FilterReason.TOO_LITTLE_MEMORY,
        "Standard_B2ts_v2": FilterReason.TOO_LITTLE_MEMORY,
        "Standard_E64i_v3": FilterReason.RESTRICTED_SIZE,
        "Standard_E64is_v3": FilterReason.RESTRICTED_SIZE,
    }


NVIDIA_T4 = {"name": "Standard_NC4as_T4_v3", "gpu_count": 1, "gpu_manufacturer": "nvidia"}
AZURE_LINUX = NodeClassSettings(image_family=ImageFamily.AZURE_LINUX)
AMD_MI300X = {"name": "Standard_ND96isr_MI300X_v5", "vcpus": 96, "gpu_count": 8, "gpu_manufacturer": "amd"}


@pytest.mark.parametrize(
    ("overrides", "settings", "reason"),
    [
        (
            {"name": "Standard_A1_v2", "vcpus": 1, "memory_gib": 2},
            NodeClassSettings(),
            FilterReason.RESTRICTED_SIZE,
        ),
        (
            {"name": "Standard_F1s", "vcpus": 1, "memory_gib": 2},
            NodeClassSettings(),
            FilterReason.RESTRICTED_SIZE,
        ),
        ({"vcpus": 1}, NodeClassSettings(), FilterReason.TOO_FEW_VCPUS),
        ({"memory_gib": 3.4}, NodeClassSettings(), FilterReason.TOO_LITTLE_MEMORY),
        ({"name": "Standard_NV6", "gpu_count": 1}, NodeClassSettings(), FilterReason.UNSUPPORTED_GPU),
        ({"name": "Standard_E16-4ads_v5"}, NodeClassSettings(), FilterReason.CONSTRAINED_VCPUS),
        ({"name": "Standard_DC8s_v3"}, NodeClassSettings(), FilterReason.CONFIDENTIAL),
        ({"name": "Standard_EC8ads_v5"}, NodeClassSettings(), FilterReason.CONFIDENTIAL),
        (
            {**NVIDIA_T4, "gpu_os": frozenset({"ubuntu"})},
            AZURE_LINUX,
            FilterReason.GPU_IMAGE_FAMILY,
        ),
        (
            {**NVIDIA_T4, "gpu_os": frozenset({"azurelinux3"})},
            NodeClassSettings(image_family=ImageFamily.UBUNTU_2204),
            FilterReason.GPU_IMAGE_FAMILY,
        ),
        (
            {**AMD_MI300X, "gpu_os": frozenset({"ubuntu"})},
            NodeClassSettings(),
            FilterReason.GPU_DRIVER_MODE,
        ),
        (
            {"encryption_at_host_supported": False},
            NodeClassSettings(encryption_at_host=True),
            FilterReason.ENCRYPTION_AT_HOST,
        ),
        ({"vcpus": 2}, NodeClassSettings(local_dns=True), FilterReason.LOCAL_DNS),
        (
            {"architecture": "arm64"},
            NodeClassSettings(artifact_streaming=True),
            FilterReason.ARTIFACT_STREAMING,
        ),
        (
            {"hyperv_generations": ("V1",)},
            NodeClassSettings(trusted_launch=True),
            FilterReason.TRUSTED_LAUNCH,
        ),
        (
            {"trusted_launch_disabled": True},
            NodeClassSettings(trusted_launch=True),
            FilterReason.TRUSTED_LAUNCH,
        ),
    ],
)
def test_filter_reasons(overrides: dict[str, Any], settings: NodeClassSettings, reason: FilterReason) -> None:
    dropped = sku(**overrides)

    assert filter_reason(dropped, settings) is reason
    assert filtered_out(catalog(dropped), settings) == {dropped.name: reason}
    assert azure_instance_types(catalog(dropped), settings) == []
    assert reason.message


@pytest.mark.parametrize(
    ("overrides", "settings"),
    [
        ({**NVIDIA_T4, "gpu_os": frozenset({"azurelinux3"})}, AZURE_LINUX),
        ({**AMD_MI300X, "gpu_os": frozenset({"ubuntu"})}, NodeClassSettings(gpu_mode=GpuMode.NONE)),
        ({"encryption_at_host_supported": None}, NodeClassSettings(encryption_at_host=True)),
        ({"vcpus": 4}, NodeClassSettings(local_dns=True)),
        ({"architecture": "arm64"}, NodeClassSettings()),
        ({"hyperv_generations": ("V2",)}, NodeClassSettings(trusted_launch=True)),
    ],
)
def test_settings_that_keep_a_size(overrides: dict[str, Any], settings: NodeClassSettings) -> None:
    kept = sku(**overrides)

    assert filter_reason(kept, settings) is None
    assert [it.name for it in azure_instance_types(catalog(kept), settings)] == [kept.name]


def test_amd_gpus_without_driver_install() -> None:
    mi300x = sku(**AMD_MI300X, gpu_os=frozenset({"ubuntu"}))
    instance_type = only(azure_instance_types(catalog(mi300x), NodeClassSettings(gpu_mode=GpuMode.NONE)))

    assert instance_type.capacity[AMD_GPU] == 8
    assert NVIDIA_GPU not in instance_type.capacity
    assert values(instance_type, labels.SKU_GPU_MANUFACTURER) == ["amd"]
    assert values(instance_type, labels.SKU_GPU_NAME) == ["MI300X"]


def test_a_fips_nodeclass_gives_its_instance_types_the_fips_label() -> None:
    instance_type = only(azure_instance_types(catalog(sku()), NodeClassSettings(fips=True)))

    assert values(instance_type, labels.AKS_FIPS_ENABLED) == ["true"]
    assert instance_type.node_labels(instance_type.offerings[0])[labels.AKS_FIPS_ENABLED] == "true"


def test_azure_linux_os_sku() -> None:
    instance_type = only(azure_instance_types(catalog(sku()), AZURE_LINUX))

    assert values(instance_type, labels.AKS_OS_SKU) == ["AzureLinux"]


def test_filters_apply_to_a_whole_catalog() -> None:
    kept, dropped = sku(), sku(name="Standard_D2s_v3", vcpus=2)
    settings = NodeClassSettings(local_dns=True)

    assert [it.name for it in azure_instance_types(catalog(kept, dropped), settings)] == ["Standard_D4s_v5"]
    assert filtered_out(catalog(kept, dropped), settings) == {"Standard_D2s_v3": FilterReason.LOCAL_DNS}


# --- Windows -------------------------------------------------------------------------------------------

WINDOWS_2022 = NodeClassSettings(image_family=ImageFamily.WINDOWS_2022)


@pytest.mark.parametrize(
    ("family", "build", "os_sku"),
    [
        (ImageFamily.WINDOWS_2022, "10.0.20348", "Windows2022"),
        (ImageFamily.WINDOWS_2025, "10.0.26100", "Windows2025"),
    ],
)
def test_windows_sizes_carry_the_labels_aks_writes(family: ImageFamily, build: str, os_sku: str) -> None:
    instance_type = only(azure_instance_types(catalog(sku()), NodeClassSettings(image_family=family)))

    node = instance_type.node_labels(instance_type.offerings[0])
    assert (node[labels.OS], node[labels.WINDOWS_BUILD], node[labels.AKS_OS_SKU]) == (
        "windows",
        build,
        os_sku,
    )


def test_linux_sizes_have_no_windows_build() -> None:
    instance_type = only(azure_instance_types(catalog(sku())))

    assert values(instance_type, labels.OS) == ["linux"]
    assert absent(instance_type, labels.WINDOWS_BUILD)


def test_windows_runs_on_amd64_sizes_only() -> None:
    arm = sku(name="Standard_D4ps_v5", architecture="arm64")

    assert filter_reason(arm, WINDOWS_2022) is FilterReason.WINDOWS_ARCHITECTURE
    assert filter_reason(sku(), WINDOWS_2022) is None
    assert [it.name for it in azure_instance_types(catalog(sku(), arm), WINDOWS_2022)] == ["Standard_D4s_v5"]


def test_windows_gpu_sizes_need_the_registrys_windows_support() -> None:
    gpu = {"name": "Standard_NC4as_T4_v3", "gpu_count": 1, "gpu_manufacturer": "nvidia"}

    assert (
        filter_reason(sku(**gpu, gpu_os=frozenset({"ubuntu"})), WINDOWS_2022) is FilterReason.GPU_IMAGE_FAMILY
    )
    assert filter_reason(sku(**gpu, gpu_os=frozenset({"ubuntu", "windows"})), WINDOWS_2022) is None


def test_windows_reserves_2gib_more_memory_and_has_no_hard_eviction() -> None:
    linux = only(azure_instance_types(catalog(sku())))
    windows = only(azure_instance_types(catalog(sku()), WINDOWS_2022))

    # 4 vCPUs, 16 GiB: the brackets' 2662Mi, plus AKS's 2048Mi for Windows; the same CPU.
    assert windows.overhead.kube_reserved == {CPU: 140, MEMORY: (2662 + 2048) * MIB}
    assert windows.overhead.eviction_threshold == {}
    assert linux.overhead.eviction_threshold == {MEMORY: 750 * MIB}
    assert linux.allocatable()[MEMORY] - windows.allocatable()[MEMORY] == (2048 - 750) * MIB


def test_windows_nodes_cost_the_windows_rate() -> None:
    plain, burstable = (
        sku(),
        sku(name="Standard_B4s_v2", on_demand_price_micros=166_400, spot_price_micros=None),
    )
    metered = sku(
        name="Standard_D4as_v5", windows_on_demand_price_micros=356_000, windows_spot_price_micros=90_000
    )
    types = {it.name: it for it in azure_instance_types(catalog(plain, burstable, metered), WINDOWS_2022)}

    def prices(name: str) -> dict[str, int]:
        return {o.capacity_type: o.price_micros for o in types[name].offerings if o.zone == "eastus-1"}

    # The license: $0.046 per vCPU-hour, on spot too (a live Windows meter wins when there is one).
    assert prices("Standard_D4s_v5") == {"on-demand": 192_000 + 184_000, "spot": 38_400 + 184_000}
    assert prices("Standard_D4as_v5") == {"on-demand": 356_000, "spot": 90_000}
    # The burstable B-series' license is a tenth of that.
    assert prices("Standard_B4s_v2")["on-demand"] == 166_400 + 18_400
    hybrid = AzureCatalog(region="eastus", zones=("1",), skus=(plain,), windows_license_included=False)
    [brought] = azure_instance_types(hybrid, WINDOWS_2022)
    assert {o.price_micros for o in brought.offerings if o.capacity_type == "on-demand"} == {192_000}


@pytest.mark.parametrize("region", ["eastus", "uksouth", "brazilsouth", "usgovvirginia"])
def test_windows_nodes_cost_their_regions_linux_rate_plus_the_license_in_every_region(region: str) -> None:
    # eastus is a snapshot; uksouth and brazilsouth are derived from it at the table's prices; usgovvirginia is not
    # in the table (eastus prices). No shipped catalog has a Windows meter, so the region's Linux price counts.
    shipped = load_shipped_catalog(region, fallback=True)
    linux = {it.name: it for it in azure_instance_types(shipped)}
    windows = {it.name: it for it in azure_instance_types(shipped, WINDOWS_2022)}
    for name, license_rate in (
        ("Standard_D4s_v5", 46_000),
        ("Standard_E8s_v5", 46_000),
        ("Standard_B2s", 4_600),
    ):
        linux_prices = {(o.zone, o.capacity_type): o.price_micros for o in linux[name].offerings}
        priced = [
            o
            for o in windows[name].offerings
            if linux_prices[o.zone, o.capacity_type] != MISSING_PRICE_MICROS
        ]
        assert {o.capacity_type for o in priced} >= {"on-demand"}
        for offering in priced:
            expected = (
                linux_prices[offering.zone, offering.capacity_type] + license_rate * shipped.sku(name).vcpus
            )
            assert offering.price_micros == expected, (region, name, offering.capacity_type)


def test_a_windows_node_in_a_derived_region_costs_that_regions_price_plus_the_license() -> None:
    types = {it.name: it for it in azure_instance_types(load_shipped_catalog("uksouth"), WINDOWS_2022)}
    # uksouth's table price is $0.222 (eastus's $0.192); the license $0.046 x 4 vCPUs; spot as on-demand.
    assert {o.price_micros for o in types["Standard_D4s_v5"].offerings} == {222_000 + 184_000}
    # The provider's table holds the Windows rate $0.384 for Standard_D4as_v5 there: the license is counted once.
    assert {o.price_micros for o in types["Standard_D4as_v5"].offerings} == {200_000 + 184_000}


def test_windows2025_always_has_the_fips_label() -> None:
    instance_type = only(
        azure_instance_types(
            catalog(sku()), NodeClassSettings(image_family=ImageFamily.WINDOWS_2025, fips=True)
        )
    )

    assert values(instance_type, labels.AKS_FIPS_ENABLED) == ["true"]
