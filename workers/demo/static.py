"""The demo's static NodePool step: a NodePool with `replicas: 2` (the StaticCapacity gate is on in the demo) reaches
two nodes with no pod asking for them, then is scaled to 3 and holds three."""

from __future__ import annotations

import tempfile
from pathlib import Path

from core import labels
from core.api.nodeclaim import NodeClaimConditionType
from workers.demo.walkthrough import Walkthrough

STATIC_POOL = "static"
STATIC_NODEPOOL = f"""apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {STATIC_POOL}
spec:
  replicas: 2
  limits:
    nodes: 4
  template:
    spec:
      nodeClassRef: {{group: karpenter.azure.com, kind: AKSNodeClass, name: default}}
      expireAfter: Never
      requirements:
        - {{key: {labels.INSTANCE_TYPE}, operator: In, values: [Standard_D2s_v5]}}
        - {{key: {labels.CAPACITY_TYPE}, operator: In, values: [on-demand]}}
"""


async def static_step(walk: Walkthrough, number: int) -> None:
    """Apply a static NodePool of 2, wait for its two nodes, scale it to 3, wait for the third."""
    walk.say(
        f"{number}. A static NodePool (spec.replicas: 2) gets 2 nodes with no pending pod; scaled to 3, it holds 3"
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "static-nodepool.yaml"
        path.write_text(STATIC_NODEPOOL)
        print(STATIC_NODEPOOL.rstrip(), file=walk.out)
        await walk.kubectl("apply", "-f", str(path))
    await walk.until("2 static nodes", lambda: static_ready(walk, 2))
    await walk.kubectl("scale", "nodepool", STATIC_POOL, "--replicas=3")
    await walk.until("3 static nodes", lambda: static_ready(walk, 3))
    await walk.kubectl("get", "nodes", "-l", f"{labels.NODEPOOL}={STATIC_POOL}", "-L", labels.INSTANCE_TYPE)


async def static_ready(walk: Walkthrough, count: int) -> bool:
    """Whether the static pool has exactly `count` NodeClaims (not being deleted), all Initialized."""
    claims = [
        claim
        for claim in await walk.sim.list_nodeclaims()
        if claim.labels.get(labels.NODEPOOL) == STATIC_POOL and claim.metadata.deletion_timestamp is None
    ]
    return len(claims) == count and all(claim.is_true(NodeClaimConditionType.INITIALIZED) for claim in claims)
