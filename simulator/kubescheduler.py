"""The kube-scheduler of the simulated AKS: binds pending pods to nodes that can run them, or marks them
Unschedulable, which is what makes a pod provisionable for Karpenter.

The decision is the core scheduler's, run over the cluster's nodes only (no NodePools), so the simulated
cluster honours requests, node selectors, affinity, tolerations, topology spread, anti-affinity and host
ports exactly as the provisioner expects. Nodes that are not Ready, are cordoned, or carry Karpenter's
`karpenter.sh/disrupted:NoSchedule` taint take no new pods; their pods still count for spread and affinity.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from core import labels
from core.api.kube import Condition, Node, Pod, is_node_ready, is_terminal
from core.api.meta import TaintEffect
from core.resources import parse_resources
from core.scheduling.scheduler import NodeSnapshot, Scheduler
from simulator.state import POD, ClusterState, Write, set_condition

DEFAULT_SCHEDULER = "default-scheduler"
COST_SPACING = 2.0
UNSCHEDULABLE = "no node is Ready, accepts pods and fits the pod's requests and constraints"
"""The condition message; the same on every pass, so a pod that stays unschedulable is not rewritten."""


@dataclass(slots=True)
class SchedulingPass:
    """What one pass did: pods bound (as `namespace/name` -> node) and pods left unschedulable."""

    bound: dict[str, str] = field(default_factory=dict)
    unschedulable: list[str] = field(default_factory=list)


def accepts_pods(node: Node) -> bool:
    """Whether the node takes new pods: Ready, not cordoned, not being deleted, not disrupted by Karpenter."""
    if node.spec.unschedulable or node.metadata.deletion_timestamp is not None or not is_node_ready(node):
        return False
    return not any(
        taint.key == labels.DISRUPTED_TAINT and taint.effect == TaintEffect.NO_SCHEDULE
        for taint in node.spec.taints
    )


class KubeScheduler:
    """Schedules pending pods whenever the pods or nodes changed, at most once per interval."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._seen = -1
        self._next_pass: float | None = None

    def step(self, now: float, interval: float) -> float | None:
        """Run a pass if something changed and the last pass is `interval` seconds old; when to come back.

        A pass over a large cluster takes a while, so passes are also spaced by twice the last one's cost:
        the kube-scheduler never takes more than a third of the process while nodes keep arriving.
        """
        if self._state.scheduling_generation == self._seen:
            return None
        if self._next_pass is not None and now < self._next_pass:
            return self._next_pass
        started = time.perf_counter()
        self.schedule()
        self._next_pass = now + max(interval, COST_SPACING * (time.perf_counter() - started))
        return None

    def schedule(self) -> SchedulingPass:
        """Bind every pending pod that fits a node; mark the others PodScheduled=False, Unschedulable."""
        state = self._state
        result = SchedulingPass()
        pending = [
            pod
            for pod in state.pods()
            if not pod.spec.node_name
            and not is_terminal(pod)
            and pod.metadata.deletion_timestamp is None
            and pod.spec.scheduler_name == DEFAULT_SCHEDULER
        ]
        if pending:
            snapshots = [self._snapshot(node) for node in state.nodes()]
            results = Scheduler(nodepools=[], instance_types={}, nodes=snapshots).solve(pending)
            for placement in results.existing:
                for key in placement.pods:
                    namespace, _, name = key.partition("/")
                    state.bind(namespace, name, placement.node)
                    result.bound[key] = placement.node
            for unschedulable in results.unschedulable:
                self._mark_unschedulable(unschedulable.pod)
                result.unschedulable.append(unschedulable.pod)
        self._seen = state.scheduling_generation
        return result

    def _snapshot(self, node: Node) -> NodeSnapshot:
        # A node that takes no pods keeps its pods and domains (they count for spread and affinity) but
        # offers no room, so nothing is placed on it whatever the pod tolerates.
        node_labels = {labels.HOSTNAME: node.metadata.name, **node.metadata.labels}
        pods = tuple(pod for pod in self._state.pods_on_node(node.metadata.name) if not is_terminal(pod))
        allocatable = parse_resources(node.status.allocatable) if accepts_pods(node) else {}
        return NodeSnapshot(
            name=node.metadata.name,
            labels=node_labels,
            taints=tuple(node.spec.taints),
            allocatable=allocatable,
            capacity=parse_resources(node.status.capacity or node.status.allocatable),
            pods=pods,
        )

    def _mark_unschedulable(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        pod: Pod | None = self._state.get(POD.name, name, namespace)
        if pod is None:
            return
        condition = Condition(
            type="PodScheduled", status="False", reason="Unschedulable", message=UNSCHEDULABLE
        )
        if condition in pod.status.conditions:
            return
        status = pod.status.model_copy(update={"conditions": set_condition(pod.status.conditions, condition)})
        self._state.update(POD.name, pod.model_copy(update={"status": status}), Write.STATUS)
