"""`nodewright consolidate`: manual consolidation, planned by a workflow, shown, confirmed, executed.

It starts a manual disruption workflow (`consolidation/<cluster>/<time>`) on the configured Temporal: one
pass of Karpenter's consolidation methods (budgets and PDBs apply), printed as `nodewright plan-disruption`
prints a plan. A dry run stops there. Otherwise it asks before executing (unless `--yes`), signals the
answer, waits for the commands to finish and prints what became of each. The workflow's `plan` query, and
its result, keep the plan readable afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from core import summaries
from core.disruption.commands import format_price
from core.features import MinValuesPolicy
from core.messages import (
    CommandOutcome,
    DisruptionInput,
    DisruptionMode,
    DisruptionSettings,
    DisruptionStatus,
    LifecycleSettings,
    RepackSettings,
)
from workers.planner_flags import add_min_values_argument, add_repack_argument, add_spot_to_spot_argument
from workers.settings import Settings
from workers.tables import render_disruption_table

Ask = Callable[[str], str]
"""Asks a person a question and returns the answer (`input`, or a stand-in in tests)."""


def disruption_settings(settings: Settings) -> DisruptionSettings:
    """The disruption workflows' timings, feature gates and minValues policy from the process settings."""
    gates = settings.gates
    return DisruptionSettings(
        poll_seconds=settings.disruption_poll_seconds,
        validation_seconds=settings.disruption_validation_seconds,
        spot_to_spot_consolidation=gates.spot_to_spot_consolidation,
        node_repair=gates.node_repair,
        min_values_policy=settings.min_values_policy,
        repair_not_ready_seconds=settings.repair_not_ready_seconds,
        repack=repack_settings(settings),
    )


def repack_settings(settings: Settings) -> RepackSettings:
    """The repack's settings from the process settings."""
    return RepackSettings(
        enabled=settings.repack_enabled,
        min_savings_micros=round(settings.repack_min_savings_per_hour * 1_000_000),
        min_savings_percent=settings.repack_min_savings_percent,
        max_pods_moved=settings.repack_max_pods_moved,
        deadline_seconds=settings.repack_deadline_seconds,
    )


def lifecycle_settings(settings: Settings) -> LifecycleSettings:
    """The NodeClaim lifecycles' liveness from the process settings (their other waits keep their defaults)."""
    return LifecycleSettings(
        registration_ttl_seconds=settings.registration_ttl_seconds,
        launch_timeout_seconds=settings.launch_timeout_seconds,
    )


def disruption_input(settings: Settings) -> DisruptionInput:
    """The automatic disruption loop the controller starts."""
    return DisruptionInput(
        cluster=settings.cluster_name,
        settings=disruption_settings(settings),
        lifecycle=lifecycle_settings(settings),
    )


def add_consolidate_parser(commands: Any) -> None:
    """Register `nodewright consolidate` on the CLI's subcommands."""
    parser = commands.add_parser(
        "consolidate",
        help="consolidate the cluster now: plan, show, confirm, execute (as a workflow)",
        description="Runs Karpenter's consolidation methods once on the running cluster, within budgets and "
        "PDBs, as a workflow on the configured Temporal (NODEWRIGHT_* variables). Prints the plan with savings "
        "and reasons, asks before executing unless --yes, and prints what became of each command.",
    )
    parser.add_argument("--nodepool", action="append", default=[], help="only these NodePools (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")
    parser.add_argument("--yes", action="store_true", help="execute without asking")
    add_spot_to_spot_argument(parser)
    add_repack_argument(parser)
    add_min_values_argument(parser)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(handler=consolidate_command)


def consolidate_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.logs import setup_logging
    from workers.settings import load_settings
    from workers.worker import connect_configured

    setup_logging(err)
    settings = load_settings()
    flags: dict[str, Any] = {}
    if args.spot_to_spot is not None:
        flags["spot_to_spot_consolidation"] = args.spot_to_spot
    if args.min_values_policy is not None:
        flags["min_values_policy"] = MinValuesPolicy(args.min_values_policy)
    if args.repack is not None:
        flags["repack"] = repack_settings(settings).model_copy(update={"enabled": args.repack})

    async def run() -> int:
        client = await connect_configured(settings.temporal_connection())
        request = DisruptionInput(
            cluster=settings.cluster_name,
            mode=DisruptionMode.MANUAL,
            nodepools=list(args.nodepool),
            dry_run=args.dry_run,
            settings=disruption_settings(settings).model_copy(update=flags),
        )
        return await consolidate(client, settings.task_queue, request, args.yes, args.output, out, input)

    return asyncio.run(run())


async def consolidate(
    client: Any,
    task_queue: str,
    request: DisruptionInput,
    yes: bool,
    output: str,
    out: TextIO,
    ask: Ask,
    workflow_id: str | None = None,
) -> int:
    """Start the manual workflow, print its plan, confirm, wait and print the results; the exit code."""
    from workflows.disruption import DisruptionWorkflow, consolidation_id

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    handle = await client.start_workflow(
        DisruptionWorkflow.run,
        request,
        id=workflow_id or consolidation_id(request.cluster, stamp),
        task_queue=task_queue,
        static_summary=summaries.disruption_summary(request),
        static_details=summaries.disruption_details(request),
    )
    status = await _planned(handle)
    assert status.plan is not None
    plan = status.plan
    if output == "table":
        print(f"Consolidation plan (workflow {handle.id}):", file=out)
        render_disruption_table(plan, out, out)
    if request.dry_run or not plan.commands:
        status = await handle.result()
        if output == "json":
            _write_json(status, out)
        return 0
    confirmed = yes or _confirm(plan.commands, plan.savings_micros, ask)
    await handle.signal(DisruptionWorkflow.confirm, confirmed)
    status = await handle.result()
    if output == "json":
        _write_json(status, out)
    else:
        print("Results:", file=out)
        for result in status.results:
            detail = f": {result.detail}" if result.detail else ""
            replaced = f" (replacements: {', '.join(result.replacements)})" if result.replacements else ""
            print(f"  {result.outcome.value}{replaced}{detail} - {result.command.message}", file=out)
            if result.steered is not None:
                print(f"    {summaries.steered_drain(result.steered)}", file=out)
    if not confirmed:
        return 1
    return 0 if all(result.outcome is CommandOutcome.EXECUTED for result in status.results) else 1


async def _planned(handle: Any) -> DisruptionStatus:
    """The workflow's status once its plan is made (from the query while it waits, or its result)."""
    from workflows.disruption import DisruptionWorkflow

    while True:
        status: DisruptionStatus = await handle.query(DisruptionWorkflow.plan)
        if status.plan is not None:
            return status
        await asyncio.sleep(0.2)


def _confirm(commands: list[Any], savings_micros: int, ask: Ask) -> bool:
    question = f"Execute {len(commands)} command(s) saving {format_price(savings_micros)}/h? [y/N] "
    try:
        answer = ask(question)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _write_json(status: DisruptionStatus, out: TextIO) -> None:
    json.dump(status.model_dump(mode="json"), out, indent=2)
    out.write("\n")
