"""`node_state` from the informer's Node: a copy that lets initialization proceed is taken as it is; one that says
wait is read again from the server, since the signal of the change it waits for may have come already."""

from __future__ import annotations

from typing import Any, cast

from activities.kube import node_state
from core.api.kube import Node
from core.cluster import ClusterAPI
from core.messages import InitializeInput


def node(ready: bool, taints: tuple[str, ...] = ()) -> Node:
    return Node.model_validate(
        {
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": key, "effect": "NoSchedule"} for key in taints]},
            "status": {
                "allocatable": {"cpu": "2"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


class TwoCopies:
    """A cluster whose informer holds `cached` and whose API server holds `server`; counts the server's reads."""

    def __init__(self, cached: Node | None, server: Node | None) -> None:
        self.cached, self.server = cached, server
        self.server_reads = 0

    async def get_node(self, name: str, *, cached: bool = False) -> Node | None:
        if cached and self.cached is not None:
            return self.cached
        self.server_reads += 1
        return self.server


async def state(cluster: TwoCopies, cached: bool = True, **request: Any) -> Any:
    return await node_state(
        cast(ClusterAPI, cluster), InitializeInput(nodeclaim="c", node="n", **request), cached=cached
    )


async def test_a_cached_node_done_waiting_is_taken_without_reading_the_server() -> None:
    cluster = TwoCopies(cached=node(ready=True), server=node(ready=False))
    found = await state(cluster)
    assert found.ready and not found.waiting_reason and cluster.server_reads == 0


async def test_a_cached_node_that_says_wait_is_read_again_from_the_server() -> None:
    behind = TwoCopies(cached=node(ready=False), server=node(ready=True))
    found = await state(behind)
    assert found.ready and not found.waiting_reason and behind.server_reads == 1

    tainted = TwoCopies(cached=node(ready=True, taints=("example.com/boot",)), server=node(ready=True))
    found = await state(tainted, startup_taints=["example.com/boot"])
    assert not found.startup_taints_remaining and tainted.server_reads == 1

    still = TwoCopies(cached=node(ready=False), server=node(ready=False))
    found = await state(still)
    assert found.waiting_reason == "NodeNotReady" and still.server_reads == 1


async def test_a_node_the_informer_lacks_or_an_uncached_read_comes_from_the_server() -> None:
    missing = TwoCopies(cached=None, server=node(ready=True))
    assert (await state(missing)).ready and missing.server_reads == 1
    gone = TwoCopies(cached=None, server=None)
    found = await state(gone)
    assert not found.exists and found.waiting_reason == "NodeNotFound"
    uncached = TwoCopies(cached=node(ready=True), server=node(ready=False))
    assert not (await state(uncached, cached=False)).ready and uncached.server_reads == 1
