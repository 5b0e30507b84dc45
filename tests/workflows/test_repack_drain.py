"""A repack command on the real control plane and dev server: its replacement launched and initialized before any
pod is evicted, its candidate's pods drained one at a time with the new node held back until its turn, each
landing where the plan sent it (kube-scheduler's own choice: a pod is evicted, its ReplicaSet makes another); a
replacement that cannot launch leaves the candidate as it was.

The layout is one Karpenter's methods leave alone (held-out seed of `benchmarks.repack`'s generator): two
Standard_D4s_v5, the first with two 1-CPU/3-GiB pods and a 1.5-CPU/1.5-GiB pod, the second with a 1.5-CPU pod
and a 400m/6-GiB pod. Single-node consolidation, placing the first node's pods in its own order, finds no cheaper
node for what the second cannot take; the repack sends one 1-CPU pod to the second node's room and the other two
to a Standard_F4s_v2 ($0.023/h less)."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from benchmarks.repack import nodepool
from core import labels
from core.messages import (
    CommandOutcome,
    CommandResult,
    DisruptionInput,
    DisruptionMode,
    DisruptionSettings,
    DisruptionStatus,
    RepackSettings,
)
from simulator.arm import Fault
from tests.workflows.conftest import (
    FAST,
    PAUSE,
    System,
    condition,
    eventually,
    example_manifests,
    fresh_name,
)
from tests.workflows.test_disruption import running_node, taints, underutilized
from workers.explain import Decoder, disruption_spans, pass_records, read_events
from workflows.disruption import DisruptionWorkflow, consolidation_id

SETTINGS = DisruptionSettings(
    poll_seconds=0.5,
    validation_seconds=1,
    replacement_timeout_seconds=60,
    activity_timeout_seconds=30,
    repack=RepackSettings(),
    steer_settle_seconds=5,
    steer_wait_seconds=20,
)
LAYOUT = (
    ("first", ((1000, 3072), (1000, 3072), (1500, 1536))),
    ("second", ((1500, 1536), (400, 6144))),
)
"""Each node's pods as (millicores, MiB), one Deployment of one replica each."""


def app(name: str, cpu: int, memory: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": PAUSE,
                            "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
                        }
                    ]
                },
            },
        },
    }


async def fragmented(system: System) -> dict[str, str]:
    """The layout, each node's pods arriving once it is the only node with room: app -> node."""
    examples = [
        d for d in yaml.safe_load_all(example_manifests()) if d["kind"] in ("AKSNodeClass", "DaemonSet")
    ]
    pool = nodepool()
    pool["spec"]["disruption"]["consolidateAfter"] = "0s"
    await system.kube.apply([*examples, pool])
    where: dict[str, str] = {}
    for name, pods in LAYOUT:
        _, node = await running_node(system, "Standard_D4s_v5")
        apps = [app(f"{name}-{index}", cpu, memory) for index, (cpu, memory) in enumerate(pods)]
        await system.kube.apply(apps)
        for deployment in apps:
            app_name = deployment["metadata"]["name"]
            [pod] = await eventually(lambda a=app_name: system.running(a, 1), what=f"{app_name} running")
            assert pod.spec.node_name == node
            where[app_name] = node
    return where


async def consolidate(system: System) -> tuple[CommandResult, DisruptionStatus, str]:
    """A manual consolidation, confirmed: its one command's result, its status, and its workflow id."""
    request = DisruptionInput(
        cluster=system.cluster, mode=DisruptionMode.MANUAL, settings=SETTINGS, lifecycle=FAST
    )
    handle = await system.client.start_workflow(
        DisruptionWorkflow.run,
        request,
        id=consolidation_id(system.cluster, fresh_name("t")),
        task_queue=system.task_queue,
    )

    async def planned() -> bool:
        return (await handle.query(DisruptionWorkflow.plan)).waiting_for == "confirmation"

    await eventually(planned, what="the plan waiting for confirmation")
    await handle.signal(DisruptionWorkflow.confirm, True)
    status = await asyncio.wait_for(handle.result(), 90)
    [result] = status.results
    return result, status, handle.id


async def test_a_repack_launches_first_then_steers_each_pod_where_it_was_planned(system: System) -> None:
    where = await fragmented(system)
    first, second = where["first-0"], where["second-0"]

    result, status, workflow_id = await consolidate(system)

    assert result.outcome is CommandOutcome.EXECUTED, result.detail
    command = result.command
    # The command carried out is the one planned (what `nodewright consolidate` printed), and `explain` shows that
    # decision once, then its validation, from the workflow's history.
    assert status.plan is not None and status.plan.commands == [command]
    history = await system.client.get_workflow_handle(workflow_id).fetch_history()
    passes = await pass_records(Decoder(system.client), workflow_id, read_events(history.events))
    spans = disruption_spans(passes, first, command.candidates[0].nodeclaim)
    assert [(span.outcome, span.command) for span in spans] == [
        ("chosen", command.message),
        ("validated", command.message),
    ]
    assert (command.method, command.reason) == ("repack", "Underutilized")
    assert [c.node for c in command.candidates] == [first]
    assert command.repack is not None and command.repack.staying  # room on the node that stays is used
    [replacement] = result.replacements
    claim = await system.nodeclaim(replacement)
    assert claim is not None and claim.status.node_name
    new = claim.status.node_name
    assert result.steered is not None
    assert (result.steered.evicted, result.steered.as_planned, result.steered.gave_up) == (3, 3, "")
    # Each pod's replacement runs where the plan sent the pod it replaces.
    planned = {pod.split("/")[1].rsplit("-", 2)[0]: node for pod, node in command.repack.staying.items()}
    planned.update({pod.split("/")[1].rsplit("-", 2)[0]: new for pod in command.replacements[0].pods})
    assert len(planned) == 3
    for name, node in planned.items():
        [pod] = await eventually(lambda n=name: system.running(n, 1), what=f"{name} running again")
        assert pod.spec.node_name == (second if node == second else new), name
    # The replacement was initialized before the first pod was evicted, and is given back afterwards.
    initialized = _first_event(system, "NodeClaim", replacement, _initialized)
    evicted = _first_event(system, "Pod", None, lambda o: _evicted_from(o, first))
    assert initialized < evicted
    node = await system.node(new)
    assert node is not None and not node.spec.unschedulable
    assert labels.REPACK_TARGET not in node.metadata.labels
    await eventually(
        lambda: system.gone(command.candidates[0].nodeclaim, first), timeout=30, what="first gone"
    )
    assert {c.name for c in await system.nodeclaims()} == {await system.claim_of(second), replacement}


async def test_karpenters_consolidation_is_steered_while_the_repack_is_on(system: System) -> None:
    """Karpenter's own command, unchanged, its drain steered as a repack's: the replacement held back but for the
    pod the simulation sent to it, which lands there (drained at once, kube-scheduler's choice decides)."""
    claim, node = await underutilized(system)

    result, _, _ = await consolidate(system)

    assert result.outcome is CommandOutcome.EXECUTED, result.detail
    assert (result.command.method, result.command.decision) == ("single-node-consolidation", "replace")
    assert result.steered is not None
    assert (result.steered.evicted, result.steered.as_planned, result.steered.gave_up) == (1, 1, "")
    [replacement] = result.replacements
    claimed = await system.nodeclaim(replacement)
    assert claimed is not None and claimed.status.node_name
    [pod] = await eventually(lambda: system.running("small", 1), what="the small pod running again")
    assert pod.spec.node_name == claimed.status.node_name
    new = await system.node(claimed.status.node_name)
    assert new is not None and not new.spec.unschedulable and labels.REPACK_TARGET not in new.metadata.labels
    await eventually(lambda: system.gone(claim, node), timeout=30, what=f"{claim} gone")


async def test_a_repack_whose_replacement_fails_leaves_its_candidate_as_it_was(system: System) -> None:
    where = await fragmented(system)
    first = where["first-0"]
    await system.aks.add_fault(Fault.sku_not_available())

    result, _, _ = await consolidate(system)

    assert result.outcome is CommandOutcome.ROLLED_BACK and result.command.method == "repack"
    assert result.steered is None
    for name, node in where.items():
        [pod] = await system.running(name, 1)
        assert pod.spec.node_name == node
    assert labels.DISRUPTED_TAINT not in await taints(system, first)
    for name in result.replacements:
        await eventually(lambda name=name: system.gone(name), timeout=20, what=f"{name} gone")


def _initialized(manifest: dict[str, Any]) -> bool:
    from core.api.nodeclaim import NodeClaim

    return condition(NodeClaim.parse(manifest), "Initialized") == ("True", "Initialized")


def _evicted_from(manifest: dict[str, Any], node: str) -> bool:
    metadata, spec = manifest.get("metadata", {}), manifest.get("spec", {})
    return (
        spec.get("nodeName") == node
        and metadata.get("deletionTimestamp") is not None
        and metadata.get("namespace") != "kube-system"
    )


def _first_event(system: System, kind: str, name: str | None, check: Any) -> int:
    for index, event in enumerate(system.events):
        if event.kind == kind and (name is None or event.name == name) and check(event.object):
            return index
    raise AssertionError(f"no watch event of {kind} {name or ''} matched")
