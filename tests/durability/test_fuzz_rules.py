"""The fuzz benchmark's rules (benchmarks/fuzz_rules.py): the CRDs' CEL rules judged as the API server judges them,
and objects meant to be valid repaired against them with small edits."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from benchmarks.fuzz_objects import VOCABULARY, crd_kinds
from benchmarks.fuzz_rules import Rules, go_pattern, quantity


def kind(name: str) -> Any:
    return next(k for k in crd_kinds() if k.name == name)


def test_patterns_match_what_go_matches() -> None:
    digits = go_pattern(r"^\d+(\.\d+)?$")
    assert re.search(digits, "12.5") and not re.search(digits, "١٢") and not re.search(digits, "12\n")
    cron = go_pattern(r"^\s*(?:@(?:daily)|\S+\s+\S+)\s*$")
    assert re.search(cron, " 0 8 ") and not re.search(cron, "\u3000@daily") and not re.search(cron, "a\x1cb")
    assert go_pattern(r"^[\d.]+$") == r"^[0-9.]+\Z"


def test_a_capacity_window_is_repaired_to_what_the_api_server_takes() -> None:
    windows = kind("CapacityWindow")
    drawn = {
        "spec": {
            "targetRef": {"apiGroup": "apps", "kind": "CapacityBuffer", "name": "web"},
            "schedule": "@daily",
            "duration": "1h",
            "replicas": 2,
        }
    }
    assert [failure.path for failure in windows.rules.failures(drawn)] == [("spec", "targetRef")] * 2

    repaired = windows.rules.repair(drawn)
    assert windows.rules.failures(repaired) == []
    assert drawn["spec"]["targetRef"]["apiGroup"] == "apps"  # the drawn object is left as it was
    target = repaired["spec"]["targetRef"]
    assert target in (
        {
            "apiGroup": "autoscaling.x-k8s.io",
            "kind": "CapacityBuffer",
            "name": "web",
            "namespace": target.get("namespace"),
        },
        {"apiGroup": "karpenter.sh", "kind": "NodePool", "name": "web"},
    )
    assert target["kind"] == "NodePool" or target["namespace"]


def test_requirements_are_repaired_item_by_item_and_defaults_count() -> None:
    pools = kind("NodePool")
    requirements = [
        {"key": "example.com/a", "operator": "Gt", "values": ["many"]},
        {"key": "example.com/b", "operator": "Exists", "values": ["x"]},
        {"key": "example.com/c", "operator": "In", "values": ["y"]},
    ]
    reference = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}
    drawn = {"spec": {"template": {"spec": {"nodeClassRef": reference, "requirements": requirements}}}}
    assert len(pools.rules.failures(drawn)) == 2

    repaired = pools.rules.repair(drawn)
    assert pools.rules.failures(repaired) == []
    assert repaired["spec"]["template"]["spec"]["requirements"][2] == requirements[2]
    assert len(repaired["spec"]["template"]["spec"]["requirements"]) == 3  # fixed, not dropped


def test_a_rule_on_a_default_is_judged_on_the_defaulted_object() -> None:
    schema = {
        "type": "object",
        "properties": {"mode": {"type": "string", "default": "Fast"}, "size": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.mode != 'Fast' || !has(self.size)", "message": "m"}],
    }
    rules = Rules(schema, VOCABULARY)
    assert rules.failures({"size": 3}) and not rules.failures({"size": 3, "mode": "Slow"})
    assert rules.failures(rules.repair({"size": 3})) == []


def test_quantities_are_read_as_the_api_server_reads_them() -> None:
    assert quantity("5E") == 5 * 10**18 and quantity("1e3") == 1000 and quantity("2Mi") == 2 * 2**20
    assert quantity(0.5) == Decimal("0.5") and quantity("1.5.5") is None and quantity(True) is None
