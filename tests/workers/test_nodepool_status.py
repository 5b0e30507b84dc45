"""The controller's NodePool status writer, fed watch events by hand: what it writes, and that it writes once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

from core.cluster import ClusterAPI, EventType, WatchEvent
from tests.cluster import eventually
from workers.controller.nodepool_status import NodePoolStatusWriter

NOW = datetime(2026, 1, 2, tzinfo=UTC)
REF = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}


class Recorder:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []

    async def patch_status(self, kind: str, name: str, status: dict[str, Any], resource_version: str) -> bool:
        self.patches.append((kind, name, status, resource_version))
        return True


def event(kind: str, raw: dict[str, Any], kind_type: EventType = EventType.ADDED) -> WatchEvent:
    return WatchEvent(type=kind_type, kind=kind, name=raw["metadata"]["name"], resource_version=1, object=raw)


def nodepool(
    name: str, values: list[str] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    requirement = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": values or ["spot"]}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "generation": 1,
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"template": {"spec": {"nodeClassRef": REF, "requirements": [requirement]}}},
        "status": status or {},
    }


NODECLASS = {
    "metadata": {"name": "default"},
    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
}


def claim(name: str, pool: str, provider_id: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "status": {"providerID": provider_id, "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }


def node(name: str, pool: str, provider_id: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true"},
        },
        "spec": {"providerID": provider_id},
        "status": {
            "capacity": {"cpu": "4", "memory": "16386432Ki", "pods": "110", "ephemeral-storage": "128Gi"}
        },
    }


def writer(*events: WatchEvent) -> tuple[NodePoolStatusWriter, Recorder]:
    recorder = Recorder()
    statuses = NodePoolStatusWriter(cast(ClusterAPI, recorder))
    for watched in events:
        statuses.observe(watched)
    return statuses, recorder


async def test_a_pool_with_one_running_node_is_written_ready_with_one_node_once() -> None:
    statuses, recorder = writer(
        event("AKSNodeClass", NODECLASS),
        event("NodePool", nodepool("default")),
        event("NodeClaim", claim("default-a", "default", "azure:///a")),
        event("Node", node("aks-default-a", "default", "azure:///a")),
        event("NodeClaim", {"metadata": {"name": "broken"}, "status": {"capacity": {"cpu": "many"}}}),
    )
    assert await statuses.write(NOW) == 1
    [(kind, name, status, version)] = recorder.patches
    assert (kind, name, version) == ("NodePool", "default", "7")
    assert status["nodes"] == 1
    assert status["resources"] == {
        "cpu": "4",
        "ephemeral-storage": "128Gi",
        "memory": "16386432Ki",
        "nodes": "1",
        "pods": "110",
    }
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}

    # The watch brings back what was written: nothing more to write.
    statuses.observe(event("NodePool", nodepool("default", status=status), EventType.MODIFIED))
    assert await statuses.write(NOW) == 0


def test_an_invalid_pool_fails_validation_without_stopping_the_others() -> None:
    statuses, _ = writer(
        event("AKSNodeClass", NODECLASS),
        event("NodePool", nodepool("bad", values=["reserved-ish"])),
        event("NodePool", nodepool("good")),
        event("NodePool", {"metadata": {"name": "garbage"}, "spec": "not an object"}),
    )
    wanted = statuses.wanted(NOW)
    assert set(wanted) == {"bad", "good"}
    conditions = {c["type"]: c for c in wanted["bad"][1]["conditions"]}
    assert conditions["ValidationSucceeded"]["status"] == "False"
    assert conditions["ValidationSucceeded"]["reason"] == "NodePoolValidationFailed"
    assert "spec.template.spec.requirements[0].values" in conditions["ValidationSucceeded"]["message"]
    assert conditions["Ready"]["status"] == "False"
    assert {c["type"]: c["status"] for c in wanted["good"][1]["conditions"]}["Ready"] == "True"


def test_a_deleted_nodeclass_and_a_deleted_node_change_the_status() -> None:
    statuses, _ = writer(
        event("AKSNodeClass", NODECLASS),
        event("NodePool", nodepool("default")),
        event("NodeClaim", claim("default-a", "default", "azure:///a")),
    )
    statuses.observe(event("AKSNodeClass", NODECLASS, EventType.DELETED))
    statuses.observe(event("NodeClaim", claim("default-a", "default", "azure:///a"), EventType.DELETED))
    _, status = statuses.wanted(NOW)["default"]
    assert status["nodes"] == 0
    nodeclass_ready = next(c for c in status["conditions"] if c["type"] == "NodeClassReady")
    assert (nodeclass_ready["status"], nodeclass_ready["reason"]) == ("False", "NodeClassNotFound")


def test_nodes_without_a_provider_id_each_count_once() -> None:
    lone = [node(f"static-{index}", "default", "") for index in range(2)]
    statuses, _ = writer(
        event("AKSNodeClass", NODECLASS),
        event("NodePool", nodepool("default")),
        *(event("Node", n) for n in lone),
    )
    assert statuses.wanted(NOW)["default"][1]["nodes"] == 2


async def test_a_watch_that_never_goes_quiet_still_gets_statuses_written() -> None:
    statuses, recorder = writer(event("AKSNodeClass", NODECLASS), event("NodePool", nodepool("default")))
    statuses.debounce_seconds, statuses.max_wait_seconds = 0.01, 0.05
    task = asyncio.create_task(statuses.run())

    async def churn() -> None:
        for index in range(10_000):
            statuses.observe(event("Node", node(f"n-{index}", "other", f"azure:///{index}")))
            await asyncio.sleep(0.002)

    churning = asyncio.create_task(churn())
    try:
        await eventually(lambda: _written(recorder), timeout=10, what="a status written during the churn")
        assert not churning.done()
    finally:
        for running in (task, churning):
            running.cancel()
        await asyncio.gather(task, churning, return_exceptions=True)


async def _written(recorder: Recorder) -> bool:
    return bool(recorder.patches)
