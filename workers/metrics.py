"""Serving Karpenter's metrics (`/metrics`), timing the cloud provider's calls, and the cluster-state gauges.

The metrics themselves are defined in `activities.metrics`, where the activities that count them can import
them; this module holds what only processes do: the HTTP endpoint, the decorator the worker puts around its
CloudProvider, and the gauges the controller recomputes every few seconds from the objects its watch keeps.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server
from temporalio import activity

from activities.metrics import PROVIDER, Metrics, resource_type, resource_value
from core import labels
from core.api.kube import (
    DEFAULT_NAMESPACE,
    Node,
    Pod,
    is_daemonset_pod,
    is_pod_ready,
    is_terminal,
    pod_requests,
)
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.cloudprovider import CloudProvider, Instance, LaunchRequest
from core.cluster import EventType, WatchEvent
from core.errors import CloudError, NotFoundError
from core.messages import ActivityName
from core.resources import Resources, merge, parse_resources

logger = logging.getLogger("nodewright.metrics")

CONTROLLERS: dict[str, str] = {
    ActivityName.LAUNCH_NODECLAIM: "nodeclaim.lifecycle",
    ActivityName.DELETE_INSTANCE: "nodeclaim.termination",
}
"""The `controller` label of a cloud call: the Karpenter controller that makes it, by the activity making it."""


def serve_metrics(port: int, registry: CollectorRegistry = REGISTRY, addr: str = "0.0.0.0") -> WSGIServer:
    """Serve `/metrics` in Prometheus' text format from a background thread; port 0 picks a free one
    (`server.server_port` says which). `shutdown()` on the result stops it."""
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return server


def nodewright_version() -> str:
    try:
        return version("nodewright")
    except PackageNotFoundError:
        return "unknown"


def set_build_info(metrics: Metrics) -> None:
    metrics.build_info.labels(version=nodewright_version()).set(1)


def error_label(error: Exception) -> str:
    """The `error` label: the kind of failure. Karpenter's names where it has one (`NodeClaimNotFoundError`,
    `InsufficientCapacityError`), our `core.errors` kind otherwise (`QuotaExceededError`, `ThrottledError`,
    ...), and `UnknownError` for anything that is not a cloud error."""
    if isinstance(error, NotFoundError):
        return "NodeClaimNotFoundError"
    return type(error).__name__ if isinstance(error, CloudError) else "UnknownError"


class MeteredCloudProvider:
    """A CloudProvider that records how long each call took and how it failed, then does what the wrapped one
    does: Karpenter's `cloudprovider_duration_seconds` and `cloudprovider_errors_total`."""

    def __init__(self, cloud: CloudProvider, metrics: Metrics, provider: str = PROVIDER) -> None:
        self.cloud = cloud
        self.metrics = metrics
        self.provider = provider

    @contextmanager
    def _measure(self, method: str) -> Iterator[None]:
        name = activity.info().activity_type if activity.in_activity() else ""
        controller = CONTROLLERS.get(name, name)
        start = time.perf_counter()
        try:
            yield
        except Exception as error:  # a cancelled call is no error
            self.metrics.cloud_errors.labels(
                controller=controller, method=method, provider=self.provider, error=error_label(error)
            ).inc()
            raise
        finally:
            self.metrics.cloud_duration.labels(
                controller=controller, method=method, provider=self.provider
            ).observe(time.perf_counter() - start)

    async def create(self, request: LaunchRequest) -> Instance:
        with self._measure("Create"):
            return await self.cloud.create(request)

    async def get(self, name: str) -> Instance:
        with self._measure("Get"):
            return await self.cloud.get(name)

    async def list(self) -> list[Instance]:
        with self._measure("List"):
            return await self.cloud.list()

    async def delete(self, name: str) -> None:
        with self._measure("Delete"):
            await self.cloud.delete(name)


def _node_labels(node: Node) -> dict[str, str]:
    node_labels = node.metadata.labels
    return {
        "node_name": node.metadata.name,
        "nodepool": node_labels.get(labels.NODEPOOL, ""),
        "instance_type": node_labels.get(labels.INSTANCE_TYPE, ""),
        "capacity_type": node_labels.get(labels.CAPACITY_TYPE, ""),
        "zone": node_labels.get(labels.ZONE, ""),
        "region": node_labels.get(labels.REGION, ""),
        "arch": node_labels.get(labels.ARCH, ""),
        "os": node_labels.get(labels.OS, ""),
    }


def _pod_state(pod: Pod, node: Node | None) -> dict[str, str]:
    """`karpenter_pods_state`'s labels: the pod's and, once it is bound, its node's, as Karpenter writes them
    (the owner as the self link Karpenter builds from the first owner reference)."""
    owners = pod.metadata.owner_references
    namespace = pod.metadata.namespace or DEFAULT_NAMESPACE
    owner = (
        f"/apis/{owners[0].api_version}/namespaces/{namespace}/{owners[0].kind.lower()}s/{owners[0].name}"
        if owners
        else ""
    )
    node_labels = node.metadata.labels if node is not None else {}
    return {
        "name": pod.metadata.name,
        "namespace": namespace,
        "owner": owner,
        "node": pod.spec.node_name or "",
        "scheduled": "true" if pod.spec.node_name else "false",
        "nodepool": node_labels.get(labels.NODEPOOL, ""),
        "zone": node_labels.get(labels.ZONE, ""),
        "arch": node_labels.get(labels.ARCH, ""),
        "capacity_type": node_labels.get(labels.CAPACITY_TYPE, ""),
        "instance_type": node_labels.get(labels.INSTANCE_TYPE, ""),
        "phase": pod.status.phase or "",
        "ready": "true" if is_pod_ready(pod) else "false",
        "managed": "true" if node_labels.get(labels.NODEPOOL) else "false",
    }


class PodStartup:
    """`karpenter_pods_startup_duration_seconds`, as Karpenter measures it: a pod seen Pending is observed once
    it is Ready, from its creation to its Ready condition's transition; a pod that ends (or goes) first, or that
    was never seen Pending, is not."""

    def __init__(self) -> None:
        self.pending: set[tuple[str, str]] = set()

    def observe(self, metrics: Metrics, pods: list[Pod]) -> None:
        present: set[tuple[str, str]] = set()
        for pod in pods:
            key = (pod.metadata.namespace or DEFAULT_NAMESPACE, pod.metadata.name)
            present.add(key)
            if pod.status.phase == "Pending":
                self.pending.add(key)
            elif key in self.pending:
                ready = next(
                    (c for c in pod.status.conditions if c.type == "Ready" and c.status == "True"), None
                )
                created = pod.metadata.creation_timestamp
                if ready is not None and ready.last_transition_time is not None and created is not None:
                    metrics.pods_startup_duration.observe(
                        (ready.last_transition_time - created).total_seconds()
                    )
                    self.pending.discard(key)
                elif is_terminal(pod):
                    self.pending.discard(key)
        self.pending &= present


class GaugeSeries:
    """A gauge's series, set afresh at each computation: each series' child is kept between computations (asking
    the gauge for it by labels costs more than the value: thousands of pods and nodes each time), and `finish`
    removes the series that were not set again."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self._children: dict[tuple[str, ...], Any] = {}
        self._set: set[tuple[str, ...]] = set()

    def set(self, value: float, **label_values: str) -> None:
        key = tuple(label_values[name] for name in self.gauge._labelnames)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.gauge.labels(*key)
        child.set(value)
        self._set.add(key)

    def finish(self) -> None:
        for key in [key for key in self._children if key not in self._set]:
            self.gauge.remove(*key)
            del self._children[key]
        self._set = set()


_SERIES: weakref.WeakKeyDictionary[Gauge, GaugeSeries] = weakref.WeakKeyDictionary()


def _series(gauge: Gauge) -> GaugeSeries:
    series = _SERIES.get(gauge)
    if series is None:
        series = _SERIES[gauge] = GaugeSeries(gauge)
    return series


def update_cluster_state(metrics: Metrics, manifests: Manifests, startup: PodStartup | None = None) -> None:
    """Set the cluster-state gauges from one snapshot; series of nodes, pools and pods that are gone disappear.
    With `startup`, also observe the pods that started since the last snapshot."""
    if startup is not None:
        startup.observe(metrics, manifests.pods)
    nodes = {node.metadata.name: node for node in manifests.nodes}
    pods_state = _series(metrics.pods_state)
    for pod in manifests.pods:
        pods_state.set(1, **_pod_state(pod, nodes.get(pod.spec.node_name or "")))
    allocatable, pod_requests_series, daemon_requests, usage, limit = (
        _series(gauge)
        for gauge in (
            metrics.nodes_allocatable,
            metrics.nodes_pod_requests,
            metrics.nodes_daemon_requests,
            metrics.nodepools_usage,
            metrics.nodepools_limit,
        )
    )
    metrics.cluster_state_node_count.set(len(manifests.nodes))
    pods: dict[str, Resources] = {}
    daemons: dict[str, Resources] = {}
    for pod in manifests.pods:
        if pod.spec.node_name and not is_terminal(pod):
            bucket = daemons if is_daemonset_pod(pod) else pods
            host = pod.spec.node_name
            bucket[host] = merge(bucket.get(host, {}), pod_requests(pod))
    for node in manifests.nodes:
        node_labels = _node_labels(node)
        name = node.metadata.name
        for series, resources in (
            (allocatable, parse_resources(node.status.allocatable)),
            (pod_requests_series, pods.get(name, {})),
            (daemon_requests, daemons.get(name, {})),
        ):
            for resource, amount in resources.items():
                series.set(
                    resource_value(resource, amount), **node_labels, resource_type=resource_type(resource)
                )
    for pool in manifests.nodepools:
        # As Karpenter's: what the NodePool's status says it has provisioned (`workers.controller.nodepool_status`).
        for resource, amount in parse_resources(pool.status.resources).items():
            usage.set(
                resource_value(resource, amount), nodepool=pool.name, resource_type=resource_type(resource)
            )
        for resource, amount in pool.resource_limits.items():
            limit.set(
                resource_value(resource, amount), nodepool=pool.name, resource_type=resource_type(resource)
            )
    for series in (pods_state, allocatable, pod_requests_series, daemon_requests, usage, limit):
        series.finish()


_GAUGE_KINDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Pod": Pod.model_validate,
    "Node": Node.model_validate,
    "NodeClaim": NodeClaim.parse,
    "NodePool": NodePool.parse,
}


class WatchedClusterState:
    """The objects the cluster-state gauges are computed from, kept by the controller's watch: no snapshot, no
    request to the API server. Each object is parsed when the gauges are next computed after it changed."""

    def __init__(self) -> None:
        self._raw: dict[str, dict[tuple[str | None, str], dict[str, Any]]] = {
            kind: {} for kind in _GAUGE_KINDS
        }
        self._parsed: dict[str, dict[tuple[str | None, str], Any]] = {kind: {} for kind in _GAUGE_KINDS}
        self.changed = False
        self.startup = PodStartup()

    def observe(self, event: WatchEvent) -> None:
        raw = self._raw.get(event.kind)
        if raw is None:
            return
        key = (event.namespace, event.name)
        self._parsed[event.kind].pop(key, None)
        if event.type is EventType.DELETED:
            raw.pop(key, None)
        else:
            raw[key] = event.object
        self.changed = True

    def _objects(self, kind: str) -> list[Any]:
        parse, parsed = _GAUGE_KINDS[kind], self._parsed[kind]
        for key, raw in self._raw[kind].items():
            if key not in parsed:
                try:
                    parsed[key] = parse(raw)
                except ValueError as error:  # an object we cannot read is no reason to stop the gauges
                    logger.debug("cluster-state gauges skip %s %s: %s", kind, key[1], error)
                    parsed[key] = None
        return [item for item in parsed.values() if item is not None]

    def manifests(self) -> Manifests:
        self.changed = False
        return Manifests(
            pods=self._objects("Pod"),
            nodes=self._objects("Node"),
            nodeclaims=self._objects("NodeClaim"),
            nodepools=self._objects("NodePool"),
        )


async def keep_cluster_state(
    state: WatchedClusterState, metrics: Metrics, period_seconds: float = 5.0
) -> None:
    """Recompute the cluster-state gauges from what the watch saw, every `period_seconds` in which something
    changed, until cancelled."""
    while True:
        if state.changed:
            update_cluster_state(metrics, state.manifests(), state.startup)
        await asyncio.sleep(period_seconds)


def _by_label(counter: Counter, label: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = sample.labels[label]
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def metrics_summary(metrics: Metrics) -> str:
    """One line for the demo's end: NodeClaims created and disrupted by reason, and terminated."""

    def part(what: str, totals: dict[str, float]) -> str:
        reasons = ", ".join(f"{reason} {value:g}" for reason, value in sorted(totals.items()))
        return f"{what} {sum(totals.values()):g}" + (f" ({reasons})" if reasons else "")

    terminated = sum(_by_label(metrics.nodeclaims_terminated, "nodepool").values())
    return (
        f"{part('karpenter_nodeclaims_created_total', _by_label(metrics.nodeclaims_created, 'reason'))}; "
        f"{part('karpenter_nodeclaims_disrupted_total', _by_label(metrics.nodeclaims_disrupted, 'reason'))}; "
        f"karpenter_nodeclaims_terminated_total {terminated:g}"
    )
