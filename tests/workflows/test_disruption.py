"""The disruption workflows on the dev server against the simulated AKS: emptiness deletes, consolidation
replaces (replacement initialized before the candidate goes), rollback when the replacement cannot launch,
validation that abandons a command when the cluster changed, budgets that block with events, unchanged passes,
and manual consolidation (dry run, confirmation)."""

from __future__ import annotations

import asyncio
import contextlib
import io
from datetime import UTC, datetime
from typing import Any

import yaml
from temporalio.client import WorkflowHandle

from core import labels
from core.disruption.commands import format_price
from core.messages import (
    ActivityName,
    CommandOutcome,
    DisruptedCandidate,
    DisruptionCommand,
    DisruptionInput,
    DisruptionMode,
    DisruptionPassRecord,
    DisruptionSettings,
    DisruptionStatus,
    KeptNode,
    KeptReason,
    Phase,
    PlannedReplacement,
    TerminationReason,
)
from simulator.arm import Fault
from tests.cluster import events
from tests.workflows.conftest import (
    FAST,
    PAUSE,
    TIMER,
    System,
    activity_calls,
    condition,
    current_details,
    decode,
    eventually,
    example_manifests,
    fresh_name,
    in_phase,
    offering,
    planned_claim,
    start_input,
    started,
    step_summaries,
)
from workers.consolidate import consolidate
from workers.controller import Controller
from workflows.disruption import DisruptionWorkflow, consolidation_id, disruption_id, kept_event, validate
from workflows.nodeclaim import NodeClaimWorkflow
from workflows.provisioner import nodeclaim_id

SETTINGS = DisruptionSettings(
    poll_seconds=0.5, validation_seconds=1, replacement_timeout_seconds=60, activity_timeout_seconds=30
)
BIG = "Standard_D16s_v5"
"""An on-demand node far larger (and dearer) than one small pod needs: consolidation replaces it."""


def manifests(budgets: list[dict[str, str]] | None = None) -> str:
    """deploy/examples with consolidation at once (consolidateAfter 0s), no expiry and no node agent."""
    documents = [
        d for d in yaml.safe_load_all(example_manifests(expireAfter="Never")) if d["kind"] != "DaemonSet"
    ]
    for document in documents:
        if document["kind"] == "NodePool":
            document["spec"]["disruption"]["consolidateAfter"] = "0s"
            if budgets is not None:
                document["spec"]["disruption"]["budgets"] = budgets
    return yaml.safe_dump_all(documents)


def small_app(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """One small pod (100m), optionally annotated."""
    template: dict[str, Any] = {"labels": {"app": name}}
    if annotations:
        template["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": template,
                "spec": {
                    "containers": [
                        {"name": "app", "image": PAUSE, "resources": {"requests": {"cpu": "100m"}}}
                    ]
                },
            },
        },
    }


async def running_node(system: System, instance_type: str = "Standard_D2s_v5") -> tuple[str, str]:
    """A NodeClaim of `instance_type` (on-demand, eastus-1) up and initialized: (nodeclaim, node)."""
    name = fresh_name("old")
    handle = await system.start_nodeclaim(planned_claim(name, [offering("eastus-1", instance_type)]))
    status = await eventually(lambda: in_phase(handle, Phase.RUNNING), what=f"{name} running")
    assert status.node is not None
    return name, status.node


async def start(
    system: System, mode: DisruptionMode = DisruptionMode.AUTOMATIC, **fields: Any
) -> WorkflowHandle[DisruptionWorkflow, DisruptionStatus]:
    fields.setdefault("settings", SETTINGS)
    request = DisruptionInput(cluster=system.cluster, mode=mode, lifecycle=FAST, **fields)
    workflow_id = (
        disruption_id(system.cluster)
        if mode is DisruptionMode.AUTOMATIC
        else consolidation_id(system.cluster, fresh_name("t"))
    )
    return await system.client.start_workflow(
        DisruptionWorkflow.run, request, id=workflow_id, task_queue=system.task_queue
    )


async def result_with(
    handle: WorkflowHandle[DisruptionWorkflow, DisruptionStatus], outcome: CommandOutcome
) -> DisruptionStatus | None:
    status = await handle.query(DisruptionWorkflow.plan)
    return status if any(result.outcome is outcome for result in status.results) else None


async def taints(system: System, node: str) -> list[str]:
    found = await system.node(node)
    return [] if found is None else [taint.key for taint in found.spec.taints]


async def events_about(system: System, name: str, reason: str) -> list[str]:
    """The notes of the `events.k8s.io/v1` events with this reason about the object of this name."""
    return [event.get("note", "") for event in await events(system.kube, reason, [name])]


async def underutilized(system: System) -> tuple[str, str]:
    """A big on-demand node running one small pod: (nodeclaim, node)."""
    await system.kube.apply(manifests())
    claim, node = await running_node(system, BIG)
    await system.kube.apply([small_app("small")])
    [pod] = await eventually(lambda: system.running("small", 1), what="the small pod running")
    assert pod.spec.node_name == node
    return claim, node


# --- automatic -----------------------------------------------------------------------------------------------


async def test_an_empty_node_is_deleted(system: System) -> None:
    await system.kube.apply(manifests())
    claim, node = await running_node(system)
    handle = await start(system)

    await eventually(lambda: system.gone(claim, node), timeout=20, what=f"{claim} gone")
    status = await eventually(
        lambda: result_with(handle, CommandOutcome.EXECUTED), what="an executed command"
    )
    [result] = status.results
    assert (result.command.method, result.command.reason, result.command.decision) == (
        "emptiness",
        "Empty",
        "delete",
    )
    assert [c.node for c in result.command.candidates] == [node]
    assert result.command.message.startswith("disrupting via emptiness delete, terminating 1 nodes (0 pods)")
    deleted = system.deleted_claim(claim)
    assert deleted is not None and condition(deleted, "DisruptionReason") == ("True", "Empty")
    await handle.terminate()


async def test_an_underutilized_node_is_replaced_by_a_cheaper_one_initialized_first(system: System) -> None:
    claim, node = await underutilized(system)
    handle = await start(system)

    status = await eventually(
        lambda: result_with(handle, CommandOutcome.EXECUTED), timeout=30, what="an executed command"
    )
    [result] = status.results
    command = result.command
    assert (command.reason, command.decision) == ("Underutilized", "replace")
    assert command.savings_micros > 0
    [replacement] = result.replacements
    await eventually(lambda: system.gone(claim, node), timeout=20, what=f"{claim} gone")
    [pod] = await eventually(lambda: system.running("small", 1), timeout=20, what="the pod moved")
    new = await system.nodeclaim(replacement)
    assert new is not None and pod.spec.node_name == new.status.node_name
    assert new.labels[labels.CAPACITY_TYPE] == "spot"  # a replacement that may be spot is spot
    # The replacement was initialized before the candidate was told to go (its DisruptionReason condition).
    initialized = _first(
        system, replacement, lambda c: condition(c, "Initialized") == ("True", "Initialized")
    )
    disrupted = _first(system, claim, lambda c: condition(c, "DisruptionReason") is not None)
    assert initialized < disrupted
    assert await events_about(system, replacement, "DisruptionLaunching") == [
        "Launching NodeClaim: Underutilized"
    ]
    assert await events_about(system, node, "DisruptionTerminating") == ["Disrupting Node: Underutilized"]
    # The candidate's lifecycle says which command ended it; the command's steps say what each was for.
    ended = await system.client.get_workflow_handle_for(NodeClaimWorkflow.run, nodeclaim_id(claim)).result()
    assert (ended.termination_reason, ended.reason) == (
        TerminationReason.UNDERUTILIZED,
        f"disrupted via consolidation replace (Underutilized) by {disruption_id(system.cluster)}",
    )
    saves = f"(saves {format_price(command.savings_micros)}/h)"
    steps = await step_summaries(system.client, handle)
    for step in [
        (TIMER, f"wait 1s validation: consolidation replace of {node}"),
        (ActivityName.PLAN_DISRUPTION, f"validate consolidation replace of {node}"),
        ("taint_disruption_candidates", f"taint {node} for consolidation replace {saves}"),
        ("launch_disruption_replacements", f"launch 1 replacement for {node}"),
        ("disruption_replacement_progress", f"check replacements {replacement} are initialized"),
    ]:
        assert step in steps, (step, steps)
    assert steps[0] == (ActivityName.PLAN_DISRUPTION, "plan disruption pass 1")
    await handle.terminate()


def _first(system: System, name: str, check: Any) -> int:
    from core.api.nodeclaim import NodeClaim

    for index, event in enumerate(system.events):
        if event.kind == "NodeClaim" and event.name == name and check(NodeClaim.parse(event.object)):
            return index
    raise AssertionError(f"no watch event of {name} matched")


async def test_validation_abandons_a_command_when_a_pod_arrives_during_the_wait(system: System) -> None:
    await system.kube.apply(manifests())
    claim, node = await running_node(system)
    handle = await start(system, settings=SETTINGS.model_copy(update={"validation_seconds": 3}))

    async def validating() -> bool:
        return (await handle.query(DisruptionWorkflow.plan)).waiting_for == "validation"

    await eventually(validating, what="the emptiness command waiting for validation")
    await system.kube.apply([small_app("arrives", {labels.DO_NOT_DISRUPT: "true"})])
    status = await eventually(
        lambda: result_with(handle, CommandOutcome.ABANDONED), timeout=15, what="an abandoned command"
    )
    [result] = status.results
    assert result.command.method == "emptiness"
    assert "do-not-disrupt pod default/arrives" in result.detail
    assert await system.nodeclaim(claim) is not None
    assert labels.DISRUPTED_TAINT not in await taints(system, node)
    await handle.terminate()


async def test_a_zero_budget_blocks_with_a_reason_an_event_and_unchanged_passes(system: System) -> None:
    await system.kube.apply(manifests(budgets=[{"nodes": "0"}]))
    claim, node = await running_node(system)
    handle = await start(system)

    messages = await eventually(
        lambda: events_about(system, node, "DisruptionBlocked"), timeout=15, what="a DisruptionBlocked event"
    )
    status = await handle.query(DisruptionWorkflow.plan)
    assert status.plan is not None
    [kept] = [kept for kept in status.plan.kept if kept.node == node]
    assert kept.reasons[0].code == "Budget"
    assert messages == [f"Cannot disrupt Node: {kept.reasons[0].message}"]

    async def unchanged_passes() -> list[DisruptionPassRecord]:
        plans = [call for call in await activity_calls(handle) if call.name == ActivityName.PLAN_DISRUPTION]
        records = [await decode(system.client, c.result, DisruptionPassRecord) for c in plans if c.result]
        return [record for record in records if record.unchanged]

    unchanged = await eventually(unchanged_passes, timeout=15, what="an unchanged pass")
    assert all(not record.commands and not record.kept for record in unchanged)
    # The event is not repeated while the reason stays the same.
    assert len(await events_about(system, node, "DisruptionBlocked")) == 1
    assert len(await events_about(system, claim, "DisruptionBlocked")) == 1
    assert await system.nodeclaim(claim) is not None
    await handle.terminate()


async def test_events_a_pass_had_no_room_for_are_sent_by_the_next_passes(system: System) -> None:
    await system.kube.apply(manifests(budgets=[{"nodes": "0"}]))
    first, second = await running_node(system), await running_node(system)
    # Room for one node's pair of events per pass: the other node's must still go out on a later pass.
    handle = await start(system, settings=SETTINGS.model_copy(update={"max_events_per_pass": 2}))

    for claim, node in (first, second):
        await eventually(
            lambda node=node: events_about(system, node, "DisruptionBlocked"),
            timeout=15,
            what=f"{node}'s event",
        )
        await eventually(lambda claim=claim: events_about(system, claim, "DisruptionBlocked"), timeout=15)
    await asyncio.sleep(2 * SETTINGS.poll_seconds)
    for claim, node in (first, second):
        assert len(await events_about(system, node, "DisruptionBlocked")) == 1
        assert len(await events_about(system, claim, "DisruptionBlocked")) == 1
    await handle.terminate()


async def test_the_loop_continues_as_new_carrying_its_passes(system: System) -> None:
    await system.kube.apply(manifests(budgets=[{"nodes": "0"}]))
    await running_node(system)
    handle = await start(system, settings=SETTINGS.model_copy(update={"passes_before_continue_as_new": 2}))

    async def carried() -> int:
        return (await start_input(system.client, handle, DisruptionInput)).passes

    assert await eventually(carried, timeout=15, what="a continued run") >= 2
    assert (await handle.query(DisruptionWorkflow.plan)).passes >= 2
    await handle.terminate()


# --- manual --------------------------------------------------------------------------------------------------


async def test_a_manual_dry_run_changes_nothing_and_the_query_returns_the_plan(system: System) -> None:
    claim, node = await underutilized(system)
    handle = await start(system, DisruptionMode.MANUAL, dry_run=True)

    result = await asyncio.wait_for(handle.result(), 20)
    queried = await handle.query(DisruptionWorkflow.plan)
    assert queried == result
    assert result.plan is not None
    [command] = result.plan.commands
    assert ([c.node for c in command.candidates], command.decision) == ([node], "replace")
    assert [r.outcome for r in result.results] == [CommandOutcome.DRY_RUN]
    assert [c.name for c in await system.nodeclaims()] == [claim]
    assert labels.DISRUPTED_TAINT not in await taints(system, node)
    saves = format_price(command.savings_micros)
    assert await current_details(handle) == (
        f"1 command planned (saves {saves}/h), {len(result.plan.kept)} nodes kept; 1 dry-run"
    )


async def test_a_confirmed_manual_consolidation_executes(system: System) -> None:
    claim, node = await underutilized(system)
    handle = await start(system, DisruptionMode.MANUAL)

    async def waiting() -> bool:
        return (await handle.query(DisruptionWorkflow.plan)).waiting_for == "confirmation"

    await eventually(waiting, what="the plan waiting for confirmation")
    await handle.signal(DisruptionWorkflow.confirm, True)
    result = await asyncio.wait_for(handle.result(), 30)
    [executed] = result.results
    assert executed.outcome is CommandOutcome.EXECUTED
    await eventually(lambda: system.gone(claim, node), timeout=20, what=f"{claim} gone")
    assert [c.name for c in await system.nodeclaims()] == executed.replacements


async def test_a_replacement_that_cannot_launch_rolls_back(system: System) -> None:
    claim, node = await underutilized(system)
    await system.aks.add_fault(Fault.sku_not_available())
    handle = await start(system, DisruptionMode.MANUAL)
    await eventually(lambda: _waiting_for(handle, "confirmation"), what="the plan waiting for confirmation")
    await handle.signal(DisruptionWorkflow.confirm, True)

    result = await asyncio.wait_for(handle.result(), 40)
    [rolled_back] = result.results
    assert rolled_back.outcome is CommandOutcome.ROLLED_BACK and rolled_back.replacements
    assert "failed" in rolled_back.detail
    [pod] = await system.running("small", 1)
    assert pod.spec.node_name == node
    assert labels.DISRUPTED_TAINT not in await taints(system, node)
    lifecycle = await system.nodeclaim_workflow(claim)
    assert await in_phase(lifecycle, Phase.RUNNING)
    for name in rolled_back.replacements:
        await eventually(lambda name=name: system.gone(name), timeout=10, what=f"{name} gone")


async def _waiting_for(handle: WorkflowHandle[DisruptionWorkflow, DisruptionStatus], what: str) -> bool:
    return (await handle.query(DisruptionWorkflow.plan)).waiting_for == what


# --- validation and events, without a server -----------------------------------------------------------------


def _command(method: str, decision: str, nodes: list[str], price: int | None = None) -> DisruptionCommand:
    replacements = [PlannedReplacement(nodepool="default", price_micros=price)] if price is not None else []
    return DisruptionCommand(
        method=method,
        reason="Empty" if method == "emptiness" else "Underutilized",
        decision=decision,
        candidates=[DisruptedCandidate(node=n, nodeclaim=f"claim-{n}", nodepool="default") for n in nodes],
        replacements=replacements,
    )


def _record(*commands: DisruptionCommand, kept: list[KeptNode] | None = None) -> DisruptionPassRecord:
    return DisruptionPassRecord(at=datetime(2026, 1, 1, tzinfo=UTC), commands=list(commands), kept=kept or [])


def test_validation_keeps_the_empty_nodes_that_are_still_empty() -> None:
    command = _command("emptiness", "delete", ["a", "b"])
    validated, _ = validate(command, _record(_command("emptiness", "delete", ["b", "c"])))
    assert validated is not None and [c.node for c in validated.candidates] == ["b"]
    kept = KeptNode(node="a", reasons=[KeptReason(code="DoNotDisruptPod", message="do-not-disrupt pod x/y")])
    validated, why = validate(_command("emptiness", "delete", ["a"]), _record(kept=[kept]))
    assert validated is None and why == "a: do-not-disrupt pod x/y"


def test_validation_needs_the_same_consolidation_no_dearer() -> None:
    command = _command("single-node-consolidation", "replace", ["a"], price=100)
    assert (
        validate(command, _record(_command("single-node-consolidation", "replace", ["a"], 90)))[0] == command
    )
    dearer = validate(command, _record(_command("single-node-consolidation", "replace", ["a"], 110)))
    assert dearer == (None, "the replacement would now cost more than planned")
    other = validate(command, _record(_command("single-node-consolidation", "delete", ["a"])))
    assert other == (None, "a fresh plan would now delete them by single-node-consolidation")
    joined = validate(command, _record(_command("multi-node-consolidation", "replace", ["a", "b"], 90)))
    assert joined == (None, "a fresh plan would now replace a by multi-node-consolidation")
    gone = validate(command, _record())
    assert gone == (None, "a fresh plan no longer chooses these candidates together")


def test_kept_nodes_get_blocked_or_unconsolidatable_events_and_states_get_none() -> None:
    def kept(*codes: str) -> KeptNode:
        return KeptNode(node="a", reasons=[KeptReason(code=code, message=code.lower()) for code in codes])

    assert kept_event(kept("ConsolidateAfter", "NotCheaper")) == ("Unconsolidatable", "notcheaper")
    assert kept_event(kept("Budget")) == ("DisruptionBlocked", "budget")
    assert kept_event(kept("NotInitialized")) is None


async def test_nodewright_consolidate_prints_the_plan_of_a_real_workflow(system: System) -> None:
    _, node = await underutilized(system)
    out = io.StringIO()
    request = DisruptionInput(
        cluster=system.cluster, mode=DisruptionMode.MANUAL, dry_run=True, settings=SETTINGS, lifecycle=FAST
    )

    code = await consolidate(system.client, system.task_queue, request, False, "table", out, never_asked)
    assert code == 0
    text = out.getvalue()
    assert "Disruption commands (1), in the order they would start:" in text
    assert (
        f"disrupting via consolidation replace, terminating 1 nodes (1 pods) {node}/{BIG}/on-demand" in text
    )
    assert labels.DISRUPTED_TAINT not in await taints(system, node)


def never_asked(question: str) -> str:
    raise AssertionError(f"asked {question!r}")


async def test_the_controller_starts_the_disruption_loop_once(system: System) -> None:
    request = DisruptionInput(cluster=system.cluster, settings=SETTINGS)
    handle = system.client.get_workflow_handle_for(DisruptionWorkflow.run, disruption_id(system.cluster))
    runs = []
    for _ in range(2):  # a restarted controller finds the loop running
        controller = Controller(
            system.client, system.kube, system.provisioner_input(), system.task_queue, disruption=request
        )
        task = asyncio.create_task(controller.run())
        await started(handle)
        await eventually(lambda: _passes(handle), what="the disruption loop running")
        runs.append((await handle.describe()).run_id)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert runs[0] == runs[1]
    await handle.terminate()


async def _passes(handle: WorkflowHandle[DisruptionWorkflow, DisruptionStatus]) -> int:
    return (await handle.query(DisruptionWorkflow.plan)).passes
