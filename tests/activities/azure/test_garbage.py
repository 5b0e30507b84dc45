"""Garbage collection against the ARM emulator (real SDK clients) and the simulated cluster: leaked VMs and NICs
go, NodeClaims whose VM is gone go, and nothing else is touched: not young VMs, not VMs a NodeClaim claims or is
still launching, not untagged resources, not other clusters' resources."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.azure.garbage import GarbageCollectionActivities
from activities.azure.names import provider_id
from activities.azure.provider import AzureCloudProvider
from activities.azure.vm import CLUSTER_TAG, NODEPOOL_TAG
from core import labels
from core.api.nodeclaim import NodeClaim
from core.errors import InsufficientCapacityError
from core.messages import GarbageCollectionInput, GarbageCollectionResult
from simulator.arm import Fault, ResourceType, RunningArm, serve_arm
from simulator.client import SimulatorClient
from simulator.server import SimulatorSettings, serve
from tests.activities.azure.test_provider import (
    CLUSTER,
    GROUP,
    REGION,
    SUBSCRIPTION,
    fixed_bootstrap,
    launch,
    settings,
)

GRACE = timedelta(minutes=5)
FAILING = "Standard_D8s_v3"
"""A size whose launch fails, and stays ruled out in the unavailable-offerings cache."""


@dataclass
class World:
    arm: RunningArm
    provider: AzureCloudProvider
    sim: SimulatorClient

    async def collect(self, age: timedelta = timedelta(minutes=10)) -> GarbageCollectionResult:
        """One pass, as if it ran `age` after now (so everything made in the test is that old)."""
        moment = datetime.now(UTC) + age
        activities = GarbageCollectionActivities(self.sim, self.provider, clock=lambda: moment)
        request = GarbageCollectionInput(cluster=CLUSTER, grace_seconds=GRACE.total_seconds())
        return await ActivityEnvironment().run(activities.collect_garbage, request)

    def vm_exists(self, nodeclaim: str) -> bool:
        return self.arm.state.vm(f"aks-{nodeclaim}") is not None

    def nic_exists(self, nodeclaim: str) -> bool:
        return self.arm.state.nic(f"aks-{nodeclaim}") is not None

    def retag(self, resource_type: ResourceType, nodeclaim: str, **changes: str | None) -> None:
        resource = self.arm.state.resource(resource_type, f"aks-{nodeclaim}")
        assert resource is not None
        tags = {**resource.tags, **changes}
        self.arm.state.update_tags(
            resource_type,
            GROUP,
            f"aks-{nodeclaim}",
            {"tags": {k: v for k, v in tags.items() if v is not None}},
        )

    async def nodeclaim(self, name: str, launched: bool = True) -> NodeClaim:
        """A NodeClaim in the cluster; launched, it has the providerID of the VM its name gives."""
        claim = NodeClaim.parse(
            {
                "metadata": {"name": name, "labels": {labels.NODEPOOL: "default"}},
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                },
            }
        )
        created = await self.sim.create_nodeclaim(claim)
        if launched:
            created.status.provider_id = provider_id(SUBSCRIPTION, GROUP, f"aks-{name}")
            created = await self.sim.update_nodeclaim_status(created)
        return created

    async def node(self, name: str, ready: bool) -> None:
        await self.sim.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name},
                    "spec": {"providerID": provider_id(SUBSCRIPTION, GROUP, f"aks-{name}")},
                    "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
                }
            ]
        )

    async def claim_gone(self, name: str) -> bool:
        claim = await self.sim.get_nodeclaim(name)
        return claim is None or claim.metadata.deletion_timestamp is not None


def azure_clients(arm: RunningArm, **options: Any) -> tuple[ComputeManagementClient, NetworkManagementClient]:
    merged = arm.client_options(**options)
    return (
        ComputeManagementClient(arm.credential(), SUBSCRIPTION, **merged),
        NetworkManagementClient(arm.credential(), SUBSCRIPTION, **merged),
    )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with (
        serve_arm(REGION, SUBSCRIPTION, resource_group=GROUP) as arm,
        serve(SimulatorSettings.instant(seed=5)) as url,
        SimulatorClient(url) as sim,
    ):
        compute, network = azure_clients(arm)
        async with compute, network:
            yield World(arm, AzureCloudProvider(compute, network, settings(), fixed_bootstrap), sim)


async def test_a_leaked_vm_goes_with_its_nic_and_node_once_past_the_grace_period(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    instance = await world.provider.create(launch("leaked-1"))
    await world.node("leaked-1", ready=True)

    with caplog.at_level(logging.INFO, logger="activities.azure.garbage"):
        result = await world.collect()

    assert (result.instances, result.nodes, result.nics, result.failures) == (
        ["leaked-1"],
        ["leaked-1"],
        [],
        [],
    )
    assert not world.vm_exists("leaked-1") and not world.nic_exists("leaked-1")
    assert await world.sim.get_node("leaked-1") is None
    logged = [(r.getMessage(), getattr(r, "karpenter", None)) for r in caplog.records]
    assert logged == [
        ("garbage collected cloudprovider instance", {"providerID": instance.provider_id}),
        ("garbage collected node", {"providerID": instance.provider_id, "Node": "leaked-1"}),
    ]


async def test_a_vm_younger_than_the_grace_period_stays(world: World) -> None:
    await world.provider.create(launch("young-1"))
    result = await world.collect(age=GRACE - timedelta(seconds=30))
    assert result == GarbageCollectionResult()
    assert world.vm_exists("young-1") and world.nic_exists("young-1")


async def test_vms_claimed_by_a_nodeclaim_stay_even_while_it_is_still_launching(world: World) -> None:
    await world.provider.create(launch("claimed-1"))
    await world.nodeclaim("claimed-1")
    await world.provider.create(launch("launching-1"))
    await world.nodeclaim("launching-1", launched=False)

    assert await world.collect() == GarbageCollectionResult()
    assert world.vm_exists("claimed-1") and world.vm_exists("launching-1")


async def test_untagged_and_other_clusters_resources_are_never_touched(world: World) -> None:
    await world.provider.create(launch("untagged-1"))
    world.retag(ResourceType.VIRTUAL_MACHINE, "untagged-1", **{NODEPOOL_TAG: None})
    world.retag(ResourceType.NETWORK_INTERFACE, "untagged-1", **{NODEPOOL_TAG: None})
    await world.provider.create(launch("foreign-1"))
    world.retag(ResourceType.VIRTUAL_MACHINE, "foreign-1", **{CLUSTER_TAG: "another-cluster"})
    world.retag(ResourceType.NETWORK_INTERFACE, "foreign-1", **{CLUSTER_TAG: "another-cluster"})

    assert await world.collect() == GarbageCollectionResult()
    assert all(world.vm_exists(name) and world.nic_exists(name) for name in ("untagged-1", "foreign-1"))


async def test_a_nic_a_failed_launch_left_behind_goes_alone(world: World) -> None:
    state = world.arm.state
    state.add_fault(Fault.sku_not_available(vm_size=FAILING, times=1))
    state.add_fault(Fault.transient(500, method="DELETE", resource="networkInterfaces", times=4))
    with pytest.raises(InsufficientCapacityError):
        await world.provider.create(launch("failed-1", FAILING))
    assert world.nic_exists("failed-1") and not world.vm_exists("failed-1")
    await world.provider.create(launch("running-1"))
    await world.nodeclaim("running-1")

    result = await world.collect()

    assert (result.nics, result.instances) == (["aks-failed-1"], [])
    assert not world.nic_exists("failed-1")
    assert world.nic_exists("running-1") and world.vm_exists("running-1")


async def test_a_nic_of_an_existing_nodeclaim_stays_though_it_has_no_vm_yet(world: World) -> None:
    state = world.arm.state
    state.add_fault(Fault.sku_not_available(vm_size=FAILING, times=1))
    state.add_fault(Fault.transient(500, method="DELETE", resource="networkInterfaces", times=4))
    with pytest.raises(InsufficientCapacityError):
        await world.provider.create(launch("retrying-1", FAILING))
    await world.nodeclaim("retrying-1", launched=False)

    assert await world.collect() == GarbageCollectionResult()
    assert world.nic_exists("retrying-1")


async def test_a_launched_nodeclaim_whose_vm_is_gone_is_deleted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    gone = await world.nodeclaim("vanished-1")
    await world.node("vanished-1", ready=False)
    await world.nodeclaim("ready-node-1")
    await world.node("ready-node-1", ready=True)
    await world.nodeclaim("not-launched-1", launched=False)

    with caplog.at_level(logging.INFO, logger="activities.azure.garbage"):
        result = await world.collect()

    assert result.nodeclaims == ["vanished-1"]
    assert await world.claim_gone("vanished-1")
    assert not await world.claim_gone("ready-node-1") and not await world.claim_gone("not-launched-1")
    [record] = caplog.records
    assert record.getMessage() == "garbage collecting nodeclaim with no cloudprovider representation"
    assert getattr(record, "karpenter", None) == {
        "NodeClaim": "vanished-1",
        "provider-id": gone.provider_id,
        "nodepool": "default",
    }


async def test_a_failed_deletion_is_reported_and_the_others_still_go(world: World) -> None:
    await world.provider.create(launch("stuck-1"))
    await world.provider.create(launch("leaked-2"))
    world.arm.state.add_fault(
        Fault.transient(500, method="DELETE", resource="virtualMachines", name="aks-stuck-1")
    )

    result = await world.collect()

    assert result.instances == ["leaked-2"]
    assert len(result.failures) == 1 and "aks-stuck-1" in result.failures[0]
    assert world.vm_exists("stuck-1") and not world.vm_exists("leaked-2")


async def test_a_request_for_another_cluster_is_refused_before_anything_is_read(world: World) -> None:
    await world.provider.create(launch("leaked-3"))
    activities = GarbageCollectionActivities(world.sim, world.provider)
    with pytest.raises(ApplicationError, match=r"GarbageCollectionInput\.cluster 'elsewhere'") as raised:
        await ActivityEnvironment().run(
            activities.collect_garbage, GarbageCollectionInput(cluster="elsewhere")
        )
    assert raised.value.non_retryable
    assert world.vm_exists("leaked-3")
