"""What the demo's steps share: its options, and a `Walkthrough` that runs the built kubectl, waits for a state
while printing `kubectl get nodeclaims` as it changes, and reads pods. The steps themselves are in `workers.demo`
(scale-ups, node deletion) and `workers.demo.disruption` (consolidation, emptiness, drift, a dry run)."""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from temporalio.client import Client

from core.api.kube import Pod
from core.api.nodeclaim import NodeClaim
from workers.simulated_aks import SimulatedAks

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
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
        self.victim = ""
        """The NodeClaim whose node the demo deleted (its history is the one to open)."""
        self.interrupted = ""
        """The NodeClaim whose Spot VM the demo had Azure evict."""

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
