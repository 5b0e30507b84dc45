"""The ClusterAPI's watch: Pods, Nodes, NodeClaims, NodePools and AKSNodeClasses merged in one stream."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncGenerator

from activities.kubeclient.connection import Connection
from activities.kubeclient.listwatch import ListWatch
from core.cluster import WatchEvent


class Watches(Connection):
    """The ClusterAPI's watch: the controller's kinds merged in one stream."""

    async def watch(self, since: int = 0) -> AsyncGenerator[WatchEvent, None]:
        """Changes to Pods, Nodes, NodeClaims, NodePools and AKSNodeClasses, merged in one stream, forever.

        With `since` 0 each kind is listed first (every object arrives as ADDED), then watched; otherwise the
        watch starts at that resourceVersion and lists only if it is too old. Each kind runs a `ListWatch` on
        a thread of its own; closing the generator stops them. An error retrying cannot fix (the CRDs are not
        installed, the credentials may not watch) is raised here.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent | Exception] = asyncio.Queue()

        def emit(item: WatchEvent | Exception) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        watchers = [
            ListWatch(
                resource,
                functools.partial(self._list_page, resource),
                functools.partial(self._open_watch, resource),
                emit,
                resource_version=str(since) if since else None,
                reconnect_max_wait=self._reconnect_max_wait,
            )
            for resource in self.watched_kinds
        ]
        for watcher in watchers:
            name = f"nodewright-watch-{watcher.resource.kind}"
            threading.Thread(target=watcher.run, name=name, daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            for watcher in watchers:
                watcher.stop()
