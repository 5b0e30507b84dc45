"""The controller against the simulated AKS and the dev server: it turns what it watches into signals (a
provisionable pod into a signal-with-start of the provisioner, a Node into a wake-up of its NodeClaim's
workflow, a deleted NodeClaim into a request to terminate) and decides nothing itself."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.kube import nodeclaim_object
from activities.planning import LIFECYCLE_ANNOTATION
from core import labels
from core.api.nodeclaim import NodeClaim
from core.cluster import ClusterAPI, WatchEvent
from core.cluster import EventType as WatchEventType
from core.messages import (
    TERMINATION_REASON_ANNOTATION,
    ActivityName,
    DeletionRequested,
    LifecycleInput,
    LifecycleSettings,
    NodeEvent,
    Phase,
    PlanResult,
    PodsPending,
    ProvisionerInput,
    TerminationReason,
)
from core.scheduling.nominations import NOMINATED_PODS_ANNOTATION, NOMINATION_WINDOW
from tests import builders
from tests.workflows.conftest import (
    FAST,
    System,
    activity_calls,
    claim_requirements,
    decode,
    deployment,
    eventually,
    example_manifests,
    fresh_name,
    in_phase,
    offering,
    planned_claim,
    running_system,
    signals,
    small_delays,
    start_input,
    started,
)
from tests.workflows.test_disruption import events_about
from workers.controller import Controller, deletion_requested
from workers.controller.adoption import ADOPTED, LifecycleAdoption
from workers.controlplane.run import ControlPlane
from workflows.nodeclaim import NodeClaimWorkflow

ONLY_SIGNALS = LifecycleSettings(registration_ttl_seconds=120, poll_seconds=60, drain_retry_seconds=1)
"""A lifecycle that would look for itself only once a minute: anything quicker was a signal's doing."""


async def signalled(
    system: System, handle: WorkflowHandle[Any, Any], name: str, kind: type[Any]
) -> list[Any]:
    """The arguments of every signal of this name the workflow received."""
    return [
        await decode(system.client, payloads, kind)
        for signal, payloads in await signals(handle)
        if signal == name
    ]


async def test_a_provisionable_pod_starts_the_provisioner_with_its_signal(system: System) -> None:
    system.start_controller()
    await system.apply_examples()

    await system.kube.apply([deployment("web", 2)])

    provisioner = await started(system.provisioner())
    web = sorted(f"default/{pod.metadata.name}" for pod in await system.pods("web"))
    received = await eventually(
        lambda: _pods_signalled(system, provisioner, web), what="the pods signalled to the provisioner"
    )
    assert received == web
    # Started by the controller, with the controller's settings, and its first event after the start is
    # the signal that started it.
    description = await provisioner.describe()
    assert (description.workflow_type, description.task_queue) == ("Provisioner", system.task_queue)
    assert await start_input(system.client, provisioner, ProvisionerInput) == system.provisioner_input()
    history = await provisioner.fetch_history()
    assert history.events[1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    await eventually(lambda: system.running("web", 2), timeout=60, what="web running")


async def test_pods_left_pending_by_a_nodepool_not_ready_yet_are_planned_again_once_it_is_ready(
    system: System,
) -> None:
    """A start: the AKSNodeClass has no status until the worker's first reconcile writes it, so the controller
    writes the NodePool Ready=False and the first plan leaves the pods pending ("no nodepools found", as
    Karpenter's provisioner ignores a NodePool that is not Ready). Once the NodePool is Ready, they get their
    NodeClaim at once, not at their next requeue (an hour away here)."""
    documents = [document for document in yaml.safe_load_all(example_manifests()) if document]
    [nodeclass] = [document for document in documents if document["kind"] == "AKSNodeClass"]
    status = nodeclass.pop("status")
    system.start_controller(requeue_seconds=3600)
    await system.kube.apply(yaml.safe_dump_all(documents))

    async def nodepool_ready() -> str | None:
        [pool] = await system.kube.list_objects("NodePool")
        ready = next(
            (c for c in (pool.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None
        )
        return ready["status"] if ready else None

    assert await eventually(nodepool_ready, what="NodePool default's Ready condition") == "False"
    await system.kube.apply([deployment("web", 1)])
    provisioner = await started(system.provisioner())

    async def first_plan() -> PlanResult | None:
        for call in await activity_calls(provisioner):
            if call.name == ActivityName.PLAN_PROVISIONING and call.result is not None:
                return await decode(system.client, call.result, PlanResult)
        return None

    plan = await eventually(first_plan, timeout=30, what="the first plan")
    assert plan.nodeclaims == [] and list(plan.unschedulable.values()) == [["no nodepools found"]]

    await system.kube.patch_nodeclass_status("default", status)  # what the worker's first reconcile writes
    [claim] = await eventually(system.nodeclaims, timeout=20, what="a NodeClaim for the pending pod")
    assert claim.labels[labels.NODEPOOL] == "default"
    await eventually(lambda: system.running("web", 1), timeout=20, what="web running")


async def _pods_signalled(system: System, handle: WorkflowHandle[Any, Any], wanted: list[str]) -> list[str]:
    pods = sorted(
        {
            pod
            for signal in await signalled(system, handle, "pods_pending", PodsPending)
            for pod in signal.pods
        }
    )
    return pods if pods == wanted else []


async def wakes_on_node_event(system: System, *, late: bool) -> None:
    """A NodeClaim whose lifecycle never polls in time registers and initializes: it looks right after launch,
    and the controller signals its Node's events while it waits (`late`: the Node is not there at that look, so
    at least one signal)."""
    system.start_controller()
    claim = planned_claim(fresh_name("woken"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim, ONLY_SIGNALS)

    status = await eventually(
        lambda: in_phase(lifecycle, Phase.RUNNING), timeout=10, what="registered, initialized"
    )

    assert status.node == f"aks-{claim.name}"  # the VM's name
    events = await signalled(system, lifecycle, "node_event", NodeEvent)
    assert all(event.node == status.node for event in events)
    assert events or not late
    # A look right after launch, and (if the Node was not there yet) one more after the controller's
    # signal: never a round of 60 s polls.
    calls = [call.name for call in await activity_calls(lifecycle)]
    assert 1 <= calls.count(ActivityName.REGISTER_NODECLAIM) <= 2


async def test_a_node_event_wakes_the_nodeclaim_workflow(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> None:
    # The kubelet registers a second after the VM runs: by then the controller knows the NodeClaim's providerID.
    async with running_system(
        temporal_env, task_queue, control_plane, small_delays(registration=1.5)
    ) as system:
        await wakes_on_node_event(system, late=True)


async def test_a_lifecycle_told_its_unregistered_node_went_terminates_at_once(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> None:
    """What the controller's signal for a Node deleted before registration does: the lifecycle, which would look
    again only after a minute and wait two for registration, ends at once and leaves nothing."""
    async with running_system(
        temporal_env, task_queue, control_plane, small_delays(registration=1.5)
    ) as system:
        claim = planned_claim(fresh_name("unregistered"), [offering("eastus-1")])
        lifecycle = await system.start_nodeclaim(claim, ONLY_SIGNALS)
        node = f"aks-{claim.name}"
        await eventually(lambda: system.node(node), timeout=30, what="the Node joined")
        status = await lifecycle.query(NodeClaimWorkflow.status)
        assert status.phase is Phase.REGISTERING, "its lifecycle has not looked again yet"
        await system.kube.delete_node(node)

        await lifecycle.signal(NodeClaimWorkflow.node_event, NodeEvent(node=node, deleting=True))

        result = await asyncio.wait_for(lifecycle.result(), 30)
        assert (result.phase, result.termination_reason) == (Phase.TERMINATED, TerminationReason.NODE_DELETED)
        assert await eventually(lambda: system.gone(claim.name, node), what="the VM, Node and NodeClaim gone")


async def test_a_node_that_registers_at_once_still_wakes_the_nodeclaim_workflow(system: System) -> None:
    # The Node appears (and turns Ready) before the NodeClaim's status carries the providerID the controller
    # maps Nodes by; the workflow must still get there without waiting for its poll.
    await wakes_on_node_event(system, late=False)


async def test_a_deleted_nodeclaim_gets_its_workflow_to_terminate(system: System) -> None:
    system.start_controller()
    claim = planned_claim(fresh_name("deleted"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim, FAST)
    await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), timeout=10, what="running")

    await system.kube.delete_nodeclaim(claim.name)

    result = await asyncio.wait_for(lifecycle.result(), 15)
    assert result.phase is Phase.TERMINATED
    requests = await signalled(system, lifecycle, "delete", DeletionRequested)
    assert requests and requests[0].by == "nodeclaim deleted"
    assert await system.gone(claim.name, f"aks-{claim.name}")


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({}, TerminationReason.NODECLAIM_DELETED),
        ({TERMINATION_REASON_ANNOTATION: "GarbageCollected"}, TerminationReason.GARBAGE_COLLECTED),
        ({TERMINATION_REASON_ANNOTATION: "SomethingNewer"}, TerminationReason.NODECLAIM_DELETED),
    ],
)
def test_a_deleted_nodeclaim_tells_its_lifecycle_why_when_its_deleter_said(
    annotations: dict[str, str], reason: TerminationReason
) -> None:
    claim = NodeClaim.parse(
        {
            "metadata": {"name": "default-abcde", "annotations": annotations},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            },
        }
    )
    assert deletion_requested(claim) == DeletionRequested(by="nodeclaim deleted", reason=reason)


def offline_controller(client: object = None, cluster: object = None, **options: Any) -> Controller:
    """A Controller of cluster "test" on task queue "unused", with no Temporal client and no API server unless
    given (fakes): what it does is read off its state."""
    return Controller(
        client=cast(Client, client),
        cluster=cast(ClusterAPI, cluster),
        provisioner=ProvisionerInput(cluster="test"),
        task_queue="unused",
        **options,
    )


def _watched(kind: str, manifest: dict[str, Any], version: int) -> WatchEvent:
    name = manifest["metadata"]["name"]
    return WatchEvent(
        type=WatchEventType.MODIFIED, kind=kind, name=name, resource_version=version, object=manifest
    )


async def test_the_requeue_leaves_pods_to_the_in_flight_nodeclaim_they_are_nominated_to() -> None:
    controller = offline_controller()
    web = [builders.pod(f"web-{index}", cpu="1") for index in range(2)]
    for version, pod in enumerate(web):
        await controller.handle(_watched("Pod", pod.model_dump(mode="json", by_alias=True), version))
    claim: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "annotations": {NOMINATED_PODS_ANNOTATION: "default/web-0"}},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        },
    }
    await controller.handle(_watched("NodeClaim", claim, 3))
    assert controller.requeued() == ["default/web-1"]

    # Initialized: kube-scheduler binds the pod now; if it has not within the window, it is planned again.
    initialized = datetime.now(UTC)
    claim["status"] = {
        "conditions": [
            {
                "type": "Initialized",
                "status": "True",
                "reason": "Initialized",
                "lastTransitionTime": initialized.isoformat().replace("+00:00", "Z"),
            }
        ]
    }
    await controller.handle(_watched("NodeClaim", claim, 4))
    assert controller.requeued(initialized) == ["default/web-1"]
    assert controller.requeued(initialized + NOMINATION_WINDOW) == ["default/web-0", "default/web-1"]


async def test_a_pending_pod_stops_being_provisionable_once_bound_without_being_parsed_again() -> None:
    controller = offline_controller()
    pending = builders.pod("web-0", cpu="1").model_dump(mode="json", by_alias=True)
    await controller.handle(_watched("Pod", pending, 1))
    assert controller.provisionable == {"default/web-0"}

    # Bound (by kube-scheduler), with a status nothing could parse: it is simply no longer pending.
    bound = {**pending, "spec": {**pending["spec"], "nodeName": "aks-default-abcde"}, "status": {"phase": 7}}
    await controller.handle(_watched("Pod", bound, 2))
    assert controller.provisionable == set()
    assert controller.requeued() == []


class Starts:
    """A Temporal client that only records the workflow starts (with their start signal) asked for."""

    def __init__(self) -> None:
        self.pods: list[list[str]] = []

    async def start_workflow(self, *args: Any, start_signal_args: list[Any], **kwargs: Any) -> None:
        self.pods.append(list(start_signal_args[0].pods))


async def test_the_requeue_leaves_pods_signalled_within_its_period_to_the_plan_making_their_nodeclaims() -> (
    None
):
    client = Starts()
    controller = offline_controller(client=client, requeue_seconds=10)
    web = [builders.pod(f"web-{index}", cpu="1") for index in range(2)]
    await controller.handle(_watched("Pod", web[0].model_dump(mode="json", by_alias=True), 1))
    await controller._signal_provisioner(["default/web-0"])
    await controller.handle(_watched("Pod", web[1].model_dump(mode="json", by_alias=True), 2))
    now = datetime.now(UTC)
    assert client.pods == [["default/web-0"]]
    assert controller.requeued(now) == ["default/web-1"], (
        "web-0 was just sent: its NodeClaims may be on the way"
    )
    assert controller.requeued(now + timedelta(seconds=10)) == ["default/web-0", "default/web-1"]


class Signals:
    """A Temporal client that only records the signals sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def get_workflow_handle(self, workflow_id: str) -> Any:
        sent = self.sent

        class Handle:
            async def signal(self, name: str, argument: Any) -> None:
                sent.append((workflow_id, name, argument))

        return Handle()


def _node(ready: bool, taints: list[str], heartbeat: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "aks-default-abcde", "annotations": {"heartbeat": heartbeat}},
        "spec": {
            "providerID": "azure:///vm/aks-default-abcde",
            "taints": [{"key": k, "effect": "NoSchedule"} for k in taints],
        },
        "status": {
            "allocatable": {"cpu": "2", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _launched_claim() -> dict[str, Any]:
    """A NodeClaim launched as VM aks-default-abcde, as the controller's watch shows it."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde"},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        },
        "status": {"providerID": "azure:///vm/aks-default-abcde"},
    }


def _conditions(**statuses: tuple[str, str]) -> list[dict[str, str]]:
    """NodeClaim conditions by type: (status, reason)."""
    return [
        {"type": kind, "status": status, "reason": reason, "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for kind, (status, reason) in statuses.items()
    ]


async def test_a_lifecycle_is_signalled_once_per_change_of_its_node_while_it_waits_on_it() -> None:
    client = Signals()
    # it asks the API server nothing: its watch tells it all
    controller = offline_controller(client=client)
    unregistered, not_ready = labels.UNREGISTERED_TAINT, "node.kubernetes.io/not-ready"
    claim = _launched_claim()
    versions = iter(range(1, 100))

    async def nodeclaim(**statuses: tuple[str, str]) -> None:
        status = {**claim["status"], "conditions": _conditions(**statuses)}
        await controller.handle(_watched("NodeClaim", {**claim, "status": status}, next(versions)))

    async def node(ready: bool, taints: list[str], heartbeat: str) -> None:
        await controller.handle(_watched("Node", _node(ready, taints, heartbeat), next(versions)))

    awaiting = ("Unknown", "AwaitingReconciliation")
    # The Node registers before the NodeClaim shows its providerID, and changes while the lifecycle, just
    # launched, has not looked for it yet: it will see the Node when it looks, so nothing is told.
    await node(False, [unregistered, not_ready, "startup"], "1")
    await nodeclaim(Launched=("True", "Launched"), Registered=awaiting, Initialized=awaiting)
    await node(False, [unregistered, not_ready, "startup"], "2")
    await controller.sent()
    assert client.sent == []
    # It looked before the Node was there and waits: the Node it missed is news now, once.
    await nodeclaim(
        Launched=("True", "Launched"), Registered=("Unknown", "NodeNotFound"), Initialized=awaiting
    )
    await nodeclaim(
        Launched=("True", "Launched"), Registered=("Unknown", "NodeNotFound"), Initialized=awaiting
    )
    # Registered, not yet looked at for initialization: the Node's changes wait for that look.
    await nodeclaim(Launched=("True", "Launched"), Registered=("True", "Registered"), Initialized=awaiting)
    await node(False, [not_ready, "startup"], "2")  # registration took our own taint off
    await node(True, [not_ready, "startup"], "2")
    await node(True, ["startup"], "3")  # Kubernetes' not-ready taint gone
    # It looked, saw the not-ready taint, and waits: the taint's going is news.
    waiting = {"Launched": ("True", "Launched"), "Registered": ("True", "Registered")}
    await nodeclaim(**waiting, Initialized=("Unknown", "KnownEphemeralTaintsExist"))
    await node(True, ["startup"], "4")  # a heartbeat: nothing to tell
    await node(True, [], "5")  # the startup taint gone
    # Once the NodeClaim is Initialized, only the Node's deletion is news.
    await nodeclaim(**waiting, Initialized=("True", "Initialized"))
    await node(False, [not_ready], "6")
    deleted = _node(False, [not_ready], "6")
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    await controller.handle(_watched("Node", deleted, next(versions)))

    await controller.sent()
    told = [(name, event.ready, event.taints, event.deleting) for _, name, event in client.sent]
    assert told == [
        ("node_event", False, [not_ready, "startup"], False),
        ("node_event", True, ["startup"], False),
        ("node_event", True, [], False),
        ("node_event", False, [not_ready], True),
    ]
    assert {workflow for workflow, _, _ in client.sent} == {"nodeclaim/default-abcde"}


async def test_a_lifecycle_that_starts_waiting_on_a_node_as_its_look_found_it_hears_only_of_the_change() -> (
    None
):
    client = Signals()
    controller = offline_controller(client=client)
    not_ready = "node.kubernetes.io/not-ready"
    claim = _launched_claim()
    registered = {"Launched": ("True", "Launched"), "Registered": ("True", "Registered")}
    await controller.handle(_watched("NodeClaim", claim, 1))
    await controller.handle(_watched("Node", _node(False, [not_ready], "1"), 2))
    # Its look found the Node not Ready, and so it still is: nothing to tell.
    status = {
        **claim["status"],
        "conditions": _conditions(**registered, Initialized=("Unknown", "NodeNotReady")),
    }
    await controller.handle(_watched("NodeClaim", {**claim, "status": status}, 3))
    await controller.handle(_watched("Node", _node(False, [not_ready], "2"), 4))  # a heartbeat
    await controller.sent()
    assert client.sent == []
    await controller.handle(_watched("Node", _node(True, [], "3"), 5))
    await controller.sent()
    assert [(event.ready, event.taints) for _, _, event in client.sent] == [(True, [])]


async def test_a_node_deleted_before_its_nodeclaim_registered_it_ends_the_lifecycle_at_once() -> None:
    client = Signals()
    controller = offline_controller(client=client)
    claim = _launched_claim()
    await controller.handle(_watched("NodeClaim", claim, 1))
    node = _node(False, [labels.UNREGISTERED_TAINT], "1")
    await controller.handle(_watched("Node", node, 2))
    # Deleted by hand before the lifecycle registered it: no finalizer held it, so the watch's only word of it
    # is its disappearance.
    await controller.handle(_watched("Node", node, 3).model_copy(update={"type": WatchEventType.DELETED}))
    await controller.sent()

    # Its lifecycle had not looked for the Node yet (nothing to tell then); its going ends the lifecycle.
    told = [(workflow, name, event.node, event.deleting) for workflow, name, event in client.sent]
    assert told == [("nodeclaim/default-abcde", "node_event", "aks-default-abcde", True)]

    # A registered NodeClaim's Node is deleted through its finalizer, or by the lifecycle itself: its vanishing
    # tells the lifecycle nothing new, and costs no signal.
    client.sent.clear()
    registered = [{"type": "Registered", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    again = {**claim, "metadata": {"name": "default-fghij"}}
    again["status"] = {"providerID": "azure:///vm/aks-default-fghij", "conditions": registered}
    await controller.handle(_watched("NodeClaim", again, 4))
    other = _node(True, [], "1")
    other["metadata"]["name"], other["spec"]["providerID"] = (
        "aks-default-fghij",
        "azure:///vm/aks-default-fghij",
    )
    await controller.handle(_watched("Node", other, 5))
    await controller.handle(_watched("Node", other, 6).model_copy(update={"type": WatchEventType.DELETED}))
    await controller.sent()
    assert client.sent == []


class StatusWrites:
    """A ClusterAPI that records AKSNodeClass status writes."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, dict[str, Any]]] = []

    async def patch_nodeclass_status(self, name: str, status: dict[str, Any]) -> None:
        self.writes.append((name, status))

    async def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> bool:
        """The drift hash stamps the controller also writes; not what this fake records."""
        return True

    async def list_objects(self, kind: str) -> list[Any]:
        return []


def _nodeclass(name: str, mode: str | None, state: str | None) -> dict[str, Any]:
    spec = builders.configured_nodeclass_spec()
    manifest: dict[str, Any] = {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": name},
        "spec": {"localDNS": {**spec["localDNS"], "mode": mode}} if mode else {},
    }
    if state:
        manifest["status"] = {"localDNSState": state}
    return manifest


async def test_the_controller_writes_the_localdns_state_of_each_aksnodeclass_when_it_differs() -> None:
    cluster = StatusWrites()
    controller = offline_controller(cluster=cluster)
    for version, (name, mode, state) in enumerate(
        [
            ("plain", None, None),
            ("required", "Required", None),
            ("preferred", "Preferred", None),
            ("written", "Required", "Enabled"),
            ("kept", "Preferred", "Enabled"),
        ]
    ):
        await controller.handle(_watched("AKSNodeClass", _nodeclass(name, mode, state), version))
    assert cluster.writes == [
        ("plain", {"localDNSState": "Disabled"}),
        ("required", {"localDNSState": "Enabled"}),
        ("preferred", {"localDNSState": "Disabled"}),
    ]


# --- a NodeClaim its plan did not start the lifecycle of ------------------------------------------------------


async def _orphan(system: System, prefix: str) -> str:
    """A NodeClaim created as a plan creates it (with its lifecycle input) whose lifecycle was never started, as
    when the plan's attempt is given up between the two."""
    claim = planned_claim(fresh_name(prefix), [offering("eastus-1")])
    request = LifecycleInput(cluster=system.cluster, nodeclaim=claim, settings=FAST)
    nodeclaim = nodeclaim_object(claim, "default", claim_requirements(claim))
    nodeclaim.metadata.annotations[LIFECYCLE_ANNOTATION] = request.model_dump_json()
    await system.kube.create_nodeclaim(nodeclaim)
    return claim.name


async def test_a_nodeclaim_whose_plan_stopped_before_its_lifecycle_gets_one(system: System) -> None:
    name = await _orphan(system, "orphan")
    system.start_controller(adoption_grace=0.5)

    lifecycle = await system.nodeclaim_workflow(name)
    status = await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), timeout=20, what="running")
    assert status.node == f"aks-{name}"
    [note] = await events_about(system, name, ADOPTED)
    assert note.startswith(f"Started the lifecycle of NodeClaim {name}")


async def test_a_deleted_nodeclaim_without_a_lifecycle_is_cleaned_up_by_one(system: System) -> None:
    name = await _orphan(system, "orphan-deleted")
    await system.kube.delete_nodeclaim(name)  # its finalizer holds it: nobody would ever remove it
    assert await system.nodeclaim(name) is not None
    system.start_controller(adoption_grace=0.5)

    lifecycle = await system.nodeclaim_workflow(name)
    result = await asyncio.wait_for(lifecycle.result(), 20)
    assert result.phase is Phase.TERMINATED
    assert await eventually(lambda: system.gone(name, f"aks-{name}"), timeout=10, what="gone")


async def test_a_lifecycle_that_runs_or_ran_is_never_started_again(system: System) -> None:
    system.start_controller(adoption_grace=0.5)
    claim = planned_claim(fresh_name("kept"), [offering("eastus-1")])
    lifecycle = await system.start_nodeclaim(claim, FAST)
    await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), timeout=20, what="running")

    adoption = LifecycleAdoption(
        system.client, system.kube, _never_started, deletion_requested, grace_seconds=0.0
    )
    nodeclaim = await system.nodeclaim(claim.name)
    assert nodeclaim is not None
    assert await adoption.check(nodeclaim) is False  # running

    await lifecycle.terminate("a test")
    assert await adoption.check(nodeclaim) is False  # ran and ended: not started again
    assert (await lifecycle.describe()).run_id == lifecycle.result_run_id
    assert not await events_about(system, claim.name, ADOPTED)


async def _never_started(request: LifecycleInput, deletion: DeletionRequested | None) -> None:
    raise AssertionError(f"started the lifecycle of {request.nodeclaim.name}")


def test_a_nodeclaim_is_checked_only_after_its_plan_had_the_grace_to_start_it() -> None:
    adoption = LifecycleAdoption(
        cast(Client, None), cast(ClusterAPI, None), _never_started, deletion_requested, grace_seconds=30
    )
    created = datetime(2026, 1, 1, tzinfo=UTC)

    def claim(name: str, conditions: list[dict[str, str]], annotated: bool = True) -> dict[str, Any]:
        annotations = {LIFECYCLE_ANNOTATION: "{}"} if annotated else {}
        return {
            "metadata": {"name": name, "annotations": annotations, "creationTimestamp": created.isoformat()},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            },
            "status": {"conditions": conditions},
        }

    launched = [
        {"type": "Launched", "status": "Unknown", "reason": "x", "lastTransitionTime": created.isoformat()}
    ]
    adoption.observe(NodeClaim.parse(claim("waiting", [])))
    adoption.observe(NodeClaim.parse(claim("launching", launched)))
    adoption.observe(NodeClaim.parse(claim("by-hand", [], annotated=False)))
    assert adoption.due(created + timedelta(seconds=29)) == []
    assert [c.name for c in adoption.due(created + timedelta(seconds=30))] == ["waiting"]
    adoption.observe(NodeClaim.parse(claim("waiting", launched)))
    assert adoption.due(created + timedelta(seconds=30)) == []


class Events:
    """A ClusterAPI that records the events the controller publishes."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def record_event(self, event: Any) -> None:
        self.events.append(event)


async def test_an_object_the_models_refuse_gets_a_warning_event_naming_the_field_and_the_watch_goes_on() -> (
    None
):
    """Found by the fuzz benchmark: the API server takes a NodeClaim whose terminationGracePeriod is longer than
    any duration, which the controller could only log."""
    cluster = Events()
    controller = offline_controller(cluster=cluster)
    claim: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "odd", "uid": "u-1"},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            "terminationGracePeriod": "9999999999h",
        },
    }
    await controller.receive(_watched("NodeClaim", claim, 1))
    await controller.receive(
        _watched("Pod", builders.pod("web", cpu="1").model_dump(mode="json", by_alias=True), 2)
    )

    [event] = cluster.events
    assert (event.reason, event.type, event.involved_object.kind, event.involved_object.name) == (
        "InvalidNodeClaim",
        "Warning",
        "NodeClaim",
        "odd",
    )
    assert event.involved_object.uid == "u-1"
    assert event.message.startswith("NodeClaim odd: spec.terminationGracePeriod: ")
    assert controller.requeued() == ["default/web"], "the next object is still handled"


async def test_a_nodeoverlay_the_models_refuse_gets_a_warning_event_naming_the_field() -> None:
    """Found by the fuzz benchmark: the API server takes a NodeOverlay whose capacity is `1e400`, which planning
    could only leave out, telling no one."""
    cluster = Events()
    controller = offline_controller(cluster=cluster)
    overlay: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "odd", "uid": "u-2"},
        "spec": {"requirements": [], "capacity": {"example.com/dongle": "1e400"}},
    }
    await controller.receive(_watched("NodeOverlay", overlay, 1))

    [event] = cluster.events
    assert (event.reason, event.involved_object.kind, event.involved_object.name) == (
        "InvalidNodeOverlay",
        "NodeOverlay",
        "odd",
    )
    assert event.message.startswith("NodeOverlay odd: spec.capacity.example.com/dongle: ")


async def test_another_providers_nodeclaim_is_left_alone() -> None:
    """As Karpenter's NodeClaim controllers skip a NodeClaim its cloud provider does not manage: not read, so not
    reported either, however odd."""
    cluster = Events()
    controller = offline_controller(cluster=cluster)
    claim: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "theirs", "uid": "u-3"},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "terminationGracePeriod": "9999999999h",
        },
    }
    await controller.receive(_watched("NodeClaim", claim, 1))
    assert cluster.events == []
