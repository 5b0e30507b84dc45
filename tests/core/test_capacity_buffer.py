"""Karpenter's CapacityBuffer rules: the chunk count (its controller's table cases), resolution and its reasons,
the status written, virtual pods, and the Provisioning condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.api.capacitybuffer import CapacityBuffer
from core.api.kube import Deployment, PodTemplate, StatefulSet, pod_key
from core.capacity_buffer import (
    FAKE_POD_ANNOTATION,
    READY_FOR_PROVISIONING,
    VIRTUAL_POD_PRIORITY,
    BufferPods,
    Placement,
    Reason,
    Targets,
    buffer_of,
    buffer_pods,
    limit_replicas,
    percentage_replicas,
    placements,
    provisioning_condition,
    resolve,
    resolved_status,
    status_changed,
)
from core.resources import parse_resources

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def buffer(name: str = "b", status: dict[str, Any] | None = None, **spec: Any) -> CapacityBuffer:
    raw: dict[str, Any] = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default", "generation": 3, "uid": "u-1"},
        "spec": spec,
    }
    if status:
        raw["status"] = status
    return CapacityBuffer.parse(raw)


def template_spec(cpu: str | None = "1", **extra: Any) -> dict[str, Any]:
    requests = {"cpu": cpu} if cpu else {}
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}], **extra},
    }


def pod_template(name: str = "pt", cpu: str | None = "1", generation: int = 4, **extra: Any) -> PodTemplate:
    return PodTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default", "generation": generation},
            "template": template_spec(cpu, **extra),
        }
    )


def deployment(name: str = "d", replicas: int | None = 10, cpu: str | None = "1") -> Deployment:
    spec: dict[str, Any] = {"template": template_spec(cpu)}
    if replicas is not None:
        spec["replicas"] = replicas
    return Deployment.model_validate({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def targets(*objects: PodTemplate | Deployment | StatefulSet) -> Targets:
    return Targets.of(
        [o for o in objects if isinstance(o, PodTemplate)],
        [(type(o).__name__, o) for o in objects if not isinstance(o, PodTemplate)],
    )


def deployment_ref(name: str = "d") -> dict[str, str]:
    return {"apiGroup": "apps", "kind": "Deployment", "name": name}


# --- the count: Karpenter's table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backing", "spec", "expected"),
    [
        pytest.param(
            pod_template(), {"podTemplateRef": {"name": "pt"}, "replicas": 7}, 7, id="fixed replicas only"
        ),
        pytest.param(
            pod_template(),
            {"podTemplateRef": {"name": "pt"}, "replicas": 10, "limits": {"cpu": "3"}},
            3,
            id="replicas capped by binding limit",
        ),
        pytest.param(
            pod_template(),
            {"podTemplateRef": {"name": "pt"}, "replicas": 3, "limits": {"cpu": "10"}},
            3,
            id="non-binding limit does not reduce",
        ),
        pytest.param(
            pod_template(), {"podTemplateRef": {"name": "pt"}, "limits": {"cpu": "5"}}, 5, id="limits only"
        ),
        pytest.param(
            deployment(), {"scalableRef": deployment_ref(), "percentage": 20}, 2, id="percentage only"
        ),
        pytest.param(
            deployment(),
            {"scalableRef": deployment_ref(), "replicas": 5, "percentage": 20},
            5,
            id="replicas > percentage",
        ),
        pytest.param(
            deployment(),
            {"scalableRef": deployment_ref(), "replicas": 5, "percentage": 80},
            8,
            id="percentage > replicas",
        ),
        pytest.param(
            deployment(),
            {"scalableRef": deployment_ref(), "replicas": 5, "percentage": 80, "limits": {"cpu": "4"}},
            4,
            id="max of replicas and percentage capped by limit",
        ),
        pytest.param(
            deployment(replicas=1),
            {"scalableRef": deployment_ref(), "percentage": 10},
            1,
            id="percentage rounds up to a minimum of 1",
        ),
        pytest.param(
            deployment(replicas=None),
            {"scalableRef": deployment_ref(), "percentage": 100},
            1,
            id="a workload without replicas has 1",
        ),
        pytest.param(
            pod_template(),
            {"podTemplateRef": {"name": "pt"}, "replicas": 3, "percentage": 50},
            3,
            id="percentage is for scalableRef only",
        ),
        pytest.param(
            pod_template(cpu=None),
            {"podTemplateRef": {"name": "pt"}, "limits": {"cpu": "4"}},
            0,
            id="limits that limit nothing and no replicas: none",
        ),
    ],
)
def test_chunk_count(backing: Any, spec: dict[str, Any], expected: int) -> None:
    resolution = resolve(buffer(**spec), targets(backing))
    assert resolution.ready and resolution.reason is Reason.RESOLVED
    assert resolution.replicas == expected


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        ({"cpu": "4"}, {"cpu": "1"}, 4),
        ({"memory": "2Gi"}, {"memory": "512Mi"}, 4),
        ({"cpu": "8", "memory": "4Gi"}, {"cpu": "1", "memory": "1Gi"}, 4),
        ({"cpu": "10"}, {"cpu": "3"}, 3),
        ({"cpu": "1"}, {"cpu": "250m"}, 4),
        ({"cpu": "1"}, {"cpu": "2"}, 0),
        ({"cpu": "4"}, {}, None),
        ({"memory": "4Gi"}, {"cpu": "1"}, None),
    ],
)
def test_limit_replicas(limits: dict[str, str], requests: dict[str, str], expected: int | None) -> None:
    assert limit_replicas(limits, parse_resources(requests)) == expected


def test_limits_use_the_pods_effective_requests_init_containers_and_sidecars_included() -> None:
    template = pod_template(
        cpu="1",
        initContainers=[
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "4"}}},
        ],
    )
    # Effective: max(1 + 0.5, 4 + 0.5) = 4.5 CPU, so 9 CPU hold 2 chunks.
    resolution = resolve(buffer(podTemplateRef={"name": "pt"}, limits={"cpu": "9"}), targets(template))
    assert resolution.replicas == 2


@pytest.mark.parametrize(
    ("replicas", "percentage", "expected"), [(10, 20, 2), (10, 25, 3), (1, 10, 1), (0, 50, 0)]
)
def test_percentage_replicas(replicas: int, percentage: int, expected: int) -> None:
    assert percentage_replicas(replicas, percentage) == expected


# --- resolution failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "reason", "field"),
    [
        (
            {"podTemplateRef": {"name": "missing"}, "replicas": 1},
            Reason.POD_TEMPLATE_NOT_FOUND,
            "spec.podTemplateRef.name",
        ),
        (
            {"scalableRef": deployment_ref("missing"), "replicas": 1},
            Reason.SCALABLE_REF_NOT_FOUND,
            "spec.scalableRef.name",
        ),
        (
            {"scalableRef": {"apiGroup": "batch", "kind": "Job", "name": "j"}, "replicas": 1},
            Reason.RESOLUTION_FAILED,
            "spec.scalableRef.apiGroup",
        ),
        (
            {"scalableRef": {"apiGroup": "apps", "kind": "DaemonSet", "name": "d"}, "replicas": 1},
            Reason.RESOLUTION_FAILED,
            "spec.scalableRef.kind",
        ),
        ({"replicas": 1}, Reason.RESOLUTION_FAILED, "spec.podTemplateRef"),
        (
            {
                "podTemplateRef": {"name": "pt"},
                "replicas": 1,
                "provisioningStrategy": "buffer.x-k8s.io/standby",
            },
            Reason.RESOLUTION_FAILED,
            "spec.provisioningStrategy",
        ),
    ],
)
def test_what_does_not_resolve_says_why_and_where(spec: dict[str, Any], reason: Reason, field: str) -> None:
    resolution = resolve(buffer(**spec), targets(pod_template(), deployment()))
    assert not resolution.ready
    assert (resolution.reason, resolution.field) == (reason, field)
    assert resolution.message


def test_an_empty_api_group_means_apps() -> None:
    resolution = resolve(
        buffer(scalableRef={"kind": "Deployment", "name": "d"}, replicas=2), targets(deployment())
    )
    assert resolution.ready and resolution.replicas == 2


# --- status ------------------------------------------------------------------------------------------------


def test_the_status_of_a_resolved_podtemplate_buffer() -> None:
    b = buffer(podTemplateRef={"name": "pt"}, replicas=2)
    status = resolved_status(b, resolve(b, targets(pod_template(generation=4))), NOW)
    assert status["podTemplateRef"] == {"name": "pt"}
    assert (status["replicas"], status["podTemplateGeneration"]) == (2, 4)
    assert status["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
    (condition,) = status["conditions"]
    assert condition["type"] == READY_FOR_PROVISIONING
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "True",
        "Resolved",
        3,
    )


def test_a_scalable_buffer_has_no_pod_template_in_its_status() -> None:
    b = buffer(scalableRef=deployment_ref(), percentage=50)
    status = resolved_status(b, resolve(b, targets(deployment())), NOW)
    assert status["podTemplateRef"] is None and status["podTemplateGeneration"] is None
    assert status["replicas"] == 5


def test_a_status_written_once_is_not_written_again_and_keeps_its_transition_time() -> None:
    b = buffer(podTemplateRef={"name": "pt"}, replicas=2)
    first = resolved_status(b, resolve(b, targets(pod_template())), NOW)
    written = buffer(podTemplateRef={"name": "pt"}, replicas=2, status=first)
    again = resolved_status(written, resolve(written, targets(pod_template())), NOW + timedelta(minutes=5))
    assert not status_changed(written, again)
    assert again["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]
    gone = resolved_status(written, resolve(written, targets()), NOW + timedelta(minutes=5))
    assert status_changed(written, gone)
    (condition,) = gone["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "PodTemplateNotFound")
    assert condition["lastTransitionTime"] != first["conditions"][0]["lastTransitionTime"]
    assert gone["replicas"] == 2, "a buffer that no longer resolves keeps the chunks it had"


# --- virtual pods and the Provisioning condition -----------------------------------------------------------


def test_virtual_pods_are_the_templates_shape_marked_as_the_buffers() -> None:
    template = pod_template(
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "x"}},
            {"name": "cfg", "configMap": {}},
        ],
        nodeName="somewhere",
    )
    entries, pods = buffer_pods([buffer(podTemplateRef={"name": "pt"}, replicas=3)], targets(template))
    assert [pod.metadata.name for pod in pods] == [f"capacity-buffer-b-{i}" for i in (1, 2, 3)]
    assert entries[0].pods == tuple(pod_key(pod) for pod in pods)
    for pod in pods:
        assert pod.metadata.annotations[FAKE_POD_ANNOTATION] == "true"
        assert buffer_of(pod) == "default/b"
        assert pod.metadata.labels == {"app": "web"}
        assert pod.spec.priority == VIRTUAL_POD_PRIORITY
        assert pod.spec.node_name is None
        assert [volume["name"] for volume in pod.spec.volumes] == ["cfg"]
        assert pod.spec.containers[0].resources.requests == {"cpu": "1"}


def test_a_buffer_that_does_not_resolve_has_no_virtual_pods() -> None:
    entries, pods = buffer_pods([buffer(podTemplateRef={"name": "gone"}, replicas=3)], targets())
    assert pods == [] and not entries[0].resolution.ready


def test_placements_count_each_buffers_pods() -> None:
    entries, _ = buffer_pods(
        [
            buffer("a", podTemplateRef={"name": "pt"}, replicas=2),
            buffer("c", podTemplateRef={"name": "pt"}, replicas=1),
        ],
        targets(pod_template()),
    )
    counted = placements(
        entries,
        existing=[["default/capacity-buffer-a-1", "default/real"]],
        new=[["default/capacity-buffer-a-2"]],
        failed=["default/capacity-buffer-c-1", "default/other"],
    )
    assert counted == {"default/a": Placement(existing=1, new=1), "default/c": Placement(failed=1)}


def _entry(ready: bool = True, replicas: int = 2) -> BufferPods:
    b = buffer(podTemplateRef={"name": "pt"}, replicas=replicas)
    return BufferPods(b, resolve(b, targets(pod_template() if ready else pod_template("other"))))


@pytest.mark.parametrize(
    ("entry", "placement", "expected"),
    [
        (_entry(), Placement(existing=2), (True, Reason.FITS_EXISTING_CAPACITY)),
        (_entry(), Placement(existing=1, new=1), (False, Reason.REQUIRES_NEW_CAPACITY)),
        (_entry(), Placement(existing=1, failed=1), (False, Reason.REQUIRES_NEW_CAPACITY)),
        (_entry(ready=False), None, (False, Reason.NOT_READY_FOR_PROVISIONING)),
        (_entry(replicas=0), None, (False, Reason.BUFFER_EMPTY)),
        (_entry(), None, None),
    ],
)
def test_provisioning_condition(entry: BufferPods, placement: Placement | None, expected: Any) -> None:
    condition = provisioning_condition(entry, placement)
    assert (condition[:2] if condition else None) == expected
