"""The demo's repack step: two nodes whose pods Karpenter's consolidation leaves where they are, although two
other nodes hold them for less; the repack finds them, states the plan's cost and lower bound, and carries it
out as a manual consolidation (`nodewright consolidate`), whose commands are validated, launched and drained as
any disruption command; `nodewright explain` then says where the retired node's pods went and why.

Six pods (a memory-heavy one, CPU-heavy and balanced ones) arrive in two groups, in a NodePool of their own that
first allows only Standard_D4s_v5, so they land on two D4s_v5 as `benchmarks/repack.py`'s TWO_NODES lays them
out. The pool then allows the Fsv2, Dsv5 and Esv5 families (2 to 16 vCPUs): neither node alone, nor both
together, fits one cheaper node, so Karpenter's methods find nothing, while a D4s_v5 and an E2s_v5 hold the six
pods for $0.066/h less. The pool is tainted so that nothing else lands there."""

from __future__ import annotations

import io
import json

from core import labels
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import DisruptionInput, DisruptionMode, DisruptionSettings, RepackSettings
from workers.consolidate import consolidate
from workers.demo.overlay import _apply
from workers.demo.walkthrough import TASK_QUEUE, Walkthrough
from workers.explain import explain, render_text

POOL = "repack"
TAINT = "nodewright.io/demo"
GROUPS = (
    ((400, 6144), (1000, 3072), (1500, 1536)),
    ((700, 2560), (1000, 3072), (700, 2560)),
)
"""The pods (millicores, MiB) of the two nodes, in the order they arrive."""
WIDER = [
    f"Standard_{family}{size}{suffix}"
    for family, suffix in (("F", "s_v2"), ("D", "s_v5"), ("E", "s_v5"))
    for size in (2, 4, 8, 16)
]


def pool_manifest(types: list[str]) -> str:
    return f"""apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {POOL}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.azure.com, kind: AKSNodeClass, name: default}}
      expireAfter: Never
      taints: [{{key: {TAINT}, value: repack, effect: NoSchedule}}]
      requirements:
        - {{key: {labels.INSTANCE_TYPE}, operator: In, values: {json.dumps(types)}}}
        - {{key: {labels.CAPACITY_TYPE}, operator: In, values: [on-demand]}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
    budgets: [{{nodes: "100%"}}]
"""


def deployment(name: str, cpu: int, memory: int) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{{labels.NODEPOOL}: {POOL}}}
      tolerations: [{{key: {TAINT}, operator: Exists}}]
      containers:
        - name: app
          image: mcr.microsoft.com/oss/kubernetes/pause:3.6
          resources: {{requests: {{cpu: {cpu}m, memory: {memory}Mi}}}}
"""


async def repack_step(walk: Walkthrough, number: int) -> None:
    walk.say(
        f"{number}. Six pods on two D4s_v5 that Karpenter's consolidation leaves as they are: the repack finds "
        "a D4s_v5 and an E2s_v5 that hold them for less, shows the bound, and carries it out"
    )
    await _apply(walk, pool_manifest(["Standard_D4s_v5"]), "repack-pool.yaml")
    index = 0
    for group in GROUPS:
        names = []
        for cpu, memory in group:
            index += 1
            names.append(f"repack-{index}")
            await _apply(walk, deployment(names[-1], cpu, memory), f"{names[-1]}.yaml")
        for name in names:
            await walk.until(f"{name} running", lambda name=name: walk.running(name, 1))
    before = await _claims(walk)
    await walk.kubectl("get", "nodeclaims", "-l", f"{labels.NODEPOOL}={POOL}", "-o", "wide")
    walk.say("The pool now allows the Fsv2, Dsv5 and Esv5 families, 2 to 16 vCPUs")
    await _apply(walk, pool_manifest(WIDER), "repack-pool.yaml")
    print(f"$ nodewright consolidate --nodepool {POOL} --yes", file=walk.out, flush=True)
    request = DisruptionInput(
        cluster=walk.options.cluster,
        mode=DisruptionMode.MANUAL,
        nodepools=[POOL],
        settings=DisruptionSettings(validation_seconds=3, repack=RepackSettings()),
    )
    await consolidate(walk.client, TASK_QUEUE, request, True, "table", walk.out, lambda question: "y")

    async def replaced() -> bool:
        current = await _claims(walk)
        running = [await walk.running(f"repack-{i}", 1) for i in range(1, index + 1)]
        return bool(current) and not {c.name for c in before} & {c.name for c in current} and all(running)

    await walk.until("the repacked pods running on their new nodes", replaced)
    after = await _claims(walk)
    print(f"before: {_describe(walk, before)}\nafter:  {_describe(walk, after)}", file=walk.out)
    story = io.StringIO()
    render_text(await explain(walk.client, "nodeclaim", before[0].name), story)
    print(f"$ nodewright explain nodeclaim {before[0].name}  (its disruption)", file=walk.out)
    lines = story.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Disruption")), len(lines))
    end = next((i for i, line in enumerate(lines) if line.startswith("Removal")), len(lines))
    for line in lines[start:end]:
        print(line, file=walk.out)
    for name in [f"repack-{i}" for i in range(1, index + 1)]:
        await walk.kubectl("delete", "deployment", name, "--wait=false", show=False)


async def _claims(walk: Walkthrough) -> list[NodeClaim]:
    """The pool's Initialized NodeClaims not being deleted, by name."""
    return sorted(
        (
            claim
            for claim in await walk.sim.list_nodeclaims()
            if claim.labels.get(labels.NODEPOOL) == POOL
            and claim.metadata.deletion_timestamp is None
            and claim.is_true(NodeClaimConditionType.INITIALIZED)
        ),
        key=lambda claim: claim.name,
    )


def _describe(walk: Walkthrough, claims: list[NodeClaim]) -> str:
    """The NodeClaims' instance types and what they cost together (on-demand, the region's price)."""
    prices = {
        it.name: min(
            o.price_micros for o in it.offerings if o.capacity_type == labels.CAPACITY_TYPE_ON_DEMAND
        )
        for it in azure_instance_types(load_shipped_catalog(walk.options.region))
        if it.name in WIDER
    }
    types = [claim.labels.get(labels.INSTANCE_TYPE, "") for claim in claims]
    total = sum(prices.get(name, 0) for name in types) / 1e6
    return f"{', '.join(types)} (${total:.3f}/h)"
