"""Serving Karpenter's metrics (`/metrics`), timing the cloud provider's calls, and the cluster-state gauges.

The metrics themselves are defined in `activities.metrics`, where the activities that count them can import
them; this module holds what only processes do: the HTTP endpoint, the decorator the worker puts around its
CloudProvider, and the cluster-state gauges the controller keeps, every few seconds, from what its watch saw change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
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

    async def create_failure(self, name: str) -> CloudError | None:
        with self._measure("Get"):
            return await self.cloud.create_failure(name)

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

    def see(self, metrics: Metrics, pod: Pod) -> None:
        """A pod as it is now (new or changed)."""
        key = (pod.metadata.namespace or DEFAULT_NAMESPACE, pod.metadata.name)
        if pod.status.phase == "Pending":
            self.pending.add(key)
        elif key in self.pending:
            ready = next((c for c in pod.status.conditions if c.type == "Ready" and c.status == "True"), None)
            created = pod.metadata.creation_timestamp
            if ready is not None and ready.last_transition_time is not None and created is not None:
                metrics.pods_startup_duration.observe((ready.last_transition_time - created).total_seconds())
                self.pending.discard(key)
            elif is_terminal(pod):
                self.pending.discard(key)

    def forget(self, namespace: str, name: str) -> None:
        """A pod that is gone."""
        self.pending.discard((namespace or DEFAULT_NAMESPACE, name))


Series = tuple[Gauge, tuple[str, ...]]
"""One series of a gauge: the gauge and its label values in the gauge's order."""


def _series(gauge: Gauge, **label_values: str) -> Series:
    return gauge, tuple(label_values[name] for name in gauge._labelnames)


class ClusterStateGauges:
    """Karpenter's cluster-state gauges (`karpenter_pods_state`, `karpenter_nodes_*`, `karpenter_nodepools_*`,
    `karpenter_cluster_state_node_count`), kept object by object as Karpenter's metrics controllers keep them.

    `pod`, `node` and `nodepool` record an object as it is now (None: gone); `flush` sets the series of what
    changed since the last flush, and removes those no longer true: a pod's state series, and each node's
    allocatable and requests (a pod's change touches its node's requests; a node's labels, its pods' series).
    The cost of a flush follows what changed, not the size of the cluster."""

    def __init__(self, metrics: Metrics, startup: PodStartup | None = None) -> None:
        self.metrics = metrics
        self.startup = startup or PodStartup()
        self._nodes: dict[str, Node] = {}
        self._pods: dict[tuple[str, str], Pod] = {}
        self._pools: dict[str, NodePool] = {}
        self._pods_on: dict[str, set[tuple[str, str]]] = {}
        self._set: dict[tuple[str, str], list[Series]] = {}
        """What each object set, by ("pod:<namespace>", name), ("node", name) or ("nodepool", name)."""
        self._changed_pods: dict[tuple[str, str], Pod | None] = {}
        self._changed_nodes: dict[str, Node | None] = {}
        self._changed_pools: dict[str, NodePool | None] = {}

    def pod(self, namespace: str, name: str, pod: Pod | None) -> None:
        self._changed_pods[(namespace or DEFAULT_NAMESPACE, name)] = pod

    def node(self, name: str, node: Node | None) -> None:
        self._changed_nodes[name] = node

    def nodepool(self, name: str, pool: NodePool | None) -> None:
        self._changed_pools[name] = pool

    def known(self) -> tuple[set[tuple[str, str]], set[str], set[str]]:
        """The pods, nodes and NodePools the gauges hold now, changes not flushed yet included."""

        def present(held: Iterable[Any], changed: dict[Any, Any]) -> set[Any]:
            return (set(held) | set(changed)) - {key for key, value in changed.items() if value is None}

        return (
            present(self._pods, self._changed_pods),
            present(self._nodes, self._changed_nodes),
            present(self._pools, self._changed_pools),
        )

    def flush(self) -> None:
        metrics = self.metrics
        touched: set[str] = set()
        for name, node in self._changed_nodes.items():
            old = self._nodes.pop(name, None)
            if node is not None:
                self._nodes[name] = node
            touched.add(name)
            if old is None or node is None or old.metadata.labels != node.metadata.labels:
                for key in self._pods_on.get(name, ()):
                    self._changed_pods.setdefault(key, self._pods[key])
        for (namespace, name), pod in self._changed_pods.items():
            key = (namespace, name)
            before = self._pods.pop(key, None)
            if before is not None and before.spec.node_name:
                self._pods_on[before.spec.node_name].discard(key)
                touched.add(before.spec.node_name)
            if pod is None:
                self.startup.forget(namespace, name)
                self._replace(("pod:" + namespace, name), [])
                continue
            self._pods[key] = pod
            host = pod.spec.node_name
            if host:
                self._pods_on.setdefault(host, set()).add(key)
                touched.add(host)
            self.startup.see(metrics, pod)
            state = _pod_state(pod, self._nodes.get(host or ""))
            self._replace(("pod:" + namespace, name), [(_series(metrics.pods_state, **state), 1.0)])
        for name in touched:
            self._replace(("node", name), self._node_values(name))
            if not self._pods_on.get(name, True):
                del self._pods_on[name]
        for name, pool in self._changed_pools.items():
            self._pools.pop(name, None)
            if pool is not None:
                self._pools[name] = pool
            self._replace(("nodepool", name), self._pool_values(pool))
        metrics.cluster_state_node_count.set(len(self._nodes))
        self._changed_nodes, self._changed_pods, self._changed_pools = {}, {}, {}

    def _node_values(self, name: str) -> list[tuple[Series, float]]:
        node = self._nodes.get(name)
        if node is None:
            return []
        metrics, node_labels = self.metrics, _node_labels(node)
        pods: Resources = {}
        daemons: Resources = {}
        for key in self._pods_on.get(name, ()):
            pod = self._pods[key]
            if not is_terminal(pod):
                if is_daemonset_pod(pod):
                    daemons = merge(daemons, pod_requests(pod))
                else:
                    pods = merge(pods, pod_requests(pod))
        values = []
        for gauge, resources in (
            (metrics.nodes_allocatable, parse_resources(node.status.allocatable)),
            (metrics.nodes_pod_requests, pods),
            (metrics.nodes_daemon_requests, daemons),
        ):
            for resource, amount in resources.items():
                series = _series(gauge, **node_labels, resource_type=resource_type(resource))
                values.append((series, resource_value(resource, amount)))
        return values

    def _pool_values(self, pool: NodePool | None) -> list[tuple[Series, float]]:
        if pool is None:
            return []
        metrics = self.metrics
        values = []
        # As Karpenter's: what the NodePool's status says it has provisioned (`workers.controller.nodepool_status`).
        for gauge, resources in (
            (metrics.nodepools_usage, parse_resources(pool.status.resources)),
            (metrics.nodepools_limit, pool.resource_limits),
        ):
            for resource, amount in resources.items():
                series = _series(gauge, nodepool=pool.name, resource_type=resource_type(resource))
                values.append((series, resource_value(resource, amount)))
        return values

    def _replace(self, owner: tuple[str, str], values: list[tuple[Series, float]]) -> None:
        """Set what `owner` sets now, and remove the series it set before and no longer does."""
        now = {series for series, _ in values}
        for gauge, label_values in self._set.pop(owner, ()):
            if (gauge, label_values) not in now:
                with contextlib.suppress(KeyError):
                    gauge.remove(*label_values)
        for (gauge, label_values), amount in values:
            gauge.labels(*label_values).set(amount)
        if values:
            self._set[owner] = list(now)


_GAUGES: weakref.WeakKeyDictionary[Metrics, ClusterStateGauges] = weakref.WeakKeyDictionary()


def update_cluster_state(metrics: Metrics, manifests: Manifests, startup: PodStartup | None = None) -> None:
    """Set the cluster-state gauges from one snapshot of the whole cluster: what is not in it any more is gone,
    and its series with it. With `startup`, also observe the pods that started since the last snapshot."""
    gauges = _GAUGES.get(metrics)
    if gauges is None:
        gauges = _GAUGES[metrics] = ClusterStateGauges(metrics)
    if startup is not None:
        gauges.startup = startup
    pods, nodes, pools = gauges.known()
    for pod in manifests.pods:
        namespace = pod.metadata.namespace or DEFAULT_NAMESPACE
        gauges.pod(namespace, pod.metadata.name, pod)
        pods.discard((namespace, pod.metadata.name))
    for node in manifests.nodes:
        gauges.node(node.metadata.name, node)
        nodes.discard(node.metadata.name)
    for pool in manifests.nodepools:
        gauges.nodepool(pool.name, pool)
        pools.discard(pool.name)
    for namespace, name in pods:
        gauges.pod(namespace, name, None)
    for name in nodes:
        gauges.node(name, None)
    for name in pools:
        gauges.nodepool(name, None)
    gauges.flush()


_GAUGE_KINDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Pod": Pod.model_validate,
    "Node": Node.model_validate,
    "NodePool": NodePool.parse,
}


class WatchedClusterState:
    """The cluster-state gauges kept from the controller's watch: no snapshot, no request to the API server.
    Each changed object is parsed when the gauges are next flushed (`update`), and only what changed is set
    again."""

    def __init__(self) -> None:
        self._changed: dict[tuple[str, str | None, str], dict[str, Any] | None] = {}
        self.startup = PodStartup()
        self._gauges: ClusterStateGauges | None = None

    @property
    def changed(self) -> bool:
        """Whether the watch saw something change since the last update."""
        return bool(self._changed)

    def observe(self, event: WatchEvent) -> None:
        if event.kind not in _GAUGE_KINDS:
            return
        gone = event.type is EventType.DELETED
        self._changed[(event.kind, event.namespace, event.name)] = None if gone else event.object

    def update(self, metrics: Metrics) -> None:
        """Set the gauges of what changed since the last update."""
        gauges = self._gauges
        if gauges is None or gauges.metrics is not metrics:
            gauges = self._gauges = ClusterStateGauges(metrics, self.startup)
        changed, self._changed = self._changed, {}
        for (kind, namespace, name), raw in changed.items():
            parsed = None
            if raw is not None:
                try:
                    parsed = _GAUGE_KINDS[kind](raw)
                except ValueError as error:  # an object we cannot read is no reason to stop the gauges
                    logger.debug("cluster-state gauges skip %s %s: %s", kind, name, error)
            if kind == "Pod":
                gauges.pod(namespace or DEFAULT_NAMESPACE, name, parsed)
            elif kind == "Node":
                gauges.node(name, parsed)
            else:
                gauges.nodepool(name, parsed)
        gauges.flush()


async def keep_cluster_state(
    state: WatchedClusterState, metrics: Metrics, period_seconds: float = 5.0
) -> None:
    """Set the cluster-state gauges of what the watch saw change, every `period_seconds` in which something
    changed, until cancelled."""
    while True:
        if state.changed:
            state.update(metrics)
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
