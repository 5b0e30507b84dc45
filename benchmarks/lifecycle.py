"""Lifecycle benchmark: N pending pods that each need a node of their own, provisioned through the whole
system and launched to Initialized, at N = 200 and 1,000. Prints figures; asserts nothing.

A run is the system as `make demo` wires it, with default settings (batching idle 1 s, max 10 s; lifecycle
poll 5 s): the Temporal dev server (in memory), the simulated AKS (and its ARM emulator, which the worker's
Azure provider creates the VMs in through the real Azure SDK) with zero boot, registration and readiness
delays and the controller, each in its own process, and one worker in this process. `deploy/examples/` is
applied (without the NodePool's CPU limit, so N nodes fit), then a deployment of N replicas with required
hostname anti-affinity: kube-scheduler marks the pods Unschedulable, the controller signals the provisioner,
which plans, creates the NodeClaims and starts their lifecycle workflows.

- NodeClaims/s: NodeClaims Initialized ÷ (last one Initialized - first NodeClaim workflow start).
- trivial wf/s: on the same server just before, N workflows of three no-op activities started at once on a
  worker with the lifecycle worker's options ÷ (last close - first start). The target ratio is at least 0.5.
- pending -> created: from the moment a pod is seen Unschedulable to the moment the NodeClaim the provisioner
  planned for it (read from the provisioner's history) is seen created; p50 and p99. Target p50 under 1.5 s.
- a profile: the provisioner's batches, what one lifecycle's history holds, and CPU seconds per process.

Pods are `pinned` to one instance type by default (as the demo's `inflate` is); `--shape any` leaves the
choice to the scheduler. Each run happens in a fresh process so that its peak memory (max RSS) is its own.

    python benchmarks/lifecycle.py                          # N = 200 and 1,000: a table and a profile
    python benchmarks/lifecycle.py --run 200 --shape any    # one run, JSON
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


# The workflow sandbox runs this module again for the trivial workflow: nothing here may touch the outside.
if not workflow.unsafe.in_sandbox():
    sys.path.insert(0, str(project_root()))

with workflow.unsafe.imports_passed_through():
    import yaml

    from core.instancetypes.catalog import load_shipped_catalog
    from core.messages import PlanResult
    from simulator.client import SimulatorClient
    from workers.azure import cloud_provider, emulator_config
    from workers.temporal_server import DevServer, free_port
    from workers.worker import build_worker, connect
    from workflows.provisioner import provisioner_id

RUNS = [200, 1000]
SIMULATOR = (sys.executable, "-m", "simulator", "--instant")
SHAPES = ("pinned", "any")
PINNED_INSTANCE_TYPE = "Standard_D2s_v5"
TASK_QUEUE = "bench-lifecycle"
TRIVIAL_QUEUE = "bench-trivial"
CLUSTER = "bench"
APP = "bench"
TIMEOUT_SECONDS = 240.0
SAMPLED_HISTORIES = 20
PROGRESS_SECONDS = 5.0
STUCK_SECONDS = 30.0
CATCH_UP_SECONDS = 1.0
STARTUP_SECONDS = 30.0
SIGNALLED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


# --- the trivial workflow: what the server and one worker do for three no-op activities -------------------


@activity.defn(name="bench_noop")
async def noop(step: int) -> int:
    return step


@workflow.defn(name="BenchTrivial")
class TrivialWorkflow:
    @workflow.run
    async def run(self) -> None:
        for step in range(3):
            await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30))


async def trivial_rate(client: Client, count: int) -> float:
    """Workflows/s for `count` trivial workflows started at once, from the first start to the last close."""
    # build_worker's options, so that both rates come from the same worker setup.
    worker = Worker(
        client,
        task_queue=TRIVIAL_QUEUE,
        workflows=[TrivialWorkflow],
        activities=[noop],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        graceful_shutdown_timeout=timedelta(seconds=5),
        max_concurrent_activities=64,
    )
    query = 'WorkflowType="BenchTrivial"'
    async with worker:
        await asyncio.gather(
            *(
                client.start_workflow(TrivialWorkflow.run, id=f"trivial/{i}", task_queue=TRIVIAL_QUEUE)
                for i in range(count)
            )
        )
        while (await client.count_workflows(query + ' AND ExecutionStatus="Completed"')).count < count:
            await asyncio.sleep(0.2)
    starts, closes = [], []
    async for execution in client.list_workflows(query):
        starts.append(execution.start_time.timestamp())
        closes.append(execution.close_time.timestamp() if execution.close_time else time.time())
    return count / (max(closes) - min(starts))


# --- the cluster and the processes ---------------------------------------------------------------------------


def bench_deployment(replicas: int, shape: str) -> dict[str, Any]:
    """Pods that each need a node of their own (required anti-affinity on the hostname)."""
    selector = {"matchLabels": {"app": APP}}
    node_selector = {"node.kubernetes.io/instance-type": PINNED_INSTANCE_TYPE} if shape == "pinned" else {}
    anti_affinity = {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
    container = {
        "name": "app",
        "image": "mcr.microsoft.com/oss/kubernetes/pause:3.6",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "nodeSelector": node_selector,
                    "affinity": {
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti_affinity]}
                    },
                    "containers": [container],
                },
            },
        },
    }


def examples() -> list[dict[str, Any]]:
    """deploy/examples/, without the NodePool's CPU limit so that every benchmark node fits."""
    documents = []
    for path in sorted((project_root() / "deploy" / "examples").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document:
                continue
            if document.get("kind") == "NodePool":
                document["spec"].pop("limits", None)
            documents.append(document)
    return documents


@contextlib.asynccontextmanager
async def child_process(args: Sequence[str], env: dict[str, str] | None = None) -> AsyncIterator[int]:
    """A process of the system, from this checkout, for the duration of the block; yields its pid."""
    process = subprocess.Popen(
        args,
        cwd=project_root(),
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process.pid
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    return inodes


async def until_connected(pid: int, port: int) -> None:
    """Until the process holds a TCP connection to this local port, then a moment for it to catch up."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        rows = [line.split() for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]]
        inodes = _socket_inodes(pid)
        if any(int(row[2].rpartition(":")[2], 16) == port and row[9] in inodes for row in rows):
            await asyncio.sleep(CATCH_UP_SECONDS)
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"process {pid} did not connect to port {port} within {STARTUP_SECONDS:g} s")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> int:
    """A live process's peak resident memory (VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return 0


def temporal_pid() -> int:
    """The dev server: the child process of this one running the `temporal` binary."""
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"temporal"):
                return int(pid)
    raise RuntimeError("the Temporal dev server process was not found")


# --- what happened ---------------------------------------------------------------------------------------


@dataclass
class Observed:
    """When this process saw each thing happen (time.time()), through the simulator's watch."""

    pod_pending: dict[str, float] = field(default_factory=dict)
    claim_created: dict[str, float] = field(default_factory=dict)
    claim_initialized: dict[str, float] = field(default_factory=dict)


def _condition(manifest: dict[str, Any], condition: str) -> dict[str, Any]:
    conditions = manifest.get("status", {}).get("conditions", [])
    return next((item for item in conditions if item.get("type") == condition), {})


async def observe(simulator: SimulatorClient, since: int, seen: Observed) -> None:
    # Raw manifests, not models: this process is also the worker being measured.
    async for event in simulator.watch_kinds(since, ("Pod", "NodeClaim")):
        now = time.time()
        manifest = event.object
        if event.kind == "Pod":
            key = f"{event.namespace or 'default'}/{event.name}"
            scheduled = _condition(manifest, "PodScheduled")
            if key not in seen.pod_pending and scheduled.get("reason") == "Unschedulable":
                seen.pod_pending[key] = now
        else:
            seen.claim_created.setdefault(event.name, now)
            if (
                event.name not in seen.claim_initialized
                and _condition(manifest, "Initialized").get("status") == "True"
            ):
                seen.claim_initialized[event.name] = now


async def _histories(client: Client, query: str, limit: int | None = None) -> list[Any]:
    histories = []
    async for execution in client.list_workflows(query, limit=limit):
        histories.append(
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        )
    return histories


def _seconds(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


async def provisioner_profile(client: Client, origin: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each batch of the provisioner: when its planning started
    (seconds after `origin`), how long planning and creation took, and when its children started."""
    batches: list[dict[str, Any]] = []
    histories = await _histories(client, f'WorkflowId="{provisioner_id(CLUSTER)}"')
    for history in histories:
        scheduled: dict[int, tuple[str, float]] = {}
        signalled: float | None = None  # the first signal of the batch (or the start of a run)
        closed: float | None = None  # the batch window's last timer
        for event in history.events:
            at = _seconds(event)
            if event.event_type in (SIGNALLED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED):
                signalled = at if signalled is None else signalled
            elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
                closed = at
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                name = attributes.activity_type.name
                scheduled[event.event_id] = (name, at)
                if name == "plan_provisioning":
                    batches.append(
                        {
                            "signalled at": _since(origin, signalled),
                            "window closed at": _since(origin, closed),
                            "planned at": _since(origin, at),
                            "nodeclaims": 0,
                        }
                    )
                    signalled = closed = None
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                completed = event.activity_task_completed_event_attributes
                name, started = scheduled[completed.scheduled_event_id]
                batches[-1][f"{name} s"] = round(at - started, 2)
                if name == "plan_provisioning":
                    (plan,) = await client.data_converter.decode(completed.result.payloads, [PlanResult])
                    batches[-1]["nodeclaims"] = len(plan.nodeclaims)
                    batches[-1]["plan bytes"] = completed.result.ByteSize()
            elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                batches[-1].setdefault("first child started at", _since(origin, at))
                batches[-1]["last child started at"] = _since(origin, at)
    events = [event for history in histories for event in history.events]
    totals = {
        "runs": len(histories),
        "events": len(events),
        "workflow tasks": sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events),
        "signals": sum(e.event_type == SIGNALLED for e in events),
        "history MB": round(sum(event.ByteSize() for event in events) / 1e6, 1),
    }
    return sorted(batches, key=lambda batch: batch["planned at"]), totals


async def nominations(simulator: SimulatorClient) -> dict[str, list[str]]:
    """The pods of each NodeClaim, from the Nominated events planning records ("Pod should schedule on: ...")."""
    pods_of: dict[str, list[str]] = {}
    for event in await simulator.list_objects("Event"):
        if event.get("reason") == "Nominated":
            claim = str(event.get("message", "")).rpartition("nodeclaim/")[2]
            involved = event["involvedObject"]
            pods_of.setdefault(claim, []).append(
                f"{involved.get('namespace') or 'default'}/{involved['name']}"
            )
    return pods_of


async def history_profile(client: Client, workflow_type: str) -> dict[str, float]:
    """What one history of the type holds, averaged over a sample: events by kind, activities by name."""
    histories = await _histories(client, f'WorkflowType="{workflow_type}"', limit=SAMPLED_HISTORIES)
    counts: Counter[str] = Counter()
    for history in histories:
        counts["events"] += len(history.events)
        for event in history.events:
            counts[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()] += 1
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                counts["activity " + event.activity_task_scheduled_event_attributes.activity_type.name] += 1
    return (
        {kind: round(count / len(histories), 1) for kind, count in sorted(counts.items())}
        if histories
        else {}
    )


async def provisioner_failure(client: Client) -> str:
    """Why the provisioner's pending activity keeps failing, if it does."""
    description = await client.get_workflow_handle(provisioner_id(CLUSTER)).describe()
    for pending in description.raw_description.pending_activities:
        if pending.attempt > 1 and pending.last_failure.message:
            return f"{pending.activity_type.name} attempt {pending.attempt}: {pending.last_failure.message}"
    return ""


async def wait_until_initialized(client: Client, seen: Observed, count: int) -> str:
    """Until `count` NodeClaims are Initialized or the time is up, with progress on stderr; gives up early
    (returning why) when the provisioner is stuck on a failing activity."""
    started = last_report = time.time()
    while len(seen.claim_initialized) < count and time.time() - started < TIMEOUT_SECONDS:
        await asyncio.sleep(0.25)
        if time.time() - last_report < PROGRESS_SECONDS:
            continue
        last_report = time.time()
        print(
            f"{last_report - started:6.1f} s: {len(seen.pod_pending)} pods pending, "
            f"{len(seen.claim_created)} nodeclaims created, {len(seen.claim_initialized)} initialized",
            file=sys.stderr,
            flush=True,
        )
        stuck = not seen.claim_created and last_report - started > STUCK_SECONDS
        if stuck and (failure := await provisioner_failure(client)):
            return failure
    return ""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# --- one run ---------------------------------------------------------------------------------------------


async def run_one(count: int, shape: str) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    sim_port = free_port()
    simulator = SimulatorClient(f"http://127.0.0.1:{sim_port}")
    async with (
        DevServer() as temporal,
        child_process(
            [*SIMULATOR, "--port", str(sim_port), "--arm-port", "0", "--cluster-name", CLUSTER]
        ) as sim_pid,
        simulator,
        contextlib.AsyncExitStack() as stack,
    ):
        client = await connect(temporal.target)
        await simulator.wait_until_ready()
        catalog = load_shipped_catalog("eastus")
        # The worker's Azure provider against the simulator's ARM emulator, polling its operations at once.
        cloud = await stack.enter_async_context(
            cloud_provider(simulator, emulator_config(await simulator.cluster_info(), timedelta(0)), catalog)
        )
        pids = {"worker": os.getpid(), "simulator": sim_pid, "temporal": temporal_pid()}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        trivial_per_second = await trivial_rate(client, count)
        trivial_cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}

        await simulator.apply(examples())
        _, version = await simulator.snapshot_with_version()
        seen = Observed()
        settings = {
            "NODEWRIGHT_TEMPORAL_ADDRESS": temporal.target,
            "NODEWRIGHT_SIMULATOR_URL": simulator.base_url,
            "NODEWRIGHT_TASK_QUEUE": TASK_QUEUE,
            "NODEWRIGHT_CLUSTER_NAME": CLUSTER,
            # The disruption loop plans once at start, then idles: this measures provisioning alone.
            "NODEWRIGHT_DISRUPTION_POLL_SECONDS": "3600",
        }
        worker = build_worker(client, TASK_QUEUE, simulator, cloud, catalog)
        controller = child_process([sys.executable, "-m", "workers.cli", "controller"], settings)
        async with worker, controller as pids["controller"], asyncio.TaskGroup() as group:
            # Pods turn pending within milliseconds: the controller must be watching by then.
            await until_connected(pids["controller"], sim_port)
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            watcher = group.create_task(observe(simulator, version, seen))
            started = time.time()
            await simulator.apply([bench_deployment(count, shape)])
            failure = await wait_until_initialized(client, seen, count)
            lifecycle_cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            watcher.cancel()
            await asyncio.sleep(1)  # the last workflow tasks land in the histories

        first_pending = min(seen.pod_pending.values(), default=started)
        starts = [e.start_time.timestamp() async for e in client.list_workflows('WorkflowType="NodeClaim"')]
        batches, provisioner = await provisioner_profile(client, first_pending)
        pods_of = await nominations(simulator)
        per_lifecycle = await history_profile(client, "NodeClaim")
        per_trivial = await history_profile(client, "BenchTrivial")
        rss = {name: peak_rss_mb(pids[name]) for name in ("simulator", "temporal")}

    initialized = len(seen.claim_initialized)
    first_start, last_initialized = (
        min(starts, default=None),
        max(seen.claim_initialized.values(), default=None),
    )
    claims_per_second = (
        initialized / (last_initialized - first_start) if first_start and last_initialized else 0.0
    )
    latencies = [
        seen.claim_created[claim] - seen.pod_pending[pod]
        for claim, pods in pods_of.items()
        if claim in seen.claim_created
        for pod in pods
        if pod in seen.pod_pending
    ]
    return {
        "pods": count,
        "shape": shape,
        "pods_pending": len(seen.pod_pending),
        "nodeclaims_created": len(seen.claim_created),
        "nodeclaims_initialized": initialized,
        "nodeclaims_per_second": round(claims_per_second, 1),
        "trivial_workflows_per_second": round(trivial_per_second, 1),
        "ratio": round(claims_per_second / trivial_per_second, 2),
        "pending_to_created_p50": round(statistics.median(latencies), 2) if latencies else None,
        "pending_to_created_p99": round(percentile(latencies, 0.99), 2) if latencies else None,
        "first_pending_to_first_nodeclaim_start": _since(first_pending, first_start),
        "first_pending_to_last_initialized": _since(first_pending, last_initialized),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "simulator_peak_rss_mb": rss["simulator"],
        "temporal_peak_rss_mb": rss["temporal"],
        "provisioner_failure": failure,
        "provisioner": provisioner,
        "batches": batches,
        "per_lifecycle": per_lifecycle,
        "per_trivial": per_trivial,
        "cpu_seconds_trivial": {name: round(value, 1) for name, value in trivial_cpu.items()},
        "cpu_seconds_lifecycle": {name: round(value, 1) for name, value in lifecycle_cpu.items()},
    }


def _since(origin: float, moment: float | None) -> float | None:
    return round(moment - origin, 2) if moment is not None else None


def _fields(values: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in values.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=int, metavar="PODS", help="one run in this process, as JSON")
    parser.add_argument("--shape", choices=SHAPES, default=SHAPES[0], help="the pods' node constraints")
    args = parser.parse_args()
    if args.run:
        print(json.dumps(asyncio.run(run_one(args.run, args.shape))))
        return
    rows = []
    for count in RUNS:
        output = subprocess.run(
            [sys.executable, __file__, "--run", str(count), "--shape", args.shape],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        ).stdout
        # Temporal's core writes its warnings (payloads over 512 KB) to stdout too: the figures are the last line.
        rows.append(json.loads(output.strip().splitlines()[-1]))
    print(
        f"{'pods':>5} {'claims':>6} {'init':>5} {'claims/s':>8} {'trivial/s':>9} {'ratio':>5} {'p50 s':>6} "
        f"{'p99 s':>6} {'total s':>7} {'peak MB':>7} {'sim MB':>6} {'temporal MB':>11}"
    )
    for row in rows:
        print(
            f"{row['pods']:>5} {row['nodeclaims_created']:>6} {row['nodeclaims_initialized']:>5} "
            f"{row['nodeclaims_per_second']:>8} {row['trivial_workflows_per_second']:>9} {row['ratio']:>5} "
            f"{row['pending_to_created_p50']!s:>6} {row['pending_to_created_p99']!s:>6} "
            f"{row['first_pending_to_last_initialized']!s:>7} {row['peak_rss_mb']:>7} "
            f"{row['simulator_peak_rss_mb']:>6} {row['temporal_peak_rss_mb']:>11}"
        )
    for row in rows:
        print(f"\nN = {row['pods']} ({row['shape']} pods)")
        if row["provisioner_failure"]:
            print(f"  the provisioner is stuck: {row['provisioner_failure']}")
        print(
            f"  first pod pending -> first NodeClaim workflow started: {row['first_pending_to_first_nodeclaim_start']} s"
        )
        print(f"  provisioner: {_fields(row['provisioner'])}")
        for batch in row["batches"]:
            print(f"  batch: {_fields(batch)}")
        print(f"  one lifecycle up to Running (mean of {SAMPLED_HISTORIES}): {_fields(row['per_lifecycle'])}")
        print(f"  one trivial workflow (mean of {SAMPLED_HISTORIES}): {_fields(row['per_trivial'])}")
        print(f"  CPU s, trivial workflows: {_fields(row['cpu_seconds_trivial'])}")
        print(f"  CPU s, lifecycles: {_fields(row['cpu_seconds_lifecycle'])}")


if __name__ == "__main__":
    main()
