"""`nodewright demo`: the whole system on a laptop, walking through what Karpenter users do.

It starts the Temporal dev server (with its UI), a real Kubernetes control plane (`workers.controlplane`: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built once from Kubernetes' Go modules), the
emulated Azure around it (the ARM emulator, which the worker's real Azure provider talks to over HTTPS, and the node
agent every VM runs to join the cluster), a worker and the controller (both through a kubeconfig and the official
Kubernetes client, as on AKS), applies `deploy/examples/` with the built kubectl (in another region than eastus,
`--region`, with the region's zones: `workers.demo.region`),
then: scales `inflate` (pinned by node selectors to an arm64 instance type, on-demand, one zone) and the
unconstrained `inflate-wide` up; scales them down and lets consolidation, then emptiness, remove nodes; ships a
newer node image so drift replaces the `storefront` nodes while its PDB holds; deletes one node, which its
NodeClaim's workflow drains and terminates; a dry-run manual consolidation; a static NodePool; a CapacityWindow
(nodewright's extension) that scales the static pool up ahead of a window and back after it; a NodeOverlay that
moves the same pod to a cheaper family; a bootstrap token rotation, after which a new node joins with the new
token; a repack of a node Karpenter's consolidation leaves alone; and a Windows deployment on a Windows node, which a
newer Windows image then drifts. Karpenter-style log
lines and real `kubectl get nodeclaims` output show progress; the Temporal UI keeps every workflow's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import sys
import sysconfig
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

from temporalio.client import Client

from activities.catalog_source import CatalogSource
from activities.metrics import default_metrics
from core.bootstrap_token_messages import ROTATION_PERIOD_SECONDS
from core.messages import (
    DisruptionInput,
    DisruptionSettings,
    GarbageCollectionInput,
    LifecycleSettings,
    ProvisionerInput,
)
from core.static_messages import StaticPoolInput
from workers.azure import cloud_provider, price_settings
from workers.controller import Controller, lifecycle_adoption
from workers.controller.capacity_windows import CapacityWindows
from workers.controller.static_pools import StaticPools
from workers.controlplane.build import cache_root, ensure_binaries
from workers.demo.bootstrap_token import token_rotation_step
from workers.demo.buffer import buffer_step
from workers.demo.disruption import (
    WEB_REPLICAS,
    consolidation_steps,
    drift_step,
    dry_run_step,
    template_drift_step,
)
from workers.demo.interruption import spot_eviction_step
from workers.demo.overlay import overlay_step
from workers.demo.region import pinned_zone, regional_examples
from workers.demo.repack import repack_step
from workers.demo.static import static_step
from workers.demo.walkthrough import TASK_QUEUE, DemoOptions, Walkthrough
from workers.demo.window import window_finish, window_start
from workers.demo.windows import windows_step
from workers.logs import setup_logging
from workers.metrics import metrics_summary, serve_metrics, set_build_info
from workers.processes import until_signalled
from workers.schedules import bootstrap_token_rotation, ensure_schedules, refresh_catalog_now
from workers.simulated_aks import SimulatedAks, local_aks
from workers.temporal_server import DevServer
from workers.worker import build_worker, connect


async def walk_through(self: Walkthrough) -> None:
    """The demo's steps, in order, against a running system."""
    options = self.options
    # The examples pin eastus zones: in another region, a copy with the region's.
    examples = regional_examples(options.examples, options.region, self.aks.plane.directory / "examples")
    self.say(f"Applying {examples}: NodePool default, AKSNodeClass default, DaemonSet, deployments at 0")
    await self.kubectl("apply", "-f", str(examples))
    # kubectl leaves status out; the AKSNodeClass's images are what the AKS image controller would resolve.
    for path in sorted(examples.glob("*.yaml")):
        await self.sim.apply(path.read_text())
    print(
        "(AKSNodeClass default status: node images and Kubernetes version, as the image controller writes them)",
        file=self.out,
    )

    self.say(
        f"1. Scale deployment inflate to {options.inflate_replicas} (arm64, Standard_D4ps_v5, on-demand, "
        f"{pinned_zone(examples)})"
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
    await spot_eviction_step(self, 7)
    await dry_run_step(self, self.client, options.cluster, TASK_QUEUE, 8)
    await template_drift_step(self, 9)
    await static_step(self, 10)
    await buffer_step(self, 11)
    opens = await window_start(self, 12)
    await overlay_step(self, 13)
    await window_finish(self, 14, opens)
    await token_rotation_step(self, 15)
    await repack_step(self, 16)
    await windows_step(self, 17)

    self.say("18. What a Karpenter user looks at: the NodePools, and one NodeClaim with its events")
    await self.kubectl("get", "nodepools")
    remaining = sorted(claim.name for claim in await self.sim.list_nodeclaims())
    if remaining:
        await self.kubectl("describe", "nodeclaim", remaining[0])


@contextlib.asynccontextmanager
async def system(options: DemoOptions, out: TextIO) -> AsyncIterator[tuple[DevServer, SimulatedAks]]:
    """Dev server, control plane, emulated Azure, worker and controller, all running until the block ends."""
    catalogs = CatalogSource.shipped(options.region)
    directory = options.directory or cache_root() / "demo"
    print(f"Starting a Kubernetes control plane in {directory}", file=out, flush=True)
    async with (
        local_aks(directory, options.cluster, options.region, options.seed) as aks,
        # Temporal's state on disk beside the control plane's (both fresh each run): a dev server that stops
        # and starts again within the run finds every workflow where it was.
        DevServer(ui=True, db_filename=directory / "temporal.db") as temporal,
    ):
        azure = aks.azure
        aks.kube.node_overlays = True  # the NodeOverlay gate, for the overlay step
        async with cloud_provider(aks.kube, azure, catalogs) as cloud:
            client = await connect(temporal.target)
            aks.kube.capacity_buffers = True
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
                # The demo turns the StaticCapacity gate on for its static NodePool step.
                # ... and the CapacityBuffer gate for its buffer step (the worker's plans read buffers too).
                capacity_buffers=True,
                static=StaticPools(
                    client,
                    aks.kube,
                    TASK_QUEUE,
                    True,
                    StaticPoolInput(
                        cluster=options.cluster, nodepool="", lifecycle=lifecycle, poll_seconds=5
                    ),
                ),
                windows=CapacityWindows(client, aks.kube, options.cluster, TASK_QUEUE, resync_seconds=1),
                adoption=lifecycle_adoption(client, aks.kube, TASK_QUEUE),
            )
            async with worker:
                await ensure_schedules(
                    client,
                    options.cluster,
                    TASK_QUEUE,
                    # The production interval: a run every 10 s filled the UI's workflow list with empty runs.
                    garbage_collection=GarbageCollectionInput(cluster=options.cluster, grace_seconds=30),
                    bootstrap_token_rotation=bootstrap_token_rotation(
                        options.cluster,
                        ROTATION_PERIOD_SECONDS,
                        lifecycle.registration_ttl_seconds,
                        lifecycle.launch_timeout_seconds,
                    ),
                )
                await refresh_catalog_now(client, options.cluster)
                task = asyncio.create_task(controller.run())
                try:
                    yield temporal, aks
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task


def explore_exports(kubeconfig: Path, kubectl_dir: Path, temporal: str, options: DemoOptions) -> list[str]:
    """The `export` lines that let another shell run the built `kubectl` and this installation's `nodewright`
    against the demo (the directory that holds `nodewright` is the Python environment's scripts directory)."""
    scripts = sysconfig.get_path("scripts")
    return [
        f"export KUBECONFIG={shlex.quote(str(kubeconfig))} "
        f"PATH={shlex.quote(str(kubectl_dir))}:{shlex.quote(scripts)}:$PATH",
        f"export NODEWRIGHT_TEMPORAL_ADDRESS={temporal} NODEWRIGHT_TASK_QUEUE={TASK_QUEUE} "
        f"NODEWRIGHT_CLUSTER_NAME={options.cluster}",
    ]


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
    metrics_server = serve_metrics(0, addr="127.0.0.1")
    set_build_info(default_metrics())
    try:
        result = await until_signalled(_walk_through(options, out, metrics_server.server_port))
        if result is None:
            print("Stopped: every process the demo started has ended.", file=out, flush=True)
            return 0 if options.keep_running else 130
        return result
    finally:
        metrics_server.shutdown()
        metrics_server.server_close()


async def _walk_through(options: DemoOptions, out: TextIO, metrics_port: int) -> int:
    # Building the binaries, or waiting for another process's build, is not part of the walkthrough's time.
    await asyncio.to_thread(ensure_binaries, None, lambda line: print(line, file=out, flush=True))
    started = time.monotonic()
    async with system(options, out) as (temporal, aks):
        print(f"Temporal UI: {temporal.ui_url}", file=out, flush=True)
        print(f"Metrics: http://127.0.0.1:{metrics_port}/metrics", file=out, flush=True)
        print(f"Kubernetes: export KUBECONFIG={aks.plane.kubeconfig}", file=out, flush=True)
        walkthrough = Walkthrough(aks, await connect(temporal.target), options, out)
        await walk_through(walkthrough)
        elapsed = time.monotonic() - started
        print(f"\nWalkthrough finished in {elapsed:.0f} s.", file=out)
        print(f"Metrics: {metrics_summary(default_metrics())}", file=out)
        print(f"Every NodeClaim's history is in the Temporal UI: {temporal.ui_url}", file=out)
        print(
            f'  search: NodeClaim="{walkthrough.victim}"   or   NodePool="default" AND Phase="Running"',
            file=out,
        )
        if walkthrough.interrupted:
            print(
                f'  the Spot eviction: NodeClaim="{walkthrough.interrupted}" AND DisruptionReason="Interrupted"',
                file=out,
            )
        if options.record_histories is not None:
            await asyncio.sleep(2)  # let the last activity results land in the histories
            written = await record_histories(await connect(temporal.target), options.record_histories)
            print(f"Recorded {len(written)} workflow histories in {options.record_histories}", file=out)
        if options.keep_running:
            exports = explore_exports(
                aks.plane.kubeconfig, aks.plane.binaries.directory, temporal.target, options
            )
            print(
                "Everything keeps running (--keep-running); in another shell, try:\n"
                + "".join(f"  {line}\n" for line in exports)
                + "  kubectl get nodeclaims -o wide; kubectl describe nodeclaim; kubectl get events\n"
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
