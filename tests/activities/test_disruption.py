"""The disruption activities: pass records (and unchanged passes), replacements launched as lifecycles (and
found again by a retry), their progress, tainting, and the plan activity against a real API server."""

from __future__ import annotations

import uuid

import yaml
from prometheus_client import CollectorRegistry
from temporalio.testing import ActivityEnvironment

from activities.disruption import DisruptionActivities, command_message, pass_record, replacement_launches
from activities.kube import apply_condition
from activities.metrics import Metrics
from activities.planning import LIFECYCLE_ANNOTATION
from core import labels
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import (
    ConditionUpdate,
    DisruptionMode,
    DisruptionPlanInput,
    LaunchReplacementsInput,
    LifecycleInput,
    PlannedReplacement,
    TaintCandidates,
)
from core.resources import parse_resources
from tests.cluster import EXAMPLES, apply_examples, events
from tests.core.disruption.fixtures import NOW, bound, cluster, node_pair, nodepool, plan
from workers.simulated_aks import SimulatedAks

CATALOG = load_shipped_catalog("eastus")
EXAMPLE_NODEPOOL = EXAMPLES / "nodepool.yaml"


# --- pass records --------------------------------------------------------------------------------------------


def test_a_pass_record_holds_the_commands_and_why_the_other_nodes_stay() -> None:
    result = plan(
        cluster(
            [nodepool()],
            [node_pair("a"), node_pair("b")],
            [bound("b", annotations={labels.DO_NOT_DISRUPT: "true"})],
        )
    )
    record = pass_record(result, NOW)
    [command] = record.commands
    assert (command.method, command.reason, command.decision) == ("emptiness", "Empty", "delete")
    assert [c.node for c in command.candidates] == ["a"]
    assert command.message == result.commands[0].log_line()
    [kept] = record.kept
    assert (kept.node, kept.nodeclaim, [r.code for r in kept.reasons]) == (
        "b",
        "claim-b",
        ["DoNotDisruptPod"],
    )
    assert record.savings_micros == result.savings_micros > 0
    assert record.fingerprint and not record.unchanged


def test_a_pass_like_the_previous_one_is_recorded_as_unchanged() -> None:
    snapshot = cluster(
        [nodepool()], [node_pair("b")], [bound("b", annotations={labels.DO_NOT_DISRUPT: "true"})]
    )
    first = pass_record(plan(snapshot), NOW)
    again = pass_record(plan(snapshot), NOW, first.fingerprint)
    assert again.unchanged and again.fingerprint == first.fingerprint
    assert (again.commands, again.kept, again.budgets) == ([], [], [])
    changed = pass_record(plan(cluster([nodepool()], [node_pair("b")])), NOW, first.fingerprint)
    assert not changed.unchanged and changed.commands


def test_a_replace_command_carries_what_its_replacement_launches_with() -> None:
    result = plan(cluster([nodepool()], [node_pair("a")], [bound("a", cpu="2", memory="3Gi")]))
    command = command_message(result.commands[0])
    [replacement] = command.replacements
    planned = result.commands[0].replacements[0]
    assert replacement.instance_type_options == list(planned.instance_type_options)
    assert replacement.capacity_types == ["spot"]
    assert replacement.requirements == list(planned.requirements)
    assert command.pods_moved == 1 and command.savings_micros == result.commands[0].savings_micros
    # The moved pod's requests (2 cpu, 3Gi) are what the replacement NodeClaim asks for, at least.
    requests = parse_resources(replacement.requests)
    assert requests["cpu"] >= 2000 and requests["memory"] >= 3 * 2**30
    assert replacement.requests == planned.requests


def test_replacement_launches_follow_the_requirements_cheapest_first() -> None:
    types = azure_instance_types(CATALOG)
    replacement = PlannedReplacement(
        nodepool="default",
        instance_type_options=["Standard_D2s_v5", "Standard_D2as_v5"],
        requirements=[{"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}],
    )
    launches = replacement_launches(types, replacement, limit=20)
    assert launches and {launch.offering.capacity_type for launch in launches} == {"spot"}
    assert {launch.instance_type for launch in launches} <= {"Standard_D2s_v5", "Standard_D2as_v5"}
    prices = [launch.offering.price_micros for launch in launches]
    assert prices == sorted(prices)


# --- against the API server ----------------------------------------------------------------------------------


def replace_command_input(key: str) -> LaunchReplacementsInput:
    """A consolidation's replace command; its replacement's NodeClaim name derives from `key`."""
    result = plan(cluster([nodepool()], [node_pair("a")], [bound("a", cpu="2", memory="3Gi")]))
    command = command_message(result.commands[0])
    # The example NodePool's instance types: the plan above used Catalog D's.
    replacement = command.replacements[0].model_copy(
        update={
            "instance_type_options": ["Standard_D4s_v5", "Standard_D4as_v5"],
            "requirements": [{"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}],
        }
    )
    return LaunchReplacementsInput(
        cluster="test", command=command.model_copy(update={"replacements": [replacement]}), key=key
    )


def run_key() -> str:
    """A disruption run of its own (replacement names derive from it; events outlive a test)."""
    return uuid.uuid4().hex


async def test_replacements_are_created_as_lifecycles_and_a_retry_finds_them(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    started: list[LifecycleInput] = []

    async def start(request: LifecycleInput) -> None:
        started.append(request)

    activities = DisruptionActivities(aks.kube, CATALOG, start)
    run = run_key()
    request = replace_command_input(f"{run}/3/0")
    names = await ActivityEnvironment().run(activities.launch_replacements, request)
    again = await ActivityEnvironment().run(activities.launch_replacements, request)

    assert names == again and len(names) == 1 and names[0].startswith("default-")
    assert [c.name for c in await aks.kube.list_nodeclaims()] == names
    claim = await aks.kube.get_nodeclaim(names[0])
    assert claim is not None
    lifecycle = LifecycleInput.model_validate_json(claim.metadata.annotations[LIFECYCLE_ANNOTATION])
    assert [s.nodeclaim.name for s in started] == names * 2
    assert lifecycle.nodeclaim == started[0].nodeclaim
    candidates = lifecycle.nodeclaim.launch_candidates
    assert candidates and {c.capacity_type for c in candidates} == {"spot"}
    assert {c.instance_type for c in candidates} <= {"Standard_D4s_v5", "Standard_D4as_v5"}
    assert claim.requests["cpu"] >= 2000
    assert lifecycle.nodeclaim.requests == request.command.replacements[0].requests
    pool = await aks.kube.get_object("NodePool", "default")
    assert pool is not None
    owners = [(o.kind, o.name, o.uid) for o in claim.metadata.owner_references]
    assert owners == [("NodePool", "default", pool["metadata"]["uid"])]
    launching = await events(aks.kube, "DisruptionLaunching", names)
    assert launching and all(e["note"] == "Launching NodeClaim: Underutilized" for e in launching)
    assert {(e["regarding"]["kind"], e["regarding"]["name"]) for e in launching} == {("NodeClaim", names[0])}
    other = await ActivityEnvironment().run(
        activities.launch_replacements, replace_command_input(f"{run}/4/0")
    )
    assert other != names


async def test_replacement_progress_reads_the_nodeclaims(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)

    async def start(request: LifecycleInput) -> None:
        return None

    activities = DisruptionActivities(aks.kube, CATALOG, start)
    run = run_key()
    [coming] = await ActivityEnvironment().run(
        activities.launch_replacements, replace_command_input(f"{run}/1/0")
    )
    [ready] = await ActivityEnvironment().run(
        activities.launch_replacements, replace_command_input(f"{run}/2/0")
    )
    assert await apply_condition(aks.kube, ConditionUpdate(name=ready, type="Initialized", status="True"))
    progress = await ActivityEnvironment().run(activities.replacement_progress, [coming, ready, "gone-abcde"])
    assert (progress.waiting, progress.initialized, progress.failed) == ([coming], [ready], ["gone-abcde"])


async def test_candidates_are_tainted_and_untainted(aks: SimulatedAks) -> None:
    _, node = node_pair("n1")
    await aks.kube.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                **node.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
        ]
    )

    async def start(request: LifecycleInput) -> None:
        return None

    registry = CollectorRegistry()
    activities = DisruptionActivities(aks.kube, CATALOG, start, metrics=Metrics(registry))
    request = TaintCandidates(
        nodes=["n1", "missing"], decision="delete", reason="Underutilized", method="multi-node-consolidation"
    )
    tainted = await ActivityEnvironment().run(activities.taint_candidates, request)
    assert tainted == ["n1"]
    # The decision is counted once, by the attempt that tainted; a retry finds the taint and does not count.
    assert await ActivityEnvironment().run(activities.taint_candidates, request) == ["n1"]
    decided = {"decision": "delete", "reason": "underutilized", "consolidation_type": "multi"}
    assert registry.get_sample_value("karpenter_voluntary_disruption_decisions_total", decided) == 1
    found = await aks.kube.get_node("n1")
    assert found is not None and labels.DISRUPTED_TAINT in [t.key for t in found.spec.taints]
    await ActivityEnvironment().run(activities.untaint_candidates, ["n1"])
    found = await aks.kube.get_node("n1")
    assert found is not None and labels.DISRUPTED_TAINT not in [t.key for t in found.spec.taints]


async def test_the_plan_activity_plans_the_cluster_as_it_is(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)

    async def start(request: LifecycleInput) -> None:
        return None

    activities = DisruptionActivities(aks.kube, CATALOG, start)
    record = await ActivityEnvironment().run(
        activities.plan_disruption, DisruptionPlanInput(cluster="test", mode=DisruptionMode.MANUAL)
    )
    assert record.commands == [] and record.kept == [] and record.fingerprint
    again = await ActivityEnvironment().run(
        activities.plan_disruption,
        DisruptionPlanInput(cluster="test", previous_fingerprint=record.fingerprint),
    )
    assert again.unchanged


async def test_the_plan_activity_keeps_the_drifted_and_consolidatable_conditions(aks: SimulatedAks) -> None:
    await apply_examples(aks.kube)
    [example] = [d for d in yaml.safe_load_all(EXAMPLE_NODEPOOL.read_text()) if d and d["kind"] == "NodePool"]

    async def hashed(value: str) -> None:
        example["metadata"]["annotations"] = {labels.NODEPOOL_HASH: value, labels.NODEPOOL_HASH_VERSION: "v3"}
        await aks.kube.apply([example])

    await hashed("2222")
    old_hash = {labels.NODEPOOL_HASH: "1111", labels.NODEPOOL_HASH_VERSION: "v3"}
    compatible = {  # with the example NodePool's requirements: only its hash says it drifted
        labels.ARCH: "amd64",
        labels.OS: "linux",
        labels.CAPACITY_TYPE: "on-demand",
        "karpenter.azure.com/sku-family": "D",
    }
    claim, node = node_pair(
        "drifting", pool=example["metadata"]["name"], claim_annotations=old_hash, node_labels=compatible
    )
    await aks.kube.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                **node.model_dump(mode="json", by_alias=True, exclude_none=True),
            },
            {**claim.model_dump(mode="json", by_alias=True, exclude_none=True)},
        ]
    )

    async def start(request: LifecycleInput) -> None:
        return None

    activities = DisruptionActivities(aks.kube, CATALOG, start)
    automatic = DisruptionPlanInput(cluster="test")

    await ActivityEnvironment().run(activities.plan_disruption, automatic)
    marked = await aks.kube.get_nodeclaim(claim.name)
    assert marked is not None
    drifted, consolidatable = marked.status.condition("Drifted"), marked.status.condition("Consolidatable")
    assert drifted is not None and (drifted.status, drifted.reason, drifted.message) == (
        "True",
        "NodePoolDrifted",
        "NodePoolDrifted",
    )
    assert drifted.last_transition_time is not None
    # Initialized a day ago (the fixture's status), past the example's consolidateAfter of 1m.
    assert consolidatable is not None and (consolidatable.status, consolidatable.reason) == (
        "True",
        "Consolidatable",
    )

    await hashed("1111")
    await ActivityEnvironment().run(activities.plan_disruption, automatic)
    cleared = await aks.kube.get_nodeclaim(claim.name)
    assert cleared is not None and cleared.status.condition("Drifted") is None
    assert cleared.status.condition("Consolidatable") == consolidatable
