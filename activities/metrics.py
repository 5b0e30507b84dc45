"""Karpenter's Prometheus metrics (`karpenter_*`): names, types, labels and label values as Karpenter's own.

Defined once, on a registry the caller chooses (the process-wide one in the worker and controller, a fresh
`CollectorRegistry` in tests), and recorded where the change happens: activities count what they did, the
controller sets the cluster-state gauges from its snapshots.

An activity can be retried after it did its work and before Temporal heard of it, and a naive counter would
then count twice. So every counting site checks that this attempt made the change (the NodeClaim did not
exist yet, the condition was not already set, the finalizer or the registered label was not there yet); a
worker that dies between the change and the count loses that one count instead.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import StrEnum

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Metric
from prometheus_client.registry import Collector

from core import labels
from core.api.kube import Node
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.disruption.bound import PlanCost
from core.disruption.budgets import BudgetStatus
from core.instancetypes.types import dollars
from core.messages import ConditionUpdate

DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60, 120, 150,
    300, 450, 600,
)  # fmt: skip
"""Karpenter's `DurationBuckets()` (controller-runtime's, plus the long tail of singleton controllers)."""

UNLIMITED = 2**31 - 1
"""What Karpenter reports as the allowed disruptions of a reason no active budget limits (`math.MaxInt32`)."""

PROVIDER = "azure"
"""The `provider` label of the cloud provider metrics: what the AKS provider's `Name()` returns."""

NODE_LABELS = (
    "node_name",
    "nodepool",
    "instance_type",
    "capacity_type",
    "zone",
    "region",
    "arch",
    "os",
    "resource_type",
)
"""The labels of the per-node resource gauges: Karpenter's well-known node labels in snake case, the node's
name and the resource."""


POD_STATE_LABELS = (
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
)
"""The labels of `karpenter_pods_state`, in Karpenter's order."""
SUMMARY_QUANTILES = (0.0, 0.5, 0.9, 0.99, 1.0)
"""Karpenter's `SummaryObjectives()`."""
SUMMARY_MAX_AGE_SECONDS = 600.0
"""How long an observation counts towards the quantiles (the Prometheus client's default MaxAge)."""


class WindowedSummary(Collector):
    """A Prometheus summary with quantiles, as Karpenter's (prometheus_client's own Summary has none): the
    quantiles of the observations of the last `max_age_seconds`, with the count and sum of all of them."""

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: CollectorRegistry,
        max_age_seconds: float = SUMMARY_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._recent: deque[tuple[float, float]] = deque()
        self._count = 0
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: float) -> None:
        with self._lock:
            self._recent.append((self._clock(), value))
            self._count += 1
            self._sum += value

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            oldest = self._clock() - self.max_age_seconds
            while self._recent and self._recent[0][0] < oldest:
                self._recent.popleft()
            values = sorted(value for _, value in self._recent)
            count, total = self._count, self._sum
        family = Metric(self.name, self.documentation, "summary")
        for quantile in SUMMARY_QUANTILES:
            rank = min(len(values) - 1, int(quantile * len(values)))
            family.add_sample(
                self.name, {"quantile": f"{quantile:g}"}, values[rank] if values else float("nan")
            )
        family.add_sample(f"{self.name}_count", {}, float(count))
        family.add_sample(f"{self.name}_sum", {}, total)
        yield family


class CreatedReason(StrEnum):
    """Why a NodeClaim was created: `nodeclaims_created_total{reason}`."""

    PROVISIONED = "provisioned"
    """Karpenter's `ProvisionedReason`; replacements carry their disruption reason in lower case instead."""


class DisruptedReason(StrEnum):
    """Why a NodeClaim was disrupted: `nodeclaims_disrupted_total{reason}`, in Karpenter's words."""

    UNDERUTILIZED = "underutilized"
    EMPTY = "empty"
    DRIFTED = "drifted"
    EXPIRED = "expired"
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    LAUNCH_TIMEOUT = "launch_timeout"
    REGISTRATION_TIMEOUT = "registration_timeout"
    ASYNC_PROVISIONING = "async_provisioning"
    """The AKS provider's reason for a NodeClaim deleted because its instance's creation failed."""
    INTERRUPTED = "interrupted"
    UNHEALTHY = "unhealthy"


class TerminationMode(StrEnum):
    """`nodeclaims_disrupted_total{termination_mode}`: drained within a grace period, or without one."""

    GRACEFUL = "graceful"
    EVENTUAL = "eventual"


CONSOLIDATION_TYPES = {
    "emptiness": "empty",
    "single-node-consolidation": "single",
    "multi-node-consolidation": "multi",
}
"""`consolidation_type` per disruption method, as Karpenter's methods name themselves (drift and expiration: "")."""


def consolidation_type(method: str, candidates: int = 1) -> str:
    """A repack is labelled as Karpenter labels a consolidation of as many nodes: single or multi."""
    if method == "repack":
        return "multi" if candidates > 1 else "single"
    return CONSOLIDATION_TYPES.get(method, "")


def snake_case(text: str) -> str:
    """Karpenter's `pretty.ToSnakeCase`: "WhenEmptyOrUnderutilized" -> "when_empty_or_underutilized"."""
    snake = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", text)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", snake).lower().replace("-", "_")


def disrupted_reason(update: ConditionUpdate) -> str | None:
    """The disruption a NodeClaim condition update records, if any: the `DisruptionReason` condition a
    disruption command sets, and the launch and registration failures Karpenter counts as disruptions."""
    if update.disrupted:
        return update.disrupted
    if update.type == "DisruptionReason" and update.status == "True":
        return snake_case(update.reason)
    if update.type == "Launched" and update.status == "False" and update.reason == "LaunchFailed":
        return DisruptedReason.INSUFFICIENT_CAPACITY
    if update.type == "Registered" and update.status == "False" and update.reason == "RegistrationTimeout":
        return DisruptedReason.REGISTRATION_TIMEOUT
    return None


def consolidation_policy(reason: str, pool: NodePool | None) -> str:
    """The `consolidation_policy` label: the NodePool's policy for consolidation reasons, else empty (drift
    and expiration do not consolidate)."""
    if pool is None or reason not in (DisruptedReason.UNDERUTILIZED, DisruptedReason.EMPTY):
        return ""
    return snake_case(pool.spec.disruption.consolidation_policy.value)


def termination_mode(pool: NodePool | None) -> TerminationMode:
    """Eventual when the NodePool bounds the drain with a terminationGracePeriod, else graceful."""
    if pool is not None and pool.spec.template.spec.termination_grace_period is not None:
        return TerminationMode.EVENTUAL
    return TerminationMode.GRACEFUL


def resource_type(name: str) -> str:
    """The `resource_type` label of a resource name, as Karpenter writes it (`ephemeral-storage` ->
    `ephemeral_storage`)."""
    return name.lower().replace("-", "_")


def resource_value(name: str, amount: int) -> float:
    """A `core.resources` amount as Karpenter's gauges report it: CPU in cores, the rest in units."""
    return amount / 1000 if name == "cpu" else float(amount)


class Metrics:
    """Every `karpenter_*` metric nodewright records, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.nodeclaims_created = Counter(
            "karpenter_nodeclaims_created_total",
            "NodeClaims created, by why (provisioning or a disruption reason), NodePool and whether minValues "
            "was relaxed.",
            ["reason", "nodepool", "min_values_relaxed"],
            registry=registry,
        )
        self.nodeclaims_terminated = Counter(
            "karpenter_nodeclaims_terminated_total",
            "NodeClaims whose termination finished, by NodePool, capacity type and zone.",
            ["nodepool", "capacity_type", "zone"],
            registry=registry,
        )
        self.nodeclaims_disrupted = Counter(
            "karpenter_nodeclaims_disrupted_total",
            "NodeClaims disrupted, by reason (underutilized, empty, drifted, expired, interrupted, unhealthy, "
            "insufficient_capacity, launch_timeout, registration_timeout, async_provisioning), NodePool, "
            "capacity type, consolidation policy and termination mode.",
            ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
            registry=registry,
        )
        self.disruption_decisions = Counter(
            "karpenter_voluntary_disruption_decisions_total",
            "Disruption decisions performed, by decision (delete, replace), reason and consolidation type.",
            ["decision", "reason", "consolidation_type"],
            registry=registry,
        )
        self.nodes_created = Counter(
            "karpenter_nodes_created_total",
            "Nodes that registered for a NodeClaim, by NodePool and zone.",
            ["nodepool", "zone"],
            registry=registry,
        )
        self.nodes_terminated = Counter(
            "karpenter_nodes_terminated_total",
            "Nodes deleted once their NodeClaim terminated, by NodePool and zone.",
            ["nodepool", "zone"],
            registry=registry,
        )
        self.allowed_disruptions = Gauge(
            "karpenter_nodepools_allowed_disruptions",
            "How many nodes of a NodePool its active budgets let disrupt at once for a reason (Underutilized, "
            "Empty, Drifted), as of the last disruption pass.",
            ["nodepool", "reason"],
            registry=registry,
        )
        self.cloud_duration = Histogram(
            "karpenter_cloudprovider_duration_seconds",
            "Time spent in CloudProvider calls, by the controller that made them, method and provider.",
            ["controller", "method", "provider"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.cloud_errors = Counter(
            "karpenter_cloudprovider_errors_total",
            "CloudProvider calls that failed, by controller, method, provider and error kind.",
            ["controller", "method", "provider", "error"],
            registry=registry,
        )
        self.interruption_received = Counter(
            "karpenter_interruption_received_messages_total",
            "Interruption notices received (a Node's PreemptionScheduled=True: a Spot VM's Preempt Scheduled Event), "
            "by message type.",
            ["message_type"],
            registry=registry,
        )
        self.interruption_deleted = Counter(
            "karpenter_interruption_deleted_messages_total",
            "Interruption notices handled: their NodeClaim's lifecycle was told.",
            registry=registry,
        )
        self.interruption_queue_duration = Histogram(
            "karpenter_interruption_message_queue_duration_seconds",
            "From an interruption notice reaching the cluster (the condition's lastTransitionTime) to its handling.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.cluster_cost = Gauge(
            "nodewright_cluster_cost_dollars_per_hour",
            "What the nodes of the NodePools cost per hour, as of the last disruption pass: now, after its plan, and "
            "the lower bound no plan made then could beat (`core.disruption.bound`).",
            ["state"],
            registry=registry,
        )
        self.cost_gap = Gauge(
            "nodewright_consolidation_gap_dollars_per_hour",
            "What the last disruption pass's plan leaves above the lower bound, per hour.",
            registry=registry,
        )
        self.cluster_state_node_count = Gauge(
            "karpenter_cluster_state_node_count",
            "Nodes in the cluster as the controller last saw it.",
            registry=registry,
        )
        self.nodes_allocatable = Gauge(
            "karpenter_nodes_allocatable",
            "What each node can allocate to pods, per resource (CPU in cores, memory in bytes).",
            NODE_LABELS,
            registry=registry,
        )
        self.nodes_pod_requests = Gauge(
            "karpenter_nodes_total_pod_requests",
            "What the pods bound to each node request, DaemonSet pods excepted, per resource.",
            NODE_LABELS,
            registry=registry,
        )
        self.nodes_daemon_requests = Gauge(
            "karpenter_nodes_total_daemon_requests",
            "What the DaemonSet pods bound to each node request, per resource.",
            NODE_LABELS,
            registry=registry,
        )
        self.nodepools_usage = Gauge(
            "karpenter_nodepools_usage",
            "Capacity of the NodeClaims a NodePool has launched, per resource (what its limits count).",
            ["nodepool", "resource_type"],
            registry=registry,
        )
        self.nodepools_limit = Gauge(
            "karpenter_nodepools_limit",
            "A NodePool's spec.limits, per resource.",
            ["nodepool", "resource_type"],
            registry=registry,
        )
        self.nodeclaims_unhealthy_disrupted = Counter(
            "karpenter_nodeclaims_unhealthy_disrupted_total",
            "Unhealthy NodeClaims that node repair disrupted, by the node condition that made them unhealthy (in "
            "snake case), NodePool, capacity type and image ID.",
            ["condition", "nodepool", "capacity_type", "image_id"],
            registry=registry,
        )
        self.pods_state = Gauge(
            "karpenter_pods_state",
            "Always 1 per pod; its labels say where it is: its name, namespace, owner, node, whether it is "
            "scheduled, the node's NodePool, zone, architecture, capacity type and instance type, the pod's "
            "phase, whether it is ready, and whether a NodePool manages its node.",
            POD_STATE_LABELS,
            registry=registry,
        )
        self.pods_startup_duration = WindowedSummary(
            "karpenter_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running (Ready).",
            registry=registry,
        )
        self.nodepools_cost = Gauge(
            "karpenter_nodepools_cost_total",
            "What a NodePool's launched NodeClaims cost per hour at their offerings' prices (US dollars, NodeOverlay "
            "price adjustments included), as of the last automatic disruption pass. Not a bill.",
            ["nodepool"],
            registry=registry,
        )
        self.bootstrap_token_rotations = Counter(
            "nodewright_bootstrap_token_rotations_total",
            "Node bootstrap tokens created by the rotation.",
            registry=registry,
        )
        self.bootstrap_token_expiration = Gauge(
            "nodewright_bootstrap_token_expiration_timestamp_seconds",
            "When the bootstrap token new nodes join with expires (Unix time; +Inf when it never does), as of the "
            "last rotation step this process ran.",
            registry=registry,
        )
        self.build_info = Gauge(
            "karpenter_build_info",
            "Always 1; the version label says which nodewright is running.",
            ["version"],
            registry=registry,
        )

    # ------------------------------------------------------------------------------ what activities count

    def nodeclaim_created(self, reason: str, nodepool: str, min_values_relaxed: bool) -> None:
        relaxed = "true" if min_values_relaxed else "false"
        self.nodeclaims_created.labels(reason=reason, nodepool=nodepool, min_values_relaxed=relaxed).inc()

    def nodeclaim_terminated(self, claim: NodeClaim) -> None:
        self.nodeclaims_terminated.labels(
            nodepool=claim.labels.get(labels.NODEPOOL, ""),
            capacity_type=claim.labels.get(labels.CAPACITY_TYPE, ""),
            zone=claim.labels.get(labels.ZONE, ""),
        ).inc()

    def nodeclaim_disrupted(self, reason: str, claim: NodeClaim, pool: NodePool | None) -> None:
        self.nodeclaims_disrupted.labels(
            reason=reason,
            nodepool=claim.labels.get(labels.NODEPOOL, ""),
            capacity_type=claim.labels.get(labels.CAPACITY_TYPE, ""),
            consolidation_policy=consolidation_policy(reason, pool),
            termination_mode=termination_mode(pool).value,
        ).inc()

    def set_allowed_disruptions(self, budgets: Sequence[BudgetStatus]) -> None:
        """Replace the gauge with one plan's budgets: how many nodes each pool's active budgets let disrupt at
        once for each reason (Karpenter's `MaxInt32` when none is active), whatever is disrupting already."""
        self.allowed_disruptions.clear()
        for status in budgets:
            limit = status.limit
            allowed = UNLIMITED if limit.limit is None else limit.limit
            self.allowed_disruptions.labels(nodepool=limit.nodepool, reason=limit.reason.value).set(allowed)

    def set_nodepool_costs(self, costs: Mapping[str, int]) -> None:
        """Replace the gauge with one plan's costs per NodePool (micro-dollars an hour; NodePools gone drop out)."""
        self.nodepools_cost.clear()
        for nodepool, micros in costs.items():
            self.nodepools_cost.labels(nodepool=nodepool).set(micros / 1_000_000)

    def set_cluster_cost(self, cost: PlanCost) -> None:
        """The cluster's cost now, after the plan and its bound, and the gap."""
        for state, micros in (
            ("now", cost.now_micros),
            ("after_plan", cost.after_micros),
            ("lower_bound", cost.bound_micros),
        ):
            self.cluster_cost.labels(state=state).set(dollars(micros))
        self.cost_gap.set(dollars(cost.gap_micros))

    def disruption_decided(self, decision: str, reason: str, method: str, candidates: int = 1) -> None:
        self.disruption_decisions.labels(
            decision=decision,
            reason=reason.lower(),
            consolidation_type=consolidation_type(method, candidates),
        ).inc()

    def nodeclaim_unhealthy_disrupted(self, condition: str, node: Node | None, claim: NodeClaim) -> None:
        """Node repair disrupted the NodeClaim for this node condition type; the pool and capacity type are the
        Node's labels, as Karpenter reads them (the NodeClaim's when the Node is gone)."""
        source = node.metadata.labels if node is not None else claim.labels
        self.nodeclaims_unhealthy_disrupted.labels(
            condition=snake_case(condition),
            nodepool=source.get(labels.NODEPOOL, ""),
            capacity_type=source.get(labels.CAPACITY_TYPE, ""),
            image_id=claim.status.image_id or "",
        ).inc()

    def node_created(self, node: Node, nodepool: str) -> None:
        zone = node.metadata.labels.get(labels.ZONE, "")
        self.nodes_created.labels(nodepool=nodepool, zone=zone).inc()

    def node_terminated(self, node: Node) -> None:
        node_labels = node.metadata.labels
        self.nodes_terminated.labels(
            nodepool=node_labels.get(labels.NODEPOOL, ""), zone=node_labels.get(labels.ZONE, "")
        ).inc()


@functools.cache
def default_metrics() -> Metrics:
    """The process's metrics, on prometheus_client's default registry (what `/metrics` serves)."""
    return Metrics(REGISTRY)
