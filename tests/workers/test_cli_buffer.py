"""CapacityBuffers in the what-if commands: with the CapacityBuffer gate on, `schedule` and `plan-disruption`
read buffers and the PodTemplates and Deployments they name, and say where each buffer's virtual pods go (a
`buffers` section; the other keys unchanged); with it off, the buffers are ignored with a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workers.test_cli import NODEPOOL, ROOT, run, write

SNAPSHOT = str(ROOT / "deploy" / "snapshots" / "cluster.yaml")
BUFFERS = """
---
apiVersion: v1
kind: PodTemplate
metadata: {name: chunk, namespace: default}
template:
  metadata: {labels: {app: chunk}}
  spec:
    containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: warm, namespace: default}
spec:
  podTemplateRef: {name: chunk}
  replicas: 3
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: web-room, namespace: default}
spec:
  scalableRef: {kind: Deployment, name: web}
  percentage: 50
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 500m}}}]
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: lost, namespace: default}
spec:
  scalableRef: {kind: Deployment, name: nowhere}
  replicas: 1
"""


def test_schedule_shows_each_buffers_virtual_pods_and_where_they_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEATURE_GATES", "CapacityBuffer=true")
    manifests = write(tmp_path, "in.yaml", NODEPOOL + BUFFERS)
    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    buffers = {entry["buffer"]: entry for entry in document["buffers"]}
    assert list(buffers) == ["default/lost", "default/warm", "default/web-room"]
    assert (buffers["default/warm"]["replicas"], buffers["default/web-room"]["replicas"]) == (3, 2)
    assert (buffers["default/lost"]["ready"], buffers["default/lost"]["reason"]) == (
        False,
        "ScalableRefNotFound",
    )
    claimed = {pod for claim in document["nodeclaims"] for pod in claim["pods"]}
    for name in ("warm", "web-room"):
        pods = buffers[f"default/{name}"]["pods"]
        assert len(pods) == buffers[f"default/{name}"]["replicas"]
        assert set(pods) <= claimed, "scheduled like real pods"
        assert all(where.startswith("new NodeClaim ") for where in pods.values())
    assert not any(
        "CapacityBuffer" in warning or "PodTemplate" in warning for warning in document["warnings"]
    )

    code, out, _ = run("schedule", "-f", manifests)
    assert "CapacityBuffers:" in out and "default/warm: 3 chunk(s) -> new NodeClaim 1" in out
    assert "default/lost: not ready (ScalableRefNotFound" in out


def test_with_the_gate_off_buffers_are_ignored_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    manifests = write(tmp_path, "in.yaml", NODEPOOL + BUFFERS)
    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    assert "buffers" not in document
    warning = "CapacityBuffer default/warm: the CapacityBuffer feature gate is off (FEATURE_GATES); ignored"
    assert warning in document["warnings"] and warning in err
    assert not any("capacity-buffer" in pod for claim in document["nodeclaims"] for pod in claim["pods"])


def test_plan_disruption_places_buffer_room_on_existing_nodes_and_keeps_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEATURE_GATES", "CapacityBuffer=true")
    plain_code, plain, err = run("plan-disruption", "-o", "json", "-f", SNAPSHOT)
    assert plain_code == 0, err
    manifests = write(tmp_path, "in.yaml", BUFFERS)
    code, out, err = run("plan-disruption", "-o", "json", "-f", SNAPSHOT, "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    assert set(json.loads(plain)) < set(document) and "buffers" in document
    warm = next(entry for entry in document["buffers"] if entry["buffer"] == "default/warm")
    assert len(warm["pods"]) == 3 and all(where for where in warm["pods"].values())
