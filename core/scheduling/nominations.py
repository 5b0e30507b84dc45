"""Pods nominated to NodeClaims still in flight: the next plan does not simulate them again, as Karpenter's.

A plan writes on every NodeClaim it creates which pods it is for (`NOMINATED_PODS_ANNOTATION`). While that
NodeClaim launches, registers and initializes, those pods wait for capacity that is on its way, so a later plan
counts them as bound to it (to its Node once one registered) instead of pending: planning costs what the new
pods cost, whatever is in flight. Once Initialized, kube-scheduler still needs a moment to bind them (Kubernetes
removes its not-ready taint, the scheduler's backoff ends): the nomination holds for Karpenter's nomination
window after that, then lapses, and so it does at once when the NodeClaim is being deleted. A pod that no longer
fits what the NodeClaim launched as is planned again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from core import labels
from core.api.kube import Pod, pod_key, pod_requests
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.resources import Resources, merge
from core.scheduling.inputs import NodeSnapshot

NOMINATED_PODS_ANNOTATION = "nodewright.io/nominated-pods"
"""On a NodeClaim a plan created: the pods (`namespace/name`, comma-separated) it was created for."""
NOMINATION_WINDOW = timedelta(seconds=20)
"""How long pods stay nominated to a NodeClaim after it is Initialized: Karpenter's max(2 x batch max, 10 s)."""


def nominated_pods_value(pods: Iterable[str]) -> str:
    """The annotation's value for these pods."""
    return ",".join(pods)


def nominated_pods(claim: NodeClaim) -> list[str]:
    """The pods a plan nominated to this NodeClaim (none when no plan of ours made it)."""
    value = claim.metadata.annotations.get(NOMINATED_PODS_ANNOTATION, "")
    return [pod for pod in value.split(",") if pod]


def held_until(claim: NodeClaim) -> datetime | None:
    """Until when its nominations hold once it is Initialized (None while it is not)."""
    initialized = claim.status.condition(NodeClaimConditionType.INITIALIZED)
    if initialized is None or not claim.is_true(NodeClaimConditionType.INITIALIZED):
        return None
    # A condition without a time (written by hand) is as old as can be.
    return (initialized.last_transition_time or datetime.min.replace(tzinfo=UTC)) + NOMINATION_WINDOW


def in_flight(claim: NodeClaim, now: datetime) -> bool:
    """Whether its nominations hold: it is not being deleted, and not Initialized longer than the window ago."""
    if claim.metadata.deletion_timestamp is not None:
        return False
    until = held_until(claim)
    return until is None or now < until


def nominations(claims: Iterable[NodeClaim], now: datetime) -> dict[str, NodeClaim]:
    """Each pod nominated to an in-flight NodeClaim, with that NodeClaim."""
    return {pod: claim for claim in claims if in_flight(claim, now) for pod in nominated_pods(claim)}


def fitting(
    nominated: list[Pod], bound: Iterable[Pod], allocatable: Resources
) -> tuple[list[Pod], list[Pod]]:
    """The nominated pods that still fit beside the bound ones (in nomination order), and those that do not."""
    bound = list(bound)
    used = merge(*(pod_requests(pod) for pod in bound), {"pods": len(bound)})
    kept: list[Pod] = []
    dropped: list[Pod] = []
    for pod in nominated:
        wanted = merge(used, pod_requests(pod), {"pods": 1})
        if all(
            amount <= allocatable.get(name, 0)
            for name, amount in wanted.items()
            if _counted(name, allocatable)
        ):
            kept.append(pod)
            used = wanted
        else:
            dropped.append(pod)
    return kept, dropped


def _counted(resource: str, allocatable: Resources) -> bool:
    # A node that does not say how many pods it takes is not full of them.
    return resource != "pods" or resource in allocatable


def _node_of(claim: NodeClaim, names: set[str]) -> str | None:
    """The simulated node that stands for the NodeClaim: its Node once registered, itself before."""
    for name in (claim.status.node_name, claim.name):
        if name in names:
            return name
    return None


def _without_passing_taints(node: NodeSnapshot, claim: NodeClaim) -> NodeSnapshot:
    passing = {
        *labels.KNOWN_EPHEMERAL_TAINTS,
        labels.UNREGISTERED_TAINT,
        *(t.key for t in claim.startup_taints),
    }
    return replace(node, taints=tuple(taint for taint in node.taints if taint.key not in passing))


def hold(
    pending: list[Pod], nodes: list[NodeSnapshot], claims: Iterable[NodeClaim], now: datetime
) -> tuple[list[Pod], list[NodeSnapshot], list[Pod]]:
    """Pending pods still nominated to an in-flight NodeClaim they fit, bound in the simulation to it (or to
    its Node once registered): the pods left pending, the nodes, and the pods held. The Node of a NodeClaim not
    yet Initialized is taken without the taints it will lose (Kubernetes' not-ready ones, unregistered, its
    startup taints), as Karpenter takes it, so that other pods can be planned onto it too."""
    coming = {
        claim.status.node_name: claim
        for claim in claims
        if claim.status.node_name
        and claim.metadata.deletion_timestamp is None
        and not claim.is_true(NodeClaimConditionType.INITIALIZED)
    }
    nodes = [
        _without_passing_taints(node, coming[node.name]) if node.name in coming else node for node in nodes
    ]
    by_node: dict[str, list[Pod]] = {}
    names = {node.name for node in nodes}
    held_by = nominations(claims, now)
    left: list[Pod] = []
    for pod in pending:
        claim = held_by.get(pod_key(pod))
        target = _node_of(claim, names) if claim is not None else None
        if target is None:
            left.append(pod)
        else:
            by_node.setdefault(target, []).append(pod)
    held: list[Pod] = []
    result: list[NodeSnapshot] = []
    for node in nodes:
        nominated = by_node.get(node.name)
        if nominated:
            kept, dropped = fitting(nominated, node.pods, node.allocatable)
            node = replace(node, pods=(*node.pods, *kept))
            held.extend(kept)
            left.extend(dropped)
        result.append(node)
    return left, result, held
