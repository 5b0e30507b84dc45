from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from core import labels
from core.api.meta import InvalidObjectError
from core.instancetypes.azure import GpuMode, ImageFamily, NodeClassSettings, capacity
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.custom import catalog_instance_types, parse_custom_catalog
from core.instancetypes.types import InstanceType
from core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS

GIB = 2**30
EXAMPLE = Path(__file__).parents[3] / "deploy" / "catalogs" / "custom.yaml"


def offering(
    zone: str = "eastus-1", capacity_type: str = "on-demand", price: Any = 0.192, **extra: Any
) -> dict[str, Any]:
    return {"zone": zone, "capacityType": capacity_type, "price": price, **extra}


def entry(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "Standard_D4s_v5",
        "capacity": {"cpu": 4, "memory": "16Gi"},
        "offerings": [offering()],
        **overrides,
    }


def custom_instance_types(raw: Any, **kwargs: Any) -> list[InstanceType]:
    return catalog_instance_types(parse_custom_catalog(raw), **kwargs)


def only(raw: Any, **kwargs: Any) -> InstanceType:
    instance_types = custom_instance_types(raw, **kwargs)
    assert len(instance_types) == 1
    return instance_types[0]


def values(instance_type: InstanceType, key: str) -> list[str]:
    return instance_type.requirements.get(key).sorted_values()


def test_minimal_entry_gets_defaults() -> None:
    instance_type = only([entry()])

    assert instance_type.name == "Standard_D4s_v5"
    # No AKSNodeClass: its defaults, as for the shipped catalogs (250 pods, a 128 GB OS disk).
    assert instance_type.capacity == {CPU: 4000, MEMORY: 16 * GIB, PODS: 250, EPHEMERAL_STORAGE: 128 * 10**9}
    assert instance_type.allocatable() == instance_type.capacity
    assert values(instance_type, labels.INSTANCE_TYPE) == ["Standard_D4s_v5"]
    assert values(instance_type, labels.ARCH) == ["amd64"]
    assert values(instance_type, labels.OS) == ["linux"]
    assert values(instance_type, labels.ZONE) == ["eastus-1"]
    assert values(instance_type, labels.CAPACITY_TYPE) == ["on-demand"]
    [only_offering] = instance_type.offerings
    assert (only_offering.price_micros, only_offering.available) == (192_000, True)
    assert only_offering.requirements.get(labels.ZONE).sorted_values() == ["eastus-1"]
    assert only_offering.requirements.get(labels.CAPACITY_TYPE).sorted_values() == ["on-demand"]


def test_object_form_and_sorting() -> None:
    instance_types = custom_instance_types({"instanceTypes": [entry(name="b"), entry(name="a")]})

    assert [it.name for it in instance_types] == ["a", "b"]


def test_allocatable_sets_the_overhead() -> None:
    instance_type = only([entry(allocatable={"cpu": "3860m", "memory": "12Gi"})])

    assert instance_type.overhead.kube_reserved == {CPU: 140, MEMORY: 4 * GIB}
    assert instance_type.allocatable() == {
        CPU: 3860,
        MEMORY: 12 * GIB,
        PODS: 250,
        EPHEMERAL_STORAGE: 128 * 10**9,
    }


def test_overhead_is_subtracted() -> None:
    instance_type = only([entry(capacity={"cpu": 8, "memory": "32Gi"}, overhead={"cpu": "180m"})])

    assert instance_type.allocatable()[CPU] == 7820 and instance_type.allocatable()[MEMORY] == 32 * GIB


def test_max_pods_and_os_disk_are_the_aksnodeclass_s_as_for_the_azure_catalogs() -> None:
    """The kubelet's maxPods and the OS disk are the AKSNodeClass's whatever the catalog: an entry's own pods and
    ephemeral storage are replaced (and named, for the CLI to warn)."""
    settings = NodeClassSettings(max_pods=30, os_disk_size_gb=64)
    [given] = parse_custom_catalog([entry(capacity={"cpu": 4, "memory": "16Gi", "pods": 110})])
    instance_type = only([entry(capacity={"cpu": 4, "memory": "16Gi", "pods": 110})], settings=settings)
    sku = load_shipped_catalog("eastus").sku("Standard_D4s_v5")
    assert sku is not None

    assert instance_type.capacity[PODS] == 30 == capacity(sku, settings)[PODS]
    assert (
        instance_type.capacity[EPHEMERAL_STORAGE] == 64 * 10**9 == capacity(sku, settings)[EPHEMERAL_STORAGE]
    )
    assert given.replaced() == ["capacity.pods"]


def test_labels_and_extended_resources() -> None:
    instance_type = only(
        [
            entry(
                capacity={"cpu": 4, "memory": "28Gi", NVIDIA_GPU: 1},
                labels={labels.ARCH: "arm64", "example.com/team": "ml"},
            )
        ]
    )

    assert instance_type.capacity[NVIDIA_GPU] == 1
    assert values(instance_type, labels.ARCH) == ["arm64"]
    assert values(instance_type, "example.com/team") == ["ml"]


def test_unavailable_offerings_leave_the_labels() -> None:
    offerings = [
        offering("eastus-1"),
        offering("eastus-2"),
        offering("eastus-1", "spot", 0.04),
        offering("eastus-2", "spot", 0.04, available=False),
    ]
    instance_type = only([entry(offerings=offerings)], unavailable={("Standard_D4s_v5", "eastus-1", "spot")})

    assert [o.available for o in instance_type.offerings] == [True, True, False, False]
    assert values(instance_type, labels.ZONE) == ["eastus-1", "eastus-2"]
    assert values(instance_type, labels.CAPACITY_TYPE) == ["on-demand"]


def test_price_rounds_half_up_to_micro_dollars() -> None:
    instance_type = only([entry(offerings=[offering(price="0.0000125")])])

    assert instance_type.offerings[0].price_micros == 13


def test_example_file_parses() -> None:
    instance_types = custom_instance_types(yaml.safe_load(EXAMPLE.read_text()))

    assert [it.name for it in instance_types] == [
        "Standard_D4ps_v5",
        "Standard_D4s_v5",
        "Standard_NC4as_T4_v3",
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"types": []}, "expected a list of instance types, or {instanceTypes: [...]}"),
        ([], "the catalog has no instance types"),
        (["x"], "instanceTypes[0]: expected a mapping with name, capacity and offerings"),
        ([entry(price=1)], "instanceTypes[0] (Standard_D4s_v5): price: Extra inputs are not permitted"),
        ([entry(), entry(name="")], "instanceTypes[1]: name: String should have at least 1 character"),
        (
            [entry(capacity={"cpu": "four", "memory": "1Gi"})],
            "instanceTypes[0] (Standard_D4s_v5): capacity.cpu: quantity 'four' does not match",
        ),
        ([entry(capacity={"cpu": 4})], "capacity: must give memory"),
        ([entry(capacity={"cpu": 4, "memory": "-1Gi"})], "capacity: must not be negative: memory"),
        ([entry(offerings=[])], "offerings: List should have at least 1 item"),
        (
            [entry(offerings=[offering(capacity_type="od")])],
            "offerings[0].capacityType: Input should be 'on-demand'",
        ),
        (
            [entry(offerings=[offering(price=-0.1)])],
            "offerings[0].price: Input should be greater than or equal to 0",
        ),
        (
            [entry(offerings=[offering(), offering()])],
            "offerings: [1] repeats zone eastus-1 and capacityType on-demand",
        ),
        ([entry(labels={labels.ZONE: "eastus-1"})], f"labels: may not set {labels.ZONE}"),
        ([entry(labels={labels.INSTANCE_TYPE: "x"})], f"labels: may not set {labels.INSTANCE_TYPE}"),
        (
            [entry(labels={labels.AKS_FIPS_ENABLED: "true"})],
            f"labels: may not set {labels.AKS_FIPS_ENABLED}: each NodePool's AKSNodeClass gives it",
        ),
        ([entry(labels={labels.AKS_OS_SKU: "Ubuntu"})], f"labels: may not set {labels.AKS_OS_SKU}"),
        ([entry(labels={"example.com/size": 4})], "labels.example.com/size: Input should be a valid string"),
        (
            [entry(allocatable={"cpu": 1}, overhead={"cpu": 1})],
            "give either allocatable or overhead, not both",
        ),
        ([entry(allocatable={"cpu": 5})], "allocatable.cpu must be between 0 and capacity.cpu"),
        ([entry(overhead={NVIDIA_GPU: 1})], f"overhead.{NVIDIA_GPU} is not in capacity"),
        ([entry(), entry()], "instanceTypes[1] (Standard_D4s_v5): name repeats instanceTypes[0]"),
    ],
)
def test_errors_name_the_entry_and_field(raw: Any, message: str) -> None:
    with pytest.raises(InvalidObjectError) as error:
        parse_custom_catalog(raw)

    assert message in str(error.value)
    assert str(error.value).startswith("instance type catalog: ")


def test_every_problem_is_reported() -> None:
    with pytest.raises(InvalidObjectError) as error:
        parse_custom_catalog([entry(capacity={"cpu": 4}), entry(name="b", offerings=[])])

    assert len(error.value.problems) == 2


def names(raw: Any, settings: NodeClassSettings) -> list[str]:
    return [it.name for it in custom_instance_types(raw, settings=settings)]


def test_the_aksnodeclass_rules_of_the_azure_catalogs_apply() -> None:
    """The rules that depend on the AKSNodeClass are the same as for the shipped catalogs."""
    small = entry(name="small", capacity={"cpu": 2, "memory": "8Gi"})
    large = entry(name="large", capacity={"cpu": 4, "memory": "16Gi"})
    arm = entry(name="arm", capacity={"cpu": 4, "memory": "16Gi"}, labels={labels.ARCH: "arm64"})
    amd_gpu = entry(name="amd-gpu", capacity={"cpu": 8, "memory": "32Gi", "amd.com/gpu": 1})
    nvidia = entry(
        name="nvidia", capacity={"cpu": 8, "memory": "32Gi"}, labels={labels.SKU_GPU_MANUFACTURER: "nvidia"}
    )
    gen1 = entry(
        name="gen1", capacity={"cpu": 4, "memory": "16Gi"}, labels={labels.SKU_HYPERV_GENERATION: "1"}
    )
    raw = [small, large, arm, amd_gpu, nvidia, gen1]
    everything = ["amd-gpu", "arm", "gen1", "large", "nvidia", "small"]

    assert names(raw, NodeClassSettings(gpu_mode=GpuMode.NONE)) == everything
    assert names(raw, NodeClassSettings()) == ["arm", "gen1", "large", "nvidia", "small"]
    assert "small" not in names(raw, NodeClassSettings(local_dns=True))
    assert "arm" not in names(raw, NodeClassSettings(artifact_streaming=True))
    # AKS runs Windows Server on amd64 sizes only.
    assert "arm" not in names(raw, NodeClassSettings(image_family=ImageFamily.WINDOWS_2022))
    # Only an entry that says it is generation 1 is known not to boot Trusted Launch images.
    assert names(raw, NodeClassSettings(trusted_launch=True, gpu_mode=GpuMode.NONE)) == [
        n for n in everything if n != "gen1"
    ]


def test_every_type_gets_the_aksnodeclass_labels() -> None:
    [plain] = custom_instance_types([entry()])
    [fips] = custom_instance_types([entry()], settings=NodeClassSettings(fips=True))
    [azure_linux] = custom_instance_types(
        [entry()], settings=NodeClassSettings(image_family=ImageFamily.AZURE_LINUX)
    )

    assert values(plain, labels.AKS_OS_SKU) == ["Ubuntu"]
    assert plain.requirements.get(labels.AKS_FIPS_ENABLED).operator().value == "DoesNotExist"
    assert values(fips, labels.AKS_FIPS_ENABLED) == ["true"]
    assert values(azure_linux, labels.AKS_OS_SKU) == ["AzureLinux"]
