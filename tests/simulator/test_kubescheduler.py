"""The kube-scheduler model: pods bind to Ready nodes that fit them, the rest are marked Unschedulable, and
nodes that are NotReady, cordoned, being deleted or disrupted by Karpenter take nothing."""

from __future__ import annotations

from typing import Any

import pytest

from core import labels
from core.api.kube import Pod
from simulator.kubescheduler import KubeScheduler
from simulator.state import NODE, ClusterState
from tests.simulator.conftest import deployment


def ready_node(
    name: str,
    cpu: str = "4",
    node_labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: str = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {labels.ARCH: "amd64", **(node_labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def placements(state: ClusterState) -> dict[str, str | None]:
    return {pod.metadata.name: pod.spec.node_name for pod in state.pods()}


def unschedulable(pod: Pod) -> bool:
    return any(
        (c.type, c.status, c.reason) == ("PodScheduled", "False", "Unschedulable")
        for c in pod.status.conditions
    )


def test_pods_that_fit_are_bound_and_the_rest_are_unschedulable() -> None:
    state = ClusterState()
    state.apply([ready_node("a", cpu="3"), deployment("web", 4, cpu="1")])

    result = KubeScheduler(state).schedule()

    assert sorted(result.bound.values()) == ["a", "a", "a"]
    assert len(result.unschedulable) == 1
    left = [pod for pod in state.pods() if not pod.spec.node_name]
    assert len(left) == 1 and unschedulable(left[0])
    bound = [pod for pod in state.pods() if pod.spec.node_name]
    assert all(
        ("PodScheduled", "True") in [(c.type, c.status) for c in pod.status.conditions] for pod in bound
    )


def test_a_pod_waits_for_a_node_with_the_labels_it_selects() -> None:
    state = ClusterState()
    state.apply([ready_node("amd"), deployment("arm", 1, nodeSelector={labels.ARCH: "arm64"})])
    scheduler = KubeScheduler(state)
    scheduler.schedule()
    assert list(placements(state).values()) == [None]

    state.apply([ready_node("arm", node_labels={labels.ARCH: "arm64"})])
    scheduler.schedule()
    assert list(placements(state).values()) == ["arm"]


def test_required_anti_affinity_puts_one_pod_per_node() -> None:
    state = ClusterState()
    term = {"topologyKey": labels.HOSTNAME, "labelSelector": {"matchLabels": {"app": "cache"}}}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    state.apply([ready_node("a"), ready_node("b"), deployment("cache", 3, cpu="100m", affinity=anti)])
    KubeScheduler(state).schedule()
    assert sorted(str(node) for node in placements(state).values()) == ["None", "a", "b"]


@pytest.mark.parametrize(
    ("node", "tolerant_lands"),
    [
        (ready_node("n", ready="False"), False),
        (ready_node("n", unschedulable=True), False),
        (ready_node("n", taints=[{"key": labels.DISRUPTED_TAINT, "effect": "NoSchedule"}]), False),
        (ready_node("n", taints=[{"key": labels.UNREGISTERED_TAINT, "effect": "NoExecute"}]), True),
    ],
    ids=["not-ready", "cordoned", "disrupted", "unregistered"],
)
def test_nodes_that_take_no_pods_get_none(node: dict[str, Any], tolerant_lands: bool) -> None:
    """Only a taint is a matter of tolerations; the other states keep even a pod that tolerates everything out."""
    state = ClusterState()
    state.apply([node, deployment("web", 1), deployment("tolerant", 1, tolerations=[{"operator": "Exists"}])])
    KubeScheduler(state).schedule()
    expected = {"web": None, "tolerant": "n" if tolerant_lands else None}
    assert {pod.metadata.labels["app"]: pod.spec.node_name for pod in state.pods()} == expected


def test_a_node_being_deleted_gets_no_pods() -> None:
    state = ClusterState()
    state.apply([ready_node("n") | {"metadata": {"name": "n", "finalizers": ["karpenter.sh/termination"]}}])
    state.delete(NODE.name, "n")
    state.apply([deployment("web", 1)])
    KubeScheduler(state).schedule()
    assert list(placements(state).values()) == [None]


def test_the_scheduler_runs_only_after_changes_and_at_most_once_per_interval() -> None:
    state = ClusterState()
    state.apply([ready_node("a", cpu="1")])
    scheduler = KubeScheduler(state)

    assert scheduler.step(now=10.0, interval=0.5) is None
    state.apply([deployment("web", 1)])
    assert scheduler.step(now=10.1, interval=0.5) == 10.5
    assert list(placements(state).values()) == [None]
    assert scheduler.step(now=10.5, interval=0.5) is None
    assert list(placements(state).values()) == ["a"]
    assert scheduler.step(now=20.0, interval=0.5) is None
