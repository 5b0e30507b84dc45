"""Provisioning in a real cluster with the NodeOverlay feature gate on: the planning activity reads the
NodeOverlays, launches the type an overlay made cheapest, marks the NodeClaim as Karpenter does, and writes each
overlay's ValidationSucceeded and Ready conditions (Conflict for the loser of two of equal weight)."""

from __future__ import annotations

from typing import Any

from activities.planning import PlanningActivities
from core import labels
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.overlay import PRICE_OVERLAY_APPLIED
from core.messages import LifecycleInput, PlanInput
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import azure_provider, build_snapshot
from tests.cluster import activity_environment, apply_examples, eventually, scale_pending
from workers.simulated_aks import SimulatedAks


def overlay(name: str, family: str, adjustment: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {
            "requirements": [{"key": labels.SKU_FAMILY, "operator": "In", "values": [family]}],
            "priceAdjustment": adjustment,
        },
    }


def conditions(raw: dict[str, Any] | None) -> dict[str, tuple[str, str, str]]:
    found = (raw or {}).get("status", {}).get("conditions", [])
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in found}


async def test_provisioning_launches_the_family_an_overlay_made_cheapest(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    await scale_pending(aks.kube, "inflate-wide", 1)
    catalog = load_shipped_catalog("eastus")
    # Without overlays the cheapest launch is of another family than E (memory-optimised sizes).
    plain = build_snapshot(await aks.kube.snapshot(), azure_provider(catalog), reschedule_deleting=True)
    [unadjusted] = (
        Scheduler(plain.nodepools, plain.instance_types, plain.nodes, plain.daemonsets)
        .solve(plain.pending)
        .nodeclaims
    )
    assert unadjusted.labels[labels.SKU_FAMILY] != "E"

    await aks.kube.apply([overlay("cheap-e", "E", "-90%"), overlay("also-e", "E", "-50%")])
    aks.kube.node_overlays = True
    try:
        started: list[LifecycleInput] = []

        async def record(request: LifecycleInput) -> None:
            started.append(request)

        activities = PlanningActivities(aks.kube, catalog, record)
        await activity_environment().run(activities.plan_provisioning, PlanInput(cluster="test", batch=1))
    finally:
        aks.kube.node_overlays = False

    [lifecycle] = started
    first = lifecycle.nodeclaim.launch_candidates[0]
    # Equal weights: the name later in the alphabet ("cheap-e") wins, "also-e" conflicts.
    assert first.price_overlay == "cheap-e"
    assert lifecycle.nodeclaim.reason.endswith("/h (price adjusted by overlay cheap-e)")
    families = {it.name: it.requirements.get(labels.SKU_FAMILY).any() for it in azure_provider(catalog)(None)}
    assert families[first.instance_type] == "E"
    assert first.price_micros < unadjusted.price_micros
    [claim] = await aks.kube.list_nodeclaims()
    assert claim.metadata.annotations[PRICE_OVERLAY_APPLIED] == "true"
    assert first.instance_type in claim.spec.requirement_set().get(labels.INSTANCE_TYPE).values

    winner = conditions(await aks.kube.get_object("NodeOverlay", "cheap-e"))
    assert winner["ValidationSucceeded"][:2] == ("True", "ValidationSucceeded")
    assert winner["Ready"][:2] == ("True", "Ready")
    loser = conditions(await aks.kube.get_object("NodeOverlay", "also-e"))
    assert loser["ValidationSucceeded"] == ("False", "Conflict", "conflict with another overlay")
    assert loser["Ready"][:2] == ("False", "UnhealthyDependents")


async def test_without_the_gate_overlays_are_not_read(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    await aks.kube.apply([overlay("cheap-e", "E", "-90%")])
    assert (await aks.kube.snapshot()).nodeoverlays == []
    aks.kube.node_overlays = True
    try:
        snapshot = await eventually(lambda: _overlays(aks))
    finally:
        aks.kube.node_overlays = False
    assert [o.name for o in snapshot] == ["cheap-e"]


async def _overlays(aks: SimulatedAks) -> list[Any] | None:
    return (await aks.kube.snapshot()).nodeoverlays or None
