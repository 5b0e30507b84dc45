"""Chaos benchmark: N pods that each need a node of their own (benchmarks/lifecycle.py's `pinned` shape),
provisioned through the whole system on a real control plane while processes die and Azure fails, then scaled
to zero. Prints one table; exits with 1 when anything leaked, was made twice or got stuck.

The system runs as in benchmarks/lifecycle.py (the same control plane, emulated Azure and `nodewright`
processes, with default settings), but highly available: two workers and two controllers (leader election,
one standby), and the Temporal dev server keeps its state in a database file so that it can die and come back.
The workers and controllers are supervised as a Deployment's pods would be: one that exits on its own is
started again (and counted). Node agents keep trying a refused bootstrap token for 120 s, as kubelets keep
trying (a restarted API server refuses bootstrap tokens until it has read their Secrets).

Once the first VM exists, the faults of each kind are injected `--rounds` times in an order and at intervals
drawn from `--seed` (killed processes stay down `--outage` seconds):

- worker: the first worker SIGKILLed, then started again; worker replica: the same for the second;
- controller leader: the controller holding the leader-election Lease SIGKILLed (the standby takes over), then
  started again as the standby;
- temporal: the dev server SIGKILLed and started again on its database;
- kube-apiserver, etcd: the process SIGKILLed and started again (same ports and data directory);
- node agents: the agents of a few VMs crash (the emulator's `POST /_emulator/crash-agent`) and join again;
- NodeClaim deleted, Node deleted: one chosen at random, deleted by hand through the API.

deploy/examples/ is applied with the NodePool's consolidateAfter at 10 s and a disruption budget of 100 % (so
that the scale to zero takes one round of emptiness consolidation).

Throughout, a fifth of the emulated ARM's requests fail (faults with a `rate`, from the emulator's seeded
generator): 500, 503, 429 with Retry-After, responses dropped after the request was carried out, and long-running
operations that stay InProgress for a while.

After the last fault, once N pods are Running (or `--timeout` passed), the deployment is scaled to zero and the
benchmark waits (`--drain-timeout`) for every NodeClaim, Node, VM, NIC and disk to go. The table:

- faults injected, by kind (Azure errors as fired by the emulator);
- VMs, NICs, disks, Nodes and NodeClaims left after the scale to zero (0);
- VMs created twice under one name, i.e. for one NodeClaim (0; the emulator counts them);
- pods Running at the peak (N), NodeClaims stuck: not Initialized when the run gave up, or still deleting
  when the drain gave up (0);
- workflows Failed or TimedOut; processes that exited on their own (restarted by the supervision);
- the worst time from a fault to the system whole again (N pods Running, every NodeClaim Initialized, none
  deleting).

    python benchmarks/chaos.py                     # N = 1,000 (make bench-chaos N=...)
    python benchmarks/chaos.py --pods 200 --keep   # a quick run; keep the logs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.client import Client

from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from benchmarks.nodewright import CLUSTER, emulated_azure, examples, has_pollers, workflow_exists
from benchmarks.processes import ROOT, tail
from benchmarks.workload import APP, bench_deployment
from core.cluster import EventType as WatchEventType
from simulator.aks_client import AksEmulatorClient
from simulator.arm.faults import Fault, FaultAction
from workers.controlplane.run import DEFAULT_CRDS, ControlPlane, start_control_plane
from workers.processes import die_with_parent
from workers.temporal_server import DevServer, free_port
from workers.worker import connect
from workflows.disruption import disruption_id

PODS = 1000
TASK_QUEUE = "bench-chaos"
LEASE = "nodewright-leader-election"
LEASE_NAMESPACE = "default"
CONSOLIDATE_AFTER = "10s"
"""The NodePool's consolidateAfter (deploy/examples' is 1m) and disruption budget (Karpenter's default is 10 %
of the nodes at a time): the nodes emptied by the scale to zero go in one round, 10 s after they emptied."""
BUDGET = "100%"
AZURE_ERRORS: dict[str, tuple[Fault, float]] = {
    "Azure 500": (Fault.transient(500), 0.05),
    "Azure 503": (Fault.transient(503), 0.04),
    "Azure 429 (Retry-After 1 s)": (Fault.throttle(1.0), 0.04),
    "Azure response dropped": (Fault.drop_response(), 0.03),
    "Azure slow operation (10 polls)": (Fault(action=FaultAction.SLOW, polls=10), 0.04),
}
"""A fifth of the emulated ARM's requests fail, each way at its rate (slow ones: PUTs and DELETEs)."""
KINDS = (
    "worker",
    "worker replica",
    "controller leader",
    "temporal",
    "kube-apiserver",
    "etcd",
    "node agents",
    "NodeClaim deleted",
    "Node deleted",
)
BOOTSTRAP_REFUSAL_GRACE = 120.0
"""Seconds a node agent keeps trying when the API server refuses its bootstrap token: one restarted by the chaos
refuses them until it has read their Secrets, and a kubelet keeps trying (the emulator gives up at once by
default)."""
STARTUP_SECONDS = 90.0
SAMPLE_SECONDS = 0.5
PROGRESS_SECONDS = 10.0
SUPERVISION_SECONDS = 1.0


# --- processes that die and come back ------------------------------------------------------------------------


@dataclass
class Supervised:
    """One process of the system (`nodewright worker`, ...), started again when it exits on its own, as its
    Deployment would; `kill` holds it down until `start`."""

    name: str
    args: tuple[str, ...]
    log: Path
    env: dict[str, str]
    cwd: Path = ROOT
    """Where it runs: this tree, or a released one (`benchmarks/upgrade.py`)."""
    process: subprocess.Popen[bytes] | None = None
    held: bool = False
    exits: list[str] = field(default_factory=list)
    """Exits nobody caused, with their code."""

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"----- {self.name} started -----\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.args,
                cwd=self.cwd,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        self.held = False

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would end it; it stays down until `start`."""
        self.held = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def supervise(self) -> None:
        if not self.held and self.process is not None and (code := self.process.poll()) is not None:
            self.exits.append(f"{self.name} exited with code {code}: {last_words(self.log)}")
            self.start()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds, as the kubelet stops a pod."""
        self.held = True
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


LAST_WORDS = ("Fatal Python error", "panicked at", "error:", "Traceback", "Error")


def last_words(log: Path, size: int = 16384) -> str:
    """Why a process ended, from the end of its log: the last line that names a fatal error, a panic, a lost
    Lease or an exception, else its last line."""
    with log.open("rb") as file:
        file.seek(max(0, log.stat().st_size - size))
        lines = [line.strip() for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    for marker in LAST_WORDS:
        found = [line for line in lines if marker in line]
        if found:
            return found[-1][:240]
    return lines[-1][:240] if lines else "(nothing logged)"


# --- what the cluster holds now ----------------------------------------------------------------------------


@dataclass
class Cluster:
    """The bench pods and the NodeClaims as this process's watch of the API server sees them now."""

    running: dict[str, bool] = field(default_factory=dict)
    """Bench pods by name: Running or not."""
    claims: dict[str, str] = field(default_factory=dict)
    """NodeClaims by name: `launching`, `initialized` or `deleting`."""
    since: dict[str, float] = field(default_factory=dict)
    """When each NodeClaim entered its state."""
    peak_running: int = 0

    @property
    def pods_running(self) -> int:
        return sum(self.running.values())

    def whole(self, pods: int) -> bool:
        """`pods` pods Running, every NodeClaim Initialized, none deleting."""
        return self.pods_running >= pods and all(state == "initialized" for state in self.claims.values())

    def summary(self) -> str:
        states = Counter(self.claims.values())
        return f"{self.pods_running}/{len(self.running)} pods Running, NodeClaims: " + (
            ", ".join(f"{count} {state}" for state, count in sorted(states.items())) or "none"
        )


def _state(manifest: dict[str, Any]) -> str:
    if manifest["metadata"].get("deletionTimestamp"):
        return "deleting"
    conditions = (manifest.get("status") or {}).get("conditions") or []
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions)
    return "initialized" if initialized else "launching"


async def watch(kube: KubernetesCluster, cluster: Cluster) -> None:
    async for event in kube.watch():
        if event.kind == "Pod" and str(event.name).startswith(f"{APP}-"):
            if event.type is WatchEventType.DELETED:
                cluster.running.pop(event.name, None)
            else:
                cluster.running[event.name] = (event.object.get("status") or {}).get("phase") == "Running"
            cluster.peak_running = max(cluster.peak_running, cluster.pods_running)
        elif event.kind == "NodeClaim":
            if event.type is WatchEventType.DELETED:
                cluster.claims.pop(event.name, None)
                cluster.since.pop(event.name, None)
                continue
            state = _state(event.object)
            if cluster.claims.get(event.name) != state:
                cluster.claims[event.name] = state
                cluster.since[event.name] = time.time()


# --- the faults ------------------------------------------------------------------------------------------


@dataclass
class Injection:
    kind: str
    at: float
    what: str
    done: bool
    """False when there was nothing to inject it into (no leader, no NodeClaim yet) or the injection failed."""
    claim: str | None = None
    """The NodeClaim deleted (or whose Node was): the system is whole again only once it is gone, not while this
    process's watch has yet to see it deleting."""
    whole_again: float | None = None


@dataclass
class System:
    plane: ControlPlane
    temporal: DevServer
    kube: KubernetesCluster
    emulator: AksEmulatorClient
    workers: list[Supervised]
    controllers: list[Supervised]
    rng: random.Random
    outage: float
    agents_per_crash: int
    injections: list[Injection] = field(default_factory=list)
    _claim: str | None = None

    @property
    def supervised(self) -> list[Supervised]:
        return [*self.workers, *self.controllers]

    async def inject(self, kind: str) -> None:
        at = time.time()
        self._claim = None
        try:
            what, done = await self._fault(kind)
        except Exception as error:
            what, done = f"failed: {error!r}", False
        self.injections.append(Injection(kind, at, what, done, self._claim))
        print(f"  fault: {kind}: {what}", file=sys.stderr, flush=True)

    async def _down_and_up(self, process: Supervised) -> None:
        process.kill()
        try:
            await asyncio.sleep(self.outage)
        finally:
            process.start()

    async def _fault(self, kind: str) -> tuple[str, bool]:
        if kind in ("worker", "worker replica"):
            worker = self.workers[0 if kind == "worker" else 1]
            await self._down_and_up(worker)
            return f"{worker.name} SIGKILLed, started {self.outage:g} s later", True
        if kind == "controller leader":
            lease = await self.kube.get_object("Lease", LEASE, LEASE_NAMESPACE) or {}
            holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
            leader = next((c for c in self.controllers if c.name == holder), None)
            if leader is None:
                return f"no controller holds the Lease (holder {holder or 'none'}): nothing killed", False
            await self._down_and_up(leader)
            return f"{leader.name} (the leader) SIGKILLed, started {self.outage:g} s later", True
        if kind == "temporal":
            await self.temporal.kill()
            await asyncio.sleep(self.outage)
            await self.temporal.start()
            return f"SIGKILLed, started {self.outage:g} s later on its database", True
        if kind in ("kube-apiserver", "etcd"):
            await asyncio.to_thread(self.plane.kill_process, kind)
            await asyncio.sleep(self.outage)
            started = time.monotonic()
            # Restarted, kube-apiserver lists every object from etcd before it is ready: at 1,000 Nodes on a
            # loaded 2-core machine that took over a minute. The fault counts once the process runs again.
            await asyncio.to_thread(self.plane.start_process, kind, API_SERVER_READY_SECONDS)
            ready = f", ready {time.monotonic() - started:.0f} s after" if kind == "kube-apiserver" else ""
            return f"SIGKILLed, started {self.outage:g} s later{ready}", True
        if kind == "node agents":
            vms = sorted(
                str(item["name"])
                for item in await self.emulator.resources()
                if item.get("type") == "Microsoft.Compute/virtualMachines"
            )
            crashed: list[str] = []
            # In a random order, until enough crashed: a VM still booting has no agent yet, and one that went
            # has none any more.
            for vm in self.rng.sample(vms, len(vms)):
                if len(crashed) == self.agents_per_crash:
                    break
                with contextlib.suppress(Exception):
                    await self.emulator.crash_agent(vm)
                    crashed.append(vm)
            return f"the agents of {', '.join(crashed) or 'no VM'} crashed", bool(crashed)
        if kind == "NodeClaim deleted":
            claims = sorted(claim.name for claim in await self.kube.list_nodeclaims())
            if not claims:
                return "no NodeClaim to delete", False
            name = self._claim = self.rng.choice(claims)
            await self.kube.delete_nodeclaim(name)
            return f"nodeclaim/{name}", True
        if kind == "Node deleted":
            nodes = sorted(node.metadata.name for node in await self.kube.list_nodes())
            if not nodes:
                return "no Node to delete", False
            name = self.rng.choice(nodes)
            self._claim = name.removeprefix("aks-")  # the NodeClaim a VM and its Node are named after
            await self.kube.delete_node(name)
            return f"node/{name}", True
        raise ValueError(f"unknown fault kind {kind!r}")


def schedule(rng: random.Random, rounds: int, gap: float) -> list[tuple[float, str]]:
    """Each kind `rounds` times, shuffled, each after a pause drawn between half and one and a half `gap`."""
    kinds = [kind for _ in range(rounds) for kind in KINDS]
    rng.shuffle(kinds)
    return [(rng.uniform(gap / 2, 3 * gap / 2), kind) for kind in kinds]


# --- one run ---------------------------------------------------------------------------------------------


@dataclass
class Options:
    pods: int = PODS
    seed: int = 1
    rounds: int = 1
    gap: float = 5.0
    """Mean seconds between two faults."""
    outage: float = 2.0
    """Seconds a killed process stays down."""
    timeout: float = 1800.0
    """Seconds for the pods to be Running once the faults are over."""
    drain_timeout: float = 600.0
    """Seconds for everything to go after the scale to zero."""

    @staticmethod
    def scaled(pods: int) -> tuple[float, float]:
        """The default timeouts for N pods (`timeout`, `drain_timeout`): on this 2-core machine, loaded, the
        scale to zero of N = 200 took 0.7 s per NodeClaim; 1,000 would outlast a fixed 600 s."""
        return max(Options.timeout, 2.0 * pods), max(Options.drain_timeout, 1.5 * pods)

    keep: bool = False


def _settings(plane: ControlPlane, temporal: DevServer, azure: dict[str, str]) -> dict[str, str]:
    return {
        "NODEWRIGHT_KUBECONFIG": str(plane.kubeconfig),
        "NODEWRIGHT_TEMPORAL_ADDRESS": temporal.target,
        "NODEWRIGHT_TASK_QUEUE": TASK_QUEUE,
        "NODEWRIGHT_CLUSTER_NAME": CLUSTER,
        "POD_NAMESPACE": LEASE_NAMESPACE,
        **azure,
    }


def _processes(
    plane: ControlPlane, temporal: DevServer, azure: dict[str, str], logs: Path
) -> tuple[list[Supervised], list[Supervised]]:
    nodewright = (sys.executable, "-m", "workers.cli")

    def one(role: str, name: str) -> Supervised:
        env = {
            **_settings(plane, temporal, azure),
            "POD_NAME": name,  # its leader-election identity
            "NODEWRIGHT_METRICS_PORT": str(free_port()),
            "NODEWRIGHT_HEALTH_PROBE_PORT": str(free_port()),
            "PYTHONFAULTHANDLER": "1",  # an abort (SIGABRT, SIGSEGV) leaves every thread's stack in the log
        }
        return Supervised(name, (*nodewright, role), logs / f"{name}.log", env)

    return (
        [one("worker", "worker-a"), one("worker", "worker-b")],
        [one("controller", "controller-a"), one("controller", "controller-b")],
    )


API_SERVER_READY_SECONDS = 600.0
"""How long a restarted kube-apiserver may take to be ready again before the benchmark gives up on it."""


async def until(what: str, ready: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    """Until `ready()` holds (True) or `timeout` passed (False); `supervise` restarts the processes meanwhile."""
    deadline = time.monotonic() + timeout
    while not await ready():
        if time.monotonic() > deadline:
            print(f"  {what}: not within {timeout:g} s", file=sys.stderr, flush=True)
            return False
        await asyncio.sleep(SAMPLE_SECONDS)
    return True


async def supervise(system: System) -> None:
    while True:
        for process in system.supervised:
            process.supervise()
        await asyncio.sleep(SUPERVISION_SECONDS)


async def record_recoveries(system: System, cluster: Cluster, pods: int) -> None:
    """Each fault's moment the system was whole again (the first sample after it)."""
    while True:
        now = time.time()
        if cluster.whole(pods):
            for injection in system.injections:
                if injection.whole_again is None and injection.claim not in cluster.claims:
                    injection.whole_again = now
        await asyncio.sleep(SAMPLE_SECONDS)


async def report_progress(system: System, cluster: Cluster, started: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_SECONDS)
        print(f"{time.time() - started:7.1f} s: {cluster.summary()}", file=sys.stderr, flush=True)


def _stuck(cluster: Cluster, state: str) -> list[str]:
    return sorted(name for name, now in cluster.claims.items() if now == state)


T = TypeVar("T")


async def on_a_control_plane(
    prefix: str,
    keep: bool,
    run: Callable[[ControlPlane, Path, Path], Awaitable[T]],
    crds: Path | None = DEFAULT_CRDS,
) -> T:
    """`run(plane, directory, logs)` on a control plane of its own (with the CRDs of `crds`), in a temporary
    directory removed afterwards unless `keep`."""
    logging.basicConfig(level=logging.WARNING)
    # This process's watch retries through the API server's outages: not worth a warning each time.
    for name in ("nodewright.kube", "urllib3.connectionpool"):
        logging.getLogger(name).setLevel(logging.ERROR)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    if keep:
        print(f"state and logs: {directory}", file=sys.stderr, flush=True)
    logs = directory / "logs"
    logs.mkdir()
    try:
        plane = await asyncio.to_thread(start_control_plane, directory / "control-plane", crds=crds)
        try:
            return await run(plane, directory, logs)
        finally:
            await asyncio.to_thread(plane.stop)
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Surroundings:
    """What the system runs on besides the control plane, and this process's handles on it."""

    kube: KubernetesCluster
    temporal: DevServer
    """The dev server, its state in a database file: it can die and come back."""
    azure: subprocess.Popen[bytes]
    """The emulated Azure's process."""
    azure_environment: dict[str, str]
    """The `NODEWRIGHT_*` variables that point a worker at it."""
    emulator: AksEmulatorClient
    client: Client


@contextlib.asynccontextmanager
async def surroundings(
    plane: ControlPlane, directory: Path, logs: Path, seed: int
) -> AsyncIterator[Surroundings]:
    kube = load_cluster(str(plane.kubeconfig))
    temporal = DevServer(db_filename=directory / "temporal.db", log_path=logs / "temporal.log")
    async with (
        kube,
        temporal,
        emulated_azure(plane, directory, logs, seed) as (azure, environment),
        AksEmulatorClient(
            environment["NODEWRIGHT_ARM_ENDPOINT"], Path(environment["NODEWRIGHT_ARM_CA_FILE"])
        ) as emulator,
    ):
        yield Surroundings(kube, temporal, azure, environment, emulator, await connect(temporal.target))


async def run(options: Options) -> dict[str, Any]:
    return await on_a_control_plane(
        "bench-chaos-", options.keep, lambda plane, directory, logs: _run_on(plane, directory, logs, options)
    )


async def _run_on(plane: ControlPlane, directory: Path, logs: Path, options: Options) -> dict[str, Any]:
    rng = random.Random(options.seed)
    async with surroundings(plane, directory, logs, options.seed) as around, asyncio.TaskGroup() as group:
        kube, temporal, emulator, client = around.kube, around.temporal, around.emulator, around.client
        azure_environment = around.azure_environment
        await emulator.update_settings({"agent": {"bootstrap_refusal_grace": BOOTSTRAP_REFUSAL_GRACE}})
        workers, controllers = _processes(plane, temporal, azure_environment, logs)
        system = System(
            plane, temporal, kube, emulator, workers, controllers, rng, options.outage,
            max(1, options.pods // 50),
        )  # fmt: skip
        cluster = Cluster()
        tasks: list[asyncio.Task[None]] = []
        try:
            for process in system.supervised:
                process.start()
            tasks.append(group.create_task(supervise(system)))

            async def ready() -> bool:
                return await has_pollers(client, TASK_QUEUE) and await workflow_exists(
                    client, disruption_id(CLUSTER)
                )

            if not await until("the workers and the leading controller", ready, STARTUP_SECONDS):
                raise RuntimeError(
                    "the system did not start:\n"
                    + "\n".join(f"{p.name}:\n{tail(p.log)}" for p in system.supervised)
                )
            await kube.apply(consolidating_examples())
            tasks.append(group.create_task(watch(kube, cluster)))
            ids: dict[str, str] = {}
            for label, (fault, rate) in AZURE_ERRORS.items():
                stored = await emulator.add_fault(fault.model_copy(update={"rate": rate}))
                ids[stored.id] = label
            started = time.time()
            tasks.append(group.create_task(report_progress(system, cluster, started)))
            tasks.append(group.create_task(record_recoveries(system, cluster, options.pods)))
            await kube.apply([bench_deployment(options.pods, "pinned")])

            async def first_vm() -> bool:
                return (await emulator.counters()).vms_created >= 1

            await until("the first VM", first_vm, STARTUP_SECONDS)
            for pause, kind in schedule(rng, options.rounds, options.gap):
                await asyncio.sleep(pause)
                await system.inject(kind)
            faults_over = time.time()

            async def whole() -> bool:
                return cluster.whole(options.pods)

            whole_after_faults = await until("the system whole", whole, options.timeout)
            stuck_launching = [] if whole_after_faults else _stuck(cluster, "launching")
            stuck_deleting = [] if whole_after_faults else _stuck(cluster, "deleting")
            pods_running = cluster.pods_running
            await kube.scale("Deployment", "default", APP, 0)

            async def drained() -> bool:
                return not cluster.claims and not await kube.list_nodes() and not await azure_left(emulator)

            drained_in_time = await until("everything gone", drained, options.drain_timeout)
            if not drained_in_time:
                stuck_deleting += [name for name in _stuck(cluster, "deleting") if name not in stuck_deleting]
            finished = time.time()
        finally:
            for task in tasks:
                task.cancel()
            for process in system.supervised:
                process.stop()

        counters = await emulator.counters()
        left = await left_over(kube, emulator)
        failures = {
            status: (await client.count_workflows(f'ExecutionStatus="{status}"')).count
            for status in ("Failed", "TimedOut")
        }
    injected = Counter(injection.kind for injection in system.injections if injection.done)
    for fault_id, label in ids.items():
        injected[label] = counters.fired_by_fault.get(fault_id, 0)
    recoveries = [
        (injection.whole_again - injection.at, injection)
        for injection in system.injections
        if injection.done and injection.whole_again is not None
    ]
    worst = max(recoveries, default=None, key=lambda item: item[0])
    return {
        "pods": options.pods,
        "seed": options.seed,
        "faults": dict(injected),
        **left,
        "vms_created": counters.vms_created,
        "vms_created_twice": counters.vms_created_again,
        "peak_pods_running": cluster.peak_running,
        "pods_running_after_faults": pods_running,
        "stuck_launching": stuck_launching,
        "stuck_deleting": stuck_deleting,
        "workflow_failures": failures,
        "process_exits": [exit for process in system.supervised for exit in process.exits],
        "worst_recovery_seconds": round(worst[0], 1) if worst else None,
        "worst_recovery_fault": f"{worst[1].kind}: {worst[1].what}" if worst else None,
        "not_injected": [f"{i.kind}: {i.what}" for i in system.injections if not i.done],
        "faults_seconds": round(faults_over - started, 1),
        "total_seconds": round(finished - started, 1),
    }


async def azure_left(emulator: AksEmulatorClient) -> dict[str, int]:
    return dict(Counter(str(item.get("type")) for item in await emulator.resources()))


LEFT = (
    ("vms_left", "VMs"),
    ("nics_left", "NICs"),
    ("disks_left", "disks"),
    ("nodes_left", "Nodes"),
    ("nodeclaims_left", "NodeClaims"),
)
"""What a scale to zero must leave none of, as a row's keys and their names."""


async def left_over(kube: KubernetesCluster, emulator: AksEmulatorClient) -> dict[str, int]:
    """How many VMs, NICs and disks (in the emulated Azure), Nodes and NodeClaims are left, by `LEFT`'s keys."""
    azure = await azure_left(emulator)
    return {
        "vms_left": azure.get("Microsoft.Compute/virtualMachines", 0),
        "nics_left": azure.get("Microsoft.Network/networkInterfaces", 0),
        "disks_left": azure.get("Microsoft.Compute/disks", 0),
        "nodes_left": len(await kube.list_nodes()),
        "nodeclaims_left": len(await kube.list_nodeclaims()),
    }


def leaked(row: dict[str, Any]) -> list[str]:
    return [f"{row[key]} {label} left" for key, label in LEFT if row[key]]


def consolidating_examples(
    root: Path = ROOT, consolidate_after: str = CONSOLIDATE_AFTER, budget: str = BUDGET
) -> list[dict[str, Any]]:
    """deploy/examples/ (of this tree, or of `root`) with the NodePool's consolidateAfter (10 s) and disruption
    budget (100 %) set."""
    documents = examples(root)
    for document in documents:
        if document.get("kind") == "NodePool":
            disruption = document["spec"]["disruption"]
            disruption["consolidateAfter"] = consolidate_after
            disruption["budgets"] = [{"nodes": budget}]
    return documents


# --- the verdict ---------------------------------------------------------------------------------------


def problems(row: dict[str, Any]) -> list[str]:
    """What makes the run fail: anything left, made twice, stuck, or pods that never all ran."""
    found = leaked(row)
    if row["vms_created_twice"]:
        found.append(f"VMs created twice: {', '.join(row['vms_created_twice'])}")
    if row["stuck_launching"] or row["stuck_deleting"]:
        found.append(f"NodeClaims stuck: {', '.join(row['stuck_launching'] + row['stuck_deleting'])}")
    if row["peak_pods_running"] < row["pods"]:
        found.append(f"only {row['peak_pods_running']} of {row['pods']} pods Running at the peak")
    return found


def print_table(row: dict[str, Any]) -> None:
    lines: list[tuple[str, Any]] = [(f"faults injected (N = {row['pods']}, seed {row['seed']})", "")]
    lines += [(f"  {kind}", count) for kind, count in row["faults"].items()]
    lines += [
        ("VMs left", row["vms_left"]),
        ("NICs left", row["nics_left"]),
        ("disks left", row["disks_left"]),
        ("Nodes left", row["nodes_left"]),
        ("NodeClaims left", row["nodeclaims_left"]),
        ("VMs created twice for one NodeClaim", len(row["vms_created_twice"])),
        ("pods Running at the peak", row["peak_pods_running"]),
        ("NodeClaims stuck past their timeouts", len(row["stuck_launching"]) + len(row["stuck_deleting"])),
        ("workflow failures", sum(row["workflow_failures"].values())),
        ("processes exited on their own", len(row["process_exits"])),
        ("worst fault -> whole again (s)", row["worst_recovery_seconds"]),
        ("faults over after (s)", row["faults_seconds"]),
        ("total (s)", row["total_seconds"]),
    ]
    for label, value in lines:
        print(f"{label:<40} {value!s:>8}".rstrip())
    if row["worst_recovery_fault"]:
        print(f"worst fault: {row['worst_recovery_fault']}")
    for exit in row["process_exits"]:
        print(f"exit: {exit}")
    for fault in row["not_injected"]:
        print(f"not injected: {fault}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Options()
    parser.add_argument("--pods", type=int, default=defaults.pods, help="N (default %(default)s)")
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="the faults' order, timing and targets"
    )
    parser.add_argument(
        "--rounds", type=int, help="how many times each kind of fault is injected (default: 1 per 100 pods)"
    )
    parser.add_argument("--gap", type=float, default=defaults.gap, help="mean seconds between two faults")
    parser.add_argument(
        "--outage", type=float, default=defaults.outage, help="seconds a killed process is down"
    )
    parser.add_argument(
        "--timeout", type=float, help="seconds to be whole again (default: 1800 or 2 s per pod, the longer)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds for the scale to zero (default: 600 or 1.5 s per pod, the longer)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the table")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's state and every log")
    args = parser.parse_args()
    timeout, drain_timeout = Options.scaled(args.pods)
    options = Options(
        pods=args.pods,
        seed=args.seed,
        rounds=args.rounds or max(1, args.pods // 100),
        gap=args.gap,
        outage=args.outage,
        timeout=args.timeout or timeout,
        drain_timeout=args.drain_timeout or drain_timeout,
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
