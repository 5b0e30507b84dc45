"""The lifecycle benchmark's peer and floor: what Karpenter's kwok controller is given, the floor's Nodes, and
the comparison's ratios (the runs themselves are `benchmarks/lifecycle.py --peer karpenter`, not tests)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.karpenter import KWOK_KUBE_RESERVED, karpenter_instance_types
from benchmarks.lifecycle_peer import floor_node, karpenter_objects
from benchmarks.lifecycle_report import print_comparison
from benchmarks.workload import PINNED_INSTANCE_TYPE, bench_deployment


def test_karpenter_gets_the_emulated_azure_instance_types_in_its_kwok_format() -> None:
    types = {item["name"]: item for item in karpenter_instance_types()}
    pinned = types[PINNED_INSTANCE_TYPE]
    assert pinned["architecture"] == "amd64"
    assert pinned["operatingSystems"] == ["linux"]
    # Its resources are nodewright's allocatable plus the kwok provider's own reserve, which it takes off again.
    assert pinned["resources"]["cpu"] == f"{1900 + KWOK_KUBE_RESERVED['cpu']}m"
    assert int(pinned["resources"]["memory"]) == 5_226_731_929 + KWOK_KUBE_RESERVED["memory"]
    offered = {
        tuple(requirement["values"][0] for requirement in offering["Requirements"])
        for offering in pinned["offerings"]
    }
    assert ("on-demand", "eastus-1") in offered and ("spot", "eastus-1") in offered
    assert all(offering["Price"] > 0 for offering in pinned["offerings"])


def test_karpenter_gets_a_kwok_nodeclass_and_the_examples_nodepool() -> None:
    objects = karpenter_objects()
    kinds = [document["kind"] for document in objects]
    assert kinds[:2] == ["KWOKNodeClass", "NodePool"]
    assert "AKSNodeClass" not in kinds and kinds.count("NodePool") == 1
    nodepool = objects[1]["spec"]
    assert nodepool["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.kwok.sh",
        "kind": "KWOKNodeClass",
        "name": "default",
    }
    assert not [r for r in nodepool["template"]["spec"]["requirements"] if "azure" in r["key"]]
    assert nodepool["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "1m",
    }
    assert "limits" not in nodepool


def test_a_floor_node_is_kwoks_and_fits_one_pinned_pod() -> None:
    node = floor_node("floor-0")
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    selector = bench_deployment(1, "pinned")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector.items() <= node["metadata"]["labels"].items()
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "floor-0"


def _row(side: str, seconds: float, cpu_per_claim: float) -> dict[str, Any]:
    return {
        "side": side,
        "pods": 20,
        "finished": True,
        "version": "1.14.1",
        "nodes": 20,
        "nodeclaims_created": 0 if side == "floor" else 20,
        "first_pending_to_last_created": seconds,
        "first_pending_to_last_running": seconds,
        "pending_to_created_p50": seconds,
        "pending_to_created_p99": seconds,
        "pending_to_running_p50": seconds,
        "pending_to_running_p99": seconds,
        "autoscaler_cpu_seconds_per_nodeclaim": cpu_per_claim,
        "autoscaler_cpu_seconds": cpu_per_claim * 20,
        "simulation_cpu_seconds": 1.0,
        "control_plane_cpu_seconds": 10.0 * seconds,
    }


def test_the_comparison_prints_a_row_per_side_and_nodewrights_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_comparison([_row("karpenter", 4.0, 0.1), _row("floor", 1.0, 0.0), _row("nodewright", 8.0, 0.4)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["karpenter", "nodewright", "floor"]
    assert "control plane CPU s" in lines[0]
    assert [line.split()[-1] for line in lines[1:4]] == ["40.0", "80.0", "10.0"]
    over_karpenter = next(line for line in lines if line.startswith("nodewright / karpenter")).split()[3:]
    assert over_karpenter == ["2.00"] * 6 + ["4.00"]
    over_floor = next(line for line in lines if line.startswith("nodewright / floor")).split()[3:]
    assert over_floor == ["8.00"] * 6 + ["-"]
