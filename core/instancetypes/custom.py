"""The user's own instance types (`--catalog FILE`): sizes, labels and prices the shipped catalogs lack.

The CLI reads the file (YAML or JSON) and passes the parsed value here. It is either a list of entries or
an object `{instanceTypes: [...]}`; each entry describes one instance type::

    - name: Standard_D4s_v5          # required; the node.kubernetes.io/instance-type value
      capacity:                      # required: cpu and memory; any extended resource, e.g.
        cpu: 4                       #   nvidia.com/gpu: 1 (pods and ephemeral-storage are the
        memory: 16Gi                 #   AKSNodeClass's: maxPods and osDiskSizeGB)
      allocatable:                   # optional: what pods may use; a resource it omits is fully usable
        cpu: 3860m
        memory: 12Gi
      # overhead: {cpu: 140m, memory: 2Gi}   # or, instead of allocatable, what to subtract from capacity
      labels:                        # optional node labels; kubernetes.io/arch defaults to amd64 and
        kubernetes.io/arch: amd64    #   kubernetes.io/os to linux
        karpenter.azure.com/sku-family: D
      offerings:                     # required: one per zone and capacity type
        - zone: eastus-1
          capacityType: on-demand    # on-demand, spot or reserved
          price: 0.192               # USD per hour
        - zone: eastus-1
          capacityType: spot
          price: 0.0384
          available: false           # default true

Quantities use the Kubernetes notation. Labels may not set the zone, the capacity type or the instance type:
those come from the offerings and the name; nor the OS SKU or `fips_enabled`: those come from the AKSNodeClass.
Unknown fields are rejected, and every error names the entry (index and name), the field and the rule.

Each NodePool's AKSNodeClass shapes these types as it shapes the shipped Azure ones, through the same rules
(`core.instancetypes.azure.nodeclass_filter_reason` and `nodeclass_requirements`): LocalDNS needs 4 vCPUs,
gpu.mode Driver takes NVIDIA GPUs only, artifact streaming no arm64, every node gets the AKSNodeClass's
OS SKU and FIPS labels, and its pods and ephemeral storage are the AKSNodeClass's maxPods and OS disk
(`nodeclass_capacity`; the AKS defaults, 250 pods and 128 GB, without one), which replace an entry's own.
What an entry does not say (GPU OSes, encryption at host, Trusted Launch unless
`karpenter.azure.com/sku-hyperv-generation` is given) is read as supported, as for the shipped catalogs.
"""

from __future__ import annotations

from collections.abc import Collection
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from core import labels as wellknown
from core.api.kube import ResourceList
from core.api.meta import InvalidObjectError, StrictKubeModel, problems_of
from core.instancetypes.azure import (
    AMD,
    DEFAULT_SETTINGS,
    MIB,
    NVIDIA,
    NodeClassSettings,
    SizeTraits,
    nodeclass_capacity,
    nodeclass_filter_reason,
    nodeclass_requirements,
)
from core.instancetypes.types import InstanceType, Offering, Overhead, usd_to_micros
from core.resources import (
    AMD_GPU,
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Resources,
    parse_resources,
)
from core.scheduling.requirements import Operator, Requirement, Requirements

KIND = "instance type catalog"
DEFAULT_LABELS = {wellknown.ARCH: "amd64", wellknown.OS: "linux"}
_FROM_OFFERINGS_OR_NAME = (wellknown.ZONE, wellknown.CAPACITY_TYPE, wellknown.INSTANCE_TYPE)
_FROM_NODECLASS = (wellknown.AKS_OS_SKU, wellknown.AKS_FIPS_ENABLED)


class CustomOffering(StrictKubeModel):
    """Where and at what price the instance type can be bought."""

    zone: str = Field(min_length=1)
    capacity_type: Literal["on-demand", "spot", "reserved"]
    price: Decimal = Field(ge=0, allow_inf_nan=False)
    """USD per hour."""
    available: bool = True


class CustomInstanceType(StrictKubeModel):
    """One entry of a `--catalog` file."""

    name: str = Field(min_length=1)
    capacity: ResourceList
    allocatable: ResourceList | None = None
    overhead: ResourceList | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    offerings: list[CustomOffering] = Field(min_length=1)

    @field_validator("capacity")
    @classmethod
    def _cpu_and_memory(cls, capacity: dict[str, str | int | float]) -> dict[str, str | int | float]:
        missing = [name for name in (CPU, MEMORY) if name not in capacity]
        if missing:
            raise ValueError(f"must give {' and '.join(missing)}")
        negative = sorted(name for name, amount in parse_resources(capacity).items() if amount < 0)
        if negative:
            raise ValueError(f"must not be negative: {', '.join(negative)}")
        return capacity

    @field_validator("labels")
    @classmethod
    def _not_from_offerings(cls, node_labels: dict[str, str]) -> dict[str, str]:
        for given, source in (
            (_FROM_OFFERINGS_OR_NAME, "the offerings and the name give it"),
            (_FROM_NODECLASS, "each NodePool's AKSNodeClass gives it"),
        ):
            reserved = sorted(key for key in node_labels if wellknown.normalize_key(key) in given)
            if reserved:
                raise ValueError(f"may not set {', '.join(reserved)}: {source}")
        return node_labels

    @field_validator("offerings")
    @classmethod
    def _one_per_zone_and_capacity_type(cls, offerings: list[CustomOffering]) -> list[CustomOffering]:
        seen: dict[tuple[str, str], int] = {}
        for index, offering in enumerate(offerings):
            key = (offering.zone, offering.capacity_type)
            if key in seen:
                raise ValueError(
                    f"[{index}] repeats zone {offering.zone} and capacityType {offering.capacity_type} "
                    f"of [{seen[key]}]"
                )
            seen[key] = index
        return offerings

    @model_validator(mode="after")
    def _within_capacity(self) -> CustomInstanceType:
        if self.allocatable is not None and self.overhead is not None:
            raise ValueError("give either allocatable or overhead, not both")
        capacity = self.capacity_resources()
        for field, amounts in (("allocatable", self.allocatable), ("overhead", self.overhead)):
            for name, amount in parse_resources(amounts).items():
                if name not in capacity:
                    raise ValueError(f"{field}.{name} is not in capacity")
                if not 0 <= amount <= capacity[name]:
                    raise ValueError(f"{field}.{name} must be between 0 and capacity.{name}")
        return self

    def capacity_resources(self, settings: NodeClassSettings = DEFAULT_SETTINGS) -> Resources:
        """Capacity as integers, its pods and ephemeral storage the AKSNodeClass's (`nodeclass_capacity`: maxPods
        and osDiskSizeGB), as for every catalog."""
        return {**parse_resources(self.capacity), **nodeclass_capacity(settings)}

    def replaced(self) -> list[str]:
        """The capacity fields the entry gives that the AKSNodeClass decides instead (`capacity_resources`)."""
        return [f"capacity.{name}" for name in (PODS, EPHEMERAL_STORAGE) if name in self.capacity]

    def node_overhead(self, settings: NodeClassSettings = DEFAULT_SETTINGS) -> Overhead:
        """What the node keeps for itself: the given overhead, or capacity minus the given allocatable."""
        if self.overhead is not None:
            return Overhead(kube_reserved=parse_resources(self.overhead))
        if self.allocatable is None:
            return Overhead()
        capacity = self.capacity_resources(settings)
        allocatable = parse_resources(self.allocatable)
        return Overhead(kube_reserved={name: capacity[name] - amount for name, amount in allocatable.items()})

    def traits(self) -> SizeTraits:
        """What the AKSNodeClass's rules read of the entry: capacity, architecture, GPU maker (its label, else
        the GPU resource it has), Trusted Launch when the Hyper-V generation label says."""
        capacity = self.capacity_resources()
        node_labels = {**DEFAULT_LABELS, **self.labels}
        gpus = [maker for maker, resource in ((NVIDIA, NVIDIA_GPU), (AMD, AMD_GPU)) if capacity.get(resource)]
        generation = node_labels.get(wellknown.SKU_HYPERV_GENERATION)
        return SizeTraits(
            cpu_millis=capacity[CPU],
            memory_mib=capacity[MEMORY] // MIB,
            architecture=node_labels[wellknown.ARCH],
            gpu_manufacturer=node_labels.get(wellknown.SKU_GPU_MANUFACTURER, next(iter(gpus), None)),
            trusted_launch=None if generation is None else generation == "2",
        )

    def instance_type(
        self,
        unavailable: Collection[tuple[str, str, str]] = frozenset(),
        settings: NodeClassSettings = DEFAULT_SETTINGS,
    ) -> InstanceType:
        """The entry as an instance type of an AKSNodeClass with these settings (its labels included).

        Offerings listed in `unavailable` (name, zone, capacity type) are not available, and the zone and
        capacity-type labels cover the available offerings only.
        """
        offerings = tuple(
            Offering(
                zone=offering.zone,
                capacity_type=offering.capacity_type,
                price_micros=usd_to_micros(offering.price),
                available=offering.available
                and (self.name, offering.zone, offering.capacity_type) not in unavailable,
                requirements=Requirements(
                    [
                        Requirement.new(wellknown.ZONE, Operator.IN, [offering.zone]),
                        Requirement.new(wellknown.CAPACITY_TYPE, Operator.IN, [offering.capacity_type]),
                    ]
                ),
            )
            for offering in self.offerings
        )
        available = [offering for offering in offerings if offering.available]
        node_labels = {**DEFAULT_LABELS, **self.labels}
        requirements = Requirements(
            [
                Requirement.new(wellknown.INSTANCE_TYPE, Operator.IN, [self.name]),
                *(Requirement.new(key, Operator.IN, [value]) for key, value in node_labels.items()),
                # No available offering leaves these empty, which no pod can select (as in Karpenter).
                Requirement(wellknown.ZONE, False, {offering.zone for offering in available}),
                Requirement(
                    wellknown.CAPACITY_TYPE, False, {offering.capacity_type for offering in available}
                ),
                *nodeclass_requirements(settings),
            ]
        )
        return InstanceType(
            name=self.name,
            requirements=requirements,
            offerings=offerings,
            capacity=self.capacity_resources(settings),
            overhead=self.node_overhead(settings),
        )


def _entries(raw: Any) -> list[Any]:
    if isinstance(raw, dict) and set(raw) == {"instanceTypes"}:
        raw = raw["instanceTypes"]
    if not isinstance(raw, list):
        raise InvalidObjectError(KIND, "", ["expected a list of instance types, or {instanceTypes: [...]}"])
    if not raw:
        raise InvalidObjectError(KIND, "", ["the catalog has no instance types"])
    return raw


def parse_custom_catalog(raw: Any) -> list[CustomInstanceType]:
    """Validate a parsed `--catalog` file; raises `InvalidObjectError` listing every problem found."""
    entries: list[CustomInstanceType] = []
    problems: list[str] = []
    names: dict[str, int] = {}
    for index, entry in enumerate(_entries(raw)):
        if not isinstance(entry, dict):
            problems.append(f"instanceTypes[{index}]: expected a mapping with name, capacity and offerings")
            continue
        name = entry.get("name")
        where = f"instanceTypes[{index}]" + (f" ({name})" if isinstance(name, str) and name else "")
        try:
            parsed = CustomInstanceType.model_validate(entry)
        except ValidationError as error:
            problems.extend(f"{where}: {problem}" for problem in problems_of(error))
            continue
        if parsed.name in names:
            problems.append(f"{where}: name repeats instanceTypes[{names[parsed.name]}]")
        names.setdefault(parsed.name, index)
        entries.append(parsed)
    if problems:
        raise InvalidObjectError(KIND, "", problems)
    return entries


def catalog_instance_types(
    entries: Collection[CustomInstanceType],
    settings: NodeClassSettings = DEFAULT_SETTINGS,
    unavailable: Collection[tuple[str, str, str]] = frozenset(),
) -> list[InstanceType]:
    """The instance types of a parsed catalog that an AKSNodeClass with these settings can launch (the rules
    the Azure catalogs go through, `nodeclass_filter_reason`), sorted by name."""
    blocked = frozenset(unavailable)
    return sorted(
        (
            entry.instance_type(blocked, settings)
            for entry in entries
            if nodeclass_filter_reason(entry.traits(), settings) is None
        ),
        key=lambda instance_type: instance_type.name,
    )
