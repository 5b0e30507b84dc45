from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workers.test_cli import EXAMPLES, run, write

STATIC = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 2
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_D2s_v5, Standard_D4s_v5]}
"""


def test_schedule_lists_what_a_static_pool_would_create(tmp_path: Path) -> None:
    static = write(tmp_path, "static.yaml", STATIC)
    code, out, err = run("schedule", "-o", "json", "-f", str(EXAMPLES), "-f", static)
    assert code == 0, err
    (preview,) = json.loads(out)["static"]
    assert (preview["nodepool"], preview["current"], preview["create"], preview["delete"]) == (
        "fixed",
        0,
        2,
        [],
    )
    assert preview["nodeclaim"]["instance_type"] == "Standard_D2s_v5"
    assert preview["nodeclaim"]["capacity_type"] == "on-demand"
    code, out, _ = run("schedule", "-f", str(EXAMPLES), "-f", static)
    assert "fixed: 0 nodeclaim(s), 2 desired: creating 2; each Standard_D2s_v5 on-demand" in out


def test_the_total_counts_the_nodeclaims_a_static_pool_would_create(tmp_path: Path) -> None:
    pending = """
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""
    static = write(tmp_path, "static.yaml", STATIC + pending)
    code, out, err = run("schedule", "-o", "json", "-f", str(EXAMPLES), "-f", static)
    assert code == 0, err
    document = json.loads(out)
    [claim] = document["nodeclaims"]
    (preview,) = document["static"]
    expected = claim["price_per_hour"] + preview["create"] * preview["nodeclaim"]["price_per_hour"]
    assert document["total_price_per_hour"] == pytest.approx(expected) and expected > claim["price_per_hour"]
    code, out, _ = run("schedule", "-f", str(EXAMPLES), "-f", static)
    assert f"Total for new NodeClaims (static NodePools' included): ${expected:.4f}/hour" in out
