"""`KubernetesCluster`, the ClusterAPI on the official client: the list-then-watch loop, the rate limiter, the
error mapping and the configuration errors on their own, then every method against a real API server (the
session's local control plane, with Karpenter's CRDs from `deploy/crds/`, and kwok running the pods of Nodes
annotated for it)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from activities.kube import kube_event, node_state, pod_event
from activities.kubeclient import connection
from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from activities.kubeclient.errors import ClusterConfigError, api_error
from activities.kubeclient.listwatch import ListWatch
from activities.kubeclient.ratelimit import TokenBucket
from activities.kubeclient.resources import NODE, NODECLAIM
from core import labels
from core.api.kube import Node, is_node_ready
from core.api.manifests import load_yaml
from core.api.meta import Taint, TaintEffect
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import ConditionStatus, StatusCondition
from core.cluster import EventType, WatchEvent
from core.errors import (
    ConflictError,
    InvalidError,
    NotFoundError,
    PDBViolationError,
    ThrottledError,
    TransientError,
)
from core.messages import InitializeInput
from tests.cluster import record_calls
from workers.controlplane.run import (
    KWOK_ANNOTATION,
    KWOK_ANNOTATION_VALUE,
    REPOSITORY,
    ControlPlane,
    free_port,
)

T = TypeVar("T")


# --- rate limit and errors, no server --------------------------------------------------------------------


def test_the_token_bucket_allows_a_burst_then_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(5)] == pytest.approx([0, 0, 0, 0.1, 0.2])
    now[0] = 1.0  # a second refills 10 tokens, capped at the burst: the two borrowed are paid back first
    assert [bucket.reserve() for _ in range(2)] == pytest.approx([0, 0])


def api_exception(status: int, reason: str, message: str, **details: Any) -> ApiException:
    body = {"kind": "Status", "status": "Failure", "reason": reason, "message": message, "details": details}
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps(body)
    error.headers = {"Retry-After": "7"} if status == 429 else {}
    return error


def test_api_errors_map_to_the_typed_errors() -> None:
    not_found = api_error(api_exception(404, "NotFound", 'nodes "x" not found'))
    assert isinstance(not_found, NotFoundError)
    assert str(not_found) == 'nodes "x" not found'
    exists = api_error(api_exception(409, "AlreadyExists", "exists"))
    assert isinstance(exists, ConflictError)
    assert exists.code == "AlreadyExists"
    assert api_error(api_exception(409, "Conflict", "modified")).code == "Conflict"
    assert api_error(api_exception(410, "Expired", "too old")).code == "Expired"
    invalid = api_error(api_exception(422, "Invalid", "spec.replicas: Invalid value: -1"))
    assert isinstance(invalid, InvalidError)
    assert "spec.replicas" in str(invalid)
    assert isinstance(api_error(api_exception(400, "BadRequest", "bad")), InvalidError)
    assert isinstance(api_error(api_exception(403, "Forbidden", "no")), InvalidError)
    throttled = api_error(api_exception(429, "TooManyRequests", "slow down"))
    assert isinstance(throttled, ThrottledError)
    assert (throttled.retry_after_seconds, throttled.code) == (7.0, "TooManyRequests")
    budget = api_error(
        api_exception(
            429,
            "TooManyRequests",
            "would violate",
            causes=[
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web does not allow evicting pods currently",
                }
            ],
        )
    )
    assert budget.code == "DisruptionBudget"
    assert isinstance(api_error(api_exception(503, "ServiceUnavailable", "later")), TransientError)
    assert isinstance(api_error(ApiException(status=0, reason="SSLError\ncertificate")), TransientError)


# --- the list-then-watch loop, with a scripted server ----------------------------------------------------


def claim_object(name: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "resourceVersion": str(version)},
    }


def page(version: int, *items: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    listed = [
        {key: value for key, value in item.items() if key not in ("apiVersion", "kind")} for item in items
    ]
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if token:
        metadata["continue"] = token
    return {"metadata": metadata, "items": listed}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def gone() -> dict[str, Any]:
    return event(
        "ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    )


class FakeStream:
    def __init__(self, events: list[dict[str, Any]], then: Exception | None = None) -> None:
        self.events = events
        self.then = then

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.events
        if self.then is not None:
            raise self.then

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedServer:
    """Answers a `ListWatch`'s lists and watches from scripts, records the calls, and stops the loop when a
    script runs out."""

    def __init__(self, lists: list[Any], watches: list[Any], resource_version: str | None = None) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, str | None]] = []
        self.handed: list[WatchEvent | Exception] = []
        self.watcher = ListWatch(
            NODECLAIM,
            self.list_page,
            self.open_watch,
            self.handed.append,
            resource_version=resource_version,
            reconnect_max_wait=0.01,
        )

    def _next(self, script: list[Any]) -> Any:
        if not script:
            self.watcher.stop()
            raise TransientError("script done")
        answer = script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def list_page(self, token: str | None) -> Mapping[str, Any]:
        self.calls.append(("list", token))
        answer: Mapping[str, Any] = self._next(self.lists)
        return answer

    def open_watch(self, version: str) -> FakeStream:
        self.calls.append(("watch", version))
        stream: FakeStream = self._next(self.watches)
        return stream

    def run(self) -> list[tuple[str, str, int]]:
        self.watcher.run()
        return [
            (item.type.value, item.name, item.resource_version)
            if isinstance(item, WatchEvent)
            else ("error", str(item), 0)
            for item in self.handed
        ]


def test_a_410_relists_and_hands_on_only_what_changed() -> None:
    server = ScriptedServer(
        lists=[
            page(10, claim_object("a", 5), claim_object("b", 6)),
            # After the 410: a is as the watch last showed it, b is gone, c is new.
            page(20, claim_object("a", 11), claim_object("c", 16)),
        ],
        watches=[
            FakeStream(
                [event("MODIFIED", claim_object("a", 11)), event("BOOKMARK", claim_object("", 15)), gone()]
            ),
            # The server repeats c as the watch starts (it does not, but nothing may be handed on twice).
            FakeStream([event("ADDED", claim_object("c", 16)), event("DELETED", claim_object("a", 21))]),
        ],
    )
    assert server.run() == [
        ("ADDED", "a", 5),
        ("ADDED", "b", 6),
        ("MODIFIED", "a", 11),
        ("ADDED", "c", 16),
        ("DELETED", "b", 20),
        ("DELETED", "a", 21),
    ]
    assert server.calls == [("list", None), ("watch", "10"), ("list", None), ("watch", "20"), ("watch", "21")]
    deleted_b = next(
        item
        for item in server.handed
        if isinstance(item, WatchEvent) and item.name == "b" and item.type is EventType.DELETED
    )
    assert deleted_b.object["metadata"] == {"name": "b", "resourceVersion": "6"}


def test_a_broken_stream_reconnects_from_the_last_version_and_an_expired_one_relists() -> None:
    server = ScriptedServer(
        lists=[
            page(10, claim_object("a", 5), token="more"),
            page(10, claim_object("b", 6)),
            page(40, claim_object("a", 30)),
        ],
        watches=[
            FakeStream([event("MODIFIED", claim_object("a", 12))], then=TransientError("connection reset")),
            TransientError("connection refused"),
            FakeStream([event("ADDED", claim_object("c", 13))]),  # the server ended the watch: reopen from 13
            ConflictError("too old resource version", code="Expired"),  # a 410 answered to the watch request
        ],
    )
    assert server.run() == [
        ("ADDED", "a", 5),
        ("ADDED", "b", 6),
        ("MODIFIED", "a", 12),
        ("ADDED", "c", 13),
        ("MODIFIED", "a", 30),
        ("DELETED", "b", 40),
        ("DELETED", "c", 40),
    ]
    assert server.calls == [
        ("list", None),
        ("list", "more"),
        ("watch", "10"),
        ("watch", "12"),
        ("watch", "12"),
        ("watch", "13"),
        ("list", None),
        ("watch", "40"),
    ]


def test_an_error_retrying_cannot_fix_is_handed_on_and_ends_the_loop() -> None:
    server = ScriptedServer(
        lists=[InvalidError("nodeclaims.karpenter.sh is forbidden", code="Forbidden")], watches=[]
    )
    assert server.run() == [("error", "nodeclaims.karpenter.sh is forbidden", 0)]


def test_watching_from_a_version_hands_on_deletions_of_objects_it_never_listed() -> None:
    server = ScriptedServer(
        lists=[], watches=[FakeStream([event("DELETED", claim_object("a", 12))])], resource_version="11"
    )
    assert server.run()[0] == ("DELETED", "a", 12)


# --- configuration, no server ----------------------------------------------------------------------------


def kubeconfig(
    path: Path, server: str, token: str = "t", context: str = "local", ca: str | None = None
) -> Path:
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = ca
    else:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return path


@pytest.fixture
def no_kube_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NODEWRIGHT_KUBECONFIG", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def config_error(call: Callable[[], object]) -> str:
    with pytest.raises(ClusterConfigError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_missing_kubeconfig_or_an_unknown_context_is_one_line(
    tmp_path: Path, no_kube_env: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope"
    assert config_error(lambda: load_cluster(str(missing))) == f"kubeconfig {missing}: no such file"
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1")
    message = config_error(lambda: load_cluster(str(path), "prod"))
    assert message == f"kubeconfig {path} has no context 'prod' (it has: local)"
    garbage = tmp_path / "garbage"
    garbage.write_text("clusters: [")
    assert str(garbage) in config_error(lambda: load_cluster(str(garbage)))
    no_kube_env.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    no_kube_env.setenv("KUBERNETES_SERVICE_PORT", "443")
    assert config_error(lambda: load_cluster()).startswith("in-cluster service account: ")


def test_the_kubeconfig_comes_from_the_argument_then_nodewright_kubeconfig_then_kubeconfig(
    tmp_path: Path, no_kube_env: pytest.MonkeyPatch
) -> None:
    first = kubeconfig(tmp_path / "first", "https://127.0.0.1:1", context="first")
    second = kubeconfig(tmp_path / "second", "https://127.0.0.1:2", context="second")
    no_kube_env.setenv("KUBECONFIG", str(second))
    assert load_cluster().source == f"kubeconfig {second}, context second"
    no_kube_env.setenv("NODEWRIGHT_KUBECONFIG", str(first))
    assert load_cluster().server == "https://127.0.0.1:1"
    assert load_cluster(str(second)).server == "https://127.0.0.1:2"


async def test_an_unreachable_server_is_one_line(tmp_path: Path, no_kube_env: pytest.MonkeyPatch) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    path = kubeconfig(tmp_path / "config", server)
    async with load_cluster(str(path)) as cluster:
        with pytest.raises(ClusterConfigError) as caught:
            await cluster.check_connection()
    message = str(caught.value)
    assert message.startswith(f"cannot reach the API server {server} (kubeconfig {path}, context local): ")
    assert "Connection refused" in message
    assert "\n" not in message


# --- against a real API server ---------------------------------------------------------------------------


@pytest.fixture
async def cluster(control_plane: ControlPlane) -> AsyncIterator[KubernetesCluster]:
    async with load_cluster(str(control_plane.kubeconfig)) as cluster:
        yield cluster


@pytest.fixture
async def namespace(cluster: KubernetesCluster) -> AsyncIterator[str]:
    name = f"kubeclient-{uuid.uuid4().hex[:8]}"
    await cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
    yield name
    await cluster.delete_object("Namespace", name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(check: Callable[[], Awaitable[T]], timeout: float = 30.0, interval: float = 0.1) -> T:
    """The first truthy result of `check`, polled until `timeout` (then the test fails)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached within {timeout} s; last result: {result!r}")
        await asyncio.sleep(interval)


def nodeclaim_manifest(name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/nodepool": "default"},
            "finalizers": finalizers or [],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ],
        },
    }


def kwok_node(name: str) -> dict[str, Any]:
    """A Node kwok keeps Ready and runs the pods of."""
    resources = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "spec": {"providerID": f"kwok://{name}"},
        "status": {"capacity": resources, "allocatable": resources},
    }


def example(kind: str, name: str) -> dict[str, Any]:
    """The NodePool or AKSNodeClass of `deploy/examples/nodepool.yaml`, renamed."""
    documents = load_yaml((REPOSITORY / "deploy/examples/nodepool.yaml").read_text(), "nodepool.yaml")
    document = copy.deepcopy(next(item for item in documents if item["kind"] == kind))
    document["metadata"]["name"] = name
    return dict(document)


async def test_reads_return_the_models_and_none_when_absent(
    cluster: KubernetesCluster, namespace: str
) -> None:
    node, pool, nodeclass, claim = unique("node"), unique("pool"), unique("class"), unique("claim")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": namespace}}
    results = await cluster.apply(
        [
            kwok_node(node),
            example("NodePool", pool),
            example("AKSNodeClass", nodeclass),
            nodeclaim_manifest(claim),
            {**secret, "stringData": {"token-id": "abc123", "token-secret": "s3cr3t"}},
        ]
    )
    assert results == [
        f"node/{node} serverside-applied",
        f"nodepool.karpenter.sh/{pool} serverside-applied",
        f"aksnodeclass.karpenter.azure.com/{nodeclass} serverside-applied",
        f"nodeclaim.karpenter.sh/{claim} serverside-applied",
        "secret/token serverside-applied",
    ]
    try:
        got = await cluster.get_node(node)
        assert got is not None
        assert got.spec.provider_id == f"kwok://{node}"
        found = await cluster.find_node_by_provider_id(f"kwok://{node}")
        assert found is not None
        assert found.metadata.name == node
        assert await cluster.find_node_by_provider_id("kwok://nobody") is None
        assert await cluster.get_node(unique("absent")) is None
        assert node in {item.metadata.name for item in await cluster.list_nodes()}

        got_pool = await cluster.get_nodepool(pool)
        assert got_pool is not None
        assert got_pool.metadata.name == pool
        got_class = await cluster.get_nodeclass(nodeclass)
        assert got_class is not None
        assert got_class.metadata.name == nodeclass
        assert await cluster.get_nodepool(unique("absent")) is None
        assert await cluster.get_nodeclass(unique("absent")) is None
        got_claim = await cluster.get_nodeclaim(claim)
        assert got_claim is not None
        assert got_claim.nodepool_name == "default"
        assert claim in {item.name for item in await cluster.list_nodeclaims()}

        read = await cluster.read_secret(namespace, "token")
        assert read is not None and read.metadata.name == "token" and read.metadata.uid
        assert read.data == {"token-id": "abc123", "token-secret": "s3cr3t"}
        assert "s3cr3t" not in repr(read)
        assert await cluster.read_secret(namespace, "absent") is None

        snapshot = await cluster.snapshot()
        assert node in {item.metadata.name for item in snapshot.nodes}
        assert pool in {item.metadata.name for item in snapshot.nodepools}
        assert nodeclass in {item.metadata.name for item in snapshot.nodeclasses}
        assert claim in {item.name for item in snapshot.nodeclaims}
        assert not [
            problem
            for problem in snapshot.problems
            if any(name in problem for name in (node, pool, nodeclass, claim))
        ]
    finally:
        await cluster.delete_node(node)
        await cluster.delete_nodeclaim(claim)
        await cluster.delete_object("NodePool", pool)
        await cluster.delete_object("AKSNodeClass", nodeclass)


async def test_a_secret_is_created_once_and_deleted_only_while_it_is_the_one_read(
    cluster: KubernetesCluster, namespace: str
) -> None:
    def secret(value: str) -> dict[str, Any]:
        metadata = {"name": "token", "namespace": namespace}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "stringData": {"key": value}}

    created = await cluster.create_secret(secret("one"))
    assert created.metadata.uid and created.data == {}, "the values are not echoed back"
    with pytest.raises(ConflictError):
        await cluster.create_secret(secret("two"))
    assert await cluster.delete_secret(namespace, "token", "not-its-uid") is False
    read = await cluster.read_secret(namespace, "token")
    assert read is not None and read.data == {"key": "one"}, "a delete for another uid leaves it"
    assert await cluster.delete_secret(namespace, "token", created.metadata.uid) is True
    assert await cluster.read_secret(namespace, "token") is None
    assert await cluster.delete_secret(namespace, "token", created.metadata.uid) is False


async def test_nodeclaims_are_created_once_and_deleted_after_their_finalizer(
    cluster: KubernetesCluster,
) -> None:
    name = unique("claim")
    created = await cluster.create_nodeclaim(
        NodeClaim.parse(nodeclaim_manifest(name, ["karpenter.sh/termination"]))
    )
    again = await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(name)))
    assert again.metadata.uid == created.metadata.uid
    assert again.metadata.finalizers == ["karpenter.sh/termination"]

    patched = await cluster.patch_nodeclaim_metadata(name, labels={"a": "1"}, annotations={"b": "2"})
    assert patched is not None
    assert (patched.labels["a"], patched.metadata.annotations["b"]) == ("1", "2")
    assert patched.labels["karpenter.sh/nodepool"] == "default"

    await cluster.delete_nodeclaim(name)
    deleting = await cluster.get_nodeclaim(name)
    assert deleting is not None
    assert deleting.metadata.deletion_timestamp is not None
    released = await cluster.patch_nodeclaim_metadata(name, remove_finalizers=["karpenter.sh/termination"])
    assert released is not None
    assert released.metadata.finalizers == []
    assert await eventually(lambda: _is_none(cluster.get_nodeclaim(name)))
    await cluster.delete_nodeclaim(name)  # already gone: done
    assert await cluster.patch_nodeclaim_metadata(name, labels={"a": "2"}) is None


async def _is_none(value: Awaitable[object]) -> bool:
    return (await value) is None


async def test_the_status_goes_through_the_status_subresource(cluster: KubernetesCluster) -> None:
    name = unique("claim")
    created = await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(name)))
    try:
        generation = created.metadata.generation
        # Someone else changes the NodeClaim first: the status write meets a conflict and lands on the new version.
        cluster._custom.patch_cluster_custom_object(
            *NODECLAIM.custom, name, {"metadata": {"labels": {"changed": "yes"}}}
        )
        provider_id = (
            "azure:///subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/virtualMachines/v"
        )

        def launched(claim: NodeClaim) -> None:
            claim.status.provider_id = provider_id
            claim.status.capacity = {"cpu": "4"}
            claim.status.conditions = [
                StatusCondition(
                    type="Launched",
                    status=ConditionStatus.TRUE,
                    reason="Launched",
                    last_transition_time=datetime.now(UTC),
                )
            ]
            claim.spec.requirements[0].values = ["spot"]  # not for a status write: ignored

        updated = await cluster.change_nodeclaim_status(name, launched)
        assert updated is not None
        assert updated.status.provider_id == provider_id
        assert updated.status.capacity == {"cpu": "4"}
        assert updated.is_true(NodeClaimConditionType.LAUNCHED)
        assert updated.spec.requirements[0].values == ["on-demand"]
        assert updated.metadata.generation == generation
        assert updated.labels["changed"] == "yes"
        stored = await cluster.get_nodeclaim(name)
        assert stored is not None
        assert stored.status.provider_id == provider_id
        assert stored.metadata.generation == generation
        assert await cluster.change_nodeclaim_status(unique("absent"), launched) is None
    finally:
        await cluster.delete_nodeclaim(name)


async def test_a_status_change_starts_from_the_version_it_wrote_and_is_made_again_on_a_newer_one(
    cluster: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("claim")
    await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(name)))
    reads: list[Any] = []

    def condition(kind: str) -> Callable[[NodeClaim], None]:
        def change(claim: NodeClaim) -> None:
            now = datetime.now(UTC)
            claim.status.conditions = [c for c in claim.status.conditions if c.type != kind] + [
                StatusCondition(type=kind, status=ConditionStatus.TRUE, reason=kind, last_transition_time=now)
            ]

        return change

    read = record_calls(monkeypatch, cluster._custom, "get_cluster_custom_object", reads)
    try:
        # What it created is where its first change starts: no GET.
        launched = await cluster.change_nodeclaim_status(name, condition("Launched"))
        assert launched is not None and launched.is_true(NodeClaimConditionType.LAUNCHED)
        assert reads == []

        # Another writer adds a condition: the next change meets a conflict, reads, and keeps both.
        other = read(*NODECLAIM.custom, name)
        drifted = {"type": "Drifted", "status": "True", "reason": "Drifted", "message": ""}
        other["status"]["conditions"].append({**drifted, "lastTransitionTime": "2026-01-01T00:00:00Z"})
        cluster._custom.replace_cluster_custom_object_status(*NODECLAIM.custom, name, other)
        reads.clear()
        registered = await cluster.change_nodeclaim_status(name, condition("Registered"))
        assert registered is not None and len(reads) == 1
        assert {c.type for c in registered.status.conditions} >= {"Launched", "Drifted", "Registered"}
        assert await cluster.change_nodeclaim_status(unique("absent"), condition("Launched")) is None
    finally:
        monkeypatch.undo()
        await cluster.delete_nodeclaim(name)


async def test_concurrent_node_patches_all_land(cluster: KubernetesCluster) -> None:
    name = unique("node")
    await cluster.apply([kwok_node(name)])
    try:
        taints = [Taint(key=f"example.com/t{index}", effect=TaintEffect.NO_SCHEDULE) for index in range(8)]
        # Each call replaces the whole taint list: only the resourceVersion precondition and the retry on
        # conflict keep one call from dropping another's taint.
        await asyncio.gather(
            *(
                cluster.patch_node(name, labels={f"l{index}": "x"}, add_taints=[taint])
                for index, taint in enumerate(taints)
            ),
            cluster.patch_node(name, add_finalizers=["example.com/keep"], unschedulable=True),
        )
        node = await cluster.get_node(name)
        assert node is not None
        held = {taint.key for taint in node.spec.taints}
        assert held >= {taint.key for taint in taints}
        assert all(node.metadata.labels[f"l{index}"] == "x" for index in range(len(taints)))
        assert node.metadata.finalizers == ["example.com/keep"]
        assert node.spec.unschedulable

        replaced = await cluster.patch_node(
            name,
            remove_taint_keys=["example.com/t0"],
            add_taints=[Taint(key="example.com/t0", value="v", effect=TaintEffect.NO_EXECUTE)],
            remove_finalizers=["example.com/keep"],
            unschedulable=False,
        )
        assert replaced is not None
        assert [(t.value, t.effect) for t in replaced.spec.taints if t.key == "example.com/t0"] == [
            ("v", TaintEffect.NO_EXECUTE)
        ]
        assert replaced.metadata.finalizers == []
        assert not replaced.spec.unschedulable
    finally:
        await cluster.delete_node(name)
    assert await eventually(lambda: _is_none(cluster.get_node(name)))
    assert await cluster.patch_node(name, labels={"a": "b"}) is None
    await cluster.delete_node(name)


async def test_an_eviction_a_budget_forbids_is_a_pdb_violation(
    cluster: KubernetesCluster, namespace: str
) -> None:
    node = unique("node")
    await cluster.apply(
        [
            kwok_node(node),
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "nodeSelector": {"kubernetes.io/hostname": node},
                            "containers": [{"name": "web", "image": "nginx"}],
                        },
                    },
                },
            },
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"minAvailable": "100%", "selector": {"matchLabels": {"app": "web"}}},
            },
        ]
    )
    try:

        async def running_pod() -> Any:
            pods = await cluster.list_pods(namespace, label_selector="app=web")
            return next(
                (
                    pod
                    for pod in pods
                    if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
                ),
                None,
            )

        pod = await eventually(running_pod)
        assert pod.spec.node_name == node
        assert [item.metadata.name for item in await cluster.list_pods_on_node(node)] == [pod.metadata.name]

        async def budget_counts_it() -> bool:
            pdb = await cluster.get_object("PodDisruptionBudget", "web", namespace)
            status = (pdb or {}).get("status") or {}
            return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

        await eventually(budget_counts_it)
        with pytest.raises(PDBViolationError):
            await cluster.evict_pod(namespace, pod.metadata.name)

        await cluster.delete_object("PodDisruptionBudget", "web", namespace)
        await cluster.evict_pod(namespace, pod.metadata.name)
        await eventually(lambda: _pod_gone(cluster, namespace, pod.metadata.name))
        await cluster.evict_pod(namespace, pod.metadata.name)  # already gone: done

        replacement = await eventually(running_pod)
        await cluster.delete_pod(namespace, replacement.metadata.name, grace_period_seconds=0)
        await eventually(lambda: _pod_gone(cluster, namespace, replacement.metadata.name))
        await cluster.delete_pod(namespace, replacement.metadata.name)  # already gone: done
    finally:
        await cluster.delete_object("Deployment", "web", namespace)
        await cluster.delete_node(node)


async def _pod_gone(cluster: KubernetesCluster, namespace: str, name: str) -> bool:
    return await cluster.get_object("Pod", name, namespace) is None


async def test_events_are_published_in_events_k8s_io(
    cluster: KubernetesCluster, control_plane: ControlPlane, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    claim = unique("claim")
    created = await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(claim)))
    try:
        on_claim = kube_event(
            "NodeClaim", claim, "DisruptionBlocked", "Cannot disrupt NodeClaim: pdb prevents it", warning=True
        )
        on_claim.first_timestamp = datetime(
            2025, 1, 2, 3, 4, 5, tzinfo=UTC
        )  # no microseconds: MicroTime still gets six digits
        await cluster.record_event(on_claim)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }
        await cluster.apply([pod])
        pod_uid = (await cluster.get_object("Pod", "web-1", namespace) or {})["metadata"]["uid"]
        await cluster.record_event(
            pod_event(f"{namespace}/web-1", "Nominated", "Pod should schedule on: nodeclaim/x")
        )

        events = await cluster.list_objects("Event", "default")
        mine = next(item for item in events if (item.get("regarding") or {}).get("name") == claim)
        # The uid (looked up, as the caller gave none) and no namespace for a cluster-scoped object: what
        # `kubectl describe` selects events by.
        assert mine["regarding"] == {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "name": claim,
            "uid": created.metadata.uid,
        }
        assert (mine["reason"], mine["type"], mine["note"]) == (
            "DisruptionBlocked",
            "Warning",
            "Cannot disrupt NodeClaim: pdb prevents it",
        )
        assert (mine["reportingController"], mine["action"]) == ("karpenter", "DisruptionBlocked")
        assert mine["eventTime"] == "2025-01-02T03:04:05.000000Z"
        [nominated] = [
            item
            for item in await cluster.list_objects("Event", namespace)
            if item.get("reportingController") == "karpenter"
        ]
        assert nominated["regarding"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web-1",
            "namespace": namespace,
            "uid": pod_uid,
        }
        assert nominated["reason"] == "Nominated"

        described = control_plane.kubectl("describe", "nodeclaim", claim).stdout
        events_section = described.split("Events:", 1)[1]
        assert "DisruptionBlocked" in events_section and "karpenter" in events_section
        assert "Cannot disrupt NodeClaim: pdb prevents it" in events_section
        described = control_plane.kubectl("describe", "pod", "web-1", "-n", namespace).stdout
        assert "Pod should schedule on: nodeclaim/x" in described.split("Events:", 1)[1]
    finally:
        await cluster.delete_nodeclaim(claim)

    with caplog.at_level(logging.WARNING, logger="nodewright.kube"):
        await cluster.record_event(pod_event(f"{unique('absent')}/web-1", "Nominated", "nowhere to go"))
    assert "could not record event Nominated on Pod web-1" in caplog.text


async def test_a_repeated_event_is_dropped_within_karpenters_window_and_counted_after_it(
    cluster: KubernetesCluster, control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = unique("node")
    await cluster.apply([kwok_node(node)])
    clock = [1000.0]
    monkeypatch.setattr(cluster, "event_clock", lambda: clock[0])
    try:
        draining = "Failed to drain node, 1 pods are waiting to be evicted"
        for _ in range(3):  # the same event three times within two minutes: one Event
            await cluster.record_event(kube_event("Node", node, "FailedDraining", draining, warning=True))
        await cluster.record_event(kube_event("Node", node, "Unconsolidatable", "pdb prevents it"))

        async def about_node() -> list[dict[str, Any]]:
            events = await cluster.list_objects("Event", "default")
            return [item for item in events if (item.get("regarding") or {}).get("name") == node]

        assert sorted(item["reason"] for item in await about_node()) == ["FailedDraining", "Unconsolidatable"]

        clock[0] += 121  # past FailedDraining's two minutes, inside Unconsolidatable's fifteen
        await cluster.record_event(kube_event("Node", node, "FailedDraining", draining, warning=True))
        await cluster.record_event(kube_event("Node", node, "Unconsolidatable", "another reason"))
        events = await about_node()
        assert sorted(item["reason"] for item in events) == ["FailedDraining", "Unconsolidatable"]
        [repeated] = [item for item in events if item["reason"] == "FailedDraining"]
        assert repeated["series"]["count"] == 2
        assert "(x2 over" in control_plane.kubectl("describe", "node", node).stdout.split("Events:", 1)[1]

        clock[0] += 121  # a different message is a different event after the window
        await cluster.record_event(kube_event("Node", node, "FailedDraining", "Failed to drain node, other"))
        assert len([item for item in await about_node() if item["reason"] == "FailedDraining"]) == 2
    finally:
        await cluster.delete_node(node)


async def test_apply_lists_every_invalid_object(cluster: KubernetesCluster, namespace: str) -> None:
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": {
            "replicas": -1,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}},
        },
    }
    good = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "good", "namespace": namespace},
        "data": {"a": "b"},
    }
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(InvalidError) as caught:
        await cluster.apply([bad, good, unknown, {"kind": "ConfigMap"}])
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"Deployment {namespace}/bad: ") and "spec.replicas" in lines[0]
    assert lines[1] == f"the API server at {cluster.server} serves no kind Widget example.com/v1"
    assert lines[2] == "ConfigMap: apiVersion, metadata.name: Field required"
    assert (await cluster.get_object("ConfigMap", "good", namespace) or {}).get("data") == {"a": "b"}
    with pytest.raises(InvalidError):
        await cluster.apply("kind: [")


async def test_scale_and_objects_by_kind(cluster: KubernetesCluster, namespace: str) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }
    assert await cluster.apply(yaml.safe_dump(deployment)) == ["deployment.apps/web serverside-applied"]
    await cluster.scale("Deployment", namespace, "web", 3)
    stored = await cluster.get_object("Deployment", "web", namespace)
    assert stored is not None
    assert stored["spec"]["replicas"] == 3
    [listed] = await cluster.list_objects("Deployment", namespace, label_selector="")
    assert (listed["kind"], listed["apiVersion"], listed["metadata"]["name"]) == (
        "Deployment",
        "apps/v1",
        "web",
    )
    await cluster.delete_object("Deployment", "web", namespace)
    await cluster.delete_object("Deployment", "web", namespace)
    assert await cluster.get_object("Deployment", "web", namespace) is None
    with pytest.raises(InvalidError):
        await cluster.get_object("Widget", "w")


async def test_the_watch_hands_on_each_change_exactly_once(control_plane: ControlPlane) -> None:
    # Watches the server ends every second: the changes below span several reconnects.
    cluster = load_cluster(str(control_plane.kubeconfig), watch_timeout_seconds=1)
    before, during = unique("claim"), unique("claim")
    await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(before)))
    seen: list[WatchEvent] = []
    stream = cluster.watch(0)

    async def consume() -> None:
        async for item in stream:
            seen.append(item)

    def of(name: str) -> list[str]:
        return [item.type.value for item in seen if item.name == name]

    task = asyncio.create_task(consume())
    try:
        await eventually(lambda: _true(of(before) == ["ADDED"]), timeout=10)
        await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(during)))
        await asyncio.sleep(1.5)
        await cluster.patch_nodeclaim_metadata(during, labels={"step": "patched"})
        await asyncio.sleep(1.5)
        await cluster.delete_nodeclaim(during)
        await cluster.delete_nodeclaim(before)
        await eventually(
            lambda: _true(of(during)[-1:] == ["DELETED"] and of(before)[-1:] == ["DELETED"]), timeout=10
        )
        await asyncio.sleep(1.5)  # another reconnect: nothing is handed on again
        assert of(during) == ["ADDED", "MODIFIED", "DELETED"]
        assert of(before) == ["ADDED", "DELETED"]
        versions = [item.resource_version for item in seen if item.name == during]
        assert versions == sorted(versions)
        modified = next(item for item in seen if item.name == during and item.type is EventType.MODIFIED)
        assert modified.object["metadata"]["labels"]["step"] == "patched"
        assert modified.kind == "NodeClaim"
        assert modified.namespace is None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.aclose()
        await cluster.close()

    def watch_threads() -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread.name.startswith("nodewright-watch-")]

    await eventually(lambda: _true(not watch_threads()), timeout=10)


async def _true(value: bool) -> bool:
    return value


async def test_the_watch_sees_pods_and_nodes(cluster: KubernetesCluster, namespace: str) -> None:
    node = unique("node")
    stream = cluster.watch()
    seen: list[WatchEvent] = []

    async def consume() -> None:
        async for item in stream:
            seen.append(item)

    task = asyncio.create_task(consume())
    try:
        await cluster.apply(
            [
                kwok_node(node),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "solo", "namespace": namespace},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "c", "image": "nginx"}],
                    },
                },
            ]
        )
        await eventually(
            lambda: _true(
                any(item.kind == "Node" and item.name == node for item in seen)
                and any(
                    item.kind == "Pod"
                    and item.namespace == namespace
                    and item.object.get("status", {}).get("phase") == "Running"
                    for item in seen
                )
            )
        )
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.aclose()
        await cluster.delete_pod(namespace, "solo", grace_period_seconds=0)
        await cluster.delete_node(node)


async def refused(control_plane: ControlPlane, path: Path, token: str) -> str:
    """The message `check_connection` gives for the admin kubeconfig with another token."""
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = token
    path.write_text(yaml.safe_dump(config))
    async with load_cluster(str(path)) as cluster:
        with pytest.raises(ClusterConfigError) as caught:
            await cluster.check_connection()
    message = str(caught.value)
    assert message.startswith(
        f"the API server {control_plane.server} refused the credentials of kubeconfig {path}"
    )
    assert "\n" not in message
    return message


async def test_refused_credentials_are_one_line(
    control_plane: ControlPlane, cluster: KubernetesCluster, namespace: str, tmp_path: Path
) -> None:
    assert ": 401 " in await refused(control_plane, tmp_path / "unknown", "not-the-token")
    # A ServiceAccount with no role: authenticated (GET /version works), but it may not list nodes.
    control_plane.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = control_plane.kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    message = await refused(control_plane, tmp_path / "nobody", token)
    assert ": 403 " in message
    assert f"system:serviceaccount:{namespace}:nobody" in message
    await cluster.check_connection()


async def test_a_node_patch_holds_when_only_what_it_does_not_change_changed_meanwhile(
    cluster: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("node")
    registering = kwok_node(name)
    registering["metadata"]["finalizers"] = ["x.io/first"]
    registering["spec"]["taints"] = [{"key": labels.UNREGISTERED_TAINT, "effect": "NoExecute"}]
    await cluster.apply([registering])
    read = cluster._core.read_node
    writes: list[Any] = []
    between: list[Callable[[], Any]] = []

    def read_then_another_writer(*args: Any, **kwargs: Any) -> Any:
        current = read(*args, **kwargs)
        if between:
            between.pop(0)()
        return current

    monkeypatch.setattr(cluster._core, "read_node", read_then_another_writer)
    record_calls(monkeypatch, cluster._core, "patch_node", writes)
    try:
        # A kubelet heartbeat lands between our read and our write: it touches nothing we change.
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "heartbeat"}
        between.append(lambda: cluster._core.patch_node_status(name, {"status": {"conditions": [ready]}}))
        patched = await cluster.patch_node(
            name, labels={"a": "b"}, remove_taint_keys=[labels.UNREGISTERED_TAINT], add_finalizers=["x.io/f"]
        )
        assert patched is not None and len(writes) == 1  # no conflict, no second round trip
        assert patched.metadata.labels["a"] == "b" and patched.metadata.finalizers == ["x.io/first", "x.io/f"]
        assert labels.UNREGISTERED_TAINT not in [t.key for t in patched.spec.taints]

        # Another writer's taint lands after our write: the version this client remembers (what it wrote) is out
        # of date, so ours fails its test and is made again on top of theirs.
        theirs = {"key": "example.com/theirs", "effect": "NoSchedule"}
        cluster._core.patch_node(name, {"spec": {"taints": [theirs]}})
        ours = Taint(key="example.com/ours", effect=TaintEffect.NO_SCHEDULE)
        patched = await cluster.patch_node(name, add_taints=[ours])
        assert patched is not None and len(writes) == 4  # theirs, ours failing its test, ours again
        assert [t.key for t in patched.spec.taints if t.key.startswith("example.com/")] == [
            "example.com/theirs",
            "example.com/ours",
        ]
        # Nobody wrote after us: the next patch starts from what we wrote, without a GET.
        between.append(lambda: pytest.fail("read the Node although it remembered the version it wrote"))
        await cluster.patch_node(name, labels={"c": "d"})
        assert len(writes) == 5
        between.clear()
        await cluster.patch_node(name, remove_finalizers=["x.io/first", "x.io/f"])
    finally:
        monkeypatch.undo()
        await cluster.delete_node(name)


async def test_the_look_after_a_node_write_takes_its_answer_once_and_only_while_it_is_fresh(
    cluster: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("node")
    await cluster.apply([kwok_node(name)])
    try:
        assert cluster.node_seen(name) is None  # created by apply: not this client's patch
        await cluster.patch_node(name, labels={"a": "b"})
        # The look right after our write takes what the write answered.
        node = cluster.node_seen(name)
        assert node is not None and node.metadata.labels["a"] == "b"
        # Once: another writer's change since is only seen by a read.
        assert cluster.node_seen(name) is None
        # A read in between leaves it there to take, as the read answered (newer still).
        await cluster.patch_node(name, labels={"c": "d"})
        await cluster.get_node(name)
        node = cluster.node_seen(name)
        assert node is not None and node.metadata.labels["c"] == "d"
        # Nor is a write's answer once it is no longer fresh.
        await cluster.patch_node(name, labels={"e": "f"})
        monkeypatch.setattr(connection, "JUST_WRITTEN_SECONDS", 0.0)
        assert cluster.node_seen(name) is None
    finally:
        monkeypatch.undo()
        await cluster.delete_node(name)


async def test_a_remembered_node_is_forgotten_when_it_is_old_or_deleted_and_kept_without_managed_fields(
    cluster: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [unique("node") for _ in range(2)]
    await cluster.apply([kwok_node(name) for name in names])
    reads: list[Any] = []
    record_calls(monkeypatch, cluster._core, "read_node", reads)
    now = [1000.0]
    monkeypatch.setattr(cluster, "_clock", lambda: now[0])
    try:
        first, second = names
        await cluster.patch_node(first, labels={"a": "b"})
        assert len(reads) == 1  # nothing remembered yet: read, then patched
        remembered = cluster._remembered_object("Node", first)
        assert remembered is not None and remembered["metadata"]["labels"]["a"] == "b"
        assert "managedFields" not in remembered["metadata"]  # the server's answer had them
        # Within the time: the next change starts from what was remembered, without a GET.
        now[0] += connection.REMEMBERED_SECONDS - 1
        await cluster.patch_node(first, labels={"c": "d"})
        assert len(reads) == 1
        # Untouched for longer than that: forgotten, read again; and forgotten too from the memory of the client
        # once a newer object comes in (the old name does not stay behind).
        now[0] += connection.REMEMBERED_SECONDS
        await cluster.patch_node(second, labels={"a": "b"})
        assert cluster._remembered_object("Node", first) is None
        assert ("Node", first) not in cluster._remembered
        await cluster.patch_node(first, labels={"e": "f"})
        assert len(reads) == 3
        # Deleted by this client: forgotten at once.
        await cluster.delete_node(second)
        assert ("Node", second) not in cluster._remembered
    finally:
        monkeypatch.undo()
        for name in names:
            await cluster.delete_node(name)


async def test_registrations_lookup_comes_from_the_informer_and_a_stale_copy_costs_only_a_second_try(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("node")
    provider_id = (
        f"azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/{name}"
    )
    async with load_cluster(str(control_plane.kubeconfig)) as cluster:
        cluster.start_informer()
        informer = cluster.informer
        assert informer is not None
        node = kwok_node(name)
        node["spec"] = {
            "providerID": provider_id,
            "taints": [{"key": labels.UNREGISTERED_TAINT, "effect": "NoExecute"}],
        }
        await cluster.apply([node])
        try:
            # Settled first: kwok turns it Ready and the node lifecycle controller then takes its not-ready taint
            # off, a change to the taints our patch tests (which would cost the second try this test counts).
            def settled(held: dict[str, Any] | None) -> bool:
                if held is None:
                    return False
                node = Node.model_validate(held)
                return is_node_ready(node) and [taint.key for taint in node.spec.taints] == [
                    labels.UNREGISTERED_TAINT
                ]

            await eventually(lambda: _true(settled(informer.get(NODE.kind, name))), timeout=30)
            calls: list[str] = []
            record_calls(monkeypatch, cluster._core, "read_node", calls, lambda _: "GET")
            write = record_calls(monkeypatch, cluster._core, "patch_node", calls, lambda _: "PATCH")
            found = await cluster.find_node_by_provider_id(provider_id)
            assert found is not None and found.metadata.name == name and calls == []
            # The write starts from the informer's copy: one PATCH, no GET.
            patched = await cluster.patch_node(
                name, labels={"a": "b"}, remove_taint_keys=[labels.UNREGISTERED_TAINT]
            )
            assert patched is not None and calls == ["PATCH"]
            assert labels.UNREGISTERED_TAINT not in [t.key for t in patched.spec.taints]

            # A copy from before another writer's change of a field ours changes: that PATCH fails its test, and the
            # write is made again on the version read, keeping theirs.
            async def ours_seen() -> dict[str, Any] | None:
                held = informer.get(NODE.kind, name)
                return held if held is not None and held["metadata"]["labels"].get("a") == "b" else None

            stale = copy.deepcopy(await eventually(ours_seen))
            theirs = {"key": "example.com/theirs", "effect": "NoSchedule"}
            write(name, {"spec": {"taints": [theirs]}})
            monkeypatch.setattr(informer, "get", lambda kind, key, namespace="": stale)
            calls.clear()
            found = await cluster.find_node_by_provider_id(provider_id)
            assert found is not None and calls == []
            assert "example.com/theirs" not in [t.key for t in found.spec.taints]
            ours = Taint(key="example.com/ours", effect=TaintEffect.NO_SCHEDULE)
            patched = await cluster.patch_node(name, add_taints=[ours])
            assert patched is not None and calls == ["PATCH", "GET", "PATCH"]
            assert [t.key for t in patched.spec.taints if t.key.startswith("example.com/")] == [
                "example.com/theirs",
                "example.com/ours",
            ]
        finally:
            monkeypatch.undo()
            await cluster.delete_node(name)


async def test_an_initialization_look_takes_an_initializable_node_from_the_informer_and_reads_a_waiting_one(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("node")
    async with load_cluster(str(control_plane.kubeconfig)) as cluster:
        request = InitializeInput(nodeclaim=name, node=name, startup_taints=["example.com/startup"])
        assert cluster.node_seen(name) is None  # no informer, no write of ours: nothing seen
        cluster.start_informer()
        informer = cluster.informer
        assert informer is not None
        node = kwok_node(name)
        node["spec"] = {"taints": [{"key": "example.com/startup", "effect": "NoSchedule"}]}
        await cluster.apply([node])
        try:

            def ready_without_taints(startup: bool) -> bool:
                held = informer.get(NODE.kind, name)
                if held is None:
                    return False
                node = Node.model_validate(held)
                keys = [taint.key for taint in node.spec.taints]
                return is_node_ready(node) and keys == (["example.com/startup"] if startup else [])

            await eventually(lambda: _true(ready_without_taints(startup=True)), timeout=30)
            calls: list[str] = []
            record_calls(monkeypatch, cluster._core, "read_node", calls, lambda _: "GET")
            # Still waiting on its startup taint in the informer's copy: the look reads the server to be sure.
            state = await node_state(cluster, request)
            assert (state.startup_taints_remaining, calls) == (["example.com/startup"], ["GET"])
            # The taint goes (another writer's change, which only the informer hears of): no request at all.
            await asyncio.to_thread(cluster._core.patch_node, name, {"spec": {"taints": None}})
            await eventually(lambda: _true(ready_without_taints(startup=False)), timeout=30)
            calls.clear()
            state = await node_state(cluster, request)
            assert state.ready and not state.startup_taints_remaining and calls == []
        finally:
            monkeypatch.undo()
            await cluster.delete_node(name)


async def test_snapshots_read_the_informer_once_it_has_listed_and_see_their_own_nodeclaims_at_once(
    control_plane: ControlPlane, namespace: str
) -> None:
    node, other, claim = unique("node"), unique("node"), unique("claim")
    async with load_cluster(str(control_plane.kubeconfig)) as cluster:
        cluster.start_informer()
        informer = cluster.informer
        assert informer is not None
        await eventually(lambda: _true(informer.synced()))

        def names(snapshot: Any) -> tuple[set[str], set[str], set[str]]:
            return (
                {n.metadata.name for n in snapshot.nodes},
                {p.metadata.name for p in snapshot.pods if p.metadata.namespace == namespace},
                {c.name for c in snapshot.nodeclaims},
            )

        async def settled() -> bool:
            cached, listed = await cluster.snapshot(), await cluster.snapshot(fresh=True)
            return (
                names(cached) == names(listed) and node in names(cached)[0] and names(cached)[1] == {"solo"}
            )

        await cluster.apply(
            [
                kwok_node(node),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "solo", "namespace": namespace},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                },
            ]
        )
        try:
            await eventually(settled)
            # A Node looked up by a providerID unlike its name comes from the informer, not from a LIST.
            renamed = f"azure:///subscriptions/s/virtualMachines/{unique('vm')}"
            await cluster.apply([{**kwok_node(other), "spec": {"providerID": renamed}}])

            async def followed() -> bool:
                nodes = informer.matching(NODE.kind, lambda item: item["spec"].get("providerID") == renamed)
                return bool(nodes)

            await eventually(followed)
            listing = cluster._list
            cluster._list = None  # type: ignore[assignment]
            try:
                found = await cluster.find_node_by_provider_id(renamed)
                assert await cluster.find_node_by_provider_id(renamed + "x") is None
            finally:
                cluster._list = listing  # type: ignore[method-assign]
            assert found is not None and found.metadata.name == other
            # With the NodeClaim watch stopped, only the write-through can show the new NodeClaim.
            informer._watches[NODECLAIM.kind].stop()
            await cluster.create_nodeclaim(NodeClaim.parse(nodeclaim_manifest(claim)))
            assert claim in names(await cluster.snapshot())[2]
            # Asked for `cached`, a NodeClaim the informer holds is read without a GET; one it lacks with one.
            reader = cluster._get
            cluster._get = None  # type: ignore[assignment]
            try:
                held = await cluster.get_nodeclaim(claim, cached=True)
                with pytest.raises(TypeError):
                    await cluster.get_nodeclaim(unique("absent"), cached=True)
            finally:
                cluster._get = reader  # type: ignore[method-assign]
            assert held is not None and held.name == claim
            assert await cluster.get_nodeclaim(unique("absent"), cached=True) is None
            await cluster.delete_pod(namespace, "solo", grace_period_seconds=0)

            async def pod_gone() -> bool:
                return not names(await cluster.snapshot())[1]

            await eventually(pod_gone)
        finally:
            await cluster.delete_nodeclaim(claim)
            await cluster.delete_node(node)
            with contextlib.suppress(NotFoundError):
                await cluster.delete_node(other)
