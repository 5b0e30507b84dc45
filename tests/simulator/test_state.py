"""The simulated API server: identities, resource versions and the watch log, finalizers, eviction with
PodDisruptionBudgets, and the workload, DaemonSet and pod-GC controllers."""

from __future__ import annotations

from typing import Any

import pytest

from core.api.kube import Condition, Node, Pod, PodPhase
from core.api.kube import is_pod_ready as is_ready
from core.api.manifests import workload_pods
from core.api.nodeclaim import NodeClaim
from core.cluster import EventType
from core.errors import ConflictError, InvalidError, NotFoundError, PDBViolationError
from simulator.state import DEPLOYMENT, NODE, NODECLAIM, POD, ClusterState, Write, set_condition
from tests.simulator.conftest import deployment, nodeclaim, pdb, stored


def node(name: str, arch: str = "amd64", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def daemonset(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "a"}], **spec},
            },
        },
    }


def pods_of(state: ClusterState, app: str) -> list[Pod]:
    return [pod for pod in state.pods() if pod.metadata.labels.get("app") == app]


def run_on(state: ClusterState, node_name: str, pods: list[Pod]) -> None:
    """Bind the pods to the node and make them Running and Ready, as the kube-scheduler and kubelet would."""
    for pod in pods:
        bound = state.bind(pod.metadata.namespace or "default", pod.metadata.name, node_name)
        running = bound.model_copy(deep=True)
        running.status.phase = PodPhase.RUNNING
        running.status.conditions = set_condition(
            running.status.conditions, Condition(type="Ready", status="True")
        )
        state.update(POD.name, running, Write.ALL)


# --- identity, versions and the watch log -----------------------------------------------------------------


def test_a_created_object_gets_a_uid_a_timestamp_and_the_next_resource_version() -> None:
    state = ClusterState()
    state.apply([node("a"), node("b")])

    first, second = state.nodes()
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert first.metadata.creation_timestamp is not None
    assert (first.metadata.resource_version, second.metadata.resource_version) == ("1", "2")
    with pytest.raises(ConflictError) as raised:
        state.create(NODE.name, Node.model_validate(node("a")))
    assert raised.value.code == "AlreadyExists"


def test_uids_come_from_the_seed_not_from_the_order_of_calls() -> None:
    forward, backward, other_seed = ClusterState(seed=7), ClusterState(seed=7), ClusterState(seed=8)
    forward.apply([node("a"), node("b")])
    backward.apply([node("b"), node("a")])
    other_seed.apply([node("a"), node("b")])

    def uids(state: ClusterState) -> dict[str, str]:
        return {item.metadata.name: item.metadata.uid for item in state.nodes()}

    assert uids(forward) == uids(backward)
    assert set(uids(forward).values()).isdisjoint(uids(other_seed).values())


def test_a_recreated_object_gets_a_new_uid() -> None:
    state = ClusterState()
    state.apply([node("a")])
    before = state.nodes()[0].metadata.uid
    state.delete(NODE.name, "a")
    state.apply([node("a")])
    assert state.nodes()[0].metadata.uid != before


def test_events_since_a_version_are_the_later_changes_in_order() -> None:
    state = ClusterState()
    state.apply([node("a")])
    since = state.resource_version
    state.apply([node("b"), node("c")])
    state.delete(NODE.name, "a")

    events = state.events_since(since)
    assert [(event.type, event.name) for event in events] == [
        (EventType.ADDED, "b"),
        (EventType.ADDED, "c"),
        (EventType.DELETED, "a"),
    ]
    assert [event.resource_version for event in events] == [since + 1, since + 2, since + 3]
    assert events[0].object["kind"] == "Node" and events[0].object["metadata"]["name"] == "b"
    assert state.events_since(state.resource_version) == []


def test_a_watch_from_a_version_the_log_no_longer_holds_is_expired() -> None:
    state = ClusterState(history_limit=4)
    state.apply([node(f"n{index}") for index in range(10)])

    with pytest.raises(ConflictError) as raised:
        state.events_since(0)
    assert raised.value.code == "Expired"
    assert [event.name for event in state.events_since(8)] == ["n8", "n9"]


def test_an_update_from_a_stale_read_conflicts() -> None:
    state = ClusterState()
    state.apply([node("a")])
    stale = state.nodes()[0].model_copy(deep=True)
    fresh = stale.model_copy(deep=True)
    fresh.metadata.labels["tier"] = "one"
    state.update(NODE.name, fresh)

    stale.metadata.labels["tier"] = "two"
    with pytest.raises(ConflictError) as raised:
        state.update(NODE.name, stale)
    assert raised.value.code == "Conflict"
    assert state.nodes()[0].metadata.labels["tier"] == "one"


def test_an_update_that_changes_nothing_is_not_an_event() -> None:
    state = ClusterState()
    state.apply([node("a")])
    version = state.resource_version
    state.update(NODE.name, state.nodes()[0].model_copy(deep=True))
    assert state.resource_version == version


# --- finalizers --------------------------------------------------------------------------------------------


def test_deleting_an_object_with_finalizers_marks_it_until_the_last_finalizer_goes() -> None:
    state = ClusterState()
    state.apply([nodeclaim("default-x", finalizers=["karpenter.sh/termination", "example.com/other"])])

    state.delete(NODECLAIM.name, "default-x")
    marked: NodeClaim = stored(state, NODECLAIM.name, "default-x")
    assert marked.metadata.deletion_timestamp is not None
    assert state.events_since(state.resource_version - 1)[0].type == EventType.MODIFIED

    with pytest.raises(InvalidError, match="no new finalizers"):
        added = marked.model_copy(deep=True)
        added.metadata.finalizers.append("example.com/late")
        state.update(NODECLAIM.name, added)

    for remaining in (["example.com/other"], []):
        claim = stored(state, NODECLAIM.name, "default-x").model_copy(deep=True)
        claim.metadata.finalizers = remaining
        state.update(NODECLAIM.name, claim)
    assert state.get(NODECLAIM.name, "default-x") is None
    assert state.events_since(state.resource_version - 1)[0].type == EventType.DELETED


def test_deleting_what_does_not_exist_is_not_found() -> None:
    with pytest.raises(NotFoundError):
        ClusterState().delete(NODE.name, "nope")


# --- apply -------------------------------------------------------------------------------------------------


def test_apply_reports_created_configured_and_unchanged() -> None:
    state = ClusterState()
    assert state.apply([deployment("web", 1)]) == ["deployment/default/web created"]
    assert state.apply([deployment("web", 1)]) == ["deployment/default/web unchanged"]
    assert state.apply([deployment("web", 2)]) == ["deployment/default/web configured"]


def test_apply_with_an_invalid_object_applies_nothing_and_names_every_problem() -> None:
    state = ClusterState()
    bad_replicas = deployment("bad", 1)
    bad_replicas["spec"]["replicas"] = -1
    unknown = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}

    with pytest.raises(InvalidError) as raised:
        state.apply([deployment("good", 1), bad_replicas, unknown])
    assert "Deployment default/bad: spec.replicas" in str(raised.value)
    assert "ConfigMap" in str(raised.value)
    assert state.pods() == [] and state.objects(DEPLOYMENT.name) == []


# --- workload controllers ----------------------------------------------------------------------------------


def test_a_deployment_runs_its_replicas_as_pending_pods_named_like_kubernetes_names_them() -> None:
    state = ClusterState()
    state.apply([deployment("web", 3)])

    pods = pods_of(state, "web")
    expected = workload_pods(stored(state, DEPLOYMENT.name, "web", "default"))
    assert [pod.metadata.name for pod in pods] == sorted(pod.metadata.name for pod in expected)
    assert all(pod.status.phase == PodPhase.PENDING and not pod.spec.node_name for pod in pods)
    assert len({pod.metadata.uid for pod in pods}) == 3


def test_scaling_down_deletes_pods_and_scaling_up_creates_them() -> None:
    state = ClusterState()
    state.apply([deployment("web", 3)])
    names = [pod.metadata.name for pod in pods_of(state, "web")]

    state.scale(DEPLOYMENT.name, "web", "default", 1)
    assert len(pods_of(state, "web")) == 1
    state.scale(DEPLOYMENT.name, "web", "default", 3)
    assert [pod.metadata.name for pod in pods_of(state, "web")] == names
    state.scale(DEPLOYMENT.name, "web", "default", 0)
    assert pods_of(state, "web") == []


def test_deleting_a_workload_deletes_its_pods() -> None:
    state = ClusterState()
    state.apply([deployment("web", 2)])
    state.delete(DEPLOYMENT.name, "web", "default")
    assert state.pods() == []


def test_statefulsets_and_jobs_make_their_pods() -> None:
    state = ClusterState()
    statefulset = deployment("db", 2) | {"kind": "StatefulSet"}
    job = deployment("batch", 0) | {"apiVersion": "batch/v1", "kind": "Job"}
    job["spec"]["parallelism"] = 2
    state.apply([statefulset, job])
    assert [pod.metadata.name for pod in pods_of(state, "db")] == ["db-0", "db-1"]
    assert len(pods_of(state, "batch")) == 2


def test_a_changed_template_replaces_the_pods() -> None:
    state = ClusterState()
    state.apply([deployment("web", 2, cpu="1")])
    state.apply([deployment("web", 2, cpu="2")])
    pods = pods_of(state, "web")
    assert len(pods) == 2
    assert {pod.spec.containers[0].resources.requests["cpu"] for pod in pods} == {"2"}


def test_pods_of_a_deleted_node_go_and_their_deployment_makes_pending_replacements() -> None:
    state = ClusterState()
    state.apply([node("a"), deployment("web", 2)])
    run_on(state, "a", pods_of(state, "web"))
    uids = {pod.metadata.uid for pod in pods_of(state, "web")}

    state.delete(NODE.name, "a")

    pods = pods_of(state, "web")
    assert len(pods) == 2
    assert all(not pod.spec.node_name and pod.status.phase == PodPhase.PENDING for pod in pods)
    assert uids.isdisjoint(pod.metadata.uid for pod in pods)
    assert state.pods_on_node("a") == []


def test_a_pod_bound_to_a_node_that_does_not_exist_is_removed() -> None:
    state = ClusterState()
    state.apply(
        [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "ghost"}}]
    )
    assert state.pods() == []


# --- DaemonSets --------------------------------------------------------------------------------------------


def test_a_daemonset_runs_one_bound_pod_on_every_node_it_selects_and_tolerates() -> None:
    state = ClusterState()
    tainted = node("arm-tainted", "arm64", taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    state.apply([node("arm", "arm64"), node("amd", "amd64"), tainted])
    state.apply([daemonset("agent", nodeSelector={"kubernetes.io/arch": "arm64"})])

    assert [pod.spec.node_name for pod in pods_of(state, "agent")] == ["arm"]
    daemon = pods_of(state, "agent")[0]
    assert daemon.metadata.owner_references[0].kind == "DaemonSet"

    untainted = stored(state, NODE.name, "arm-tainted").model_copy(deep=True)
    untainted.spec.taints = []
    state.update(NODE.name, untainted)
    assert sorted(str(pod.spec.node_name) for pod in pods_of(state, "agent")) == ["arm", "arm-tainted"]

    state.delete(NODE.name, "arm")
    assert [pod.spec.node_name for pod in pods_of(state, "agent")] == ["arm-tainted"]


def test_a_daemon_pod_that_is_deleted_comes_back_while_its_node_still_qualifies() -> None:
    state = ClusterState()
    state.apply([node("a"), daemonset("agent", tolerations=[{"operator": "Exists"}])])
    first = pods_of(state, "agent")[0]
    state.delete(POD.name, first.metadata.name, "kube-system")
    again = pods_of(state, "agent")
    assert [pod.spec.node_name for pod in again] == ["a"] and again[0].metadata.uid != first.metadata.uid


# --- eviction ----------------------------------------------------------------------------------------------


def ready_web(state: ClusterState, replicas: int, budget: dict[str, Any] | None) -> list[Pod]:
    state.apply([node("a"), deployment("web", replicas), *([budget] if budget else [])])
    run_on(state, "a", pods_of(state, "web"))
    return pods_of(state, "web")


def evictions_allowed(state: ClusterState, pods: list[Pod]) -> int:
    """Evict the pods one by one until a budget refuses; how many went."""
    for count, pod in enumerate(pods):
        try:
            state.evict("default", pod.metadata.name)
        except PDBViolationError:
            return count
    return len(pods)


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [
        ({"minAvailable": 2}, 1),
        ({"minAvailable": "50%"}, 1),
        ({"minAvailable": "100%"}, 0),
        ({"maxUnavailable": 2}, 2),
        ({"maxUnavailable": "34%"}, 2),
        ({"maxUnavailable": 0}, 0),
    ],
)
def test_evictions_stop_when_the_budget_is_spent(budget: dict[str, Any], allowed: int) -> None:
    state = ClusterState()
    pods = ready_web(state, 3, pdb("web", "web", **budget))
    assert evictions_allowed(state, pods) == allowed
    # Each evicted pod is replaced by a pending one, which is not healthy.
    assert len(pods_of(state, "web")) == 3
    assert sum(is_ready(pod) for pod in pods_of(state, "web")) == 3 - allowed


def test_an_eviction_allowed_once_the_replacement_is_ready_again() -> None:
    state = ClusterState()
    pods = ready_web(state, 2, pdb("web", "web", minAvailable=1))
    state.evict("default", pods[0].metadata.name)
    with pytest.raises(PDBViolationError):
        state.evict("default", pods[1].metadata.name)

    run_on(state, "a", [pod for pod in pods_of(state, "web") if not pod.spec.node_name])
    state.evict("default", pods[1].metadata.name)


def test_pods_without_a_budget_pending_pods_and_unknown_pods() -> None:
    state = ClusterState()
    pods = ready_web(state, 2, None)
    assert evictions_allowed(state, pods) == 2

    state.apply([pdb("web", "web", minAvailable="100%")])
    pending = [pod for pod in pods_of(state, "web") if pod.status.phase == PodPhase.PENDING]
    state.evict("default", pending[0].metadata.name)
    with pytest.raises(NotFoundError):
        state.evict("default", "nope")


def test_an_unhealthy_pod_is_evictable_only_as_the_policy_allows() -> None:
    state = ClusterState()
    pods = ready_web(state, 2, pdb("web", "web", minAvailable=2))
    sick = pods[0].model_copy(deep=True)
    sick.status.conditions = set_condition(sick.status.conditions, Condition(type="Ready", status="False"))
    state.update(POD.name, sick, Write.ALL)
    with pytest.raises(PDBViolationError):
        state.evict("default", sick.metadata.name)

    state.apply([pdb("web", "web", minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow")])
    state.evict("default", sick.metadata.name)


def test_a_pod_under_two_budgets_cannot_be_evicted() -> None:
    state = ClusterState()
    pods = ready_web(state, 2, pdb("one", "web", maxUnavailable=1))
    state.apply([pdb("two", "web", maxUnavailable=1)])
    with pytest.raises(InvalidError, match="more than one PodDisruptionBudget"):
        state.evict("default", pods[0].metadata.name)
