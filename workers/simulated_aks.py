"""The simulated AKS that the demo, the tests and the benchmarks run nodewright against: a real Kubernetes control
plane (`workers.controlplane`) and the emulated Azure around it (`simulator.aks`: the ARM emulator the real Azure
SDKs talk to, and the node agent that every VM it boots runs to join the cluster by TLS bootstrap).

nodewright reaches it as it reaches AKS: the Kubernetes API through a kubeconfig and the official client
(`activities.kubeclient`), Azure through the real SDKs pointed at the emulator (`workers.azure.emulator_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from simulator.aks import AksSettings, EmulatedAks, serve_aks
from simulator.aks_client import AksEmulatorClient
from workers.azure import AzureConfig, emulator_config
from workers.controlplane.run import ControlPlane, start_control_plane


@dataclass
class SimulatedAks:
    plane: ControlPlane
    emulated: EmulatedAks
    kube: KubernetesCluster
    """The Kubernetes API as an admin (what the worker and the controller use here)."""
    emulator: AksEmulatorClient
    """The emulator's controls: faults, counters, custom data, node agent settings."""
    azure: AzureConfig
    """What a worker must be told to launch into the emulated Azure."""


@contextlib.asynccontextmanager
async def simulated_aks(
    plane: ControlPlane,
    settings: AksSettings | None = None,
    *,
    poll_interval: timedelta = timedelta(seconds=0.1),
    arm_port: int = 0,
    qps: float = 200.0,
    burst: int = 400,
) -> AsyncIterator[SimulatedAks]:
    """The emulated Azure of `settings` (instant boots unless they say otherwise) around a running control plane,
    for the duration of the block."""
    async with serve_aks(
        settings or AksSettings.instant(),
        api_server=plane.server.removeprefix("https://"),
        ca_file=plane.ca_file,
        bootstrap_token_secret=plane.bootstrap_token_secret,
        windows_admin_secret=plane.windows_admin.reference,
        addon_kubeconfig=plane.kubeconfig,
        port=arm_port,
    ) as emulated:
        kube = load_cluster(str(plane.kubeconfig), qps=qps, burst=burst)
        emulator = AksEmulatorClient(emulated.arm.url, emulated.arm.ca_pem)
        try:
            yield SimulatedAks(plane, emulated, kube, emulator, emulator_config(emulated.info, poll_interval))
        finally:
            await emulator.close()
            await kube.close()


@contextlib.asynccontextmanager
async def local_aks(
    directory: Path, cluster_name: str, region: str, seed: int, *, arm_port: int = 0
) -> AsyncIterator[SimulatedAks]:
    """A control plane of its own in `directory` (anything there is replaced) with the emulated Azure of the
    cluster around it, VMs booting with the emulator's default delays, stopped when the block ends
    (`nodewright demo` and `nodewright cluster`)."""
    settings = AksSettings(seed=seed, cluster_name=cluster_name)
    settings.arm.region = region
    # AKS names the node resource group after the region (MC_<group>_<cluster>_<region>).
    settings.arm.resource_group = f"MC_nodewright_nodewright_{region}"
    plane = await asyncio.to_thread(start_control_plane, directory)
    try:
        async with simulated_aks(plane, settings, arm_port=arm_port) as aks:
            yield aks
    finally:
        await asyncio.to_thread(plane.stop)
