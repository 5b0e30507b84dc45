"""The generated CapacityBuffer CRD on a real API server: it accepts what the model accepts (the strategy
defaulted) and rejects, naming the field and with Karpenter's message, what Karpenter's CRD rejects (dry runs:
nothing is stored)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.api.capacitybuffer import CapacityBuffer
from core.api.meta import InvalidObjectError
from tests.controlplane.test_crd_validation import dry_run
from workers.controlplane.run import ControlPlane

DEPLOYMENT = {"apiGroup": "apps", "kind": "Deployment", "name": "web"}


def buffer(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "room", "namespace": "default"},
        "spec": spec,
    }


def model_accepts(manifest: dict[str, Any]) -> bool:
    try:
        CapacityBuffer.parse(manifest)
    except InvalidObjectError:
        return False
    return True


VALID = {
    "podTemplateRef and replicas": buffer(podTemplateRef={"name": "chunk"}, replicas=3),
    "podTemplateRef and limits": buffer(
        podTemplateRef={"name": "chunk"}, limits={"cpu": "8", "memory": "16Gi"}
    ),
    "scalableRef and percentage": buffer(scalableRef=DEPLOYMENT, percentage=20),
    "scalableRef alone": buffer(scalableRef={"kind": "StatefulSet", "name": "db"}),
    "another strategy": buffer(scalableRef=DEPLOYMENT, replicas=1, provisioningStrategy="example.com/other"),
}

INVALID = {
    "podTemplateRef alone": (
        buffer(podTemplateRef={"name": "chunk"}),
        "spec",
        "If podTemplateRef is set, replicas or limits must also be set",
    ),
    "both refs": (
        buffer(podTemplateRef={"name": "chunk"}, scalableRef=DEPLOYMENT, replicas=1),
        "spec",
        "You must define either PodTemplateRef or ScalableRef, but not both",
    ),
    "negative replicas": (
        buffer(scalableRef=DEPLOYMENT, replicas=-1),
        "spec.replicas",
        "greater than or equal to 0",
    ),
    "negative percentage": (
        buffer(scalableRef=DEPLOYMENT, percentage=-5),
        "spec.percentage",
        "greater than or equal to 0",
    ),
    "empty template name": (
        buffer(podTemplateRef={"name": ""}, replicas=1),
        "spec.podTemplateRef.name",
        "at least 1",
    ),
}


@pytest.mark.parametrize("manifest", VALID.values(), ids=VALID.keys())
def test_the_api_server_accepts_a_valid_buffer(control_plane: ControlPlane, manifest: dict[str, Any]) -> None:
    assert model_accepts(manifest)
    assert dry_run(control_plane, manifest) is None


def test_the_api_server_defaults_the_strategy(control_plane: ControlPlane) -> None:
    done = control_plane.kubectl(
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(VALID["scalableRef and percentage"]),
    )
    assert json.loads(done.stdout)["spec"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"


@pytest.mark.parametrize(("manifest", "field", "message"), INVALID.values(), ids=INVALID.keys())
def test_the_api_server_rejects_an_invalid_buffer_naming_the_field(
    control_plane: ControlPlane, manifest: dict[str, Any], field: str, message: str
) -> None:
    assert not model_accepts(manifest)
    error = dry_run(control_plane, manifest)
    assert error is not None, "the API server accepted it"
    assert f"{field}: " in error and message in error, error
