"""Karpenter's kwok controller as the benchmarks' peer: Karpenter v1.14.1 (`sigs.k8s.io/karpenter/kwok`, built
once from the Go module proxy beside the control plane's binaries) run outside the cluster on a control plane of
its own, with Karpenter's own CRDs, a KWOKNodeClass, a NodePool translated from nodewright's, and the emulated
Azure's instance types as its instance-types file, so that both sides choose among the same sizes, zones, prices
and allocatable resources. Shared by the lifecycle and consolidation benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from activities.kubeclient.cluster import KubernetesCluster
from benchmarks.processes import child_process, until
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.resources import CPU, MEMORY, Resources, merge
from workers.controlplane.build import ensure_karpenter
from workers.controlplane.run import DEFAULT_CRDS, ControlPlane, start_control_plane
from workers.temporal_server import free_port

REGION = "eastus"
"""The region of the emulated Azure, whose shipped catalog Karpenter's kwok provider gets as its instance types."""
KWOK_KUBE_RESERVED: Resources = {CPU: 100, MEMORY: 10 * 2**20}
"""What Karpenter's kwok provider holds back of every instance type's resources (its fixed kube-reserved, 100m
CPU and 10Mi): its Nodes' allocatable is the instance-types file's resources less this."""
KWOK_NODECLASS = {
    "apiVersion": "karpenter.kwok.sh/v1alpha1",
    "kind": "KWOKNodeClass",
    "metadata": {"name": "default"},
}


def karpenter_crds(directory: Path) -> Path:
    """Karpenter's own CRDs (NodePool, NodeClaim, NodeOverlay, CapacityBuffer, KWOKNodeClass), built once beside
    the other binaries, and the AKSNodeClass CRD only because a benchmark's watch lists that kind too."""
    crds = directory / "karpenter-crds"
    crds.mkdir()
    for source in [
        *sorted(ensure_karpenter().crds.glob("*.yaml")),
        DEFAULT_CRDS / "karpenter.azure.com_aksnodeclasses.yaml",
    ]:
        shutil.copyfile(source, crds / source.name)
    return crds


@contextlib.asynccontextmanager
async def fresh_control_plane(
    side: str, prefix: str, keep: bool, audit_policy: Mapping[str, object] | None = None
) -> AsyncIterator[tuple[ControlPlane, Path, Path]]:
    """A run's own control plane, in a new temporary directory (removed after, unless `keep`), with Karpenter's
    CRDs on Karpenter's side and nodewright's on the others; yields it, the directory and its `logs/` for the
    run's other processes."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    if keep:
        print(f"state and logs: {directory}", file=sys.stderr, flush=True)
    logs = directory / "logs"
    logs.mkdir()
    try:
        crds = karpenter_crds(directory) if side == "karpenter" else DEFAULT_CRDS
        plane = await asyncio.to_thread(
            functools.partial(start_control_plane, crds=crds, audit_policy=audit_policy),
            directory / "control-plane",
        )
        try:
            yield plane, directory, logs
        finally:
            await asyncio.to_thread(plane.stop)
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


def _quantity(name: str, amount: int) -> str:
    return f"{amount}m" if name == CPU else str(amount)


def karpenter_instance_types(region: str = REGION) -> list[dict[str, Any]]:
    """The emulated Azure's instance types (the region's shipped catalog, as nodewright's scheduler sees them) in
    the format of Karpenter's kwok provider (its `INSTANCE_TYPES_FILE_PATH`), so both sides choose among the same
    sizes, zones and prices. Each type's resources are nodewright's allocatable plus what the kwok provider
    holds back, so that Karpenter's Nodes have the allocatable an AKS node of that size has (AKS reserves far
    more than the kwok provider's 100m and 10Mi): both sides fit the same pods on a node."""
    types = []
    for instance_type in azure_instance_types(load_shipped_catalog(region)):
        arch = sorted(instance_type.requirements.get("kubernetes.io/arch").values)
        systems = sorted(instance_type.requirements.get("kubernetes.io/os").values) or ["linux"]
        types.append(
            {
                "name": instance_type.name,
                "architecture": arch[0] if arch else "amd64",
                "operatingSystems": systems,
                "resources": {
                    name: _quantity(name, amount)
                    for name, amount in merge(instance_type.allocatable(), KWOK_KUBE_RESERVED).items()
                },
                "offerings": [
                    {
                        "Price": offering.price_micros / 1e6,
                        "Available": offering.available,
                        "Requirements": [
                            {
                                "key": "karpenter.sh/capacity-type",
                                "operator": "In",
                                "values": [offering.capacity_type],
                            },
                            {
                                "key": "topology.kubernetes.io/zone",
                                "operator": "In",
                                "values": [offering.zone],
                            },
                        ],
                    }
                    for offering in instance_type.offerings
                ],
            }
        )
    return types


def karpenter_nodepool(nodepool: dict[str, Any]) -> dict[str, Any]:
    """nodewright's NodePool for Karpenter's kwok provider: pointed at the KWOKNodeClass, its AKS-only
    requirements left out (the kwok provider's instance types carry no `karpenter.azure.com/` labels)."""
    translated = copy.deepcopy(nodepool)
    template = translated["spec"]["template"]["spec"]
    template["nodeClassRef"] = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    template["requirements"] = [
        requirement
        for requirement in template.get("requirements", [])
        if not requirement["key"].startswith("karpenter.azure.com/")
    ]
    return translated


def karpenter_environment(plane: ControlPlane, instance_types: Path) -> dict[str, str]:
    """Karpenter run outside the cluster, as the issue's author ran it, on ports of its own."""
    return {
        "KUBECONFIG": str(plane.kubeconfig),
        "SYSTEM_NAMESPACE": "kube-system",
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(free_port()),
        "HEALTH_PROBE_PORT": str(free_port()),
        "KARPENTER_SERVICE": "karpenter",
        "KUBERNETES_MIN_VERSION": "1.19.0-0",
        "INSTANCE_TYPES_FILE_PATH": str(instance_types),
    }


async def nodepool_ready(kube: KubernetesCluster, name: str = "default") -> bool:
    nodepool = await kube.get_object("NodePool", name) or {}
    conditions = (nodepool.get("status") or {}).get("conditions") or []
    return any(item.get("type") == "Ready" and item.get("status") == "True" for item in conditions)


@contextlib.asynccontextmanager
async def running_karpenter(
    plane: ControlPlane, directory: Path, logs: Path, kube: KubernetesCluster
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """Karpenter's kwok controller for the block, with the region's instance types (written to `directory`) and
    its log in `logs`; yields its process once it has marked the NodePool `default` (applied before) Ready."""
    instance_types = directory / "instance-types.json"
    instance_types.write_text(json.dumps(karpenter_instance_types()))
    binary = str(ensure_karpenter().binary)
    environment = karpenter_environment(plane, instance_types)
    async with child_process([binary], logs / "karpenter.log", environment) as karpenter:
        await until(
            "Karpenter did not mark the NodePool Ready",
            lambda: nodepool_ready(kube),
            {"karpenter": karpenter},
            logs,
        )
        yield karpenter
