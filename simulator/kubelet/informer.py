"""A list-then-watch loop, as client-go's informers run one: the objects of a collection, kept current, and a
callback for every object that changes (None once it is gone)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from simulator.kubeapi import KubeApi, KubeApiError

logger = logging.getLogger("nodewright.kubelet")

Json = dict[str, Any]
WATCH_SECONDS = 240.0


class _Expired(Exception):
    pass


def key(item: Json) -> str:
    metadata = item["metadata"]
    return f"{metadata.get('namespace', '')}/{metadata['name']}"


class Informer:
    def __init__(
        self,
        api: KubeApi,
        path: str,
        changed: Callable[[str, Json | None], None],
        params: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.path = path
        self.changed = changed
        self.params = dict(params or {})
        self.items: dict[str, Json] = {}
        self.synced = asyncio.Event()

    def _apply(self, name: str, item: Json | None) -> None:
        if item is None:
            if self.items.pop(name, None) is not None:
                self.changed(name, None)
        elif self.items.get(name) != item:
            self.items[name] = item
            self.changed(name, item)

    async def run(self) -> None:
        while True:
            try:
                query = f"?{urlencode(self.params)}" if self.params else ""
                listing = await self.api.request("GET", self.path + query)
                fresh = {key(item): item for item in listing.get("items") or []}
                for name in set(self.items) - set(fresh):
                    self._apply(name, None)
                for name, item in fresh.items():
                    self._apply(name, item)
                self.synced.set()
                version = listing["metadata"]["resourceVersion"]
                while True:
                    params = {**self.params, "resourceVersion": version, "allowWatchBookmarks": "true"}
                    async for event in self.api.watch(self.path, params, WATCH_SECONDS):
                        item = event["object"]
                        if event["type"] == "ERROR":
                            raise _Expired(item.get("message", "watch error"))
                        version = item["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._apply(key(item), None if event["type"] == "DELETED" else item)
            except (KubeApiError, _Expired) as error:
                logger.debug("%s: listing again after %s", self.path, error)
                await asyncio.sleep(1.0)
