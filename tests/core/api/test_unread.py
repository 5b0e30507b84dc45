"""What-if commands name every field they read past: unknown fields in a spec, not bookkeeping or status."""

from __future__ import annotations

import yaml

from core.api.kube import Deployment, Pod
from core.api.manifests import parse_manifests
from core.api.unread import unread_fields

POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, managedFields: [{manager: kubectl}], resourceVersion: "7"}
spec:
  schedulingGates: [{name: wait}]
  serviceAccountName: web
  containers:
    - name: app
      image: nginx
      livenessProbe: {httpGet: {path: /, port: 80}}
      resources: {requests: {cpu: 100m}}
      ports: [{containerPort: 80, name: http}]
    - name: side
      image: envoy
      resourceTypo: {requests: {cpu: 1}}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: a, operator: In, values: [b]}], matchTypo: []}]
status: {phase: Pending, hostIP: 10.0.0.1, qosClass: Burstable}
"""


def test_fields_that_matter_and_are_not_read_are_named_with_their_path() -> None:
    found = unread_fields(Pod, yaml.safe_load(POD))
    assert found == [
        "spec.schedulingGates",
        "spec.containers[1].resourceTypo",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchTypo",
    ]


def test_a_workloads_rollout_settings_are_irrelevant_and_its_template_is_checked() -> None:
    document = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 0,
            "strategy": {"type": "RollingUpdate"},
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"x": "y"}},
                "spec": {"containers": [{"name": "c", "image": "i"}], "resourceClaims": [{"name": "gpu"}]},
            },
        },
    }
    assert unread_fields(Deployment, document) == ["spec.template.spec.resourceClaims"]


def test_manifests_warn_only_when_asked_and_name_the_source_object_and_field() -> None:
    documents = [
        yaml.safe_load(POD),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "idle"},
            "spec": {"replicas": 0, "template": {"spec": {"containers": [{"name": "c"}]}}},
        },
    ]
    assert parse_manifests(documents, "in.yaml").warnings == []
    warnings = parse_manifests(documents, "in.yaml", check_unread=True).warnings
    assert warnings[0] == "in.yaml: Pod shop/web: spec.schedulingGates: not read by nodewright; ignored"
    assert len(warnings) == 4
    assert warnings[3] == "in.yaml: Service shop/web: v1 Service is not a kind nodewright reads; ignored"
