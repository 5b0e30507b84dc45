from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from core.api.meta import InvalidObjectError, TaintEffect
from core.api.nodepool import (
    Budget,
    ConsolidationPolicy,
    DisruptionReason,
    NodePool,
    NodePoolConditionType,
    duration_timedelta,
)
from core.scheduling.requirements import Requirement, Requirements

AKS_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    metadata:
      labels:
        billing-team: my-team
      annotations:
        example.com/owner: my-team
    spec:
      nodeClassRef:
        group: karpenter.azure.com
        kind: AKSNodeClass
        name: default
      taints:
        - key: example.com/special-taint
          effect: NoSchedule
      startupTaints:
        - key: example.com/another-taint
          value: starting
          effect: NoExecute
      expireAfter: 720h
      terminationGracePeriod: 48h
      requirements:
        - key: karpenter.azure.com/sku-family
          operator: In
          values: [D, E, F]
          minValues: 2
        - key: karpenter.azure.com/sku-cpu
          operator: Lt
          values: ["33"]
        - key: karpenter.azure.com/sku-version
          operator: Gt
          values: ["2"]
        - key: topology.kubernetes.io/zone
          operator: In
          values: [eastus-1, eastus-2]
        - key: kubernetes.io/arch
          operator: In
          values: [amd64, arm64]
        - key: kubernetes.io/os
          operator: In
          values: [linux]
        - key: karpenter.sh/capacity-type
          operator: In
          values: [spot, on-demand]
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: 10%
      - schedule: "0 9 * * mon-fri"
        duration: 8h
        nodes: "0"
        reasons: [Underutilized, Empty]
  limits:
    cpu: "1000"
    memory: 1000Gi
  weight: 10
status:
  conditions:
    - type: Ready
      status: "True"
      observedGeneration: 1
      lastTransitionTime: "2024-02-02T19:54:34Z"
      reason: Ready
      message: ""
  resources:
    cpu: "20"
    memory: 8192Mi
    nodes: "5"
  nodes: 5
"""

SPOT = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}


def manifest(
    requirements: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    disruption: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A minimal valid NodePool; keyword arguments that are template-spec fields go there, the rest to spec."""
    template_fields = {"taints", "startupTaints", "nodeClassRef", "expireAfter", "terminationGracePeriod"}
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        "requirements": [SPOT] if requirements is None else requirements,
    }
    template_spec.update({key: value for key, value in fields.items() if key in template_fields})
    spec: dict[str, Any] = {"template": {"spec": template_spec}}
    spec.update({key: value for key, value in fields.items() if key not in template_fields})
    if labels is not None:
        spec["template"]["metadata"] = {"labels": labels}
    if disruption is not None:
        spec["disruption"] = disruption
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": spec,
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObjectError) as caught:
        NodePool.parse(raw)
    assert caught.value.kind == "NodePool"
    message = str(caught.value)
    assert "pydantic" not in message
    assert "Value error" not in message
    return message.splitlines()


def requirement(key: str, operator: str, *values: str, min_values: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": key, "operator": operator, "values": list(values)}
    if min_values is not None:
        entry["minValues"] = min_values
    return entry


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# --- the whole object ---------------------------------------------------------------------------------


def test_a_full_nodepool_round_trips() -> None:
    raw = yaml.safe_load(AKS_NODEPOOL)

    pool = NodePool.parse(raw)
    dumped = pool.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert dumped["spec"] == raw["spec"]
    assert dumped["status"] == raw["status"]
    assert NodePool.parse(dumped) == pool


def test_a_full_nodepool_reads_as_its_fields() -> None:
    pool = NodePool.parse(yaml.safe_load(AKS_NODEPOOL))
    template = pool.spec.template.spec

    assert pool.name == "default"
    assert pool.weight_or_zero == 10
    assert [(taint.key, taint.effect) for taint in pool.taints] == [
        ("example.com/special-taint", TaintEffect.NO_SCHEDULE)
    ]
    assert [(taint.key, taint.value) for taint in pool.startup_taints] == [
        ("example.com/another-taint", "starting")
    ]
    assert template.requirements[0].min_values == 2
    assert template.termination_grace_period_duration == timedelta(hours=48)
    assert pool.spec.disruption.consolidate_after_duration == timedelta(minutes=1)
    assert pool.resource_limits == {"cpu": 1_000_000, "memory": 1000 * 2**30}
    assert pool.status.nodes == 5
    assert pool.status.is_true(NodePoolConditionType.READY)
    assert not pool.status.is_true(NodePoolConditionType.NODE_CLASS_READY)


def test_defaults_are_applied() -> None:
    pool = NodePool.parse(manifest())
    template = pool.spec.template.spec
    disruption = pool.spec.disruption

    assert template.expire_after == "720h"
    assert template.expire_after_duration == timedelta(hours=720)
    assert template.termination_grace_period is None
    assert template.termination_grace_period_duration is None
    assert template.taints == []
    assert disruption.consolidation_policy is ConsolidationPolicy.WHEN_EMPTY_OR_UNDERUTILIZED
    assert disruption.consolidate_after == "0s"
    assert disruption.consolidate_after_duration == timedelta(0)
    assert [budget.nodes for budget in disruption.budgets] == ["10%"]
    assert pool.spec.limits is None
    assert pool.resource_limits == {}
    assert pool.spec.weight is None
    assert pool.weight_or_zero == 0
    assert not pool.is_static


def test_every_problem_of_the_object_is_reported_at_once() -> None:
    raw = manifest(
        requirements=[SPOT, requirement("karpenter.azure.com/sku-family", "In", "D", "E", min_values=3)],
        labels={"kubernetes.io/hostname": "node-1"},
        disruption={"budgets": [{"nodes": "110%"}]},
        weight=0,
    )

    assert problems(raw) == [
        'NodePool default: spec.template.metadata.labels: label "kubernetes.io/hostname" is restricted',
        "NodePool default: spec.template.spec.requirements[1].minValues (3) exceeds the number of values (2)",
        'NodePool default: spec.disruption.budgets[0].nodes: "110%" is neither a node count nor a percentage '
        "from 0% to 100%",
        "NodePool default: spec.weight: Input should be greater than or equal to 1",
    ]


def test_the_api_version_must_be_v1() -> None:
    raw = manifest()
    raw["apiVersion"] = "karpenter.sh/v1beta1"

    assert problems(raw) == ["NodePool default: apiVersion: Input should be 'karpenter.sh/v1'"]


def test_unknown_fields_are_rejected() -> None:
    raw = manifest()
    raw["spec"]["template"]["spec"]["kubelet"] = {"maxPods": 110}

    assert problems(raw) == ["NodePool default: spec.template.spec.kubelet: Extra inputs are not permitted"]


def test_template_and_requirements_are_required() -> None:
    raw = manifest()
    del raw["spec"]["template"]["spec"]["requirements"]
    del raw["spec"]["template"]["spec"]["nodeClassRef"]

    assert problems(raw) == [
        "NodePool default: spec.template.spec.requirements: Field required",
        "NodePool default: spec.template.spec.nodeClassRef: Field required",
    ]


def test_an_object_without_a_name_is_still_reported() -> None:
    raw = manifest(weight=0)
    del raw["metadata"]

    assert problems(raw) == ["NodePool: spec.weight: Input should be greater than or equal to 1"]


# --- requirements -----------------------------------------------------------------------------------


def test_at_most_100_requirements() -> None:
    many = [requirement(f"example.com/key-{index}", "Exists") for index in range(101)]

    assert NodePool.parse(manifest(requirements=many[:100]))
    assert problems(manifest(requirements=many)) == [
        "NodePool default: spec.template.spec.requirements: List should have at most 100 items after validation, "
        "not 101"
    ]


def test_operator_must_be_known() -> None:
    assert problems(manifest(requirements=[requirement("example.com/team", "Contains", "a")])) == [
        "NodePool default: spec.template.spec.requirements[0].operator: Input should be 'In', 'NotIn', 'Exists', "
        "'DoesNotExist', 'Gt', 'Lt', 'Gte' or 'Lte'"
    ]


def test_in_needs_a_value() -> None:
    assert problems(manifest(requirements=[requirement("example.com/team", "In")])) == [
        "NodePool default: spec.template.spec.requirements[0].values: operator In needs at least one value"
    ]


def test_not_in_may_be_empty() -> None:
    assert NodePool.parse(manifest(requirements=[requirement("example.com/team", "NotIn")]))


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_exists_and_does_not_exist_take_no_values(operator: str) -> None:
    assert NodePool.parse(manifest(requirements=[requirement("example.com/team", operator)]))
    assert problems(manifest(requirements=[requirement("example.com/team", operator, "a")])) == [
        f"NodePool default: spec.template.spec.requirements[0].values: operator {operator} takes no values, "
        "got ['a']"
    ]


@pytest.mark.parametrize("operator", ["Gt", "Lt", "Gte", "Lte"])
@pytest.mark.parametrize("values", [[], ["1", "2"], ["-1"], ["two"], ["1.5"]])
def test_bound_operators_take_one_non_negative_integer(operator: str, values: list[str]) -> None:
    assert NodePool.parse(manifest(requirements=[requirement("karpenter.azure.com/sku-cpu", operator, "4")]))
    assert problems(
        manifest(requirements=[requirement("karpenter.azure.com/sku-cpu", operator, *values)])
    ) == [
        f"NodePool default: spec.template.spec.requirements[0].values: operator {operator} needs exactly one "
        f"non-negative integer value, got {values}"
    ]


@pytest.mark.parametrize(
    ("min_values", "bound"), [(0, "greater than or equal to 1"), (51, "less than or equal to 50")]
)
def test_min_values_is_between_1_and_50(min_values: int, bound: str) -> None:
    entry = requirement("karpenter.azure.com/sku-family", "Exists", min_values=min_values)

    assert problems(manifest(requirements=[entry])) == [
        f"NodePool default: spec.template.spec.requirements[0].minValues: Input should be {bound}"
    ]


def test_min_values_with_in_needs_that_many_values() -> None:
    enough = requirement("karpenter.azure.com/sku-family", "In", "D", "E", min_values=2)
    too_few = requirement("karpenter.azure.com/sku-family", "In", "D", "E", min_values=3)

    assert NodePool.parse(manifest(requirements=[enough]))
    assert problems(manifest(requirements=[SPOT, too_few])) == [
        "NodePool default: spec.template.spec.requirements[1].minValues (3) exceeds the number of values (2)"
    ]


@pytest.mark.parametrize("operator", ["Exists", "NotIn"])
def test_min_values_without_in_counts_what_instance_types_offer(operator: str) -> None:
    assert NodePool.parse(
        manifest(requirements=[requirement("karpenter.azure.com/sku-family", operator, min_values=5)])
    )


@pytest.mark.parametrize(
    "key",
    [
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "node.kubernetes.io/custom",
        "node-restriction.kubernetes.io/team",
        "kops.k8s.io/instancegroup",
        "karpenter.sh/capacity-type",
        "karpenter.azure.com/sku-family",
        "karpenter.azure.com/aksnodeclass",
        "kubernetes.azure.com/mode",
        "example.com/team",
        "team",
    ],
)
def test_allowed_requirement_keys(key: str) -> None:
    assert NodePool.parse(manifest(requirements=[requirement(key, "Exists")]))


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("kubernetes.io/hostname", 'label "kubernetes.io/hostname" is restricted'),
        ("karpenter.sh/registered", 'label "karpenter.sh/registered" is restricted'),
        ("kubernetes.azure.com/role", 'label "kubernetes.azure.com/role" is restricted'),
        ("kubernetes.io/custom", 'label domain "kubernetes.io" is restricted'),
        ("example.kubernetes.io/custom", 'label domain "kubernetes.io" is restricted'),
        ("k8s.io/custom", 'label domain "k8s.io" is restricted'),
        ("karpenter.azure.com/sku-hyperv-generation", 'label domain "karpenter.azure.com" is restricted'),
        (
            "karpenter.sh/nodepool",
            'label "karpenter.sh/nodepool" is restricted (Karpenter sets it to the NodePool name)',
        ),
    ],
)
def test_restricted_requirement_keys(key: str, rule: str) -> None:
    assert problems(manifest(requirements=[requirement(key, "Exists")])) == [
        f"NodePool default: spec.template.spec.requirements[0].key: {rule}"
    ]


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        (
            "bad key",
            "the name part must consist of alphanumerics, '-', '_' or '.', starting and ending with an "
            "alphanumeric",
        ),
        (
            "Example.com/team",
            "the prefix must be a lowercase DNS subdomain of at most 253 characters (e.g. example.com)",
        ),
        ("a/b/c", 'it has more than one "/"'),
        ("example.com/", "the name part must not be empty"),
        ("x" * 64, "the name part must be 63 characters or less"),
    ],
)
def test_requirement_keys_are_qualified_names(key: str, rule: str) -> None:
    assert problems(manifest(requirements=[requirement(key, "Exists")])) == [
        f'NodePool default: spec.template.spec.requirements[0].key: "{key}" is not a valid label key: {rule}'
    ]


def test_requirement_values_are_label_values() -> None:
    assert problems(manifest(requirements=[requirement("example.com/team", "In", "ok", "not ok")])) == [
        'NodePool default: spec.template.spec.requirements[0].values[1]: "not ok" is not a valid label value: '
        "it must be empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    ]


def test_capacity_type_needs_a_value_karpenter_knows() -> None:
    some_valid = requirement("karpenter.sh/capacity-type", "In", "spot", "preemptible")

    assert NodePool.parse(manifest(requirements=[some_valid]))
    assert problems(
        manifest(requirements=[requirement("karpenter.sh/capacity-type", "In", "preemptible")])
    ) == [
        "NodePool default: spec.template.spec.requirements[0].values: no valid value for karpenter.sh/capacity-type "
        "in ['preemptible']: expected one of on-demand, reserved, spot"
    ]


def test_capacity_type_min_values_counts_only_known_values() -> None:
    entry = requirement("karpenter.sh/capacity-type", "In", "spot", "preemptible", min_values=2)

    assert problems(manifest(requirements=[entry])) == [
        "NodePool default: spec.template.spec.requirements[0].minValues: 2 exceeds the number of valid values (1); "
        "karpenter.sh/capacity-type takes on-demand, reserved, spot"
    ]


# --- template labels ---------------------------------------------------------------------------------


def test_template_labels_are_checked() -> None:
    raw = manifest(labels={"team": "a b", "karpenter.sh/nodepool": "other", "node.kubernetes.io/pool": "x"})

    assert problems(raw) == [
        'NodePool default: spec.template.metadata.labels: label team: "a b" is not a valid label value: it must '
        "be empty or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        'NodePool default: spec.template.metadata.labels: label "karpenter.sh/nodepool" is restricted (Karpenter '
        "sets it to the NodePool name)",
    ]


def test_template_labels_may_use_well_known_keys() -> None:
    labels = {
        "kubernetes.io/arch": "amd64",
        "karpenter.sh/capacity-type": "spot",
        "topology.kubernetes.io/zone": "z",
    }

    assert NodePool.parse(manifest(labels=labels)).spec.template.metadata.labels == labels


def test_at_most_100_template_labels() -> None:
    labels = {f"example.com/label-{index}": "x" for index in range(101)}

    assert problems(manifest(labels=labels)) == [
        "NodePool default: spec.template.metadata.labels: at most 100 labels are allowed, got 101"
    ]


# --- taints ----------------------------------------------------------------------------------------------


def test_taints_are_checked() -> None:
    raw = manifest(
        taints=[
            {"key": "bad key", "effect": "NoSchedule"},
            {"key": "ok", "value": "not ok", "effect": "NoSchedule"},
        ]
    )

    assert problems(raw) == [
        'NodePool default: spec.template.spec.taints[0].key: "bad key" is not a valid label key: the name part must '
        "consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        'NodePool default: spec.template.spec.taints[1].value: "not ok" is not a valid label value: it must be empty '
        "or consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
    ]


def test_taint_effect_must_be_known() -> None:
    assert problems(manifest(taints=[{"key": "gpu", "effect": "NoScheduleSometimes"}])) == [
        "NodePool default: spec.template.spec.taints[0].effect: Input should be 'NoSchedule', 'PreferNoSchedule' "
        "or 'NoExecute'"
    ]


def test_a_taint_key_and_effect_may_appear_once_across_taints_and_startup_taints() -> None:
    different_effects = manifest(
        taints=[{"key": "gpu", "effect": "NoSchedule"}], startupTaints=[{"key": "gpu", "effect": "NoExecute"}]
    )
    duplicated = manifest(
        taints=[{"key": "gpu", "effect": "NoSchedule"}],
        startupTaints=[{"key": "gpu", "value": "other", "effect": "NoSchedule"}],
    )

    assert NodePool.parse(different_effects)
    assert problems(duplicated) == [
        "NodePool default: spec.template.spec.startupTaints[0]: duplicate taint gpu:NoSchedule across taints and "
        "startupTaints"
    ]


# --- nodeClassRef and durations ------------------------------------------------------------------------


def test_node_class_ref_fields_may_not_be_empty() -> None:
    raw = manifest(nodeClassRef={"group": "karpenter.azure.com/v1", "kind": "", "name": ""})

    assert problems(raw) == [
        "NodePool default: spec.template.spec.nodeClassRef.kind: kind may not be empty",
        "NodePool default: spec.template.spec.nodeClassRef.name: name may not be empty",
        'NodePool default: spec.template.spec.nodeClassRef.group: "karpenter.azure.com/v1" is an API group and may '
        'not contain "/"',
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("720h", timedelta(hours=720)),
        ("1h30m", timedelta(minutes=90)),
        ("90s", timedelta(seconds=90)),
        ("Never", None),
    ],
)
def test_expire_after_reads_as_a_timedelta(text: str, expected: timedelta | None) -> None:
    assert NodePool.parse(manifest(expireAfter=text)).spec.template.spec.expire_after_duration == expected


@pytest.mark.parametrize("text", ["30d", "1.5h", "10", "-1h", "never", "1h 30m"])
def test_expire_after_takes_hours_minutes_and_seconds_or_never(text: str) -> None:
    assert problems(manifest(expireAfter=text)) == [
        f'NodePool default: spec.template.spec.expireAfter: "{text}" is not a duration such as "720h" or "1h30m", '
        'nor "Never"'
    ]


def test_durations_stop_where_go_durations_stop() -> None:
    assert NodePool.parse(manifest(expireAfter="2562047h"))
    assert problems(manifest(expireAfter="2562048h")) == [
        'NodePool default: spec.template.spec.expireAfter: "2562048h" is longer than the longest duration '
        "Kubernetes accepts (about 292 years)"
    ]


def test_termination_grace_period_is_a_duration_but_not_never() -> None:
    assert (
        NodePool.parse(manifest(terminationGracePeriod="1h")).spec.template.spec.termination_grace_period
        == "1h"
    )
    assert problems(manifest(terminationGracePeriod="Never")) == [
        'NodePool default: spec.template.spec.terminationGracePeriod: "Never" is not allowed here; give a duration '
        'such as "48h"'
    ]
    assert problems(manifest(terminationGracePeriod="2d")) == [
        'NodePool default: spec.template.spec.terminationGracePeriod: "2d" is not a duration of hours, minutes and '
        'seconds such as "720h" or "1h30m"'
    ]


def test_duration_timedelta_rejects_what_models_reject() -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        duration_timedelta("1d")


# --- disruption --------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"])
def test_consolidation_policies(policy: str) -> None:
    pool = NodePool.parse(manifest(disruption={"consolidationPolicy": policy}))

    assert pool.spec.disruption.consolidation_policy == policy


def test_unknown_consolidation_policy() -> None:
    assert problems(manifest(disruption={"consolidationPolicy": "WhenUnderutilized"})) == [
        "NodePool default: spec.disruption.consolidationPolicy: Input should be 'WhenEmpty', "
        "'WhenEmptyOrUnderutilized' or 'Balanced'"
    ]


def test_consolidate_after_never_disables_consolidation() -> None:
    pool = NodePool.parse(manifest(disruption={"consolidateAfter": "Never"}))

    assert pool.spec.disruption.consolidate_after_duration is None
    assert problems(manifest(disruption={"consolidateAfter": "5 minutes"})) == [
        'NodePool default: spec.disruption.consolidateAfter: "5 minutes" is not a duration such as "720h" or '
        '"1h30m", nor "Never"'
    ]


def test_budgets_given_replace_the_default() -> None:
    pool = NodePool.parse(manifest(disruption={"budgets": [{"nodes": "3"}]}))

    assert [budget.nodes for budget in pool.spec.disruption.budgets] == ["3"]


def test_at_most_50_budgets() -> None:
    assert problems(manifest(disruption={"budgets": [{"nodes": "1"}] * 51})) == [
        "NodePool default: spec.disruption.budgets: List should have at most 50 items after validation, not 51"
    ]


@pytest.mark.parametrize("nodes", ["0", "5", "250", "0%", "5%", "100%"])
def test_budget_nodes_valid(nodes: str) -> None:
    assert NodePool.parse(manifest(disruption={"budgets": [{"nodes": nodes}]}))


@pytest.mark.parametrize("nodes", ["101%", "-1", "ten", "5.5%", ""])
def test_budget_nodes_invalid(nodes: str) -> None:
    assert problems(manifest(disruption={"budgets": [{"nodes": nodes}]})) == [
        f'NodePool default: spec.disruption.budgets[0].nodes: "{nodes}" is neither a node count nor a percentage '
        "from 0% to 100%"
    ]


@pytest.mark.parametrize("budget", [{"schedule": "@daily"}, {"duration": "1h"}])
def test_schedule_and_duration_go_together(budget: dict[str, str]) -> None:
    assert problems(manifest(disruption={"budgets": [{"nodes": "1"}, budget]})) == [
        "NodePool default: spec.disruption.budgets[1]: schedule and duration must be set together"
    ]


@pytest.mark.parametrize("duration", ["8h", "30m", "1h30m", "8h0s", "1h30m0s"])
def test_budget_duration_valid(duration: str) -> None:
    assert NodePool.parse(manifest(disruption={"budgets": [{"schedule": "@daily", "duration": duration}]}))


@pytest.mark.parametrize("duration", ["30s", "1h30m15s", "1d", "Never"])
def test_budget_duration_is_hours_and_minutes(duration: str) -> None:
    assert problems(manifest(disruption={"budgets": [{"schedule": "@daily", "duration": duration}]})) == [
        f'NodePool default: spec.disruption.budgets[0].duration: "{duration}" is not a duration in hours and '
        'minutes such as "8h", "30m" or "1h30m"'
    ]


def test_budget_schedule_must_parse() -> None:
    assert problems(manifest(disruption={"budgets": [{"schedule": "0 25 * * *", "duration": "1h"}]})) == [
        'NodePool default: spec.disruption.budgets[0].schedule: hour "25": 25 is outside 0-23'
    ]


def test_budget_schedule_must_fire() -> None:
    assert problems(manifest(disruption={"budgets": [{"schedule": "0 0 31 2 *", "duration": "1h"}]})) == [
        'NodePool default: spec.disruption.budgets[0].schedule: "0 0 31 2 *" never fires: no such date exists'
    ]


def test_budget_reasons_are_known_and_distinct() -> None:
    valid = manifest(
        disruption={"budgets": [{"nodes": "1", "reasons": ["Underutilized", "Empty", "Drifted"]}]}
    )

    assert NodePool.parse(valid).spec.disruption.budgets[0].reasons == list(DisruptionReason)
    assert problems(manifest(disruption={"budgets": [{"nodes": "1", "reasons": ["Expired"]}]})) == [
        "NodePool default: spec.disruption.budgets[0].reasons[0]: Input should be 'Underutilized', 'Empty' or "
        "'Drifted'"
    ]
    assert problems(manifest(disruption={"budgets": [{"nodes": "1", "reasons": ["Empty", "Empty"]}]})) == [
        "NodePool default: spec.disruption.budgets[0].reasons: duplicate reasons: Empty"
    ]


# --- budget arithmetic ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "total", "limit"),
    [("30%", 10, 3), ("20%", 19, 4), ("5%", 10, 1), ("0%", 10, 0), ("100%", 7, 7), ("3", 10, 3), ("3", 1, 3)],
)
def test_percentages_round_up(nodes: str, total: int, limit: int) -> None:
    assert Budget(nodes=nodes).node_limit(total) == limit


def test_a_budget_without_schedule_is_always_active() -> None:
    budget = Budget(nodes="2")

    assert budget.is_active(at(2026, 3, 7, 3, 0))
    assert budget.allowed_disruptions(at(2026, 3, 7, 3, 0), 10) == 2


@pytest.mark.parametrize(
    ("now", "active"),
    [
        (at(2026, 3, 9, 8, 59), False),  # Monday, before the window
        (at(2026, 3, 9, 9, 0), True),  # the minute the schedule fires
        (at(2026, 3, 9, 16, 59), True),
        (at(2026, 3, 9, 17, 0), False),  # eight hours later the window has closed
        (at(2026, 3, 7, 12, 0), False),  # Saturday
    ],
)
def test_a_scheduled_budget_is_active_for_its_duration_after_each_hit(now: datetime, active: bool) -> None:
    budget = Budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h")

    assert budget.is_active(now) is active
    assert budget.allowed_disruptions(now, 10) == (0 if active else None)


def test_overlapping_hits_extend_the_window() -> None:
    budget = Budget(nodes="0", schedule="0 * * * *", duration="90m")

    assert all(budget.is_active(at(2026, 3, 9, hour, minute)) for hour in range(3) for minute in (0, 31, 59))


def test_a_budget_applies_to_its_reasons_or_to_all() -> None:
    assert Budget().applies_to(DisruptionReason.DRIFTED)
    assert Budget(reasons=[DisruptionReason.EMPTY]).applies_to(DisruptionReason.EMPTY)
    assert not Budget(reasons=[DisruptionReason.EMPTY]).applies_to(DisruptionReason.DRIFTED)


def test_the_most_restrictive_active_budget_for_a_reason_wins() -> None:
    pool = NodePool.parse(
        manifest(
            disruption={
                "budgets": [
                    {"nodes": "50%"},
                    {"nodes": "2", "reasons": ["Drifted"]},
                    {
                        "nodes": "0",
                        "reasons": ["Underutilized"],
                        "schedule": "0 9 * * mon-fri",
                        "duration": "8h",
                    },
                ]
            }
        )
    )
    monday_noon, saturday = at(2026, 3, 9, 12, 0), at(2026, 3, 7, 12, 0)

    assert pool.allowed_disruptions(DisruptionReason.DRIFTED, monday_noon, 10) == 2
    assert pool.allowed_disruptions(DisruptionReason.EMPTY, monday_noon, 10) == 5
    assert pool.allowed_disruptions(DisruptionReason.UNDERUTILIZED, monday_noon, 10) == 0
    assert pool.allowed_disruptions(DisruptionReason.UNDERUTILIZED, saturday, 10) == 5


def test_no_budget_means_no_limit() -> None:
    pool = NodePool.parse(manifest(disruption={"budgets": []}))

    assert pool.allowed_disruptions(DisruptionReason.EMPTY, at(2026, 1, 1), 10) is None


# --- limits, weight, replicas -----------------------------------------------------------------------


def test_limits_are_quantities() -> None:
    pool = NodePool.parse(manifest(limits={"cpu": 100, "memory": "64Gi", "nvidia.com/gpu": "2", "nodes": 10}))

    assert pool.resource_limits == {"cpu": 100_000, "memory": 64 * 2**30, "nvidia.com/gpu": 2, "nodes": 10}
    assert problems(manifest(limits={"cpu": "lots", "memory": "64Gi"})) == [
        "NodePool default: spec.limits.cpu: quantity 'lots' does not match the Kubernetes quantity format"
    ]


@pytest.mark.parametrize("weight", [1, 100])
def test_weight_valid(weight: int) -> None:
    assert NodePool.parse(manifest(weight=weight)).weight_or_zero == weight


def test_weight_at_most_100() -> None:
    assert problems(manifest(weight=101)) == [
        "NodePool default: spec.weight: Input should be less than or equal to 100"
    ]


def test_static_pool() -> None:
    pool = NodePool.parse(manifest(replicas=3, limits={"nodes": 5}))

    assert pool.is_static
    assert pool.spec.replicas == 3


def test_static_pool_rules() -> None:
    assert problems(manifest(replicas=-1)) == [
        "NodePool default: spec.replicas: Input should be greater than or equal to 0"
    ]
    assert problems(manifest(replicas=3, weight=10, limits={"cpu": "10", "nodes": 5})) == [
        "NodePool default: spec.weight: weight is not supported on static NodePools (replicas is set)",
        "NodePool default: spec.limits: only limits.nodes is supported on static NodePools (replicas is set)",
    ]


def test_updates_keep_the_node_class_kind_and_group_and_the_pool_mode() -> None:
    old = NodePool.parse(manifest())
    renamed = NodePool.parse(
        manifest(nodeClassRef={"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "b"})
    )
    changed = NodePool.parse(
        manifest(nodeClassRef={"group": "example.com", "kind": "Other", "name": "default"}, replicas=2)
    )

    renamed.validate_update(old)
    with pytest.raises(InvalidObjectError) as caught:
        changed.validate_update(old)
    assert str(caught.value).splitlines() == [
        "NodePool default: spec.template.spec.nodeClassRef.group: is immutable (was 'karpenter.azure.com', now "
        "'example.com')",
        "NodePool default: spec.template.spec.nodeClassRef.kind: is immutable (was 'AKSNodeClass', now 'Other')",
        "NodePool default: spec.replicas: a NodePool cannot switch between static (replicas set) and dynamic pools",
    ]


# --- requirements for the scheduler ------------------------------------------------------------------


def test_requirements_combine_labels_the_pool_name_and_requirements() -> None:
    pool = NodePool.parse(
        manifest(
            requirements=[
                requirement("beta.kubernetes.io/arch", "In", "amd64", "arm64"),
                requirement("karpenter.sh/capacity-type", "In", "spot", "on-demand"),
                requirement("karpenter.azure.com/sku-family", "In", "D", "E", min_values=2),
                requirement("team", "In", "a", "b"),
            ],
            labels={"team": "a"},
        )
    )

    assert pool.requirements() == Requirements(
        [
            Requirement.new("kubernetes.io/arch", "In", ["amd64", "arm64"]),
            Requirement.new("karpenter.sh/capacity-type", "In", ["spot", "on-demand"]),
            Requirement.new("karpenter.azure.com/sku-family", "In", ["D", "E"], min_values=2),
            Requirement.new("team", "In", ["a"]),
            Requirement.new("karpenter.sh/nodepool", "In", ["default"]),
        ]
    )


def test_a_template_label_the_requirements_exclude_leaves_no_value() -> None:
    pool = NodePool.parse(manifest(requirements=[requirement("team", "In", "a")], labels={"team": "b"}))

    assert pool.requirements().get("team").is_empty()
