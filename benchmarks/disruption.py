"""Disruption benchmark: a complete consolidation plan for a fragmented 1,000-node, 10,000-pod cluster.

The cluster is built from the real eastus catalog, seeded: four NodePools (general amd64 D/E/F spot and
on-demand, arm64 D on-demand, memory-optimised E on-demand, spot-only batch), node sizes from 2 to 32 vCPUs
in three zones, 250 deployments whose pods were packed onto the nodes and then scaled down, so most nodes are
partly empty and some are empty; a few pods and nodes carry `karpenter.sh/do-not-disrupt`, a few deployments
have PodDisruptionBudgets that allow no eviction. Everything is older than `consolidateAfter`.

The figure that matters is the time of `plan_disruption` (snapshot, candidates, every method, every node
decided); parsing the manifests is timed apart. Peak memory is the max RSS of the process that plans.

Then the plans are applied pass after pass (`apply_commands`: candidates gone, replacements launched, pods where
the commands sent them), until a pass plans nothing, by Karpenter's methods alone and with the repack; the final
cost is compared with the solver's bound of any sequence of passes (`RepackOptions.eventual_bound`), and every
pass of the repack's run is planned both ways in the same process, for their times.

Savings are compared with a lower bound: per NodePool, the cluster cost if the pods' total requests were
packed perfectly onto that pool's cheapest instance type per unit of CPU and of memory (whichever resource
costs more), on any offering the pool allows. No plan can cost less; pods that cannot move (do-not-disrupt,
PDBs), whole-node granularity and Karpenter's one-replacement-per-command rule keep a real plan above it.

    python benchmarks/disruption.py                 # every run, a table
    python benchmarks/disruption.py --run realistic # one run, JSON
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import labels as wk
from core.api.kube import pod_requests
from core.api.manifests import Manifests, parse_manifests
from core.disruption import DisruptionOptions, DisruptionPlan, plan_disruption
from core.disruption.options import RepackOptions
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import InstanceType
from core.resources import CPU, MEMORY, format_resources
from core.scheduling.snapshot import azure_provider

NODES = 1000
PODS = 10_000
DEPLOYMENTS = 250
SEED = 42
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LAUNCHED = NOW - timedelta(days=3)
ZONES = ("eastus-1", "eastus-2", "eastus-3")
MIB = 2**20


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    arch: str
    families: tuple[str, ...]
    capacity_types: tuple[str, ...]
    share: float
    """Of the nodes."""
    budget: str
    """Its disruption budget in the realistic run."""


POOLS = (
    Pool("general", "amd64", ("D", "E", "F"), ("spot", "on-demand"), 0.5, "20%"),
    Pool("arm", "arm64", ("D",), ("on-demand",), 0.2, "10%"),
    Pool("memory", "amd64", ("E",), ("on-demand",), 0.15, "25"),
    Pool("batch", "amd64", ("D", "F"), ("spot",), 0.15, "100%"),
)
SIZES = (2, 4, 8, 16, 32)
SIZE_WEIGHTS = (2, 4, 4, 2, 1)
POD_SHAPES = (
    (50, 64),
    (100, 128),
    (100, 256),
    (250, 256),
    (250, 512),
    (500, 1024),
    (1000, 2048),
    (500, 4096),
)
"""(millicores, MiB) of the deployments' containers."""
RUNS = ("realistic", "unlimited")
"""Budgets as POOLS say (Karpenter's default is 10%), or 100% everywhere: every consolidation found."""


def pool_types(types: list[InstanceType], pool: Pool) -> list[InstanceType]:
    """The catalog types a pool allows, of the benchmark's sizes, with an offering of each capacity type."""
    chosen = []
    for it in types:
        node = it.node_labels(it.offerings[0]) if it.offerings else {}
        offered = {offering.capacity_type for offering in it.offerings if offering.zone in ZONES}
        if (
            node.get(wk.ARCH) == pool.arch
            and node.get("karpenter.azure.com/sku-family") in pool.families
            and int(node.get("karpenter.azure.com/sku-cpu", "0")) in SIZES
            and node.get("karpenter.azure.com/sku-gpu-count") == "0"
            and set(pool.capacity_types) <= offered
        ):
            chosen.append(it)
    return chosen


def nodepool(pool: Pool, budget: str) -> dict[str, Any]:
    requirements = [
        {"key": wk.ARCH, "operator": "In", "values": [pool.arch]},
        {"key": wk.OS, "operator": "In", "values": ["linux"]},
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(pool.capacity_types)},
        {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": list(pool.families)},
        {"key": "karpenter.azure.com/sku-cpu", "operator": "In", "values": [str(size) for size in SIZES]},
    ]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": {"workload": pool.name}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                    "requirements": requirements,
                    "expireAfter": "720h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "1m",
                "budgets": [{"nodes": budget}],
            },
        },
    }


def _time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def node_pair(
    name: str, pool: Pool, it: InstanceType, zone: str, capacity_type: str, **node_extra: Any
) -> list[Any]:
    offering = next(o for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type)
    node_labels = {
        **it.node_labels(offering),
        wk.NODEPOOL: pool.name,
        wk.HOSTNAME: name,
        "workload": pool.name,
    }
    allocatable = format_resources(it.allocatable())
    provider_id = f"azure:///subscriptions/bench/resourceGroups/bench/providers/Microsoft.Compute/{name}"
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {key: value for key, value in node_labels.items() if key != wk.HOSTNAME},
            "creationTimestamp": _time(LAUNCHED),
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            "requirements": [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": [it.name]}],
            "expireAfter": "720h",
        },
        "status": {
            "nodeName": name,
            "providerID": provider_id,
            "capacity": allocatable,
            "allocatable": allocatable,
            "lastPodEventTime": _time(LAUNCHED + timedelta(hours=1)),
            "conditions": [
                {"type": condition, "status": "True", "lastTransitionTime": _time(LAUNCHED)}
                for condition in ("Launched", "Registered", "Initialized")
            ],
        },
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**node_labels, wk.INITIALIZED: "true"},
            "annotations": node_extra.get("annotations", {}),
            "creationTimestamp": _time(LAUNCHED),
        },
        "spec": {"providerID": provider_id},
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return [claim, node]


def pod(
    name: str, app: str, node: str, pool: Pool, cpu: int, memory: int, annotations: dict[str, str]
) -> dict[str, Any]:
    """A running ReplicaSet pod of `app` bound to `node`, requesting `cpu` millicores and `memory` MiB."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "uid": app, "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": app},
            "annotations": annotations,
            "creationTimestamp": _time(LAUNCHED),
            "ownerReferences": [owner],
        },
        "spec": {
            "nodeName": node,
            "nodeSelector": {"workload": pool.name},
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}}}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pdb(app: str, max_unavailable: int | str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": max_unavailable},
    }


def build_cluster(
    budgets: str, seed: int = SEED
) -> tuple[list[Any], dict[str, list[InstanceType]], Counter[str]]:
    """The cluster's documents, each pool's instance types (for the bound), and what was built."""
    rng = random.Random(seed)
    types = azure_instance_types(load_shipped_catalog("eastus"))
    documents: list[Any] = [
        {
            "apiVersion": "karpenter.azure.com/v1beta1",
            "kind": "AKSNodeClass",
            "metadata": {"name": "default"},
            "spec": {"imageFamily": "Ubuntu2204"},
        },
    ]
    allowed = {pool.name: pool_types(types, pool) for pool in POOLS}
    built: Counter[str] = Counter()
    nodes: list[tuple[str, Pool, dict[str, int]]] = []
    for pool in POOLS:
        documents.append(nodepool(pool, pool.budget if budgets == "realistic" else "100%"))
        for _ in range(round(NODES * pool.share)):
            size = rng.choices(SIZES, SIZE_WEIGHTS)[0]
            fitting = [
                it
                for it in allowed[pool.name]
                if int(it.node_labels(it.offerings[0])["karpenter.azure.com/sku-cpu"]) == size
            ]
            it = rng.choice(fitting)
            capacity_type = rng.choice(pool.capacity_types)
            zone = rng.choice(ZONES)
            name = f"{pool.name}-{len(nodes):04}"
            annotations = {"karpenter.sh/do-not-disrupt": "true"} if rng.random() < 0.01 else {}
            built["do-not-disrupt nodes"] += bool(annotations)
            documents.extend(node_pair(name, pool, it, zone, capacity_type, annotations=annotations))
            # Packed up to a fill the scale-down left: a few nodes empty, most between a fifth and most full.
            fill = 0.0 if rng.random() < 0.04 else rng.uniform(0.2, 0.95)
            room = {CPU: int(it.allocatable()[CPU] * fill), MEMORY: int(it.allocatable()[MEMORY] * fill)}
            nodes.append((name, pool, room))
    deployments = [
        (f"app-{index:03}", POD_SHAPES[rng.randrange(len(POD_SHAPES))], POOLS[index % len(POOLS)])
        for index in range(DEPLOYMENTS)
    ]
    by_pool: dict[str, list[tuple[str, dict[str, int]]]] = {pool.name: [] for pool in POOLS}
    for name, pool, room in nodes:
        by_pool[pool.name].append((name, room))
    replicas: Counter[str] = Counter()
    pods: list[Any] = []
    attempts = 0
    while len(pods) < PODS:
        attempts += 1
        if attempts > PODS * 50:
            raise RuntimeError("the nodes' fill leaves no room for the pods; raise the fill")
        app, (cpu, memory), pool = rng.choice(deployments)
        name, room = rng.choice(by_pool[pool.name])
        if room[CPU] < cpu or room[MEMORY] < memory * MIB:
            continue
        room[CPU] -= cpu
        room[MEMORY] -= memory * MIB
        replicas[app] += 1
        annotations = {"karpenter.sh/do-not-disrupt": "true"} if rng.random() < 0.003 else {}
        built["do-not-disrupt pods"] += bool(annotations)
        pods.append(pod(f"{app}-{replicas[app]:04}", app, name, pool, cpu, memory, annotations))
    documents.extend(pods)
    for index, (app, _, _) in enumerate(deployments):
        if index % 50 == 0:  # every 50th deployment: a PDB that allows no eviction at all
            documents.append(pdb(app, 0))
            built["blocking PDBs"] += 1
        elif index % 10 == 0:
            documents.append(pdb(app, "25%"))
            built["PDBs maxUnavailable 25%"] += 1
    built["nodes"] = len(nodes)
    built["pods"] = len(pods)
    return documents, allowed, built


def apply_commands(
    documents: list[Any],
    plan: DisruptionPlan,
    round_: int,
    types: Mapping[str, InstanceType],
    pools: Mapping[str, Pool],
) -> list[Any]:
    """The cluster after the plan's commands, as if each had run: candidates gone, replacements launched as
    planned (their first instance type, zone and capacity type), pods where the commands sent them."""
    gone = {c.node for command in plan.commands for c in command.candidates}
    renamed: dict[str, str] = {}
    added: list[Any] = []
    for command in plan.commands:
        for replacement in command.replacements:
            name = f"node-r{round_}-{len(renamed)}"
            renamed[replacement.name] = name
            it = types[replacement.instance_type or ""]
            zone = replacement.zone or ZONES[0]
            pool = pools[replacement.nodepool]
            added.extend(node_pair(name, pool, it, zone, replacement.capacity_type or pool.capacity_types[0]))
    moved = {
        move.pod.split("/", 1)[1]: renamed.get(move.destination or "", move.destination)
        for command in plan.commands
        for move in command.pods_moved
    }
    kept = []
    for document in documents:
        name = document.get("metadata", {}).get("name")
        if document["kind"] in ("Node", "NodeClaim") and name in gone:
            continue
        if document["kind"] == "Pod" and name in moved:
            document = {**document, "spec": {**document["spec"], "nodeName": moved[name]}}
        kept.append(document)
    return kept + added


def cheapest_per_unit(types: list[InstanceType], pool: Pool, name: str) -> float:
    """Micro-dollars per unit of a resource on the pool's cheapest type and offering for it."""
    return min(
        offering.price_micros / it.allocatable()[name]
        for it in types
        for offering in it.offerings
        if offering.capacity_type in pool.capacity_types
        and offering.zone in ZONES
        and it.allocatable().get(name)
    )


def lower_bound_micros(manifests: Manifests, allowed: dict[str, list[InstanceType]]) -> int:
    """Per pool: its pods' total CPU and memory requests at the cheapest price per unit, the dearer of two."""
    pool_of_node = {node.metadata.name: node.metadata.labels.get(wk.NODEPOOL, "") for node in manifests.nodes}
    totals: dict[str, Counter[str]] = {pool.name: Counter() for pool in POOLS}
    for pod in manifests.pods:
        for name, amount in pod_requests(pod).items():
            totals[pool_of_node[pod.spec.node_name or ""]][name] += amount
    bound = 0.0
    for pool in POOLS:
        bound += max(
            totals[pool.name][name] * cheapest_per_unit(allowed[pool.name], pool, name)
            for name in (CPU, MEMORY)
        )
    return round(bound)


def cluster_cost_micros(manifests: Manifests, allowed: dict[str, list[InstanceType]]) -> int:
    by_name = {it.name: it for types in allowed.values() for it in types}
    cost = 0
    for node in manifests.nodes:
        node_labels = node.metadata.labels
        it = by_name[node_labels[wk.INSTANCE_TYPE]]
        cost += next(
            o.price_micros
            for o in it.offerings
            if o.zone == node_labels[wk.ZONE] and o.capacity_type == node_labels[wk.CAPACITY_TYPE]
        )
    return cost


MAX_ROUNDS = 30
"""Passes one run applies at most (each run so far settled well before)."""


def timed_plan(
    manifests: Manifests, repack: bool, now: datetime = NOW
) -> tuple[DisruptionPlan, float, float]:
    """A plan of Karpenter's methods alone, or with the repack (and its cost and bound), its seconds and the CPU
    seconds the process spent on it (on a shared machine the second is the steadier)."""
    provider = azure_provider(load_shipped_catalog("eastus"), frozenset())
    options = DisruptionOptions(repack=RepackOptions(clock=time.monotonic) if repack else None)
    started, cpu = time.perf_counter(), time.process_time()
    plan = plan_disruption(manifests, provider, options, now)
    return plan, time.perf_counter() - started, time.process_time() - cpu


def eventual_bound(manifests: Manifests) -> tuple[int, bool]:
    """The solver's bound on what passes made one after another can reach (`RepackOptions.eventual_bound`), and
    whether it is exact."""
    provider = azure_provider(load_shipped_catalog("eastus"), frozenset())
    options = DisruptionOptions(methods=frozenset(), repack=RepackOptions(enabled=False, eventual_bound=True))
    cost = plan_disruption(manifests, provider, options, NOW).cost
    assert cost is not None
    return cost.bound_micros, cost.exact


def rounds(
    documents: list[Any], allowed: dict[str, list[InstanceType]], repack: bool
) -> tuple[int, list[dict[str, object]]]:
    """Plans applied pass after pass (as if each pass's commands had run) until a pass plans nothing: the final
    cost and each pass's figures. With the repack, each pass is also planned by Karpenter's methods alone in
    the same process, for its time."""
    types = {it.name: it for pool_types in allowed.values() for it in pool_types}
    pools = {pool.name: pool for pool in POOLS}
    passes: list[dict[str, object]] = []
    for round_ in range(MAX_ROUNDS):
        manifests = parse_manifests(documents, "benchmark")
        now = NOW + timedelta(hours=round_)
        row: dict[str, object] = {"round": round_ + 1}
        if repack:
            _, row["plan_seconds"], row["plan_cpu_seconds"] = timed_plan(manifests, repack=False, now=now)
        plan, seconds, cpu = timed_plan(manifests, repack=repack, now=now)
        prefix = "repack_" if repack else ""
        row[f"{prefix}plan_seconds"], row[f"{prefix}plan_cpu_seconds"] = seconds, cpu
        row["commands"] = len(plan.commands)
        row["repack_commands"] = sum(1 for c in plan.commands if c.method.value == "repack")
        row["savings_per_hour"] = round(plan.savings_micros / 1e6, 2)
        if not plan.commands:
            return cluster_cost_micros(manifests, allowed), passes
        passes.append(
            {key: round(value, 2) if isinstance(value, float) else value for key, value in row.items()}
        )
        documents = apply_commands(documents, plan, round_, types, pools)
    return cluster_cost_micros(parse_manifests(documents, "benchmark"), allowed), passes


def run_one(budgets: str) -> dict[str, object]:
    documents, allowed, built = build_cluster(budgets)
    started = time.perf_counter()
    manifests = parse_manifests(documents, "benchmark")
    parse_seconds = time.perf_counter() - started
    if manifests.problems:
        raise RuntimeError("\n".join(manifests.problems[:5]))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    timed_plan(manifests, repack=False)  # warms the caches both timed plans share
    repacked, repack_seconds, _ = timed_plan(manifests, repack=True)
    plan, plan_seconds, _ = timed_plan(manifests, repack=False)
    decided = {candidate.node for command in plan.commands for candidate in command.candidates}
    kept = Counter(reason.code.value for blocked in plan.blocked for reason in blocked.reasons[:1])
    cost = cluster_cost_micros(manifests, allowed)
    bound = lower_bound_micros(manifests, allowed)
    first = {
        "budgets": budgets,
        "nodes": built["nodes"],
        "pods": built["pods"],
        "built": dict(built),
        "parse_seconds": round(parse_seconds, 2),
        "plan_seconds": round(plan_seconds, 2),
        "every_node_decided": len(decided) + len(plan.blocked) == built["nodes"],
        "commands": len(plan.commands),
        "methods": dict(Counter(command.method.value for command in plan.commands)),
        "nodes_disrupted": len(decided),
        "kept_by_first_reason": dict(kept.most_common()),
        "cost_per_hour": round(cost / 1e6, 2),
        "savings_per_hour": round(plan.savings_micros / 1e6, 2),
        "lower_bound_per_hour": round(bound / 1e6, 2),
        "savings_share_of_possible": round(plan.savings_micros / (cost - bound), 3) if cost > bound else None,
        **repack_figures(repacked, repack_seconds, plan, cost),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "plan_rss_growth_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024),
    }
    return {**first, **rounds_figures(documents, allowed, manifests, cost)}


def repack_figures(
    repacked: DisruptionPlan, seconds: float, karpenter: DisruptionPlan, cost: int
) -> dict[str, object]:
    """The first pass with the repack: its time, savings, the solver's bound of this pass, and both plans' share of
    the saving achievable against it."""
    assert repacked.cost is not None
    tight = repacked.cost.bound_micros
    achievable = cost - tight
    return {
        "repack_plan_seconds": round(seconds, 2),
        "repack_commands": sum(1 for command in repacked.commands if command.method.value == "repack"),
        "repack_savings_per_hour": round(repacked.savings_micros / 1e6, 2),
        "tight_bound_per_hour": round(tight / 1e6, 2),
        "tight_bound": "exact" if repacked.cost.exact else "linear relaxation",
        "share_of_achievable": round(karpenter.savings_micros / achievable, 3) if achievable > 0 else None,
        "repack_share_of_achievable": round(repacked.savings_micros / achievable, 3)
        if achievable > 0
        else None,
    }


def rounds_figures(
    documents: list[Any], allowed: dict[str, list[InstanceType]], manifests: Manifests, cost: int
) -> dict[str, object]:
    """Karpenter's methods alone and with the repack, pass after pass until a pass plans nothing, against the
    bound of any sequence of passes."""
    bound, exact = eventual_bound(manifests)
    achievable = cost - bound
    figures: dict[str, object] = {
        "eventual_bound_per_hour": round(bound / 1e6, 2),
        "eventual_bound": "exact" if exact else "linear relaxation",
    }
    for label, repack in (("karpenter", False), ("repack", True)):
        final, passes = rounds(documents, allowed, repack)
        figures[f"{label}_rounds"] = len(passes)
        figures[f"{label}_final_per_hour"] = round(final / 1e6, 2)
        figures[f"{label}_share_of_eventual"] = (
            round((cost - final) / achievable, 3) if achievable > 0 else None
        )
        figures[f"{label}_passes"] = passes
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", choices=RUNS, help="one run in this process, as JSON")
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run_one(args.run)))
        return
    rows = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--run", budgets], check=True, capture_output=True, text=True
            ).stdout
        )
        for budgets in RUNS
    ]
    header = (
        f"{'budgets':<10} {'nodes':>5} {'pods':>6} {'parse s':>7} {'plan s':>6} {'cmds':>5} {'disrupt':>7} "
        f"{'$/h now':>8} {'saved':>7} {'LB $/h':>7} {'of poss':>7} {'peak MB':>7} {'plan +MB':>8}"
    )
    print(header)
    for row in rows:
        print(
            f"{row['budgets']:<10} {row['nodes']:>5} {row['pods']:>6} {row['parse_seconds']:>7} "
            f"{row['plan_seconds']:>6} {row['commands']:>5} {row['nodes_disrupted']:>7} "
            f"{row['cost_per_hour']:>8} "
            f"{row['savings_per_hour']:>7} {row['lower_bound_per_hour']:>7} "
            f"{row['savings_share_of_possible']:>7} {row['peak_rss_mb']:>7} {row['plan_rss_growth_mb']:>8}"
        )
    print()
    print()
    print(
        f"{'budgets':<10} {'plan s':>6} {'+repack s':>9} {'tight LB':>8} {'saved':>7} {'+repack':>7} "
        f"{'of ach.':>7} {'+repack':>7}"
    )
    for row in rows:
        print(
            f"{row['budgets']:<10} {row['plan_seconds']:>6} {row['repack_plan_seconds']:>9} "
            f"{row['tight_bound_per_hour']:>8} {row['savings_per_hour']:>7} {row['repack_savings_per_hour']:>7} "
            f"{row['share_of_achievable']:>7} {row['repack_share_of_achievable']:>7}"
        )
    print()
    print(
        "Pass after pass (each pass's commands applied, until a pass plans nothing), against the eventual LB:"
    )
    print(
        f"{'budgets':<10} {'ev. LB':>7} {'rounds':>6} {'final':>7} {'of ach.':>7} "
        f"{'+repack rounds':>14} {'final':>7} {'of ach.':>7} {'max pass s':>10} {'+repack':>7} {'CPU s':>5} "
        f"{'+repack':>7}"
    )
    for row in rows:
        passes = row["repack_passes"]
        print(
            f"{row['budgets']:<10} {row['eventual_bound_per_hour']:>7} {row['karpenter_rounds']:>6} "
            f"{row['karpenter_final_per_hour']:>7} {row['karpenter_share_of_eventual']:>7} "
            f"{row['repack_rounds']:>14} {row['repack_final_per_hour']:>7} {row['repack_share_of_eventual']:>7} "
            f"{max((p['plan_seconds'] for p in passes), default=0):>10} "
            f"{max((p['repack_plan_seconds'] for p in passes), default=0):>7} "
            f"{max((p['plan_cpu_seconds'] for p in passes), default=0):>5} "
            f"{max((p['repack_plan_cpu_seconds'] for p in passes), default=0):>7}"
        )
    for row in rows:
        print(f"{row['budgets']}, with the repack, pass by pass:")
        for p in row["repack_passes"]:
            print(
                f"  pass {p['round']:>2}: plan {p['plan_seconds']} s ({p['plan_cpu_seconds']} s CPU), +repack "
                f"{p['repack_plan_seconds']} s ({p['repack_plan_cpu_seconds']} s CPU), {p['commands']} commands "
                f"({p['repack_commands']} repack), saves ${p['savings_per_hour']}/h"
            )
    print()
    for row in rows:
        print(f"{row['budgets']}: every node decided: {row['every_node_decided']}; methods {row['methods']}")
        print(f"  kept, by first reason: {row['kept_by_first_reason']}")
    print(f"cluster: {rows[0]['built']}")
    print(
        "LB $/h: per NodePool, the pods' total CPU and memory requests at the pool's cheapest price per\n"
        "unit of each (the dearer of the two). 'of poss' = saved / ($/h now - LB $/h). No plan can go below\n"
        "the bound; do-not-disrupt pods and nodes, PDBs, whole nodes and one replacement per command keep\n"
        "real plans above it. 'plan +MB': how much the peak RSS grew while planning.\n"
        "tight LB: the solver's bound beside the plan with the repack (core.disruption.bound: no plan made now can\n"
        "cost less, within this pass's budgets and PDB allowances). 'of ach.': saved / ($/h now - tight LB), for\n"
        "Karpenter's methods alone and with the repack; 'plan s' and '+repack s' come from the same process.\n"
        "ev. LB: the solver's bound of any sequence of passes (RepackOptions.eventual_bound: this pass's budgets and\n"
        "PDB allowances left out, which later passes free). 'of ach.' there: (now - final) / (now - ev. LB), after\n"
        "the passes of Karpenter's methods alone, and of the shipped plan with the repack; 'max pass s': the longest\n"
        "pass of the repack's run, planned without and with the repack in the same process; 'CPU s': the same\n"
        "passes' most CPU seconds (on a shared machine the steadier figure)."
    )


if __name__ == "__main__":
    main()
