"""The demo's repack step: a node whose pods Karpenter's consolidation leaves where they are, although two smaller
nodes and room on another node hold them for less (aws/karpenter-provider-aws#6635: "Karpenter will not
consolidate one node into two nodes"); the repack finds that, states the plan's cost and lower bound, and
carries it out as a manual consolidation (`nodewright consolidate`), whose commands are validated, launched and
drained as any disruption command; `nodewright explain` then says where the retired node's pods went and why.

Twenty pods in a NodePool of their own arrive in two groups: the first on a Standard_D8s_v5 (the only type the
pool allows then), the second, with that node cordoned, on a Standard_F8s_v2. The pool then allows the Fsv2, Dsv5
and Esv5 families (2 to 16 vCPUs): no single cheaper node holds either node's pods, nor both's, so Karpenter's
methods find nothing, while an F4s_v2, an F2s_v2 and the D8s_v5's free room hold the F8s_v2's pods for
$0.084/h less. The pool is tainted so that nothing else lands there."""

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
    ("Standard_D8s_v5", ((250, 1536, 4), (250, 3072, 2), (500, 2048, 2), (750, 1024, 2), (1000, 512, 2))),
    ("Standard_F8s_v2", ((250, 1536, 2), (750, 1024, 3), (1000, 512, 3))),
)
"""Each node's instance type and its pods as (millicores, MiB, replicas), in the order they arrive."""
WIDER = [
    f"Standard_{family}{size}{suffix}"
    for family, suffix in (("F", "s_v2"), ("D", "s_v5"), ("E", "s_v5"))
    for size in (2, 4, 8, 16)
]


def pool_manifest(types: list[str], cpus: int | None = None, frozen: bool = False) -> str:
    """The pool, allowing `types`; with `cpus`, limited to that many vCPUs (one more node while a group arrives);
    `frozen`, with a budget of no node, so that no disruption touches it while it is laid out (the first node
    drifts while the pool allows only the second's type)."""
    limits = f"\n  limits: {{cpu: {cpus}}}" if cpus is not None else ""
    budget = "0" if frozen else "100%"
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
    budgets: [{{nodes: "{budget}"}}]{limits}
"""


def deployment(name: str, cpu: int, memory: int, replicas: int) -> str:
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
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
        f"{number}. A Standard_D8s_v5 and a Standard_F8s_v2 whose pods Karpenter's consolidation leaves where they "
        "are: the repack finds a cheaper set of nodes for them, shows the bound, and carries it out"
    )
    deployments: list[tuple[str, int]] = []
    for group, (instance_type, pods) in enumerate(GROUPS):
        # One more 8-vCPU node at most: the group's pods wait for it rather than spread over two.
        await _apply(walk, pool_manifest([instance_type], 8 * (group + 1), frozen=True), "repack-pool.yaml")
        documents = []
        for cpu, memory, replicas in pods:
            name = f"repack-{group}-{cpu}m-{memory}mi"
            deployments.append((name, replicas))
            documents.append(deployment(name, cpu, memory, replicas))
        # In one apply, so that the group's pods are pending together and get one node.
        await _apply(walk, "---\n".join(documents), f"repack-{group}.yaml")
        for name, replicas in deployments:
            await walk.until(
                f"{name} running", lambda name=name, replicas=replicas: walk.running(name, replicas)
            )
        if group + 1 < len(GROUPS):
            # The next group gets a node of its own, as if it had come later to a full node.
            for claim in await _claims(walk):
                await walk.kubectl("cordon", claim.status.node_name or "", show=False)
    before = await _claims(walk)
    for claim in before:
        await walk.kubectl("uncordon", claim.status.node_name or "", show=False)
    await walk.kubectl("get", "nodeclaims", "-l", f"{labels.NODEPOOL}={POOL}", "-o", "wide")
    walk.say("The pool now allows the Fsv2, Dsv5 and Esv5 families, 2 to 16 vCPUs")
    await _apply(walk, pool_manifest(WIDER, frozen=True), "repack-pool.yaml")

    async def undrifted() -> bool:
        # The first node drifted while the pool allowed only the second's type: its Drifted condition clears at
        # the disruption loop's next pass, before the pool's budget lets any disruption act.
        claims = await _claims(walk)
        return len(claims) == len(GROUPS) and not any(
            claim.is_true(NodeClaimConditionType.DRIFTED) for claim in claims
        )

    await walk.until("the pool's nodes no longer drifted", undrifted)
    await _apply(walk, pool_manifest(WIDER), "repack-pool.yaml")
    request = DisruptionInput(
        cluster=walk.options.cluster,
        mode=DisruptionMode.MANUAL,
        nodepools=[POOL],
        dry_run=True,
        settings=DisruptionSettings(validation_seconds=3, repack=RepackSettings()),
    )
    print(f"$ nodewright consolidate --nodepool {POOL} --dry-run", file=walk.out, flush=True)
    shown = io.StringIO()
    await consolidate(walk.client, TASK_QUEUE, request, False, "table", shown, lambda question: "n")
    print(shown.getvalue().rstrip(), file=walk.out)
    if "Disruption commands: none" in shown.getvalue():
        print(
            "(the repack found nothing to do here this time: the pods did not land as laid out)",
            file=walk.out,
        )
        await _remove(walk, deployments)
        return
    print(f"$ nodewright consolidate --nodepool {POOL} --yes", file=walk.out, flush=True)
    executed = request.model_copy(update={"dry_run": False})
    await consolidate(walk.client, TASK_QUEUE, executed, True, "table", walk.out, lambda question: "y")

    async def replaced() -> bool:
        names = {claim.name for claim in await _claims(walk)}
        running = [await walk.running(name, replicas) for name, replicas in deployments]
        return not {c.name for c in before} <= names and len(names) > 1 and all(running)

    await walk.until("the repacked pods running", replaced)
    after = await _claims(walk)
    print(f"before: {_describe(walk, before)}\nafter:  {_describe(walk, after)}", file=walk.out)
    retired = [claim for claim in before if claim.name not in {c.name for c in after}]
    if retired:
        story = io.StringIO()
        render_text(await explain(walk.client, "nodeclaim", retired[0].name), story)
        print(f"$ nodewright explain nodeclaim {retired[0].name}  (its disruption)", file=walk.out)
        lines = story.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("Disruption")), len(lines))
        end = next((i for i, line in enumerate(lines) if line.startswith("Removal")), len(lines))
        for line in lines[start:end]:
            print(line, file=walk.out)
    await _remove(walk, deployments)


async def _remove(walk: Walkthrough, deployments: list[tuple[str, int]]) -> None:
    for name, _ in deployments:
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
