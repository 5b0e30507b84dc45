"""`nodewright demo`: the whole system on a laptop, walking through what Karpenter users do.

It starts the Temporal dev server (with its UI), a real Kubernetes control plane (`workers.controlplane`: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built once from Kubernetes' Go modules), the
emulated Azure around it (the ARM emulator, which the worker's real Azure provider talks to over HTTPS, and the node
agent every VM runs to join the cluster), a worker and the controller (both through a kubeconfig and the official
Kubernetes client, as on AKS), applies `deploy/examples/` with the built kubectl,
then: scales `inflate` (pinned by node selectors to an arm64 instance type, on-demand, one zone) and the
unconstrained `inflate-wide` up; scales them down and lets consolidation, then emptiness, remove nodes; ships a
newer node image so drift replaces the `storefront` nodes while its PDB holds; deletes one node, which its
NodeClaim's workflow drains and terminates; and ends with a dry-run manual consolidation. Karpenter-style log
lines and real `kubectl get nodeclaims` output show progress; the Temporal UI keeps every workflow's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TextIO

from temporalio.client import Client

from activities.catalog_source import CatalogSource
from activities.metrics import default_metrics
from core.api.kube import Pod
from core.api.nodeclaim import NodeClaim
from core.messages import (
    DisruptionInput,
    DisruptionSettings,
    GarbageCollectionInput,
    LifecycleSettings,
    ProvisionerInput,
)
from workers.azure import cloud_provider, price_settings
from workers.controller import Controller
from workers.controlplane.build import cache_root
from workers.demo_disruption import WEB_REPLICAS, consolidation_steps, drift_step, dry_run_step
from workers.logs import setup_logging
from workers.metrics import metrics_summary, serve_metrics, set_build_info
from workers.processes import until_signalled
from workers.schedules import ensure_schedules, refresh_catalog_now
from workers.simulated_aks import SimulatedAks, local_aks
from workers.temporal_server import DevServer
from workers.worker import build_worker, connect

EXAMPLES = Path(__file__).resolve().parent.parent / "deploy" / "examples"
TASK_QUEUE = "nodewright-demo"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    cluster: str = "nodewright-demo"
    region: str = "eastus"
    examples: Path = EXAMPLES
    keep_running: bool = False
    inflate_replicas: int = 4
    wide_replicas: int = 24
    step_timeout_seconds: float = 90.0
    seed: int = 7
    record_histories: Path | None = None
    """Write every workflow's history here as JSON after the walkthrough (for replay tests)."""
    directory: Path | None = None
    """Where the control plane keeps its state, logs and kubeconfig (default: under the cache directory)."""


def progress(claims: list[NodeClaim]) -> list[tuple[str, ...]]:
    """What `kubectl get nodeclaims` shows of each NodeClaim but its age: the table is printed when it changes."""
    rows = []
    for claim in sorted(claims, key=lambda c: c.name):
        ready = claim.status.condition("Ready")
        rows.append(
            (
                claim.name,
                claim.labels.get("node.kubernetes.io/instance-type", ""),
                claim.labels.get("karpenter.sh/capacity-type", ""),
                claim.labels.get("topology.kubernetes.io/zone", ""),
                claim.status.node_name or "",
                ready.status if ready is not None else "Unknown",
            )
        )
    return rows


class Walkthrough:
    """The demo's steps against a running system."""

    def __init__(self, aks: SimulatedAks, client: Client, options: DemoOptions, out: TextIO) -> None:
        self.aks = aks
        self.sim = aks.kube
        self.client = client
        self.options = options
        self.out = out
        self._last_table: list[tuple[str, ...]] = []

    def say(self, text: str) -> None:
        print(f"\n=== {text}", file=self.out, flush=True)

    async def kubectl(self, *args: str, show: bool = True) -> str:
        """Run the built kubectl against the control plane, printing the command and what it printed."""
        done = await asyncio.to_thread(self.aks.plane.kubectl, *args)
        if show:
            print(f"$ kubectl {shlex.join(args)}\n{done.stdout.rstrip()}", file=self.out, flush=True)
        return done.stdout

    async def show_table(self, force: bool = False) -> None:
        """`kubectl get nodeclaims` whenever the NodeClaims changed (ages aside)."""
        table = progress(await self.sim.list_nodeclaims())
        if force or table != self._last_table:
            self._last_table = table
            print(file=self.out)
            await self.kubectl("get", "nodeclaims")

    async def until(self, what: str, done: Callable[[], Awaitable[bool]]) -> None:
        """Wait for a condition, showing the table as it changes; fail after the step timeout."""
        deadline = time.monotonic() + self.options.step_timeout_seconds
        while not await done():
            if time.monotonic() > deadline:
                await self.show_table(force=True)
                raise TimeoutError(f"the demo step did not finish in time: {what}")
            await self.show_table()
            await asyncio.sleep(0.5)
        await self.show_table()

    async def pods(self, app: str) -> list[Pod]:
        return [pod for pod in await self.sim.list_pods() if pod.metadata.labels.get("app") == app]

    async def running(self, app: str, count: int) -> bool:
        pods = await self.pods(app)
        bound = [pod for pod in pods if pod.spec.node_name and pod.status and pod.status.phase == "Running"]
        return len(pods) == count and len(bound) == count

    async def run(self) -> None:
        options = self.options
        self.say(
            f"Applying {options.examples}: NodePool default, AKSNodeClass default, DaemonSet, deployments at 0"
        )
        await self.kubectl("apply", "-f", str(options.examples))
        # kubectl leaves status out; the AKSNodeClass's images are what the AKS image controller would resolve.
        for path in sorted(options.examples.glob("*.yaml")):
            await self.sim.apply(path.read_text())
        print(
            "(AKSNodeClass default status: node images and Kubernetes version, as the image controller writes them)",
            file=self.out,
        )

        self.say(
            f"1. Scale deployment inflate to {options.inflate_replicas} (arm64, Standard_D4ps_v5, on-demand, eastus-2)"
        )
        await self.kubectl("scale", "deployment", "inflate", f"--replicas={options.inflate_replicas}")
        await self.until("inflate running", lambda: self.running("inflate", options.inflate_replicas))

        self.say(f"2. Scale deployment inflate-wide to {options.wide_replicas} (no constraints)")
        await self.kubectl("scale", "deployment", "inflate-wide", f"--replicas={options.wide_replicas}")
        await self.until("inflate-wide running", lambda: self.running("inflate-wide", options.wide_replicas))
        await self.kubectl("get", "nodeclaims", "-o", "wide")
        await self.kubectl("get", "nodes", "-L", "karpenter.sh/nodepool,node.kubernetes.io/instance-type")

        await consolidation_steps(self)
        await drift_step(self)

        self.say("6. Delete one node (kubectl delete node): drained within the PDB, then replaced")
        claims = [claim for claim in await self.sim.list_nodeclaims() if claim.status.node_name]
        victim = sorted(claims, key=lambda c: c.name)[0]
        node = victim.status.node_name or ""
        await self.kubectl("delete", "node", node, "--wait=false")

        async def replaced() -> bool:
            names = {claim.name for claim in await self.sim.list_nodeclaims()}
            return victim.name not in names and await self.running("storefront", WEB_REPLICAS)

        await self.until(f"nodeclaim {victim.name} terminated and storefront running again", replaced)
        self.victim = victim.name
        await dry_run_step(self, self.client, options.cluster, TASK_QUEUE, 7)


@contextlib.asynccontextmanager
async def system(options: DemoOptions, out: TextIO) -> AsyncIterator[tuple[DevServer, SimulatedAks]]:
    """Dev server, control plane, emulated Azure, worker and controller, all running until the block ends."""
    catalogs = CatalogSource.shipped(options.region)
    directory = options.directory or cache_root() / "demo"
    print(f"Starting a Kubernetes control plane in {directory}", file=out, flush=True)
    async with (
        DevServer(ui=True) as temporal,
        local_aks(directory, options.cluster, options.region, options.seed) as aks,
    ):
        azure = aks.azure
        async with cloud_provider(aks.kube, azure, catalogs) as cloud:
            client = await connect(temporal.target)
            worker = build_worker(client, TASK_QUEUE, aks.kube, cloud, catalogs, price_settings(azure))
            lifecycle = LifecycleSettings(registration_ttl_seconds=120, poll_seconds=2, drain_retry_seconds=1)
            provisioner = ProvisionerInput(
                cluster=options.cluster, batch_idle_seconds=1, batch_max_seconds=10, lifecycle=lifecycle
            )
            disruption = DisruptionInput(
                cluster=options.cluster,
                settings=DisruptionSettings(poll_seconds=2, validation_seconds=3),
                lifecycle=lifecycle,
            )
            controller = Controller(
                client,
                aks.kube,
                provisioner,
                TASK_QUEUE,
                requeue_seconds=10,
                disruption=disruption,
                metrics=default_metrics(),
                metrics_seconds=2,
            )
            async with worker:
                await ensure_schedules(
                    client,
                    options.cluster,
                    TASK_QUEUE,
                    gc_every=timedelta(seconds=10),
                    garbage_collection=GarbageCollectionInput(cluster=options.cluster, grace_seconds=30),
                )
                await refresh_catalog_now(client, options.cluster)
                task = asyncio.create_task(controller.run())
                try:
                    yield temporal, aks
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task


async def record_histories(client: Client, directory: Path) -> list[Path]:
    """Every workflow's history as `<workflow type>-<id>.json`, as the replay tests read them."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        name = re.sub(
            r"[^A-Za-z0-9_.-]+", "-", f"{execution.workflow_type}-{execution.id}-{execution.run_id[:8]}"
        )
        path = directory / f"{name}.json"
        path.write_text(history.to_json())
        written.append(path)
    return sorted(written)


async def run_demo(options: DemoOptions, out: TextIO = sys.stdout) -> int:
    setup_logging(out, karpenter_only=True)
    started = time.monotonic()
    metrics_server = serve_metrics(0, addr="127.0.0.1")
    set_build_info(default_metrics())
    try:
        result = await until_signalled(_walk_through(options, out, started, metrics_server.server_port))
        if result is None:
            print("Stopped: every process the demo started has ended.", file=out, flush=True)
            return 0 if options.keep_running else 130
        return result
    finally:
        metrics_server.shutdown()
        metrics_server.server_close()


async def _walk_through(options: DemoOptions, out: TextIO, started: float, metrics_port: int) -> int:
    async with system(options, out) as (temporal, aks):
        print(f"Temporal UI: {temporal.ui_url}", file=out, flush=True)
        print(f"Metrics: http://127.0.0.1:{metrics_port}/metrics", file=out, flush=True)
        print(f"Kubernetes: export KUBECONFIG={aks.plane.kubeconfig}", file=out, flush=True)
        walkthrough = Walkthrough(aks, await connect(temporal.target), options, out)
        await walkthrough.run()
        elapsed = time.monotonic() - started
        print(f"\nWalkthrough finished in {elapsed:.0f} s.", file=out)
        print(f"Metrics: {metrics_summary(default_metrics())}", file=out)
        print(f"Every NodeClaim's history is in the Temporal UI: {temporal.ui_url}", file=out)
        print(
            f'  search: NodeClaim="{walkthrough.victim}"   or   NodePool="default" AND Phase="Running"',
            file=out,
        )
        if options.record_histories is not None:
            await asyncio.sleep(2)  # let the last activity results land in the histories
            written = await record_histories(await connect(temporal.target), options.record_histories)
            print(f"Recorded {len(written)} workflow histories in {options.record_histories}", file=out)
        if options.keep_running:
            print(
                "Everything keeps running (--keep-running); in another shell, try:\n"
                f"  export KUBECONFIG={aks.plane.kubeconfig} PATH={aks.plane.binaries.directory}:$PATH\n"
                f"  export NODEWRIGHT_TEMPORAL_ADDRESS={temporal.target} NODEWRIGHT_TASK_QUEUE={TASK_QUEUE} "
                f"NODEWRIGHT_CLUSTER_NAME={options.cluster}\n"
                "  kubectl get nodeclaims -o wide; kubectl describe nodeclaim; kubectl get events\n"
                f"  nodewright explain nodeclaim {walkthrough.victim}\n"
                "  nodewright consolidate --dry-run\n"
                "Press Ctrl-C to stop.",
                file=out,
                flush=True,
            )
            await asyncio.Event().wait()
        else:
            print(
                "To explain a node or consolidate by hand, run `nodewright demo --keep-running`.",
                file=out,
            )
    return 0
