"""The simulated Azure compute: idempotent creates, AKS provider IDs and tags, boot and delete delays,
injected faults as the typed errors of `core.errors`, and counters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.cloudprovider import InstanceState
from core.errors import (
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    QuotaExceededError,
    ThrottledError,
)
from simulator.compute import Compute, ComputeSettings, Fault, FaultType, Operation, shipped_instance_types
from tests.simulator.conftest import FakeClock, launch_request

TYPES = shipped_instance_types("eastus")


def compute(clock: FakeClock | None = None, seed: int = 0, boot: float = 0.0, delete: float = 0.0) -> Compute:
    settings = ComputeSettings(boot_delay=timedelta(seconds=boot), delete_delay=timedelta(seconds=delete))
    return Compute(settings, TYPES, seed=seed, clock=clock or FakeClock())


def test_creating_a_name_twice_returns_the_first_instance_and_makes_no_second() -> None:
    cloud = compute()
    first = cloud.create(launch_request("default-a"))
    again = cloud.create(launch_request("default-a", instance_type="Standard_D8s_v5"))

    assert again == first and again.instance_type == "Standard_D4s_v5"
    assert cloud.counters.creates_attempted == 2
    assert cloud.counters.instances_created == 1
    assert [instance.name for instance in cloud.list()] == ["default-a"]


def test_an_instance_has_the_aks_provider_id_and_the_cluster_tags() -> None:
    cloud = compute()
    instance = cloud.create(launch_request("default-a", tags={"team": "blue"}))

    assert instance.provider_id == (
        "azure:///subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
        "mc_nodewright_nodewright_eastus/providers/Microsoft.Compute/virtualMachines/default-a"
    )
    assert instance.tags == {
        "team": "blue",
        "karpenter.azure.com_cluster": "nodewright",
        "karpenter.sh_nodepool": "default",
        "compute.aks.billing": "linux",
    }
    assert (instance.zone, instance.capacity_type, instance.state) == (
        "eastus-1",
        "on-demand",
        InstanceState.RUNNING,
    )
    assert cloud.get("default-a") == instance


def test_boot_and_delete_take_their_delays() -> None:
    clock = FakeClock()
    cloud = compute(clock, boot=2.0, delete=3.0)
    created = cloud.create(launch_request("default-a"))
    assert created.state == InstanceState.CREATING
    assert cloud.advance(clock.advance(1.0)) == clock.now + 1.0

    cloud.advance(clock.advance(1.0))
    assert cloud.get("default-a").state == InstanceState.RUNNING

    cloud.delete("default-a")
    cloud.delete("default-a")
    assert cloud.get("default-a").state == InstanceState.DELETING
    cloud.advance(clock.advance(2.9))
    assert [instance.name for instance in cloud.list()] == ["default-a"]
    cloud.advance(clock.advance(0.1))
    assert cloud.list() == []
    assert (cloud.counters.deletes_attempted, cloud.counters.instances_deleted) == (2, 1)
    with pytest.raises(NotFoundError):
        cloud.delete("default-a")
    with pytest.raises(NotFoundError):
        cloud.get("default-a")


def test_a_capacity_fault_rules_out_exactly_its_offering() -> None:
    cloud = compute()
    cloud.add_fault(
        Fault(type=FaultType.INSUFFICIENT_CAPACITY, instance_type="Standard_D4s_v5", zone="eastus-1")
    )

    with pytest.raises(InsufficientCapacityError) as raised:
        cloud.create(launch_request("default-a"))
    assert raised.value.offering == Offering("Standard_D4s_v5", "eastus-1", "on-demand")
    assert raised.value.code == "SkuNotAvailable"
    assert cloud.create(launch_request("default-a", zone="eastus-2")).zone == "eastus-2"
    assert cloud.counters.instances_created == 1


def test_a_fault_fires_as_many_times_as_it_is_told_and_is_then_gone() -> None:
    cloud = compute()
    fault = cloud.add_fault(Fault(type=FaultType.QUOTA_EXCEEDED, scope="regional", times=2))
    assert fault.id == "f1" and cloud.faults() == [fault]

    for name in ("a", "b"):
        with pytest.raises(QuotaExceededError) as raised:
            cloud.create(launch_request(name, capacity_type="spot"))
        assert raised.value.scope == "regional"
        assert raised.value.offering.capacity_type == "spot"
    cloud.create(launch_request("c"))
    assert cloud.faults() == []


def test_throttling_says_when_to_retry_and_applies_to_the_operations_it_names() -> None:
    cloud = compute()
    cloud.create(launch_request("default-a"))
    cloud.add_fault(
        Fault(
            type=FaultType.THROTTLED,
            operations=[Operation.GET, Operation.LIST],
            retry_after_seconds=7,
            times=2,
        )
    )

    with pytest.raises(ThrottledError) as raised:
        cloud.get("default-a")
    assert raised.value.retry_after_seconds == 7
    cloud.create(launch_request("default-b"))
    with pytest.raises(ThrottledError):
        cloud.list()
    assert len(cloud.list()) == 2


def test_a_never_register_fault_marks_the_vm() -> None:
    cloud = compute()
    cloud.add_fault(Fault(type=FaultType.NEVER_REGISTER, name="default-b"))
    cloud.create(launch_request("default-a"))
    cloud.create(launch_request("default-b"))
    assert [(machine.instance.name, machine.registers) for machine in cloud.machines()] == [
        ("default-a", True),
        ("default-b", False),
    ]


def test_requests_the_catalog_cannot_serve_are_refused() -> None:
    cloud = compute()
    with pytest.raises(InvalidError, match="Standard_Nope"):
        cloud.create(launch_request(instance_type="Standard_Nope"))
    with pytest.raises(InvalidError, match="no on-demand offering in zone 'mars-1'"):
        cloud.create(launch_request(zone="mars-1"))
    no_spot = next(
        it.name
        for it in TYPES.values()
        if any(o.capacity_type == "spot" and not o.available for o in it.offerings)
    )
    with pytest.raises(InsufficientCapacityError):
        cloud.create(launch_request(instance_type=no_spot, zone="0", capacity_type="spot"))
    assert cloud.counters.instances_created == 0


def test_probabilistic_faults_hit_the_same_calls_under_the_same_seed() -> None:
    def outcomes(seed: int) -> list[bool]:
        cloud = compute(seed=seed)
        cloud.add_fault(Fault(type=FaultType.INSUFFICIENT_CAPACITY, probability=0.5))
        hits = []
        for index in range(40):
            try:
                cloud.create(launch_request(f"n{index}"))
                hits.append(False)
            except InsufficientCapacityError:
                hits.append(True)
        return hits

    assert outcomes(3) == outcomes(3)
    assert outcomes(3) != outcomes(4)
    assert 5 < sum(outcomes(3)) < 35
