"""The controller's static NodePool hook: which watch events start or signal `static/<cluster>/<pool>`."""

from __future__ import annotations

from typing import Any

from core import labels
from core.cluster import EventType, WatchEvent
from core.static_messages import StaticPoolChanged, StaticPoolInput
from workers.controller.static_pools import GATE_DISABLED, StaticPools


class Client:
    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []

    async def start_workflow(self, run: Any, request: StaticPoolInput, *, id: str, **fields: Any) -> None:
        (signal,) = fields["start_signal_args"]
        assert isinstance(signal, StaticPoolChanged) and request.nodepool == id.rsplit("/", 1)[1]
        self.started.append((id, signal.why))


class Cluster:
    def __init__(self) -> None:
        self.events: list[Any] = []

    async def record_event(self, event: Any) -> None:
        self.events.append(event)


def nodepool(
    replicas: int | None,
    ready: bool = True,
    kind: EventType = EventType.MODIFIED,
    nodeclass_group: str = "karpenter.azure.com",
) -> WatchEvent:
    reference = {"group": nodeclass_group, "kind": "AKSNodeClass", "name": "default"}
    spec: dict[str, Any] = {"template": {"spec": {"nodeClassRef": reference}}}
    if replicas is not None:
        spec["replicas"] = replicas
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    manifest = {"metadata": {"name": "fixed", "uid": "u1"}, "spec": spec, "status": status}
    return WatchEvent(type=kind, kind="NodePool", name="fixed", resource_version=1, object=manifest)


def nodeclaim(name: str, deleting: bool = False, kind: EventType = EventType.MODIFIED) -> WatchEvent:
    metadata: dict[str, Any] = {"name": name, "labels": {labels.NODEPOOL: "fixed"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    return WatchEvent(
        type=kind, kind="NodeClaim", name=name, resource_version=1, object={"metadata": metadata}
    )


def hook(enabled: bool = True) -> tuple[StaticPools, Client, Cluster]:
    client, cluster = Client(), Cluster()
    pools = StaticPools(client, cluster, "q", enabled, StaticPoolInput(cluster="c", nodepool=""))  # type: ignore[arg-type]
    return pools, client, cluster


async def test_replicas_changes_and_readiness_signal_the_pools_workflow() -> None:
    pools, client, _ = hook()
    await pools.observe(nodepool(2, ready=False))
    await pools.observe(nodepool(2, ready=False))  # a status update: nothing new
    await pools.observe(nodepool(2))
    await pools.observe(nodepool(3))
    await pools.observe(nodepool(None))  # no longer static
    assert client.started == [
        ("static/c/fixed", "static NodePool seen, replicas 2"),
        ("static/c/fixed", "NodePool fixed became Ready"),
        ("static/c/fixed", "replicas 2 -> 3"),
        ("static/c/fixed", "NodePool fixed deleted or no longer static"),
    ]


async def test_a_nodeclaim_of_the_pool_going_signals_once() -> None:
    pools, client, _ = hook()
    await pools.observe(nodepool(2))
    client.started.clear()
    await pools.observe(nodeclaim("a", deleting=True))
    await pools.observe(nodeclaim("a", deleting=True))
    await pools.observe(nodeclaim("a", kind=EventType.DELETED))
    await pools.observe(nodeclaim("b", kind=EventType.DELETED))
    assert client.started == [
        ("static/c/fixed", "nodeclaim a deleted"),
        ("static/c/fixed", "nodeclaim b deleted"),
    ]


async def test_with_the_gate_off_the_pool_is_warned_about_once_per_value() -> None:
    pools, client, cluster = hook(enabled=False)
    await pools.observe(nodepool(2))
    await pools.observe(nodepool(2))
    await pools.observe(nodeclaim("a", deleting=True))
    assert client.started == []
    (event,) = cluster.events
    assert (event.reason, event.type, event.involved_object.kind) == (GATE_DISABLED, "Warning", "NodePool")
    assert "spec.replicas is 2" in event.message and "StaticCapacity" in event.message


async def test_another_providers_static_pool_is_left_alone() -> None:
    """As Karpenter's static controllers skip a NodePool its cloud provider does not manage: no workflow, and no
    warning even with the gate off."""
    for enabled in (True, False):
        pools, client, cluster = hook(enabled=enabled)
        await pools.observe(nodepool(2, nodeclass_group="karpenter.k8s.aws"))
        await pools.observe(nodepool(3, nodeclass_group="karpenter.k8s.aws"))
        await pools.observe(nodeclaim("a", deleting=True))
        assert (client.started, cluster.events) == ([], [])
