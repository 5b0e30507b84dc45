"""Karpenter's metrics: the activities count what they did (once, even when retried), the cloud decorator
times calls and labels failures by kind, the controller's gauges match a known cluster, `/metrics` serves
Prometheus' text format. Each test reads its own registry."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import random
import urllib.request
import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from temporalio.testing import ActivityEnvironment

from activities.disruption import DisruptionActivities
from activities.kube import KubeActivities, apply_condition, has_expired
from activities.kubeclient.cluster import KubernetesCluster
from activities.metrics import Metrics, snake_case
from activities.planning import PlanningActivities
from core import labels
from core.api.kube import Condition, Pod
from core.api.manifests import Manifests
from core.api.nodepool import StatusCondition
from core.cloudprovider import Instance, LaunchRequest
from core.cluster import EventType, WatchEvent
from core.errors import InsufficientCapacityError, NotFoundError, Offering
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import ConditionUpdate, DisruptionPlanInput, LifecycleInput, PlanInput
from tests.activities.test_disruption import replace_command_input
from tests.builders import pod
from tests.cluster import activity_environment, apply_examples, scale_pending
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE,
    MOST_EXPENSIVE_SPOT,
    bound,
    cluster,
    node_pair,
    nodepool,
    plan,
)
from tests.workflows.conftest import eventually
from workers.cli import start_metrics_server
from workers.metrics import (
    MeteredCloudProvider,
    PodStartup,
    WatchedClusterState,
    keep_cluster_state,
    serve_metrics,
    set_build_info,
    update_cluster_state,
)
from workers.settings import SettingsError, load_settings
from workers.simulated_aks import SimulatedAks

CATALOG = load_shipped_catalog("eastus")


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
async def kube(aks: SimulatedAks) -> KubernetesCluster:
    """The real API server, emptied, with `deploy/examples/` applied."""
    await apply_examples(aks.kube)
    return aks.kube


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def _nothing(_: LifecycleInput) -> None:
    return None


async def planned(kube: KubernetesCluster, metrics: Metrics, replicas: int = 2) -> list[str]:
    """Scale the pinned example deployment, wait until kube-scheduler finds no node for its pods, and plan
    their NodeClaims (three of its pods fill one)."""
    await scale_pending(kube, "inflate", replicas)
    planning = PlanningActivities(kube, CATALOG, _nothing, metrics)
    result = await activity_environment().run(planning.plan_provisioning, PlanInput(cluster="test"))
    assert result.pods == replicas and result.nodeclaims, f"planning saw no pending pods: {result}"
    return [claim.name for claim in result.nodeclaims]


async def launched(kube: KubernetesCluster, name: str, capacity_type: str, zone: str) -> None:
    """Record the NodeClaim as launched with an offering, as the launch activity does."""
    offering = {labels.CAPACITY_TYPE: capacity_type, labels.ZONE: zone}
    await apply_condition(kube, ConditionUpdate(name=name, type="Launched", status="True", labels=offering))


# --- activities ----------------------------------------------------------------------------------------------


async def test_planning_counts_the_nodeclaims_it_created(kube: KubernetesCluster, metrics: Metrics) -> None:
    names = await planned(kube, metrics)
    created = value(
        metrics,
        "karpenter_nodeclaims_created_total",
        reason="provisioned",
        nodepool="default",
        min_values_relaxed="false",
    )
    assert created == len(names) > 0


async def test_a_replacement_is_counted_once_with_its_disruption_reason(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    activities = DisruptionActivities(kube, CATALOG, _nothing, metrics)
    request = replace_command_input(f"{uuid.uuid4().hex}/3/0")
    await ActivityEnvironment().run(activities.launch_replacements, request)
    await ActivityEnvironment().run(activities.launch_replacements, request)  # a retry finds it
    reason = request.command.reason.lower()
    assert reason == "underutilized"
    created = value(
        metrics,
        "karpenter_nodeclaims_created_total",
        reason=reason,
        nodepool="default",
        min_values_relaxed="false",
    )
    assert created == 1


async def test_a_disruption_reason_is_counted_once_with_karpenters_labels(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    [name, *_] = await planned(kube, metrics)
    await launched(kube, name, "on-demand", "eastus-2")
    activities = KubeActivities(kube, metrics)
    update = ConditionUpdate(name=name, type="DisruptionReason", status="True", reason="Underutilized")
    await ActivityEnvironment().run(activities.update_nodeclaim, update)
    await ActivityEnvironment().run(
        activities.update_nodeclaim, update
    )  # a retry changes nothing: not counted
    disrupted = value(
        metrics,
        "karpenter_nodeclaims_disrupted_total",
        reason="underutilized",
        nodepool="default",
        capacity_type="on-demand",
        consolidation_policy="when_empty_or_underutilized",
        termination_mode="graceful",
    )
    assert disrupted == 1


async def test_launch_failures_and_registration_timeouts_count_as_karpenter_does(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    first, second = await planned(kube, metrics, replicas=4)
    activities = KubeActivities(kube, metrics)
    await ActivityEnvironment().run(
        activities.update_nodeclaim,
        ConditionUpdate(name=first, type="Launched", status="False", reason="LaunchFailed"),
    )
    await ActivityEnvironment().run(
        activities.update_nodeclaim,
        ConditionUpdate(name=second, type="Registered", status="False", reason="RegistrationTimeout"),
    )
    # An ordinary condition is no disruption.
    await ActivityEnvironment().run(
        activities.update_nodeclaim, ConditionUpdate(name=second, type="Initialized", status="False")
    )
    common = {"nodepool": "default", "capacity_type": "", "consolidation_policy": ""}
    common["termination_mode"] = "graceful"
    name = "karpenter_nodeclaims_disrupted_total"
    assert value(metrics, name, reason="insufficient_capacity", **common) == 1
    assert value(metrics, name, reason="registration_timeout", **common) == 1
    total = sum(s.value for f in metrics.nodeclaims_disrupted.collect() for s in f.samples if s.name == name)
    assert total == 2


async def test_a_launch_error_and_a_launch_timeout_count_with_their_own_reasons(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    first, second = await planned(kube, metrics, replicas=4)
    activities = KubeActivities(kube, metrics)
    failed = ConditionUpdate(
        name=first, type="Launched", status="False", reason="LaunchFailed", disrupted="async_provisioning"
    )
    await ActivityEnvironment().run(activities.update_nodeclaim, failed)
    await ActivityEnvironment().run(activities.update_nodeclaim, failed)  # a retry changes nothing
    await ActivityEnvironment().run(
        activities.update_nodeclaim,
        ConditionUpdate(
            name=second, type="Launched", status="False", reason="LaunchTimeout", disrupted="launch_timeout"
        ),
    )
    common = {"nodepool": "default", "capacity_type": "", "consolidation_policy": ""}
    common["termination_mode"] = "graceful"
    name = "karpenter_nodeclaims_disrupted_total"
    assert value(metrics, name, reason="async_provisioning", **common) == 1
    assert value(metrics, name, reason="launch_timeout", **common) == 1
    assert metrics.registry.get_sample_value(name, {"reason": "insufficient_capacity", **common}) is None


async def test_a_deleted_nodeclaim_is_counted_terminated_once(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    [name, *_] = await planned(kube, metrics)
    await launched(kube, name, "spot", "eastus-1")
    activities = KubeActivities(kube, metrics)
    await ActivityEnvironment().run(activities.delete_nodeclaim, name)
    await ActivityEnvironment().run(activities.delete_nodeclaim, name)
    assert await kube.get_nodeclaim(name) is None
    terminated = value(
        metrics,
        "karpenter_nodeclaims_terminated_total",
        nodepool="default",
        capacity_type="spot",
        zone="eastus-1",
    )
    assert terminated == 1
    # Its NodePool's expireAfter (720h) had not passed: not an expiration.
    assert (
        metrics.registry.get_sample_value("karpenter_nodeclaims_disrupted_total", {"reason": "expired"})
        is None
    )


async def test_a_deleted_node_is_counted_terminated_once(kube: KubernetesCluster, metrics: Metrics) -> None:
    _, node = node_pair("aks-default-abcde")
    body = node.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["metadata"]["finalizers"] = [labels.TERMINATION_FINALIZER]
    await kube.apply([{"apiVersion": "v1", "kind": "Node", **body}])
    activities = KubeActivities(kube, metrics)
    await ActivityEnvironment().run(activities.delete_node, "aks-default-abcde")
    await ActivityEnvironment().run(activities.delete_node, "aks-default-abcde")
    assert await kube.get_node("aks-default-abcde") is None
    zone = node.metadata.labels[labels.ZONE]
    assert value(metrics, "karpenter_nodes_terminated_total", nodepool="default", zone=zone) == 1


def test_an_expired_nodeclaim_is_one_its_pools_expireafter_ended_without_a_command() -> None:
    claim, _ = node_pair("a")
    created = claim.metadata.creation_timestamp
    assert created is not None
    pool = nodepool(expire_after="1h")
    assert has_expired(claim, pool, created + timedelta(hours=1))
    assert not has_expired(claim, pool, created + timedelta(minutes=59))
    assert not has_expired(claim, nodepool(expire_after="Never"), created + timedelta(days=3650))
    chosen = claim.model_copy(deep=True)
    chosen.status.conditions.append(StatusCondition(type="DisruptionReason", status="True", reason="Drifted"))
    assert not has_expired(chosen, pool, created + timedelta(hours=2))


async def test_the_plan_sets_the_allowed_disruptions_from_its_budgets(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    activities = DisruptionActivities(kube, CATALOG, _nothing, metrics)
    await ActivityEnvironment().run(activities.plan_disruption, DisruptionPlanInput(cluster="test"))
    samples = [s for f in metrics.allowed_disruptions.collect() for s in f.samples]
    # The example NodePool has no nodes yet: a percentage of none allows none.
    assert {(s.labels["nodepool"], s.labels["reason"], s.value) for s in samples} == {
        ("default", reason, 0) for reason in ("Underutilized", "Empty", "Drifted")
    }


def test_budgets_of_a_plan_become_allowed_disruptions_per_pool_and_reason(metrics: Metrics) -> None:
    pairs = [node_pair(name) for name in "abcd"]
    budgets = [{"nodes": "50%"}, {"nodes": "1", "reasons": ["Drifted"]}]
    result = plan(cluster([nodepool(budgets=budgets)], pairs, [bound(n) for n in "abcd"]))
    metrics.set_allowed_disruptions(result.budgets)

    def allowed(reason: str) -> float:
        return value(metrics, "karpenter_nodepools_allowed_disruptions", nodepool="default", reason=reason)

    # Karpenter reports what the budgets allow, not what is left after the nodes already disrupting.
    assert (allowed("Underutilized"), allowed("Empty"), allowed("Drifted")) == (2, 2, 1)
    metrics.set_allowed_disruptions(plan(cluster([nodepool(budgets=[])], pairs)).budgets)
    assert allowed("Empty") == 2**31 - 1  # no active budget: no limit, as Karpenter's MaxInt32


def test_a_plan_prices_each_nodepools_nodeclaims_as_karpenters_cost_total(metrics: Metrics) -> None:
    spot = node_pair("s", MOST_EXPENSIVE_SPOT, pool="other")
    unlaunched, _ = node_pair("u")
    del unlaunched.labels[labels.ZONE]  # no offering yet: not counted
    pairs = [node_pair("a"), node_pair("b"), spot, (unlaunched, node_pair("u")[1])]
    pools = [nodepool(), nodepool("other"), nodepool("idle")]
    metrics.set_nodepool_costs(plan(cluster(pools, pairs)).costs)

    def cost(pool: str) -> float | None:
        return metrics.registry.get_sample_value("karpenter_nodepools_cost_total", {"nodepool": pool})

    on_demand, spot_price = (
        it.offerings[0].price_micros / 1e6 for it in (MOST_EXPENSIVE, MOST_EXPENSIVE_SPOT)
    )
    assert (cost("default"), cost("other"), cost("idle")) == (pytest.approx(2 * on_demand), spot_price, 0)
    metrics.set_nodepool_costs(plan(cluster([nodepool()], pairs[:1])).costs)
    assert (cost("default"), cost("other")) == (pytest.approx(on_demand), None), "a NodePool gone drops out"


# --- the cloud decorator -------------------------------------------------------------------------------------


class FlakyCloud:
    """Creates fail for want of capacity, gets find nothing, lists and deletes succeed."""

    async def create(self, request: LaunchRequest) -> Instance:
        raise InsufficientCapacityError("no capacity", Offering(request.instance_type, request.zone, "spot"))

    async def get(self, name: str) -> Instance:
        raise NotFoundError(f"instance {name} not found")

    async def list(self) -> list[Instance]:
        return []

    async def delete(self, name: str) -> None:
        return None


async def test_the_cloud_decorator_times_calls_and_labels_errors_by_kind(metrics: Metrics) -> None:
    cloud = MeteredCloudProvider(FlakyCloud(), metrics)
    request = LaunchRequest(
        name="default-abcde",
        nodepool="default",
        instance_type="Standard_D2s_v5",
        zone="eastus-1",
        capacity_type="spot",
    )
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, activity_type="launch_nodeclaim")
    with pytest.raises(InsufficientCapacityError):
        await environment.run(cloud.create, request)
    with pytest.raises(NotFoundError):
        await cloud.get("default-abcde")
    assert await cloud.list() == []
    await cloud.delete("default-abcde")

    def errors(**labels: str) -> float:
        return value(metrics, "karpenter_cloudprovider_errors_total", provider="azure", **labels)

    assert errors(controller="nodeclaim.lifecycle", method="Create", error="InsufficientCapacityError") == 1
    assert errors(controller="", method="Get", error="NodeClaimNotFoundError") == 1
    for controller, method in (("nodeclaim.lifecycle", "Create"), ("", "Get"), ("", "List"), ("", "Delete")):
        count = value(
            metrics,
            "karpenter_cloudprovider_duration_seconds_count",
            controller=controller,
            method=method,
            provider="azure",
        )
        assert count == 1, method
    failed = {s.labels["method"] for f in metrics.cloud_errors.collect() for s in f.samples if s.value}
    assert failed == {"Create", "Get"}


# --- the controller's gauges ---------------------------------------------------------------------------------


def test_cluster_state_gauges_match_a_known_cluster(metrics: Metrics) -> None:
    pairs = [node_pair("a", allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}), node_pair("b")]
    pods = [bound("a", "web-1", cpu="1500m", memory="1Gi"), bound("a", "web-2", cpu="500m")]
    pool = nodepool().model_copy(deep=True)
    pool.spec.limits = {"cpu": "1000", "memory": "4000Gi"}
    pool.status.resources = {
        "cpu": "36",
        "memory": "80Gi",
        "pods": "0",
        "ephemeral-storage": "0",
        "nodes": "2",
    }
    update_cluster_state(metrics, cluster([pool], pairs, pods))

    assert value(metrics, "karpenter_cluster_state_node_count") == 2
    claim, node = pairs[0]
    node_labels = {
        "node_name": "a",
        "nodepool": "default",
        "instance_type": node.metadata.labels[labels.INSTANCE_TYPE],
        "capacity_type": node.metadata.labels[labels.CAPACITY_TYPE],
        "zone": node.metadata.labels[labels.ZONE],
        "region": "",
        "arch": "",
        "os": "",
    }
    allocatable = "karpenter_nodes_allocatable"
    assert value(metrics, allocatable, **node_labels, resource_type="cpu") == 4.0
    assert value(metrics, allocatable, **node_labels, resource_type="memory") == 16 * 2**30
    requests = "karpenter_nodes_total_pod_requests"
    assert value(metrics, requests, **node_labels, resource_type="cpu") == 2.0
    assert value(metrics, requests, **node_labels, resource_type="memory") == 2**30
    assert metrics.registry.get_sample_value(requests, {**node_labels, "resource_type": "pods"}) is None
    assert value(metrics, "karpenter_nodepools_usage", nodepool="default", resource_type="cpu") == 4 + 32
    assert value(metrics, "karpenter_nodepools_usage", nodepool="default", resource_type="nodes") == 2
    # Every resource the status lists, zeros too, with Karpenter's label spelling.
    assert (
        value(metrics, "karpenter_nodepools_usage", nodepool="default", resource_type="ephemeral_storage")
        == 0
    )
    assert value(metrics, "karpenter_nodepools_limit", nodepool="default", resource_type="cpu") == 1000
    assert claim.name == "claim-a"

    # A node that left takes its series with it.
    update_cluster_state(metrics, cluster([pool], pairs[1:]))
    assert value(metrics, "karpenter_cluster_state_node_count") == 1
    assert metrics.registry.get_sample_value(allocatable, {**node_labels, "resource_type": "cpu"}) is None


def test_the_daemonset_pods_requests_are_counted_apart(metrics: Metrics) -> None:
    pairs = [node_pair("a")]
    pods = [bound("a", "agent", cpu="100m", owner_kind="DaemonSet", owner_name="agent"), bound("a", "app")]
    update_cluster_state(metrics, cluster([nodepool()], pairs, pods))
    daemon = [s for f in metrics.nodes_daemon_requests.collect() for s in f.samples]
    assert [(s.labels["resource_type"], s.value) for s in daemon if s.labels["resource_type"] == "cpu"] == [
        ("cpu", 0.1)
    ]


def test_resource_names_and_policies_are_written_as_karpenter_writes_them() -> None:
    assert snake_case("WhenEmptyOrUnderutilized") == "when_empty_or_underutilized"
    assert snake_case("Underutilized") == "underutilized"
    # Karpenter's condition label: its ToSnakeCase also splits a capitalised word after a non-letter.
    assert snake_case("kubernetes.azure.com/NodeHealthy") == "kubernetes.azure.com/_node_healthy"
    assert snake_case("PreemptionScheduled") == "preemption_scheduled"


def test_every_pod_has_a_state_series_labelled_with_its_node(metrics: Metrics) -> None:
    pairs = [node_pair("a")]
    running = bound("a", "web-1", phase="Running")
    waiting = pod("web-2", owner_kind="ReplicaSet", owner_name="web")
    update_cluster_state(metrics, cluster([nodepool()], pairs, [running, waiting]))
    node = pairs[0][1].metadata.labels
    placed = {
        "name": "web-1",
        "namespace": "default",
        "owner": "/apis/apps/v1/namespaces/default/replicasets/app",
        "node": "a",
        "scheduled": "true",
        "nodepool": "default",
        "zone": node[labels.ZONE],
        "arch": "",
        "capacity_type": node[labels.CAPACITY_TYPE],
        "instance_type": node[labels.INSTANCE_TYPE],
        "phase": "Running",
        "ready": "false",
        "managed": "true",
    }
    assert metrics.registry.get_sample_value("karpenter_pods_state", placed) == 1
    unbound = {
        "name": "web-2",
        "namespace": "default",
        "owner": "/apis/apps/v1/namespaces/default/replicasets/web",
        "node": "",
        "scheduled": "false",
        "nodepool": "",
        "zone": "",
        "arch": "",
        "capacity_type": "",
        "instance_type": "",
        "phase": "",
        "ready": "false",
        "managed": "false",
    }
    assert metrics.registry.get_sample_value("karpenter_pods_state", unbound) == 1
    # A pod that is gone takes its series with it.
    update_cluster_state(metrics, cluster([nodepool()], pairs, [running]))
    assert metrics.registry.get_sample_value("karpenter_pods_state", unbound) is None


def _started(pending: Pod, after: timedelta) -> Pod:
    """The pod Running, its Ready condition turned True `after` its creation."""
    created = pending.metadata.creation_timestamp
    assert created is not None
    ready = Condition(type="Ready", status="True", last_transition_time=created + after)
    started = pending.model_copy(deep=True)
    started.status.phase = "Running"
    started.status.conditions = [ready]
    return started


def test_a_pod_seen_pending_is_observed_once_from_creation_to_ready(metrics: Metrics) -> None:
    startup = PodStartup()
    slow, fast, unseen = (pod(name, phase="Pending") for name in ("slow", "fast", "unseen"))
    update_cluster_state(metrics, cluster([], [], [slow, fast]), startup)
    later = [_started(slow, timedelta(seconds=40)), _started(fast, timedelta(seconds=4))]
    update_cluster_state(metrics, cluster([], [], [*later, _started(unseen, timedelta(seconds=99))]), startup)
    update_cluster_state(metrics, cluster([], [], later), startup)  # seen again: not observed twice
    name = "karpenter_pods_startup_duration_seconds"
    assert value(metrics, f"{name}_count") == 2 and value(metrics, f"{name}_sum") == 44
    assert value(metrics, name, quantile="0") == 4 and value(metrics, name, quantile="1") == 40


async def test_a_repaired_nodeclaim_is_counted_unhealthy_by_the_condition_that_made_it_so(
    kube: KubernetesCluster, metrics: Metrics
) -> None:
    [name, *_] = await planned(kube, metrics)
    await launched(kube, name, "spot", "eastus-2")
    node = f"aks-{name}"
    await kube.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    "labels": {labels.NODEPOOL: "default", labels.CAPACITY_TYPE: "spot"},
                },
            }
        ]
    )
    sick = {"type": "kubernetes.azure.com/NodeHealthy", "status": "False", "reason": "KubeletDown"}
    await asyncio.to_thread(kube._core.patch_node_status, node, {"status": {"conditions": [sick]}})
    await apply_condition(kube, ConditionUpdate(name=name, type="Registered", status="True", node_name=node))
    activities = KubeActivities(kube, metrics)
    update = ConditionUpdate(name=name, type="DisruptionReason", status="True", reason="Unhealthy")
    await ActivityEnvironment().run(activities.update_nodeclaim, update)
    await ActivityEnvironment().run(activities.update_nodeclaim, update)  # a retry: not counted again
    unhealthy = value(
        metrics,
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        condition="kubernetes.azure.com/_node_healthy",
        nodepool="default",
        capacity_type="spot",
        image_id="",
    )
    assert unhealthy == 1


# --- the endpoint --------------------------------------------------------------------------------------------


def test_metrics_are_served_in_the_text_format(metrics: Metrics) -> None:
    set_build_info(metrics)
    metrics.nodeclaim_created("provisioned", "default", False)
    claim, node = node_pair("a")
    metrics.nodeclaim_unhealthy_disrupted("Ready", node, claim)
    metrics.pods_startup_duration.observe(12.5)
    update_cluster_state(metrics, cluster([nodepool()], [(claim, node)], [bound("a", "web-1")]))
    server = serve_metrics(0, metrics.registry, addr="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
            content_type = response.headers["Content-Type"]
    finally:
        server.shutdown()
        server.server_close()
    assert content_type.startswith("text/plain")
    assert "# TYPE karpenter_nodeclaims_created_total counter" in body
    assert (
        'karpenter_nodeclaims_created_total{min_values_relaxed="false",nodepool="default",reason="provisioned"} 1.0'
        in body
    )
    assert 'karpenter_build_info{version="' in body
    assert "# TYPE karpenter_nodeclaims_unhealthy_disrupted_total counter" in body
    assert 'karpenter_nodeclaims_unhealthy_disrupted_total{capacity_type="' in body
    assert "# TYPE karpenter_pods_startup_duration_seconds summary" in body
    assert 'karpenter_pods_startup_duration_seconds{quantile="0.99"} 12.5' in body
    assert "karpenter_pods_startup_duration_seconds_count 1.0" in body
    assert "# TYPE karpenter_pods_state gauge" in body
    assert 'karpenter_pods_state{arch="",capacity_type="' in body and 'name="web-1"' in body


def _event(kind: str, item: Any, type: EventType = EventType.ADDED) -> WatchEvent:
    raw = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    metadata = raw["metadata"]
    return WatchEvent(
        type=type,
        kind=kind,
        name=metadata["name"],
        namespace=metadata.get("namespace"),
        resource_version=1,
        object=raw,
    )


async def test_the_controller_keeps_the_gauges_from_what_its_watch_saw(metrics: Metrics) -> None:
    pool = nodepool().model_copy(deep=True)
    pool.spec.limits = {"cpu": "1000"}
    pool.status.resources = {"nodes": "2"}
    (claim_a, node_a), (claim_b, node_b) = node_pair("a"), node_pair("b")
    state = WatchedClusterState()
    for kind, item in (("NodePool", pool), ("NodeClaim", claim_a), ("Node", node_a), ("NodeClaim", claim_b)):
        state.observe(_event(kind, item))
    state.observe(_event("Node", node_b))
    state.observe(_event("Pod", bound("a", "web-1", cpu="1500m")))
    # An object the gauges cannot read (a newer API's) is skipped, not a reason to stop.
    state.observe(
        WatchEvent(type=EventType.ADDED, kind="NodePool", name="odd", resource_version=2, object={})
    )
    task = asyncio.create_task(keep_cluster_state(state, metrics, period_seconds=0.01))

    async def nodes(count: int) -> bool:
        return value(metrics, "karpenter_cluster_state_node_count") == count

    try:
        await eventually(lambda: nodes(2), timeout=5, what="two nodes counted")
        assert value(metrics, "karpenter_nodepools_limit", nodepool="default", resource_type="cpu") == 1000
        assert value(metrics, "karpenter_nodepools_usage", nodepool="default", resource_type="nodes") == 2
        # A Node deleted (as a relist reports it: only its name) takes its series with it.
        state.observe(
            WatchEvent(type=EventType.DELETED, kind="Node", name="b", resource_version=3, object={})
        )
        await eventually(lambda: nodes(1), timeout=5, what="one node left")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    gauges = (
        metrics.pods_state,
        metrics.nodes_allocatable,
        metrics.nodes_pod_requests,
        metrics.nodes_daemon_requests,
        metrics.nodepools_usage,
        metrics.nodepools_limit,
        metrics.cluster_state_node_count,
    )
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for gauge in gauges
        for family in gauge.collect()
        for sample in family.samples
    }


@pytest.mark.parametrize("seed", range(5))
def test_gauges_kept_change_by_change_equal_gauges_computed_from_the_whole_cluster(seed: int) -> None:
    """Pods come, move, change phase and go, nodes change labels and go, a NodePool changes: after each batch of
    changes the watch-kept gauges are those computed afresh from the cluster as it then is."""
    rng = random.Random(seed)
    kept = Metrics(CollectorRegistry())
    state = WatchedClusterState()
    nodes: dict[str, Any] = {}
    pods: dict[str, Pod] = {}
    pool = nodepool().model_copy(deep=True)
    state.observe(_event("NodePool", pool))
    for step in range(12):
        for _ in range(rng.randint(1, 6)):
            choice = rng.random()
            if choice < 0.25 or not nodes:
                name = f"n{rng.randint(0, 5)}"
                zone = rng.choice(["eastus-1", "eastus-2"])
                _, node = node_pair(
                    name, node_labels={labels.ZONE: zone}, allocatable={"cpu": str(rng.randint(2, 8))}
                )
                nodes[name] = node
                state.observe(_event("Node", node))
            elif choice < 0.35:
                name = rng.choice(sorted(nodes))
                state.observe(_event("Node", nodes.pop(name), EventType.DELETED))
            elif choice < 0.8 or not pods:
                name = f"p{rng.randint(0, 12)}"
                host = rng.choice([*sorted(nodes), None])
                options: dict[str, Any] = {"cpu": f"{rng.randint(1, 9) * 100}m"}
                if rng.random() < 0.3:
                    options.update(owner_kind="DaemonSet", owner_name="agent")
                phase = rng.choice(["Pending", "Running", "Succeeded"]) if host else "Pending"
                made = bound(host, name, phase=phase, **options) if host else pod(name, phase=phase)
                pods[name] = made
                state.observe(_event("Pod", made))
            elif choice < 0.9:
                name = rng.choice(sorted(pods))
                state.observe(_event("Pod", pods.pop(name), EventType.DELETED))
            else:
                pool = pool.model_copy(deep=True)
                pool.status.resources = {"cpu": str(rng.randint(0, 64)), "nodes": str(len(nodes))}
                state.observe(_event("NodePool", pool))
        state.update(kept)
        fresh = Metrics(CollectorRegistry())
        whole = Manifests(nodepools=[pool], nodes=list(nodes.values()), pods=list(pods.values()))
        update_cluster_state(fresh, whole)
        assert _samples(kept) == _samples(fresh), f"step {step}"


# --- settings ------------------------------------------------------------------------------------------------


def test_each_process_serves_on_its_own_metrics_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODEWRIGHT_METRICS_PORT", raising=False)
    assert load_settings().metrics_port == 8080
    assert load_settings(metrics_port=9000).metrics_port == 9000
    assert load_settings(metrics_port=0).metrics_port == 0
    with pytest.raises(SettingsError, match="NODEWRIGHT_METRICS_PORT"):
        load_settings(metrics_port=70000)


def test_a_taken_port_is_one_line_naming_the_variable() -> None:
    taken = serve_metrics(0, CollectorRegistry(), addr="0.0.0.0")
    err = io.StringIO()
    try:
        assert not start_metrics_server(taken.server_port, "NODEWRIGHT_METRICS_PORT", err)
    finally:
        taken.shutdown()
        taken.server_close()
    assert err.getvalue().startswith(
        f"error: cannot serve metrics on port {taken.server_port} (NODEWRIGHT_METRICS_PORT)"
    )
