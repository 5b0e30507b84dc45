"""A NodeClaim lifecycle whose launch goes wrong, on the real dev server and control plane against the emulated
AKS: a launch Azure refuses as invalid, a launch that does not finish within the launch timeout, and a NodeClaim
deleted while its launch is in flight. Each leaves the truth on the NodeClaim (its Launched condition and a
warning), in the lifecycle's result, and nothing behind in Azure or Kubernetes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from activities.azure.provider import AzureCloudProvider
from core import labels, summaries
from core.api.nodeclaim import NodeClaim
from core.messages import DeletionRequested, LifecycleInput, Phase, TerminationReason
from simulator.arm import Fault
from simulator.arm.faults import FaultAction
from tests.cluster import events, eventually
from tests.workflows.conftest import (
    FAST,
    INSTANCE_TYPE,
    System,
    assert_fell_back,
    deployment,
    fresh_name,
    in_phase,
    offering,
    pinned,
    planned_claim,
    start_input,
)
from workers.explain import explain
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import ProvisionerWorkflow

SLOW = 60.0
"""How long a test waits for a whole launch and plan on a loaded machine."""


def invalid_parameter(**filters: Any) -> Fault:
    """VM creates Azure answers 400 `InvalidParameter` (a request no retry mends, as an image the size cannot
    boot)."""
    return Fault(
        action=FaultAction.REJECT,
        code="InvalidParameter",
        method="PUT",
        resource="virtualMachines",
        **filters,
    )


async def launch_error_shown(system: System, name: str, message: str) -> None:
    """The deleted NodeClaim says Launched=False with the error, and carries the AKS provider's warning."""
    deleted = await eventually(lambda: deleted_claim(system, name), what=f"{name} deleted")
    launched = deleted.status.condition("Launched")
    assert launched is not None
    assert (launched.status, launched.reason, launched.message) == ("False", "LaunchFailed", message)
    [on_claim] = await events(system.kube, "AsyncProvisioningError", {name})
    assert (on_claim["type"], on_claim["note"]) == ("Warning", f"Failed to register: {message}")


async def created_claims(system: System) -> list[str]:
    return [event.name for event in system.events if event.kind == "NodeClaim" and event.type == "ADDED"]


async def nics(system: System) -> list[str]:
    assert isinstance(system.cloud, AzureCloudProvider)
    return [nic.name or "" for nic in await system.cloud.list_nics()]


async def test_an_invalid_launch_is_launched_false_with_warnings_and_its_pods_go_elsewhere(
    system: System,
) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 1)
    await system.aks.add_fault(invalid_parameter(vm_size=INSTANCE_TYPE, times=1))
    provisioner = await system.start_provisioner(pods)

    first = (await eventually(lambda: created_claims(system), what="a NodeClaim"))[0]
    result = await asyncio.wait_for((await system.nodeclaim_workflow(first)).result(), SLOW)

    assert (result.phase, result.termination_reason) == (Phase.FAILED, TerminationReason.LAUNCH_FAILED)
    [failure] = result.launch_failures
    assert (failure.instance_type, failure.capacity_type, failure.kind) == (
        INSTANCE_TYPE,
        "on-demand",
        "Invalid",
    )
    assert failure.message.startswith("InvalidParameter: "), failure.message
    assert result.reason == summaries.launch_error(failure)
    await launch_error_shown(system, first, failure.message)
    [on_pool] = await events(system.kube, "AsyncProvisioningError", {"default"})
    assert (on_pool["type"], on_pool["regarding"]["kind"]) == ("Warning", "NodePool")
    assert on_pool["note"] == f"NodeClaim {first} event: Failed to register: {failure.message}"
    story = await explain(system.client, "nodeclaim", first)
    assert story.failure == f"Launched=False (LaunchFailed): {failure.message}"
    assert story.removal is not None
    assert (story.removal.cause, story.removal.termination_reason) == (result.reason, "LaunchFailed")
    [attempt] = story.launches
    assert not attempt.launched and attempt.error.endswith(failure.message), attempt
    unavailable = await provisioner.query(ProvisionerWorkflow.unavailable_offerings)
    assert [(u.instance_type, u.zone, u.capacity_type, u.reason, u.nodeclass) for u in unavailable] == [
        (INSTANCE_TYPE, failure.zone, "on-demand", "Invalid", "default")
    ], "ruled out for the NodeClaim's AKSNodeClass alone"

    # Planned again at once, elsewhere: the failed offering is not chosen again.
    [pod] = await eventually(lambda: system.running("pinned", 1), timeout=SLOW, what="the pod running")
    second = await system.claim_of(pod.spec.node_name or "")
    assert second != first
    claim = await system.nodeclaim(second)
    assert claim is not None and claim.labels[labels.ZONE] != failure.zone
    assert [instance.name for instance in await system.cloud.list()] == [second]
    assert await nics(system) == [f"aks-{second}"], "the refused launch's NIC is gone"


async def test_a_nodeclaim_not_launched_within_the_launch_timeout_is_deleted(system: System) -> None:
    await system.apply_examples()
    # The VM's create never finishes.
    await system.aks.add_fault(Fault.slow(polls=10**9, method="PUT", resource="virtualMachines"))
    claim = planned_claim(fresh_name("stuck"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim, FAST.model_copy(update={"launch_timeout_seconds": 3}))

    result = await asyncio.wait_for(lifecycle.result(), SLOW)

    assert (result.phase, result.termination_reason) == (Phase.FAILED, TerminationReason.LAUNCH_TIMEOUT)
    assert result.reason.startswith("launch timeout (3s) expired: no instance was launched"), result.reason
    deleted = await eventually(lambda: deleted_claim(system, claim.name), what=f"{claim.name} deleted")
    launched = deleted.status.condition("Launched")
    assert launched is not None and (launched.status, launched.reason) == ("False", "LaunchTimeout")
    [event] = await events(system.kube, "LaunchTimeout", {claim.name})
    assert event["type"] == "Warning"
    await system.aks.clear_faults()
    await eventually(lambda: system.gone(claim.name), what="the half-made VM deleted")
    assert await eventually(lambda: _none_left(system), what="its NIC deleted")


async def _none_left(system: System) -> bool:
    return not await nics(system)


async def test_a_nodeclaim_deleted_during_its_launch_leaves_no_node_vm_or_nic(system: System) -> None:
    """No controller runs here, so the lifecycle never hears of the Node: what it deletes, it found itself."""
    await system.apply_examples()
    # The NIC's create is throttled for a few seconds: the NodeClaim is deleted while its launch is under way.
    await system.aks.add_fault(
        Fault.throttle(retry_after=1.0, method="PUT", resource="networkInterfaces", times=3)
    )
    # The VM's delete fails until the test has seen its Node join: the Node registers after the NodeClaim was
    # deleted, once the lifecycle has stopped waiting for one.
    await system.aks.add_fault(Fault.transient(500, method="DELETE", resource="virtualMachines"))
    claim = planned_claim(fresh_name("deleted"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim)
    await eventually(lambda: _nic_requested(system), what="the launch under way")
    await system.kube.delete_nodeclaim(claim.name)
    await lifecycle.signal(NodeClaimWorkflow.delete, DeletionRequested(by="nodeclaim deleted"))

    node = f"aks-{claim.name}"
    await eventually(lambda: system.node(node), timeout=SLOW, what="the VM's Node registered")
    status = await eventually(lambda: in_phase(lifecycle, Phase.TERMINATING), what="terminating")
    assert status.provider_id, "the launch ran to its end"
    await system.aks.clear_faults()
    result = await asyncio.wait_for(lifecycle.result(), SLOW)

    assert (result.phase, result.termination_reason) == (
        Phase.TERMINATED,
        TerminationReason.NODECLAIM_DELETED,
    )
    assert await system.gone(claim.name, node)
    assert await nics(system) == []
    assert await system.kube.list_nodes() == []
    story = await explain(system.client, "nodeclaim", claim.name)
    assert story.removal is not None
    assert [step.what for step in story.removal.steps] == [
        "instance deleted",
        f"node {node} deleted (it joined after all)",
        "NodeClaim deleted (finalizer removed)",
    ]


async def _nic_requested(system: System) -> bool:
    return (await system.aks.counters()).requests["PUT networkInterfaces"] > 0


async def deleted_claim(system: System, name: str) -> Any:
    return system.deleted_claim(name)


async def test_a_launch_retried_after_its_nodeclaim_was_deleted_makes_no_vm(system: System) -> None:
    """A launch attempt that runs after the NodeClaim's deletion (a retry, or one that outlived its lifecycle's
    wait) looks first, and makes nothing: no VM is made for a NodeClaim being deleted, or made again after its
    termination deleted it."""
    await system.apply_examples()
    # Azure refuses the VM's create (500, so the launch is retried) until the NodeClaim is deleted.
    await system.aks.add_fault(Fault.transient(500, method="PUT", resource="virtualMachines"))
    claim = planned_claim(fresh_name("retried"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim)
    # Once an attempt has failed (it says so on the NodeClaim), the NodeClaim goes, then the fault: every attempt
    # that looked before the deletion meets the fault.
    await eventually(lambda: _launch_failing(system, claim.name), timeout=SLOW, what="an attempt failed")
    await system.kube.delete_nodeclaim(claim.name)  # no controller: the lifecycle hears of it from its launch
    await system.aks.clear_faults()

    result = await asyncio.wait_for(lifecycle.result(), SLOW)

    assert (result.phase, result.termination_reason) == (
        Phase.TERMINATED,
        TerminationReason.NODECLAIM_DELETED,
    )
    assert (await system.aks.counters()).vms_created == 0
    assert await system.gone(claim.name)
    assert await eventually(lambda: _none_left(system), what="its NIC deleted")


async def _launch_failing(system: System, name: str) -> bool:
    claim = await system.nodeclaim(name)
    launched = claim.status.condition("Launched") if claim is not None else None
    return launched is not None and (launched.status, launched.reason) == ("Unknown", "LaunchFailed")


# --- a VM create that fails after the launch returned ---------------------------------------------------


CREATING = FAST.model_copy(update={"registration_ttl_seconds": SLOW})
"""Lifecycle settings whose registration waits out a VM's create (the launch no longer does)."""


def impatient(system: System) -> None:
    """The worker's launches return as soon as Azure accepts a VM's create, as the AKS provider's do."""
    assert isinstance(system.cloud, AzureCloudProvider)
    system.cloud.settings = system.cloud.settings.model_copy(update={"create_wait": timedelta(0)})


def launched_zones(system: System, name: str) -> list[str]:
    """The zones the NodeClaim was Launched=True in, in the order its watch events showed them."""
    zones: list[str] = []
    for event in system.events:
        if event.kind != "NodeClaim" or event.name != name:
            continue
        claim = NodeClaim.parse(event.object)
        launched = claim.status.condition("Launched")
        zone = claim.labels.get(labels.ZONE, "")
        # (The status and the labels are two writes: a watch event may show the one before the other.)
        if launched is not None and launched.status == "True" and zone and zones[-1:] != [zone]:
            zones.append(zone)
    return zones


def registered_with_launch(system: System, name: str) -> bool:
    """Whether the NodeClaim's first Launched=True came with Registered=Unknown (NodeNotFound) in the same write."""
    for event in system.events:
        if event.kind != "NodeClaim" or event.name != name:
            continue
        status = NodeClaim.parse(event.object).status
        launched, registered = status.condition("Launched"), status.condition("Registered")
        if launched is not None and launched.status == "True":
            return registered is not None and (registered.status, registered.reason) == (
                "Unknown",
                "NodeNotFound",
            )
    return False


async def test_a_vm_create_that_fails_for_capacity_after_its_launch_returned_moves_on_to_the_next_offering(
    system: System,
) -> None:
    impatient(system)
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 1)
    # Accepted, then failed: found by registration's look, not by the launch.
    await system.aks.add_fault(Fault.fail_late("ZonalAllocationFailed", vm_size=INSTANCE_TYPE, times=1))
    provisioner = await system.start_provisioner(pods, lifecycle=CREATING)

    name = (await eventually(lambda: created_claims(system), what="a NodeClaim"))[0]
    lifecycle = await system.nodeclaim_workflow(name)
    candidates = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim.launch_candidates
    first, second = candidates[0], candidates[1]
    status = await eventually(
        lambda: in_phase(lifecycle, Phase.RUNNING), timeout=SLOW, what=f"{name} running"
    )

    await assert_fell_back(system, name, status, first, second)
    assert launched_zones(system, name) == [first.zone, second.zone], (
        "Launched once the first create was accepted"
    )
    assert registered_with_launch(system, name), "the launch wrote Registered=Unknown with Launched=True"
    counters = await system.aks.counters()
    assert (counters.requests["PUT virtualMachines"], counters.vms_created, counters.vms_deleted) == (2, 2, 1)
    assert await created_claims(system) == [name], "the same NodeClaim, launched again"
    unavailable = await provisioner.query(ProvisionerWorkflow.unavailable_offerings)
    assert [(u.instance_type, u.zone, u.capacity_type, u.reason) for u in unavailable] == [
        (first.instance_type, first.zone, first.capacity_type, "InsufficientCapacity")
    ]
    [pod] = await eventually(lambda: system.running("pinned", 1), timeout=SLOW, what="the pod running")
    assert pod.spec.node_name == status.node
    assert [instance.name for instance in await system.cloud.list()] == [name]
    story = await explain(system.client, "nodeclaim", name)
    assert [(a.zone, a.launched) for a in story.launches] == [(first.zone, False), (second.zone, True)]
    assert story.launches[0].error.startswith(
        "its VM's create failed after the launch returned: InsufficientCapacity: ZonalAllocationFailed"
    ), story.launches[0].error


async def test_a_vm_create_that_fails_otherwise_after_its_launch_returned_deletes_the_nodeclaim(
    system: System,
) -> None:
    """As the AKS provider does with a create that fails after `Create` returned: a warning, the VM and NIC
    deleted, the NodeClaim deleted, and its pods planned again."""
    impatient(system)
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 1)
    await system.aks.add_fault(Fault.fail_late("InternalExecutionError", vm_size=INSTANCE_TYPE, times=1))
    await system.start_provisioner(pods, lifecycle=CREATING)

    first = (await eventually(lambda: created_claims(system), what="a NodeClaim"))[0]
    result = await asyncio.wait_for((await system.nodeclaim_workflow(first)).result(), SLOW)

    assert (result.phase, result.termination_reason) == (Phase.FAILED, TerminationReason.LAUNCH_FAILED)
    [failure] = result.launch_failures
    assert failure.message.startswith("InternalExecutionError: "), failure.message
    await launch_error_shown(system, first, failure.message)
    [pod] = await eventually(lambda: system.running("pinned", 1), timeout=SLOW, what="the pod running")
    second = await system.claim_of(pod.spec.node_name or "")
    assert second != first
    assert [instance.name for instance in await system.cloud.list()] == [second]
    assert await nics(system) == [f"aks-{second}"], "the failed VM's NIC is gone"
