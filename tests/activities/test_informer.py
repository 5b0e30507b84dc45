"""`SnapshotInformer`: what the plans read between lists, fed by scripted watches (the real list-then-watch loop
against the API server is in `test_kubeclient.py`)."""

from __future__ import annotations

from typing import Any

from activities.informer import TOMBSTONES, Emit, SnapshotInformer
from core.cluster import EventType, WatchEvent


class ScriptedWatch:
    """A watch whose events the test hands on itself."""

    def __init__(self, kind: str, emit: Emit) -> None:
        self.kind = kind
        self.emit = emit
        self.listed = False
        self.stopped = False

    def run(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def send(self, change: EventType, name: str, version: int, namespace: str = "", **fields: Any) -> None:
        self.emit(
            WatchEvent(
                type=change,
                kind=self.kind,
                name=name,
                namespace=namespace or None,
                resource_version=version,
                object=thing(self.kind, name, version, namespace, **fields),
            )
        )


def thing(kind: str, name: str, version: int, namespace: str = "", **fields: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": str(version)}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "metadata": metadata, **fields}


def informer(*kinds: str) -> tuple[SnapshotInformer, dict[str, ScriptedWatch]]:
    watches: dict[str, ScriptedWatch] = {}

    def watch_for(kind: str, emit: Emit) -> ScriptedWatch:
        watches[kind] = ScriptedWatch(kind, emit)
        return watches[kind]

    return SnapshotInformer(kinds, watch_for), watches


def names(items: list[dict[str, Any]] | None) -> list[tuple[str, str, str]]:
    assert items is not None
    return [(i["kind"], i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items]


def test_nothing_is_answered_until_every_kind_asked_for_was_listed() -> None:
    cache, watches = informer("Pod", "Node")
    watches["Pod"].send(EventType.ADDED, "p", 3, "default")
    watches["Pod"].listed = True
    assert cache.items(["Pod", "Node"]) is None
    assert names(cache.items(["Pod"])) == [("Pod", "default", "p")]
    watches["Node"].listed = True
    assert names(cache.items(["Pod", "Node"])) == [("Pod", "default", "p")]


def test_objects_come_in_a_lists_order_and_follow_changes_and_deletions() -> None:
    cache, watches = informer("Pod", "Node")
    pods, nodes = watches["Pod"], watches["Node"]
    pods.listed = nodes.listed = True
    pods.send(EventType.ADDED, "b", 5, "ns1")
    pods.send(EventType.ADDED, "a", 6, "ns2")
    pods.send(EventType.ADDED, "z", 7, "ns1")
    nodes.send(EventType.ADDED, "n2", 8)
    nodes.send(EventType.ADDED, "n1", 9)
    assert names(cache.items(["Node", "Pod"])) == [
        ("Node", "", "n1"),
        ("Node", "", "n2"),
        ("Pod", "ns1", "b"),
        ("Pod", "ns1", "z"),
        ("Pod", "ns2", "a"),
    ]
    pods.send(EventType.MODIFIED, "b", 10, "ns1", spec={"nodeName": "n1"})
    nodes.send(EventType.DELETED, "n2", 11)
    items = cache.items(["Node", "Pod"])
    assert names(items) == [("Node", "", "n1"), ("Pod", "ns1", "b"), ("Pod", "ns1", "z"), ("Pod", "ns2", "a")]
    assert items is not None and items[1]["spec"] == {"nodeName": "n1"}


def test_a_write_through_is_seen_at_once_and_an_older_version_never_replaces_it() -> None:
    cache, watches = informer("NodeClaim")
    claims = watches["NodeClaim"]
    claims.listed = True
    cache.remember("NodeClaim", thing("NodeClaim", "c", 20, annotations="nominated"))
    assert names(cache.items(["NodeClaim"])) == [("NodeClaim", "", "c")]
    claims.send(EventType.MODIFIED, "c", 19)  # a watch behind the write-through
    items = cache.items(["NodeClaim"])
    assert items is not None and items[0]["metadata"]["resourceVersion"] == "20"
    claims.send(EventType.MODIFIED, "c", 25, status={"phase": "launched"})
    items = cache.items(["NodeClaim"])
    assert items is not None and items[0]["status"] == {"phase": "launched"}
    cache.remember("Pod", thing("Pod", "ignored", 1))  # a kind it does not follow
    assert cache.items(["NodeClaim"]) == items


def test_a_deletion_is_not_undone_by_a_late_write_through() -> None:
    cache, watches = informer("NodeClaim")
    claims = watches["NodeClaim"]
    claims.listed = True
    claims.send(EventType.ADDED, "c", 30)
    claims.send(EventType.DELETED, "c", 31)
    cache.remember("NodeClaim", thing("NodeClaim", "c", 30))
    assert cache.items(["NodeClaim"]) == []
    claims.send(EventType.ADDED, "c", 40)  # made again under the same name
    assert names(cache.items(["NodeClaim"])) == [("NodeClaim", "", "c")]


def test_tombstones_are_bounded() -> None:
    cache, watches = informer("Pod")
    pods = watches["Pod"]
    pods.listed = True
    for index in range(TOMBSTONES + 5):
        pods.send(EventType.DELETED, f"p{index}", index + 1, "ns")
    assert len(cache._tombstones) == TOMBSTONES
    assert ("Pod", "ns", "p0") not in cache._tombstones


def test_a_kind_whose_watch_failed_sends_plans_back_to_lists_and_stop_stops_every_watch() -> None:
    cache, watches = informer("Pod", "NodePool")
    for watch in watches.values():
        watch.listed = True
    assert cache.synced()
    watches["NodePool"].emit(RuntimeError("the server does not serve NodePools"))
    assert not cache.synced()
    assert cache.items(["Pod", "NodePool"]) is None
    assert cache.items(["Pod"]) == []
    cache.stop()
    assert all(watch.stopped for watch in watches.values())


def test_matching_answers_from_one_synced_kind_and_none_for_others() -> None:
    cache, watches = informer("Node", "Pod")
    nodes = watches["Node"]
    nodes.send(EventType.ADDED, "a", 1, spec={"providerID": "azure:///vm/a"})
    nodes.send(EventType.ADDED, "b", 2, spec={"providerID": "azure:///vm/b"})

    def vm_b(item: Any) -> bool:
        return bool(item["spec"]["providerID"] == "azure:///vm/b")

    assert cache.matching("Node", vm_b) is None  # not listed yet: the caller lists
    nodes.listed = True
    assert names(cache.matching("Node", vm_b)) == [("Node", "", "b")]
    nodes.send(EventType.DELETED, "b", 3)
    assert cache.matching("Node", vm_b) == []
    assert cache.matching("Pod", vm_b) is None
    assert cache.matching("VolumeAttachment", vm_b) is None  # a kind it does not follow


def test_objects_are_kept_without_their_managed_fields() -> None:
    cache, watches = informer("Pod")
    pods = watches["Pod"]
    pods.listed = True
    managed = [{"manager": "kube-scheduler", "fieldsV1": {"f:status": {}}}]
    pods.emit(
        WatchEvent(
            type=EventType.ADDED,
            kind="Pod",
            name="p",
            namespace="default",
            resource_version=4,
            object={
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default", "managedFields": managed},
            },
        )
    )
    [kept] = cache.items(["Pod"]) or []
    assert kept["metadata"] == {"name": "p", "namespace": "default"}


def test_get_answers_one_object_of_a_synced_kind_and_none_otherwise() -> None:
    cache, watches = informer("Node", "Pod")
    nodes, pods = watches["Node"], watches["Pod"]
    nodes.send(EventType.ADDED, "a", 1, spec={"providerID": "azure:///vm/a"})
    assert cache.get("Node", "a") is None  # not listed yet: the caller reads the server
    nodes.listed = pods.listed = True
    held = cache.get("Node", "a")
    assert held is not None and held["spec"] == {"providerID": "azure:///vm/a"}
    nodes.send(EventType.MODIFIED, "a", 2, spec={"providerID": "azure:///vm/a", "unschedulable": True})
    assert (cache.get("Node", "a") or {})["spec"]["unschedulable"] is True
    pods.send(EventType.ADDED, "p", 3, namespace="default")
    assert cache.get("Pod", "p") is None  # a namespaced object is found by its namespace
    assert cache.get("Pod", "p", "default") is not None
    nodes.send(EventType.DELETED, "a", 4)
    assert cache.get("Node", "a") is None
    assert cache.get("VolumeAttachment", "a") is None  # a kind it does not follow
