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
    [claim] = document["nodeclaims"]
    for name in ("warm", "web-room"):
        pods = buffers[f"default/{name}"]["pods"]
        assert len(pods) == buffers[f"default/{name}"]["replicas"]
        assert set(pods.values()) == {f"new NodeClaim 1 (default, {claim['instance_type']})"}
    # Scheduled like real pods (the NodeClaim is sized for them), but listed only under `buffers`.
    assert len(claim["pods"]) == 4 and all(pod.startswith("default/web-") for pod in claim["pods"])
    assert claim["requests"]["pods"] == "9"
    assert not any(
        "CapacityBuffer" in warning or "PodTemplate" in warning for warning in document["warnings"]
    )

    code, out, _ = run("schedule", "-f", manifests)
    assert "CapacityBuffers:" in out and "default/warm: 3 chunk(s) -> new NodeClaim 1" in out
    assert "default/lost: not ready (ScalableRefNotFound" in out


NODE = """
---
apiVersion: v1
kind: Node
metadata:
  name: aks-existing-1
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux, topology.kubernetes.io/zone: eastus-1}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: PodTemplate
metadata: {name: huge, namespace: default}
template:
  spec:
    containers: [{name: c, resources: {requests: {cpu: "900"}}}]
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: too-big, namespace: default}
spec:
  podTemplateRef: {name: huge}
  replicas: 1
"""


def test_virtual_pods_are_listed_only_under_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the provisioner nominates no virtual pod and reports none unschedulable, `schedule` lists them under
    `buffers` only: not among a NodeClaim's or a node's pods, nor the unschedulable ones."""
    monkeypatch.setenv("FEATURE_GATES", "CapacityBuffer=true")
    manifests = write(tmp_path, "in.yaml", NODEPOOL + BUFFERS + NODE)
    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 0, err
    document = json.loads(out)
    where = {pod: place for entry in document["buffers"] for pod, place in entry["pods"].items()}
    assert where["default/capacity-buffer-warm-1"] == "node/aks-existing-1"
    assert where["default/capacity-buffer-too-big-1"].startswith("unschedulable: ")
    listed = [
        *(pod for claim in document["nodeclaims"] for pod in claim["pods"]),
        *(pod for placement in document["existing"] for pod in placement["pods"]),
        *(entry["pod"] for entry in document["unschedulable"]),
    ]
    assert len(listed) == 4 and all(pod.startswith("default/web-") for pod in listed)
    assert not any(placement["pods"] == [] for placement in document["existing"])


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
