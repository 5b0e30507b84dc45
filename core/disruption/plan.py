"""What Karpenter would disrupt now, in what order, and why everything else stays.

`plan_disruption` reads a cluster snapshot (NodePools, NodeClaims, Nodes, pods, PDBs, AKSNodeClasses and
DaemonSets) and returns the commands Karpenter's disruption loop would start one after the other at
`now`: expired NodeClaims first (forcefully), then emptiness, drift, multi-node and single-node
consolidation, each within the NodePools' budgets, PDBs and do-not-disrupt annotations. Every node no
command takes is listed with the reasons it stays. `nodewright plan-disruption`, manual consolidation and
the disruption workflow all use this function; it reads no clock and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from core.api.kube import Pod, pod_key
from core.api.manifests import Manifests
from core.capacity_buffer import buffer_report, destinations, is_virtual
from core.disruption.bound import PlanCost, cluster_bound
from core.disruption.budgets import Budgets, BudgetStatus
from core.disruption.candidates import find_candidates, is_reschedulable, staying_pods
from core.disruption.commands import Blocked, Command, Method
from core.disruption.cost import nodepool_costs
from core.disruption.methods import (
    drift,
    emptiness,
    expire,
    multi_node_consolidation,
    single_node_consolidation,
)
from core.disruption.options import DisruptionOptions
from core.disruption.pdb import PdbLimits
from core.disruption.repack import repack
from core.disruption.repair import RefusedRepair, Repair, RepairPlan, plan_repairs
from core.disruption.replacements import Catalog
from core.disruption.simulation import Sandbox
from core.disruption.state import PlanState
from core.instancetypes.overlay import OverlayVerdict
from core.instancetypes.types import dollars
from core.scheduling.scheduler import Scheduler
from core.scheduling.snapshot import InstanceTypeProvider, SchedulingSnapshot, build_snapshot

METHODS = (
    (Method.EXPIRATION, expire),
    (Method.EMPTINESS, emptiness),
    (Method.DRIFT, drift),
    (Method.MULTI_NODE_CONSOLIDATION, multi_node_consolidation),
    (Method.SINGLE_NODE_CONSOLIDATION, single_node_consolidation),
    (Method.REPACK, repack),
)
"""The methods in the order a plan runs them: Karpenter's, then the repack on what they left."""


def repair_json(repair: Repair) -> dict[str, object]:
    return {
        "node": repair.node,
        "nodeclaim": repair.nodeclaim,
        "nodepool": repair.nodepool,
        "condition": repair.condition,
        "since": repair.since.isoformat() if repair.since else None,
        "message": repair.message,
    }


def refused_json(refused: RefusedRepair) -> dict[str, object]:
    return {
        "node": refused.node,
        "nodeclaim": refused.nodeclaim,
        "nodepool": refused.nodepool,
        "condition": refused.condition,
        "unhealthy": refused.unhealthy,
        "total": refused.total,
        "allowed": refused.allowed,
        "message": refused.message,
    }


@dataclass(frozen=True, slots=True)
class DisruptionPlan:
    commands: tuple[Command, ...]
    """In the order they would start."""
    blocked: tuple[Blocked, ...]
    """Every node no command takes, by name."""
    budgets: tuple[BudgetStatus, ...]
    notes: tuple[str, ...]
    repairs: RepairPlan = field(default_factory=RepairPlan)
    """Node repair's decisions, when the options ask for it: forceful, outside budgets and validation."""
    overlays: dict[str, OverlayVerdict] = field(default_factory=dict)
    """Each NodeOverlay's verdict, by name, as the plan applied them (`core.instancetypes.overlay`)."""
    buffers: tuple[dict[str, object], ...] = ()
    """Each CapacityBuffer, and where its virtual pods stand (`core.capacity_buffer.buffer_report`)."""
    costs: dict[str, int] = field(default_factory=dict)
    """What each NodePool's NodeClaims cost per hour now, in micro-dollars (`core.disruption.cost`)."""
    cost: PlanCost | None = None
    """The cluster's cost now and after the plan, and the bound no plan made now can beat (with the repack's
    options)."""

    @property
    def savings_micros(self) -> int:
        """What the commands save per hour together."""
        return sum(command.savings_micros for command in self.commands)

    def to_json(self) -> dict[str, object]:
        return {
            "commands": [command.to_json() for command in self.commands],
            "blocked": [blocked.to_json() for blocked in self.blocked],
            "budgets": [status.to_json() for status in self.budgets],
            "total_savings_per_hour": round(dollars(self.savings_micros), 6),
            "notes": list(self.notes),
            "repairs": [repair_json(repair) for repair in self.repairs.repairs],
            "refused_repairs": [refused_json(refused) for refused in self.repairs.refused],
            **({"buffers": list(self.buffers)} if self.buffers else {}),
            **({"cost": self.cost.to_json()} if self.cost is not None else {}),
        }


def plan_disruption(
    snapshot: Manifests,
    instance_types: InstanceTypeProvider,
    options: DisruptionOptions,
    now: datetime,
) -> DisruptionPlan:
    """The disruption commands Karpenter would start at `now`, in order, and why the other nodes stay.

    `instance_types` gives each NodePool's instance types from its AKSNodeClass, as for scheduling.

    CapacityBuffers' virtual pods are placed first as a provisioning pass would place them, and stand on the
    nodes that hold them like running pods: a node holding buffer room is not empty, and consolidation must
    find them room elsewhere before it takes the node (Karpenter simulates them among the pending pods)."""
    if options.repack is not None and options.repack.clock is not None:
        # The repack's deadline counts from here: Karpenter's methods' time is part of the plan's.
        options = replace(options, repack=replace(options.repack, started=options.repack.clock()))
    scheduling = build_snapshot(snapshot, instance_types)
    buffers = scheduling.buffers
    where: dict[str, str] = {}
    if buffers:
        snapshot, where = _hold_buffer_room(snapshot, scheduling, options)
        scheduling = build_snapshot(snapshot, instance_types)
    report = find_candidates(snapshot, scheduling.listed_instance_types, options.drift, now)
    pdbs = PdbLimits(snapshot.pdbs, snapshot.pods)
    candidates = [*report.candidates, *report.expiring]
    staying = {candidate.name: staying_pods(candidate, pdbs, now) for candidate in candidates}
    movable: dict[str, list[Pod]] = {}
    for candidate in candidates:
        stays = staying[candidate.name]
        movable[candidate.name] = [
            pod for pod in candidate.reschedulable if not stays or pod_key(pod) not in stays
        ]
    for node in report.leaving:
        movable[node] = [pod for pod in report.pods.get(node, ()) if is_reschedulable(pod)]
    sandbox = Sandbox(scheduling, movable, options.scheduling)
    state = PlanState(
        report=report,
        sandbox=sandbox,
        budgets=Budgets(snapshot.nodepools, report.totals, report.disrupting, now),
        pdbs=pdbs,
        catalogs={pool: Catalog(types) for pool, types in sandbox.instance_types().items()},
        options=options,
        staying=staying,
    )
    state.settle(report.leaving)
    repack = options.repack
    bound = cluster_bound(state, repack.eventual_bound) if repack is not None else None
    for method, run in METHODS:
        if method in options.methods:
            run(state)
    notes = list(scheduling.notes)
    if scheduling.pending:
        notes.append(
            f"{len(scheduling.pending)} pending pods are left to the provisioner: "
            "disruption only moves pods that are running"
        )
    repairs = RepairPlan()
    if options.repair is not None:
        repairs = plan_repairs(snapshot.nodes, snapshot.nodeclaims, now, options.repair)
        if options.nodepools is not None:
            pools = options.nodepools
            repairs = RepairPlan(
                repairs=tuple(r for r in repairs.repairs if r.nodepool in pools),
                refused=tuple(r for r in repairs.refused if r.nodepool in pools),
                next_check=repairs.next_check,
            )
    return DisruptionPlan(
        commands=tuple(state.commands),
        blocked=tuple(state.blocked()),
        budgets=tuple(state.budgets.statuses()),
        notes=tuple(notes),
        repairs=repairs,
        overlays=scheduling.overlays,
        buffers=tuple(buffer_report(buffers, where)),
        costs=nodepool_costs(
            (pool.name for pool in snapshot.nodepools), snapshot.nodeclaims, scheduling.listed_instance_types
        ),
        cost=_cost(bound, state),
    )


def _cost(bound: tuple[int, int, bool] | None, state: PlanState) -> PlanCost | None:
    if bound is None:
        return None
    now, lowest, exact = bound
    after = now - sum(command.savings_micros for command in state.commands)
    # A plan's own cost is the best witness: the bound is never above it.
    return PlanCost(now, after, min(lowest, after), exact)


def _hold_buffer_room(
    snapshot: Manifests, scheduling: SchedulingSnapshot, options: DisruptionOptions
) -> tuple[Manifests, dict[str, str]]:
    """The snapshot with the virtual pods a provisioning pass places on existing Nodes bound to them (those it
    would place elsewhere left out: they are the provisioner's), and where each virtual pod went."""
    scheduler = Scheduler(
        scheduling.nodepools,
        scheduling.instance_types,
        scheduling.nodes,
        scheduling.daemonsets,
        options.scheduling,
    )
    results = scheduler.solve(scheduling.pending)
    where = destinations(
        ((p.node, p.pods) for p in results.existing),
        ((f"{i + 1} ({c.nodepool}, {c.instance_type})", c.pods) for i, c in enumerate(results.nodeclaims)),
        ((u.pod, u.reasons) for u in results.unschedulable),
    )
    virtual = {pod_key(pod): pod for pod in scheduling.pending if is_virtual(pod)}
    nodes = {node.metadata.name for node in snapshot.nodes}
    bound = [
        virtual[pod].model_copy(update={"spec": virtual[pod].spec.model_copy(update={"node_name": p.node})})
        for p in results.existing
        if p.node in nodes
        for pod in p.pods
        if pod in virtual
    ]
    return replace(snapshot, pods=[*snapshot.pods, *bound], capacitybuffers=[]), where
