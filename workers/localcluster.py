"""`nodewright cluster`: a local Kubernetes control plane and the emulated Azure around it, left running for
`nodewright worker`, `nodewright controller` and kubectl, with the exports that point them at it."""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from workers.azure import emulator_environment
from workers.controlplane.build import cache_root
from workers.simulated_aks import local_aks


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    directory: Path | None = None
    cluster_name: str = "nodewright-demo"
    region: str = "eastus"
    arm_port: int = 0
    seed: int = 7


async def run_cluster(options: ClusterOptions, out: TextIO) -> None:
    """Start everything, print the exports, and run until cancelled (then stop everything)."""
    directory = options.directory or cache_root() / "cluster"
    async with local_aks(
        directory, options.cluster_name, options.region, options.seed, arm_port=options.arm_port
    ) as aks:
        plane = aks.plane
        exports = {
            "KUBECONFIG": str(plane.kubeconfig),
            "PATH": f"{plane.binaries.directory}:$PATH",
            **emulator_environment(aks.emulated.info),
        }
        lines = [
            f"export {name}={shlex.quote(value) if name != 'PATH' else value}"
            for name, value in exports.items()
        ]
        print(
            f"Kubernetes {plane.server} and the emulated Azure {aks.emulated.arm.url} are running.\n"
            "In another shell:\n  " + "\n  ".join(lines) + "\n"
            "  kubectl apply -f deploy/examples/\n"
            "  nodewright dev-server &  nodewright worker &  nodewright controller &\n"
            "Press Ctrl-C to stop.",
            file=out,
            flush=True,
        )
        await asyncio.Event().wait()
