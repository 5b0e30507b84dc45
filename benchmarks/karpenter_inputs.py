"""Karpenter's own scheduling-benchmark inputs, rebuilt: the 400 synthetic instance types and the diverse
five-kind pod mix with seeded random requests (scheduling_benchmark_test.go, as described in
shared/research/karpenter-core.md section 6.1)."""

from __future__ import annotations

import random
from typing import Any

from core import labels
from core.api.kube import Pod
from core.instancetypes.types import InstanceType, Offering, Overhead
from core.scheduling.requirements import Requirement, Requirements
from core.scheduling.scheduler import NodePoolSpec

ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
GIB = 2**30
CPU_CHOICES = ("100m", "250m", "500m", "1000m", "1500m")
MEMORY_CHOICES = ("100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi")
LABEL_VALUES = tuple("abcdefg")


def fake_instance_types(count: int = 400) -> list[InstanceType]:
    """Type i: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods; spot in zones 1-2, on-demand in zones 1-3; one price."""
    types = []
    for i in range(count):
        cpu, memory = i + 1, 2 * (i + 1) * GIB
        price = round((0.1 * cpu + 0.1 * memory / 1e9) * 1_000_000)
        offerings = tuple(
            Offering(
                zone,
                capacity_type,
                price,
                True,
                Requirements(
                    [
                        Requirement.new(labels.ZONE, "In", [zone]),
                        Requirement.new(labels.CAPACITY_TYPE, "In", [capacity_type]),
                    ]
                ),
            )
            for capacity_type, zones in (("spot", ZONES[:2]), ("on-demand", ZONES))
            for zone in zones
        )
        large = cpu > 4 and memory > 8 * GIB
        requirements = Requirements(
            [
                Requirement.new(labels.INSTANCE_TYPE, "In", [f"fake-it-{i}"]),
                Requirement.new(labels.ARCH, "In", ["amd64"]),
                Requirement.new(labels.OS, "In", ["linux", "windows", "darwin"]),
                Requirement.new(labels.ZONE, "In", list(ZONES)),
                Requirement.new(labels.CAPACITY_TYPE, "In", ["spot", "on-demand"]),
                Requirement.new("integer", "In", [str(cpu)]),
                Requirement.new("size", "In", ["large" if large else "small"]),
                *([Requirement.new("special", "In", ["optional"])] if large else []),
            ]
        )
        types.append(
            InstanceType(
                name=f"fake-it-{i}",
                requirements=requirements,
                offerings=offerings,
                capacity={"cpu": cpu * 1000, "memory": memory, "pods": 10 * (i + 1)},
                overhead=Overhead(kube_reserved={"cpu": 100, "memory": 10 * 2**20}),
            )
        )
    return types


def benchmark_nodepool() -> NodePoolSpec:
    """The benchmark's NodePool: no requirements, limits far away."""
    return NodePoolSpec(
        name="default",
        weight=0,
        requirements=Requirements(),
        labels={},
        limits={"cpu": 10_000_000 * 1000, "memory": 10_000_000 * GIB},
    )


def _pod(index: int, rng: random.Random, pod_labels: dict[str, str], extra: dict[str, Any]) -> Pod:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "resources": {
                    "requests": {"cpu": rng.choice(CPU_CHOICES), "memory": rng.choice(MEMORY_CHOICES)}
                },
            }
        ],
        **extra,
    }
    return Pod.model_validate(
        {
            "metadata": {
                "name": f"pod-{index}",
                "namespace": "default",
                "uid": f"uid-{index:06d}",
                "labels": pod_labels,
            },
            "spec": spec,
            "status": {
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
            },
        }
    )


def _spread(key: str, value: str) -> dict[str, Any]:
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"my-label": value}},
            }
        ]
    }


def diverse_pods(count: int, seed: int = 42) -> list[Pod]:
    """count/5 of each kind (generic, zonal spread, hostname spread, zonal self-affinity, hostname
    anti-affinity), the remainder generic; requests drawn from a seeded generator."""
    rng = random.Random(seed)
    per_kind = count // 5
    pods: list[Pod] = []

    def add(pod_labels: dict[str, str], extra: dict[str, Any]) -> None:
        pods.append(_pod(len(pods), rng, pod_labels, extra))

    for _ in range(per_kind):
        add({"my-label": rng.choice(LABEL_VALUES)}, {})
    for _ in range(per_kind):
        add({"my-label": rng.choice(LABEL_VALUES)}, _spread(labels.ZONE, rng.choice(LABEL_VALUES)))
    for _ in range(per_kind):
        add({"my-label": rng.choice(LABEL_VALUES)}, _spread(labels.HOSTNAME, rng.choice(LABEL_VALUES)))
    for _ in range(per_kind):
        value = rng.choice(LABEL_VALUES)
        term = {"labelSelector": {"matchLabels": {"my-affininity": value}}, "topologyKey": labels.ZONE}
        add(
            {"my-affininity": value},
            {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
        )
    for _ in range(per_kind):
        term = {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": labels.HOSTNAME}
        add(
            {"app": "nginx"},
            {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
        )
    while len(pods) < count:
        add({"my-label": rng.choice(LABEL_VALUES)}, {})
    return pods
