"""The demo's NodeOverlay step: the same pod, before and after an overlay makes another instance-type family 90%
cheaper, lands on a different instance type; `nodewright explain` says which overlay set the price. The demo turns
the NodeOverlay gate on (its KubernetesCluster snapshots overlays).

The pod runs in a NodePool of its own, tainted so nothing else lands there, and the overlay selects only that pool,
so the rest of the demo's nodes keep their prices."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from core import labels
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from workers.demo.walkthrough import Walkthrough
from workers.explain import explain, render_text

OVERLAY_POOL = "overlay"
APP = "overlay-demo"
OVERLAY = "cheaper-family"
TAINT = "nodewright.io/demo"
WORKLOAD = f"""apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {OVERLAY_POOL}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.azure.com, kind: AKSNodeClass, name: default}}
      expireAfter: Never
      taints: [{{key: {TAINT}, value: overlay, effect: NoSchedule}}]
      requirements:
        - {{key: {labels.CAPACITY_TYPE}, operator: In, values: [on-demand]}}
        - {{key: {labels.ARCH}, operator: In, values: [amd64]}}
  disruption: {{consolidateAfter: Never}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {APP}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {APP}}}}}
  template:
    metadata: {{labels: {{app: {APP}}}}}
    spec:
      nodeSelector: {{{labels.NODEPOOL}: {OVERLAY_POOL}}}
      tolerations: [{{key: {TAINT}, operator: Exists}}]
      containers:
        - name: app
          image: mcr.microsoft.com/oss/kubernetes/pause:3.6
          resources: {{requests: {{cpu: 1500m}}}}
"""


def overlay_manifest(family: str) -> str:
    return f"""apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: {OVERLAY}
spec:
  priceAdjustment: "-90%"
  requirements:
    - {{key: {labels.SKU_FAMILY}, operator: In, values: ["{family}"]}}
    - {{key: {labels.NODEPOOL}, operator: In, values: [{OVERLAY_POOL}]}}
"""


async def overlay_step(walk: Walkthrough, number: int) -> None:
    walk.say(
        f"{number}. A NodeOverlay makes one instance-type family 90% cheaper: the same pod lands elsewhere"
    )
    await _apply(walk, WORKLOAD, "overlay-workload.yaml")
    await walk.until(f"{APP} running", lambda: walk.running(APP, 1))
    before = await _claim(walk)
    assert before is not None
    family = "E" if _family(before) != "E" else "F"
    print(f"before: {_describe(before)}", file=walk.out)

    print(overlay_manifest(family).rstrip(), file=walk.out)
    await _apply(walk, overlay_manifest(family), "overlay.yaml")
    # The pod moves only when it is scheduled again: delete its node's NodeClaim, and the provisioner plans anew.
    await walk.kubectl("delete", "nodeclaim", before.name, "--wait=false")

    async def moved() -> bool:
        claim = await _claim(walk)
        return claim is not None and claim.name != before.name and await walk.running(APP, 1)

    await walk.until(f"{APP} on a {family}-family node", moved)
    after = await _claim(walk)
    assert after is not None
    print(f"before: {_describe(before)}\nafter:  {_describe(after)}", file=walk.out)
    story = io.StringIO()
    render_text(await explain(walk.client, "nodeclaim", after.name), story)
    print(f"$ nodewright explain nodeclaim {after.name} | grep overlay", file=walk.out)
    for line in story.getvalue().splitlines():
        if "price adjusted by overlay" in line:
            print(line, file=walk.out)
    await walk.kubectl("get", "nodeoverlays")


async def _apply(walk: Walkthrough, text: str, filename: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / filename
        path.write_text(text)
        await walk.kubectl("apply", "-f", str(path))


async def _claim(walk: Walkthrough) -> NodeClaim | None:
    """The overlay pool's Initialized NodeClaim not being deleted."""
    claims = [
        claim
        for claim in await walk.sim.list_nodeclaims()
        if claim.labels.get(labels.NODEPOOL) == OVERLAY_POOL
        and claim.metadata.deletion_timestamp is None
        and claim.is_true(NodeClaimConditionType.INITIALIZED)
    ]
    return claims[0] if claims else None


def _family(claim: NodeClaim) -> str:
    """The family letter of the instance type's name (`Standard_E2as_v5` is E)."""
    size = claim.labels.get(labels.INSTANCE_TYPE, "").removeprefix("Standard_")
    return size[:1]


def _describe(claim: NodeClaim) -> str:
    return (
        f"NodeClaim {claim.name}: {claim.labels.get(labels.INSTANCE_TYPE)} "
        f"(family {_family(claim)}, {claim.labels.get(labels.ZONE)})"
    )
