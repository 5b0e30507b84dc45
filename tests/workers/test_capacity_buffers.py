"""The controller's CapacityBuffer hook: which watch events reconcile a buffer (its status written once, a Warning
event when it does not resolve) and wake the provisioner, and the warning when the gate is off."""

from __future__ import annotations

from typing import Any

from core.cluster import EventType, WatchEvent
from workers.controller.capacity_buffers import GATE_DISABLED, CapacityBuffers


class Cluster:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.events: list[Any] = []

    async def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    async def list_objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [raw for (k, _), raw in self.objects.items() if k == kind]

    async def patch_status(
        self, kind: str, name: str, status: dict[str, Any], version: str, namespace: str | None = None
    ) -> bool:
        self.patched.append((name, status))
        return True

    async def record_event(self, event: Any) -> None:
        self.events.append(event)


def deployment(replicas: int = 4) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


def buffer_event(spec: dict[str, Any], kind: EventType = EventType.ADDED, status: Any = None) -> WatchEvent:
    manifest = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "room", "namespace": "default", "uid": "u", "resourceVersion": "1"},
        "spec": spec,
    }
    if status is not None:
        manifest["status"] = status
    return WatchEvent(type=kind, kind="CapacityBuffer", name="room", resource_version=1, object=manifest)


SPEC = {"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 50}


def hook(cluster: Cluster, enabled: bool = True) -> tuple[CapacityBuffers, list[str], list[str]]:
    woken: list[str] = []
    forgotten: list[str] = []
    return CapacityBuffers(cluster, enabled, woken.extend, forgotten.append), woken, forgotten  # type: ignore[arg-type]


async def test_a_buffer_is_resolved_its_status_written_and_the_provisioner_woken() -> None:
    cluster = Cluster({("Deployment", "web"): deployment(4)})
    buffers, woken, _ = hook(cluster)
    await buffers.observe(buffer_event(SPEC))
    [(name, status)] = cluster.patched
    assert name == "room" and status["replicas"] == 2
    assert status["conditions"][0]["reason"] == "Resolved"
    assert woken == ["capacitybuffer/default/room"]

    # The status it wrote comes back: nothing to write again.
    await buffers.observe(buffer_event(SPEC, EventType.MODIFIED, status))
    assert len(cluster.patched) == 1

    # The Deployment scales: the buffer is reconciled again and its chunks follow.
    cluster.objects[("Deployment", "web")] = deployment(10)
    web = WatchEvent(
        type=EventType.MODIFIED, kind="Deployment", name="web", resource_version=2, object=deployment(10)
    )
    await buffers.observe(web)
    assert cluster.patched[-1][1]["replicas"] == 5


async def test_a_real_pod_binding_wakes_the_provisioner_for_ready_buffers_once() -> None:
    cluster = Cluster({("Deployment", "web"): deployment()})
    buffers, woken, _ = hook(cluster)
    await buffers.observe(buffer_event(SPEC))
    woken.clear()
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"nodeName": "n"}}
    event = WatchEvent(type=EventType.MODIFIED, kind="Pod", name="p", resource_version=3, object=pod)
    await buffers.observe(event)
    await buffers.observe(event)
    assert woken == ["capacitybuffer/default/room"]


async def test_a_buffer_that_does_not_resolve_gets_a_warning_naming_the_field_and_is_forgotten() -> None:
    cluster = Cluster({("Deployment", "web"): deployment()})
    buffers, _, forgotten = hook(cluster)
    await buffers.observe(buffer_event(SPEC))
    await buffers.observe(
        buffer_event({"scalableRef": {"kind": "Deployment", "name": "gone"}, "replicas": 1})
    )
    (event,) = cluster.events
    assert (event.reason, event.type, event.involved_object.kind) == (
        "ScalableRefNotFound",
        "Warning",
        "CapacityBuffer",
    )
    assert event.message.startswith("spec.scalableRef.name: ")
    assert forgotten == ["capacitybuffer/default/room"]
    assert cluster.patched[-1][1]["conditions"][0]["status"] == "False"


async def test_an_object_the_model_refuses_gets_an_event_and_stops_nothing() -> None:
    cluster = Cluster()
    buffers, woken, _ = hook(cluster)
    await buffers.observe(buffer_event({"replicas": -1}))
    (event,) = cluster.events
    assert "spec.replicas" in event.message and woken == []


async def test_with_the_gate_off_each_buffer_is_warned_about_once_and_nothing_else_happens() -> None:
    cluster = Cluster({("CapacityBuffer", "room"): buffer_event(SPEC).object})
    buffers, woken, _ = hook(cluster, enabled=False)
    await buffers.warn_disabled()
    await buffers.observe(buffer_event(SPEC))
    (event,) = cluster.events
    assert (event.reason, event.involved_object.name, event.involved_object.namespace) == (
        GATE_DISABLED,
        "room",
        "default",
    )
    assert "CapacityBuffer default/room" in event.message and "feature gate is off" in event.message
    assert cluster.patched == [] and woken == []
