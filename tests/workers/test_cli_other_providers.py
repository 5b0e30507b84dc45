"""The what-if commands leave another provider's NodePools and NodeClaims alone, as Karpenter lists only those whose
nodeClassRef names its cloud provider's NodeClass (`IsManaged`), and as the controller does: no NodeClaim planned
from them, none of their nodes disrupted, no static pool scaled; a warning names each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.workers.test_cli import EXAMPLES, NODEPOOL, ROOT, pod, run, schedule_json, write
from tests.workers.test_cli_static import STATIC

AWS_REFERENCE = "{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}"
AWS_NODEPOOL = f"""
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: aws}}
spec:
  weight: 100
  template:
    spec:
      nodeClassRef: {AWS_REFERENCE}
      requirements: []
"""


def test_schedule_plans_nothing_on_another_providers_nodepool(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + AWS_NODEPOOL + pod("a", "1", "1Gi"))
    document = schedule_json("-f", manifests)
    [claim] = document["nodeclaims"]
    assert claim["nodepool"] == "default"  # the heavier NodePool is not ours to launch from
    assert (
        "NodePool aws: spec.template.spec.nodeClassRef is a karpenter.k8s.aws/EC2NodeClass, another provider's "
        "NodeClass; left to that provider"
    ) in document["warnings"]

    only_theirs = write(tmp_path, "theirs.yaml", AWS_NODEPOOL + pod("a", "1", "1Gi"))
    document = schedule_json("-f", only_theirs)
    assert document["nodeclaims"] == [] and [u["pod"] for u in document["unschedulable"]] == ["default/a"]


def test_plan_disruption_leaves_another_providers_nodes_alone(tmp_path: Path) -> None:
    documents = [
        d for d in yaml.safe_load_all((ROOT / "deploy" / "snapshots" / "cluster.yaml").read_text()) if d
    ]
    for document in documents:
        if document["kind"] == "NodePool":
            document["spec"]["template"]["spec"]["nodeClassRef"] = yaml.safe_load(AWS_REFERENCE)
        if document["kind"] == "NodeClaim":
            document["spec"]["nodeClassRef"] = yaml.safe_load(AWS_REFERENCE)
    snapshot = write(tmp_path, "cluster.yaml", yaml.safe_dump_all(documents))
    code, out, err = run("plan-disruption", "-f", snapshot, "--now", "2026-11-22T10:00:00Z", "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["commands"] == []  # the empty node and the underused ones are another provider's
    assert any(w.startswith("NodeClaim general-aaaaa: spec.nodeClassRef is a") for w in plan["warnings"])


def test_another_providers_static_pool_gets_no_preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEATURE_GATES", "StaticCapacity=true")
    theirs = STATIC.replace("{group: karpenter.azure.com, kind: AKSNodeClass, name: default}", AWS_REFERENCE)
    code, out, err = run(
        "schedule", "-o", "json", "-f", str(EXAMPLES), "-f", write(tmp_path, "s.yaml", theirs)
    )
    assert code == 0, err
    assert json.loads(out)["static"] == []
