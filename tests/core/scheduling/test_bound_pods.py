"""A planner's memory of compiled bound pods (`BoundPods`): plans that run again and again against the same
nodes compile each unchanged bound pod once, and decide exactly what they decide without it."""

from __future__ import annotations

from core import labels as wk
from core.api.kube import Pod
from core.scheduling.pods import BoundPods
from core.scheduling.scheduler import Scheduler, SchedulingOptions
from tests.builders import catalog_p, node, nodepool, pod, pod_term
from tests.builders import placements as where

APART = [pod_term(wk.HOSTNAME, {"app": "web"})]


def web(name: str, node_name: str | None = None) -> Pod:
    return pod(name, cpu="1", labels={"app": "web"}, anti_affinity=APART, node_name=node_name)


def test_an_unchanged_pod_is_compiled_once_and_a_changed_one_again() -> None:
    memory = BoundPods()
    bound = web("a", "n1")
    memory.begin()
    first = memory.compiled(bound)
    memory.begin()
    assert memory.compiled(bound) is first
    changed = bound.model_copy(
        update={"metadata": bound.metadata.model_copy(update={"labels": {"app": "db"}})}
    )
    assert memory.compiled(changed) is not first
    assert memory.compiled(changed).labels == {"app": "db"}


def test_a_pod_no_simulation_asked_for_since_the_one_before_the_last_is_forgotten() -> None:
    memory = BoundPods()
    bound = web("a", "n1")
    memory.begin()
    first = memory.compiled(bound)
    memory.begin()
    memory.begin()
    assert memory.compiled(bound) is not first


def test_plans_with_the_memory_decide_what_plans_without_it_decide() -> None:
    nodes = [
        node("n1", nodepool="default", zone="test-zone-1", cpu=4, bound=[web("a", "n1")]),
        node("n2", nodepool="default", zone="test-zone-1", cpu=4, bound=[pod("b", cpu="3", node_name="n2")]),
        node("n3", nodepool="default", zone="test-zone-2", cpu=4),
    ]
    pending = [web("p1"), web("p2"), web("p3"), pod("big", cpu="2")]
    types = {"default": catalog_p()}
    memory = BoundPods()
    plain = Scheduler([nodepool()], types, nodes, options=SchedulingOptions()).solve(pending)
    for _ in range(3):  # the second and third plans compile nothing bound
        remembered = Scheduler([nodepool()], types, nodes, bound_pods=memory).solve(pending)
        assert where(remembered) == where(plain)
        assert len(remembered.nodeclaims) == len(plain.nodeclaims)
    # The bound web pod keeps the pending ones off n1, and n2 has room for none of them: web pods go to n3 and
    # new NodeClaims, one per node.
    placed = where(plain)
    assert placed["default/p1"] != "n1" and len({placed[f"default/p{i}"] for i in (1, 2, 3)}) == 3
