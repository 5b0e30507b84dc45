"""Which nodes Karpenter may disrupt voluntarily, what each would cost to disrupt, and why the others not.

A node is a candidate when it has a NodeClaim from a NodePool that still exists, is initialized, is not
already being deleted or disrupted, is not annotated `karpenter.sh/do-not-disrupt`, and its instance type
is known. Whether its pods let it go (do-not-disrupt pods, PodDisruptionBudgets) depends on what the plan
already moved, so that is asked later (`pod_blocker`). A NodeClaim past its `expireAfter` is deleted
whatever its pods or budgets say: it is listed apart.

Disruption cost is Karpenter's: each pod costs 1 plus its deletion cost / 2^27 plus its priority / 2^25,
clamped to [-10, 10], and the sum is scaled by the fraction of the node's lifetime left, so that nodes
with few, unimportant pods that expire soon go first.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Node, Pod, owner_kind, pod_key
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import NodePool
from core.capacity_buffer import is_virtual
from core.cron import as_utc
from core.disruption.commands import Blocked, BlockReason, Disrupted, Reason
from core.disruption.drift import Drift, DriftInputs, detect_drift
from core.disruption.pdb import PdbLimits, is_active
from core.instancetypes.types import InstanceType

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

_GO_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_GO_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> timedelta | None:
    """A Go duration ("90s", "1h30m", "1.5h") as a timedelta; None when it is not one."""
    body = text.strip()
    negative = body.startswith("-")
    body = body.lstrip("+-")
    if body == "0":
        return timedelta(0)
    parts = _GO_DURATION_PART.findall(body)
    if not parts or "".join(amount + unit for amount, unit in parts) != body:
        return None
    seconds = sum(float(amount) * _GO_UNIT_SECONDS[unit] for amount, unit in parts)
    return timedelta(seconds=-seconds if negative else seconds)


def eviction_cost(pod: Pod) -> float:
    """What evicting the pod costs, from its deletion cost and priority, between -10 and 10."""
    cost = 1.0
    deletion_cost = pod.metadata.annotations.get(POD_DELETION_COST)
    if deletion_cost is not None:
        # Karpenter logs and ignores a deletion cost that is not a number.
        with contextlib.suppress(ValueError):
            cost += float(deletion_cost) / 2**27
    if pod.spec.priority is not None:
        cost += pod.spec.priority / 2**25
    return min(10.0, max(-10.0, cost))


def lifetime_remaining(pool: NodePool, claim: NodeClaim, now: datetime) -> float:
    """The fraction of the node's lifetime left under the pool's expireAfter (1 when it never expires)."""
    lifetime = pool.spec.template.spec.expire_after_duration
    created = claim.metadata.creation_timestamp
    if lifetime is None or created is None or lifetime.total_seconds() <= 0:
        return 1.0
    left = (lifetime - (as_utc(now) - as_utc(created))) / lifetime
    return min(1.0, max(0.0, left))


def is_reschedulable(pod: Pod) -> bool:
    """Whether disrupting the node means placing the pod elsewhere: running (or a terminating StatefulSet
    pod, which is recreated), and neither a DaemonSet pod nor a static pod."""
    terminating_statefulset = pod.metadata.deletion_timestamp is not None and owner_kind(pod) == "StatefulSet"
    return (
        (is_active(pod) or terminating_statefulset)
        and pod.status.phase not in ("Succeeded", "Failed")
        and owner_kind(pod) not in ("DaemonSet", "Node")
    )


def do_not_disrupt(pod: Pod, now: datetime) -> str | None:
    """Why the pod's `karpenter.sh/do-not-disrupt` annotation protects it now, or None. "true" protects
    for good; a duration protects until the pod is that old; anything else is ignored, as Karpenter does."""
    value = pod.metadata.annotations.get(labels.DO_NOT_DISRUPT)
    if value is None:
        return None
    if value == "true":
        return f"do-not-disrupt pod {pod_key(pod)}"
    duration = go_duration(value)
    created = pod.metadata.creation_timestamp
    if duration is None or duration <= timedelta(0) or created is None:
        return None
    until = as_utc(created) + duration
    if as_utc(now) >= until:
        return None
    return f"do-not-disrupt pod {pod_key(pod)} (for {value} after it started, until {until:%H:%M:%S})"


def offering_price(instance_type: InstanceType, node_labels: Mapping[str, str]) -> int | None:
    """The price of the node's offering: the cheapest whose zone, capacity type and other offering labels
    match the node's (available or not, as Karpenter prices candidates)."""
    prices = [
        offering.price_micros
        for offering in instance_type.offerings
        if all(
            node_labels.get(requirement.key) in (None, *requirement.values)
            for requirement in offering.requirements
        )
    ]
    return min(prices, default=None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node Karpenter may disrupt, with what every method needs to decide."""

    name: str
    node: Node
    nodeclaim: NodeClaim
    nodepool: NodePool
    instance_type: InstanceType | None
    zone: str | None
    capacity_type: str | None
    price_micros: int | None
    pods: tuple[Pod, ...]
    """Every active pod on the node: all of them are checked for do-not-disrupt and PDBs."""
    reschedulable: tuple[Pod, ...]
    """The pods that need a new place when the node goes."""
    protected: tuple[str, ...]
    """Why do-not-disrupt pods protect the node now, one sentence per pod."""
    disruption_cost: float
    reschedule_cost: float
    """What moving the node's pods disrupts (see `reschedule_cost`)."""
    quiet: Reason | None
    """Why emptiness and consolidation must leave the node alone (consolidateAfter), or None."""
    drift: Drift | None
    drifted_at: datetime
    expires_at: datetime | None

    @property
    def empty(self) -> bool:
        """Whether no pod needs rescheduling when the node goes."""
        return not self.reschedulable

    @property
    def eventual(self) -> bool:
        """Whether the NodeClaim's terminationGracePeriod bounds the drain, so that drift may proceed
        despite pods that block eviction."""
        return self.nodeclaim.spec.termination_grace_period is not None

    def summary(self, detail: str | None = None) -> Disrupted:
        """The candidate as a command lists it."""
        return Disrupted(
            node=self.name,
            nodeclaim=self.nodeclaim.name,
            nodepool=self.nodepool.name,
            instance_type=self.instance_type.name if self.instance_type else None,
            zone=self.zone,
            capacity_type=self.capacity_type,
            price_micros=self.price_micros,
            pods=len(self.reschedulable),
            detail=detail,
        )


def pod_blocker(candidate: Candidate, pdbs: PdbLimits, eventual: bool) -> Reason | None:
    """Why the candidate's pods keep it now (do-not-disrupt first, then PDBs), or None. For an eventual
    disruption of a NodeClaim with a terminationGracePeriod, pods never keep it."""
    if eventual and candidate.eventual:
        return None
    if candidate.protected:
        return Reason(BlockReason.DO_NOT_DISRUPT_POD, candidate.protected[0])
    refused = pdbs.blocker(candidate.pods)
    if refused is not None:
        return Reason(BlockReason.POD_DISRUPTION_BUDGET, refused)
    return None


def staying_pods(candidate: Candidate, pdbs: PdbLimits, now: datetime) -> dict[str, str]:
    """The candidate's reschedulable pods that stay on the node until its terminationGracePeriod ends, by
    `namespace/name`, each with why: an active do-not-disrupt annotation, or a PDB that never allows an
    eviction. They are deleted when the grace period ends, so Karpenter makes no room for them elsewhere
    (its "currently reschedulable" pods leave them out). Without a grace period nothing stays: such a node
    is not drifted until they can leave, and an expired one simulates them all."""
    if not candidate.eventual:
        return {}
    staying: dict[str, str] = {}
    for pod in candidate.reschedulable:
        protected = do_not_disrupt(pod, now)
        if protected is not None:
            staying[pod_key(pod)] = protected
            continue
        refused = pdbs.fully_blocks(pod)
        if refused is not None:
            staying[pod_key(pod)] = f"pod {pod_key(pod)}: {refused}"
    return staying


@dataclass(slots=True)
class NodeReport:
    """Every node of the cluster sorted into candidates, expiring nodes and rejected nodes, with the node
    counts the budgets need."""

    candidates: list[Candidate] = field(default_factory=list)
    expiring: list[Candidate] = field(default_factory=list)
    rejected: list[Blocked] = field(default_factory=list)
    leaving: list[str] = field(default_factory=list)
    """Nodes already being deleted or disrupted, whose pods are moving elsewhere."""
    pods: dict[str, list[Pod]] = field(default_factory=dict)
    """The unfinished pods bound to each node (terminating ones included), by node name."""
    totals: dict[str, int] = field(default_factory=dict)
    disrupting: dict[str, int] = field(default_factory=dict)
    pool_price: dict[str, int] = field(default_factory=dict)
    """What each NodePool's initialized nodes cost per hour (for the Balanced policy)."""
    pool_disruption: dict[str, float] = field(default_factory=dict)
    """What moving every pod of each NodePool would disrupt, in reschedule cost (for the Balanced policy)."""
    under_consolidate_after: set[str] = field(default_factory=set)
    """Initialized nodes whose pods came or went within their NodePool's consolidateAfter: consolidation
    moves no pod onto them (Karpenter's isUnderConsolidateAfter), whether or not they are candidates."""


def _condition_true(node: Node, kind: str) -> bool:
    return any(condition.type == kind and condition.status == "True" for condition in node.status.conditions)


def _claims_by_node(claims: Iterable[NodeClaim]) -> tuple[dict[str, NodeClaim], dict[str, NodeClaim]]:
    by_name: dict[str, NodeClaim] = {}
    by_provider: dict[str, NodeClaim] = {}
    for claim in claims:
        if claim.status.node_name:
            by_name[claim.status.node_name] = claim
        if claim.status.provider_id:
            by_provider[claim.status.provider_id] = claim
    return by_name, by_provider


def _since(claim: NodeClaim) -> datetime | None:
    """When the node last saw a pod come or go, or else when it became initialized."""
    if claim.status.last_pod_event_time is not None:
        return claim.status.last_pod_event_time
    initialized = claim.status.condition(NodeClaimConditionType.INITIALIZED)
    if initialized is not None and initialized.last_transition_time is not None:
        return initialized.last_transition_time
    return claim.metadata.creation_timestamp


def _consolidate_after_left(pool: NodePool, claim: NodeClaim, now: datetime) -> timedelta | None:
    """How long the node stays under its NodePool's consolidateAfter since its last pod event, or None
    when it is not (consolidateAfter passed, or Never)."""
    after = pool.spec.disruption.consolidate_after_duration
    since = _since(claim)
    if after is None or since is None:
        return None
    left = after - (as_utc(now) - as_utc(since))
    return left if left > timedelta(0) else None


def is_consolidatable(pool: NodePool, claim: NodeClaim, now: datetime) -> bool:
    """Karpenter's Consolidatable condition: consolidation is enabled, the NodeClaim initialized, and
    consolidateAfter has passed since its last pod event (or its initialization)."""
    return (
        pool.spec.disruption.consolidate_after_duration is not None
        and claim.is_true(NodeClaimConditionType.INITIALIZED)
        and _consolidate_after_left(pool, claim, now) is None
    )


def _quiet(pool: NodePool, claim: NodeClaim, now: datetime) -> Reason | None:
    if pool.spec.disruption.consolidate_after_duration is None:
        return Reason(
            BlockReason.CONSOLIDATION_DISABLED,
            f'NodePool "{pool.name}" has consolidation disabled (consolidateAfter: Never)',
        )
    left = _consolidate_after_left(pool, claim, now)
    if left is None:
        return None
    return Reason(
        BlockReason.CONSOLIDATE_AFTER,
        f"consolidateAfter {pool.spec.disruption.consolidate_after} has not passed since the last pod "
        f"event ({_duration(left)} left)",
    )


def _duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return (
        "".join(
            f"{amount}{unit}" for amount, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if amount
        )
        or "0s"
    )


def _expires_at(claim: NodeClaim) -> datetime | None:
    lifetime = claim.spec.expire_after_duration
    created = claim.metadata.creation_timestamp
    if lifetime is None or created is None:
        return None
    return as_utc(created) + lifetime


def _initialized(claim: NodeClaim, node: Node) -> bool:
    return (
        claim.is_true(NodeClaimConditionType.INITIALIZED)
        or node.metadata.labels.get(labels.INITIALIZED) == "true"
    )


def _do_not_disrupt_node(claim: NodeClaim, node: Node) -> bool:
    return "true" in (
        node.metadata.annotations.get(labels.DO_NOT_DISRUPT),
        claim.metadata.annotations.get(labels.DO_NOT_DISRUPT),
    )


def find_candidates(
    manifests: Manifests,
    instance_types: Mapping[str, Sequence[InstanceType]],
    drift_inputs: DriftInputs,
    now: datetime,
) -> NodeReport:
    """Sort every node of the snapshot into candidates, expiring nodes and rejected nodes with a reason.

    `instance_types` are those of each NodePool the scheduler uses; a pool missing from it (static, or
    being deleted) cannot have candidates."""
    report = NodeReport()
    pools = {pool.name: pool for pool in manifests.nodepools}
    nodeclasses = {nodeclass.name: nodeclass for nodeclass in manifests.nodeclasses}
    types = {pool: {it.name: it for it in listed} for pool, listed in instance_types.items()}
    claims_by_name, claims_by_provider = _claims_by_node(manifests.nodeclaims)
    for pod in manifests.pods:
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            report.pods.setdefault(pod.spec.node_name, []).append(pod)
    for node in sorted(manifests.nodes, key=lambda n: n.metadata.name):
        name = node.metadata.name
        claim = claims_by_name.get(name) or claims_by_provider.get(node.spec.provider_id or "\0")
        pool_name = (claim.nodepool_name if claim else None) or node.metadata.labels.get(labels.NODEPOOL)
        pool = pools.get(pool_name or "")
        if claim is None or pool is None:
            reason = (
                Reason(BlockReason.NOT_MANAGED, "node has no NodeClaim: it was not launched by Karpenter")
                if claim is None
                else Reason(BlockReason.NODEPOOL_NOT_FOUND, f'NodePool "{pool_name}" not found')
            )
            report.rejected.append(Blocked(name, claim.name if claim else None, pool_name, (reason,)))
            continue
        if _initialized(claim, node):
            _add_to_pool(report, pool, claim, node, types.get(pool.name, {}))
            if _consolidate_after_left(pool, claim, now) is not None:
                report.under_consolidate_after.add(name)
        verdict = _admit(report, node, claim, pool, pool.name in instance_types, now)
        if verdict is None:
            candidate = _candidate(
                name,
                node,
                claim,
                pool,
                types.get(pool.name, {}),
                report.pods.get(name, []),
                nodeclasses,
                drift_inputs,
                now,
            )
            if candidate.expires_at is not None and as_utc(now) >= candidate.expires_at:
                report.expiring.append(candidate)
            elif candidate.instance_type is None:
                wanted = node.metadata.labels.get(labels.INSTANCE_TYPE) or claim.labels.get(
                    labels.INSTANCE_TYPE
                )
                verdict = Reason(
                    BlockReason.INSTANCE_TYPE_NOT_FOUND, f'instance type "{wanted or ""}" not found'
                )
            else:
                report.candidates.append(candidate)
        if verdict is not None:
            report.rejected.append(Blocked(name, claim.name, pool.name, (verdict,)))
    return report


def reschedule_cost(pods: Iterable[Pod]) -> float:
    """1 plus the positive eviction costs of the pods: what moving them disrupts (the Balanced policy's
    measure, and an empty node's is 1)."""
    # A CapacityBuffer's virtual pods are never evicted: moving them costs nothing.
    return 1.0 + sum(
        max(0.0, eviction_cost(pod)) for pod in pods if is_reschedulable(pod) and not is_virtual(pod)
    )


def _add_to_pool(
    report: NodeReport, pool: NodePool, claim: NodeClaim, node: Node, types: Mapping[str, InstanceType]
) -> None:
    node_labels = {**claim.labels, **node.metadata.labels}
    instance_type = types.get(node_labels.get(labels.INSTANCE_TYPE, ""))
    price = offering_price(instance_type, node_labels) if instance_type else None
    report.pool_price[pool.name] = report.pool_price.get(pool.name, 0) + (price or 0)
    cost = reschedule_cost(report.pods.get(node.metadata.name, ()))
    report.pool_disruption[pool.name] = report.pool_disruption.get(pool.name, 0.0) + cost


def _repack_target(node: Node, now: datetime) -> bool:
    """Whether a repack's steered drain still holds the node for the pods it moves there (`REPACK_TARGET`)."""
    until = node.metadata.labels.get(labels.REPACK_TARGET, "")
    return until.isdigit() and as_utc(now).timestamp() < int(until)


def _admit(
    report: NodeReport, node: Node, claim: NodeClaim, pool: NodePool, schedulable: bool, now: datetime
) -> Reason | None:
    """Count the node for its pool's budgets, and say why it cannot be a candidate (None when it can).

    A node already leaving is remembered in `report.leaving`. An expired NodeClaim is let through whatever
    else holds it, since expiration is forceful."""
    name = node.metadata.name
    initialized = _initialized(claim, node)
    deleting = node.metadata.deletion_timestamp is not None or claim.metadata.deletion_timestamp is not None
    disrupted = any(taint.key == labels.DISRUPTED_TAINT for taint in node.spec.taints)
    if initialized and not claim.is_true(NodeClaimConditionType.INSTANCE_TERMINATING):
        report.totals[pool.name] = report.totals.get(pool.name, 0) + 1
        if deleting or disrupted or not _condition_true(node, "Ready"):
            report.disrupting[pool.name] = report.disrupting.get(pool.name, 0) + 1
    if deleting or disrupted:
        report.leaving.append(name)
        if deleting:
            return Reason(BlockReason.DELETING, "node is being deleted")
        return Reason(
            BlockReason.DISRUPTING, f"node has the {labels.DISRUPTED_TAINT} taint: a disruption is under way"
        )
    expires_at = _expires_at(claim)
    if expires_at is not None and as_utc(now) >= expires_at:
        return None
    if not initialized:
        return Reason(BlockReason.NOT_INITIALIZED, "node is not initialized yet")
    if _repack_target(node, now):
        return Reason(BlockReason.NOMINATED, "a repack command is moving pods onto this node")
    if pool.is_static:
        return Reason(
            BlockReason.STATIC_NODEPOOL,
            f'NodePool "{pool.name}" is static (replicas is set): its nodes are never consolidated',
        )
    if not schedulable:
        return Reason(BlockReason.NODEPOOL_NOT_FOUND, f'NodePool "{pool.name}" is being deleted')
    if _do_not_disrupt_node(claim, node):
        return Reason(BlockReason.DO_NOT_DISRUPT_NODE, f"do-not-disrupt annotation on node {name}")
    return None


def _candidate(
    name: str,
    node: Node,
    claim: NodeClaim,
    pool: NodePool,
    types: Mapping[str, InstanceType],
    pods: Sequence[Pod],
    nodeclasses: Mapping[str, AKSNodeClass],
    drift_inputs: DriftInputs,
    now: datetime,
) -> Candidate:
    node_labels = {**claim.labels, **node.metadata.labels}
    instance_type = types.get(node_labels.get(labels.INSTANCE_TYPE, ""))
    active = tuple(pod for pod in pods if is_active(pod))
    reschedulable = tuple(pod for pod in pods if is_reschedulable(pod))
    protected = tuple(reason for pod in active if (reason := do_not_disrupt(pod, now)) is not None)
    lifetime = lifetime_remaining(pool, claim, now)
    drift = detect_drift(claim, node, pool, nodeclasses.get(claim.node_class_ref.name), drift_inputs)
    drifted = claim.status.condition(NodeClaimConditionType.DRIFTED)
    drifted_at = (
        drifted.last_transition_time
        if drifted is not None and drifted.last_transition_time is not None
        else claim.metadata.creation_timestamp or now
    )
    return Candidate(
        name=name,
        node=node,
        nodeclaim=claim,
        nodepool=pool,
        instance_type=instance_type,
        zone=node_labels.get(labels.ZONE),
        capacity_type=node_labels.get(labels.CAPACITY_TYPE),
        price_micros=offering_price(instance_type, node_labels) if instance_type else None,
        pods=active,
        reschedulable=reschedulable,
        protected=protected,
        disruption_cost=sum(eviction_cost(pod) for pod in active) * lifetime,
        reschedule_cost=reschedule_cost(reschedulable),
        quiet=_quiet(pool, claim, now),
        drift=drift,
        drifted_at=as_utc(drifted_at),
        expires_at=_expires_at(claim),
    )
