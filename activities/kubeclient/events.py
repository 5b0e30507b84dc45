"""Events published as Karpenter's recorder publishes them (`core.events`): `events.k8s.io/v1`, about the object
they name with its UID, repeats dropped or counted on the earlier Event.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.kubeclient.connection import REMEMBERED_OBJECTS
from activities.kubeclient.objects import AnyObjects
from activities.kubeclient.patches import MERGE_PATCH
from activities.kubeclient.ratelimit import TokenBucket
from activities.kubeclient.resources import API_VERSIONS, as_manifest
from core.api.kube import DEFAULT_NAMESPACE, Event
from core.errors import CloudError, InvalidError, NotFoundError
from core.events import NOMINATED, NOMINATION_BURST, NOMINATION_QPS, Deduper, dedupe_key, dedupe_rule

logger = logging.getLogger("nodewright.kube")


REPORTING_CONTROLLER = "karpenter"


@dataclass
class _EventSeries:
    """An Event this client published, and how often it has been observed."""

    namespace: str
    name: str
    count: int = 1


class EventRecorder(AnyObjects):
    """Events published as Karpenter's recorder publishes them."""

    def __init__(
        self, configuration: k8s.Configuration, *, reporting_instance: str | None = None, **options: Any
    ) -> None:
        super().__init__(configuration, **options)
        self.reporting_instance = reporting_instance or socket.gethostname()
        self._event_deduper = Deduper(REMEMBERED_OBJECTS)
        self.event_clock: Callable[[], float] = time.monotonic
        """The clock of the events' de-duplication windows (tests move it on)."""
        self._nominations = TokenBucket(NOMINATION_QPS, NOMINATION_BURST)
        self._event_series: OrderedDict[tuple[str, ...], _EventSeries] = OrderedDict()
        """The Events published, by what makes a repeat identical: a repeat counts on the earlier one."""

    async def record_event(self, event: Event) -> None:
        """Publish an `events.k8s.io/v1` Event from Karpenter, about the object it names with that object's UID
        (looked up when the caller did not give it), so `kubectl describe` lists it. Karpenter's recorder rules
        apply (`core.events`): a repeat within its window is dropped, Nominated events are rate-limited, and an
        identical repeat after the window counts on the earlier Event (its `series`) while that one lasts.
        Best effort: a failure is logged, never raised."""
        regarding = event.involved_object
        try:
            if not regarding.uid:
                regarding.uid = await self._uid_of(regarding.kind, regarding.name, regarding.namespace)
            identity = regarding.uid or f"{regarding.kind}/{regarding.namespace or ''}/{regarding.name}"
            rule = dedupe_rule(regarding.kind, event.reason)
            key = dedupe_key(regarding.kind, identity, event.reason, event.message)
            if not self._event_deduper.admit(key, self.event_clock(), rule.timeout):
                return
            if event.reason == NOMINATED and not self._nominations.try_take():
                return
            body = self._event_body(event)
            same = (identity, event.reason, body["type"], body["note"])
            earlier = self._event_series.pop(same, None)
            if earlier is not None and await self._in_thread(self._count_repeat, earlier, body["eventTime"]):
                self._event_series[same] = earlier
            else:
                await self._in_thread(self._post_event, body)
                self._event_series[same] = _EventSeries(
                    body["metadata"]["namespace"], body["metadata"]["name"]
                )
            while len(self._event_series) > REMEMBERED_OBJECTS:
                self._event_series.popitem(last=False)
        except Exception as error:
            logger.warning(
                "could not record event %s on %s %s: %s",
                event.reason,
                regarding.kind,
                regarding.name,
                error,
            )

    async def _uid_of(self, kind: str, name: str, namespace: str | None) -> str | None:
        """The object's UID: from the Node or NodeClaim this client last saw, else a GET (None when gone)."""
        remembered = self._remembered_object(kind, name)
        if remembered is not None and not namespace:
            return str(remembered["metadata"].get("uid") or "") or None
        try:
            found = await self.get_object(kind, name, namespace)
        except CloudError as error:  # not allowed to read it, say: the event goes without the uid
            logger.debug("event on %s %s goes without its uid: %s", kind, name, error)
            return None
        return str((found or {}).get("metadata", {}).get("uid") or "") or None

    def _count_repeat(self, series: _EventSeries, when: str) -> bool:
        """Count one more occurrence on the Event published earlier; False when that Event is gone (expired)
        or may not be changed (then a new one is published)."""
        series.count += 1
        patch = {"series": {"count": series.count, "lastObservedTime": when}}
        try:
            self._events_request("PATCH", series.namespace, patch, name=series.name)
        except (NotFoundError, InvalidError):
            return False
        return True

    def _event_body(self, event: Event) -> dict[str, Any]:
        regarding = event.involved_object
        namespace = event.metadata.namespace or regarding.namespace or DEFAULT_NAMESPACE
        when = (event.first_timestamp or event.last_timestamp or datetime.now(UTC)).astimezone(UTC)
        reference = as_manifest(regarding)
        if not regarding.api_version and regarding.kind in API_VERSIONS:
            reference["apiVersion"] = API_VERSIONS[regarding.kind]
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": event.metadata.name or f"{regarding.name}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            # MicroTime takes exactly six fractional digits; isoformat() drops them when they are all zero.
            "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "regarding": reference,
            "reason": event.reason,
            "action": event.reason,
            "note": event.message.encode()[:1024].decode(errors="ignore"),
            "type": event.type,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.reporting_instance[:128],
        }

    def _post_event(self, body: dict[str, Any]) -> None:
        self._events_request("POST", body["metadata"]["namespace"], body)

    def _events_request(self, method: str, namespace: str, body: dict[str, Any], name: str = "") -> None:
        # Through ApiClient rather than EventsV1Api: the generated model would format eventTime with
        # isoformat(), which the API server rejects whenever the microseconds are zero.
        path = "/apis/events.k8s.io/v1/namespaces/{namespace}/events" + ("/{name}" if name else "")
        content_type = MERGE_PATCH if method == "PATCH" else "application/json"

        def call() -> None:
            request = self.api_client.param_serialize(
                method,
                path,
                path_params={"namespace": namespace, **({"name": name} if name else {})},
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*request, _request_timeout=self._timeout)
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)

        self._request(call, "count event" if name else "create event")
