"""One kind's list-then-watch loop (`ListWatch`), as a controller's informer runs it, on a thread of its own."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes.watch.watch import iter_resp_lines
from tenacity import Retrying, retry_if_exception_type, wait_random_exponential

from activities.informer import Emit, object_key, revision
from activities.kubeclient.errors import connection_error, status_error
from activities.kubeclient.resources import Resource, with_kind
from core.cluster import EventType, WatchEvent
from core.errors import ConflictError, ThrottledError, TransientError

logger = logging.getLogger("nodewright.kube")


ListPage = Callable[[str | None], Mapping[str, Any]]
"""One page of a list, given the continue token of the previous page (None for the first)."""


def list_every_page(list_page: ListPage) -> tuple[builtins.list[dict[str, Any]], str]:
    """The items of every page of a list, and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = list_page(token)
        items.extend(page.get("items") or ())
        metadata = page.get("metadata") or {}
        token = metadata.get("continue") or None
        if token is None:
            return items, str(metadata.get("resourceVersion") or "")


class WatchStream(Protocol):
    """One open watch request: its events as decoded JSON, until the server ends it."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def interrupt(self) -> None:
        """From another thread: make the reader's blocked read return now."""
        ...

    def close(self) -> None: ...


class ResponseStream:
    """A watch response read line by line. A broken connection is a `TransientError`."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in iter_resp_lines(self._response):
                if line:
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            raise connection_error("the watch stream broke", error) from error

    def interrupt(self) -> None:
        # Shuts the socket down for reading, which unblocks a read in progress on the watch thread.
        with contextlib.suppress(Exception):
            self._response.shutdown()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._response.close()
            self._response.release_conn()


class _Stopped(Exception):
    """The watch was asked to stop."""


class ListWatch:
    """One kind's list-then-watch loop, as a controller's informer runs it, on a thread of its own.

    It lists (paged) and hands on what is new or changed since the consumer last saw it (ADDED for an object
    it never saw, MODIFIED for a changed one) and a DELETED for each object that vanished between two lists,
    then watches from the list's resourceVersion with bookmarks, and reopens the watch from the last version
    seen whenever the server ends it. A 410 Gone (the version was compacted away) means list again; a broken
    connection or a 5xx means retry with jittered exponential backoff. `seen` (the resourceVersion handed on
    for each object) makes sure nothing is handed on twice. An error that retrying will not fix (403, a kind
    the server does not serve) is handed to `emit` and ends the loop.
    """

    def __init__(
        self,
        resource: Resource,
        list_page: ListPage,
        open_watch: Callable[[str], WatchStream],
        emit: Emit,
        *,
        resource_version: str | None = None,
        reconnect_max_wait: float = 5.0,
    ) -> None:
        self.resource = resource
        self.seen: dict[tuple[str, str], str] = {}
        """The resourceVersion of every object handed on, by (namespace, name)."""
        self._list_page = list_page
        self._open_watch = open_watch
        self._emit = emit
        self.resource_version = resource_version
        """Where the next watch starts: the last version listed or watched (None: list first)."""
        self._listed = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._retrying = Retrying(
            retry=retry_if_exception_type((TransientError, ThrottledError)),
            wait=wait_random_exponential(multiplier=0.1, max=reconnect_max_wait),
            sleep=self._pause,
            before_sleep=self._log_retry,
            reraise=True,
        )

    @property
    def listed(self) -> bool:
        """Whether the first list has been handed on."""
        return self._listed

    def stop(self) -> None:
        """Make `run` return soon (an open watch is interrupted); safe from any thread."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.interrupt()

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                for attempt in self._retrying:
                    with attempt:
                        self._step()
        except _Stopped:
            return
        except Exception as error:
            if not self._stop.is_set():
                self._emit(error)

    def _pause(self, seconds: float) -> None:
        """The backoff between retries, cut short by `stop`."""
        self._stop.wait(seconds)

    def _log_retry(self, state: Any) -> None:
        if not self._stop.is_set() and state.outcome is not None:
            logger.warning(
                "watching %s failed (attempt %d), retrying: %s",
                self.resource.kind,
                state.attempt_number,
                state.outcome.exception(),
            )

    def _step(self) -> None:
        """List when there is no version to watch from, else watch until the server ends the watch."""
        if self._stop.is_set():
            raise _Stopped
        try:
            if self.resource_version is None:
                self._relist()
            else:
                self._watch(self.resource_version)
        except ConflictError as error:
            if error.code != "Expired":
                raise
            self.resource_version = None  # 410 Gone: that version was compacted away, list again

    def _relist(self) -> None:
        items, version = list_every_page(self._list_page)
        current: dict[tuple[str, str], str] = {}
        for item in with_kind(self.resource, items):
            key = object_key(item)
            item_version = str(item["metadata"].get("resourceVersion") or "")
            current[key] = item_version
            previous = self.seen.get(key)
            if previous != item_version:
                self._hand_on(EventType.ADDED if previous is None else EventType.MODIFIED, item)
        for namespace, name in sorted(self.seen.keys() - current.keys()):
            # Deleted while no watch was open: only the name and the last version seen are known.
            metadata = {"name": name, "resourceVersion": self.seen[namespace, name]}
            if namespace:
                metadata["namespace"] = namespace
            gone = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, "metadata": metadata}
            self._hand_on(EventType.DELETED, gone, revision(version))
        self.seen = current
        self._listed = True
        self.resource_version = version

    def _watch(self, version: str) -> None:
        stream = self._open_watch(version)
        with self._lock:
            self._stream = stream
        try:
            if self._stop.is_set():
                raise _Stopped
            for event in stream:
                if self._stop.is_set():
                    raise _Stopped
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise status_error(int(obj.get("code") or 0), obj)
                if kind in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED):
                    self._on_event(EventType(kind), obj)
                # A bookmark only moves the version on; a broken stream resumes from here.
                self.resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _on_event(self, kind: EventType, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        version = str(obj["metadata"].get("resourceVersion") or "")
        if kind is EventType.DELETED:
            if key not in self.seen and self._listed:
                return  # a list already handed on its deletion
            self.seen.pop(key, None)
        else:
            if self.seen.get(key) == version:
                return
            self.seen[key] = version
        self._hand_on(kind, obj)

    def _hand_on(self, kind: EventType, obj: dict[str, Any], version: int | None = None) -> None:
        namespace, name = object_key(obj)
        at = revision(obj["metadata"].get("resourceVersion")) if version is None else version
        self._emit(
            WatchEvent(
                type=kind,
                kind=self.resource.kind,
                name=name,
                namespace=namespace or None,
                resource_version=at,
                object=obj,
            )
        )
