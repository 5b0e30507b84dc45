"""Builders for disruption scenarios: Karpenter's Catalog D and NPD NodePool (karpenter-core.md 7.2),
NodeClaim/Node pairs as Karpenter's tests make them, bound pods, PDBs, and a one-call planner.

Nodes are initialized, Ready, labelled with their type, zone and capacity type, with 32 CPUs and 100 pods
allocatable unless a scenario says otherwise; pods are ReplicaSet-owned with no requests.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core import labels as wk
from core.api.kube import DaemonSet, Node, Pod, PodDisruptionBudget
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from core.disruption import DisruptionOptions, DisruptionPlan, plan_disruption
from core.disruption.commands import Blocked, BlockReason, Command
from core.instancetypes.types import InstanceType, Overhead
from core.scheduling.requirements import Operator, Requirement, Requirements
from core.scheduling.snapshot import fixed_provider
from tests.builders import offering, pod

NOW = datetime(2024, 6, 3, 12, 0, tzinfo=UTC)
"""A Monday at noon (UTC)."""
LAUNCHED = NOW - timedelta(days=1)
ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
GIB = 2**30


def price(cpu: int, memory_gib: int) -> int:
    """Catalog D's price rule in micro-dollars: $0.1 per vCPU and $0.1 per 10^9 bytes of memory."""
    return round((0.1 * cpu + 0.1 * memory_gib * GIB / 1e9) * 1_000_000)


def assorted_type(
    cpu: int, memory_gib: int, arch: str, os: str, zone: str, capacity_type: str
) -> InstanceType:
    """One Catalog D type: a single offering, Karpenter's fake labels and 100m/10Mi reserved."""
    name = f"{cpu}-cpu-{memory_gib}-mem-{arch}-{os}-{zone}-{capacity_type}"
    large = cpu > 4 and memory_gib > 8
    requirements = Requirements(
        [
            Requirement.new(wk.INSTANCE_TYPE, Operator.IN, [name]),
            Requirement.new(wk.ARCH, Operator.IN, [arch]),
            Requirement.new(wk.OS, Operator.IN, [os]),
            Requirement.new(wk.ZONE, Operator.IN, [zone]),
            Requirement.new(wk.CAPACITY_TYPE, Operator.IN, [capacity_type]),
            Requirement.new("size", Operator.IN, ["large" if large else "small"]),
            Requirement.new("integer", Operator.IN, [str(cpu)]),
        ]
    )
    return InstanceType(
        name=name,
        requirements=requirements,
        offerings=(offering(zone, capacity_type, price(cpu, memory_gib)),),
        capacity={"cpu": cpu * 1000, "memory": memory_gib * GIB, "pods": 5},
        overhead=Overhead(kube_reserved={"cpu": 100, "memory": 10 * 2**20}),
    )


@functools.cache
def catalog_d() -> tuple[InstanceType, ...]:
    """Karpenter's `InstanceTypesAssorted`: every vCPU x memory x zone x capacity type x OS x arch."""
    return tuple(
        assorted_type(cpu, memory, arch, os, zone, capacity_type)
        for cpu in (1, 2, 4, 8, 16, 32, 64)
        for memory in (1, 2, 4, 8, 16, 32, 64, 128)
        for zone in ZONES
        for capacity_type in (wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
        for os in ("linux", "windows")
        for arch in ("amd64", "arm64")
    )


def catalog_type(
    cpu: int, memory_gib: int, capacity_type: str = wk.CAPACITY_TYPE_ON_DEMAND, zone: str = ZONES[0]
) -> InstanceType:
    """The linux/amd64 Catalog D type of that shape, zone and capacity type."""
    name = f"{cpu}-cpu-{memory_gib}-mem-amd64-linux-{zone}-{capacity_type}"
    return next(it for it in catalog_d() if it.name == name)


MOST_EXPENSIVE = catalog_type(64, 128)
MOST_EXPENSIVE_SPOT = catalog_type(64, 128, wk.CAPACITY_TYPE_SPOT)


def nodepool(
    name: str = "default",
    *,
    policy: str = "WhenEmptyOrUnderutilized",
    consolidate_after: str = "0s",
    budgets: Sequence[Mapping[str, Any]] = ({"nodes": "100%"},),
    requirements: Sequence[Mapping[str, Any]] = (),
    expire_after: str = "720h",
    annotations: Mapping[str, str] | None = None,
    replicas: int | None = None,
) -> NodePool:
    """Karpenter's NPD (WhenEmptyOrUnderutilized, consolidateAfter 0s, budgets [100%]) unless told."""
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": list(requirements),
                "expireAfter": expire_after,
            }
        },
        "disruption": {
            "consolidationPolicy": policy,
            "consolidateAfter": consolidate_after,
            "budgets": [dict(budget) for budget in budgets],
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return NodePool.parse({"metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": spec})


def node_pair(
    name: str,
    instance_type: InstanceType = MOST_EXPENSIVE,
    *,
    pool: str = "default",
    allocatable: Mapping[str, str | int] | None = None,
    node_labels: Mapping[str, str] | None = None,
    claim_annotations: Mapping[str, str] | None = None,
    node_annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    initialized: bool = True,
    ready: bool = True,
    deleting: bool = False,
    created: datetime = LAUNCHED,
    last_pod_event: datetime | None = None,
    kubelet_version: str = "",
    image_id: str | None = None,
    drifted: str | None = None,
    drifted_at: datetime | None = None,
    termination_grace_period: str | None = None,
    expire_after: str = "720h",
) -> tuple[NodeClaim, Node]:
    """A launched, registered NodeClaim and its Node, labelled from the instance type's single offering."""
    only = instance_type.offerings[0]
    pair_labels = {
        wk.NODEPOOL: pool,
        wk.INSTANCE_TYPE: instance_type.name,
        wk.ZONE: only.zone,
        wk.CAPACITY_TYPE: only.capacity_type,
        wk.HOSTNAME: name,
        **(node_labels or {}),
    }
    resources = dict(allocatable or {"cpu": "32", "pods": "100"})
    conditions = [
        {"type": "Launched", "status": "True"},
        {"type": "Registered", "status": "True"},
    ]
    if initialized:
        conditions.append({"type": "Initialized", "status": "True", "lastTransitionTime": _time(created)})
    if drifted is not None:
        conditions.append(
            {
                "type": "Drifted",
                "status": "True",
                "reason": drifted,
                "lastTransitionTime": _time(drifted_at or created),
            }
        )
    claim_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        "requirements": [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": [instance_type.name]}],
        "expireAfter": expire_after,
    }
    if termination_grace_period is not None:
        claim_spec["terminationGracePeriod"] = termination_grace_period
    claim_metadata: dict[str, Any] = {
        "name": f"claim-{name}",
        "labels": {key: value for key, value in pair_labels.items() if key != wk.HOSTNAME},
        "annotations": dict(claim_annotations or {}),
        "creationTimestamp": _time(created),
    }
    if deleting:
        claim_metadata["deletionTimestamp"] = _time(NOW)
    status: dict[str, Any] = {
        "nodeName": name,
        "providerID": f"azure:///{name}",
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions,
    }
    if image_id is not None:
        status["imageID"] = image_id
    if last_pod_event is not None:
        status["lastPodEventTime"] = _time(last_pod_event)
    claim = NodeClaim.parse({"metadata": claim_metadata, "spec": claim_spec, "status": status})
    node = Node.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": {**pair_labels, **({wk.INITIALIZED: "true"} if initialized else {})},
                "annotations": dict(node_annotations or {}),
                "creationTimestamp": _time(created),
            },
            "spec": {"providerID": f"azure:///{name}", "taints": list(taints)},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "nodeInfo": {"kubeletVersion": kubelet_version},
            },
        }
    )
    return claim, node


def bound(node: str, name: str | None = None, *, app: str = "app", **options: Any) -> Pod:
    """A ReplicaSet pod of `app` running on `node`."""
    options.setdefault("owner_kind", "ReplicaSet")
    options.setdefault("owner_name", app)
    options.setdefault("created_seconds", 0)
    labels = {"app": app, **options.pop("labels", {})}
    annotations = options.pop("annotations", None)
    created = options.pop("created", None)
    built = pod(name, node_name=node, labels=labels, **options)
    if annotations or created is not None:
        metadata = built.metadata.model_copy(
            update={
                "annotations": dict(annotations or {}),
                "creation_timestamp": created or built.metadata.creation_timestamp,
            }
        )
        built = built.model_copy(update={"metadata": metadata})
    return built


def pdb(name: str, match_labels: Mapping[str, str], **spec: Any) -> PodDisruptionBudget:
    """A PodDisruptionBudget in "default" (`min_available=2`, `max_unavailable="10%"`...)."""
    camel = {"min_available": "minAvailable", "max_unavailable": "maxUnavailable"}
    body = {camel.get(key, key): value for key, value in spec.items()}
    return PodDisruptionBudget.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": dict(match_labels)}, **body},
        }
    )


def cluster(
    pools: Sequence[NodePool],
    pairs: Sequence[tuple[NodeClaim, Node]],
    pods: Sequence[Pod] = (),
    pdbs: Sequence[PodDisruptionBudget] = (),
    daemonsets: Sequence[DaemonSet] = (),
) -> Manifests:
    """The snapshot `plan-disruption` reads."""
    return Manifests(
        nodepools=list(pools),
        nodeclaims=[claim for claim, _ in pairs],
        nodes=[node for _, node in pairs],
        pods=list(pods),
        pdbs=list(pdbs),
        daemonsets=list(daemonsets),
    )


def plan(
    snapshot: Manifests,
    types: Sequence[InstanceType] | None = None,
    *,
    now: datetime = NOW,
    **options: Any,
) -> DisruptionPlan:
    """Plan over Catalog D (or `types`) at NOW; options as `DisruptionOptions` fields."""
    provider = fixed_provider(list(types if types is not None else catalog_d()))
    if "methods" in options:
        options["methods"] = frozenset(options["methods"])
    return plan_disruption(snapshot, provider, DisruptionOptions(**options), now)


def disrupted(result: DisruptionPlan) -> list[list[str]]:
    """The candidates of each command, in order."""
    return [[candidate.node for candidate in command.candidates] for command in result.commands]


def blocked(result: DisruptionPlan, node: str) -> Blocked:
    """The blocked entry of a node (fails when the node was disrupted)."""
    return next(entry for entry in result.blocked if entry.node == node)


def codes(result: DisruptionPlan, node: str) -> list[BlockReason]:
    """The reason codes a node was kept for."""
    return [reason.code for reason in blocked(result, node).reasons]


def messages(result: DisruptionPlan, node: str) -> list[str]:
    """The sentences a node was kept for."""
    return [reason.message for reason in blocked(result, node).reasons]


def only_command(result: DisruptionPlan) -> Command:
    """The plan's single command (fails when there are none or several)."""
    assert len(result.commands) == 1, [command.log_line() for command in result.commands]
    return result.commands[0]


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
