"""How the CLI shows plans to a person: the scheduling plan (`nodewright schedule`) and a disruption plan
(`nodewright plan-disruption`, `nodewright consolidate`), as tables and indented reasons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from core.api.meta import Taint
from core.instancetypes.types import dollars
from core.messages import DisruptionPassRecord, PlanCostRecord
from core.scheduling.results import SchedulingResults

SHOWN_LEFT_OUT = 5


def _taint_text(taint: Taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def _summary(items: list[str], shown: int = 5) -> str:
    return ", ".join(items[:shown]) + (f", ... ({len(items) - shown} more)" if len(items) > shown else "")


def render_table(
    results: SchedulingResults, out: TextIO, left_out: Mapping[str, Mapping[str, str]] | None = None
) -> None:
    """A person's view of the plan: new NodeClaims, pods on existing nodes, unschedulable pods, the instance
    types left out of each NodePool (`left_out`: why no image boots on them), total."""
    claims = results.nodeclaims
    if claims:
        rows = [("NODEPOOL", "INSTANCE-TYPE", "ZONE", "CAPACITY", "$/HOUR", "PODS", "OPTIONS")]
        for claim in claims:
            price = f"{dollars(claim.price_micros):.4f}" if claim.price_micros is not None else "-"
            rows.append(
                (
                    claim.nodepool,
                    claim.instance_type or "-",
                    claim.zone or "-",
                    claim.capacity_type or "-",
                    price,
                    str(len(claim.pods)),
                    str(len(claim.instance_type_options)),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        print(f"New NodeClaims ({len(claims)}):", file=out)
        for row in rows:
            print(
                "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
                file=out,
            )
        for index, claim in enumerate(claims, start=1):
            # Only CapacityBuffers' virtual pods (listed under CapacityBuffers) make a NodeClaim without pods.
            pods = f"pods {', '.join(claim.pods)}" if claim.pods else "no pods: room for CapacityBuffers"
            print(f"  [{index}] {claim.nodepool}/{claim.instance_type}: {pods}", file=out)
            print(f"      options (cheapest first): {_summary(claim.instance_type_options)}", file=out)
            if claim.taints:
                print(f"      taints: {', '.join(_taint_text(t) for t in claim.taints)}", file=out)
    else:
        print("New NodeClaims: none", file=out)
    if results.existing:
        print(f"Existing nodes receiving pods ({len(results.existing)}):", file=out)
        for placement in results.existing:
            print(f"  {placement.node}: {', '.join(placement.pods)}", file=out)
    if results.unschedulable:
        print(f"Unschedulable pods ({len(results.unschedulable)}):", file=out)
        for pod in results.unschedulable:
            print(f"  {pod.pod}:", file=out)
            for reason in pod.reasons:
                print(f"    - {reason}", file=out)
    for pool, refused in sorted((left_out or {}).items()):
        print(f"Instance types left out of NodePool {pool} ({len(refused)}):", file=out)
        names = sorted(refused)
        for name in names[:SHOWN_LEFT_OUT]:
            print(f"  {name}: {refused[name]}", file=out)
        if len(names) > SHOWN_LEFT_OUT:
            print(f"  ... ({len(names) - SHOWN_LEFT_OUT} more; -o json lists them all)", file=out)
    static = " (static NodePools' included)" if results.static_price_micros else ""
    print(f"Total for new NodeClaims{static}: ${dollars(results.total_price_micros):.4f}/hour", file=out)


def render_disruption_table(plan: DisruptionPassRecord, out: TextIO, err: TextIO) -> None:
    """A person's view of a disruption plan: the commands in order, every node kept and why, the savings.

    It takes the plan as the disruption workflows record it, so `nodewright consolidate` prints the same."""
    if plan.commands:
        print(f"Disruption commands ({len(plan.commands)}), in the order they would start:", file=out)
        for command in plan.commands:
            print(f"  {command.message}", file=out)
            if command.repack is not None:
                print(f"    why: {command.repack.message}", file=out)
                for line in (*command.repack.launched, *command.repack.receiving):
                    print(f"    {line}", file=out)
                continue
            for candidate in command.candidates:
                if candidate.detail:
                    print(f"    {candidate.node}: {candidate.detail}", file=out)
    else:
        print("Disruption commands: none", file=out)
    if plan.kept:
        print(f"Nodes kept ({len(plan.kept)}):", file=out)
        for kept in plan.kept:
            print(f"  {kept.node}: {'; '.join(reason.message for reason in kept.reasons)}", file=out)
    repairs = [repair for repair in plan.repairs if not repair.refused]
    refused = [repair for repair in plan.repairs if repair.refused]
    if repairs:
        print(f"Node repairs ({len(repairs)}), at once and forcefully:", file=out)
        for repair in repairs:
            print(f"  {repair.node} (NodeClaim {repair.nodeclaim}): {repair.message}", file=out)
    if refused:
        print(f"Node repairs refused ({len(refused)}):", file=out)
        for repair in refused:
            print(f"  {repair.node} ({repair.condition}): {repair.message}", file=out)
    for note in plan.notes:
        print(f"note: {note}", file=err)
    print(f"Savings: ${dollars(plan.savings_micros):.4f}/hour", file=out)
    if plan.cost is not None:
        print(cost_line(plan.cost), file=out)


def cost_line(cost: PlanCostRecord) -> str:
    """The cluster's cost now and after the plan, the bound no plan made now can beat, and the gap."""
    gap = cost.gap_micros
    percent = f", {100.0 * gap / cost.bound_micros:.1f}%" if cost.bound_micros else ""
    kind = "exact" if cost.exact else "linear relaxation"
    return (
        f"Cost: ${dollars(cost.now_micros):.4f}/hour now, ${dollars(cost.after_micros):.4f}/hour after the plan; "
        f"lower bound ${dollars(cost.bound_micros):.4f}/hour ({kind}), gap ${dollars(gap):.4f}/hour{percent}"
    )


def render_static_table(previews: Sequence[Mapping[str, Any]], out: TextIO) -> None:
    """What each static NodePool would do to reach its replicas (`core.static_capacity.static_preview`)."""
    if not previews:
        return
    print(f"\nStatic NodePools ({len(previews)}):", file=out)
    for preview in previews:
        claim = preview.get("nodeclaim")
        launch = ""
        if isinstance(claim, Mapping):
            launch = (
                f"; each {claim['instance_type']} {claim['capacity_type']} in {claim['zone']}"
                f" at ${claim['price_per_hour']:.4f}/h"
            )
        error = f"; cannot launch: {preview['error']}" if preview.get("error") else ""
        print(f"  {preview['nodepool']}: {preview['reason']}{launch}{error}", file=out)
