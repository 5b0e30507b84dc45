"""The consolidation benchmark's parts that decide its figures: the seeded workload, what both sides are given,
the lower bound, and how evictions, launches and $/h are counted (the runs themselves are
`benchmarks/consolidation.py --peer karpenter`, not tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.consolidation import (
    DOWN_STEPS,
    INSTANCE_TYPES,
    NAMESPACE,
    UP_STEPS,
    Audit,
    Bound,
    catalog,
    daemonset_requests,
    desired,
    dollars_per_hour,
    lower_bound,
    print_figures,
    result,
    side_objects,
    workload,
    workload_bound,
)
from benchmarks.karpenter import KWOK_KUBE_RESERVED, karpenter_instance_types
from core.resources import CPU, MEMORY, PODS, parse_resources


def test_the_workload_is_seeded_fragmented_and_large_enough() -> None:
    deployments = workload(1)
    assert workload(1) == deployments and workload(2) != deployments
    assert len(deployments) >= 30
    assert desired(deployments, -1) >= 300
    assert {deployment.shape for deployment in deployments} == {"cpu", "memory", "balanced"}
    assert any(d.budget for d in deployments) and any(d.zonal_spread for d in deployments)
    for deployment in deployments:
        up, down = deployment.replicas[:UP_STEPS], deployment.replicas[UP_STEPS - 1 :]
        assert len(deployment.replicas) == UP_STEPS + DOWN_STEPS
        assert list(up) == sorted(up) and list(down) == sorted(down, reverse=True)
        assert deployment.peak > deployment.final > 0
    ratios = {
        shape: [d.memory / d.cpu for d in deployments if d.shape == shape]
        for shape in ("cpu", "balanced", "memory")
    }  # MiB per millicore: about GiB per CPU
    assert max(ratios["cpu"]) < min(ratios["balanced"]) <= max(ratios["balanced"]) < min(ratios["memory"])


def test_both_sides_get_the_same_nodepool_but_their_own_node_class() -> None:
    karpenter, nodewright = side_objects("karpenter"), side_objects("nodewright")
    assert [d["kind"] for d in karpenter] == ["KWOKNodeClass", "NodePool", "DaemonSet"]
    assert [d["kind"] for d in nodewright] == ["AKSNodeClass", "NodePool", "DaemonSet"]
    theirs, ours = karpenter[1]["spec"], nodewright[1]["spec"]
    assert theirs["template"]["spec"]["nodeClassRef"]["kind"] == "KWOKNodeClass"
    assert ours["template"]["spec"]["nodeClassRef"]["kind"] == "AKSNodeClass"
    assert theirs["template"]["spec"]["requirements"] == ours["template"]["spec"]["requirements"]
    assert (
        theirs["disruption"]
        == ours["disruption"]
        == {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "30s",
        }
    )
    assert karpenter[2] == nodewright[2]


def test_karpenters_nodes_get_the_allocatable_and_prices_nodewright_plans_with() -> None:
    ours = catalog()
    theirs = {item["name"]: item for item in karpenter_instance_types()}
    for name in INSTANCE_TYPES:
        resources = parse_resources(theirs[name]["resources"])
        allocatable = {key: resources[key] - KWOK_KUBE_RESERVED.get(key, 0) for key in resources}
        assert allocatable == ours[name].allocatable()
        offered = {
            (o["Requirements"][1]["values"][0], o["Requirements"][0]["values"][0]): o["Price"]
            for o in theirs[name]["offerings"]
        }
        assert offered == {(o.zone, o.capacity_type): o.price_micros / 1e6 for o in ours[name].offerings}


def test_the_bound_is_the_relaxations_optimum() -> None:
    # A CPU type at $1 for 4 CPUs and 2 GiB, a memory type at $1.5 for 1 CPU and 8 GiB: 10 CPUs and 20 GiB
    # take 2 of each ($5); either type alone needs 10 nodes ($10, $15).
    room = {"cpu-type": {CPU: 4000, MEMORY: 2, PODS: 100}, "memory-type": {CPU: 1000, MEMORY: 8, PODS: 100}}
    bound = lower_bound({CPU: 10_000, MEMORY: 20, PODS: 10}, room, {"cpu-type": 1.0, "memory-type": 1.5})
    assert bound.dollars_per_hour == pytest.approx(5.0)
    assert bound.mix == pytest.approx({"cpu-type": 2.0, "memory-type": 2.0})
    # Dearer memory nodes: the CPU type alone (10 nodes, memory binding) wins over the mix ($2 + 2 x $5).
    alone = lower_bound({CPU: 10_000, MEMORY: 20, PODS: 10}, room, {"cpu-type": 1.0, "memory-type": 5.0})
    assert alone == Bound(10.0, {"cpu-type": pytest.approx(10.0)})


def test_no_whole_packing_of_the_final_pods_costs_less_than_the_bound() -> None:
    deployments = workload(3)
    types = catalog()
    bound = workload_bound(deployments, types)
    daemon = daemonset_requests()
    pods = sorted(
        ((d.cpu, d.memory * 2**20) for d in deployments for _ in range(d.final)), key=lambda pod: -pod[1]
    )
    for name in INSTANCE_TYPES:  # first fit onto nodes of one type: a placement, so never below the bound
        allocatable = types[name].allocatable()
        capacity = (allocatable[CPU] - daemon[CPU], allocatable[MEMORY] - daemon[MEMORY])
        nodes: list[list[int]] = []
        for cpu, memory in pods:
            node = next((n for n in nodes if n[0] >= cpu and n[1] >= memory), None)
            if node is None:
                nodes.append(node := list(capacity))
            node[0] -= cpu
            node[1] -= memory
        price = min(o.price_micros for o in types[name].offerings if o.capacity_type == "on-demand") / 1e6
        assert len(nodes) * price >= bound.dollars_per_hour
    assert set(bound.mix) <= set(INSTANCE_TYPES)


def _event(resource: str, code: int, subresource: str = "", at: str = "2026-01-01T00:00:10.000000Z") -> str:
    ref = {"resource": resource, "namespace": NAMESPACE, "name": "x"}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps({"objectRef": ref, "responseStatus": {"code": code}, "stageTimestamp": at}) + "\n"


def test_the_audit_counts_evictions_granted_and_nodes_created_as_the_log_grows(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    audit = Audit(log)
    audit.read()  # not written yet
    log.write_text(_event("pods", 201, "eviction") + _event("pods", 429, "eviction") + _event("nodes", 201))
    with log.open("a") as out:
        out.write(_event("pods", 201, "eviction")[:20])  # a line still being written
    audit.read()
    assert (len(audit.evictions), len(audit.refused), len(audit.nodes_created)) == (1, 1, 1)
    with log.open("a") as out:
        out.write(_event("pods", 201, "eviction")[20:] + _event("nodes", 409))
    audit.read()
    assert (len(audit.evictions), len(audit.nodes_created)) == (2, 1)
    moment = audit.evictions[0]
    assert Audit.since(audit.evictions, moment) == 2 and Audit.since(audit.evictions, moment + 1) == 0


def _node(name: str, instance_type: str, zone: str = "eastus-1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": zone,
                "karpenter.sh/capacity-type": "on-demand",
            },
        }
    }


def test_dollars_per_hour_sums_the_nodes_offerings_and_refuses_an_unpriced_node() -> None:
    price = {
        ("Standard_D2s_v5", "eastus-1", "on-demand"): 0.096,
        ("Standard_E2s_v5", "eastus-2", "on-demand"): 0.126,
    }
    nodes = [_node("a", "Standard_D2s_v5"), _node("b", "Standard_E2s_v5", "eastus-2")]
    assert dollars_per_hour(nodes, price) == pytest.approx(0.222)
    with pytest.raises(RuntimeError, match="Node c: no price"):
        dollars_per_hour([_node("c", "Standard_D2s_v5", "eastus-3")], price)


def _side(side: str, dollars: list[float], evicted: list[int]) -> dict[str, Any]:
    def sample(value: float, pods: int) -> dict[str, Any]:
        return {
            "dollars_per_hour": value,
            "nodes": 3,
            "pods_evicted": pods,
            "nodes_launched": 1,
            "pods_not_running": 0,
            "evictions_refused": 0,
            "instance_types": {"Standard_D16s_v5": 3},
            "allocatable_mismatches": [],
        }

    return {
        "side": side,
        "version": "1.14.1" if side == "karpenter" else None,
        "finished": True,
        "failure": "",
        "peak": sample(dollars[0], 0),
        "minutes": [sample(value, pods) for value, pods in zip(dollars[1:], evicted, strict=True)],
        "autoscaler_cpu_seconds": 10.0,
    }


def test_the_figures_show_both_rows_each_minute_and_nodewrights_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [
        _side("karpenter", [40.0, 30.0, 20.0], [10, 20]),
        _side("nodewright", [40.0, 30.0, 16.0], [10, 24]),
    ]
    figures = result(rows, seed=1, minutes=1, step_seconds=60.0)
    assert figures["sides"]["karpenter"]["summary"]["evicted_per_dollar_per_hour_saved"] == 1.0
    bound = figures["bound"]["dollars_per_hour"]
    assert figures["ratios"] == {
        "final_dollars_per_hour": 0.8,
        "evicted_per_dollar_per_hour_saved": 1.0,
        "bound_over_karpenter": round(bound / 20.0, 3),
    }
    print_figures(figures)
    lines = capsys.readouterr().out.splitlines()
    minute_rows = [line.split() for line in lines if line[:1] in ("p", "0", "1") and "$/h" not in line]
    rows_of = {label: [row[1] for row in minute_rows if row[0] == label] for label in ("peak", "0", "1")}
    assert rows_of == {label: ["karpenter", "nodewright"] for label in ("peak", "0", "1")}
    ratio = next(line for line in lines if line.startswith("nodewright / karpenter")).split()
    assert ratio[3:] == ["0.8", "1.0"]
    assert any(line.startswith("lower bound for the final pods: $") for line in lines)
    assert any(
        f"no placement costs less than {round(bound / 20.0, 3)} of Karpenter's" in line for line in lines
    )
