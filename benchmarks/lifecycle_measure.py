"""The measured phase of a lifecycle run, whichever side provisions (nodewright, Karpenter's kwok controller or the
floor): the bench deployment created, waited for, and what it cost each process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from activities.kubeclient.cluster import KubernetesCluster
from benchmarks.apiserver import apiserver_requests, request_profile
from benchmarks.nodewright import WORKER, is_worker
from benchmarks.observed import Observed, observe, progress, since
from benchmarks.processes import cpu_of, cpu_since, first_exit, peak_rss_mb
from benchmarks.workload import bench_deployment
from workers.controlplane.run import ControlPlane

PROGRESS_SECONDS = 5.0
STUCK_SECONDS = 30.0
CATCH_UP_SECONDS = 1.0
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PROCESSES = (*CONTROL_PLANE, "azure", "temporal", WORKER, "controller", "bench")
"""Every process measured, in the order they are printed (`worker` stands for each worker process); `bench` is
this one (the trivial workflows' worker and the watch that times what happens)."""
OBSERVER_QPS = 200.0
SIDES = ("nodewright", "karpenter", "floor")
"""What provisions the nodes of a run: nodewright; Karpenter's kwok controller (`--peer karpenter`); or this
process, which creates a Node the moment it sees a pod pending (the floor)."""
AUTOSCALER = {"nodewright": (WORKER, "controller", "temporal"), "karpenter": ("karpenter",), "floor": ()}
"""Each side's own processes, whose CPU counts as the autoscaler's (`worker`: every worker process)."""
SIMULATION = ("azure",)
"""The emulated Azure and the node agents it runs: our simulation, counted as neither side's."""


def process_of(name: str) -> str:
    """The entry of PROCESSES a measured process is printed under."""
    return WORKER if is_worker(name) else name


def side_figures(side: str, seen: Observed, first_pending: float, cpu: dict[str, float]) -> dict[str, Any]:
    """What the comparison table shows of a run beyond the latencies: when the last NodeClaim (the floor: the
    last Node) was seen created, and the CPU seconds of the side's own processes and of the simulation."""
    created = seen.nodes if side == "floor" else seen.claim_created
    autoscaler = float(sum(value for name, value in cpu.items() if process_of(name) in AUTOSCALER[side]))
    return {
        "first_pending_to_last_created": since(first_pending, max(created.values(), default=None)),
        "autoscaler_cpu_seconds": round(autoscaler, 1),
        "autoscaler_cpu_seconds_per_nodeclaim": round(autoscaler / len(created), 3) if created else None,
        "simulation_cpu_seconds": round(sum(cpu.get(name, 0.0) for name in SIMULATION), 1),
        # The machine is the limit: with every core busy, the side whose run costs the control plane less
        # CPU (fewer writes, pods pending for less time in kube-scheduler's queue) finishes sooner.
        "control_plane_cpu_seconds": round(sum(cpu.get(name, 0.0) for name in CONTROL_PLANE), 1),
    }


async def wait_until(
    seen: Observed,
    count: int,
    timeout: float,
    processes: dict[str, subprocess.Popen[bytes]],
    plane: ControlPlane,
    *,
    claims: int,
    label: str = "",
    stuck: Callable[[], Awaitable[str]] | None = None,
) -> str:
    """Until `claims` NodeClaims are Initialized and `count` pods Running, with progress on stderr (each line
    after `label`). Returns "" when done, else why not: the timeout, a process that exited, or (when `stuck`
    says why, once no NodeClaim was created after `STUCK_SECONDS`) the provisioner stuck on a failing activity."""
    started = last_report = time.time()
    while len(seen.claim_initialized) < claims or seen.running < count:
        await asyncio.sleep(0.25)
        now = time.time()
        if exited := first_exit({**processes, **plane.processes}):
            return exited
        if now - started > timeout:
            return f"not done within {timeout:g} s: {progress(seen)}"
        if now - last_report < PROGRESS_SECONDS:
            continue
        last_report = now
        print(f"{label}{now - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
        waiting = not seen.claim_created and now - started > STUCK_SECONDS
        if stuck is not None and waiting and (failure := await stuck()):
            return f"the provisioner is stuck: {failure}"
    return ""


@dataclass
class Measured:
    """The measured phase of a run: from the bench deployment's creation until done (or not)."""

    started: float
    elapsed: float
    failure: str
    """Why the run did not finish ("" when it did)."""
    cpu: dict[str, float]
    """CPU seconds of each process in the phase (`processes.cpu_since`)."""
    rss: dict[str, float]
    """Each process's peak memory, MB."""
    requests: list[dict[str, Any]]
    """The API server's requests in the phase (`apiserver.request_profile`)."""

    def figures(self) -> dict[str, Any]:
        """What every side's figures end with."""
        return {
            "cpu_seconds_lifecycle": {name: round(value, 1) for name, value in self.cpu.items()},
            "lifecycle_seconds": round(self.elapsed, 1),
            "window": (self.started, self.started + self.elapsed),
            "cores": os.cpu_count(),
        }


async def measure(
    kube: KubernetesCluster,
    plane: ControlPlane,
    since: int,
    seen: Observed,
    pids: dict[str, int],
    count: int,
    shape: str,
    timeout: float,
    processes: dict[str, subprocess.Popen[bytes]],
    *,
    claims: int,
    label: str = "",
    stuck: Callable[[], Awaitable[str]] | None = None,
    alongside: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> Measured:
    """Watch the cluster from `since` into `seen`, create the bench deployment of `count` pods and wait until
    they are done (`wait_until`: `claims`, `label`, `stuck`), with `alongside` (the floor's Node maker) running
    meanwhile; what the phase cost (`pids`: the processes measured)."""
    async with asyncio.TaskGroup() as group:
        watcher = group.create_task(observe(kube, since, seen))
        await asyncio.sleep(CATCH_UP_SECONDS)  # every watch of this process open, and the autoscaler's
        requests_before = await asyncio.to_thread(apiserver_requests, plane)
        before = cpu_of(pids)
        started = time.time()
        await kube.apply([bench_deployment(count, shape)])
        helper = group.create_task(alongside()) if alongside is not None else None
        failure = await wait_until(
            seen, count, timeout, processes, plane, claims=claims, label=label, stuck=stuck
        )
        cpu = cpu_since(before, pids)
        elapsed = time.time() - started
        rss = {name: peak_rss_mb(pid) for name, pid in pids.items()}
        requests = request_profile(requests_before, await asyncio.to_thread(apiserver_requests, plane))
        print(f"{label}{time.time() - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
        watcher.cancel()
        if helper is not None:
            helper.cancel()
    return Measured(started, elapsed, failure, cpu, rss, requests)
