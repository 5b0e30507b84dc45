from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.static_capacity import gate_off_message
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


@pytest.fixture
def gate_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEATURE_GATES", "StaticCapacity=true")


@pytest.mark.usefixtures("gate_on")
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


PENDING = """
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


@pytest.mark.usefixtures("gate_on")
def test_the_total_counts_the_nodeclaims_a_static_pool_would_create(tmp_path: Path) -> None:
    pending = PENDING
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


def test_with_the_gate_off_static_pools_are_not_acted_on_as_by_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    static = write(tmp_path, "static.yaml", STATIC + PENDING)
    monkeypatch.setenv("FEATURE_GATES", "StaticCapacity=true")
    code, out, _ = run("schedule", "-o", "json", "-f", str(EXAMPLES), "-f", static)
    on = json.loads(out)
    monkeypatch.delenv("FEATURE_GATES")  # StaticCapacity is off by default, as in Karpenter
    code, out, err = run("schedule", "-o", "json", "-f", str(EXAMPLES), "-f", static)
    assert code == 0, err
    off = json.loads(out)

    warning = gate_off_message("fixed", 2)
    assert (off["static"], off["warnings"]) == ([], [warning]) and f"warning: {warning}" in err
    [claim] = off["nodeclaims"]
    assert off["total_price_per_hour"] == pytest.approx(claim["price_per_hour"])
    same = {
        key: value for key, value in on.items() if key not in ("static", "total_price_per_hour", "warnings")
    }
    assert same == {key: off[key] for key in same} and set(on) == set(off)
    code, out, _ = run("schedule", "-f", str(EXAMPLES), "-f", static)
    assert "fixed:" not in out and "static NodePools' included" not in out
