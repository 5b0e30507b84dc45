"""Garbage collection against the emulated AKS (its ARM through the real SDK clients, its VMs joining the real
control plane as Nodes): leaked VMs and NICs go, NodeClaims whose VM is gone go, and nothing else is touched:
not young VMs, not VMs a NodeClaim claims or is still launching, not untagged resources, not other clusters'
resources."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.azure.bootstrap import ClusterBootstrap
from activities.azure.garbage import GarbageCollectionActivities
from activities.azure.names import NodeNames, provider_id
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.provider import AzureCloudProvider
from activities.azure.vm import CLUSTER_TAG, NODEPOOL_TAG
from core import labels
from core.api.kube import Node, is_node_ready
from core.api.nodeclaim import NodeClaim
from core.errors import InsufficientCapacityError
from core.messages import TERMINATION_REASON_ANNOTATION, GarbageCollectionInput, GarbageCollectionResult
from simulator.arm import Fault, ResourceType, RunningArm
from tests.activities.azure.test_provider import launch
from tests.cluster import apply_examples
from tests.workflows.conftest import eventually
from workers.controlplane.run import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from workers.simulated_aks import SimulatedAks

GRACE = timedelta(minutes=5)
FAILING = "Standard_D8s_v3"
"""A size whose launch fails, and stays ruled out in the unavailable-offerings cache."""
ZONE = "eastus-1"
JOIN_TIMEOUT = 30.0
"""How long a booted VM's node may take to join and be made Ready (instant boots; TLS bootstrap and kwok)."""


@dataclass
class World:
    aks: SimulatedAks
    provider: AzureCloudProvider

    @property
    def arm(self) -> RunningArm:
        return self.aks.emulated.arm

    @property
    def cluster(self) -> str:
        return self.provider.settings.cluster_name

    async def collect(self, age: timedelta = timedelta(minutes=10)) -> GarbageCollectionResult:
        """One pass, as if it ran `age` after now (so everything made in the test is that old)."""
        moment = datetime.now(UTC) + age
        activities = GarbageCollectionActivities(self.aks.kube, self.provider, clock=lambda: moment)
        request = GarbageCollectionInput(cluster=self.cluster, grace_seconds=GRACE.total_seconds())
        return await ActivityEnvironment().run(activities.collect_garbage, request)

    async def launch(self, nodeclaim: str, instance_type: str = "Standard_D4s_v3") -> None:
        await self.provider.create(launch(nodeclaim, instance_type, zone=ZONE))

    def vm_exists(self, nodeclaim: str) -> bool:
        return self.arm.state.vm(NodeNames.of(nodeclaim).vm) is not None

    def nic_exists(self, nodeclaim: str) -> bool:
        return self.arm.state.nic(NodeNames.of(nodeclaim).nic) is not None

    def provider_id(self, nodeclaim: str) -> str:
        settings = self.provider.settings
        return provider_id(settings.subscription_id, settings.resource_group, NodeNames.of(nodeclaim).vm)

    def retag(self, resource_type: ResourceType, nodeclaim: str, **changes: str | None) -> None:
        name = f"aks-{nodeclaim}"
        resource = self.arm.state.resource(resource_type, name)
        assert resource is not None
        tags = {**resource.tags, **changes}
        self.arm.state.update_tags(
            resource_type,
            self.provider.settings.resource_group,
            name,
            {"tags": {k: v for k, v in tags.items() if v is not None}},
        )

    async def nodeclaim(self, name: str, launched: bool = True, finalizers: Sequence[str] = ()) -> NodeClaim:
        """A NodeClaim in the cluster; launched, it has the providerID of the VM its name gives."""
        claim = NodeClaim.parse(
            {
                "metadata": {
                    "name": name,
                    "labels": {labels.NODEPOOL: "default"},
                    "finalizers": list(finalizers),
                },
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
        created = await self.aks.kube.create_nodeclaim(claim)
        if launched:

            def launch(claim: NodeClaim) -> None:
                claim.status.provider_id = self.provider_id(name)

            changed = await self.aks.kube.change_nodeclaim_status(name, launch)
            assert changed is not None
            created = changed
        return created

    async def joined(self, nodeclaim: str) -> Node:
        """The Node the VM's agent registered by TLS bootstrap, once kwok has made it Ready."""

        async def ready() -> Node | None:
            node = await self.aks.kube.find_node_by_provider_id(self.provider_id(nodeclaim))
            return node if node is not None and is_node_ready(node) else None

        return await eventually(ready, timeout=JOIN_TIMEOUT, what=f"the node of VM aks-{nodeclaim} Ready")

    async def stopped(self, nodeclaim: str) -> Node:
        """The VM's Node, once it is no longer Ready (its VM is gone: the kubelet stopped posting status)."""

        async def not_ready() -> Node | None:
            node = await self.aks.kube.find_node_by_provider_id(self.provider_id(nodeclaim))
            return node if node is not None and not is_node_ready(node) else None

        return await eventually(
            not_ready, timeout=JOIN_TIMEOUT, what=f"the node of VM aks-{nodeclaim} stopped"
        )

    async def node_without_vm(self, nodeclaim: str) -> Node:
        """A Node with the providerID of a VM that is not in the cloud list, kept Ready by kwok."""
        await self.aks.kube.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": f"aks-{nodeclaim}",
                        "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
                    },
                    "spec": {"providerID": self.provider_id(nodeclaim)},
                }
            ]
        )
        return await self.joined(nodeclaim)

    async def claim_gone(self, name: str) -> bool:
        claim = await self.aks.kube.get_nodeclaim(name)
        return claim is None or claim.metadata.deletion_timestamp is not None


def garbage_log(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "activities.azure.garbage"]


@pytest.fixture
async def world(aks: SimulatedAks) -> AsyncIterator[World]:
    """The provider on the emulated ARM, with the worker's settings and custom data (so its VMs join the
    cluster), and SDK clients that retry quickly."""
    await apply_examples(aks.kube)
    arm = aks.emulated.arm
    settings = aks.azure.settings
    options = arm.client_options()
    async with (
        ComputeManagementClient(arm.credential(), settings.subscription_id, **options) as compute,
        NetworkManagementClient(arm.credential(), settings.subscription_id, **options) as network,
    ):
        bootstrap = ClusterBootstrap(aks.kube, settings.bootstrap_token_secret, settings.cluster_endpoint)
        provider = AzureCloudProvider(
            compute, network, settings, bootstrap, node_class=ClusterNodeClasses(aks.kube)
        )
        yield World(aks, provider)


async def test_a_leaked_vm_goes_with_its_nic_and_node_once_past_the_grace_period(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    await world.launch("leaked-1")
    node = await world.joined("leaked-1")

    with caplog.at_level(logging.INFO, logger="activities.azure.garbage"):
        result = await world.collect()

    assert (result.instances, result.nodes, result.nics, result.failures) == (
        ["leaked-1"],
        [node.metadata.name],
        [],
        [],
    )
    assert not world.vm_exists("leaked-1") and not world.nic_exists("leaked-1")
    assert await world.aks.kube.get_node(node.metadata.name) is None
    logged = [(r.getMessage(), getattr(r, "karpenter", None)) for r in garbage_log(caplog)]
    assert logged == [
        ("garbage collected cloudprovider instance", {"providerID": world.provider_id("leaked-1")}),
        (
            "garbage collected node",
            {"providerID": world.provider_id("leaked-1"), "Node": node.metadata.name},
        ),
    ]


async def test_a_vm_younger_than_the_grace_period_stays(world: World) -> None:
    await world.launch("young-1")
    result = await world.collect(age=GRACE - timedelta(seconds=30))
    assert result == GarbageCollectionResult()
    assert world.vm_exists("young-1") and world.nic_exists("young-1")


async def test_vms_claimed_by_a_nodeclaim_stay_even_while_it_is_still_launching(world: World) -> None:
    await world.launch("claimed-1")
    await world.nodeclaim("claimed-1")
    await world.launch("launching-1")
    await world.nodeclaim("launching-1", launched=False)

    assert await world.collect() == GarbageCollectionResult()
    assert world.vm_exists("claimed-1") and world.vm_exists("launching-1")


async def test_untagged_and_other_clusters_resources_are_never_touched(world: World) -> None:
    await world.launch("untagged-1")
    world.retag(ResourceType.VIRTUAL_MACHINE, "untagged-1", **{NODEPOOL_TAG: None})
    world.retag(ResourceType.NETWORK_INTERFACE, "untagged-1", **{NODEPOOL_TAG: None})
    await world.launch("foreign-1")
    world.retag(ResourceType.VIRTUAL_MACHINE, "foreign-1", **{CLUSTER_TAG: "another-cluster"})
    world.retag(ResourceType.NETWORK_INTERFACE, "foreign-1", **{CLUSTER_TAG: "another-cluster"})

    result = await world.collect()
    # Their Nodes (joined to this cluster, no NodeClaim) are collected once past the grace, as orphan Nodes are;
    # the Azure resources are not this cluster's and stay.
    assert (result.instances, result.nics, result.failures) == ([], [], [])
    assert all(world.vm_exists(name) and world.nic_exists(name) for name in ("untagged-1", "foreign-1"))


async def test_a_nic_a_failed_launch_left_behind_goes_alone(world: World) -> None:
    emulator = world.aks.emulator
    await emulator.add_fault(Fault.sku_not_available(vm_size=FAILING, times=1))
    await emulator.add_fault(Fault.transient(500, method="DELETE", resource="networkInterfaces", times=4))
    with pytest.raises(InsufficientCapacityError):
        await world.launch("failed-1", FAILING)
    assert world.nic_exists("failed-1") and not world.vm_exists("failed-1")
    await world.launch("running-1")
    await world.nodeclaim("running-1")

    result = await world.collect()

    assert (result.nics, result.instances) == (["aks-failed-1"], [])
    assert not world.nic_exists("failed-1")
    assert world.nic_exists("running-1") and world.vm_exists("running-1")


async def test_a_nic_of_an_existing_nodeclaim_stays_though_it_has_no_vm_yet(world: World) -> None:
    emulator = world.aks.emulator
    await emulator.add_fault(Fault.sku_not_available(vm_size=FAILING, times=1))
    await emulator.add_fault(Fault.transient(500, method="DELETE", resource="networkInterfaces", times=4))
    with pytest.raises(InsufficientCapacityError):
        await world.launch("retrying-1", FAILING)
    await world.nodeclaim("retrying-1", launched=False)

    assert await world.collect() == GarbageCollectionResult()
    assert world.nic_exists("retrying-1")


async def test_a_launched_nodeclaim_whose_vm_is_gone_is_deleted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # vanished-1's VM joined, then was deleted outside its lifecycle: its node stopped and is not Ready.
    await world.launch("vanished-1")
    # With its lifecycle's finalizer, as the lifecycle would remove it after terminating.
    gone = await world.nodeclaim("vanished-1", finalizers=[labels.TERMINATION_FINALIZER])
    await world.joined("vanished-1")
    await world.provider.delete("vanished-1")
    assert not world.vm_exists("vanished-1")
    await world.stopped("vanished-1")
    # ready-node-1's VM is not in the cloud list, but its Node is Ready: not collected.
    await world.nodeclaim("ready-node-1")
    await world.node_without_vm("ready-node-1")
    await world.nodeclaim("not-launched-1", launched=False)

    with caplog.at_level(logging.INFO, logger="activities.azure.garbage"):
        result = await world.collect()

    assert result.nodeclaims == ["vanished-1"]
    assert await world.claim_gone("vanished-1")
    # The NodeClaim says why it is being deleted, for the controller to tell its lifecycle.
    deleting = await world.aks.kube.get_nodeclaim("vanished-1")
    assert deleting is not None and deleting.metadata.annotations[TERMINATION_REASON_ANNOTATION] == (
        "GarbageCollected"
    )
    await world.aks.kube.patch_nodeclaim_metadata(
        "vanished-1", remove_finalizers=[labels.TERMINATION_FINALIZER]
    )
    assert not await world.claim_gone("ready-node-1") and not await world.claim_gone("not-launched-1")
    [record] = garbage_log(caplog)
    assert record.getMessage() == "garbage collecting nodeclaim with no cloudprovider representation"
    assert getattr(record, "karpenter", None) == {
        "NodeClaim": "vanished-1",
        "provider-id": gone.provider_id,
        "nodepool": "default",
    }


async def test_a_failed_deletion_is_reported_and_the_others_still_go(world: World) -> None:
    await world.launch("stuck-1")
    await world.launch("leaked-2")
    await world.aks.emulator.add_fault(
        Fault.transient(500, method="DELETE", resource="virtualMachines", name="aks-stuck-1")
    )

    result = await world.collect()

    assert result.instances == ["leaked-2"]
    assert len(result.failures) == 1 and "aks-stuck-1" in result.failures[0]
    assert world.vm_exists("stuck-1") and not world.vm_exists("leaked-2")


async def test_a_request_for_another_cluster_is_refused_before_anything_is_read(world: World) -> None:
    await world.launch("leaked-3")
    activities = GarbageCollectionActivities(world.aks.kube, world.provider)
    with pytest.raises(ApplicationError, match=r"GarbageCollectionInput\.cluster 'elsewhere'") as raised:
        await ActivityEnvironment().run(
            activities.collect_garbage, GarbageCollectionInput(cluster="elsewhere")
        )
    assert raised.value.non_retryable
    assert world.vm_exists("leaked-3")


def bare_node(name: str, provider: str, node_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node kwok keeps Ready, with our termination finalizer, and no VM behind it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels or {},
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "finalizers": [labels.TERMINATION_FINALIZER],
        },
        "spec": {"providerID": provider},
    }


async def test_a_node_of_ours_without_a_nodeclaim_goes_once_past_the_grace_period(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    kube = world.aks.kube
    await kube.apply(
        [
            bare_node("pool-orphan", "kwok://pool-orphan", {labels.NODEPOOL: "default"}),
            bare_node("aks-vm-orphan", world.provider_id("vm-orphan")),
            bare_node("pool-claimed", "kwok://pool-claimed", {labels.NODEPOOL: "default"}),
            bare_node("foreign", "kwok://foreign", {"kubernetes.io/os": "linux"}),
        ]
    )
    claimed = await world.nodeclaim("claimed-2", launched=False)

    def registered(claim: NodeClaim) -> None:
        claim.status.node_name = "pool-claimed"

    await kube.change_nodeclaim_status(claimed.name, registered)

    assert await world.collect(age=GRACE - timedelta(seconds=30)) == GarbageCollectionResult()

    with caplog.at_level(logging.INFO, logger="activities.azure.garbage"):
        result = await world.collect()

    assert (result.nodes, result.instances, result.failures) == (["aks-vm-orphan", "pool-orphan"], [], [])
    # Deleted, and the finalizer released (no lifecycle is left to do it): gone.
    assert await kube.get_node("pool-orphan") is None and await kube.get_node("aks-vm-orphan") is None
    assert await kube.get_node("pool-claimed") is not None and await kube.get_node("foreign") is not None
    logged = sorted(getattr(r, "karpenter", {}).get("Node", "") for r in garbage_log(caplog))
    assert logged == ["aks-vm-orphan", "pool-orphan"]
    for name in ("pool-claimed", "foreign"):
        await kube.patch_node(name, remove_finalizers=[labels.TERMINATION_FINALIZER])
