"""Static NodePools on the real control plane: the controller starts `static/<cluster>/<pool>`, which holds the
pool at `spec.replicas` through a node deletion and through scaling up and down."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.service import RPCError

from core import labels
from core.api.kube import is_node_ready
from core.messages import DisruptionInput, DisruptionSettings, DisruptionStatus
from core.static_messages import StaticPoolInput
from tests.cluster import events, eventually
from tests.workflows.conftest import FAST, INSTANCE_TYPE, System, current_details, started, step_summaries
from workers.controller import Controller
from workers.controller.static_pools import GATE_DISABLED, StaticPools
from workflows.disruption import DisruptionWorkflow, disruption_id
from workflows.static import StaticNodePoolWorkflow, static_id

POOL = "fixed"


def static_pool(replicas: int, instance_type: str = INSTANCE_TYPE) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "replicas": replicas,
            "limits": {"nodes": 5},
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.azure.com",
                        "kind": "AKSNodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": labels.INSTANCE_TYPE, "operator": "In", "values": [instance_type]},
                        {"key": labels.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    ],
                    "expireAfter": "Never",
                }
            },
        },
    }


def start_controller(system: System, enabled: bool = True) -> None:
    static = StaticPools(
        system.client,
        system.kube,
        system.task_queue,
        enabled,
        StaticPoolInput(cluster=system.cluster, nodepool="", lifecycle=FAST, poll_seconds=2),
    )
    controller = Controller(
        system.client,
        system.kube,
        system.provisioner_input(),
        system.task_queue,
        debounce_seconds=0.05,
        requeue_seconds=30.0,
        static=static,
    )
    system._tasks.append(asyncio.create_task(controller.run()))


async def ready_nodes(system: System, count: int) -> list[str] | None:
    """The pool's Ready Nodes when there are exactly `count` and exactly `count` NodeClaims not being deleted."""
    claims = [
        claim
        for claim in await system.nodeclaims()
        if claim.labels.get(labels.NODEPOOL) == POOL and claim.metadata.deletion_timestamp is None
    ]
    nodes = [
        node.metadata.name
        for node in await system.kube.list_nodes()
        if node.metadata.labels.get(labels.NODEPOOL) == POOL
        and is_node_ready(node)
        and node.metadata.deletion_timestamp is None
    ]
    return sorted(nodes) if len(claims) == count and len(nodes) == count else None


async def test_a_static_pool_holds_its_replicas_through_deletion_and_scaling(system: System) -> None:
    start_controller(system)
    await system.apply_examples()
    await system.kube.apply([static_pool(2)])
    first = await eventually(lambda: ready_nodes(system, 2), timeout=60, what="2 static nodes")
    handle = await started(
        system.client.get_workflow_handle_for(StaticNodePoolWorkflow.run, static_id(system.cluster, POOL))
    )

    await system.kube.delete_node(first[0])
    replaced = await eventually(
        lambda: _without(system, first[0]), timeout=90, what="the deleted node replaced"
    )
    assert first[1] in replaced and first[0] not in replaced

    await system.kube.apply([static_pool(3)])
    await eventually(lambda: ready_nodes(system, 3), timeout=60, what="3 static nodes")
    await system.kube.apply([static_pool(1)])
    await eventually(lambda: ready_nodes(system, 1), timeout=90, what="1 static node")

    async def settled_at_one() -> bool:  # a step in progress says "reconciling" until it ends
        return "1 of 1 replica(s)" in await current_details(handle)

    await eventually(settled_at_one, timeout=30, what="the workflow's details at 1 of 1 replica(s)")
    # The dynamic provisioner never made a NodeClaim for it: every NodeClaim of the pool came from its workflow.
    assert not [c for c in await system.nodeclaims() if c.labels.get(labels.NODEPOOL) == "default"]


async def test_a_drifted_static_node_is_replaced_before_it_goes(system: System) -> None:
    start_controller(system)
    await system.apply_examples()
    await system.kube.apply([static_pool(2)])
    first = await eventually(lambda: ready_nodes(system, 2), timeout=60, what="2 static nodes")
    # The requirements no longer admit the nodes' instance type: both drift, and are replaced one at a time
    # (the default Drifted budget, 10% of 2 nodes, is 1).
    await system.kube.apply([static_pool(2, "Standard_D4s_v5")])

    async def replaced() -> list[str] | None:
        nodes = await ready_nodes(system, 2)
        if nodes is None or set(nodes) & set(first):
            return None
        types = {
            n.metadata.labels.get(labels.INSTANCE_TYPE)
            for n in await system.kube.list_nodes()
            if n.metadata.name in nodes
        }
        return nodes if types == {"Standard_D4s_v5"} else None

    await eventually(replaced, timeout=120, what="both drifted nodes replaced by Standard_D4s_v5 nodes")
    handle = system.client.get_workflow_handle(static_id(system.cluster, POOL))
    woken = " ".join(summary for _, summary in await step_summaries(system.client, handle))
    assert (
        "initialized)" in woken
    )  # a replacement's initialization woke the step that let its drifted node go


async def test_consolidation_keeps_a_static_pools_empty_nodes(system: System) -> None:
    start_controller(system)
    await system.apply_examples()
    pool = static_pool(2)
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    await system.kube.apply([pool])
    nodes = await eventually(lambda: ready_nodes(system, 2), timeout=60, what="2 static nodes")
    settings = DisruptionSettings(poll_seconds=0.5, validation_seconds=1, activity_timeout_seconds=30)
    handle = await system.client.start_workflow(
        DisruptionWorkflow.run,
        DisruptionInput(cluster=system.cluster, lifecycle=FAST, settings=settings),
        id=disruption_id(system.cluster),
        task_queue=system.task_queue,
    )

    async def kept_as_static() -> DisruptionStatus | None:
        status = await handle.query(DisruptionWorkflow.plan)
        if status.plan is None or status.plan.unchanged:
            return None
        codes = {kept.node: [reason.code for reason in kept.reasons] for kept in status.plan.kept}
        return status if all("StaticNodePool" in codes.get(node, []) for node in nodes) else None

    status = await eventually(kept_as_static, timeout=30, what="a pass keeping the static nodes")
    await eventually(
        lambda: _passes_beyond(handle, status.passes + 3), timeout=30, what="three more disruption passes"
    )
    assert (await handle.query(DisruptionWorkflow.plan)).results == []
    assert await ready_nodes(system, 2) == nodes


async def _passes_beyond(handle: Any, passes: int) -> bool:
    return bool((await handle.query(DisruptionWorkflow.plan)).passes >= passes)


async def _without(system: System, gone: str) -> list[str] | None:
    nodes = await ready_nodes(system, 2)
    return nodes if nodes is not None and gone not in nodes else None


async def test_with_the_gate_off_a_static_pool_is_warned_about_and_left_alone(system: System) -> None:
    start_controller(system, enabled=False)
    await system.apply_examples()
    await system.kube.apply([static_pool(2)])

    warned = await eventually(
        lambda: events(system.kube, GATE_DISABLED, [POOL]), timeout=20, what="the FeatureGateDisabled event"
    )
    assert "spec.replicas is 2" in warned[0]["note"] and warned[0]["type"] == "Warning"
    # The warning is written where the workflow would have been signalled: none was started.
    with pytest.raises(RPCError):
        await system.client.get_workflow_handle(static_id(system.cluster, POOL)).describe()
    assert not [c for c in await system.nodeclaims() if c.labels.get(labels.NODEPOOL) == POOL]
