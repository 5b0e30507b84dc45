from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from core.api.kube import (
    Container,
    ContainerPort,
    LabelSelector,
    NodeInclusionPolicy,
    Pod,
    PodAffinityTerm,
    PodDisruptionBudget,
    PodPhase,
    PodSpec,
    PodStatus,
    ResourceRequirements,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    UnhealthyPodEvictionPolicy,
    is_daemonset_pod,
    is_pending,
    is_terminal,
    owner_kind,
    pod_host_ports,
    pod_key,
    pod_requests,
    selects,
    tolerates,
)
from core.api.meta import ObjectMeta, OwnerReference, Taint, TaintEffect, problems_of

GI = 2**30


def container(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    sidecar: bool = False,
    ports: list[ContainerPort] | None = None,
) -> Container:
    return Container(
        name="c",
        resources=ResourceRequirements(requests=requests or {}, limits=limits or {}),
        restart_policy="Always" if sidecar else None,
        ports=ports or [],
    )


def pod(
    containers: list[Container] | None = None,
    init: list[Container] | None = None,
    overhead: dict[str, Any] | None = None,
    **spec: Any,
) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="p", namespace="team"),
        spec=PodSpec(
            containers=containers or [], init_containers=init or [], overhead=overhead or {}, **spec
        ),
    )


def cpu_mem(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


# --- requests --------------------------------------------------------------------------------------------


def test_requests_sum_app_containers_without_counting_the_pod() -> None:
    requests = pod([container(cpu_mem("250m", "1Gi")), container(cpu_mem("750m", "512Mi"))])
    assert pod_requests(requests) == {"cpu": 1000, "memory": GI + GI // 2}


def test_limits_stand_in_for_missing_requests_resource_by_resource() -> None:
    only_limits = pod([container(limits=cpu_mem("2", "1Gi"))])
    mixed = pod([container(requests={"cpu": "500m"}, limits=cpu_mem("2", "1Gi"))])
    assert pod_requests(only_limits) == {"cpu": 2000, "memory": GI}
    assert pod_requests(mixed) == {"cpu": 500, "memory": GI}


def test_an_init_container_dominates_only_the_resources_it_needs_more_of() -> None:
    requests = pod([container(cpu_mem("1", "4Gi"))], init=[container(cpu_mem("3", "1Gi"))])
    assert pod_requests(requests) == {"cpu": 3000, "memory": 4 * GI}


def test_a_resource_only_an_init_container_requests_is_kept() -> None:
    requests = pod([container({"cpu": "1"})], init=[container({"ephemeral-storage": "1Gi"})])
    assert pod_requests(requests) == {"cpu": 1000, "ephemeral-storage": GI}


def test_an_empty_pod_requests_nothing() -> None:
    assert pod_requests(pod()) == {}


# Expected results from Karpenter's pkg/utils/resources suite (CPU in cores, memory in GiB).
SIDECAR_CASES = [
    pytest.param([(2, 1)], [((1, 2), True)], None, (3, 3), id="sidecar-adds-to-app"),
    pytest.param([(2, 1)], [((4, 2), False), ((3, 3), True)], (5, 1), (10, 5), id="init-sidecar-overhead"),
    pytest.param(
        [(2, 1)], [((4, 2), True), ((10, 2), False)], None, (14, 4), id="init-after-sidecar-exceeds"
    ),
    pytest.param([(2, 2)], [((4, 2), True), ((1, 1), False)], None, (6, 4), id="init-after-sidecar-smaller"),
    pytest.param(
        [(3, 3)],
        [((2, 2), True), ((1, 1), True), ((3, 3), True), ((5, 5), True), ((20, 20), False)],
        None,
        (31, 31),
        id="init-after-many-sidecars",
    ),
    pytest.param(
        [(3, 3)],
        [
            ((25, 25), False),
            ((1, 1), True),
            ((3, 3), False),
            ((1, 1), False),
            ((5, 5), True),
            ((1, 1), False),
        ],
        None,
        (25, 25),
        id="first-init-exceeds-all",
    ),
    pytest.param(
        [(3, 3)],
        [
            ((2, 2), False),
            ((1, 1), True),
            ((3, 3), False),
            ((1, 1), False),
            ((5, 5), True),
            ((1, 1), False),
            ((1, 1), False),
            ((1, 1), True),
            ((2, 1), False),
        ],
        None,
        (10, 10),
        id="interspersed",
    ),
    pytest.param(
        [(3, 3)], [((25, 4), False), ((1, 1), True), ((5, 5), True)], None, (25, 9), id="unequal-cpu"
    ),
    pytest.param(
        [(3, 3)], [((4, 25), False), ((1, 1), True), ((5, 5), True)], None, (9, 25), id="unequal-memory"
    ),
    pytest.param(
        [(2, 4)], [((4, 2), True), ((10, 2), False)], None, (14, 6), id="sidecar-then-cpu-heavy-init"
    ),
]


@pytest.mark.parametrize(("apps", "inits", "overhead", "expected"), SIDECAR_CASES)
def test_requests_with_sidecars_and_init_containers(
    apps: list[tuple[int, int]],
    inits: list[tuple[tuple[int, int], bool]],
    overhead: tuple[int, int] | None,
    expected: tuple[int, int],
) -> None:
    def amounts(cpu: int, memory: int) -> dict[str, Any]:
        return {"cpu": cpu, "memory": f"{memory}Gi"}

    subject = pod(
        [container(amounts(*app)) for app in apps],
        init=[container(amounts(*amount), sidecar=sidecar) for amount, sidecar in inits],
        overhead=amounts(*overhead) if overhead else None,
    )
    assert pod_requests(subject) == {"cpu": expected[0] * 1000, "memory": expected[1] * GI}


def test_sidecar_limits_stand_in_for_its_requests() -> None:
    subject = pod(
        [container(cpu_mem("2", "1Gi"))], init=[container(limits=cpu_mem("1", "2Gi"), sidecar=True)]
    )
    assert pod_requests(subject) == {"cpu": 3000, "memory": 3 * GI}


def test_overhead_is_added_on_top() -> None:
    subject = pod([container(cpu_mem("1", "1Gi"))], overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_requests(subject) == {"cpu": 1250, "memory": GI + 120 * 2**20}


# --- pod-level resources (spec.resources) ----------------------------------------------------------------


def pod_level(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> Any:
    return ResourceRequirements(requests=requests or {}, limits=limits or {})


def test_pod_level_requests_alone_are_the_pods_requests() -> None:
    subject = pod([container(), container()], resources=pod_level(cpu_mem("7", "2Gi")))
    assert pod_requests(subject) == {"cpu": 7000, "memory": 2 * GI}


def test_pod_level_requests_replace_what_containers_add_up_to_resource_by_resource() -> None:
    subject = pod(
        [container(cpu_mem("500m", "1Gi")), container({"cpu": "250m", "ephemeral-storage": "1Gi"})],
        resources=pod_level({"cpu": "7"}),
    )
    assert pod_requests(subject) == {"cpu": 7000, "memory": GI, "ephemeral-storage": GI}


def test_pod_level_requests_outweigh_init_containers_and_sidecars_for_their_resources_only() -> None:
    subject = pod(
        [container(cpu_mem("1", "1Gi"))],
        init=[container(cpu_mem("2", "3Gi"), sidecar=True), container(cpu_mem("6", "1Gi"))],
        resources=pod_level({"cpu": "4"}),
    )
    # memory: the app and the sidecar run together (4Gi), more than the init container beside the sidecar.
    assert pod_requests(subject) == {"cpu": 4000, "memory": 4 * GI}


def test_overhead_is_added_on_top_of_pod_level_requests() -> None:
    subject = pod(
        [container(cpu_mem("100m", "64Mi"))],
        resources=pod_level(cpu_mem("2", "1Gi")),
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert pod_requests(subject) == {"cpu": 2250, "memory": GI + 120 * 2**20}


def test_a_pod_level_limit_without_a_request_is_the_request_unless_containers_request_it() -> None:
    # As the API server defaults it: memory is requested by no container, so its pod-level limit is its request;
    # the containers' CPU request stands.
    subject = pod([container({"cpu": "500m"})], resources=pod_level(limits=cpu_mem("3", "2Gi")))
    assert pod_requests(subject) == {"cpu": 500, "memory": 2 * GI}
    only_limits = pod([container()], resources=pod_level(limits=cpu_mem("3", "2Gi")))
    assert pod_requests(only_limits) == {"cpu": 3000, "memory": 2 * GI}


def test_a_pod_level_request_wins_over_the_pod_level_limit() -> None:
    subject = pod([container()], resources=pod_level({"cpu": "1"}, cpu_mem("3", "2Gi")))
    assert pod_requests(subject) == {"cpu": 1000, "memory": 2 * GI}


def test_resources_that_cannot_be_set_at_pod_level_come_from_the_containers() -> None:
    subject = pod(
        [container({"nvidia.com/gpu": "1"})],
        resources=pod_level({"nvidia.com/gpu": "4", "cpu": "1"}),
    )
    assert pod_requests(subject) == {"cpu": 1000, "nvidia.com/gpu": 1}


def test_pod_level_resources_are_read_from_a_manifest() -> None:
    subject = Pod.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "resources": {"requests": {"cpu": "7", "memory": "1Gi"}},
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            },
        }
    )
    assert pod_requests(subject) == {"cpu": 7000, "memory": GI}


# --- quantities are checked when a model is built --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("1x", "quantity '1x' does not match the Kubernetes quantity format"),
        (True, "quantity True is not a string or a number"),
        ([1], "quantity [1] is not a string or a number"),
    ],
)
def test_a_bad_quantity_is_rejected_with_its_field_path(value: Any, rule: str) -> None:
    raw = {"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": value}}}]}}
    with pytest.raises(ValidationError) as caught:
        Pod.model_validate(raw)
    assert problems_of(caught.value) == [f"spec.containers[0].resources.limits.cpu: {rule}"]


def test_quantities_keep_the_form_they_were_written_in() -> None:
    subject = Pod.model_validate({"spec": {"overhead": {"cpu": 0.5, "memory": "64Mi", "pods": 1}}})
    assert subject.spec.overhead == {"cpu": 0.5, "memory": "64Mi", "pods": 1}
    assert pod_requests(subject) == {"cpu": 500, "memory": 64 * 2**20, "pods": 1}


# --- label selectors -------------------------------------------------------------------------------------


def selector(*expressions: tuple[str, str, list[str]], **match_labels: str) -> LabelSelector:
    return LabelSelector.model_validate(
        {
            "matchLabels": match_labels,
            "matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in expressions],
        }
    )


@pytest.mark.parametrize(
    ("expression", "labels", "expected"),
    [
        (("app", "In", ["web", "api"]), {"app": "web"}, True),
        (("app", "In", ["web"]), {"app": "db"}, False),
        (("app", "In", ["web"]), {}, False),
        (("app", "NotIn", ["web"]), {"app": "db"}, True),
        (("app", "NotIn", ["web"]), {"app": "web"}, False),
        (("app", "NotIn", ["web"]), {}, True),
        (("app", "Exists", []), {"app": ""}, True),
        (("app", "Exists", []), {"tier": "x"}, False),
        (("app", "DoesNotExist", []), {"tier": "x"}, True),
        (("app", "DoesNotExist", []), {"app": "web"}, False),
    ],
)
def test_selector_expressions(
    expression: tuple[str, str, list[str]], labels: dict[str, str], expected: bool
) -> None:
    assert selector(expression).matches(labels) is expected


def test_match_labels_and_expressions_must_all_hold() -> None:
    both = selector(("tier", "In", ["front"]), app="web")
    assert both.matches({"app": "web", "tier": "front", "extra": "1"})
    assert not both.matches({"app": "web", "tier": "back"})
    assert not both.matches({"app": "api", "tier": "front"})


def test_empty_selector_selects_everything_and_absent_selector_nothing() -> None:
    assert LabelSelector().matches({})
    assert selects(LabelSelector(), {"any": "thing"})
    assert not selects(None, {"any": "thing"})
    assert not selects(None, {})


def test_null_and_empty_selectors_stay_distinct_when_parsed() -> None:
    absent = PodAffinityTerm.model_validate({"topologyKey": "zone"})
    empty = PodAffinityTerm.model_validate({"topologyKey": "zone", "labelSelector": {}})
    assert absent.label_selector is None
    assert empty.label_selector == LabelSelector()
    assert not selects(absent.label_selector, {"app": "web"})
    assert selects(empty.label_selector, {"app": "web"})


@pytest.mark.parametrize(
    ("operator", "values", "rule"),
    [
        ("In", [], "operator In needs at least one value"),
        ("NotIn", [], "operator NotIn needs at least one value"),
        ("Exists", ["x"], "operator Exists takes no values"),
        ("DoesNotExist", ["x"], "operator DoesNotExist takes no values"),
    ],
)
def test_selector_expressions_follow_the_value_rules(operator: str, values: list[str], rule: str) -> None:
    with pytest.raises(ValidationError) as caught:
        selector(("app", operator, values))
    assert problems_of(caught.value) == [f"matchExpressions[0]: {rule}"]


def test_unknown_selector_operator_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        selector(("app", "Gt", ["1"]))
    assert problems_of(caught.value)[0].startswith("matchExpressions[0].operator: Input should be 'In'")


# --- tolerations -----------------------------------------------------------------------------------------


def taint(
    key: str = "gpu", value: str | None = "true", effect: TaintEffect = TaintEffect.NO_SCHEDULE
) -> Taint:
    return Taint(key=key, value=value, effect=effect)


def toleration(**fields: Any) -> Toleration:
    return Toleration.model_validate(fields)


@pytest.mark.parametrize(
    ("given", "subject", "expected"),
    [
        (toleration(key="gpu", operator="Equal", value="true", effect="NoSchedule"), taint(), True),
        (toleration(key="gpu", value="true"), taint(), True),
        (toleration(key="gpu", value="false"), taint(), False),
        (toleration(key="gpu", operator="Exists"), taint(value="anything"), True),
        (toleration(key="gpu", operator="Exists", effect="NoExecute"), taint(), False),
        (toleration(key="other", operator="Exists"), taint(), False),
        (toleration(operator="Exists"), taint(key="any", effect=TaintEffect.NO_EXECUTE), True),
        (toleration(operator="Exists", effect="NoSchedule"), taint(key="any"), True),
        (
            toleration(operator="Exists", effect="NoSchedule"),
            taint(effect=TaintEffect.PREFER_NO_SCHEDULE),
            False,
        ),
        (toleration(key="gpu", value="true"), taint(effect=TaintEffect.PREFER_NO_SCHEDULE), True),
        (toleration(key="gpu"), taint(value=None), True),
        (toleration(key="gpu", value=""), taint(value=""), True),
        (toleration(key="gpu", operator="", effect=""), taint(value=None), True),
    ],
)
def test_toleration_semantics(given: Toleration, subject: Taint, expected: bool) -> None:
    assert tolerates([given], subject) is expected


def test_blank_operator_and_effect_read_as_unset() -> None:
    blank = toleration(key="gpu", operator="", effect="")
    assert blank.operator is TolerationOperator.EQUAL
    assert blank.effect is None


def test_no_tolerations_tolerate_nothing_and_any_one_is_enough() -> None:
    assert not tolerates([], taint())
    assert tolerates(
        [toleration(key="other", operator="Exists"), toleration(key="gpu", value="true")], taint()
    )


# --- ports, owners, phases -------------------------------------------------------------------------------


def test_host_ports_of_app_containers_and_sidecars_only() -> None:
    subject = pod(
        [
            container(
                ports=[ContainerPort(container_port=80, host_port=8080), ContainerPort(container_port=81)]
            )
        ],
        init=[
            container(
                ports=[ContainerPort(container_port=53, host_port=53, protocol="UDP", host_ip="10.0.0.1")]
            ),
            container(ports=[ContainerPort(container_port=9100, host_port=9100)], sidecar=True),
        ],
    )
    assert sorted(pod_host_ports(subject)) == [("0.0.0.0", "TCP", 8080), ("0.0.0.0", "TCP", 9100)]


def test_host_port_fields_use_kubernetes_spelling() -> None:
    port = ContainerPort.model_validate(
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}
    )
    assert pod_host_ports(pod([Container(ports=[port])])) == [("10.0.0.1", "UDP", 53)]


def owned(*owners: tuple[str, bool | None]) -> Pod:
    references = [OwnerReference(kind=kind, name="o", controller=controller) for kind, controller in owners]
    return Pod(metadata=ObjectMeta(name="p", owner_references=references))


def test_owner_kind_prefers_the_controller_reference() -> None:
    assert owner_kind(owned(("Service", None), ("DaemonSet", True))) == "DaemonSet"
    assert owner_kind(owned(("ReplicaSet", None))) == "ReplicaSet"
    assert owner_kind(owned()) == ""
    assert is_daemonset_pod(owned(("DaemonSet", True)))
    assert not is_daemonset_pod(owned(("ReplicaSet", True)))


@pytest.mark.parametrize(
    ("node_name", "phase", "terminal", "pending"),
    [
        (None, None, False, True),
        (None, PodPhase.PENDING, False, True),
        ("", PodPhase.PENDING, False, True),
        ("node-1", PodPhase.RUNNING, False, False),
        (None, PodPhase.FAILED, True, False),
        ("node-1", PodPhase.SUCCEEDED, True, False),
    ],
)
def test_terminal_and_pending(
    node_name: str | None, phase: PodPhase | None, terminal: bool, pending: bool
) -> None:
    subject = Pod(spec=PodSpec(node_name=node_name), status=PodStatus(phase=phase))
    assert is_terminal(subject) is terminal
    assert is_pending(subject) is pending


def test_pod_key_defaults_the_namespace() -> None:
    assert pod_key(Pod(metadata=ObjectMeta(name="web", namespace="prod"))) == "prod/web"
    assert pod_key(Pod(metadata=ObjectMeta(name="web"))) == "default/web"


# --- spread constraints and disruption budgets ------------------------------------------------------------


def test_spread_policies_default_as_kubernetes_does() -> None:
    constraint = TopologySpreadConstraint.model_validate(
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    )
    assert constraint.node_affinity_policy is NodeInclusionPolicy.HONOR
    assert constraint.node_taints_policy is NodeInclusionPolicy.IGNORE
    assert constraint.label_selector is None


def test_spread_max_skew_must_be_positive() -> None:
    with pytest.raises(ValidationError) as caught:
        TopologySpreadConstraint.model_validate(
            {"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}
        )
    assert problems_of(caught.value) == ["maxSkew: Input should be greater than or equal to 1"]


@pytest.mark.parametrize("value", [0, 3, "0%", "50%", "100%"])
def test_pdb_accepts_integers_and_percentages(value: int | str) -> None:
    budget = PodDisruptionBudget.model_validate({"spec": {"minAvailable": value, "selector": {}}})
    assert budget.spec.min_available == value
    assert budget.spec.unhealthy_pod_eviction_policy is UnhealthyPodEvictionPolicy.IF_HEALTHY_BUDGET


@pytest.mark.parametrize("value", ["5", "half", "-1%", -1, True, 1.5])
def test_pdb_rejects_other_values(value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        PodDisruptionBudget.model_validate({"spec": {"maxUnavailable": value}})
    [problem] = problems_of(caught.value)
    assert problem.startswith("spec.maxUnavailable: ")
    assert 'is not a non-negative integer or a percentage like "50%"' in problem


def test_pdb_without_selector_keeps_it_absent() -> None:
    budget = PodDisruptionBudget.model_validate(
        {"spec": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    assert budget.spec.selector is None
    assert budget.spec.unhealthy_pod_eviction_policy is UnhealthyPodEvictionPolicy.ALWAYS_ALLOW
