"""The demo's disruption steps: consolidation and emptiness after scale-downs, drift under a PDB after a node
image update, and a dry-run manual consolidation.

They run after the scale-up steps (inflate on two arm64 nodes, inflate-wide on one 16-vCPU spot node), with the
disruption loop started by the controller:

- consolidateAfter is set to 0s (as `kubectl patch` would); `inflate` scaled to 2: whichever node is left with
  the fewest pods has them fit on the other nodes, so consolidation deletes it;
- both deployments scaled to 0: emptiness deletes the empty nodes;
- `storefront` (three pods, one per `Standard_D4s_v5`, PDB minAvailable 2) is scaled up, the NodePool's budget set
  to one node, and the AKSNodeClass status given newer node images (as the AKS image controller does when
  a new image ships): drift replaces every node, one at a time, while the PDB keeps two storefront pods running;
- `nodewright consolidate --dry-run` prints what a manual consolidation would do now.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.messages import DisruptionInput, DisruptionMode, DisruptionSettings
from workers.consolidate import consolidate
from workers.demo.walkthrough import Walkthrough

WEB_REPLICAS = 3
WEB_MIN_AVAILABLE = 2
_VERSION = re.compile(r"/versions/(?P<version>[^/]+)$")


def newer_image(image_id: str) -> str:
    """The same gallery image one release later (`.../versions/202512.18.0` -> `.../versions/202512.19.0`)."""
    match = _VERSION.search(image_id)
    if match is None:
        return f"{image_id}-next"
    parts = match["version"].split(".")
    parts[-2] = str(int(parts[-2]) + 1) if parts[-2].isdigit() else parts[-2] + "1"
    return image_id[: match.start("version")] + ".".join(parts)


def status_images(nodeclass: AKSNodeClass) -> list[dict[str, Any]]:
    """AKSNodeClass `status.images` after a node image release: every image the status lists (each architecture
    and Hyper-V generation), one version later, with its requirements and in its order, as the AKS image
    controller rewrites them."""
    return [
        {"id": newer_image(image.id), **image.model_dump(by_alias=True, exclude={"id"}, exclude_none=True)}
        for image in nodeclass.status.images
    ]


async def _patch(walk: Walkthrough, kind: str, patch: dict[str, Any], *options: str) -> None:
    """`kubectl patch <kind> default --type merge -p <patch>`, printed as it runs."""
    await walk.kubectl("patch", kind, "default", *options, "--type", "merge", "-p", json.dumps(patch))


async def consolidation_steps(walk: Walkthrough) -> None:
    """Scale down and watch consolidation, then emptiness, remove the nodes the pods no longer need."""
    sim = walk.sim
    await _patch(walk, "nodepool", {"spec": {"disruption": {"consolidateAfter": "0s"}}})
    walk.say(
        "3. Scale inflate to 2: the pods left on one node fit on the others, so consolidation removes it"
    )
    before = len(await sim.list_nodeclaims())
    await walk.kubectl("scale", "deployment", "inflate", "--replicas=2")

    async def consolidated() -> bool:
        return (
            len(await sim.list_nodeclaims()) < before
            and await walk.running("inflate", 2)
            and await walk.running("inflate-wide", walk.options.wide_replicas)
        )

    await walk.until("a node consolidated away", consolidated)

    walk.say("4. Scale inflate and inflate-wide to 0: emptiness deletes the empty nodes")
    await walk.kubectl("scale", "deployment", "inflate", "inflate-wide", "--replicas=0")

    async def empty() -> bool:
        return not await sim.list_nodeclaims()

    await walk.until("every empty node deleted", empty)


async def drift_step(walk: Walkthrough) -> None:
    """Ship a newer node image and watch drift replace the nodes one at a time while a PDB holds."""
    sim = walk.sim
    walk.say(
        f"5. Scale storefront to {WEB_REPLICAS} (PDB minAvailable {WEB_MIN_AVAILABLE}), then ship a newer node "
        "image: drift replaces the nodes one at a time"
    )
    await _patch(walk, "nodepool", {"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})
    await walk.kubectl("scale", "deployment", "storefront", f"--replicas={WEB_REPLICAS}")
    await walk.until("storefront running", lambda: walk.running("storefront", WEB_REPLICAS))
    nodeclass = await sim.get_nodeclass("default")
    if nodeclass is None:
        raise RuntimeError("AKSNodeClass default not found: the examples were not applied")
    images = status_images(nodeclass)
    wanted = {image["id"] for image in images}
    await _patch(walk, "aksnodeclass", {"status": {"images": images}}, "--subresource", "status")
    fewest_available = WEB_REPLICAS

    async def drifted() -> bool:
        nonlocal fewest_available
        serving = [
            pod for pod in await walk.pods("storefront") if pod.status and pod.status.phase == "Running"
        ]
        fewest_available = min(fewest_available, len(serving))
        current = await sim.list_nodeclaims()
        return (
            bool(current)
            and all(claim.status.image_id in wanted for claim in current)
            and await walk.running("storefront", WEB_REPLICAS)
        )

    await walk.until("every node on the new image", drifted)
    print(
        f"Every node replaced; PDB storefront kept at least {fewest_available} of {WEB_REPLICAS} "
        "storefront pods running.",
        file=walk.out,
        flush=True,
    )


async def dry_run_step(walk: Walkthrough, client: Any, cluster: str, task_queue: str, number: int) -> None:
    """What `nodewright consolidate --dry-run` prints now: the plan, its savings, and why each node stays."""
    walk.say(f"{number}. A manual consolidation, dry run")
    print("$ nodewright consolidate --dry-run", file=walk.out, flush=True)
    request = DisruptionInput(
        cluster=cluster, mode=DisruptionMode.MANUAL, dry_run=True, settings=DisruptionSettings()
    )
    await consolidate(client, task_queue, request, False, "table", walk.out, lambda question: "n")


TEMPLATE_LABEL = ("team", "storefront")
"""The label the template-drift step adds to the NodePool template."""


async def template_drift_step(walk: Walkthrough, number: int) -> None:
    """Add a label to the NodePool template: its hash changes, so static drift replaces every node, one at a time
    within the budget, with one carrying the label."""
    sim = walk.sim
    key, value = TEMPLATE_LABEL
    walk.say(
        f"{number}. Add the label {key}={value} to the NodePool template: karpenter.sh/nodepool-hash changes, "
        "so drift replaces the nodes one at a time (budget 1 node)"
    )
    before = {
        claim.name: claim.metadata.annotations.get(labels.NODEPOOL_HASH)
        for claim in await sim.list_nodeclaims()
    }
    await _patch(walk, "nodepool", {"spec": {"template": {"metadata": {"labels": {key: value}}}}})
    most_leaving = 0

    async def relabelled() -> bool:
        nonlocal most_leaving
        current = await sim.list_nodeclaims()
        most_leaving = max(
            most_leaving, sum(claim.metadata.deletion_timestamp is not None for claim in current)
        )
        return (
            bool(current)
            and not before.keys() & {claim.name for claim in current}
            and all(claim.labels.get(key) == value for claim in current)
            and await walk.running("storefront", WEB_REPLICAS)
        )

    await walk.until(f"every node replaced by one labelled {key}={value}", relabelled)
    old_hashes = sorted({h for h in before.values() if h})
    pool = await sim.get_nodepool("default")
    new_hash = pool.metadata.annotations.get(labels.NODEPOOL_HASH) if pool else None
    print(
        f"{len(before)} node(s) replaced (NodePool hash {', '.join(old_hashes)} -> {new_hash}); at most "
        f"{most_leaving} NodeClaim(s) were being deleted at once.",
        file=walk.out,
        flush=True,
    )
    await walk.kubectl("get", "nodeclaims", "-L", key)
