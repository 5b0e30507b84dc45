"""The demo's CapacityBuffer step (the CapacityBuffer gate is on in the demo): two deployments of the same pods, one
with a CapacityBuffer of two chunks kept ready, are scaled up together; the buffered one's pods go from pending to
Running in pod-start time on the buffer's nodes, the other's in node-start time; then the buffer is provisioned
again. A buffer's room is capacity like any other (any pod that fits may take it), so the two deployments ask for
different VM sizes of the same shape: the unbuffered one cannot take the buffer's room."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from core import labels
from core.api.nodeclaim import NodeClaimConditionType
from workers.demo.walkthrough import Walkthrough

CHUNKS = 2
INSTANCE_TYPE = "Standard_D4as_v5"
"""Checkout's size: one no earlier step uses, and a pod of 3 CPUs fills one (each pod needs a node of its own)."""
OTHER_INSTANCE_TYPE = "Standard_D4ads_v5"
"""Reports' size: the same 4 vCPUs, another VM size."""


def _deployment(name: str, instance_type: str) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{{labels.INSTANCE_TYPE}: {instance_type}, {labels.CAPACITY_TYPE}: on-demand}}
      containers:
        - name: app
          image: mcr.microsoft.com/oss/kubernetes/pause:3.6
          resources: {{requests: {{cpu: "3"}}}}
"""


CONDITIONS = '{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}'
"""The buffer's conditions, one a line (`kubectl get` shows the first of each list only)."""
BUFFER = f"""apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: checkout-buffer, namespace: default}}
spec:
  scalableRef: {{apiGroup: apps, kind: Deployment, name: checkout}}
  replicas: {CHUNKS}
"""


async def buffer_step(walk: Walkthrough, number: int) -> None:
    """Keep room for `checkout` with a CapacityBuffer, scale `checkout` and `reports` together, compare."""
    walk.say(
        f"{number}. A CapacityBuffer keeps room for {CHUNKS} pods of deployment checkout; checkout and reports "
        f"(the same pods, no buffer) are then scaled to {CHUNKS} together"
    )
    manifests = "---\n".join(
        [_deployment("checkout", INSTANCE_TYPE), _deployment("reports", OTHER_INSTANCE_TYPE), BUFFER]
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "capacity-buffer.yaml"
        path.write_text(manifests)
        print(BUFFER.rstrip(), file=walk.out)
        await walk.kubectl("apply", "-f", str(path))
    await walk.until(f"{CHUNKS} nodes for the buffer", lambda: _initialized(walk, CHUNKS))
    await walk.kubectl("get", "capacitybuffers")

    started = time.monotonic()
    await walk.kubectl("scale", "deployment/checkout", "deployment/reports", f"--replicas={CHUNKS}")
    took: dict[str, float] = {}

    async def both_running() -> bool:
        for app in ("checkout", "reports"):
            if app not in took and await walk.running(app, CHUNKS):
                took[app] = time.monotonic() - started
        return len(took) == 2

    await walk.until("checkout and reports running", both_running)
    walk.say(
        f"pending -> Running: checkout (buffered) {took['checkout']:.1f} s, on the buffer's nodes; "
        f"reports (no buffer) {took['reports']:.1f} s, on nodes launched for it"
    )
    # The buffer's room is taken: the next provisioning pass launches it again.
    await walk.until("the buffer provisioned again", lambda: _initialized(walk, 2 * CHUNKS))
    await walk.kubectl("get", "capacitybuffers")
    await walk.kubectl("get", "capacitybuffer", "checkout-buffer", "-o", f"jsonpath={CONDITIONS}")


async def _initialized(walk: Walkthrough, count: int) -> bool:
    claims = [
        claim
        for claim in await walk.sim.list_nodeclaims()
        if claim.labels.get(labels.INSTANCE_TYPE) == INSTANCE_TYPE
        and claim.metadata.deletion_timestamp is None
    ]
    return len(claims) == count and all(claim.is_true(NodeClaimConditionType.INITIALIZED) for claim in claims)
