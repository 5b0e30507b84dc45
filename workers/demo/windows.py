"""The demo's Windows step: Windows nodes beside the Linux ones, from deploy/examples' `windows` NodePool and
AKSNodeClass (Windows Server 2022, tainted `os=windows:NoSchedule`).

`windows-web` (nodeSelector `kubernetes.io/os: windows`, tolerating the taint) is scaled up: a Windows NodeClaim of
NodePool `windows` launches a Windows VM (admin account from the cluster's Secret, computer name within 15
characters, bootstrap run by the CustomScriptExtension), whose node registers as Windows (`kubectl get nodes -o
wide` shows its OS image and kernel), while the Linux pods of the earlier steps stay on Linux nodes. Then a newer
Windows node image ships (the AKSNodeClass status, as the AKS image controller writes it): drift replaces the
Windows node with one on the new image. Last, `windows-web` is scaled to zero and consolidation deletes the empty
Windows node (the NodePool's `consolidateAfter` set to 0s first, as step 3 does for NodePool `default`).
"""

from __future__ import annotations

import json
from typing import Any

from core import labels
from workers.demo.disruption import status_images
from workers.demo.walkthrough import Walkthrough

WINDOWS_APP = "windows-web"
WINDOWS_REPLICAS = 2
WINDOWS_POOL = "windows"


async def windows_step(walk: Walkthrough, number: int) -> None:
    """Scale the Windows deployment, show its Windows node, then ship a newer Windows image and watch drift."""
    sim = walk.sim
    walk.say(
        f"{number}. Scale {WINDOWS_APP} to {WINDOWS_REPLICAS} (nodeSelector kubernetes.io/os=windows, tolerates "
        "os=windows:NoSchedule): a Windows Server 2022 node of NodePool windows joins"
    )
    await walk.kubectl("scale", "deployment", WINDOWS_APP, f"--replicas={WINDOWS_REPLICAS}")
    await walk.until(f"{WINDOWS_APP} running", lambda: walk.running(WINDOWS_APP, WINDOWS_REPLICAS))
    await walk.kubectl("get", "nodes", "-o", "wide", "-L", f"{labels.NODEPOOL},{labels.WINDOWS_BUILD}")
    await walk.kubectl("get", "pods", "-o", "wide", "-l", f"app={WINDOWS_APP}")
    windows_nodes = {
        node.metadata.name
        for node in await sim.list_nodes()
        if node.metadata.labels.get(labels.OS) == "windows"
    }
    placed = [pod for pod in await sim.list_pods() if pod.spec.node_name in windows_nodes]
    others = sorted(pod.metadata.name for pod in placed if pod.metadata.labels.get("app") != WINDOWS_APP)
    if others:
        raise RuntimeError(f"pods other than {WINDOWS_APP} on the Windows nodes: {', '.join(others)}")
    print(
        f"Windows nodes: {', '.join(sorted(windows_nodes))}; other pods on them: none "
        "(the taint keeps every Linux pod off)",
        file=walk.out,
        flush=True,
    )

    nodeclass = await sim.get_nodeclass(WINDOWS_POOL)
    if nodeclass is None:
        raise RuntimeError(f"AKSNodeClass {WINDOWS_POOL} not found: the examples were not applied")
    images = status_images(nodeclass)
    wanted = {image["id"] for image in images}
    print("Ship a newer Windows node image: drift replaces the Windows node", file=walk.out, flush=True)
    await _patch(walk, "aksnodeclass", {"status": {"images": images}}, "--subresource", "status")

    async def drifted() -> bool:
        claims = [claim for claim in await sim.list_nodeclaims() if claim.nodepool_name == WINDOWS_POOL]
        return (
            bool(claims)
            and all(claim.status.image_id in wanted for claim in claims)
            and await walk.running(WINDOWS_APP, WINDOWS_REPLICAS)
        )

    await walk.until("the Windows node on the new image", drifted)
    await walk.kubectl("get", "nodes", "-o", "wide", "-l", f"{labels.OS}=windows")

    print(
        f"Scale {WINDOWS_APP} to 0: consolidation deletes the empty Windows node", file=walk.out, flush=True
    )
    await _patch(walk, "nodepool", {"spec": {"disruption": {"consolidateAfter": "0s"}}})
    await walk.kubectl("scale", "deployment", WINDOWS_APP, "--replicas=0")

    async def emptied() -> bool:
        return not [claim for claim in await sim.list_nodeclaims() if claim.nodepool_name == WINDOWS_POOL]

    await walk.until("the empty Windows node deleted", emptied)
    await walk.kubectl("get", "nodes", "-l", f"{labels.OS}=windows")


async def _patch(walk: Walkthrough, kind: str, patch: dict[str, Any], *options: str) -> None:
    """`kubectl patch <kind> windows --type merge -p <patch>`, printed as it runs."""
    await walk.kubectl("patch", kind, WINDOWS_POOL, *options, "--type", "merge", "-p", json.dumps(patch))
