"""Node repair: which unhealthy nodes Karpenter's node-health controller would replace now, and which it would
refuse to, with the AKS provider's repair policies.

A node is unhealthy when one of its conditions matches a policy (type and status). Once the condition has held
for the policy's toleration (measured from its `lastTransitionTime`), the node's NodeClaim is repaired:
terminated forcefully (the termination timestamp is now, so no PodDisruptionBudget or do-not-disrupt pod holds
the drain) and replaced through provisioning. A repair is refused while more than 20 % of the NodePool's nodes
(rounded up, as PodDisruptionBudgets round) are unhealthy, since a fault that wide is more likely the cluster's
than the nodes'. NodeClaims already being deleted are left alone. It reads no clock: pass `now`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from core import labels
from core.api.kube import Condition, Node
from core.api.nodeclaim import NodeClaim

MAX_UNHEALTHY_PERCENT = 20
"""Karpenter's limit: repairs stop while more than this share of a NodePool's nodes is unhealthy."""
REPAIR_REASON = "unhealthy"
"""The `reason` label Karpenter gives repairs in `karpenter_nodeclaims_disrupted_total`."""


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A node condition that makes a node unhealthy, and how long it is tolerated before the node is repaired."""

    condition_type: str
    status: str
    toleration: timedelta

    def matches(self, condition: Condition) -> bool:
        return condition.type == self.condition_type and condition.status == self.status


def aks_repair_policies(
    not_ready_toleration: timedelta = timedelta(minutes=10),
) -> tuple[RepairPolicy, ...]:
    """The AKS provider's policies: a node NotReady (False or Unknown) for 10 minutes, and at once a node the
    AKS node-problem-detector reports unhealthy (`kubernetes.azure.com/NodeHealthy=False`) or about to be
    preempted (`PreemptionScheduled=True`, from a Spot VM's Scheduled Events)."""
    return (
        RepairPolicy("Ready", "False", not_ready_toleration),
        RepairPolicy("Ready", "Unknown", not_ready_toleration),
        RepairPolicy("kubernetes.azure.com/NodeHealthy", "False", timedelta(0)),
        RepairPolicy("PreemptionScheduled", "True", timedelta(0)),
    )


@dataclass(frozen=True, slots=True)
class Repair:
    """A node to repair now."""

    node: str
    nodeclaim: str
    nodepool: str
    condition: str
    """`<type>=<status>`, e.g. `Ready=Unknown`."""
    since: datetime | None
    message: str


@dataclass(frozen=True, slots=True)
class RefusedRepair:
    """A node that is due for repair, held back because too much of its NodePool is unhealthy."""

    node: str
    nodeclaim: str
    nodepool: str
    condition: str
    unhealthy: int
    total: int
    allowed: int
    message: str


@dataclass(frozen=True, slots=True)
class RepairPlan:
    repairs: tuple[Repair, ...] = ()
    refused: tuple[RefusedRepair, ...] = ()
    next_check: datetime | None = None
    """When the earliest unhealthy node not yet due becomes due (None: none waits)."""


def allowed_unhealthy(total: int, percent: int = MAX_UNHEALTHY_PERCENT) -> int:
    """How many of `total` nodes may be unhealthy with repairs still going ahead (rounded up)."""
    return math.ceil(total * percent / 100)


def _unhealthy(node: Node, policies: Sequence[RepairPolicy]) -> list[tuple[Condition, RepairPolicy]]:
    return [
        (condition, policy)
        for policy in policies
        for condition in node.status.conditions
        if policy.matches(condition)
    ]


def _due(condition: Condition, policy: RepairPolicy, now: datetime) -> datetime:
    """When the condition has been tolerated long enough (a condition without a transition time is due now)."""
    since = condition.last_transition_time
    return now if since is None else since + policy.toleration


def plan_repairs(
    nodes: Sequence[Node],
    nodeclaims: Sequence[NodeClaim],
    now: datetime,
    policies: Sequence[RepairPolicy] | None = None,
    max_unhealthy_percent: int = MAX_UNHEALTHY_PERCENT,
) -> RepairPlan:
    """The repairs Karpenter's node-health controller would make at `now`, and those it would refuse."""
    policies = aks_repair_policies() if policies is None else policies
    # Azure resource IDs are case-insensitive, and a Node's and its NodeClaim's may differ in case.
    claims = {claim.status.provider_id.lower(): claim for claim in nodeclaims if claim.status.provider_id}
    managed = [
        (node, claims[node.spec.provider_id.lower()])
        for node in nodes
        if node.spec.provider_id and node.spec.provider_id.lower() in claims
    ]
    per_pool_total: dict[str, int] = {}
    per_pool_unhealthy: dict[str, int] = {}
    for node, claim in managed:
        pool = claim.labels.get(labels.NODEPOOL, "")
        per_pool_total[pool] = per_pool_total.get(pool, 0) + 1
        if _unhealthy(node, policies):
            per_pool_unhealthy[pool] = per_pool_unhealthy.get(pool, 0) + 1
    repairs: list[Repair] = []
    refused: list[RefusedRepair] = []
    next_check: datetime | None = None
    for node, claim in sorted(managed, key=lambda pair: pair[0].metadata.name):
        matches = _unhealthy(node, policies)
        if not matches or claim.metadata.deletion_timestamp is not None:
            continue
        # The condition closest to its end of toleration decides, as Karpenter requeues on it.
        condition, policy = min(matches, key=lambda match: _due(match[0], match[1], now))
        due = _due(condition, policy, now)
        if due > now:
            next_check = due if next_check is None else min(next_check, due)
            continue
        pool = claim.labels.get(labels.NODEPOOL, "")
        name = f"{condition.type}={condition.status}"
        unhealthy, total = per_pool_unhealthy.get(pool, 0), per_pool_total.get(pool, 0)
        allowed = allowed_unhealthy(total, max_unhealthy_percent)
        if unhealthy > allowed:
            refused.append(
                RefusedRepair(
                    node=node.metadata.name,
                    nodeclaim=claim.name,
                    nodepool=pool,
                    condition=name,
                    unhealthy=unhealthy,
                    total=total,
                    allowed=allowed,
                    message=(
                        f"more than {max_unhealthy_percent}% nodes are unhealthy in the nodepool "
                        f"({unhealthy} of {total}, at most {allowed} allowed)"
                    ),
                )
            )
            continue
        held = f" for {now - condition.last_transition_time}" if condition.last_transition_time else ""
        repairs.append(
            Repair(
                node=node.metadata.name,
                nodeclaim=claim.name,
                nodepool=pool,
                condition=name,
                since=condition.last_transition_time,
                message=f"node {node.metadata.name} is unhealthy: {name}{held} (tolerated {policy.toleration})",
            )
        )
    return RepairPlan(repairs=tuple(repairs), refused=tuple(refused), next_check=next_check)
