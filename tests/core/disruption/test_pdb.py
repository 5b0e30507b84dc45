"""PodDisruptionBudgets computed from a snapshot, and counted down as a plan evicts pods."""

from __future__ import annotations

from typing import Any

import pytest

from core.api.kube import Pod, PodStatus
from core.disruption.pdb import PdbLimits, is_healthy
from tests.core.disruption.fixtures import bound, pdb


def replicas(count: int, app: str = "web", **options: Any) -> list[Pod]:
    return [bound(f"node-{i}", f"{app}-{i}", app=app, **options) for i in range(count)]


def unready(pod: Pod) -> Pod:
    status = PodStatus.model_validate(
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    )
    return pod.model_copy(update={"status": status})


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({"min_available": 2}, 1),
        ({"min_available": 3}, 0),
        ({"min_available": "50%"}, 1),
        ({"min_available": "100%"}, 0),
        ({"max_unavailable": 1}, 1),
        ({"max_unavailable": 0}, 0),
        ({"max_unavailable": "50%"}, 2),
        ({"max_unavailable": "0%"}, 0),
        ({}, 3),
    ],
)
def test_allowed_evictions_from_min_available_or_max_unavailable(spec: dict[str, Any], allowed: int) -> None:
    limits = PdbLimits([pdb("web", {"app": "web"}, **spec)], replicas(3))
    assert limits.allowed("default/web") == allowed


def test_unhealthy_pods_count_against_the_budget() -> None:
    pods = replicas(3)
    pods[0] = unready(pods[0])
    assert not is_healthy(pods[0])
    limits = PdbLimits([pdb("web", {"app": "web"}, max_unavailable=1)], pods)
    assert limits.allowed("default/web") == 0
    assert limits.blocker(pods[1:]) == "pdb default/web allows 0 evictions"


def test_always_allow_lets_unhealthy_pods_go() -> None:
    pods = replicas(3)
    pods[0] = unready(pods[0])
    budget = pdb("web", {"app": "web"}, max_unavailable=1, unhealthyPodEvictionPolicy="AlwaysAllow")
    limits = PdbLimits([budget], pods)
    assert limits.blocker([pods[0]]) is None
    assert limits.blocker([pods[1]]) == "pdb default/web allows 0 evictions"


def test_a_pod_under_two_budgets_cannot_be_evicted() -> None:
    pods = replicas(3)
    limits = PdbLimits([pdb("a", {"app": "web"}), pdb("b", {"app": "web"})], pods)
    assert (
        limits.blocker(pods[:1])
        == "pod default/web-0 is selected by more than one pdb (default/a, default/b)"
    )


def test_budgets_only_select_pods_of_their_namespace_and_labels() -> None:
    pods = [*replicas(2), *replicas(2, app="api"), bound("node-9", "other", app="web", namespace="prod")]
    limits = PdbLimits([pdb("web", {"app": "web"}, min_available=2)], pods)
    assert limits.blocker(pods[2:]) is None
    assert limits.blocker(pods[:1]) == "pdb default/web allows 0 evictions"


def test_finished_and_static_pods_never_block() -> None:
    pods = replicas(2)
    limits = PdbLimits([pdb("web", {"app": "web"}, max_unavailable=0)], pods)
    assert limits.blocker([bound("node-0", "done", app="web", phase="Succeeded")]) is None
    assert limits.blocker([bound("node-0", "static", app="web", owner_kind="Node")]) is None


def test_evictions_use_up_the_budget() -> None:
    pods = replicas(3)
    limits = PdbLimits([pdb("web", {"app": "web"}, min_available=1)], pods)
    assert limits.allowed("default/web") == 2
    limits.evict(pods[:1])
    assert limits.blocker(pods[1:2]) is None
    limits.evict(pods[1:2])
    assert limits.blocker(pods[2:]) == "pdb default/web allows 0 evictions"
    limits.evict(pods[2:])
    assert limits.allowed("default/web") == 0
