"""The demo's Spot eviction step: Azure evicts the VM of a Spot node with its usual notice (a Preempt Scheduled
Event, 30 s in the emulated Azure as on Azure), and nodewright handles it end to end.

The emulator posts the event; the node agent, as AKS's node-problem-detector does, sets `PreemptionScheduled=True`
on the Node; the controller interrupts the NodeClaim's lifecycle, which rules the (type, zone, spot) offering out,
marks the NodeClaim deleting so the provisioner plans its pods at once, and drains by the event's deadline. The
step measures, from the notice: the replacement NodeClaim Initialized, and the last pod of the node running
elsewhere; and prints the offerings the provisioner now avoids.
"""

from __future__ import annotations

import time

from core import labels
from core.api.kube import Pod, is_daemonset_pod
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from workers.demo.walkthrough import Walkthrough
from workflows.provisioner import ProvisionerWorkflow, provisioner_id


def _spot_node(claims: list[NodeClaim], pods: list[Pod]) -> NodeClaim | None:
    """The running Spot NodeClaim with the most pods (the most to move), if any."""
    spot = [
        claim
        for claim in claims
        if claim.status.node_name
        and claim.metadata.deletion_timestamp is None
        and claim.labels.get(labels.CAPACITY_TYPE) == labels.CAPACITY_TYPE_SPOT
    ]

    def load(claim: NodeClaim) -> tuple[int, str]:
        return (-sum(1 for pod in pods if pod.spec.node_name == claim.status.node_name), claim.name)

    return min(spot, key=load, default=None)


async def spot_eviction_step(walk: Walkthrough, number: int) -> None:
    walk.say(
        f"{number}. Azure evicts a Spot VM (Preempt Scheduled Event, 30 s notice): replaced before the deadline"
    )
    pods = [pod for pod in await walk.sim.list_pods() if not is_daemonset_pod(pod)]
    victim = _spot_node(await walk.sim.list_nodeclaims(), pods)
    if victim is None:
        print("(no Spot node is running: nothing to evict)", file=walk.out)
        return
    node = victim.status.node_name or ""
    apps: dict[str, int] = {}
    for pod in pods:
        app = pod.metadata.labels.get("app")
        if app:
            apps[app] = apps.get(app, 0) + 1
    moving = {pod.metadata.labels.get("app", "") for pod in pods if pod.spec.node_name == node} - {""}
    before = {claim.name for claim in await walk.sim.list_nodeclaims()}

    event = await walk.aks.emulator.evict(node)
    noticed = time.monotonic()
    notice = event.not_before.timestamp() - time.time()
    print(
        f"Preempt event {event.id} for VM {node} ({', '.join(sorted(moving)) or 'no pods'}): "
        f"NotBefore {event.not_before:%H:%M:%S}Z, in {notice:.0f} s",
        file=walk.out,
        flush=True,
    )
    replaced: float | None = None
    moved: float | None = None

    async def handled() -> bool:
        nonlocal replaced, moved
        claims = await walk.sim.list_nodeclaims()
        fresh = [claim for claim in claims if claim.name not in before]
        if replaced is None and any(claim.is_true(NodeClaimConditionType.INITIALIZED) for claim in fresh):
            replaced = time.monotonic() - noticed
        if moved is None:
            current = await walk.sim.list_pods()
            left = [pod for pod in current if pod.spec.node_name == node and not is_daemonset_pod(pod)]
            if not left and all([await walk.running(app, apps[app]) for app in moving]):
                moved = time.monotonic() - noticed
        return (
            replaced is not None and moved is not None and victim.name not in {claim.name for claim in claims}
        )

    await walk.until(f"nodeclaim {victim.name} interrupted and its pods running elsewhere", handled)
    print(
        f"From the notice: replacement Initialized in {replaced:.1f} s, last pod running elsewhere in "
        f"{moved:.1f} s (the VM goes at {notice:.0f} s)",
        file=walk.out,
    )
    handle = walk.client.get_workflow_handle(provisioner_id(walk.options.cluster))
    for offering in await handle.query(ProvisionerWorkflow.unavailable_offerings):
        print(
            f"offering unavailable: {offering.instance_type} {offering.capacity_type} {offering.zone} "
            f"({offering.reason}) until {offering.until:%H:%M:%S}Z",
            file=walk.out,
        )
    walk.interrupted = victim.name
