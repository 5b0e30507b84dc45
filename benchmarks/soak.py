"""Soak benchmark: a long day. About N nodes (200) churned for `--hours` (2) by a seeded schedule on the local
control plane, while every process's memory and the long-lived workflows' histories are sampled; then a scale to
zero. Prints the memory of each process over time and the largest histories; exits with 1 when memory grew after
the warm-up, a long-lived workflow's history was not bounded, or anything leaked.

The system runs as in benchmarks/chaos.py, with this tree's processes: the control plane, the emulated Azure, the
Temporal dev server (its state in a database file), two workers and two controllers (leader election, one
standby), with the StaticCapacity gate on. deploy/examples/ is applied with the NodePool's consolidateAfter at 30 s
and a disruption budget of 20 %, plus a static NodePool of 3 nodes and a CapacityWindow on it (5 nodes for 3
minutes every 10 minutes, raised 30 s ahead). Four deployments of pods that each need a node of their own (three
pinned to an instance type each, one left to the scheduler) start at N/4 replicas each.

The churn, drawn from `--seed`, one step every 30 to 90 s (`--step-seconds`, 60, on average):

- scale-ups and downs (two steps in three): a deployment set to between 3N/16 and 5N/16 replicas, so that the
  total stays within a quarter of N; nodes emptied are consolidated, pods pending provisioned;
- Spot evictions (one step in three): 1 to 5 Spot VMs evicted by the emulated Azure (a Preempt Scheduled Event,
  30 s notice), as Azure evicts them;
- drift, twice: a newer node image in the AKSNodeClass status at 35 % of the run, a label added to the NodePool
  template at 70 %: every node is replaced within the budget;
- a restart of each process, in the first half of the warm-up: a worker and the leading controller stopped with
  SIGTERM and started again (as `kubectl rollout restart` does), the Temporal dev server and kube-apiserver
  SIGKILLed and started again (on their data).

Every `--sample-seconds` (30) the benchmark reads each process's resident memory (VmRSS from /proc) and the
history length (events and bytes) of the current run of each long-lived workflow: the provisioner, the disruption
loop, the static NodePool's workflow, and every CapacityWindow run. The checks:

- memory flat after warm-up: the warm-up is the first `--warmup` (20 %) of the run, restarts included (a restarted
  process starts from its baseline again, so restarts later would hide growth). A process restarted in the warm-up
  warms up again: it is measured from its restart plus the warm-up's length. For each of nodewright's processes
  (workers, controllers) and Temporal, the mean of the samples over the 10 % of the run after its warm-up against
  the mean over the last 10 %: at most 10 % growth (`--max-growth`). The control plane, the emulated Azure and this
  process are printed, not judged (they are the simulation, or Kubernetes itself);
- long-lived workflows bounded by continue-as-new: the largest history of each stays within 10,240 events and
  10 MB (`--max-events`, `--max-history-mb`: Temporal's own warning thresholds), and how many runs each made;
- nothing leaked after the scale to zero: VMs, NICs, disks, Nodes and NodeClaims left, NodeClaim lifecycles still
  open, and workflows Failed or TimedOut (as benchmarks/chaos.py counts them).

    python benchmarks/soak.py                  # 2 hours (make bench-soak)
    python benchmarks/soak.py --hours 0.25     # a quick run of 15 minutes (make bench-soak HOURS=0.25)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from activities.kubeclient.cluster import KubernetesCluster
from benchmarks.chaos import (
    API_SERVER_READY_SECONDS,
    LEASE,
    LEASE_NAMESPACE,
    LEFT,
    Cluster,
    azure_left,
    consolidating_examples,
    leaked,
    left_over,
    on_a_control_plane,
    surroundings,
    until,
    watch,
)
from benchmarks.nodewright import CLUSTER, has_pollers, workflow_exists
from benchmarks.processes import conclude, tail, temporal_pid
from benchmarks.upgrade import (
    OPEN_LIFECYCLES,
    STARTUP_SECONDS,
    TERMINATION_GRACE_SECONDS,
    Build,
    Replica,
    deployment_replicas,
    supervise,
    system_settings,
)
from benchmarks.workload import APP, bench_deployment
from simulator.aks_client import AksEmulatorClient
from workers.controlplane.run import ControlPlane
from workers.demo.disruption import status_images
from workers.temporal_server import DevServer
from workflows.disruption import disruption_id
from workflows.ids import provisioner_id, static_id

TASK_QUEUE = "bench-soak"
DEPLOYMENTS = {
    f"{APP}-a": "Standard_D2s_v5",
    f"{APP}-b": "Standard_D2as_v5",
    f"{APP}-c": "Standard_F2s_v2",
    f"{APP}-d": None,
}
"""The churned deployments and the instance type each is pinned to (None: the scheduler's choice)."""
STATIC_POOL = "soak-static"
WINDOW = "soak-window"
CONSOLIDATE_AFTER = "30s"
BUDGET = "20%"
VALIDATION_SECONDS = 15.0
"""Karpenter's validation wait."""
DRIFTS = {0.35: "node image", 0.7: "NodePool template"}
"""When (a fraction of the run) each drift comes."""
RESTARTS = ("worker", "controller", "temporal", "kube-apiserver")
OUTAGE_SECONDS = 5.0
"""How long a SIGKILLed Temporal or API server stays down."""
JUDGED = ("worker", "controller", "temporal")
"""Processes whose memory must stay flat: nodewright's and Temporal (prefixes of the sampled names)."""
LONG_LIVED = ("Provisioner", "Disruption", "StaticNodePool", "CapacityWindow")
PRINTED_ROWS = 24


@dataclass
class Options:
    hours: float = 2.0
    nodes: int = 200
    seed: int = 1
    step_seconds: float = 60.0
    sample_seconds: float = 30.0
    warmup: float = 0.2
    max_growth: float = 0.10
    max_events: int = 10_240
    max_history_mb: float = 10.0
    drain_timeout: float = 1800.0
    keep: bool = False

    @property
    def seconds(self) -> float:
        return self.hours * 3600.0


# --- the cluster's objects -------------------------------------------------------------------------------


def static_pool(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": STATIC_POOL},
        "spec": {
            "replicas": replicas,
            "limits": {"nodes": 8},
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                    "expireAfter": "Never",
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["Standard_D2s_v5"],
                        },
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                }
            },
        },
    }


def capacity_window() -> dict[str, Any]:
    return {
        "apiVersion": "nodewright.io/v1alpha1",
        "kind": "CapacityWindow",
        "metadata": {"name": WINDOW},
        "spec": {
            "targetRef": {"apiGroup": "karpenter.sh", "kind": "NodePool", "name": STATIC_POOL},
            "schedule": "*/10 * * * *",
            "duration": "3m",
            "replicas": 5,
            "leadTime": "30s",
        },
    }


def deployments(replicas: dict[str, int]) -> list[dict[str, Any]]:
    return [
        bench_deployment(count, "pinned" if DEPLOYMENTS[name] else "any", name, DEPLOYMENTS[name] or "")
        for name, count in replicas.items()
    ]


# --- memory --------------------------------------------------------------------------------------------


def rss_mb(pid: int | None) -> float | None:
    """A live process's resident memory (VmRSS) in MB; None when it does not run."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


@dataclass
class Sample:
    at: float
    """Seconds since the churn began."""
    rss: dict[str, float | None]
    pids: dict[str, int | None]
    """Which process each name was then: a name whose pid changed was restarted."""
    histories: dict[str, tuple[int, int]]
    """The long-lived workflows' current runs: (events, bytes), by workflow (type or id)."""


def process_ids(
    plane: ControlPlane, azure: Any, replicas: dict[str, list[Replica]]
) -> dict[str, Callable[[], int | None]]:
    """How to find each process's pid now (a restarted one has a new pid)."""

    def supervised(each: Replica) -> Callable[[], int | None]:
        return lambda: (
            each.process.process.pid if each.process.process and each.process.process.poll() is None else None
        )

    def temporal() -> int | None:
        try:
            return temporal_pid()
        except RuntimeError:
            return None

    def plane_process(name: str) -> Callable[[], int | None]:
        return lambda: plane.processes[name].pid if plane.processes[name].poll() is None else None

    found: dict[str, Callable[[], int | None]] = {
        each.process.name: supervised(each) for role in ("worker", "controller") for each in replicas[role]
    }
    found["temporal"] = temporal
    found.update({name: plane_process(name) for name in plane.processes})
    found["azure"] = lambda: azure.pid if azure.poll() is None else None
    found["bench"] = os.getpid
    return found


# --- histories -------------------------------------------------------------------------------------------


async def long_lived_histories(client: Client) -> dict[str, tuple[int, int]]:
    """The current run of each long-lived workflow: (events, bytes); CapacityWindow: its largest run so far."""
    found: dict[str, tuple[int, int]] = {}
    for label, workflow_id in (
        ("Provisioner", provisioner_id(CLUSTER)),
        ("Disruption", disruption_id(CLUSTER)),
        ("StaticNodePool", static_id(CLUSTER, STATIC_POOL)),
    ):
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
        except Exception:
            continue
        info = description.raw_description.workflow_execution_info
        found[label] = (info.history_length, info.history_size_bytes)
    windows = []
    async for execution in client.list_workflows('WorkflowType="CapacityWindow"'):
        # Visibility has a run's history length once it closed; an open one is described.
        info = execution.raw_info
        if not info.history_length:
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            info = (await handle.describe()).raw_description.workflow_execution_info
        windows.append((info.history_length, info.history_size_bytes))
    if windows:
        found["CapacityWindow"] = max(windows)
    return found


async def runs_of(client: Client) -> dict[str, int]:
    """How many runs each long-lived workflow made (continue-as-new starts a new one)."""
    counts = {}
    for label in LONG_LIVED:
        counts[label] = (await client.count_workflows(f'WorkflowType="{label}"')).count
    return counts


# --- the churn -------------------------------------------------------------------------------------------


@dataclass
class Soak:
    options: Options
    plane: ControlPlane
    temporal: DevServer
    kube: KubernetesCluster
    emulator: AksEmulatorClient
    replicas: dict[str, list[Replica]]
    rng: random.Random
    replica_counts: dict[str, int] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    """What the churn did, when (seconds since it began)."""
    noticed: int = 0
    """Spot VMs the emulated Azure gave an eviction notice."""
    started: float = 0.0

    def note(self, what: str) -> None:
        at = time.time() - self.started
        self.events.append((round(at, 1), what))
        print(f"{at:7.0f} s: {what}", file=sys.stderr, flush=True)

    async def scale(self) -> None:
        name = self.rng.choice(sorted(DEPLOYMENTS))
        low, high = 3 * self.options.nodes // 16, 5 * self.options.nodes // 16
        count = self.rng.randint(low, high)
        self.replica_counts[name] = count
        await self.kube.scale("Deployment", "default", name, count)
        self.note(f"scaled {name} to {count} ({sum(self.replica_counts.values())} pods)")

    async def evict(self) -> None:
        spot = sorted(
            str(item["name"])
            for item in await self.emulator.resources()
            if item.get("type") == "Microsoft.Compute/virtualMachines"
            and str((item.get("properties") or {}).get("priority", "")).lower() == "spot"
        )
        chosen = self.rng.sample(spot, min(len(spot), self.rng.randint(1, 5)))
        evicted = []
        for vm in chosen:
            try:
                await self.emulator.evict(vm)
                evicted.append(vm)
                self.noticed += 1
            except Exception as error:  # gone meanwhile, or already being evicted
                self.note(f"eviction of {vm} refused: {error}")
        self.note(f"evicted {len(evicted)} Spot VM(s): {', '.join(evicted) or 'none'}")

    async def drift(self, kind: str, generation: int) -> None:
        if kind == "node image":
            nodeclass = await self.kube.get_nodeclass("default")
            assert nodeclass is not None
            await self.kube.patch_nodeclass_status("default", {"images": status_images(nodeclass)})
        else:
            patch = json.dumps(
                {"spec": {"template": {"metadata": {"labels": {"soak-generation": str(generation)}}}}}
            )
            await asyncio.to_thread(
                self.plane.kubectl, "patch", "nodepool", "default", "--type=merge", "-p", patch
            )
        self.note(f"drift: {kind}")

    async def restart(self, kind: str) -> None:
        if kind == "worker":
            worker = self.replicas["worker"][0].process
            await asyncio.to_thread(worker.stop, TERMINATION_GRACE_SECONDS)
            worker.start()
            self.note(f"restarted {worker.name} (SIGTERM, then started again)")
        elif kind == "controller":
            lease = await self.kube.get_object("Lease", LEASE, LEASE_NAMESPACE) or {}
            holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
            controllers = self.replicas["controller"]
            leader = next(
                (c.process for c in controllers if c.process.name == holder), controllers[0].process
            )
            await asyncio.to_thread(leader.stop, TERMINATION_GRACE_SECONDS)
            leader.start()
            self.note(f"restarted {leader.name} (the leader: SIGTERM, then started again)")
        elif kind == "temporal":
            await self.temporal.kill()
            await asyncio.sleep(OUTAGE_SECONDS)
            await self.temporal.start()
            self.note("restarted Temporal (SIGKILL, started again on its database)")
        else:
            await asyncio.to_thread(self.plane.kill_process, kind)
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(self.plane.start_process, kind, API_SERVER_READY_SECONDS)
            self.note(f"restarted {kind} (SIGKILL, started again on its data)")

    def plan(self) -> list[tuple[float, str]]:
        """When each scheduled event comes, in seconds since the churn began: the restarts spread over the first half
        of the warm-up (after its first tenth, once the first nodes run), the drifts at their fractions."""
        warmup = self.options.warmup * self.options.seconds
        restarts = [
            (warmup * (0.1 + 0.4 * index / len(RESTARTS)), f"restart {kind}")
            for index, kind in enumerate(RESTARTS)
        ]
        drifts = [(fraction * self.options.seconds, f"drift {kind}") for fraction, kind in DRIFTS.items()]
        return sorted(restarts + drifts)

    async def churn(self) -> None:
        """Until the run's end: the scheduled events at their times, a random step in between."""
        scheduled = self.plan()
        generation = 0
        next_step = self.started + self._pause()
        end = self.started + self.options.seconds
        while time.time() < end:
            now = time.time()
            if scheduled and now - self.started >= scheduled[0][0]:
                _, what = scheduled.pop(0)
                kind = what.partition(" ")[2]
                if what.startswith("restart"):
                    await self.restart(kind)
                else:
                    generation += 1
                    await self.drift(kind, generation)
            elif now >= next_step:
                await (self.scale() if self.rng.random() < 2 / 3 else self.evict())
                next_step = time.time() + self._pause()
            await asyncio.sleep(1.0)

    def _pause(self) -> float:
        return self.rng.uniform(0.5, 1.5) * self.options.step_seconds


async def sample(
    soak: Soak, client: Client, pids: dict[str, Callable[[], int | None]], samples: list[Sample]
) -> None:
    while True:
        histories: dict[str, tuple[int, int]] = {}
        try:
            histories = await long_lived_histories(client)
        except Exception as error:  # Temporal restarting
            soak.note(f"histories not sampled: {error}")
        now = {name: pid() for name, pid in pids.items()}
        rss = {name: rss_mb(pid) for name, pid in now.items()}
        samples.append(Sample(round(time.time() - soak.started, 1), rss, now, histories))
        await asyncio.sleep(soak.options.sample_seconds)


# --- one run ---------------------------------------------------------------------------------------------


async def run(options: Options) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    # This process's Temporal client retries through the server's restart: not worth a warning each time.
    quiet = TelemetryConfig(
        logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
    )
    Runtime.set_default(Runtime(telemetry=quiet), error_if_already_set=False)
    return await on_a_control_plane(
        "bench-soak-", options.keep, lambda plane, directory, logs: _run_on(plane, directory, logs, options)
    )


async def _run_on(plane: ControlPlane, directory: Path, logs: Path, options: Options) -> dict[str, Any]:
    cluster = Cluster()
    samples: list[Sample] = []
    async with surroundings(plane, directory, logs, options.seed) as around, asyncio.TaskGroup() as group:
        kube, temporal, emulator, client = around.kube, around.temporal, around.emulator, around.client
        settings = {
            **system_settings(plane, temporal, around.azure_environment, VALIDATION_SECONDS),
            "NODEWRIGHT_TASK_QUEUE": TASK_QUEUE,
            "FEATURE_GATES": "StaticCapacity=true",
        }
        replicas = deployment_replicas(Build.current(), "", settings, logs)
        everyone = [*replicas["worker"], *replicas["controller"]]
        await emulator.update_settings({"agent": {"bootstrap_refusal_grace": 120.0}})
        soak = Soak(options, plane, temporal, kube, emulator, replicas, random.Random(options.seed))
        for each in everyone:
            each.process.start()
        tasks = [group.create_task(supervise(everyone)), group.create_task(watch(kube, cluster))]
        try:

            async def ready() -> bool:
                return await has_pollers(client, TASK_QUEUE) and await workflow_exists(
                    client, disruption_id(CLUSTER)
                )

            if not await until("the workers and the leading controller", ready, STARTUP_SECONDS):
                raise RuntimeError(
                    "the system did not start:\n"
                    + "\n".join(f"{r.process.name}:\n{tail(r.process.log)}" for r in everyone)
                )
            await kube.apply(consolidating_examples(consolidate_after=CONSOLIDATE_AFTER, budget=BUDGET))
            soak.replica_counts = {name: options.nodes // 4 for name in DEPLOYMENTS}
            await kube.apply([static_pool(3), capacity_window(), *deployments(soak.replica_counts)])
            soak.started = time.time()
            tasks.append(
                group.create_task(sample(soak, client, process_ids(plane, around.azure, replicas), samples))
            )
            tasks.append(group.create_task(report(soak, cluster)))
            await soak.churn()
            churned = len(samples)
            soak.note("the churn is over: scaling to zero")
            await kube.delete_object("CapacityWindow", WINDOW)
            await kube.apply([static_pool(0)])
            for name in DEPLOYMENTS:
                await kube.scale("Deployment", "default", name, 0)

            async def drained() -> bool:
                return (
                    not cluster.claims
                    and not await kube.list_nodes()
                    and not await azure_left(emulator)
                    and not (await client.count_workflows(OPEN_LIFECYCLES)).count
                )

            await until("everything gone", drained, options.drain_timeout)
            drained_after = round(time.time() - soak.started - options.seconds, 1)
        finally:
            for task in tasks:
                task.cancel()
            for each in everyone:
                await asyncio.to_thread(each.process.stop)
        counters = await emulator.counters()
        row = {
            "hours": options.hours,
            "nodes": options.nodes,
            "seed": options.seed,
            "samples": [vars(s) for s in samples[:churned]],
            "events": soak.events,
            "runs": await runs_of(client),
            "open_lifecycles": (await client.count_workflows(OPEN_LIFECYCLES)).count,
            "workflow_failures": {
                status: (await client.count_workflows(f'ExecutionStatus="{status}"')).count
                for status in ("Failed", "TimedOut")
            },
            **await left_over(kube, emulator),
            "stuck_deleting": sorted(cluster.claims),
            "drained_after_seconds": drained_after,
            "vms_created": counters.vms_created,
            "spot_notices": soak.noticed,
            "vms_evicted": counters.vms_evicted,
            "process_exits": [exit for each in everyone for exit in each.process.exits],
        }
    return row


async def report(soak: Soak, cluster: Cluster) -> None:
    while True:
        await asyncio.sleep(60.0)
        print(f"{time.time() - soak.started:7.0f} s: {cluster.summary()}", file=sys.stderr, flush=True)


# --- the verdict ---------------------------------------------------------------------------------------


def judged(name: str) -> bool:
    return name.startswith(JUDGED)


def memory(row: dict[str, Any], warmup: float) -> dict[str, dict[str, Any]]:
    """Per process: the mean RSS over the tenth of the run after its warm-up and over the last tenth, the growth
    between them, the peak, and when it restarted after the warm-up (then its growth is not measured: the restarted
    process began again from its baseline). A process restarted inside the warm-up gets a warm-up of its own: it is
    measured from its restart plus the warm-up's length (a restarted worker's workflow cache fills again)."""
    samples = row["samples"]
    if not samples:
        return {}
    seconds = row["hours"] * 3600.0
    warm, tenth = warmup * seconds, 0.1 * seconds
    found = {}
    for name in samples[0]["rss"]:
        restarted = [
            later["at"]
            for earlier, later in itertools.pairwise(s for s in samples if s["rss"][name])
            if later["pids"][name] != earlier["pids"][name]
        ]
        start = max([warm] + [at + warm for at in restarted if at < warm])
        measured = [s for s in samples if s["at"] >= start and s["rss"][name]]
        after = [s["rss"][name] for s in measured if s["at"] < start + tenth]
        last = [s["rss"][name] for s in measured if s["at"] >= seconds - tenth]
        if not after or not last:
            continue
        restarts = [round(at / 60, 1) for at in restarted if at >= warm]
        baseline, final = statistics.fmean(after), statistics.fmean(last)
        found[name] = {
            "measured_from_minutes": round(start / 60, 1),
            "after_warmup_mb": round(baseline, 1),
            "final_mb": round(final, 1),
            "growth": None if restarts else round(final / baseline - 1, 3),
            "peak_mb": max(s["rss"][name] for s in samples if s["rss"][name]),
            "restarted_at_minutes": restarts,
            "judged": judged(name),
        }
    return found


def histories(row: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per long-lived workflow: the largest history of any sampled run (events, bytes) and how many runs it made."""
    found: dict[str, dict[str, int]] = {}
    for sample in row["samples"]:
        for name, (events, size) in sample["histories"].items():
            largest = found.setdefault(name, {"events": 0, "bytes": 0})
            largest["events"] = max(largest["events"], events)
            largest["bytes"] = max(largest["bytes"], size)
    for name, runs in row["runs"].items():
        found.setdefault(name, {"events": 0, "bytes": 0})["runs"] = runs
    return found


def problems(row: dict[str, Any], options: Options) -> list[str]:
    found = [
        f"{name} grew {figures['growth']:.0%} after the warm-up ({figures['after_warmup_mb']} -> "
        f"{figures['final_mb']} MB)"
        for name, figures in memory(row, options.warmup).items()
        if figures["judged"] and figures["growth"] is not None and figures["growth"] > options.max_growth
    ]
    for name, largest in histories(row).items():
        if largest["events"] > options.max_events or largest["bytes"] > options.max_history_mb * 1e6:
            found.append(f"{name}'s history reached {largest['events']} events, {largest['bytes']} bytes")
    missing = [name for name in LONG_LIVED if not row["runs"].get(name)]
    if missing:
        found.append(f"no run of {', '.join(missing)} to measure")
    found += leaked(row)
    if row["open_lifecycles"]:
        found.append(f"{row['open_lifecycles']} NodeClaim lifecycles still open")
    if sum(row["workflow_failures"].values()):
        found.append(f"workflows {row['workflow_failures']}")
    return found


def print_tables(row: dict[str, Any], options: Options) -> None:
    samples = row["samples"]
    names = list(samples[0]["rss"]) if samples else []
    every = max(1, len(samples) // PRINTED_ROWS)
    print(
        f"Memory (RSS, MB) over {row['hours']:g} h of churn at about {row['nodes']} nodes (seed {row['seed']})"
    )
    print(f"{'min':>6} " + " ".join(f"{name[:12]:>12}" for name in names))
    for sample in [*samples[::every], *(samples[-1:] if (len(samples) - 1) % every else [])]:
        values = " ".join(
            f"{sample['rss'][name] if sample['rss'][name] is not None else '-':>12}" for name in names
        )
        print(f"{sample['at'] / 60:6.1f} {values}")
    print()
    print(
        f"Memory after the warm-up (first {options.warmup:.0%}; a process restarted in it, from its restart plus as"
        " long): mean of the next 10 % of the run against the last 10 %"
    )
    print(
        f"{'process':<24} {'from (min)':>10} {'after warm-up':>13} {'at the end':>11} {'growth':>8} {'peak':>8}  judged"
    )
    for name, figures in memory(row, options.warmup).items():
        growth = "-" if figures["growth"] is None else f"{figures['growth']:.1%}"
        restarts = ", ".join(f"{minute} min" for minute in figures["restarted_at_minutes"])
        print(
            f"{name:<24} {figures['measured_from_minutes']:>10} {figures['after_warmup_mb']:>13} "
            f"{figures['final_mb']:>11} {growth:>8} "
            f"{figures['peak_mb']:>8}  {'yes' if figures['judged'] else 'no'}"
            + (f" (restarted at {restarts})" if restarts else "")
        )
    print()
    print(
        f"Long-lived workflows: largest history of a run (bound {options.max_events:,} events, {options.max_history_mb:g} MB)"
    )
    print(f"{'workflow':<16} {'runs':>6} {'events':>8} {'bytes':>11}")
    for name, largest in histories(row).items():
        print(f"{name:<16} {largest.get('runs', 0):>6} {largest['events']:>8} {largest['bytes']:>11,}")
    print()
    lines: list[tuple[str, Any]] = [
        ("churn steps and scheduled events", len(row["events"])),
        ("VMs created", row["vms_created"]),
        (
            "Spot VMs given notice / still there at the deadline",
            f"{row['spot_notices']} / {row['vms_evicted']}",
        ),
        ("leaked: VMs / NICs / disks / Nodes / NodeClaims", " / ".join(str(row[key]) for key, _ in LEFT)),
        ("NodeClaim lifecycles still open", row["open_lifecycles"]),
        ("workflows Failed / TimedOut", " / ".join(str(v) for v in row["workflow_failures"].values())),
        ("processes exited on their own", len(row["process_exits"])),
        ("scale to zero took (s)", row["drained_after_seconds"]),
    ]
    for label, value in lines:
        print(f"{label:<52} {value!s:>10}")
    for exit in row["process_exits"]:
        print(f"exit: {exit}")
    for name in row["stuck_deleting"]:
        print(f"stuck deleting: {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Options()
    parser.add_argument(
        "--hours", type=float, default=defaults.hours, help="how long the churn runs (default 2)"
    )
    parser.add_argument(
        "--nodes", type=int, default=defaults.nodes, help="about how many nodes (default 200)"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the churn's choices and timing")
    parser.add_argument(
        "--step-seconds", type=float, default=defaults.step_seconds, help="mean seconds between steps"
    )
    parser.add_argument("--sample-seconds", type=float, default=defaults.sample_seconds)
    parser.add_argument(
        "--warmup", type=float, default=defaults.warmup, help="the warm-up, a fraction of the run"
    )
    parser.add_argument(
        "--max-growth", type=float, default=defaults.max_growth, help="memory growth allowed after it"
    )
    parser.add_argument("--max-events", type=int, default=defaults.max_events)
    parser.add_argument("--max-history-mb", type=float, default=defaults.max_history_mb)
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout)
    parser.add_argument(
        "--json", action="store_true", help="print the figures (every sample) as JSON after the tables"
    )
    parser.add_argument("--keep", action="store_true", help="keep the control plane's state and every log")
    args = parser.parse_args()
    options = Options(
        hours=args.hours,
        nodes=args.nodes,
        seed=args.seed,
        step_seconds=args.step_seconds,
        sample_seconds=args.sample_seconds,
        warmup=args.warmup,
        max_growth=args.max_growth,
        max_events=args.max_events,
        max_history_mb=args.max_history_mb,
        drain_timeout=args.drain_timeout,
        keep=args.keep,
    )
    row = asyncio.run(run(options))
    conclude(row, lambda: print_tables(row, options), problems(row, options), args.json)


if __name__ == "__main__":
    main()
