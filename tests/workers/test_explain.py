"""`nodewright explain`: the story of a node read back from real histories on the dev server.

A small system provisions a NodeClaim (its first offering out of capacity), a deletion ends it, and the story
says which pods it was for and why, which offering failed and which launched, and what removed it. The
disruption part is read from a stand-in disruption workflow whose `plan_disruption` activity returns canned
pass records, so the history has the real shape: spans of identical passes, unchanged passes, continue-as-new
runs, a manual consolidation, and the command that finally chose the node.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from core.messages import (
    DeletionRequested,
    DisruptedCandidate,
    DisruptionCommand,
    DisruptionPassRecord,
    DisruptNodeClaim,
    KeptNode,
    KeptReason,
    LifecycleInput,
    Phase,
    PlannedReplacement,
    RepackRecord,
)
from simulator.arm import Fault
from tests.workflows.conftest import (
    INSTANCE_TYPE,
    System,
    deployment,
    eventually,
    in_phase,
    pinned,
    running_system,
    start_input,
)
from workers.cli import main
from workers.controlplane.run import ControlPlane
from workers.explain import (
    DisruptionSpan,
    Explainer,
    ExplainError,
    Pass,
    Story,
    disruption_spans,
    explain,
    render_text,
)
from workflows.nodeclaim import NodeClaimWorkflow

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
"""When the canned passes say they ran (their records carry their own times)."""
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
BUDGET = "budget for Underutilized is 0 (default/Underutilized: 0 of 0 allowed)"
DO_NOT_DISRUPT = "pod default/web-1 has karpenter.sh/do-not-disrupt"


# --- a stand-in for the disruption workflow: passes whose records the test chose ----------------------------


class Passes(BaseModel):
    records: list[DisruptionPassRecord]
    per_run: int
    """Continue as new after this many passes, as the real loop does every so many."""
    dry_run: bool = False
    """As a manual consolidation's `DisruptionInput.dry_run`."""


@activity.defn(name="plan_disruption")
async def canned_plan(record: DisruptionPassRecord) -> DisruptionPassRecord:
    return record


@workflow.defn(name="FakeDisruption")
class FakeDisruption:
    @workflow.run
    async def run(self, passes: Passes) -> None:
        for record in passes.records[: passes.per_run]:
            await workflow.execute_activity(canned_plan, record, start_to_close_timeout=timedelta(seconds=10))
        if len(passes.records) > passes.per_run:
            workflow.continue_as_new(passes.model_copy(update={"records": passes.records[passes.per_run :]}))


async def run_fake_disruption(client: Client, task_queue: str, workflow_id: str, passes: Passes) -> None:
    await client.execute_workflow(FakeDisruption.run, passes, id=workflow_id, task_queue=task_queue)


def fake_worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FakeDisruption],
        activities=[canned_plan],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


def kept(node: str, *reasons: str, at: datetime) -> DisruptionPassRecord:
    return DisruptionPassRecord(
        at=at,
        kept=[
            KeptNode(
                node=node,
                nodeclaim=node,
                nodepool="default",
                reasons=[KeptReason(code="Budget", message=reason) for reason in reasons],
            )
        ],
        fingerprint=f"{node}:{reasons}",
    )


def unchanged(at: datetime) -> DisruptionPassRecord:
    return DisruptionPassRecord(at=at, unchanged=True)


def chosen(node: str, at: datetime) -> DisruptionPassRecord:
    command = DisruptionCommand(
        method="single-node-consolidation",
        reason="Underutilized",
        decision="delete",
        candidates=[DisruptedCandidate(node=node, nodeclaim=node, nodepool="default", pods=2)],
        savings_micros=154_000,
        message=f"disrupting via consolidation delete, terminating 1 nodes ({node})",
    )
    return DisruptionPassRecord(at=at, commands=[command], savings_micros=154_000)


def minutes(count: float) -> datetime:
    return T0 + timedelta(minutes=count)


def _story(cluster: str, node: str, spans: list[DisruptionSpan]) -> Story:
    created = {
        "at": T0,
        "cluster": cluster,
        "nodepool": "default",
        "reason": "",
        "pods": [],
        "pod_count": 0,
        "requests": {},
        "instance_types": "",
        "options": [],
        "batch": 0,
        "planned_by": None,
    }
    return Story.model_validate(
        {
            "nodeclaim": node,
            "node": node,
            "workflow_id": f"nodeclaim/{node}",
            "run_id": "r",
            "status": "Running",
            "phase": None,
            "closed_at": None,
            "created": created,
            "disruption": [span.model_dump() for span in spans],
        }
    )


# --- the disruption history ---------------------------------------------------------------------------------


async def test_disruption_passes_become_spans_across_runs_and_workflows(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = temporal_env.client
    cluster = f"c-{uuid.uuid4().hex[:10]}"
    node = "default-abcde"
    loop = Passes(
        records=[
            kept(node, BUDGET, at=minutes(0)),
            unchanged(minutes(1)),
            unchanged(minutes(2)),
            # A new run (continue-as-new) records a full pass again: the same reason continues the span.
            kept(node, BUDGET, at=minutes(3)),
            kept(node, DO_NOT_DISRUPT, at=minutes(4)),
            unchanged(minutes(5)),
            kept("default-other", BUDGET, at=minutes(6)),
            chosen(node, at=minutes(7)),
        ],
        per_run=3,
    )
    manual = Passes(records=[kept(node, "replacement would not be cheaper", at=minutes(2.5))], per_run=10)
    elsewhere = Passes(records=[chosen(node, at=minutes(1))], per_run=10)
    async with fake_worker(client, task_queue):
        await run_fake_disruption(client, task_queue, f"disruption/{cluster}", loop)
        await run_fake_disruption(client, task_queue, f"consolidation/{cluster}/manual-1", manual)
        await run_fake_disruption(client, task_queue, f"disruption/{cluster}-other", elsewhere)

    explainer = Explainer(client)
    # Visibility lists closed runs a moment after they close: wait until all four runs are in.
    spans = await eventually(
        lambda: _when_complete(explainer, cluster, node), what="every run of both workflows listed"
    )

    assert [(s.workflow_id, s.outcome, s.first, s.last, s.passes) for s in spans] == [
        (f"disruption/{cluster}", "kept", minutes(0), minutes(3), 4),
        (f"consolidation/{cluster}/manual-1", "kept", minutes(2.5), minutes(2.5), 1),
        (f"disruption/{cluster}", "kept", minutes(4), minutes(5), 2),
        (f"disruption/{cluster}", "chosen", minutes(7), minutes(7), 1),
    ]
    assert spans[0].reasons == [BUDGET] and spans[2].reasons == [DO_NOT_DISRUPT]
    assert spans[3].command == f"disrupting via consolidation delete, terminating 1 nodes ({node})"
    assert (spans[3].method, spans[3].reason, spans[3].savings_per_hour) == (
        "single-node-consolidation",
        "Underutilized",
        0.154,
    )

    story = _story(cluster, node, spans)
    text = io.StringIO()
    render_text(story, text)
    assert (
        "2026-11-22T10:00:00.000Z - 2026-11-22T10:03:00.000Z  "
        f"kept (4 passes of disruption/{cluster}): {BUDGET}" in text.getvalue()
    )
    assert (
        f"2026-11-22T10:07:00.000Z  chosen (1 pass of disruption/{cluster}, single-node-consolidation, "
        "Underutilized, saves $0.1540/h): disrupting via consolidation delete" in text.getvalue()
    )


async def _when_complete(explainer: Explainer, cluster: str, node: str) -> list[DisruptionSpan] | None:
    spans = await explainer.disruption(cluster, node, node, since=LONG_AGO)
    return spans if len(spans) == 4 and spans[-1].outcome == "chosen" else None


def repack(nodes: tuple[str, ...], launched: tuple[tuple[str, int, int], ...]) -> DisruptionCommand:
    """A repack of `nodes` launching (type, micro-dollars per hour, pods) each, as the plan activity records it."""
    pods = [f"default/p-{index}" for index in range(sum(count for _, _, count in launched))]
    replacements, moves, start = [], [], 0
    for index, (instance_type, price, count) in enumerate(launched, 1):
        mine = pods[start : start + count]
        start += count
        replacements.append(
            PlannedReplacement(nodepool="repack", instance_type=instance_type, price_micros=price, pods=mine)
        )
        moves += [f"{pod}: {nodes[0]} -> replacement-{index}" for pod in mine]
    savings = 722_000 - sum(price for _, price, _ in launched)
    return DisruptionCommand(
        method="repack",
        reason="Underutilized",
        decision="replace",
        candidates=[DisruptedCandidate(node=n, nodeclaim=n, nodepool="repack", pods=10) for n in nodes],
        replacements=replacements,
        savings_micros=savings,
        message=f"disrupting via consolidation replace, terminating {len(nodes)} nodes {', '.join(nodes)}",
        repack=RepackRecord(
            launched=[
                f"replacement-{i} ({t}, ${p / 1e6:.3f}/h): {c} pods"
                for i, (t, p, c) in enumerate(launched, 1)
            ],
            moves=moves,
        ),
    )


async def test_a_validation_s_fresh_plan_is_explained_as_the_check_of_the_planned_command(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    """After a dry run, a manual consolidation plans a repack of a and b and a deletion of c, then validates each:
    the fresh plan would repack a and b onto other types (the planned command still holds and is what goes ahead),
    a PDB now keeps c, and the fresh plan would delete d. Explain shows the decision once, then its validation:
    never the fresh plan as a second decision (as it did when it read every plan as a pass that chooses), and the
    dry run's choice as a dry run's."""
    client = temporal_env.client
    cluster = f"c-{uuid.uuid4().hex[:10]}"
    planned = repack(("a", "b"), (("Standard_F8s_v2", 338_000, 9), ("Standard_F4s_v2", 169_000, 5)))
    fresh = repack(("b", "a"), (("Standard_F8s_v2", 338_000, 11), ("Standard_D2s_v5", 96_000, 3)))
    delete_c = chosen("c", at=minutes(0)).commands[0]
    pdb = KeptReason(code="PodDisruptionBudget", message="pdb default/web prevents pod evictions")
    validations = [
        DisruptionPassRecord(at=minutes(1), commands=[fresh], validating=planned.message),
        DisruptionPassRecord(
            at=minutes(2),
            commands=[chosen("d", at=minutes(2)).commands[0]],
            kept=[KeptNode(node="c", nodeclaim="c", nodepool="default", reasons=[pdb])],
            validating=delete_c.message,
        ),
    ]
    run = Passes(
        records=[DisruptionPassRecord(at=minutes(0), commands=[planned, delete_c]), *validations], per_run=10
    )
    dry_run = Passes(
        records=[DisruptionPassRecord(at=minutes(-1), commands=[planned])], per_run=10, dry_run=True
    )
    async with fake_worker(client, task_queue):
        await run_fake_disruption(client, task_queue, f"consolidation/{cluster}/dry-1", dry_run)
        await run_fake_disruption(client, task_queue, f"consolidation/{cluster}/manual-1", run)
    explainer = Explainer(client)

    async def spans(node: str) -> list[DisruptionSpan] | None:
        found = await explainer.disruption(cluster, node, node, since=LONG_AGO)
        return found if len(found) == 3 else None

    a = await eventually(lambda: spans("a"), what="both runs listed")
    assert [(s.outcome, s.dry_run, s.first, s.command) for s in a] == [
        ("chosen", True, minutes(-1), planned.message),
        ("chosen", False, minutes(0), planned.message),
        ("validated", False, minutes(1), planned.message),
    ]
    assert a[2].reasons == [
        "the fresh plan would launch replacement-1 (Standard_F8s_v2, $0.338/h): 11 pods, replacement-2 "
        "(Standard_D2s_v5, $0.096/h): 3 pods (savings: $0.288/h); validation only checks that the planned command "
        "still holds, and the planned command is what goes ahead"
    ]
    c = await explainer.disruption(cluster, "c", "c", since=LONG_AGO)
    assert [(s.outcome, s.reasons) for s in c] == [
        ("chosen", []),
        ("abandoned", [f"c: {pdb.message}"]),
    ]
    assert await explainer.disruption(cluster, "d", "d", since=LONG_AGO) == []

    text = io.StringIO()
    render_text(_story(cluster, "a", a), text)
    assert (
        f"2026-11-22T09:59:00.000Z  chosen (dry run, not carried out; 1 pass of consolidation/{cluster}/dry-1, "
        f"repack, Underutilized, saves $0.2150/h): {planned.message}" in text.getvalue()
    )
    assert (
        f"2026-11-22T10:01:00.000Z  validated (1 pass of consolidation/{cluster}/manual-1, repack): goes ahead as "
        f"planned: {planned.message}\n    the fresh plan would launch" in text.getvalue()
    )
    text = io.StringIO()
    render_text(_story(cluster, "c", c), text)
    assert (
        f"abandoned at validation (1 pass of consolidation/{cluster}/manual-1, single-node-consolidation): "
        f"{delete_c.message}\n    why: c: {pdb.message}\n" in text.getvalue()
    )


def test_a_validation_whose_fresh_plan_only_swaps_like_pods_says_nothing_more() -> None:
    """The fresh plan launches the same types for as many pods, two of a Deployment's replicas changing places: the
    same decision as the command's, so the validated line stands alone."""
    planned = repack(("a", "b"), (("Standard_F8s_v2", 338_000, 9), ("Standard_F4s_v2", 169_000, 5)))
    fresh = repack(("b", "a"), (("Standard_F8s_v2", 338_000, 9), ("Standard_F4s_v2", 169_000, 5)))
    first, second = fresh.replacements
    first.pods[0], second.pods[0] = second.pods[0], first.pods[0]
    passes = [
        Pass("consolidation/c/1", DisruptionPassRecord(at=minutes(0), commands=[planned])),
        Pass(
            "consolidation/c/1",
            DisruptionPassRecord(at=minutes(1), commands=[fresh], validating=planned.message),
            validated=planned,
        ),
    ]
    spans = disruption_spans(passes, "a", "a")
    assert [(s.outcome, s.reasons) for s in spans] == [("chosen", []), ("validated", [])]


# --- a NodeClaim's whole life -------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def system(
    temporal_env: WorkflowEnvironment, task_queue: str, control_plane: ControlPlane
) -> AsyncIterator[System]:
    async with running_system(temporal_env, task_queue, control_plane) as running:
        yield running


async def test_explain_tells_why_a_nodeclaim_was_created_launched_and_removed(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 2, node_selector=pinned())])
    pods = await system.unschedulable("pinned", 2)
    # Whichever offering is tried first has no capacity in its zone; the fault is then used up.
    await system.aks.add_fault(Fault.fail_late("ZonalAllocationFailed", vm_size=INSTANCE_TYPE, times=1))
    await system.start_provisioner(pods)
    [claim] = await eventually(system.nodeclaims, what="a NodeClaim")
    lifecycle = await system.nodeclaim_workflow(claim.name)
    planned = (await start_input(system.client, lifecycle, LifecycleInput)).nodeclaim
    status = await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), what="running")
    # The cluster's disruption loop kept the node once, for its budget.
    async with fake_worker(system.client, f"{system.task_queue}-disruption"):
        await run_fake_disruption(
            system.client,
            f"{system.task_queue}-disruption",
            f"disruption/{system.cluster}",
            Passes(records=[kept(claim.name, BUDGET, at=datetime.now(UTC))], per_run=1),
        )
    await lifecycle.signal(NodeClaimWorkflow.delete, DeletionRequested(by="nodeclaim deleted"))
    await lifecycle.result()

    story = await eventually(
        lambda: _with_disruption(system.client, status.node or ""), what="the disruption run listed"
    )

    created = story.created
    assert (story.nodeclaim, story.node, story.phase) == (claim.name, status.node, "Terminated")
    assert sorted(created.pods) == pods and created.pod_count == 2
    assert created.reason == planned.reason and created.reason.startswith("cheapest of 1 instance type")
    assert created.planned_by == f"provisioner/{system.cluster}" and created.cluster == system.cluster
    first, second = planned.launch_candidates[:2]
    assert [(a.zone, a.launched) for a in story.launches] == [(first.zone, False), (second.zone, True)]
    assert story.launches[0].error.startswith(status.launch_failures[0].kind + ": ")
    assert story.registered_at is not None and story.initialized_at is not None
    assert [(span.outcome, span.reasons) for span in story.disruption] == [("kept", [BUDGET])]
    removal = story.removal
    assert removal is not None and removal.cause == f"NodeClaim {claim.name} was deleted"
    assert removal.termination_reason == "NodeClaimDeleted"
    steps = [step.what for step in removal.steps]
    assert steps[0] == "tainted karpenter.sh/disrupted:NoSchedule"
    assert steps[-3:] == ["instance deleted", "node deleted", "NodeClaim deleted (finalizer removed)"]
    assert steps[1].startswith("drained: ")

    # The command line, against the same server: text, JSON, and an unknown NodeClaim.
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", system.client.service_client.config.target_host)
    text, err = io.StringIO(), io.StringIO()
    assert await asyncio.to_thread(main, ["explain", "nodeclaim", claim.name], text, err) == 0
    assert f"why: {planned.reason}" in text.getvalue()
    assert f"why: NodeClaim {claim.name} was deleted [NodeClaimDeleted]" in text.getvalue()
    assert f"could not launch {INSTANCE_TYPE} on-demand in {first.zone}" in text.getvalue()
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["explain", "node", status.node or "", "-o", "json"], out, err) == 0
    document = json.loads(out.getvalue())
    assert document["nodeclaim"] == claim.name and document["created"]["pods"] == created.pods
    missing = io.StringIO()
    assert (
        await asyncio.to_thread(main, ["explain", "nodeclaim", "no-such-claim"], io.StringIO(), missing) == 1
    )
    assert missing.getvalue().startswith(
        "error: NodeClaim no-such-claim: no workflow nodeclaim/no-such-claim"
    )


async def test_explain_names_the_disruption_command_that_removed_a_node(system: System) -> None:
    await system.apply_examples()
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    await system.start_provisioner(await system.unschedulable("pinned", 1))
    [claim] = await eventually(system.nodeclaims, what="a NodeClaim")
    lifecycle = await system.nodeclaim_workflow(claim.name)
    await eventually(lambda: in_phase(lifecycle, Phase.RUNNING), what="running")
    command = f"disruption/{system.cluster}"
    await lifecycle.signal("disrupt", DisruptNodeClaim(reason="Underutilized", command=command))
    await lifecycle.result()

    story = await explain(system.client, "nodeclaim", claim.name)

    removal = story.removal
    assert removal is not None
    assert removal.cause == f"disrupted (Underutilized) by {command}"
    assert removal.termination_reason == "Underutilized"
    assert (removal.disruption_reason, removal.disruption_workflow) == ("Underutilized", command)
    assert story.phase == "Terminated"


async def test_explain_says_a_node_expired(system: System) -> None:
    await system.apply_examples(expireAfter="2s")
    await system.kube.apply([deployment("pinned", 1, node_selector=pinned())])
    await system.start_provisioner(await system.unschedulable("pinned", 1))
    [claim] = await eventually(system.nodeclaims, what="a NodeClaim")
    await (await system.nodeclaim_workflow(claim.name)).result()

    story = await explain(system.client, "nodeclaim", claim.name)

    assert story.removal is not None and story.removal.cause == "expired (expireAfter 2s)"
    assert story.removal.termination_reason == "Expired"
    assert story.initialized_at is not None and story.phase == "Terminated"


async def _with_disruption(client: Client, node: str) -> Story | None:
    story = await explain(client, "node", node)
    return story if story.disruption else None


async def test_explain_names_an_unknown_node(temporal_env: WorkflowEnvironment) -> None:
    with pytest.raises(ExplainError, match="Node ghost-node: no NodeClaim workflow"):
        await explain(temporal_env.client, "node", "ghost-node")


def test_explain_says_when_temporal_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", f"127.0.0.1:{port}")
    err = io.StringIO()

    assert main(["explain", "nodeclaim", "default-abcde"], io.StringIO(), err) == 1
    assert err.getvalue().startswith(f"error: cannot reach Temporal at 127.0.0.1:{port}")


def test_a_drifted_node_is_explained_with_the_field_that_changed() -> None:
    detail = (
        "NodePoolDrifted: NodePool default template changed: spec.template.metadata.labels "
        "(karpenter.sh/nodepool-hash 1 -> 2)"
    )
    command = DisruptionCommand(
        method="drift",
        reason="Drifted",
        decision="replace",
        candidates=[DisruptedCandidate(node="n", nodeclaim="n", nodepool="default", pods=1, detail=detail)],
        message="disrupting via drift replace, terminating 1 nodes (n)",
    )
    record = DisruptionPassRecord(at=T0, commands=[command])
    [span] = disruption_spans([Pass(workflow_id="disruption/c", record=record)], "n", "n")
    assert (span.outcome, span.reasons) == ("chosen", [detail])
    story = _story("c", "n", [span])
    text = io.StringIO()
    render_text(story, text)
    assert f"disrupting via drift replace, terminating 1 nodes (n)\n    {detail}\n" in text.getvalue()


def test_a_node_holding_buffer_room_is_explained_as_kept_for_its_capacity_buffer() -> None:
    from activities.disruption import pass_record
    from tests.core.disruption.fixtures import MOST_EXPENSIVE, NOW, bound, cluster, node_pair, nodepool, plan
    from tests.core.disruption.test_buffers import with_buffer

    snapshot = with_buffer(
        cluster([nodepool()], [node_pair("a"), node_pair("c")], [bound("c", cpu="50")]), cpu="20", replicas=1
    )
    record = pass_record(plan(snapshot, [MOST_EXPENSIVE]), NOW)
    [span] = disruption_spans([Pass(workflow_id="disruption/c", record=record)], "a", "a")
    assert span.outcome == "kept"
    assert 'Node "a" has buffer pods (kept for CapacityBuffer default/room)' in span.reasons
