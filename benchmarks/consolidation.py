"""Consolidation benchmark: what a fragmented cluster costs once consolidation has worked on it, nodewright beside
Karpenter, each on a real control plane of its own. Prints figures; asserts nothing.

The workload is seeded (`--seed`): 36 Deployments, a third CPU-heavy (1 to 3 CPUs, 0.5 to 2 GiB), a third
memory-heavy (0.25 to 1 CPU, 6 to 12 GiB), a third balanced (0.5 to 2 CPUs at 3 to 5 GiB per CPU); a quarter
of them behind a PodDisruptionBudget (`maxUnavailable: 1`), a quarter spread over the three zones
(`topologySpreadConstraints`, maxSkew 1, DoNotSchedule); at least 300 pods at the end. It is scaled up in three
steps, each Deployment to a seeded share of its peak (each step waits until every pod runs), then down to its
final size in four seeded steps `--step-seconds` apart (60 s): Deployments shrink at different paces, so the
ReplicaSets' deletions leave the nodes partly empty.

Each side runs on a fresh control plane (`workers.controlplane`) started the same way, in a process of its own,
the peer's first:

- Karpenter v1.14.1's kwok controller (`benchmarks.karpenter`), with the emulated Azure's instance types as its
  instance-types file: the shipped eastus catalog, each type's resources set so that its Nodes' allocatable is
  what nodewright's scheduler and the emulated AKS nodes have;
- nodewright as users run it (`benchmarks.nodewright`): the emulated Azure, the Temporal dev server, a worker and
  the controller, whose disruption loop is the one that consolidates.

Both get the same NodePool (`nodepool()`; Karpenter's points at a KWOKNodeClass): 12 instance types in three
families of 2, 4 and 8 GiB per vCPU (Standard_F*s_v2, D*s_v5, E*s_v5; 2, 4, 8 and 16 vCPUs), on-demand, in zones
eastus-1 to 3, `consolidationPolicy: WhenEmptyOrUnderutilized`, `consolidateAfter: 30s`, Karpenter's default
budget (10 % of the nodes), and the same DaemonSet (deploy/examples' log-agent) on every node. Karpenter's
disruption loop polls every 10 s and waits 15 s before it executes a consolidation (constants of its disruption
controller, not settings); nodewright is given the same two figures (`NODEWRIGHT_DISRUPTION_POLL_SECONDS`,
`NODEWRIGHT_DISRUPTION_VALIDATION_SECONDS`), which are also its defaults. Every other setting is each side's
default: whatever consolidation method nodewright's disruption loop runs is what is measured.

At the peak and then every minute for `--minutes` (15) after the last step, each side's row:

- $/h: the sum of the on-demand prices of its Nodes (by their instance-type, zone and capacity-type labels, from
  the catalog both sides were given);
- nodes: how many Nodes exist;
- pods evicted: the workload's pods evicted since the first step down, from the API server's audit log (each
  `create pods/eviction` the API server answered 201; one refused by a PodDisruptionBudget, 429, is not one);
- nodes launched: Nodes created since the first step down (the audit log's `create nodes` answered 201);
- pods not running: the Deployments' replicas that are not Running at that moment.

Then, per side: the $/h at the peak and at the end, the saving, the pods evicted per $/h saved, and the end's $/h
over the lower bound; nodewright's figures over Karpenter's; and the bound over Karpenter's end, the least share of
Karpenter's $/h any plan can reach on this workload. The lower bound is what the final pods cost at
the least: the linear relaxation of packing their total CPU, memory and pod count (with the DaemonSet's requests
on every node) onto the NodePool's instance types at their prices, solved exactly (every basic solution of a
three-row program, with numpy). It ignores whole nodes, zones and the pods' own shapes, so no placement can cost
less; it is not always reachable.

    python benchmarks/consolidation.py --peer karpenter          # both sides, 15 minutes each after the last step
    python benchmarks/consolidation.py --peer karpenter --minutes 3 --seed 2   # a quicker run, another workload
    python benchmarks/consolidation.py --peer karpenter --json    # the figures as JSON
    python benchmarks/consolidation.py                            # nodewright alone, with the bound
    python benchmarks/consolidation.py --side karpenter           # one side in this process, JSON
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from benchmarks.karpenter import (
    KWOK_NODECLASS,
    REGION,
    fresh_control_plane,
    karpenter_nodepool,
    running_karpenter,
)
from benchmarks.nodewright import emulated_azure, examples, running_nodewright, settings, worker_roles
from benchmarks.processes import cpu_of, cpu_since, figures_of, first_exit, temporal_pid
from core import labels
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import InstanceType
from core.resources import CPU, MEMORY, PODS, Resources, parse_resources
from workers.controlplane.build import KARPENTER_VERSION, ensure_karpenter
from workers.controlplane.run import ControlPlane
from workers.temporal_server import DevServer
from workers.worker import connect

SIDES = ("karpenter", "nodewright")
"""In the order they run and are printed: the peer first."""
PEERS = ("karpenter",)
SEED = 1
MINUTES = 15
STEP_SECONDS = 60.0
SETTLE_SECONDS = 900.0
"""How long a step up may take to get every pod Running before the run gives up."""
POLL_SECONDS = 2.0
ZONES = ("eastus-1", "eastus-2", "eastus-3")
FAMILIES = ("Standard_F{}s_v2", "Standard_D{}s_v5", "Standard_E{}s_v5")
"""2, 4 and 8 GiB per vCPU."""
SIZES = (2, 4, 8, 16)
INSTANCE_TYPES = tuple(family.format(size) for family in FAMILIES for size in SIZES)
CAPACITY_TYPE = "on-demand"
CONSOLIDATE_AFTER = "30s"
KARPENTER_POLL_SECONDS = 10
"""Karpenter's disruption loop's `pollingPeriod` (pkg/controllers/disruption/controller.go, a constant)."""
KARPENTER_VALIDATION_SECONDS = 15
"""Karpenter's `commandValidationDelay` (pkg/controllers/disruption/consolidation.go, a constant)."""
TASK_QUEUE = "bench-consolidation"
NAMESPACE = "default"
WORKLOAD_LABEL = "bench-consolidation"
DEPLOYMENTS = 36
FINAL_PODS = 300
UP_STEPS = 3
DOWN_STEPS = 4
MIB = 2**20
SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "cpu": ((1000, 1500, 2000, 3000), (512, 1024, 1536, 2048)),
    "memory": ((250, 500, 750, 1000), (6144, 8192, 10240, 12288)),
    "balanced": ((500, 1000, 1500, 2000), (3, 4, 5)),
}
"""Per shape: the containers' CPU requests (millicores), and their memory (MiB), or for `balanced` GiB per CPU."""
OBSERVER_QPS = 50.0
PAUSE_IMAGE = "mcr.microsoft.com/oss/kubernetes/pause:3.6"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods/eviction"]}],
        },
        {"level": "Metadata", "verbs": ["create"], "resources": [{"group": "", "resources": ["nodes"]}]},
        {"level": "None"},
    ],
}
"""The API server records evictions and Node creates, once each with their answer, and nothing else."""


# --- the workload ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    shape: str
    cpu: int
    """Millicores per pod."""
    memory: int
    """MiB per pod."""
    replicas: tuple[int, ...]
    """After each step: UP_STEPS up to the peak, then DOWN_STEPS down to the final size."""
    budget: bool
    """Behind a PodDisruptionBudget of `maxUnavailable: 1`."""
    zonal_spread: bool

    @property
    def peak(self) -> int:
        return self.replicas[UP_STEPS - 1]

    @property
    def final(self) -> int:
        return self.replicas[-1]


def workload(seed: int) -> list[Deployment]:
    """The seeded Deployments (see the module): shapes in turn, final sizes of 4 to 12 topped up to FINAL_PODS,
    peaks 1.5 to 2.5 times those, and the steps between."""
    rng = random.Random(seed)
    shapes = [list(SHAPES)[index % len(SHAPES)] for index in range(DEPLOYMENTS)]
    finals = [rng.randint(4, 12) for _ in shapes]
    while sum(finals) < FINAL_PODS:
        finals[rng.randrange(DEPLOYMENTS)] += 1
    budgets = set(rng.sample(range(DEPLOYMENTS), DEPLOYMENTS // 4))
    spreads = set(rng.sample(range(DEPLOYMENTS), DEPLOYMENTS // 4))
    deployments = []
    for index, (shape, final) in enumerate(zip(shapes, finals, strict=True)):
        cpus, memories = SHAPES[shape]
        cpu = rng.choice(cpus)
        memory = cpu * rng.choice(memories) * 1024 // 1000 if shape == "balanced" else rng.choice(memories)
        peak = final + max(1, round(final * rng.uniform(0.5, 1.5)))
        up = sorted(rng.randint(0, peak) for _ in range(UP_STEPS - 1))
        down = sorted((rng.randint(final, peak) for _ in range(DOWN_STEPS - 1)), reverse=True)
        deployments.append(
            Deployment(
                name=f"{shape}-{index:02d}",
                shape=shape,
                cpu=cpu,
                memory=memory,
                replicas=(*up, peak, *down, final),
                budget=index in budgets,
                zonal_spread=index in spreads,
            )
        )
    return deployments


def desired(deployments: Sequence[Deployment], step: int) -> int:
    """The workload's pods after `step` (0-based over every step, up then down)."""
    return sum(deployment.replicas[step] for deployment in deployments)


def deployment_manifest(deployment: Deployment, replicas: int) -> dict[str, Any]:
    selector = {"app": deployment.name}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {"cpu": f"{deployment.cpu}m", "memory": f"{deployment.memory}Mi"}},
            }
        ]
    }
    if deployment.zonal_spread:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": labels.ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": selector},
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment.name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": {**selector, WORKLOAD_LABEL: "true"}}, "spec": spec},
        },
    }


def budget_manifest(deployment: Deployment) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": deployment.name, "namespace": NAMESPACE},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": deployment.name}}},
    }


# --- what both sides are given ------------------------------------------------------------------------------------


def nodepool() -> dict[str, Any]:
    """nodewright's NodePool (Karpenter gets it through `karpenter_nodepool`): only well-known keys, so that it
    means the same to both."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": labels.ARCH, "operator": "In", "values": ["amd64"]},
                        {"key": labels.OS, "operator": "In", "values": ["linux"]},
                        {"key": labels.CAPACITY_TYPE, "operator": "In", "values": [CAPACITY_TYPE]},
                        {"key": labels.ZONE, "operator": "In", "values": list(ZONES)},
                        {"key": labels.INSTANCE_TYPE, "operator": "In", "values": list(INSTANCE_TYPES)},
                    ],
                }
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": CONSOLIDATE_AFTER,
            },
        },
    }


def _example(kind: str) -> dict[str, Any]:
    return next(document for document in examples() if document["kind"] == kind)


def side_objects(side: str) -> list[dict[str, Any]]:
    """What a side's cluster starts with: its node class, the NodePool, deploy/examples' DaemonSet."""
    if side == "karpenter":
        return [KWOK_NODECLASS, karpenter_nodepool(nodepool()), _example("DaemonSet")]
    return [_example("AKSNodeClass"), nodepool(), _example("DaemonSet")]


def daemonset_requests() -> Resources:
    """What the DaemonSet's pod holds on every node, itself included (one pod)."""
    container = _example("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    return {**parse_resources(container["resources"]["requests"]), PODS: 1}


def catalog() -> dict[str, InstanceType]:
    """The region's instance types by name, as both sides were given them."""
    return {
        instance_type.name: instance_type
        for instance_type in azure_instance_types(load_shipped_catalog(REGION))
    }


def prices(types: Mapping[str, InstanceType]) -> dict[tuple[str, str, str], float]:
    """$/h by (instance type, zone, capacity type)."""
    return {
        (name, offering.zone, offering.capacity_type): offering.price_micros / 1e6
        for name, instance_type in types.items()
        for offering in instance_type.offerings
    }


# --- the lower bound -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bound:
    dollars_per_hour: float
    mix: dict[str, float]
    """Fractional nodes of each instance type in the relaxation's optimum."""


def lower_bound(demand: Resources, room: Mapping[str, Resources], price: Mapping[str, float]) -> Bound:
    """The least $/h of nodes whose `room` (per instance type: allocatable less what every node holds anyway)
    adds up to `demand` in CPU, memory and pods, nodes being divisible: the linear relaxation of packing the pods,
    min price·x subject to room·x >= demand, x >= 0. With three rows an optimum is a basic solution, k instance
    types solving k of the rows with equality (k <= 3); every one is tried, the feasible cheapest kept."""
    resources = [name for name in (CPU, MEMORY, PODS) if demand.get(name, 0) > 0]
    names = sorted(room)
    # Each row scaled by its demand (so that rows in millicores and in bytes compare): room·x >= 1.
    matrix = np.array(
        [[room[name].get(resource, 0) / demand[resource] for name in names] for resource in resources]
    )
    cost = np.array([price[name] for name in names])
    best = Bound(float("inf"), {})
    for size in range(1, len(resources) + 1):
        for rows in itertools.combinations(range(len(resources)), size):
            for columns in itertools.combinations(range(len(names)), size):
                square = matrix[np.ix_(rows, columns)]
                if abs(np.linalg.det(square)) < 1e-12:
                    continue
                solved = np.linalg.solve(square, np.ones(size))
                if (solved < 0).any():
                    continue
                nodes = np.zeros(len(names))
                nodes[list(columns)] = solved
                if (matrix @ nodes < 1 - 1e-9).any():
                    continue
                dollars = float(cost @ nodes)
                if dollars < best.dollars_per_hour:
                    best = Bound(dollars, {names[c]: float(nodes[c]) for c in columns if nodes[c] > 0})
    return best


def workload_bound(deployments: Sequence[Deployment], types: Mapping[str, InstanceType]) -> Bound:
    """The lower bound for the workload's final pods on the NodePool's instance types, on-demand, in its zones."""
    final = [deployment for deployment in deployments if deployment.final]
    demand = {
        CPU: sum(d.final * d.cpu for d in final),
        MEMORY: sum(d.final * d.memory * MIB for d in final),
        PODS: sum(d.final for d in final),
    }
    daemon = daemonset_requests()
    room, price = {}, {}
    for name in INSTANCE_TYPES:
        instance_type = types[name]
        allocatable = instance_type.allocatable()
        room[name] = {resource: allocatable.get(resource, 0) - daemon.get(resource, 0) for resource in demand}
        price[name] = min(
            offering.price_micros / 1e6
            for offering in instance_type.offerings
            if offering.capacity_type == CAPACITY_TYPE and offering.zone in ZONES and offering.available
        )
    return lower_bound(demand, room, price)


# --- what the API server saw -------------------------------------------------------------------------------------


@dataclass
class Audit:
    """The API server's audit log (AUDIT_POLICY), read as it grows: when each of the workload's pods was evicted
    and each Node created, and how many evictions were refused."""

    path: Path
    offset: int = 0
    evictions: list[float] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)
    nodes_created: list[float] = field(default_factory=list)

    def read(self) -> None:
        """The events written since the last read (a line still being written waits for the next)."""
        if not self.path.is_file():
            return  # nothing audited yet
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read()
        complete = text[: text.rfind(b"\n") + 1] if b"\n" in text else b""
        self.offset += len(complete)
        for line in complete.decode().splitlines():
            self._count(json.loads(line))

    def _count(self, event: dict[str, Any]) -> None:
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code")
        at = datetime.fromisoformat(str(event.get("stageTimestamp")).replace("Z", "+00:00")).timestamp()
        if ref.get("resource") == "pods" and ref.get("subresource") == "eviction":
            if ref.get("namespace") == NAMESPACE:
                (self.evictions if code in (200, 201) else self.refused).append(at)
        elif ref.get("resource") == "nodes" and code == 201:
            self.nodes_created.append(at)

    @staticmethod
    def since(moments: list[float], origin: float) -> int:
        return sum(moment >= origin for moment in moments)


def _node_type(node: dict[str, Any]) -> tuple[str, str, str]:
    node_labels = node["metadata"].get("labels") or {}
    return (
        node_labels.get(labels.INSTANCE_TYPE, ""),
        node_labels.get(labels.ZONE, ""),
        node_labels.get(labels.CAPACITY_TYPE, ""),
    )


def dollars_per_hour(nodes: Sequence[dict[str, Any]], price: Mapping[tuple[str, str, str], float]) -> float:
    """The price of the Nodes, each by its instance type, zone and capacity type; a Node without a price in the
    catalog is an error (the comparison would be wrong)."""
    total = 0.0
    for node in nodes:
        key = _node_type(node)
        if key not in price:
            raise RuntimeError(f"Node {node['metadata']['name']}: no price for {key} in the catalog")
        total += price[key]
    return round(total, 4)


def allocatable_mismatches(nodes: Sequence[dict[str, Any]], types: Mapping[str, InstanceType]) -> list[str]:
    """The Nodes whose allocatable CPU or memory is not their instance type's in the catalog: both sides must
    fit the same pods on a node of the same type."""
    found = []
    for node in nodes:
        name, _, _ = _node_type(node)
        reported = parse_resources((node.get("status") or {}).get("allocatable"))
        expected = types[name].allocatable() if name in types else {}
        if any(reported.get(resource) != expected.get(resource) for resource in (CPU, MEMORY)):
            found.append(node["metadata"]["name"])
    return found


def running(pods: Sequence[dict[str, Any]]) -> int:
    return sum(
        (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
        for pod in pods
    )


# --- one side ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Autoscaler:
    processes: dict[str, subprocess.Popen[bytes]]
    """Every process the side started (the simulation's too): one that exits ends the run."""
    pids: dict[str, int]
    """The autoscaler's own processes, whose CPU is its cost."""


@contextlib.asynccontextmanager
async def karpenter(
    plane: ControlPlane, directory: Path, logs: Path, kube: KubernetesCluster, keep: bool
) -> AsyncIterator[Autoscaler]:
    await kube.apply(side_objects("karpenter"))
    async with running_karpenter(plane, directory, logs, kube) as process:
        yield Autoscaler({"karpenter": process}, {"karpenter": process.pid})


@contextlib.asynccontextmanager
async def nodewright(
    plane: ControlPlane, directory: Path, logs: Path, kube: KubernetesCluster, keep: bool
) -> AsyncIterator[Autoscaler]:
    """nodewright's processes; with `keep`, Temporal's state in the side's directory too (temporal.db), so that
    its histories can be read (`nodewright explain`) after the run."""
    async with (
        DevServer(
            log_path=logs / "temporal.log", db_filename=directory / "temporal.db" if keep else None
        ) as temporal,
        emulated_azure(plane, directory, logs) as (azure, azure_environment),
    ):
        client = await connect(temporal.target)
        await kube.apply(side_objects("nodewright"))
        environment = {
            **settings(plane, temporal.target, TASK_QUEUE, azure_environment),
            "NODEWRIGHT_DISRUPTION_POLL_SECONDS": str(KARPENTER_POLL_SECONDS),
            "NODEWRIGHT_DISRUPTION_VALIDATION_SECONDS": str(KARPENTER_VALIDATION_SECONDS),
        }
        workers = worker_roles(1, split=False)
        async with running_nodewright(plane, logs, environment, workers, client, {"azure": azure}) as ours:
            pids = {name: process.pid for name, process in ours.items()} | {"temporal": temporal_pid()}
            yield Autoscaler({"azure": azure, **ours}, pids)


AUTOSCALERS = {"karpenter": karpenter, "nodewright": nodewright}


class Stopped(Exception):
    """The run cannot go on: a process exited, or the pods did not all run in time."""


@dataclass
class Run:
    """One side's run on its cluster, and what it has seen so far."""

    side: str
    kube: KubernetesCluster
    watched: dict[str, subprocess.Popen[bytes]]
    deployments: list[Deployment]
    audit: Audit
    types: dict[str, InstanceType]
    price: dict[tuple[str, str, str], float]
    scale_down: float = float("inf")
    """When the first step down was applied: evictions and launches count from then."""

    async def wait(self, seconds: float) -> None:
        """`seconds`, checking that every process lives."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if exited := first_exit(self.watched):
                raise Stopped(exited)
            await asyncio.sleep(min(POLL_SECONDS, left))

    async def pods(self) -> list[dict[str, Any]]:
        return await self.kube.list_objects("Pod", NAMESPACE, label_selector=f"{WORKLOAD_LABEL}=true")

    async def step(self, step: int) -> None:
        """Every Deployment at its size after `step` (their budgets with the first)."""
        documents = [deployment_manifest(d, d.replicas[step]) for d in self.deployments]
        if step == 0:
            documents += [budget_manifest(d) for d in self.deployments if d.budget]
        await self.kube.apply(documents)

    async def until_running(self, step: int, timeout: float) -> None:
        wanted, started = desired(self.deployments, step), time.monotonic()
        while (now := running(await self.pods())) < wanted:
            if time.monotonic() - started > timeout:
                raise Stopped(f"step {step + 1} up: {now} of {wanted} pods running after {timeout:g} s")
            await self.wait(POLL_SECONDS)

    async def sample(self, step: int) -> dict[str, Any]:
        """The row of this moment (see the module), the workload being at its size after `step`."""
        nodes = await self.kube.list_objects("Node")
        pods = await self.pods()
        self.audit.read()
        return {
            "at": time.time(),
            "dollars_per_hour": dollars_per_hour(nodes, self.price),
            "nodes": len(nodes),
            "pods_evicted": Audit.since(self.audit.evictions, self.scale_down),
            "nodes_launched": Audit.since(self.audit.nodes_created, self.scale_down),
            "pods_not_running": max(0, desired(self.deployments, step) - running(pods)),
            "evictions_refused": Audit.since(self.audit.refused, self.scale_down),
            "instance_types": dict(Counter(_node_type(node)[0] for node in nodes).most_common()),
            "allocatable_mismatches": allocatable_mismatches(nodes, self.types),
        }


def progress(side: str, label: str, row: dict[str, Any]) -> None:
    print(
        f"{side} {label}: ${row['dollars_per_hour']:.2f}/h, {row['nodes']} nodes, {row['pods_evicted']} pods "
        f"evicted, {row['nodes_launched']} nodes launched, {row['pods_not_running']} pods not running",
        file=sys.stderr,
        flush=True,
    )


async def drive(run: Run, minutes: int, step_seconds: float, settle_seconds: float) -> dict[str, Any]:
    """Up in steps (each until every pod runs), down in steps `step_seconds` apart, then a row a minute."""
    figures: dict[str, Any] = {"peak": None, "minutes": [], "failure": ""}
    try:
        for step in range(UP_STEPS):
            await run.step(step)
            await run.until_running(step, settle_seconds)
        figures["peak"] = await run.sample(UP_STEPS - 1)
        figures["evicted_before_scale_down"] = len(run.audit.evictions)
        progress(run.side, "peak", figures["peak"])
        run.scale_down = time.time()
        last = len(run.deployments[0].replicas) - 1
        for step in range(UP_STEPS, last + 1):
            if step > UP_STEPS:
                await run.wait(step_seconds)
            await run.step(step)
        last_step = time.monotonic()
        for minute in range(minutes + 1):
            await run.wait(last_step + 60 * minute - time.monotonic())
            figures["minutes"].append(await run.sample(last))
            progress(run.side, f"minute {minute}", figures["minutes"][-1])
    except Stopped as stopped:
        figures["failure"] = str(stopped)
        print(f"{run.side}: {stopped}", file=sys.stderr, flush=True)
    return figures


async def run_side(
    side: str, seed: int, minutes: int, step_seconds: float, settle_seconds: float, keep: bool
) -> dict[str, Any]:
    """One side's whole run on a fresh control plane: its row (JSON-ready)."""
    logging.basicConfig(level=logging.WARNING)
    async with (
        fresh_control_plane(side, f"bench-consolidation-{side}-", keep, AUDIT_POLICY) as (
            plane,
            directory,
            logs,
        ),
        load_cluster(str(plane.kubeconfig), qps=OBSERVER_QPS, burst=int(2 * OBSERVER_QPS)) as kube,
        AUTOSCALERS[side](plane, directory, logs, kube, keep) as autoscaler,
    ):
        types = catalog()
        run = Run(
            side,
            kube,
            {**autoscaler.processes, **plane.processes},
            workload(seed),
            Audit(plane.audit_log),
            types,
            prices(types),
        )
        before = cpu_of(autoscaler.pids)
        started = time.time()
        figures = await drive(run, minutes, step_seconds, settle_seconds)
        cpu = cpu_since(before, autoscaler.pids)
    return {
        "side": side,
        "version": KARPENTER_VERSION if side == "karpenter" else None,
        "seed": seed,
        **figures,
        "finished": not figures["failure"],
        "seconds": round(time.time() - started, 1),
        "autoscaler_cpu_seconds": round(
            sum(value for name, value in cpu.items() if name in autoscaler.pids), 1
        ),
    }


# --- both sides, and the figures -----------------------------------------------------------------------------------


def side_in_process(side: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """One side's run in a fresh process (a fresh control plane, its own peaks): its row, or None if it printed
    none."""
    return figures_of(
        [
            sys.executable,
            __file__,
            "--side",
            side,
            "--seed",
            str(args.seed),
            "--minutes",
            str(args.minutes),
            "--step-seconds",
            str(args.step_seconds),
            "--settle-seconds",
            str(args.settle_seconds),
            *(["--keep"] if args.keep else []),
        ],
        f"the {side} run",
    )


def summary(row: dict[str, Any], bound: Bound) -> dict[str, Any]:
    """A side's end: $/h at the peak and at the last minute, the saving, pods evicted per $/h saved, the end
    over the bound."""
    last = row["minutes"][-1] if row["minutes"] else None
    if row["peak"] is None or last is None:
        return {}
    saved = row["peak"]["dollars_per_hour"] - last["dollars_per_hour"]
    return {
        "peak_dollars_per_hour": row["peak"]["dollars_per_hour"],
        "final_dollars_per_hour": last["dollars_per_hour"],
        "saved_dollars_per_hour": round(saved, 4),
        "pods_evicted": last["pods_evicted"],
        "nodes_launched": last["nodes_launched"],
        "evicted_per_dollar_per_hour_saved": round(last["pods_evicted"] / saved, 2) if saved > 0 else None,
        "final_over_bound": round(last["dollars_per_hour"] / bound.dollars_per_hour, 3),
    }


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def result(rows: list[dict[str, Any]], seed: int, minutes: int, step_seconds: float) -> dict[str, Any]:
    deployments = workload(seed)
    bound = workload_bound(deployments, catalog())
    sides = {row["side"]: {**row, "summary": summary(row, bound)} for row in rows}
    figures: dict[str, Any] = {
        "seed": seed,
        "minutes": minutes,
        "step_seconds": step_seconds,
        "workload": {
            "deployments": len(deployments),
            "shapes": dict(Counter(deployment.shape for deployment in deployments)),
            "with_budget": sum(deployment.budget for deployment in deployments),
            "zonal_spread": sum(deployment.zonal_spread for deployment in deployments),
            "pods_peak": desired(deployments, UP_STEPS - 1),
            "pods_final": desired(deployments, -1),
        },
        "instance_types": list(INSTANCE_TYPES),
        "consolidate_after": CONSOLIDATE_AFTER,
        "bound": {"dollars_per_hour": round(bound.dollars_per_hour, 4), "mix": bound.mix},
        "sides": sides,
    }
    ours, theirs = sides.get("nodewright", {}).get("summary"), sides.get("karpenter", {}).get("summary")
    if ours and theirs:
        figures["ratios"] = {
            "final_dollars_per_hour": _ratio(
                ours["final_dollars_per_hour"], theirs["final_dollars_per_hour"]
            ),
            "evicted_per_dollar_per_hour_saved": _ratio(
                ours["evicted_per_dollar_per_hour_saved"], theirs["evicted_per_dollar_per_hour_saved"]
            ),
            "bound_over_karpenter": _ratio(bound.dollars_per_hour, theirs["final_dollars_per_hour"]),
        }
    return figures


def _name(row: dict[str, Any]) -> str:
    return f"karpenter v{row['version']}" if row["side"] == "karpenter" else row["side"]


def _cell(value: Any, width: int) -> str:
    return f"{'-' if value is None else value!s:>{width}}"


MINUTE_COLUMNS = (
    ("$/h", "dollars_per_hour", 9),
    ("nodes", "nodes", 7),
    ("pods evicted", "pods_evicted", 14),
    ("nodes launched", "nodes_launched", 16),
    ("pods not running", "pods_not_running", 18),
)
SUMMARY_COLUMNS = (
    ("peak $/h", "peak_dollars_per_hour", 10),
    ("final $/h", "final_dollars_per_hour", 11),
    ("saved $/h", "saved_dollars_per_hour", 11),
    ("pods evicted", "pods_evicted", 14),
    ("evicted per $/h saved", "evicted_per_dollar_per_hour_saved", 23),
    ("final / bound", "final_over_bound", 15),
)


def print_figures(figures: dict[str, Any]) -> None:
    work, bound = figures["workload"], figures["bound"]
    print(
        f"seed {figures['seed']}: {work['deployments']} Deployments ("
        + ", ".join(f"{count} {shape}" for shape, count in work["shapes"].items())
        + f"; {work['with_budget']} with a PDB, {work['zonal_spread']} spread over zones), {work['pods_peak']} pods "
        f"at the peak, {work['pods_final']} after {DOWN_STEPS} steps down {figures['step_seconds']:g} s apart; "
        f"consolidateAfter {figures['consolidate_after']}"
    )
    rows = [figures["sides"][side] for side in SIDES if side in figures["sides"]]
    print(f"\n{'minute':<8}{'side':<20}" + "".join(f"{title:>{width}}" for title, _, width in MINUTE_COLUMNS))
    moments = [("peak", lambda row: row["peak"])] + [
        (
            str(minute),
            lambda row, minute=minute: row["minutes"][minute] if minute < len(row["minutes"]) else None,
        )
        for minute in range(figures["minutes"] + 1)
    ]
    for label, moment in moments:
        for row in rows:
            if (sample := moment(row)) is None:
                continue
            print(
                f"{label:<8}{_name(row):<20}"
                + "".join(
                    _cell(
                        "-" if label == "peak" and key in ("pods_evicted", "nodes_launched") else sample[key],
                        width,
                    )
                    for _, key, width in MINUTE_COLUMNS
                )
            )
    print(
        f"\n{'':<28}"
        + "".join(f"{title:>{width}}" for title, _, width in SUMMARY_COLUMNS)
        + f"{'autoscaler CPU s':>18}"
    )
    for row in rows:
        print(
            f"{_name(row) + ('' if row['finished'] else ' (unfinished)'):<28}"
            + "".join(_cell(row["summary"].get(key), width) for _, key, width in SUMMARY_COLUMNS)
            + _cell(row["autoscaler_cpu_seconds"], 18)
        )
    if ratios := figures.get("ratios"):
        print(
            f"{'nodewright / karpenter':<28}{'':>10}{_cell(ratios['final_dollars_per_hour'], 11)}{'':>25}"
            f"{_cell(ratios['evicted_per_dollar_per_hour_saved'], 23)}"
        )
    mix = ", ".join(f"{count:.2f} x {name}" for name, count in sorted(bound["mix"].items()))
    print(f"lower bound for the final pods: ${bound['dollars_per_hour']:.2f}/h ({mix}; nodes divisible)")
    if ratios:
        print(
            f"no placement costs less than {ratios['bound_over_karpenter']} of Karpenter's final $/h "
            "(the lower bound over it)"
        )
    for row in rows:
        if row["minutes"]:
            last = row["minutes"][-1]
            types = ", ".join(f"{count} x {name}" for name, count in last["instance_types"].items())
            print(f"{_name(row)} at the end: {types}; {last['evictions_refused']} evictions refused by a PDB")
            if last["allocatable_mismatches"]:
                print(
                    f"  Nodes whose allocatable is not their type's: {', '.join(last['allocatable_mismatches'])}"
                )
        if row["failure"]:
            print(f"{_name(row)} NOT FINISHED: {row['failure']}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--peer", choices=PEERS, help=f"also run Karpenter v{KARPENTER_VERSION}'s kwok controller"
    )
    parser.add_argument("--side", choices=SIDES, help="one side's run in this process, as JSON")
    parser.add_argument("--seed", type=int, default=SEED, help="the workload's seed (default %(default)s)")
    parser.add_argument(
        "--minutes",
        type=int,
        default=MINUTES,
        help="rows a minute apart after the last step (default %(default)s)",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=STEP_SECONDS,
        help="between the steps down (default %(default)s)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=SETTLE_SECONDS,
        help="how long a step up may take to get every pod Running (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep each side's directory (state, every log)")
    args = parser.parse_args()
    if args.minutes < 0 or args.step_seconds < 0:
        parser.error("--minutes and --step-seconds must not be negative")
    if args.side:
        one = asyncio.run(
            run_side(args.side, args.seed, args.minutes, args.step_seconds, args.settle_seconds, args.keep)
        )
        print(json.dumps(one))
        sys.exit(0 if one["finished"] else 1)
    if args.peer:
        ensure_karpenter()  # built once (minutes) before any run's clock starts
    rows = []
    for side in SIDES if args.peer else ("nodewright",):
        if (row := side_in_process(side, args)) is None:
            sys.exit(1)
        rows.append(row)
    figures = result(rows, args.seed, args.minutes, args.step_seconds)
    if args.json:
        print(json.dumps(figures))
    else:
        print_figures(figures)
    sys.exit(0 if all(row["finished"] for row in rows) else 1)


if __name__ == "__main__":
    main()
