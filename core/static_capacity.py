"""Static NodePools (Karpenter's `spec.replicas`, behind the StaticCapacity gate): how many NodeClaims to create or
delete so that the pool holds `replicas` nodes, and which ones go first when it shrinks.

Karpenter keeps a static pool at its count with two controllers: one creates NodeClaims while the pool has fewer
than `replicas` that are not being deleted (never past `limits.nodes`, which counts the ones being deleted too),
the other deletes the surplus, choosing NodeClaims that have not launched first, then empty nodes (DaemonSet pods
only, none of them do-not-disrupt), then the rest: nodes without do-not-disrupt pods before those with them, each
group by what rescheduling its pods costs (weighted by the lifetime left), lowest first. A NodeClaim that goes
for any other reason (deleted, expired, interrupted, repaired) is simply one fewer, and the next step replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from core import labels
from core.api.kube import Pod, PodSpec, Toleration, TolerationOperator
from core.api.manifests import Manifests
from core.api.meta import ObjectMeta
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import DisruptionReason, NodePool
from core.disruption.budgets import budget_limit
from core.disruption.candidates import do_not_disrupt, is_reschedulable, lifetime_remaining, reschedule_cost
from core.disruption.drift import DriftInputs, detect_drift
from core.quantity import to_units
from core.scheduling.results import NewNodeClaim
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import InstanceTypeProvider, build_snapshot

REPLACEMENT_ANNOTATION = "nodewright.io/static-replacement"
"""On a drifted NodeClaim of a static pool: the NodeClaim launched to replace it (empty once that is gone)."""


@dataclass(frozen=True, slots=True)
class StaticMember:
    """One NodeClaim of a static NodePool, as the scale-down choice sees it."""

    name: str
    launched: bool
    """It has a providerID (Karpenter: "resolved")."""
    deleting: bool = False
    empty: bool = True
    """No pod on its node other than DaemonSet and static pods."""
    do_not_disrupt: bool = False
    """A pod on its node has an active `karpenter.sh/do-not-disrupt`."""
    cost: float = 1.0
    """What rescheduling its pods costs, times the fraction of its lifetime left."""
    drift: str | None = None
    """Why its (initialized) node drifted from the pool or its AKSNodeClass; None when it has not."""
    replaced_by: str | None = None
    """The NodeClaim launched to replace it (static drift): it is pending disruption, not running."""
    replacement_ready: bool = False
    """Its replacement is Initialized: it may go now."""
    replacement_gone: bool = False
    """Its replacement no longer exists (its launch failed, or it was deleted): it is running again."""


@dataclass(frozen=True, slots=True)
class StaticStep:
    """What one reconcile of a static NodePool does, and why."""

    nodepool: str
    current: int
    """NodeClaims not being deleted."""
    desired: int
    create: int = 0
    delete: tuple[str, ...] = ()
    replace: tuple[str, ...] = ()
    """Drifted NodeClaims to replace: a new NodeClaim is created for each (counted in `create`)."""
    finish: tuple[str, ...] = ()
    """Drifted NodeClaims whose replacement is initialized: delete them now."""
    unmark: tuple[str, ...] = ()
    """Drifted NodeClaims whose replacement is gone: running again, to be replaced anew."""
    limited: bool = False
    """`limits.nodes` kept the pool below `replicas`."""
    reason: str = ""

    @property
    def acts(self) -> bool:
        return self.create > 0 or bool(self.delete or self.finish or self.unmark)


def deletion_order(members: Sequence[StaticMember]) -> list[StaticMember]:
    """The pool's NodeClaims (not being deleted) in the order a scale-down takes them: not launched, empty, then
    by do-not-disrupt (without first) and cost, lowest first; names break ties so the order is stable."""
    alive = [member for member in members if not member.deleting]

    def key(member: StaticMember) -> tuple[int, int, float, str]:
        if not member.launched:
            return (0, 0, 0.0, member.name)
        if member.empty and not member.do_not_disrupt:
            return (1, 0, 0.0, member.name)
        return (2, int(member.do_not_disrupt), member.cost, member.name)

    return sorted(alive, key=key)


def _why_deleted(member: StaticMember) -> str:
    if not member.launched:
        return "not launched yet"
    if member.empty and not member.do_not_disrupt:
        return "empty"
    if member.do_not_disrupt:
        return f"has do-not-disrupt pods, disruption cost {member.cost:.2f}"
    return f"disruption cost {member.cost:.2f}"


def plan_static(
    nodepool: str,
    replicas: int,
    node_limit: int | None,
    members: Sequence[StaticMember],
    drift_budget: int | None = None,
) -> StaticStep:
    """How many NodeClaims the static pool needs to create, or which to delete, to hold `replicas` nodes; and,
    when it holds them, which drifted NodeClaims to replace (Karpenter's static drift).

    `node_limit` is the pool's `limits.nodes` (None: no limit): every NodeClaim that exists counts against it,
    those being deleted too, as they still hold their VMs. A drifted NodeClaim being replaced is pending
    disruption: not running, but counted so that no other NodeClaim is created for it. `drift_budget` is how many
    more nodes the pool's `Drifted` budgets let start disrupting (None: no limit)."""
    alive = [member for member in members if not member.deleting]
    pending = [member for member in alive if member.replaced_by and not member.replacement_gone]
    finish = tuple(member.name for member in pending if member.replacement_ready)
    unmark = tuple(member.name for member in alive if member.replaced_by and member.replacement_gone)
    running = [member for member in alive if member not in pending]
    current = len(running)
    headroom = None if node_limit is None else node_limit - len(members)
    step = StaticStep(nodepool, current, replicas, finish=finish, unmark=unmark)
    notes = [f"{len(pending)} being replaced (drifted)"] if pending else []
    counted = f"{current} nodeclaim(s)" + (f" ({', '.join(notes)})" if notes else "")
    if current > replicas:
        chosen = deletion_order(running)[: current - replicas]
        picks = ", ".join(f"{member.name} ({_why_deleted(member)})" for member in chosen)
        return replace(
            step,
            delete=tuple(member.name for member in chosen),
            reason=f"{counted}, {replicas} desired: deleting {picks}",
        )
    wanted = replicas - current - len(pending)
    if wanted > 0:
        granted = wanted if headroom is None else max(0, min(wanted, headroom))
        limit = (
            "" if granted == wanted else f" (limits.nodes {node_limit}, {len(members)} nodeclaim(s) exist)"
        )
        reason = f"{counted}, {replicas} desired: creating {granted}{limit}"
        return replace(step, create=granted, limited=granted < wanted, reason=reason)
    drifted = [member for member in running if member.drift and member.launched]
    if not drifted or current + len(pending) > replicas:
        return replace(
            step, reason=f"{counted}, as desired" + ("; replacing drifted nodes" if finish else "")
        )
    allowed = [len(drifted)]
    if drift_budget is not None:
        allowed.append(drift_budget)
    if headroom is not None:
        allowed.append(max(0, headroom))
    chosen = drifted[: min(allowed)]
    if not chosen:
        why = (
            "the Drifted budget allows none" if drift_budget == 0 else f"limits.nodes {node_limit} is reached"
        )
        return replace(step, reason=f"{counted}, as desired; {len(drifted)} drifted, not replaced: {why}")
    picks = ", ".join(f"{member.name} ({member.drift})" for member in chosen)
    return replace(
        step,
        create=len(chosen),
        replace=tuple(member.name for member in chosen),
        reason=f"{counted}, as desired; replacing drifted {picks}",
    )


@dataclass(frozen=True, slots=True)
class StaticTemplate:
    """The NodeClaim a static pool launches, or why it cannot launch one; `left_out` as in a snapshot."""

    claim: NewNodeClaim | None
    reason: str = ""
    left_out: dict[str, str] | None = None


def static_template(manifests: Manifests, pool: NodePool, provider: InstanceTypeProvider) -> StaticTemplate:
    """The NodeClaim the scheduler would make for an empty node of the pool: every instance type its
    requirements allow that fits its DaemonSets, launched at the cheapest compatible offering. Pods have no part
    in it: a static pool's size is its `replicas`, whatever is pending."""
    dynamic = pool.model_copy(update={"spec": pool.spec.model_copy(update={"replicas": None})})
    alone = Manifests(nodepools=[dynamic], nodeclasses=manifests.nodeclasses, daemonsets=manifests.daemonsets)
    snapshot = build_snapshot(alone, provider)
    # A pod with no requests that tolerates every taint: it fits any node of the pool, so the scheduler's
    # NodeClaim for it is that of an empty node.
    placeholder = Pod(
        metadata=ObjectMeta(name=f"static-{pool.name}", namespace="karpenter"),
        spec=PodSpec(tolerations=[Toleration(operator=TolerationOperator.EXISTS)]),
    )
    results = Scheduler(snapshot.nodepools, snapshot.instance_types, (), snapshot.daemonsets).solve(
        [placeholder]
    )
    left_out = snapshot.left_out.get(pool.name)
    launchable = [claim for claim in results.nodeclaims if claim.launch_candidates]
    if not launchable:
        why = "; ".join(reason for entry in results.unschedulable for reason in entry.reasons)
        return StaticTemplate(
            None, why or "no instance type of the NodePool has an available offering", left_out
        )
    claim = launchable[0]
    # The placeholder is no pod of the node's: its requests are the DaemonSets' alone.
    requests = {name: amount - 1 if name == "pods" else amount for name, amount in claim.requests.items()}
    return StaticTemplate(replace(claim, pods=[], requests=requests), left_out=left_out)


def static_members(manifests: Manifests, pool: NodePool, now: datetime) -> list[StaticMember]:
    """The pool's NodeClaims as a step sees them: pods on their Nodes, do-not-disrupt, cost, drift, replacement."""
    on_node: dict[str, list[Pod]] = {}
    for pod in manifests.pods:
        if pod.spec.node_name:
            on_node.setdefault(pod.spec.node_name, []).append(pod)
    nodes = {node.metadata.name: node for node in manifests.nodes}
    nodeclasses = {nodeclass.name: nodeclass for nodeclass in manifests.nodeclasses}
    claims = {claim.name: claim for claim in manifests.nodeclaims}
    members = []
    for claim in pool_nodeclaims(manifests, pool.name):
        pods = on_node.get(claim.status.node_name or "", [])
        moving = [pod for pod in pods if is_reschedulable(pod)]
        node = nodes.get(claim.status.node_name or "")
        drift = None
        if node is not None and claim.is_true(NodeClaimConditionType.INITIALIZED):
            found = detect_drift(claim, node, pool, nodeclasses.get(claim.node_class_ref.name), DriftInputs())
            drift = found.message if found is not None else None
        replaced_by = claim.metadata.annotations.get(REPLACEMENT_ANNOTATION) or None
        replacement = claims.get(replaced_by or "")
        members.append(
            StaticMember(
                name=claim.name,
                launched=bool(claim.status.provider_id),
                deleting=claim.metadata.deletion_timestamp is not None,
                empty=not moving,
                do_not_disrupt=any(do_not_disrupt(pod, now) for pod in pods),
                cost=reschedule_cost(moving) * lifetime_remaining(pool, claim, now),
                drift=drift,
                replaced_by=replaced_by,
                replacement_ready=replacement is not None
                and replacement.is_true(NodeClaimConditionType.INITIALIZED),
                replacement_gone=replaced_by is not None
                and (replacement is None or replacement.metadata.deletion_timestamp is not None),
            )
        )
    return members


def pool_nodeclaims(manifests: Manifests, nodepool: str) -> list[NodeClaim]:
    """The NodeClaims the pool's label names, those being deleted included."""
    return [claim for claim in manifests.nodeclaims if claim.labels.get(labels.NODEPOOL) == nodepool]


def node_limit(pool: NodePool) -> int | None:
    """`limits.nodes`, the only limit a static pool may have (None: unlimited)."""
    value = (pool.spec.limits or {}).get("nodes")
    return None if value is None else to_units(value)


def plan_pool(manifests: Manifests, pool: NodePool, now: datetime) -> StaticStep:
    """The step the pool needs now (`nodewright schedule` shows it without taking it)."""
    members = static_members(manifests, pool, now)
    alive = [member for member in members if not member.deleting]
    replacing = sum(1 for member in alive if member.replaced_by and not member.replacement_gone)
    # Nodes being deleted or replaced are disrupting already: they use the budget up, as in Karpenter.
    disrupting = replacing + len(members) - len(alive)
    budget = budget_limit(pool, DisruptionReason.DRIFTED, len(members), now).allowed(disrupting)
    return plan_static(pool.name, pool.spec.replicas or 0, node_limit(pool), members, budget)


def gate_off_message(nodepool: str, replicas: int) -> str:
    """What is said of a static NodePool while the StaticCapacity feature gate is off: the controller's warning
    (log and event) and the what-if commands' warning."""
    return (
        f"NodePool {nodepool}: spec.replicas is {replicas} but the StaticCapacity feature gate is off "
        "(FEATURE_GATES): the static NodePool is not acted on"
    )


@dataclass(frozen=True, slots=True)
class StaticPreview:
    """What the static NodePools would do now, for the what-if commands."""

    pools: list[dict[str, object]]
    """Per static pool: its step, and the NodeClaim it launches when it creates any (the `static` section)."""
    price_micros: int = 0
    """What the NodeClaims they would create cost per hour, each at its launch offering."""


def static_preview(manifests: Manifests, provider: InstanceTypeProvider, now: datetime) -> StaticPreview:
    """What each static NodePool would do now: its step, and the NodeClaim it launches when it creates any (the
    cheapest offering for an empty node)."""
    previews: list[dict[str, object]] = []
    price_micros = 0
    for pool in manifests.nodepools:
        if not pool.is_static or pool.metadata.deletion_timestamp is not None:
            continue
        step = plan_pool(manifests, pool, now)
        preview: dict[str, object] = {
            "nodepool": pool.name,
            "replicas": step.desired,
            "current": step.current,
            "create": step.create,
            "delete": list(step.delete),
            "limited": step.limited,
            "reason": step.reason,
        }
        if step.create:
            template = static_template(manifests, pool, provider)
            if template.claim is None:
                preview["error"] = template.reason
            else:
                first = template.claim.launch_candidates[0]
                price_micros += step.create * first.offering.price_micros
                preview["nodeclaim"] = {
                    "instance_type": first.instance_type,
                    "zone": first.offering.zone,
                    "capacity_type": first.offering.capacity_type,
                    "price_per_hour": first.offering.price_micros / 1_000_000,
                    "instance_type_options": len(template.claim.instance_type_options),
                }
        previews.append(preview)
    return StaticPreview(previews, price_micros)
