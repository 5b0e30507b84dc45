"""The NodeClaim lifecycle on the real dev server against the simulated AKS: launch with capacity fallback,
registration timeout, drain with PodDisruptionBudgets and terminationGracePeriod, and both deletion paths."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import WorkflowHandle

from core import labels, summaries
from core.api.kube import Pod, is_daemonset_pod
from core.api.nodeclaim import NodeClaim
from core.cluster import WatchEvent
from core.messages import (
    ActivityName,
    DrainInput,
    DrainResult,
    LifecycleInput,
    LifecycleStatus,
    NodeEvent,
    Phase,
    TerminationReason,
)
from core.summaries import markdown_text
from simulator.arm import Fault
from tests.cluster import events
from tests.workflows.conftest import (
    FAST,
    INSTANCE_TYPE,
    TIMER,
    System,
    activity_calls,
    assert_fell_back,
    condition,
    current_details,
    decode,
    deployment,
    eventually,
    fresh_name,
    in_phase,
    offering,
    pdb,
    pinned,
    planned_claim,
    signals,
    start_input,
    step_summaries,
)
from workflows.nodeclaim import CURRENT, NodeClaimWorkflow
from workflows.provisioner import ProvisionerWorkflow

# --- launch ----------------------------------------------------------------------------------------------


async def only_nodeclaim(system: System) -> str:
    claims = await eventually(system.nodeclaims, what="a NodeClaim")
    assert len(claims) == 1, [claim.name for claim in claims]
    return claims[0].name


async def test_capacity_error_falls_back_to_the_next_offering_and_tells_the_provisioner(
    system: System,
) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 1)
    # Whichever offering is tried first has no capacity in its zone; the fault is then used up.
    await system.aks.add_fault(Fault.fail_late("ZonalAllocationFailed", vm_size=INSTANCE_TYPE, times=1))
    provisioner = await system.start_provisioner(pods)

    name = await only_nodeclaim(system)
    lifecycle = await system.nodeclaim_workflow(name)
    candidates = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim.launch_candidates
    first, second = candidates[0], candidates[1]
    status = await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), what=f"{name} running")

    await assert_fell_back(system, name, status, first, second)
    counters = await system.aks.counters()
    puts = counters.requests["PUT virtualMachines"]
    assert (puts, counters.vms_created, counters.vms_deleted, counters.faults_fired) == (2, 2, 1, 1), (
        "the failed VM was made, then cleaned up"
    )
    [instance] = await system.cloud.list()
    assert (instance.name, instance.zone) == (name, second.zone)
    claim = await system.nodeclaim(name)
    assert claim is not None
    assert condition(claim, "Launched") == ("True", "Launched")
    assert claim.labels[labels.ZONE] == second.zone
    unavailable = await provisioner.query(ProvisionerWorkflow.unavailable_offerings)
    assert [(u.instance_type, u.zone, u.capacity_type, u.reason) for u in unavailable] == [
        (first.instance_type, first.zone, first.capacity_type, "InsufficientCapacity")
    ]
    [pod] = await eventually(lambda: system.running("pinned", 1), what="the pod running")
    assert pod.spec.node_name == status.node
    # The launched NodeClaim carries every label its instance type and offering pin, as its Node does.
    assert status.node is not None
    node = await system.node(status.node)
    assert node is not None
    pinned_labels = (
        labels.ARCH,
        labels.OS,
        labels.SKU_FAMILY,
        labels.SKU_CPU,
        labels.INSTANCE_TYPE,
        labels.ZONE,
    )
    assert {key: claim.labels.get(key) for key in pinned_labels} == {
        key: node.metadata.labels.get(key) for key in pinned_labels
    }
    assert claim.labels[labels.SKU_FAMILY] and claim.labels[labels.ARCH] == "amd64"
    # Registration made the NodeClaim the Node's owner, blocking the owner's deletion, as Karpenter does.
    owners = [
        (o.api_version, o.kind, o.name, o.uid, o.block_owner_deletion) for o in node.metadata.owner_references
    ]
    assert owners == [("karpenter.sh/v1", "NodeClaim", name, claim.metadata.uid, True)] and claim.metadata.uid


async def test_when_every_offering_fails_the_nodeclaim_fails_and_is_deleted(system: System) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 1)
    await system.aks.add_fault(Fault.sku_not_available(INSTANCE_TYPE))
    provisioner = await system.start_provisioner(pods)

    name = (await eventually(lambda: _created_claims(system), what="a NodeClaim"))[0]
    lifecycle = await system.nodeclaim_workflow(name)
    candidates = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim.launch_candidates
    result = await asyncio.wait_for(lifecycle.result(), 20)

    tried = [(c.instance_type, c.zone, c.capacity_type) for c in candidates]
    assert len(tried) == 4  # on-demand in eastus-1..3 and without a zone
    assert result.phase is Phase.FAILED
    assert [(f.instance_type, f.zone, f.capacity_type) for f in result.launch_failures] == tried
    assert result.termination_reason is TerminationReason.LAUNCH_FAILED
    assert result.reason.startswith(
        f"launch failed: no offering could be launched ({INSTANCE_TYPE} on-demand eastus-1: InsufficientCapacity; "
    ), result.reason
    assert result.reason.endswith(f"): {result.launch_failures[-1].message}")
    deleted = await eventually(lambda: _final(system, name), what="the NodeClaim deleted")
    assert condition(deleted, "Launched") == ("False", "LaunchFailed")
    assert await system.nodeclaim(name) is None
    assert await system.cloud.list() == []
    # A warning for each offering that failed (naming it), and one as the NodeClaim is given up.
    warnings = await events(system.kube, "InsufficientCapacityError", {name})
    assert {event["type"] for event in warnings} == {"Warning"}
    notes = sorted(event["note"] for event in warnings)
    given_up = f"NodeClaim {name} event: {summaries.truncated(result.reason)}"
    tried_notes = sorted(f"NodeClaim {name} event: {summaries.offering_text(c)}: " for c in candidates)
    assert given_up in notes, notes
    notes.remove(given_up)
    assert [note[: len(prefix)] for note, prefix in zip(notes, tried_notes, strict=True)] == tried_notes, (
        notes
    )
    counters = await system.aks.counters()
    puts = counters.requests["PUT virtualMachines"]
    # SkuNotAvailable rules the size out in every zone (or for regional placement) at once, as the AKS
    # provider's cache does: one PUT for the zonal offerings, one for the regional one.
    assert (puts, counters.faults_fired, counters.vms_created) == (2, 2, 0)
    unavailable = await provisioner.query(ProvisionerWorkflow.unavailable_offerings)
    assert sorted((u.instance_type, u.zone, u.capacity_type) for u in unavailable) == sorted(tried)
    # Its pods are planned again at once (the provisioner's first signal started it, the second is the lifecycle's).
    await eventually(lambda: _pods_pending(provisioner, 2), what="the pods planned again")


async def _pods_pending(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return sum(name == "pods_pending" for name, _ in await signals(handle)) >= count


async def _created_claims(system: System) -> list[str]:
    return [event.name for event in system.events if event.kind == "NodeClaim" and event.type == "ADDED"]


async def _final(system: System, name: str) -> NodeClaim | None:
    return system.deleted_claim(name)


# --- registration ----------------------------------------------------------------------------------------


async def test_registration_timeout_deletes_the_instance_and_the_nodeclaim(system: System) -> None:
    await system.apply_examples()
    claim = planned_claim(fresh_name("unregistered"), [offering("eastus-1")])
    await system.aks.never_register(f"aks-{claim.name}")
    lifecycle = await system.start_nodeclaim(claim, FAST.model_copy(update={"registration_ttl_seconds": 2}))

    result = await asyncio.wait_for(lifecycle.result(), 20)

    assert result.phase is Phase.FAILED
    assert result.termination_reason is TerminationReason.REGISTRATION_TIMEOUT
    assert result.provider_id and result.reason == (
        f"registration TTL (2s) expired: no Node registered with providerID {result.provider_id}"
    )
    deleted = await eventually(lambda: _final(system, claim.name), what="the NodeClaim deleted")
    assert condition(deleted, "Launched") == ("True", "Launched")
    assert condition(deleted, "Registered") == ("False", "RegistrationTimeout")
    counters = await system.aks.counters()
    assert (counters.vms_created, counters.vms_deleted) == (1, 1)
    assert await system.gone(claim.name)
    assert await system.kube.list_nodes() == []


async def test_a_lifecycle_no_signal_wakes_looks_less_and_less_often_until_one_does(system: System) -> None:
    """The poll is a backstop for a lost signal: a Node that does not come costs a look after 1, 2, 4, 4 ... s
    (poll_seconds 1, poll_max_seconds 4), not one every second, and a signal starts again from the shortest."""
    await system.apply_examples()
    claim = planned_claim(fresh_name("unregistered"), [offering("eastus-1")])
    await system.aks.never_register(f"aks-{claim.name}")
    settings = FAST.model_copy(update={"registration_ttl_seconds": 16, "poll_max_seconds": 4})
    lifecycle = await system.start_nodeclaim(claim, settings)

    async def waits() -> list[str]:
        return [
            summary.split(" for ")[0]
            for kind, summary in await step_summaries(system.client, lifecycle)
            if kind == TIMER
        ]

    await eventually(
        lambda: _waited(waits, ["wait 1s", "wait 2s", "wait 4s"]), timeout=15, what="two doublings"
    )
    await lifecycle.signal(NodeClaimWorkflow.node_event, NodeEvent(node=f"aks-{claim.name}"))
    result = await asyncio.wait_for(lifecycle.result(), 30)

    assert result.termination_reason is TerminationReason.REGISTRATION_TIMEOUT
    polls = await waits()
    woken = polls.index("wait 4s") + 1
    assert polls[:woken] == ["wait 1s", "wait 2s", "wait 4s"], polls
    assert polls[woken : woken + 2] == ["wait 1s", "wait 2s"], polls
    looks = [call.name for call in await activity_calls(lifecycle)].count(ActivityName.REGISTER_NODECLAIM)
    assert looks <= 10, f"{looks} looks in a 16 s TTL: the waits did not grow"


async def _waited(waits: Callable[[], Any], first: list[str]) -> bool:
    return (await waits())[: len(first)] == first


# --- termination -----------------------------------------------------------------------------------------


async def serving(system: System, app: str, replicas: int, **nodepool_template_spec: object) -> list[Pod]:
    """The examples and a deployment applied, the controller running, and the deployment's pods running on
    nodes our workflows launched."""
    await system.apply_examples(**nodepool_template_spec)
    await system.kube.apply([deployment(app, replicas)])
    system.start_controller()
    return await eventually(lambda: system.running(app, replicas), timeout=15, what=f"{app} running")


async def drains(system: System, lifecycle: WorkflowHandle[Any, Any]) -> list[tuple[DrainInput, DrainResult]]:
    """The drain passes the lifecycle made so far, with their results."""
    passes = []
    for call in await activity_calls(lifecycle):
        if call.name == ActivityName.DRAIN_NODE and call.result is not None:
            passes.append(
                (
                    await decode(system.client, call.input, DrainInput),
                    await decode(system.client, call.result, DrainResult),
                )
            )
    return passes


async def test_drain_waits_for_the_pod_disruption_budget(system: System) -> None:
    pods = await serving(system, "guarded", 2)
    await system.kube.apply([pdb("guarded", min_available=2)])
    node = pods[0].spec.node_name or ""
    on_node = {pod.metadata.name: pod.metadata.uid for pod in pods if pod.spec.node_name == node}
    daemon = [pod.metadata.name for pod in await system.kube.list_pods_on_node(node) if is_daemonset_pod(pod)]
    claim = await system.claim_of(node)
    lifecycle = await system.nodeclaim_workflow(claim)

    await system.kube.delete_node(node)
    blocked = await eventually(
        lambda: _blocked_passes(system, lifecycle, 2), timeout=10, what="two blocked drain passes"
    )

    for _, result in blocked:
        assert set(result.blocked) == {f"default/{name}" for name in on_node}
        assert result.evicted == []
        assert all("disruption budget guarded needs 2" in reason for reason in result.blocked.values()), (
            result
        )
    assert "eviction(s) blocked" in await current_details(lifecycle)
    assert (await lifecycle.query(NodeClaimWorkflow.status)).phase is Phase.TERMINATING
    still = {pod.metadata.name: pod.metadata.uid for pod in await system.kube.list_pods_on_node(node)}
    assert on_node.items() <= still.items()
    assert set(daemon) <= set(still)  # DaemonSet pods go after the others
    assert claim in await system.instance_names()
    current = await system.node(node)
    assert current is not None and current.metadata.deletion_timestamp is not None
    assert any(taint.key == labels.DISRUPTED_TAINT for taint in current.spec.taints)

    await system.kube.apply([pdb("guarded", min_available=0)])

    assert await eventually(
        lambda: system.gone(claim, node), timeout=15, what="node, instance, NodeClaim gone"
    )
    evicted = {key for _, result in await drains(system, lifecycle) for key in result.evicted}
    assert {f"default/{name}" for name in on_node} <= evicted
    assert (await asyncio.wait_for(lifecycle.result(), 10)).phase is Phase.TERMINATED


async def _blocked_passes(
    system: System, lifecycle: WorkflowHandle[Any, Any], count: int
) -> list[tuple[DrainInput, DrainResult]]:
    passes = await drains(system, lifecycle)
    return passes if len(passes) >= count and all(result.blocked for _, result in passes) else []


async def test_termination_grace_period_forces_the_drain_past_the_budget(system: System) -> None:
    pods = await serving(system, "guarded", 2, terminationGracePeriod="3s")
    await system.kube.apply([pdb("guarded", min_available=2)])
    node = pods[0].spec.node_name or ""
    on_node = {pod.metadata.uid for pod in pods if pod.spec.node_name == node}
    claim = await system.claim_of(node)
    lifecycle = await system.nodeclaim_workflow(claim)
    planned = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim
    assert planned.termination_grace_period_seconds == 3

    await system.kube.delete_node(node)

    assert await eventually(
        lambda: system.gone(claim, node), timeout=15, what="node, instance, NodeClaim gone"
    )
    passes = await drains(system, lifecycle)
    forced = [request.force for request, _ in passes]
    # The budget is honoured until the grace period runs out, then every pass deletes what is left.
    assert forced[0] is False and forced[-1] is True and forced == sorted(forced), forced
    assert all(result.blocked for request, result in passes if not request.force)
    remaining = {pod.metadata.uid for pod in await system.pods("guarded")}
    assert not on_node & remaining
    budget = await system.kube.get_object("PodDisruptionBudget", "guarded", "default")
    assert budget is not None and budget["spec"]["minAvailable"] == 2
    assert (await asyncio.wait_for(lifecycle.result(), 10)).phase is Phase.TERMINATED


KARPENTER_ORDER = [
    ActivityName.BEGIN_TERMINATION,
    ActivityName.DRAIN_NODE,
    ActivityName.AWAIT_VOLUME_DETACHMENT,
    ActivityName.DELETE_INSTANCE,
    ActivityName.DELETE_NODE,
    ActivityName.DELETE_NODECLAIM,
]


def _first(system: System, found: Callable[[WatchEvent], bool], what: str) -> int:
    """The position in the watch stream of the first event `found` accepts."""
    for index, event in enumerate(system.events):
        if found(event):
            return index
    raise AssertionError(f"the watch never saw {what}")


def _tainted(node: str) -> Callable[[WatchEvent], bool]:
    def found(event: WatchEvent) -> bool:
        taints = event.object.get("spec", {}).get("taints", [])
        return (
            event.kind == "Node"
            and event.name == node
            and any(taint["key"] == labels.DISRUPTED_TAINT for taint in taints)
        )

    return found


def _deleted(kind: str, name: str) -> Callable[[WatchEvent], bool]:
    return lambda event: event.kind == kind and event.name == name and event.type == "DELETED"


async def assert_terminated_in_order(
    system: System, claim: str, node: str, pods: list[Pod], daemon: list[str]
) -> LifecycleStatus:
    """Node, instance and NodeClaim are gone, and it happened in Karpenter's order: taint, drain (ordinary
    pods before DaemonSet pods), instance, Node, and last the NodeClaim's finalizer. The workflow's history
    gives the order of its steps; the watch stream gives the order the cluster saw. The lifecycle's result."""
    lifecycle = await system.nodeclaim_workflow(claim)
    assert await eventually(
        lambda: system.gone(claim, node), timeout=15, what="node, instance, NodeClaim gone"
    )
    result = await asyncio.wait_for(lifecycle.result(), 10)
    assert result.phase is Phase.TERMINATED

    termination = [call.name for call in await activity_calls(lifecycle) if call.name in KARPENTER_ORDER]
    collapsed = [
        name for index, name in enumerate(termination) if index == 0 or termination[index - 1] != name
    ]
    assert collapsed == KARPENTER_ORDER

    tainted = _first(system, _tainted(node), f"{node} tainted")
    evicted = [_first(system, _deleted("Pod", pod.metadata.name), pod.metadata.name) for pod in pods]
    daemons = [
        index
        for index, event in enumerate(system.events)
        if event.kind == "Pod" and event.name in daemon and event.type == "DELETED"
    ]
    node_gone = _first(system, _deleted("Node", node), f"{node} deleted")
    claim_gone = _first(system, _deleted("NodeClaim", claim), f"NodeClaim {claim} deleted")
    # DaemonSet pods go last: evicted after the others when they do not tolerate the disrupted taint, or
    # left to go with the Node when they do (as Karpenter leaves them; kube-controller-manager's pod garbage
    # collector deletes them some time after their Node is gone).
    assert tainted < min(evicted) and all(max(evicted) < index for index in daemons)
    assert max(evicted) < node_gone < claim_gone
    return result


async def test_deleting_the_node_terminates_it_in_karpenter_order(system: System) -> None:
    pods = await serving(system, "web", 2)
    node = pods[0].spec.node_name or ""
    on_node = [pod for pod in pods if pod.spec.node_name == node]
    daemon = [pod.metadata.name for pod in await system.kube.list_pods_on_node(node) if is_daemonset_pod(pod)]
    assert daemon
    claim = await system.claim_of(node)

    await system.kube.delete_node(node)

    result = await assert_terminated_in_order(system, claim, node, on_node, daemon)
    assert (result.termination_reason, result.reason) == (
        TerminationReason.NODE_DELETED,
        f"Node {node} was deleted",
    )


async def test_deleting_the_nodeclaim_terminates_it_in_karpenter_order(system: System) -> None:
    pods = await serving(system, "web", 2)
    node = pods[0].spec.node_name or ""
    on_node = [pod for pod in pods if pod.spec.node_name == node]
    daemon = [pod.metadata.name for pod in await system.kube.list_pods_on_node(node) if is_daemonset_pod(pod)]

    claim = await system.claim_of(node)

    await system.kube.delete_nodeclaim(claim)

    result = await assert_terminated_in_order(system, claim, node, on_node, daemon)
    assert (result.termination_reason, result.reason) == (
        TerminationReason.NODECLAIM_DELETED,
        f"NodeClaim {claim} was deleted",
    )


# --- what the Temporal UI shows ------------------------------------------------------------------------------


async def test_the_lifecycle_and_its_steps_carry_summaries_for_the_temporal_ui(system: System) -> None:
    [pod] = await serving(system, "web", 1)
    node = pod.spec.node_name or ""
    claim = await system.claim_of(node)
    lifecycle = await system.nodeclaim_workflow(claim)
    planned = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim
    first = planned.launch_candidates[0]

    # The workflows as the UI lists them, started by the planning activity and the controller.
    described = await lifecycle.describe()
    assert await described.static_summary() == (
        f"{first.instance_type} {first.capacity_type} {first.zone} for 1 pod (NodePool default)"
    )
    details = await described.static_details() or ""
    assert (
        f"**Why:** {markdown_text(planned.reason)}" in details and f"`default/{pod.metadata.name}`" in details
    )
    assert "**Launch options, in order:**\n1. " in details
    provisioner = await system.provisioner().describe()
    assert await provisioner.static_summary() == f"provisioner for cluster {system.cluster}"

    await system.kube.delete_nodeclaim(claim)
    await asyncio.wait_for(lifecycle.result(), 15)
    assert await current_details(lifecycle) == f"Terminated: NodeClaim {claim} was deleted"

    steps = await step_summaries(system.client, lifecycle)
    assert all(summary for _, summary in steps), steps
    activities = [step for step in steps if step[0] != TIMER]
    collapsed = [step for index, step in enumerate(activities) if index == 0 or activities[index - 1] != step]
    assert collapsed == [
        (
            ActivityName.LAUNCH_NODECLAIM,
            f"launch {first.instance_type} in {first.zone} ({first.capacity_type})",
        ),
        (ActivityName.REGISTER_NODECLAIM, f"find the Node of VM {node}"),
        (ActivityName.INITIALIZE_NODECLAIM, f"check Node {node} is Ready and initialized"),
        (
            ActivityName.BEGIN_TERMINATION,
            f"mark NodeClaim {claim} deleting, taint {node} karpenter.sh/disrupted:NoSchedule",
        ),
        (ActivityName.DRAIN_NODE, f"drain {node}"),
        (ActivityName.AWAIT_VOLUME_DETACHMENT, f"wait for volumes to detach from {node}"),
        (ActivityName.DELETE_INSTANCE, f"delete VM {node} with its NIC and disk"),
        (ActivityName.DELETE_NODE, f"delete Node {node}"),
        (ActivityName.DELETE_NODECLAIM, f"delete NodeClaim {claim} (remove its finalizer)"),
    ]
    # Polls while the Node registers and initializes, expireAfter while it runs, and drain retries: each says
    # what it waits for.
    timers = [summary for kind, summary in steps if kind == TIMER]
    assert all(
        re.match(rf"wait \S+ for (the Node of VM {node} |Node {node}: )", summary)
        or summary.endswith(", then expire (expireAfter 720h)")
        or summary.startswith(f"wait 1s to drain {node} again (")
        for summary in timers
    ), timers
    assert any(summary.endswith("(expireAfter 720h)") for summary in timers), timers


async def test_a_new_lifecycle_records_one_patch_marker_however_many_patches_it_passes(
    system: System,
) -> None:
    """Launch, registration, initialization, the waits and the whole termination pass every patch the lifecycle
    has; started under `CURRENT`, its history holds that one marker (and one upsert of TemporalChangeVersion)
    instead of one of each per patch."""
    [pod] = await serving(system, "web", 1)
    claim = await system.claim_of(pod.spec.node_name or "")
    lifecycle = await system.nodeclaim_workflow(claim)
    await system.kube.delete_nodeclaim(claim)
    await asyncio.wait_for(lifecycle.result(), 15)

    history = await lifecycle.fetch_history()
    patches = [
        json.loads(event.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
        for event in history.events
        if event.event_type == HistoryEventType.EVENT_TYPE_MARKER_RECORDED
        and event.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert patches == [CURRENT]
    change_versions = [
        event
        for event in history.events
        if event.event_type == HistoryEventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "TemporalChangeVersion"
        in event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    assert len(change_versions) == 1
    steps = [name for name, _ in await step_summaries(system.client, lifecycle)]
    assert {ActivityName.REGISTER_NODECLAIM, ActivityName.AWAIT_VOLUME_DETACHMENT} <= set(steps), steps
