"""Upgrade benchmark: the previous release runs N NodeClaims on the local control plane; while some launch, some
drain and some wait in a disruption decision, its workers and controllers are replaced by this tree's, as
`helm upgrade` rolls the two Deployments. Every workflow must then finish, or reach its steady running state,
with no non-determinism error, nothing stuck and nothing leaked. Prints one table; exits with 1 on failure.

The previous release is the last one in RELEASES.toml (`--release` picks another), set up once beside this tree
by `workers.releases` (its files exported from git into `<cache>/releases/`, with a virtualenv of its own). The
system runs as in benchmarks/chaos.py: the control plane, the emulated Azure and the Temporal dev server (its
state in a database file) of this tree, which an upgrade of nodewright leaves as they are; two workers and two
controllers (leader election, one standby) of the release, started from its tree with its interpreter. The
release's CRDs and deploy/examples/ are applied (the NodePool's disruption budget at 100 %, consolidation off until
the work is arranged), and disruption decisions wait `--validation-seconds` (300) before they execute.

N NodeClaims are arranged in four states, by three deployments of pods that each need a node of their own (each
pinned to an instance type of its own, so that no pod lands on another deployment's node):

- running: `steady` pods on Initialized nodes (`karpenter.sh/do-not-disrupt`, so that consolidation moves none of
  them onto the nodes emptied below);
- in a disruption decision: an eighth of N `steady` pods scaled away, leaving their nodes empty; then the NodePool's
  consolidateAfter goes from Never to 10 s, the disruption loop finds them all, and its emptiness command waits
  for validation (the benchmark waits until the loop's `plan` query says so);
- draining: an eighth of N `held` pods under a PodDisruptionBudget of maxUnavailable 0 whose NodeClaims are
  deleted: their drains wait on the budget, and the provisioner launches their replacements;
- launching: a quarter of N `arriving` pods, with each emulated VM's create now taking `--vm-create-seconds`
  (240), plus the `held` pods' replacements.

Then the upgrade, as Kubernetes rolls a Deployment of two replicas with the chart's strategy (maxUnavailable 1,
maxSurge 25 % rounded up): this tree's CRDs are applied first (as the README's upgrade says), then, workers and
controllers at once, for each old replica a new one starts from this tree while the old one gets SIGTERM and
30 s (the chart's terminationGracePeriodSeconds) before SIGKILL; the next replica goes once the new one is ready
(`/readyz`). Old and new processes overlap on the task queue, as they do in a cluster. Once the rollout is done,
every open workflow is queried (`__stack_trace`), which makes a new worker replay its whole history with this
tree's code; then the budget is deleted (the drains go on), and the benchmark waits until the system is settled:
every NodeClaim Initialized and none deleting, the empty nodes gone, every pod Running. Last, every deployment is
scaled to zero and every NodeClaim deleted, which takes every lifecycle through termination on the new code.

The table:

- NodeClaims in flight at the upgrade, by state (running, launching, draining, in a disruption decision);
- non-determinism errors: workflow task failures of that cause in every history of the run (open and closed),
  replays of open workflows that failed, and the lines of every worker's log that report one;
- other workflow task failures, by cause; workflows Failed, TimedOut or Terminated;
- stuck: NodeClaims not settled within `--settle-timeout`, open workflows whose workflow task keeps failing,
  NodeClaim lifecycles still open after their NodeClaim was gone;
- leaked after the teardown: VMs, NICs, disks, Nodes and NodeClaims (as benchmarks/chaos.py counts them);
- time: the rollout, from its start to settled, and the whole run.

    python benchmarks/upgrade.py                     # N = 200 (make bench-upgrade N=...)
    python benchmarks/upgrade.py --nodeclaims 40 --keep   # a quick run; keep the logs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus

from activities.kubeclient.cluster import KubernetesCluster
from benchmarks.chaos import (
    LEASE_NAMESPACE,
    LEFT,
    Cluster,
    Supervised,
    azure_left,
    consolidating_examples,
    last_words,
    leaked,
    left_over,
    on_a_control_plane,
    surroundings,
    until,
    watch,
)
from benchmarks.nodewright import CLUSTER, has_pollers, workflow_exists
from benchmarks.processes import ROOT, tail
from benchmarks.workload import APP, bench_deployment
from simulator.aks_client import AksEmulatorClient
from workers.controlplane.run import ControlPlane
from workers.releases import Release, read_releases, release_python, released_tree
from workers.temporal_server import DevServer, free_port
from workflows.disruption import disruption_id

NODECLAIMS = 200
TASK_QUEUE = "bench-upgrade"
STEADY, HELD, ARRIVING = (f"{APP}-steady", f"{APP}-held", f"{APP}-arriving")
INSTANCE_TYPES = {STEADY: "Standard_D2s_v5", HELD: "Standard_D2as_v5", ARRIVING: "Standard_F2s_v2"}
"""A size per deployment: a pod of one never lands on another's node (an arriving pod on a node emptied for the
disruption decision would undo it)."""
REPLICAS = 2
"""Workers and controllers, as the chart runs them."""
TERMINATION_GRACE_SECONDS = 30.0
"""The chart's terminationGracePeriodSeconds: SIGKILL this long after SIGTERM."""
SHUTDOWN_GRACE_SECONDS = 20.0
"""The chart's worker.shutdownGraceSeconds."""
ARM_RETRY_AFTER_SECONDS = 3.0
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
CONSOLIDATE_AFTER_SECONDS = 10
NON_DETERMINISM = re.compile(r"nondetermin|non-determin|TMPRL1100", re.IGNORECASE)
"""How a non-determinism error reads: the SDK's NondeterminismError, its [TMPRL1100] code."""
FAILED_ACTIVATION = "Failed activation on workflow"
PROGRESS_SECONDS = 15.0
STARTUP_SECONDS = 300.0
"""How long a process may take to be ready: on this shared 2-core machine, loaded, a worker took over a minute."""
REPLAY_TIMEOUT = timedelta(seconds=300)
"""How long the queries that replay every open workflow may take, all together."""


@dataclass
class Options:
    nodeclaims: int = NODECLAIMS
    release: str | None = None
    """The version to upgrade from (the last in RELEASES.toml when None)."""
    seed: int = 1
    vm_create_seconds: float = 240.0
    """How long each VM's create takes once the work in flight is arranged: it spans the rollout."""
    validation_seconds: float = 300.0
    """How long a disruption decision waits before it executes (Karpenter's 15 s): it spans the rollout."""
    settle_timeout: float = 1500.0
    drain_timeout: float = 900.0
    keep: bool = False

    @property
    def draining(self) -> int:
        return max(1, self.nodeclaims // 8)

    @property
    def deciding(self) -> int:
        return max(1, self.nodeclaims // 8)

    @property
    def arriving(self) -> int:
        return max(1, self.nodeclaims // 4)

    @property
    def running(self) -> int:
        """What is left of N once the others are counted (the drained pods' replacements launch too)."""
        return max(1, self.nodeclaims - 2 * self.draining - self.deciding - self.arriving)


# --- the builds and their processes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """Where a build of nodewright runs from: a released tree with its virtualenv, or this tree."""

    name: str
    root: Path
    python: Path

    @classmethod
    def current(cls) -> Build:
        return cls(f"this tree ({describe_tree()})", ROOT, Path(sys.executable))

    @classmethod
    def released(cls, release: Release) -> Build:
        root = released_tree(release)
        return cls(f"release {release}", root, release_python(root))


def describe_tree(root: Path | None = None) -> str:
    """`git describe --always --dirty` of the tree: the commit, marked when files were changed."""
    done = subprocess.run(
        ["git", "-C", str(root or ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "not a git checkout"


@dataclass
class Replica:
    """One pod of the worker or controller Deployment: its process and the port Kubernetes would probe."""

    process: Supervised
    health_port: int

    async def ready(self) -> bool:
        """`/readyz` answers 200 (what Kubernetes waits for before it rolls the next pod)."""

        def get() -> bool:
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            try:
                with urllib.request.urlopen(url, timeout=3) as answer:
                    return bool(answer.status == 200)
            except OSError:
                return False

        return await asyncio.to_thread(get)


def replica(build: Build, role: str, name: str, settings: dict[str, str], logs: Path) -> Replica:
    health = free_port()
    env = {
        **settings,
        "POD_NAME": name,  # its leader-election identity
        "NODEWRIGHT_METRICS_PORT": str(free_port()),
        "NODEWRIGHT_HEALTH_PROBE_PORT": str(health),
        "PYTHONFAULTHANDLER": "1",
    }
    args = (str(build.python), "-m", "workers.cli", role)
    return Replica(Supervised(name, args, logs / f"{name}.log", env, cwd=build.root), health)


def deployment_replicas(
    build: Build, tag: str, settings: dict[str, str], logs: Path
) -> dict[str, list[Replica]]:
    """The worker and controller Deployments' replicas of a build (`worker-<tag>1`, ...), not started."""
    return {
        role: [
            replica(build, role, f"{role}-{tag}{index}", settings, logs) for index in range(1, REPLICAS + 1)
        ]
        for role in ("worker", "controller")
    }


async def roll(old: list[Replica], new: list[Replica], timeout: float) -> list[str]:
    """One Deployment's rolling update: for each old replica, its successor starts as it gets SIGTERM (SIGKILL
    after the grace period); the next goes once the successor is ready. What went wrong, if anything."""
    problems = []
    for before, after in zip(old, new, strict=True):
        after.process.start()
        await asyncio.to_thread(before.process.stop, TERMINATION_GRACE_SECONDS)
        if not await until(f"{after.process.name} ready", after.ready, timeout):
            problems.append(
                f"{after.process.name} not ready within {timeout:g} s: {last_words(after.process.log)}"
            )
    return problems


async def supervise(replicas: list[Replica]) -> None:
    """Start again a process that exits on its own (as its Deployment would), counting it."""
    while True:
        for each in replicas:
            each.process.supervise()
        await asyncio.sleep(1.0)


def system_settings(
    plane: ControlPlane, temporal: DevServer, azure: dict[str, str], validation: float
) -> dict[str, str]:
    return {
        "NODEWRIGHT_KUBECONFIG": str(plane.kubeconfig),
        "NODEWRIGHT_TEMPORAL_ADDRESS": temporal.target,
        "NODEWRIGHT_TASK_QUEUE": TASK_QUEUE,
        "NODEWRIGHT_CLUSTER_NAME": CLUSTER,
        "NODEWRIGHT_SHUTDOWN_GRACE_SECONDS": f"{SHUTDOWN_GRACE_SECONDS:g}",
        "NODEWRIGHT_DISRUPTION_VALIDATION_SECONDS": f"{validation:g}",
        "POD_NAMESPACE": LEASE_NAMESPACE,
        # As benchmarks/lifecycle.py: on a machine loaded by other work, the default 8 s renew deadline was missed
        # and the leader exited (then restarted), which says nothing about an upgrade or a long day.
        "NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS": "60",
        "NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS": "50",
        **azure,
    }


# --- the work in flight ----------------------------------------------------------------------------------


def held_budget() -> dict[str, Any]:
    """No `held` pod may be evicted: the drains of their nodes wait."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": HELD, "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": HELD}}},
    }


def deployment(name: str, replicas: int) -> dict[str, Any]:
    """One of the benchmark's deployments; the `steady` pods are `karpenter.sh/do-not-disrupt`, so that the only
    disruption there is to decide is the emptiness of the nodes emptied for it (consolidation would otherwise move
    running pods onto them)."""
    manifest = bench_deployment(replicas, "pinned", name, INSTANCE_TYPES[name])
    if name == STEADY:
        manifest["spec"]["template"]["metadata"]["annotations"] = {DO_NOT_DISRUPT: "true"}
    return manifest


async def disruption_status(client: Client) -> dict[str, Any]:
    """The disruption loop's `plan` query (as JSON: the release's status may lack this tree's fields)."""
    try:
        status: dict[str, Any] = await client.get_workflow_handle(disruption_id(CLUSTER)).query("plan")
    except Exception:
        return {}
    return status


def candidates(command: dict[str, Any]) -> list[str]:
    return sorted(candidate["nodeclaim"] for candidate in command["candidates"])


async def deciding(client: Client) -> list[str]:
    """The NodeClaims of the disruption command that waits for validation now (none if it waits for nothing)."""
    status = await disruption_status(client)
    commands = (status.get("plan") or {}).get("commands") or []
    if status.get("waiting_for") != "validation" or not commands:
        return []
    return candidates(commands[0])


async def decided(client: Client, decision: list[str]) -> str | None:
    """What became of the command on `decision` (executed, abandoned, ...), once the loop has recorded it."""
    results = (await disruption_status(client)).get("results") or []
    return next((r["outcome"] for r in reversed(results) if candidates(r["command"]) == decision), None)


async def nodeclaims_running(kube: KubernetesCluster, app: str) -> list[str]:
    """The NodeClaims whose nodes run the deployment's pods (a VM and its Node are named `aks-<nodeclaim>`)."""
    pods = await kube.list_pods("default", f"app={app}")
    return sorted({pod.spec.node_name.removeprefix("aks-") for pod in pods if pod.spec.node_name})


async def report(cluster: Cluster, started: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_SECONDS)
        progress(f"{time.time() - started:7.1f} s: {cluster.summary()}")


def in_flight(cluster: Cluster, decision: list[str]) -> dict[str, int]:
    """The NodeClaims by state: running (Initialized), launching, draining (deleting), in a disruption decision."""
    states = Counter(
        "in a disruption decision" if name in decision and state == "initialized" else state
        for name, state in cluster.claims.items()
    )
    return {
        "running": states["initialized"],
        "launching": states["launching"],
        "draining": states["deleting"],
        "in a disruption decision": states["in a disruption decision"],
    }


def settled(cluster: Cluster, pods: int, decision: list[str], outcome: str | None) -> bool:
    """Every bench pod Running on an Initialized NodeClaim, none deleting, and the decision of the upgrade's time
    over: executed (its nodes gone) or abandoned by its validation, as Karpenter abandons a command whose cluster
    changed."""
    return (
        cluster.pods_running >= pods
        and all(state == "initialized" for state in cluster.claims.values())
        and outcome is not None
        and (outcome != "executed" or not set(decision) & set(cluster.claims))
    )


# --- what the histories and the logs say ---------------------------------------------------------------


@dataclass
class Scan:
    histories: int = 0
    non_determinism: list[str] = field(default_factory=list)
    """`<workflow id>: <message>` for each workflow task failed by a non-determinism error."""
    other_failures: Counter[str] = field(default_factory=Counter)
    """Other workflow task failures, by cause."""
    closed_badly: Counter[str] = field(default_factory=Counter)
    """Workflows Failed, TimedOut or Terminated, by status."""
    failing_tasks: list[str] = field(default_factory=list)
    """Open workflows whose workflow task failed and is being retried."""
    open_lifecycles: list[str] = field(default_factory=list)
    """NodeClaim lifecycles open although their NodeClaim is gone."""


BAD_ENDS = {
    WorkflowExecutionStatus.FAILED: "Failed",
    WorkflowExecutionStatus.TIMED_OUT: "TimedOut",
    WorkflowExecutionStatus.TERMINATED: "Terminated",
}
NON_DETERMINISTIC_CAUSE = "WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR"
OPEN_LIFECYCLES = 'WorkflowType="NodeClaim" AND ExecutionStatus="Running"'


async def scan_workflows(client: Client, nodeclaims: set[str]) -> Scan:
    """Every workflow of the run, open and closed (each run of those that continued as new): the workflow task
    failures in its history, how it ended and, open, whether its workflow task is failing now. The server writes
    the first failure of a workflow task to the history and retries it without writing the others, so a task that
    keeps failing shows once there and as a pending attempt above 1."""
    scan = Scan()
    async for execution in client.list_workflows():
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        scan.histories += 1
        for event in (await handle.fetch_history()).events:
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                continue
            attributes = event.workflow_task_failed_event_attributes
            cause = WorkflowTaskFailedCause.Name(attributes.cause)
            if cause == NON_DETERMINISTIC_CAUSE or NON_DETERMINISM.search(attributes.failure.message):
                scan.non_determinism.append(f"{execution.id}: {attributes.failure.message[:240]}")
            else:
                scan.other_failures[cause.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")] += 1
        if execution.status in BAD_ENDS:
            scan.closed_badly[BAD_ENDS[execution.status]] += 1
        if execution.status is WorkflowExecutionStatus.RUNNING:
            pending = (await handle.describe()).raw_description.pending_workflow_task
            if pending.attempt > 1:
                scan.failing_tasks.append(f"{execution.id} (attempt {pending.attempt})")
            if execution.workflow_type == "NodeClaim" and execution.id.partition("/")[2] not in nodeclaims:
                scan.open_lifecycles.append(execution.id)
    return scan


async def replay_open_workflows(client: Client) -> tuple[int, list[str]]:
    """Query every open workflow (`__stack_trace`, which every workflow answers): a worker that does not hold it
    replays its whole history first, so after the rollout this tree's code replays each one. How many were queried,
    and each failure."""
    handles = [
        client.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for execution in client.list_workflows('ExecutionStatus="Running"')
    ]
    queries = {
        asyncio.ensure_future(handle.query("__stack_trace", rpc_timeout=REPLAY_TIMEOUT)): handle.id
        for handle in handles
    }
    # A query waits for the workflow task in flight, so one whose task keeps failing never answers; and a query
    # cancelled on the client still waits for its call: those left are abandoned, not awaited.
    done, left = await asyncio.wait(queries, timeout=REPLAY_TIMEOUT.total_seconds())
    failures = [f"{queries[query]}: {str(query.exception())[:240]}" for query in done if query.exception()]
    failures += [f"{queries[query]}: no answer within {REPLAY_TIMEOUT.total_seconds():g} s" for query in left]
    return len(handles), failures


def log_lines(logs: Iterable[Path], pattern: re.Pattern[str]) -> list[str]:
    """The lines of the logs that match, each prefixed with its log's name."""
    found = []
    for log in logs:
        with contextlib.suppress(OSError):
            found += [
                f"{log.stem}: {line.strip()[:240]}"
                for line in log.read_text(errors="replace").splitlines()
                if pattern.search(line)
            ]
    return found


# --- one run ---------------------------------------------------------------------------------------------


async def run(options: Options) -> dict[str, Any]:
    releases = read_releases()
    release = (
        next((r for r in releases if r.version == options.release), None) if options.release else releases[-1]
    )
    if release is None:
        raise SystemExit(
            f"no release {options.release} in RELEASES.toml: {', '.join(r.version for r in releases)}"
        )
    previous, current = Build.released(release), Build.current()
    row = await on_a_control_plane(
        "bench-upgrade-",
        options.keep,
        lambda plane, directory, logs: _run_on(plane, directory, logs, options, previous, current),
        crds=previous.root / "deploy" / "crds",
    )
    return {"previous": previous.name, "current": current.name, **row}


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _run_on(
    plane: ControlPlane, directory: Path, logs: Path, options: Options, previous: Build, current: Build
) -> dict[str, Any]:
    cluster = Cluster()
    async with surroundings(plane, directory, logs, options.seed) as around, asyncio.TaskGroup() as group:
        kube, emulator, client = around.kube, around.emulator, around.client
        settings = system_settings(
            plane, around.temporal, around.azure_environment, options.validation_seconds
        )
        old = deployment_replicas(previous, "old-", settings, logs)
        new = deployment_replicas(current, "new-", settings, logs)
        everyone = [*old["worker"], *old["controller"], *new["worker"], *new["controller"]]
        tasks = [group.create_task(supervise(everyone)), group.create_task(watch(kube, cluster))]
        started = time.time()
        try:
            row = await _arrange_and_upgrade(
                options, plane, kube, emulator, client, cluster, old, new, previous
            )
            row["total_seconds"] = round(time.time() - started, 1)
        finally:
            for task in tasks:
                task.cancel()
            for each in everyone:
                await asyncio.to_thread(each.process.stop)
        worker_logs = [each.process.log for each in old["worker"] + new["worker"]]
        row["log_non_determinism"] = log_lines(worker_logs, NON_DETERMINISM)
        row["log_failed_activations"] = len(log_lines(worker_logs, re.compile(re.escape(FAILED_ACTIVATION))))
        row["process_exits"] = [exit for each in everyone for exit in each.process.exits]
    return row


async def _arrange_and_upgrade(
    options: Options,
    plane: ControlPlane,
    kube: KubernetesCluster,
    emulator: AksEmulatorClient,
    client: Client,
    cluster: Cluster,
    old: dict[str, list[Replica]],
    new: dict[str, list[Replica]],
    previous: Build,
) -> dict[str, Any]:
    for each in [*old["worker"], *old["controller"]]:
        each.process.start()

    async def ready() -> bool:
        return await has_pollers(client, TASK_QUEUE) and await workflow_exists(client, disruption_id(CLUSTER))

    if not await until(f"{previous.name}: the workers and the leading controller", ready, STARTUP_SECONDS):
        raise RuntimeError(
            "the release did not start:\n"
            + "\n".join(
                f"{r.process.name}:\n{tail(r.process.log)}" for r in old["worker"] + old["controller"]
            )
        )

    # The steady state: every pod on an Initialized node.
    # No disruption while the first nodes come (a decision then would hold the loop in its long validation).
    await kube.apply(consolidating_examples(previous.root, consolidate_after="Never"))
    await kube.apply(
        [
            held_budget(),
            deployment(STEADY, options.running + options.deciding),
            deployment(HELD, options.draining),
            deployment(ARRIVING, 0),
        ]
    )
    first = options.running + options.deciding + options.draining
    reporter = asyncio.create_task(report(cluster, time.time()))
    try:

        async def whole() -> bool:
            return cluster.whole(first)

        if not await until("the first NodeClaims Initialized", whole, options.settle_timeout):
            raise RuntimeError(f"the release did not provision {first} pods: {cluster.summary()}")
        progress(f"{previous.name}: {cluster.summary()}; arranging the work in flight")

        # In a disruption decision: empty nodes whose emptiness command waits for validation.
        await emulator.update_settings(
            {
                "arm": {
                    "vm_create_seconds": options.vm_create_seconds,
                    "poll_retry_after": ARM_RETRY_AFTER_SECONDS,
                }
            }
        )
        await kube.scale("Deployment", "default", STEADY, options.running)

        async def emptied() -> bool:
            return sum(1 for pod in cluster.running if pod.startswith(f"{STEADY}-")) <= options.running

        await until("the steady pods scaled away", emptied, 120.0)
        await asyncio.sleep(CONSOLIDATE_AFTER_SECONDS + 2)
        # Consolidation on, now that the emptied nodes have been empty for longer than consolidateAfter: the
        # first pass finds them all at once.
        consolidate = json.dumps(
            {"spec": {"disruption": {"consolidateAfter": f"{CONSOLIDATE_AFTER_SECONDS}s"}}}
        )
        await asyncio.to_thread(
            plane.kubectl, "patch", "nodepool", "default", "--type=merge", "-p", consolidate
        )
        decision: list[str] = []

        async def waiting_for_validation() -> bool:
            decision[:] = await deciding(client)
            return len(decision) >= options.deciding

        if not await until("a disruption decision waiting for validation", waiting_for_validation, 300.0):
            raise RuntimeError("the disruption loop made no decision on the emptied nodes")
        # Draining: NodeClaims deleted whose pods the budget holds; launching: new pods on slow VM creates.
        for claim in await nodeclaims_running(kube, HELD):
            await kube.delete_nodeclaim(claim)
        await kube.scale("Deployment", "default", ARRIVING, options.arriving)

        async def arranged() -> bool:
            """The drains waiting, and the arriving pods' NodeClaims launching with the drained pods'
            replacements."""
            states = in_flight(cluster, decision)
            return (
                states["draining"] >= options.draining
                and states["launching"] >= options.arriving + options.draining
            )

        await until("the launches and drains in flight", arranged, 180.0)
        at_upgrade = in_flight(cluster, decision)
        progress(f"at the upgrade: {at_upgrade}")

        # The upgrade: this tree's CRDs, then both Deployments rolled at once.
        upgrade_started = time.time()
        await asyncio.to_thread(
            plane.kubectl,
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            str(ROOT / "deploy" / "crds"),
        )
        rollouts = await asyncio.gather(
            *(roll(old[role], new[role], STARTUP_SECONDS) for role in ("worker", "controller"))
        )
        rolled = time.time()
        progress(
            f"rolled out in {rolled - upgrade_started:.0f} s; replaying every open workflow on this tree's code"
        )
        replayed, replay_failures = await replay_open_workflows(client)
        replay_seconds = round(time.time() - rolled, 1)
        progress(
            f"replayed {replayed} open workflows in {replay_seconds:.0f} s: {len(replay_failures)} failed"
        )
        await kube.delete_object("PodDisruptionBudget", HELD, "default")
        pods = options.running + options.draining + options.arriving

        outcome: str | None = None

        async def after() -> bool:
            nonlocal outcome
            outcome = outcome or await decided(client, decision)
            return settled(cluster, pods, decision, outcome)

        settled_in_time = await until("settled after the upgrade", after, options.settle_timeout)
        settled_at = time.time()
        stuck = (
            []
            if settled_in_time
            else [f"{n} ({s})" for n, s in sorted(cluster.claims.items()) if s != "initialized"]
        )
        if outcome is None:
            stuck.append(f"the disruption decision on {', '.join(decision)} (not over)")
        elif outcome == "executed":
            stuck += [f"{name} (disrupted, still here)" for name in decision if name in cluster.claims]
        running_after = cluster.pods_running

        # The teardown: every lifecycle through termination on this tree's code.
        for name in (STEADY, HELD, ARRIVING):
            await kube.scale("Deployment", "default", name, 0)
        for claim in await kube.list_nodeclaims():
            await kube.delete_nodeclaim(claim.metadata.name)

        async def drained() -> bool:
            return (
                not cluster.claims
                and not await kube.list_nodes()
                and not await azure_left(emulator)
                and not (await client.count_workflows(OPEN_LIFECYCLES)).count
            )

        drained_in_time = await until("everything gone", drained, options.drain_timeout)
        if not drained_in_time:
            stuck += [f"{name} (deleting after the teardown)" for name in sorted(cluster.claims)]
    finally:
        reporter.cancel()
    end = await scan_workflows(client, set(cluster.claims))
    return {
        "nodeclaims": options.nodeclaims,
        "at_upgrade": at_upgrade,
        "decision_outcome": outcome,
        "rollout_problems": [problem for problems in rollouts for problem in problems],
        "replayed": replayed,
        "replay_failures": replay_failures,
        "history_non_determinism": end.non_determinism,
        "workflow_task_failures": dict(end.other_failures),
        "workflows_closed_badly": dict(end.closed_badly),
        "failing_tasks": end.failing_tasks,
        "open_lifecycles": end.open_lifecycles,
        "histories": end.histories,
        "stuck": stuck,
        "pods_running_after": running_after,
        "pods": pods,
        **await left_over(kube, emulator),
        "rollout_seconds": round(rolled - upgrade_started, 1),
        "replay_seconds": replay_seconds,
        "settled_seconds": round(settled_at - upgrade_started, 1),
    }


# --- the verdict ---------------------------------------------------------------------------------------


def non_determinism(row: dict[str, Any]) -> int:
    """Non-determinism errors, from every source: histories, replays of the open workflows, worker logs."""
    replays = [failure for failure in row["replay_failures"] if NON_DETERMINISM.search(failure)]
    return len(row["history_non_determinism"]) + len(replays) + len(row["log_non_determinism"])


def non_deterministic_workflows(row: dict[str, Any]) -> int:
    """Workflows whose history has a workflow task failed by a non-determinism error."""
    return len({line.partition(": ")[0] for line in row["history_non_determinism"]})


def stuck(row: dict[str, Any]) -> int:
    return len(row["stuck"]) + len(row["failing_tasks"]) + len(row["open_lifecycles"])


def problems(row: dict[str, Any]) -> list[str]:
    found = []
    if count := non_determinism(row):
        found.append(f"{count} non-determinism error(s)")
    if row["replay_failures"]:
        found.append(f"{len(row['replay_failures'])} open workflow(s) failed to replay")
    if row["workflows_closed_badly"]:
        found.append(f"workflows {row['workflows_closed_badly']}")
    if count := stuck(row):
        found.append(f"{count} stuck")
    found += leaked(row)
    found += row["rollout_problems"]
    return found


def print_table(row: dict[str, Any]) -> None:
    lines: list[tuple[str, Any]] = [
        (f"{row['previous']} -> {row['current']}", ""),
        (f"NodeClaims in flight at the upgrade (N = {row['nodeclaims']})", sum(row["at_upgrade"].values())),
        *((f"  {state}", count) for state, count in row["at_upgrade"].items()),
        ("the disruption decision, after the upgrade", row["decision_outcome"] or "not over"),
        ("non-determinism errors", non_determinism(row)),
        (
            "  in histories (workflow task failures, workflows)",
            f"{len(row['history_non_determinism'])}, {non_deterministic_workflows(row)}",
        ),
        (
            "  replaying the open workflows after the rollout",
            f"{len(row['replay_failures'])} of {row['replayed']}",
        ),
        ("  in the workers' logs", len(row["log_non_determinism"])),
        ("other workflow task failures", sum(row["workflow_task_failures"].values())),
        ("workflows Failed, TimedOut or Terminated", sum(row["workflows_closed_badly"].values())),
        ("stuck", stuck(row)),
        ("  NodeClaims not settled", len(row["stuck"])),
        ("  workflows with failing tasks", len(row["failing_tasks"])),
        ("  lifecycles open without a NodeClaim", len(row["open_lifecycles"])),
        ("pods Running when settled", f"{row['pods_running_after']} of {row['pods']}"),
        ("leaked: VMs / NICs / disks / Nodes / NodeClaims", " / ".join(str(row[key]) for key, _ in LEFT)),
        ("histories scanned", row["histories"]),
        ("rollout (s)", row["rollout_seconds"]),
        ("replaying the open workflows (s)", row["replay_seconds"]),
        ("upgrade -> settled (s)", row["settled_seconds"]),
        ("total (s)", row["total_seconds"]),
    ]
    for label, value in lines:
        print(f"{label:<52} {value!s:>10}".rstrip())
    details = [
        *(
            ("workflow task failures", f"{cause}: {count}")
            for cause, count in row["workflow_task_failures"].items()
        ),
        *(("non-determinism", line) for line in row["history_non_determinism"] + row["log_non_determinism"]),
        *(("replay failed", line) for line in row["replay_failures"]),
        *(("stuck", line) for line in row["stuck"] + row["failing_tasks"] + row["open_lifecycles"]),
        *(("exit", line) for line in row["process_exits"]),
        *(("rollout", line) for line in row["rollout_problems"]),
    ]
    for kind, line in details[:60]:
        print(f"{kind}: {line}")
    if len(details) > 60:
        print(f"... and {len(details) - 60} more (--json has them all)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Options()
    parser.add_argument("--nodeclaims", type=int, default=defaults.nodeclaims, help="N (default %(default)s)")
    parser.add_argument("--release", help="the version to upgrade from (default: the last in RELEASES.toml)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the emulated Azure's seed")
    parser.add_argument(
        "--vm-create-seconds",
        type=float,
        default=defaults.vm_create_seconds,
        help="VM create time of the launches",
    )
    parser.add_argument(
        "--validation-seconds",
        type=float,
        default=defaults.validation_seconds,
        help="how long a disruption decision waits before it executes",
    )
    parser.add_argument("--settle-timeout", type=float, default=defaults.settle_timeout)
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the table")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's state and every log")
    args = parser.parse_args()
    options = Options(
        nodeclaims=args.nodeclaims,
        release=args.release,
        seed=args.seed,
        vm_create_seconds=args.vm_create_seconds,
        validation_seconds=args.validation_seconds,
        settle_timeout=args.settle_timeout,
        drain_timeout=args.drain_timeout,
        keep=args.keep,
    )
    row = asyncio.run(run(options))
    print_table(row)
    if args.json:
        print(json.dumps(row))
    if found := problems(row):
        print("FAILED: " + "; ".join(found))
        sys.exit(1)


if __name__ == "__main__":
    main()
