"""Termination's activities against a real API server: the drain's Drained condition and Karpenter's minimum
drain time."""

from __future__ import annotations

import uuid

from activities.kube import KubeActivities
from core.messages import DrainInput
from tests.activities.test_kube import planned_claim
from tests.cluster import activity_environment
from workers.simulated_aks import SimulatedAks


async def test_a_drained_node_counts_as_drained_only_after_the_minimum_drain_time(aks: SimulatedAks) -> None:
    name, _ = await planned_claim(aks)
    node = f"aks-empty-{uuid.uuid4().hex[:6]}"
    await aks.kube.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}])
    activities = KubeActivities(aks.kube)
    environment = activity_environment()

    early = await environment.run(
        activities.drain_node, DrainInput(node=node, nodeclaim=name, min_drain_seconds=3600)
    )
    assert early.remaining == 0 and 3590 < early.settle_seconds <= 3600
    claim = await aks.kube.get_nodeclaim(name)
    draining = claim.status.condition("Drained") if claim is not None else None
    assert draining is not None and (draining.status, draining.reason, draining.message) == (
        "Unknown",
        "Draining",
        "Draining",
    )

    done = await environment.run(activities.drain_node, DrainInput(node=node, nodeclaim=name))
    assert (done.remaining, done.settle_seconds) == (0, 0)
    claim = await aks.kube.get_nodeclaim(name)
    drained = claim.status.condition("Drained") if claim is not None else None
    assert drained is not None and (drained.status, drained.reason) == ("True", "Drained")
    assert drained.last_transition_time is not None and draining.last_transition_time is not None
    assert drained.last_transition_time >= draining.last_transition_time
