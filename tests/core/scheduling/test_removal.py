"""A removal simulation answers exactly as a fresh provisioning simulation of the cluster without the removed
nodes would, after any number of rolled-back and committed trials; closed nodes take none of the moving pods."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from core import labels as wk
from core.api.kube import Pod, pod_key
from core.scheduling.removal import PlannedNodeClaim, RemovalSimulation
from core.scheduling.scheduler import NodeSnapshot, Scheduler, SchedulingOptions
from tests.builders import catalog_p, node, nodepool, pod, pod_term, spread, taint, toleration

POOLS = [nodepool(), nodepool("tainted", taints=[taint("dedicated", "batch")], labels={"team": "batch"})]
TYPES = {pool.name: catalog_p() for pool in POOLS}

Where = dict[str, str]
"""Pod key -> an existing node's name, or `claim-<i>` for the i-th new NodeClaim."""


def random_cluster(seed: int) -> list[NodeSnapshot]:
    """Twelve nodes over three zones, some tainted, with pods that spread, repel and attract each other."""
    rng = random.Random(seed)
    nodes = []
    for index in range(12):
        name = f"n-{index:02d}"
        tainted = index % 5 == 4
        pods = []
        for slot in range(rng.randint(0, 4)):
            app = rng.choice("abc")
            kind = rng.choice(["plain", "zone", "host", "anti", "affinity", "selector"])
            options: dict[str, Any] = {
                "cpu": rng.choice(["100m", "500m", "1"]),
                "memory": rng.choice(["128Mi", "512Mi"]),
                "labels": {"app": app},
                "owner_kind": "ReplicaSet",
                "owner_name": f"rs-{app}",
                "node_name": name,
            }
            if kind == "zone":
                options["spread_constraints"] = [spread(wk.ZONE, {"app": app})]
            elif kind == "host":
                options["spread_constraints"] = [spread(wk.HOSTNAME, {"app": app}, max_skew=2)]
            elif kind == "anti":
                options["anti_affinity"] = [pod_term(wk.HOSTNAME, {"app": app})]
            elif kind == "affinity":
                options["affinity"] = [pod_term(wk.ZONE, {"app": app})]
            elif kind == "selector":
                options["node_selector"] = {wk.ZONE: f"test-zone-{rng.randint(1, 3)}"}
            if tainted:
                options["tolerations"] = [toleration("dedicated", "batch")]
            pods.append(pod(f"p-{index}-{slot}", **options))
        nodes.append(
            node(
                name,
                nodepool="tainted" if tainted else "default",
                zone=f"test-zone-{index % 3 + 1}",
                capacity_type="on-demand",
                instance_type="default-instance-type",
                taints=[taint("dedicated", "batch")] if tainted else (),
                labels={"team": "batch"} if tainted else None,
                bound=pods,
                initialized=index != 7,
            )
        )
    return nodes


def fresh(nodes: list[NodeSnapshot], removed: list[str]) -> tuple[Where, list[tuple[str, ...]]]:
    """What a new scheduler does with the removed nodes' pods on the rest of the cluster."""
    keep = [n for n in nodes if n.name not in removed]
    pending = [p for n in nodes if n.name in removed for p in n.pods]
    results = Scheduler(POOLS, TYPES, keep, (), SchedulingOptions()).solve(pending)
    where = {key: placement.node for placement in results.existing for key in placement.pods}
    for index, claim in enumerate(results.nodeclaims):
        where.update({key: f"claim-{index}" for key in claim.pods})
    return where, [tuple(claim.instance_type_options) for claim in results.nodeclaims]


def tried(removals: RemovalSimulation, removed: list[str]) -> tuple[Where, list[tuple[str, ...]]]:
    removal = removals.simulate(removed)
    where = {
        move.pod: f"claim-{move.nodeclaim}" if move.nodeclaim is not None else move.destination
        for move in removal.moves
        if move.destination is not None
    }
    return where, [tuple(claim.instance_type_options) for claim in removal.nodeclaims]


def removals_of(nodes: list[NodeSnapshot]) -> RemovalSimulation:
    scheduler = Scheduler(POOLS, TYPES, nodes, (), SchedulingOptions())
    return scheduler.removals({n.name: list(n.pods) for n in nodes})


@pytest.mark.parametrize("seed", range(40))
def test_trials_agree_with_a_fresh_simulation_and_roll_back_cleanly(seed: int) -> None:
    nodes = random_cluster(seed)
    removals = removals_of(nodes)
    rng = random.Random(seed)
    for _ in range(4):
        removed = rng.sample([n.name for n in nodes], rng.randint(1, 3))
        assert tried(removals, removed) == fresh(nodes, removed)
        removals.rollback()


@pytest.mark.parametrize("seed", range(40))
def test_after_a_commit_trials_agree_with_the_cluster_it_leaves(seed: int) -> None:
    nodes = random_cluster(seed)
    removals = removals_of(nodes)
    gone = random.Random(seed).choice([n.name for n in nodes if n.initialized])
    removal = removals.simulate([gone])
    if removal.nodeclaims or removal.unplaced:
        removals.rollback()
        pytest.skip("the removal needs a new node; the comparison below covers deletions")
    removals.commit([])
    destination = {move.pod: move.destination for move in removal.moves}
    moved: dict[str, list[Pod]] = {}
    for moving in next(n for n in nodes if n.name == gone).pods:
        target = destination[pod_key(moving)]
        assert target is not None
        spec = moving.spec.model_copy(update={"node_name": target})
        moved.setdefault(target, []).append(moving.model_copy(update={"spec": spec}))
    after = [replace(n, pods=(*n.pods, *moved.get(n.name, ()))) for n in nodes if n.name != gone]
    for other in [n.name for n in after][:5]:
        assert tried(removals, [other]) == fresh(after, [other])
        removals.rollback()


def test_a_trial_must_be_closed_before_the_next_and_removed_nodes_cannot_be_tried() -> None:
    nodes = random_cluster(1)
    removals = removals_of(nodes)
    removal = removals.simulate(["n-00"])
    with pytest.raises(RuntimeError, match="already open"):
        removals.simulate(["n-01"])
    removals.commit([f"replacement-{index}" for index in range(len(removal.nodeclaims))])
    with pytest.raises(RuntimeError, match="no trial is open"):
        removals.rollback()
    with pytest.raises(ValueError, match="n-00: not a node, or already removed"):
        removals.simulate(["n-00"])
    assert "n-00" in removals.removed


def test_a_trial_can_stop_once_it_needs_too_many_nodes() -> None:
    # The largest Catalog P type has 16 CPUs: each 9-CPU pod needs a node of its own.
    nodes = [node("full", cpu=32, bound=[pod(f"p-{i}", cpu="9", node_name="full") for i in range(3)])]
    removals = removals_of(nodes)
    removal = removals.simulate(["full"], max_nodeclaims=1)
    assert removal.exceeded == 2
    assert removal.moves == ()
    removals.rollback()
    complete = removals.simulate(["full"])
    assert len(complete.nodeclaims) == 3


@pytest.mark.parametrize("seed", range(10))
def test_closed_nodes_take_none_of_the_moving_pods_and_open_again_after_the_trial(seed: int) -> None:
    nodes = random_cluster(seed)
    removals = removals_of(nodes)
    rng = random.Random(seed)
    names = [n.name for n in nodes]
    removed = rng.sample(names, 2)
    closed = rng.sample([name for name in names if name not in removed], 6)
    removal = removals.simulate(removed, closed=closed)
    assert not {move.destination for move in removal.moves} & set(closed)
    removals.rollback()
    assert tried(removals, removed) == fresh(nodes, removed)


def test_the_zones_a_spread_pod_may_go_to_are_those_where_the_simulation_places_it() -> None:
    """`PodFit.zones` (the zones a pod's DoNotSchedule zonal spread allows, with it alone taken away) agrees with
    the directed simulation: sent to a new NodeClaim pinned to a zone, the pod is placed exactly when the zone is
    one of them."""
    checked = 0
    for seed in range(8):
        checked += _zones_agree(random_cluster(seed))
    assert checked > 20


def _zones_agree(nodes: list[NodeSnapshot]) -> int:
    removals = removals_of(nodes)
    checked = 0
    for snapshot in nodes:
        fits = removals.capacity([snapshot.name]).pods
        groups = [group for fit in fits for group in fit.spreads]
        for fit in fits:
            if fit.zones is None or any(groups.count(group) > 1 for group in fit.spreads):
                continue
            pool = next(name for name, launchable in fit.types.items() if launchable.any())
            names = frozenset(removals.instance_types()[pool].names)
            for zone in ("test-zone-1", "test-zone-2", "test-zone-3"):
                removal = removals.simulate(
                    [snapshot.name],
                    directions={fit.key: 0},
                    planned=[PlannedNodeClaim(pool, names, zone)],
                )
                move = next(move for move in removal.moves if move.pod == fit.key)
                assert (move.destination is not None) == (zone in fit.zones), (fit.key, zone, move.reasons)
                if move.destination is not None:
                    (claim,) = removal.nodeclaims
                    assert {"key": wk.ZONE, "operator": "In", "values": [zone]} in claim.requirements
                removals.rollback()
                checked += 1
    return checked
