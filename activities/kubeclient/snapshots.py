"""The snapshot the scheduler plans on: every object of `SNAPSHOT_KINDS`, from the informer once it is synced."""

from __future__ import annotations

import asyncio
import builtins
import functools
import threading
from typing import Any

from kubernetes import client as k8s
from pydantic import ValidationError

from activities.informer import Emit, SnapshotInformer
from activities.kubeclient.listwatch import ListWatch
from activities.kubeclient.objects import AnyObjects
from activities.kubeclient.resources import PODTEMPLATE, SCALABLE_MODELS
from core.api.kube import PodTemplate
from core.api.manifests import Manifests, ParseCache, parse_manifests, without_nulls
from core.capacity_buffer import target_of


class Snapshots(AnyObjects):
    """Every object the scheduler reads, at once: listed, or from the informer that follows them."""

    def __init__(self, configuration: k8s.Configuration, **options: Any) -> None:
        super().__init__(configuration, **options)
        self._parsed: ParseCache = {}
        """The last snapshot's objects as parsed: the next shares those unchanged since (read them only)."""
        self._parse_lock = threading.Lock()

    def start_informer(self) -> None:
        """Follow every kind `snapshot` reads with a watch (`activities.informer`), so that snapshots stop listing
        them once each kind has been listed once. For a long-running process that plans: the worker."""
        if self.informer is not None:
            return
        resources = {resource.kind: resource for resource in self.snapshot_kinds}

        def watch_for(kind: str, emit: Emit) -> ListWatch:
            resource = resources[kind]
            return ListWatch(
                resource,
                functools.partial(self._list_page, resource),
                functools.partial(self._open_watch, resource),
                emit,
                reconnect_max_wait=self._reconnect_max_wait,
            )

        self.informer = SnapshotInformer(list(resources), watch_for)
        self.informer.start()

    async def snapshot(self, *, fresh: bool = False) -> Manifests:
        """Every object the scheduler reads: from the informer when one is started and synced, else listed
        concurrently (each kind at its own resource version); `fresh` always lists. Other providers' NodePools and
        NodeClaims are left out (`Manifests.leave_other_providers`)."""
        kinds = self.snapshot_kinds
        items = None
        if self.informer is not None and not fresh:
            items = await asyncio.to_thread(self.informer.items, [resource.kind for resource in kinds])
        if items is None:
            lists = await asyncio.gather(*(self._list(resource) for resource in kinds))
            items = [item for listed in lists for item in listed]
        # Thousands of objects take seconds to parse: not on the event loop, where workflow tasks wait. Those
        # unchanged since the last snapshot are not parsed again.
        manifests = await asyncio.to_thread(self._parse_snapshot, items)
        manifests.leave_other_providers()
        if manifests.capacitybuffers:
            await self._buffer_targets(manifests)
        return manifests

    async def _buffer_targets(self, manifests: Manifests) -> None:
        """Add the PodTemplates and workloads the CapacityBuffers name (one GET each; those missing stay out,
        and the buffer's resolution says so). Not parsed as manifests: a Deployment must not become pods."""
        wanted = sorted({target for b in manifests.capacitybuffers if (target := target_of(b)) is not None})
        found = await asyncio.gather(
            *(self.get_object(kind, name, namespace) for kind, namespace, name in wanted)
        )
        for (kind, _, _), raw in zip(wanted, found, strict=True):
            if raw is None:
                continue
            try:
                if kind == PODTEMPLATE.kind:
                    manifests.podtemplates.append(PodTemplate.model_validate(without_nulls(raw)))
                else:
                    manifests.scalables.append(SCALABLE_MODELS[kind].model_validate(without_nulls(raw)))
            except ValidationError as error:
                manifests.problems.append(f"cluster: {kind} {raw['metadata'].get('name')}: {error}")

    def _parse_snapshot(self, items: builtins.list[dict[str, Any]]) -> Manifests:
        with self._parse_lock:
            return parse_manifests(items, "cluster", self._parsed)
