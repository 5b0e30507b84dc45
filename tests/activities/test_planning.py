"""The planning activity: a NodeClaim an earlier attempt created but could not start a lifecycle for gets its
lifecycle on the next attempt, and is not created twice; every planned NodeClaim says which pods it is for and
why its launch was chosen. The pods are ones kube-scheduler found no node for."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.heartbeat import AttemptFence, AttemptGivenUpError
from activities.kube import apply_condition
from activities.planning import PlanningActivities, existing_targets, planned, provisionable_fields
from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Pod, pod_requests
from core.api.manifests import Manifests
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import Offering
from core.messages import MAX_RECORDED_PODS, ConditionUpdate, LifecycleInput, PlanInput, UnavailableOffering
from core.scheduling.requirements import Requirements
from core.scheduling.results import ExistingPlacement, Launch, NewNodeClaim, SchedulingResults
from tests.cluster import activity_environment, apply_examples, events, scale_pending, unschedulable
from tests.core.disruption.fixtures import node_pair
from workers.controlplane.run import ControlPlane
from workers.simulated_aks import SimulatedAks


class Crash(Exception):
    """The worker dying between creating a NodeClaim and starting its lifecycle."""


async def test_a_retried_plan_starts_what_the_failed_attempt_created(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    await scale_pending(aks.kube, "inflate", 2)
    started: list[str] = []

    async def crash(request: LifecycleInput) -> None:
        raise Crash

    async def record(request: LifecycleInput) -> None:
        started.append(request.nodeclaim.name)

    catalog = load_shipped_catalog("eastus")
    run = uuid.uuid4().hex
    request = PlanInput(cluster="test", batch=1)
    with pytest.raises(Crash):
        await activity_environment(run).run(
            PlanningActivities(aks.kube, catalog, crash).plan_provisioning, request
        )
    [orphan] = await aks.kube.list_nodeclaims()

    retry = activity_environment(run, attempt=2)
    plan = await retry.run(PlanningActivities(aks.kube, catalog, record).plan_provisioning, request)

    assert started[0] == orphan.name
    assert plan.nodeclaims == []  # the pods fit the NodeClaim the first attempt made
    assert [claim.name for claim in await aks.kube.list_nodeclaims()] == [orphan.name]


async def test_a_plan_attempt_the_server_gave_up_on_stops_creating_and_starts_what_it_created(
    aks: SimulatedAks, monkeypatch: pytest.MonkeyPatch
) -> None:
    await apply_examples(aks.kube)
    await scale_pending(aks.kube, "inflate", 12)
    checks: list[int] = []

    async def given_up_after_one(fence: AttemptFence) -> None:
        checks.append(1)
        if len(checks) > 1:
            raise AttemptGivenUpError("attempt 1 was given up by the server, which now counts attempt 2")

    monkeypatch.setattr(AttemptFence, "check", given_up_after_one)
    started: list[str] = []

    async def record(request: LifecycleInput) -> None:
        started.append(request.nodeclaim.name)

    activities = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), record)
    with pytest.raises(AttemptGivenUpError):
        await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))

    [created] = await aks.kube.list_nodeclaims()
    assert len(checks) > 1  # the plan wanted more than one NodeClaim; only the first creation was let through
    assert started == [created.name]


async def test_a_planned_nodeclaim_names_its_pods_and_why_its_launch_was_chosen(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    inflate = await scale_pending(aks.kube, "inflate", 2)
    started: list[LifecycleInput] = []

    async def record(request: LifecycleInput) -> None:
        started.append(request)

    activities = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), record)
    await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=7))

    [lifecycle] = started
    claim = lifecycle.nodeclaim
    assert sorted(claim.pods) == inflate and claim.pod_count == 2
    assert claim.batch == 7
    # inflate is pinned to one type, on-demand, in eastus-2; the DaemonSet's 100m and 128Mi are included.
    price = claim.launch_candidates[0].price_micros / 1e6
    assert claim.reason == (
        "cheapest of 1 instance type that fit 2 pods (cpu 2100m, memory 2176Mi, pods 3) in NodePool default: "
        f"Standard_D4ps_v5 on-demand in eastus-2 at ${price:.4f}/h"
    )


async def test_pods_nominated_to_an_in_flight_nodeclaim_are_not_planned_again(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    pods = await scale_pending(aks.kube, "inflate", 2)
    started: list[LifecycleInput] = []

    async def record(request: LifecycleInput) -> None:
        started.append(request)

    activities = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), record)
    first = await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))
    [claim] = await aks.kube.list_nodeclaims()
    assert first.pods == 2 and [c.name for c in first.nodeclaims] == [claim.name]

    # While it launches, the requeued pods are left to it: nothing is simulated, nothing created.
    second = await activity_environment().run(
        activities.plan_provisioning, PlanInput(cluster="test", batch=2)
    )
    assert (second.pods, second.nominated, second.nodeclaims) == (0, 2, [])

    # Its Node registered but is not Ready yet (kube-scheduler cannot bind the pods there): still theirs.
    await aks.kube.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "aks-registered", "labels": {labels.NODEPOOL: "default"}},
                "spec": {
                    "providerID": "azure:///registered",
                    "taints": [
                        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                        {"key": labels.UNREGISTERED_TAINT, "effect": "NoExecute"},
                    ],
                },
                "status": {"allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": "110"}},
            }
        ]
    )
    await apply_condition(
        aks.kube,
        ConditionUpdate(name=claim.name, type="Registered", status="True", node_name="aks-registered"),
    )
    third = await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=3))
    assert (third.pods, third.nominated, third.nodeclaims) == (0, 2, [])

    # Being deleted, it holds them no longer: they are planned again, onto a NodeClaim of their own.
    await aks.kube.delete_nodeclaim(claim.name)
    fourth = await activity_environment().run(
        activities.plan_provisioning, PlanInput(cluster="test", batch=4)
    )
    assert (fourth.pods, fourth.nominated, len(fourth.nodeclaims)) == (2, 0, 1)
    assert sorted(started[-1].nodeclaim.pods) == pods


def test_a_planned_nodeclaim_names_at_most_the_first_pods() -> None:
    pods = [f"default/p-{index:03}" for index in range(MAX_RECORDED_PODS + 10)]
    launch = Launch("Standard_D2s_v5", Offering("eastus-1", "spot", 12_300, True, Requirements([])), {})
    claim = NewNodeClaim(
        nodepool="default",
        instance_type="Standard_D2s_v5",
        zone="eastus-1",
        capacity_type="spot",
        price_micros=12_300,
        instance_type_options=["Standard_D2s_v5", "Standard_D4s_v5"],
        pods=pods,
        labels={},
        taints=[],
        startup_taints=[],
        requirements=[],
        requests={"cpu": 1500, "pods": len(pods)},
        launch_candidates=[launch],
    )

    decision = planned(claim, None, "default-abcde", max_candidates=20)

    assert decision.pods == pods[:MAX_RECORDED_PODS] and decision.pod_count == len(pods)
    assert decision.reason == (
        "cheapest of 2 instance types that fit 60 pods (cpu 1500m, pods 60) in NodePool default: "
        "Standard_D2s_v5 spot in eastus-1 at $0.0123/h"
    )


def test_a_planned_nodeclaim_carries_the_labels_the_scheduler_resolved() -> None:
    launch = Launch("Standard_D2s_v5", Offering("eastus-1", "spot", 12_300, True, Requirements([])), {})
    claim = NewNodeClaim(
        nodepool="default",
        instance_type="Standard_D2s_v5",
        zone="eastus-1",
        capacity_type="spot",
        price_micros=12_300,
        instance_type_options=["Standard_D2s_v5"],
        pods=["default/p"],
        labels={},
        taints=[],
        startup_taints=[],
        requirements=[],
        requests={"cpu": 1000},
        launch_candidates=[launch],
        nodeclaim_labels={"karpenter.sh/nodepool": "default", "team": "a"},
    )

    decision = planned(claim, None, "default-abcde", max_candidates=20)

    # What the lifecycle creates the NodeClaim with and launches the node with, over its type's labels.
    assert decision.labels == {"karpenter.sh/nodepool": "default", "team": "a"}


def test_a_planned_nodeclaim_says_which_instance_types_were_left_out_because_no_image_boots_on_them() -> None:
    launch = Launch("Standard_D2s_v5", Offering("eastus-1", "spot", 12_300, True, Requirements([])), {})
    claim = NewNodeClaim(
        nodepool="default",
        instance_type="Standard_D2s_v5",
        zone="eastus-1",
        capacity_type="spot",
        price_micros=12_300,
        instance_type_options=["Standard_D2s_v5"],
        pods=["default/p"],
        labels={},
        taints=[],
        startup_taints=[],
        requirements=[],
        requests={"cpu": 1000},
        launch_candidates=[launch],
    )
    left_out = {
        "Standard_D4ps_v5": "AKSNodeClass default: no image in status.images boots on Standard_D4ps_v5 (arm64, ...)",
        "Standard_D2ps_v5": "AKSNodeClass default: no image in status.images boots on Standard_D2ps_v5 (arm64, ...)",
    }

    decision = planned(claim, None, "default-abcde", max_candidates=20, left_out=left_out)

    assert decision.reason.endswith(
        "at $0.0123/h; 2 instance type(s) left out as no image boots on them; first: AKSNodeClass default: "
        "no image in status.images boots on Standard_D2ps_v5 (arm64, ...)"
    )
    assert planned(claim, None, "default-abcde", max_candidates=20).reason.endswith("at $0.0123/h")


async def test_pod_level_requests_read_from_the_api_size_the_nodeclaim(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    whole = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "whole", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "whole"}},
            "template": {
                "metadata": {"labels": {"app": "whole"}},
                "spec": {
                    "resources": {"requests": {"cpu": "7", "memory": "2Gi"}},
                    "containers": [
                        {"name": name, "image": "pause", "resources": {"requests": {"cpu": "100m"}}}
                        for name in ("a", "b")
                    ],
                },
            },
        },
    }
    await aks.kube.apply([whole])
    [key] = await unschedulable(aks.kube, "whole", 1)
    [pod] = await aks.kube.list_pods("default", label_selector="app=whole")
    assert pod_requests(pod)["cpu"] == 7000
    started: list[LifecycleInput] = []

    async def record(request: LifecycleInput) -> None:
        started.append(request)

    catalog = load_shipped_catalog("eastus")
    activities = PlanningActivities(aks.kube, catalog, record)
    await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))

    [lifecycle] = started
    assert lifecycle.nodeclaim.pods == [key]
    assert all(catalog.sku(c.instance_type).vcpus >= 8 for c in lifecycle.nodeclaim.launch_candidates)


async def test_pods_get_karpenters_nominated_and_failed_scheduling_events_on_themselves(
    aks: SimulatedAks, control_plane: ControlPlane
) -> None:
    await apply_examples(aks.kube)
    [placed] = await scale_pending(aks.kube, "inflate", 1)
    huge = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"huge-{uuid.uuid4().hex[:6]}",
            "namespace": "default",
            "labels": {"app": "huge"},
        },
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1000"}}}]},
    }
    await aks.kube.apply([huge])
    [failing] = await unschedulable(aks.kube, "huge", 1)

    async def ignore(request: LifecycleInput) -> None:
        return None

    activities = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), ignore)
    plan = await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))
    [claim] = plan.nodeclaims
    assert list(plan.unschedulable) == [failing]

    async def karpenters(reason: str, pod: str) -> list[dict[str, Any]]:
        """Karpenter's events of this reason on the pod (kube-scheduler records FailedScheduling too)."""
        found = await events(aks.kube, reason, [pod])
        return [event for event in found if event.get("reportingController") == "karpenter"]

    [nominated] = await karpenters("Nominated", placed.partition("/")[2])
    assert nominated["note"] == f"Pod should schedule on: nodeclaim/{claim.name}"
    [failed] = await karpenters("FailedScheduling", failing.partition("/")[2])
    assert failed["type"] == "Warning" and failed["note"].startswith("Failed to schedule pod, ")
    pod = await aks.kube.get_object("Pod", failing.partition("/")[2], "default")
    assert failed["regarding"]["uid"] == (pod or {})["metadata"]["uid"]

    described = control_plane.kubectl("describe", "pod", failing.partition("/")[2]).stdout
    lines = described.split("Events:", 1)[1].splitlines()
    assert any("FailedScheduling" in line and "karpenter" in line for line in lines)

    # The next plan finds the same pod unschedulable: Karpenter does not repeat the event for five minutes.
    await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=2))
    assert len(await karpenters("FailedScheduling", failing.partition("/")[2])) == 1


def test_nominated_names_the_nodeclaim_and_node_as_karpenter_does() -> None:
    (claim, node), (launching, _) = node_pair("a"), node_pair("b")
    launching.status.node_name = None
    unmanaged = node_pair("c")[1]
    target = existing_targets(Manifests(nodeclaims=[claim, launching], nodes=[node, unmanaged]))
    assert target("a") == f"nodeclaim/{claim.name}, node/a"
    assert target(launching.name) == f"nodeclaim/{launching.name}"
    assert target("c") == "node/c"


def test_an_offering_ruled_out_for_one_nodeclass_stays_available_to_the_others() -> None:
    activities = PlanningActivities(None, load_shipped_catalog("eastus"), _no_lifecycle)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    until = now + timedelta(minutes=3)
    unavailable = [
        UnavailableOffering(
            instance_type="Standard_D2s_v5",
            zone="eastus-1",
            capacity_type="on-demand",
            until=until,
            reason="Invalid",
            nodeclass="broken",
        ),
        UnavailableOffering(
            instance_type="Standard_D2s_v5", zone="eastus-2", capacity_type="spot", until=until, reason="x"
        ),
        UnavailableOffering(  # expired
            instance_type="Standard_D2s_v5", zone="eastus-3", capacity_type="spot", until=now, reason="x"
        ),
    ]
    provide = activities._unavailable_aware(unavailable, now)

    def unavailable_for(nodeclass: str | None) -> set[tuple[str, str]]:
        klass = None if nodeclass is None else AKSNodeClass.parse({"metadata": {"name": nodeclass}})
        [d2] = [t for t in provide(klass) if t.name == "Standard_D2s_v5"]
        return {(o.zone, o.capacity_type) for o in d2.offerings if not o.available}

    assert unavailable_for("broken") == {("eastus-1", "on-demand"), ("eastus-2", "spot")}
    assert unavailable_for("default") == {("eastus-2", "spot")}
    assert unavailable_for(None) == {("eastus-2", "spot")}


async def _no_lifecycle(request: LifecycleInput) -> None:
    raise AssertionError("no plan runs here")


async def test_another_providers_nodepool_is_not_planned_from(aks: SimulatedAks) -> None:
    """As Karpenter's provisioner lists only the NodePools its cloud provider manages: a heavier NodePool whose
    nodeClassRef is another provider's NodeClass gets no NodeClaim (its launch would only fail)."""
    await apply_examples(aks.kube)
    await aks.kube.apply(
        """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: aws}
spec:
  weight: 100
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"""
    )
    await scale_pending(aks.kube, "inflate", 1)

    async def record(request: LifecycleInput) -> None:
        pass

    activities = PlanningActivities(aks.kube, load_shipped_catalog("eastus"), record)
    plan = await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))

    assert [claim.nodepool for claim in plan.nodeclaims] == ["default"]


def test_found_provisionable_is_said_as_karpenter_says_it_virtual_pods_and_all() -> None:
    """Karpenter logs "found provisionable pod(s)" only for a pass that computed new NodeClaims, listing the pods
    of the pass (a CapacityBuffer's virtual pods among them) as `pretty.Slice` does; its "computed new
    nodeclaim(s) to fit pod(s)" counts the virtual pods too, so a planned NodeClaim's count includes them."""
    pending = [Pod.model_validate({"metadata": {"name": f"p{i}", "namespace": "default"}}) for i in range(6)]
    pending.append(
        Pod.model_validate({"metadata": {"name": "capacity-buffer-warm-1", "namespace": "default"}})
    )
    placed = ExistingPlacement(node="aks-default-abcde", pods=["default/capacity-buffer-warm-1"])

    assert (
        provisionable_fields(pending, SchedulingResults(existing=[placed])) is None
    )  # the room fits: silent

    pods = ["default/p0", "default/capacity-buffer-warm-1"]
    launch = Launch("Standard_D2s_v5", Offering("eastus-1", "spot", 12_300, True, Requirements([])), {})
    claim = NewNodeClaim(
        "default", "Standard_D2s_v5", "eastus-1", "spot", 12_300, [], pods, {}, [], [], [], {}, {}, [launch]
    )
    assert provisionable_fields(pending, SchedulingResults(nodeclaims=[claim])) == {
        "Pods": "default/p0, default/p1, default/p2, default/p3, default/p4 and 2 other(s)",
        "count": 7,
    }
    assert planned(claim, None, "default-abcde", max_candidates=1).pod_count == 2


def test_plans_that_rule_out_other_offerings_share_the_instance_types_they_leave_alone() -> None:
    """Each set of unavailable offerings (a Spot eviction adds one) gets its instance types; all but the sizes it
    names are the catalog's own objects, not a copy of tens of MB per set."""

    async def start(request: LifecycleInput) -> None:
        raise AssertionError("no plan runs here")

    planning = PlanningActivities(None, load_shipped_catalog("eastus"), start)  # type: ignore[arg-type]
    now = datetime.now(UTC)

    def types(size: str) -> list[Any]:
        ruled_out = UnavailableOffering(
            instance_type=size, zone="eastus-1", capacity_type="spot", until=now + timedelta(minutes=3)
        )
        return planning._unavailable_aware([ruled_out], now)(None)

    first, second = types("Standard_D2s_v5"), types("Standard_F2s_v2")
    assert {a.name for a, b in zip(first, second, strict=True) if a is not b} == {
        "Standard_D2s_v5",
        "Standard_F2s_v2",
    }
