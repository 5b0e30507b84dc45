"""Lifecycle benchmark: N pending pods that each need a node of their own, provisioned through the whole
system on a real Kubernetes control plane until every NodeClaim is Initialized and every pod Running, at
N = 200 and 1,000 (`--runs` adds 3,000). Prints figures; asserts nothing.

A run is the system as users run it, each part in a process of its own, with default settings (batching
idle 1 s, max 10 s; lifecycle poll 30 s; client rate limit 200 requests/s, burst 300) but the controller's
leader-election lease (60 s, renewed within 50 s: the default 8 s renew deadline was missed on a machine
loaded by other work, and the only controller exited):

- a control plane started by the benchmark in a temporary directory (`workers.controlplane`: etcd,
  kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which runs the pods bound to the nodes);
- the emulated Azure (`python -m simulator --instant`): the ARM emulator the worker's Azure provider creates
  NICs and VMs in through the real Azure SDK, and the node agent each VM runs to join the cluster by TLS
  bootstrap, with zero boot, registration and readiness delays;
- the Temporal dev server, in memory (`--temporal-db`: its state in a SQLite file, as the chart's embedded
  Temporal keeps it);
- one worker (`nodewright worker`; `--workers N` starts N, `--split` one `--role workflows` and one
  `--role activities`) and the controller (`nodewright controller`), all reaching the cluster
  through the control plane's kubeconfig (`NODEWRIGHT_KUBECONFIG`) and the emulated Azure through the
  `NODEWRIGHT_*` variables the emulator describes (`workers.azure.emulator_environment`).

This process only starts them, runs the trivial workflows, applies the manifests and watches the API server.
`deploy/examples/` is applied (without the NodePool's CPU limit, so N nodes fit), then a deployment of N
replicas with required hostname anti-affinity: kube-scheduler marks the pods Unschedulable, the controller
signals the provisioner, which plans, creates the NodeClaims and starts their lifecycle workflows.

- NodeClaims/s: NodeClaims Initialized ÷ (last one Initialized - first NodeClaim workflow start).
- trivial wf/s: on the same server just before, N workflows of three no-op activities started at once on a
  worker in this process with the lifecycle worker's options ÷ (last close - first start). The target ratio
  is at least 0.5.
- pending -> created: from the moment a pod is seen PodScheduled=False/Unschedulable (through a watch of the
  API server) to the moment the NodeClaim the provisioner nominated it for ("Nominated" events) is seen
  created; p50 and p99. Target p50 under 1.5 s.
- pending -> running: from the same moment to the pod seen Running; p50 and p99.
- per process: CPU seconds (utime + stime from /proc/<pid>/stat) while the trivial workflows ran and while
  the NodeClaims were provisioned, and peak memory (VmHWM from /proc/<pid>/status), read before they exit;
  and the machine's busy time that none of them used ("others": other work on a shared machine).
- a profile: the provisioner's batches, what one lifecycle's history holds, the API server's requests by
  verb and resource (from its /metrics), and bench pods deleted under the system (by the taint-eviction
  controller, say) with the node they ran on.
- workflow tasks that timed out, over every history of the run by workflow type and timeout (StartToClose: a
  worker held the task past its 10 s; ScheduleToStart: it waited on a worker's sticky queue past 10 s), and
  what each worker logged about slow workflow tasks: "Workflow task duration exceeded 5 seconds" ([TMPRL1104])
  and "Task not found when completing" (a completion the server no longer wanted: the task had timed out, and
  the workflow is replayed from its history).

`--peer karpenter` compares, at each N, three runs on the same pods, each on a fresh control plane started the
same way, in a process of its own: Karpenter's kwok controller (`sigs.k8s.io/karpenter/kwok`, built once from
the Go module proxy beside the other binaries), with Karpenter's own CRDs, a KWOKNodeClass, deploy/examples/'
NodePool pointed at it and the emulated Azure's instance types (the shipped catalog) as its instance-types
file; the floor, where this process creates one kwok Node (a Standard_D2s_v5's labels and size) the moment it
sees each pod pending, with no autoscaler; and nodewright as above. It prints one row per side: seconds from
the first pod pending to the last NodeClaim (the floor: Node) created and to the last pod Running, p50 and p99
of pending -> created and -> Running, and the CPU seconds per NodeClaim of the autoscaler's own processes
(Karpenter's; nodewright's worker, controller and Temporal); the emulated Azure and its node agents are the
simulation, counted as neither side's. Then nodewright's figures over Karpenter's and over the floor's.

Pods are `pinned` to one instance type by default (as the demo's `inflate` is); `--shape any` leaves the
choice to the scheduler. Each run happens in a fresh process (and a fresh control plane), so that each peak
is its own. A run that does not finish within its timeout (`--timeout`, 900 s) prints what it reached, and
the benchmark exits with 1. `--keep` keeps each run's directory: the control plane's state and every
process's log.

    python benchmarks/lifecycle.py                          # N = 200 and 1,000: tables and a profile
    python benchmarks/lifecycle.py --runs 200,1000,3000     # and 3,000 (make bench-lifecycle RUNS=...)
    python benchmarks/lifecycle.py --run 200 --shape any    # one run, JSON
    python benchmarks/lifecycle.py --run 50 --peer karpenter  # Karpenter, the floor, nodewright at N = 50
    python benchmarks/lifecycle.py --run 50 --side floor      # one run of the floor (or karpenter), JSON
    python benchmarks/lifecycle.py --runs 200 --workers 2     # two worker processes (make ... WORKERS=2)
    python benchmarks/lifecycle.py --runs 200 --split         # one workflows and one activities process (SPLIT=1)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.kubeclient.cluster import load_cluster
from benchmarks.apiserver import AUDIT_POLICY, audit_profile
from benchmarks.histories import (
    history_profile,
    provisioner_failure,
    provisioner_profile,
    workflow_task_timeouts,
)
from benchmarks.karpenter import fresh_control_plane
from benchmarks.lifecycle_measure import CONTROL_PLANE, OBSERVER_QPS, SIDES, measure, side_figures
from benchmarks.lifecycle_peer import run_without_nodewright
from benchmarks.lifecycle_report import print_comparison, print_profile, print_tables
from benchmarks.nodewright import emulated_azure, examples, running_nodewright, settings, worker_roles
from benchmarks.observed import Observed, latency_figures, nominations, since
from benchmarks.processes import cpu_of, cpu_since, figures_of, log_path, temporal_pid
from benchmarks.trivial import trivial_rate
from benchmarks.workload import SHAPES
from workers.controlplane.build import KARPENTER_VERSION, ensure_karpenter
from workers.controlplane.run import ControlPlane
from workers.temporal_server import DevServer
from workers.worker import connect

RUNS = [200, 1000]
TASK_QUEUE = "bench-lifecycle"
TIMEOUT_SECONDS = 900.0
WORKER_WARNINGS = {
    "slow workflow tasks": "[TMPRL1104]",
    "completions refused": "Task not found when completing",
    "activations failed": "Failed handling activation",
}
"""What a worker logs when a workflow task took more than 5 s, and when the server refused its completion
(the task had timed out), and when an activation failed (one that held its thread for 2 s, a "potential
deadlock", included), by the marker of the line."""
PEERS = ("karpenter",)


def worker_warnings(log: Path) -> dict[str, int]:
    """How often the worker logged each of WORKER_WARNINGS."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    return {what: sum(marker in line for line in lines) for what, marker in WORKER_WARNINGS.items()}


async def run_one(
    count: int,
    shape: str,
    timeout: float,
    keep: bool = False,
    audit: bool = False,
    side: str = SIDES[0],
    workers: dict[str, str] | None = None,
    vm_create_seconds: float = 0.0,
    boot_seconds: float = 0.0,
    temporal_db: bool = False,
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    async with fresh_control_plane(side, "bench-lifecycle-", keep, AUDIT_POLICY if audit else None) as (
        plane,
        directory,
        logs,
    ):
        if side == "nodewright":
            row = await _run_on(
                plane,
                directory,
                logs,
                count,
                shape,
                timeout,
                workers or worker_roles(1, False),
                vm_create_seconds,
                boot_seconds,
                temporal_db,
            )
        else:
            row = await run_without_nodewright(plane, directory, logs, count, shape, timeout, side)
        window = row.pop("window")
        if audit:
            row["audited_requests"] = audit_profile(plane.audit_log, *window)
        return row


async def _run_on(
    plane: ControlPlane,
    directory: Path,
    logs: Path,
    count: int,
    shape: str,
    timeout: float,
    workers: dict[str, str],
    vm_create_seconds: float = 0.0,
    boot_seconds: float = 0.0,
    temporal_db: bool = False,
) -> dict[str, Any]:
    kube = load_cluster(str(plane.kubeconfig), qps=OBSERVER_QPS, burst=int(2 * OBSERVER_QPS))
    async with (
        kube,
        DevServer(
            log_path=logs / "temporal.log", db_filename=directory / "temporal.db" if temporal_db else None
        ) as temporal,
        emulated_azure(
            plane, directory, logs, vm_create_seconds=vm_create_seconds, boot_seconds=boot_seconds
        ) as (
            azure,
            azure_environment,
        ),
    ):
        client = await connect(temporal.target)
        pids = {name: plane.processes[name].pid for name in CONTROL_PLANE}
        pids |= {"azure": azure.pid, "temporal": temporal_pid(), "bench": os.getpid()}

        before = cpu_of(pids)
        trivial_per_second = await trivial_rate(client, count)
        trivial_cpu = cpu_since(before, pids)

        await kube.apply(examples())
        nodepool = await kube.get_object("NodePool", "default")
        version = int((nodepool or {}).get("metadata", {}).get("resourceVersion") or 0)
        environment = {
            **settings(plane, temporal.target, TASK_QUEUE, azure_environment),
            # The disruption loop plans once at start, then idles: this measures provisioning alone.
            "NODEWRIGHT_DISRUPTION_POLL_SECONDS": "3600",
        }
        seen = Observed()

        async with contextlib.AsyncExitStack() as stack:
            ours: dict[str, subprocess.Popen[bytes]] = {"azure": azure}
            ours |= await stack.enter_async_context(
                running_nodewright(plane, logs, environment, workers, client, watched=ours)
            )
            pids |= {name: process.pid for name, process in ours.items()}
            phase = await measure(
                kube,
                plane,
                version,
                seen,
                pids,
                count,
                shape,
                timeout,
                ours,
                claims=count,
                stuck=functools.partial(provisioner_failure, client),
            )
            await asyncio.sleep(1)  # the last workflow tasks land in the histories
        warnings = {name: worker_warnings(log_path(logs, name)) for name in workers}

        first_pending = min(seen.pod_pending.values(), default=phase.started)
        starts = [e.start_time.timestamp() async for e in client.list_workflows('WorkflowType="NodeClaim"')]
        batches, provisioner = await provisioner_profile(client, first_pending)
        pods_of = await nominations(kube)
        per_lifecycle = await history_profile(client, "NodeClaim")
        per_trivial = await history_profile(client, "BenchTrivial")
        timeouts = await workflow_task_timeouts(client)

    initialized = len(seen.claim_initialized)
    first_start, last_initialized = (
        min(starts, default=None),
        max(seen.claim_initialized.values(), default=None),
    )
    claims_per_second = (
        initialized / (last_initialized - first_start) if first_start and last_initialized else 0.0
    )
    return {
        "side": "nodewright",
        **side_figures("nodewright", seen, first_pending, phase.cpu),
        "pods": count,
        "shape": shape,
        "finished": not phase.failure,
        "failure": phase.failure,
        **seen.reached(),
        "nominated_pods": sum(len(pods) for pods in pods_of.values()),
        "pods_deleted": len(seen.pods_deleted),
        "pods_disrupted": dict(Counter(seen.pods_disrupted.values())),
        "nodeclaims_deleted": len(seen.claims_deleted),
        "noexecute_taints": {key: len(nodes) for key, nodes in sorted(seen.node_taints.items())},
        "evictions": seen.evictions,
        "apiserver_requests": phase.requests,
        "nodeclaims_per_second": round(claims_per_second, 1),
        "trivial_workflows_per_second": round(trivial_per_second, 1),
        "ratio": round(claims_per_second / trivial_per_second, 2),
        **latency_figures(seen, pods_of, seen.claim_created),
        "first_pending_to_first_nodeclaim_start": since(first_pending, first_start),
        "first_pending_to_last_initialized": since(first_pending, last_initialized),
        "first_pending_to_last_running": since(first_pending, max(seen.pod_running.values(), default=None)),
        "peak_mb": phase.rss,
        "provisioner": provisioner,
        "batches": batches,
        "per_lifecycle": per_lifecycle,
        "per_trivial": per_trivial,
        "workers": workers,
        "vm_create_seconds": vm_create_seconds,
        "boot_seconds": boot_seconds,
        "workflow_task_timeouts": timeouts,
        "worker_warnings": warnings,
        "cpu_seconds_trivial": {name: round(value, 1) for name, value in trivial_cpu.items()},
        **phase.figures(),
    }


def run_in_process(count: int, args: argparse.Namespace, side: str = SIDES[0]) -> dict[str, Any] | None:
    """One run in a fresh process (so that each peak is its own): its figures, or None if it printed none."""
    return figures_of(
        [
            sys.executable,
            __file__,
            "--run",
            str(count),
            "--side",
            side,
            "--shape",
            args.shape,
            "--timeout",
            str(args.timeout),
            *(["--keep"] if args.keep else []),
            *(["--audit"] if args.audit else []),
            *(["--split"] if args.split else []),
            "--workers",
            str(args.workers),
            "--vm-create-seconds",
            str(args.vm_create_seconds),
            "--boot-seconds",
            str(args.boot_seconds),
            *(["--temporal-db"] if args.temporal_db else []),
        ],
        f"the {side} run of {count} pods",
    )


def compare(counts: list[int], args: argparse.Namespace) -> None:
    """`--peer karpenter`: for each N, Karpenter's run, the floor's and nodewright's, each on a fresh control
    plane in a process of its own; the comparison, then nodewright's tables and profile."""
    ensure_karpenter()  # built once (minutes) before any run's clock starts
    runs = [(count, side) for count in counts for side in (args.peer, "floor", "nodewright")]
    rows = run_each(runs, args, print_comparison)
    print_comparison(rows)
    print()
    finish([row for row in rows if row["side"] == "nodewright"], rows)


def run_each(
    runs: list[tuple[int, str]], args: argparse.Namespace, cut_short: Callable[[list[dict[str, Any]]], None]
) -> list[dict[str, Any]]:
    """Each run (pods, side) in a process of its own, in order, and their figures; when one prints none, the
    benchmark shows the figures before it with `cut_short` and exits with 1."""
    rows: list[dict[str, Any]] = []
    for count, side in runs:
        row = run_in_process(count, args, side)
        if row is None:
            if rows:
                cut_short(rows)
            sys.exit(1)
        rows.append(row)
    return rows


def finish(ours: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """nodewright's tables and profiles; the benchmark exits with 1 when a run of `rows` did not finish."""
    print_tables(ours)
    for row in ours:
        print_profile(row)
    if not all(row["finished"] for row in rows):
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=int, metavar="PODS", help="one run in this process, as JSON")
    parser.add_argument(
        "--runs",
        default=",".join(str(count) for count in RUNS),
        metavar="PODS,...",
        help="the runs to make and tabulate (default %(default)s; 200,1000,3000 adds the run of 3,000)",
    )
    parser.add_argument("--shape", choices=SHAPES, default=SHAPES[0], help="the pods' node constraints")
    parser.add_argument(
        "--timeout", type=float, default=TIMEOUT_SECONDS, help="seconds a run may take once the pods exist"
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="audit every request (costs the API server CPU) and profile them by who made them",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each run's directory (control plane state, every process's log)",
    )
    parser.add_argument(
        "--peer",
        choices=PEERS,
        help=f"compare with Karpenter v{KARPENTER_VERSION}'s kwok controller and with the floor (Nodes made by "
        "this process, no autoscaler), each on a fresh control plane, at N = --run or each of --runs",
    )
    parser.add_argument(
        "--side",
        choices=SIDES,
        default=SIDES[0],
        help="with --run (and no --peer): what provisions the nodes",
    )
    parser.add_argument(
        "--vm-create-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="nodewright: each VM's create takes S seconds in the emulated Azure, as Azure's take tens of "
        "seconds (default 0: as fast as the machine goes); not with --peer, whose kwok nodes take no time",
    )
    parser.add_argument(
        "--boot-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="nodewright: each node registers S seconds after its VM's create ended, as an AKS node's kubelet "
        "does (default 0); not with --peer",
    )
    parser.add_argument(
        "--temporal-db",
        action="store_true",
        help="nodewright: the Temporal dev server keeps its state in a SQLite file (WAL), as the chart's embedded "
        "Temporal does, instead of in memory",
    )
    workers = parser.add_mutually_exclusive_group()
    workers.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="nodewright: N worker processes, each with every role (default 1)",
    )
    workers.add_argument(
        "--split",
        action="store_true",
        help="nodewright: one worker process for workflows (--role workflows), one for activities",
    )
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.vm_create_seconds < 0:
        parser.error("--vm-create-seconds must not be negative")
    if args.vm_create_seconds and args.peer:
        parser.error("--vm-create-seconds is for nodewright's runs alone: the peer's kwok nodes take no time")
    if args.boot_seconds < 0:
        parser.error("--boot-seconds must not be negative")
    if args.boot_seconds and args.peer:
        parser.error("--boot-seconds is for nodewright's runs alone: the peer's kwok nodes take no time")
    if args.peer:
        compare([args.run] if args.run else [int(count) for count in args.runs.split(",")], args)
        return
    if args.run:
        one = asyncio.run(
            run_one(
                args.run,
                args.shape,
                args.timeout,
                args.keep,
                args.audit,
                args.side,
                worker_roles(args.workers, args.split),
                args.vm_create_seconds,
                args.boot_seconds,
                args.temporal_db,
            )
        )
        print(json.dumps(one))
        sys.exit(0 if one["finished"] else 1)
    rows = run_each([(int(count), SIDES[0]) for count in args.runs.split(",")], args, print_tables)
    finish(rows, rows)


if __name__ == "__main__":
    main()
