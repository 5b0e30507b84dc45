"""Static drift on the real control plane: the controller stamps the NodePool and AKSNodeClass hashes, provisioning
stamps NodeClaims, and an edit of a hashed field replaces the node through the disruption loop; a new hash
version re-stamps the NodeClaims and replaces nothing."""

from __future__ import annotations

from typing import Any

import yaml
from temporalio.client import WorkflowHandle

from core import labels
from core.api.hashes import NODEPOOL_HASH_FIELDS, NODEPOOL_HASH_VERSION
from core.api.nodeclaim import NodeClaim
from core.messages import (
    CommandOutcome,
    CommandResult,
    DisruptionInput,
    DisruptionSettings,
    DisruptionStatus,
)
from tests.workflows.conftest import FAST, System, deployment, eventually, example_manifests, pinned
from workflows.disruption import DisruptionWorkflow, disruption_id

SETTINGS = DisruptionSettings(
    poll_seconds=0.5, validation_seconds=1, replacement_timeout_seconds=60, activity_timeout_seconds=30
)


def documents(**edits: Any) -> list[dict[str, Any]]:
    """deploy/examples without the DaemonSet, never consolidated nor expired (drift alone replaces nodes);
    `pool_labels`, `nodeclass_spec` edit the NodePool template's labels and the AKSNodeClass spec."""
    found = [
        d for d in yaml.safe_load_all(example_manifests(expireAfter="Never")) if d["kind"] != "DaemonSet"
    ]
    for document in found:
        if document["kind"] == "NodePool":
            document["spec"]["disruption"]["consolidateAfter"] = "Never"
            if "budgets" in edits:
                document["spec"]["disruption"]["budgets"] = edits["budgets"]
            if "pool_labels" in edits:
                document["spec"]["template"].setdefault("metadata", {})["labels"] = edits["pool_labels"]
        if document["kind"] == "AKSNodeClass" and "nodeclass_spec" in edits:
            document["spec"].update(edits["nodeclass_spec"])
    return found


async def annotations(system: System, kind: str, name: str = "default") -> dict[str, str]:
    found = await system.kube.get_object(kind, name)
    return dict(((found or {}).get("metadata") or {}).get("annotations") or {})


async def one_running_node(system: System, **edits: Any) -> NodeClaim:
    """The controller running, the examples applied and stamped, one pinned pod provisioned: its NodeClaim."""
    system.start_controller()
    await system.kube.apply(documents(**edits))
    for kind, key in (("NodePool", labels.NODEPOOL_HASH), ("AKSNodeClass", labels.NODECLASS_HASH)):

        async def stamped(kind: str = kind, key: str = key) -> bool:
            return key in await annotations(system, kind)

        await eventually(stamped, timeout=60, what=f"the {kind} stamped")
    await system.kube.apply([deployment("web", 1, node_selector=pinned())])
    await eventually(lambda: system.running("web", 1), timeout=60, what="the web pod running")
    [claim] = await system.nodeclaims()
    return claim


async def start_disruption(system: System) -> WorkflowHandle[DisruptionWorkflow, DisruptionStatus]:
    request = DisruptionInput(cluster=system.cluster, settings=SETTINGS, lifecycle=FAST)
    return await system.client.start_workflow(
        DisruptionWorkflow.run, request, id=disruption_id(system.cluster), task_queue=system.task_queue
    )


async def replaced(system: System, old: str) -> NodeClaim:
    """Wait until the drifted NodeClaim is gone and the pod runs again, on its one replacement."""

    async def done() -> NodeClaim | None:
        claims = await system.nodeclaims()
        if any(claim.name == old for claim in claims) or not await system.running("web", 1):
            return None
        return claims[0] if len(claims) == 1 else None

    return await eventually(done, timeout=120, what=f"{old} replaced")


async def drift_detail(handle: WorkflowHandle[DisruptionWorkflow, DisruptionStatus]) -> str:
    """The detail of the drift command the loop carried out (once its result is recorded)."""

    async def succeeded() -> list[CommandResult]:
        status = await handle.query(DisruptionWorkflow.plan)
        return [r for r in status.results if r.outcome is CommandOutcome.EXECUTED]

    [result] = await eventually(succeeded, timeout=60, what="the drift command's result")
    assert (result.command.method, result.command.reason) == ("drift", "Drifted")
    return result.command.candidates[0].detail or ""


async def test_a_nodepool_template_label_replaces_the_node_with_one_carrying_it(system: System) -> None:
    claim = await one_running_node(system)
    pool = await annotations(system, "NodePool")
    assert claim.metadata.annotations[labels.NODEPOOL_HASH] == pool[labels.NODEPOOL_HASH]
    assert claim.metadata.annotations[labels.NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION
    assert NODEPOOL_HASH_FIELDS in claim.metadata.annotations
    handle = await start_disruption(system)

    await system.kube.apply(documents(pool_labels={"tier": "gold"}))
    replacement = await replaced(system, claim.name)
    assert replacement.labels["tier"] == "gold"
    changed = await annotations(system, "NodePool")
    assert changed[labels.NODEPOOL_HASH] != pool[labels.NODEPOOL_HASH]
    assert replacement.metadata.annotations[labels.NODEPOOL_HASH] == changed[labels.NODEPOOL_HASH]
    assert (await drift_detail(handle)).startswith(
        "NodePoolDrifted: NodePool default template changed: spec.template.metadata.labels ("
    )


async def test_an_aksnodeclass_spec_edit_replaces_the_node(system: System) -> None:
    claim = await one_running_node(system)
    nodeclass = await annotations(system, "AKSNodeClass")
    assert claim.metadata.annotations[labels.NODECLASS_HASH] == nodeclass[labels.NODECLASS_HASH]
    handle = await start_disruption(system)

    await system.kube.apply(documents(nodeclass_spec={"osDiskSizeGB": 64}))
    replacement = await replaced(system, claim.name)
    changed = await annotations(system, "AKSNodeClass")
    assert changed[labels.NODECLASS_HASH] != nodeclass[labels.NODECLASS_HASH]
    assert replacement.metadata.annotations[labels.NODECLASS_HASH] == changed[labels.NODECLASS_HASH]
    assert (await drift_detail(handle)).startswith(
        "NodeClassDrift: AKSNodeClass default spec changed: spec.osDiskSizeGB ("
    )


async def test_a_new_hash_version_restamps_the_nodeclaims_and_drifts_none(system: System) -> None:
    claim = await one_running_node(system)
    current = await annotations(system, "NodePool")
    # As an older release left them: the NodePool and its NodeClaim stamped alike, by hash version v2.
    older = {labels.NODEPOOL_HASH: "1234", labels.NODEPOOL_HASH_VERSION: "v2"}
    await system.kube.patch_nodeclaim_metadata(claim.name, annotations=older)
    await system.kube.annotate("NodePool", "default", older)

    async def restamped() -> NodeClaim | None:
        found = await system.nodeclaim(claim.name)
        held = found.metadata.annotations if found else {}
        return found if held.get(labels.NODEPOOL_HASH_VERSION) == NODEPOOL_HASH_VERSION else None

    stamped = await eventually(restamped, timeout=60, what="the NodeClaim re-stamped")
    assert stamped.metadata.annotations[labels.NODEPOOL_HASH] == current[labels.NODEPOOL_HASH]

    async def pool_restamped() -> bool:
        return await annotations(system, "NodePool") == current

    await eventually(pool_restamped, timeout=60, what="the NodePool stamped at the current version")

    handle = await start_disruption(system)

    async def passes(count: int) -> DisruptionStatus | None:
        status = await handle.query(DisruptionWorkflow.plan)
        return status if status.passes >= count else None

    status = await eventually(lambda: passes(4), timeout=120, what="four disruption passes")
    assert status.results == []
    assert [c.name for c in await system.nodeclaims()] == [claim.name]


async def test_a_drifted_nodeclaim_held_by_its_budget_is_marked_drifted_until_the_edit_is_undone(
    system: System,
) -> None:
    no_drift = [{"nodes": "0", "reasons": ["Drifted"]}]
    claim = await one_running_node(system, budgets=no_drift)
    await start_disruption(system)

    await system.kube.apply(documents(budgets=no_drift, pool_labels={"tier": "gold"}))

    async def drifted(expected: bool) -> NodeClaim | None:
        found = await system.nodeclaim(claim.name)
        marked = found is not None and found.status.condition("Drifted") is not None
        return found if marked == expected else None

    marked = await eventually(lambda: drifted(True), timeout=60, what="the NodeClaim marked Drifted")
    condition = marked.status.condition("Drifted")
    assert condition is not None
    # As Karpenter writes it, the reason is the message too; plan-disruption and explain name the field.
    assert (condition.status, condition.reason, condition.message) == (
        "True",
        "NodePoolDrifted",
        "NodePoolDrifted",
    )

    await system.kube.apply(documents(budgets=no_drift))
    await eventually(lambda: drifted(False), timeout=60, what="the Drifted condition removed")
    assert [c.name for c in await system.nodeclaims()] == [claim.name]
