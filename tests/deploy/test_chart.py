"""The Helm chart: it lints clean with the defaults and with every option set, typos and missing values fail with
the value named, what it renders is what the chart promises (one active controller, scalable workers, locked-down
pods, scheduling away from the nodes nodewright manages, metrics, Temporal TLS and API key, workload identity),
and the real local API server accepts every object it renders: validated server-side, then installed and
uninstalled."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from activities.disruption import repack_options
from core.disruption.options import RepackOptions
from core.features import MinValuesPolicy
from core.repack_defaults import DEFAULT_MIN_SAVINGS_PERCENT
from tests.deploy.helm import (
    CHART,
    FULL_VALUES,
    HERE,
    REQUIRED_VALUES,
    VALUE_SETS,
    Helm,
    container,
    deployments,
    documents,
    environment,
)
from workers.azure import load_azure
from workers.consolidate import disruption_input
from workers.controlplane.run import ControlPlane
from workers.serve import provisioner_input
from workers.settings import Settings, load_settings

SERVICEMONITOR_CRD = HERE / "servicemonitor-crd.yaml"
REQUIRED = (
    "settings.clusterName",
    "settings.clusterEndpoint",
    "settings.bootstrapTokenSecret",
    "settings.azure.subscriptionId",
    "settings.azure.nodeResourceGroup",
    "settings.azure.location",
    "settings.azure.subnetId",
    "settings.azure.kubernetesVersion",
    "settings.azure.nodeImageVersion",
    "settings.azure.sshPublicKey",
)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [item for item in objects if item["kind"] == kind]


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


# Lint and values


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lint_is_clean(helm: Helm, value_set: str) -> None:
    done = helm.lint(VALUE_SETS[value_set])
    assert "0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout


def options(schema: dict[str, Any], node: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted path of every option values.schema.json defines (a map of labels is one option)."""
    for key, child in node.get("properties", {}).items():
        if key == "global":
            continue
        if "$ref" in child:
            child = schema["definitions"][child["$ref"].rpartition("/")[2]]
        if "properties" in child and child.get("additionalProperties") is False:
            yield from options(schema, child, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_the_full_values_set_every_option() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    full = yaml.safe_load(FULL_VALUES.read_text(encoding="utf-8"))
    missing = []
    for path in options(schema, schema):
        node: Any = full
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        if node is None or node in ("", [], {}):
            missing.append(path)
    assert missing == [], f"{FULL_VALUES.name} does not set {', '.join(missing)}"


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("logFormat=jsn", "at '/logFormat': value must be one of 'json', 'text'"),
        ("logLevel=verbose", "at '/logLevel'"),
        ("metrics.port=80800", "at '/metrics/port'"),
        ("healthProbe.port=http", "at '/healthProbe/port'"),
        ("controller.replicas=two", "at '/controller/replicas'"),
        ("temporal.address=http://temporal:7233", "at '/temporal/address'"),
        ("settings.bootstrapTokenSecret=bootstrap-token-abcdef", "at '/settings/bootstrapTokenSecret'"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
        ("settings.repack.minSavingsPercent=120", "at '/settings/repack/minSavingsPercent'"),
        ("serviceMonitor.enable=true", "additional properties 'enable' not allowed"),
        ("logformat=json", "additional properties 'logformat' not allowed"),
    ],
)
def test_a_misspelt_or_mistyped_value_fails_lint(helm: Helm, assignment: str, complaint: str) -> None:
    done = helm.lint([REQUIRED_VALUES], assignment, check=False)
    assert done.returncode != 0
    assert complaint in done.stdout + done.stderr


@pytest.mark.parametrize("path", REQUIRED)
def test_a_missing_required_value_fails_with_its_name(helm: Helm, path: str) -> None:
    done = helm.template([REQUIRED_VALUES], f"{path}=", check=False)
    assert done.returncode != 0
    assert f"{path} is required" in done.stderr


def test_without_values_the_first_missing_one_is_named(helm: Helm) -> None:
    done = helm.template([], check=False)
    assert done.returncode != 0
    assert "is required" in done.stderr and "settings." in done.stderr


@pytest.mark.parametrize(
    ("assignments", "complaint"),
    [
        (["controller.leaderElection.renewSeconds=10"], "renewSeconds must be shorter than leaseSeconds"),
        (["controller.leaderElection.enabled=false"], "needs controller.replicas=1"),
        (["worker.shutdownGraceSeconds=30"], "shorter than terminationGracePeriodSeconds"),
        (["settings.batchMaxSeconds=0.5"], "batchMaxSeconds must be at least settings.batchIdleSeconds"),
        (["temporal.tls.enabled=true"], "temporal.tls and temporal.apiKey are for an external Temporal"),
        (["temporal.apiKey.secretName=key"], "set temporal.address too"),
        (
            [
                "temporal.address=temporal-frontend.temporal:7233",
                "temporal.tls.secretName=tls",
                "temporal.tls.clientCertificate=false",
                "temporal.tls.caCertificate=false",
            ],
            "nothing would be read from it",
        ),
    ],
)
def test_values_that_cannot_work_together_are_refused(
    helm: Helm, assignments: list[str], complaint: str
) -> None:
    done = helm.template([REQUIRED_VALUES], *assignments, check=False)
    assert done.returncode != 0
    assert complaint in done.stderr


def test_one_controller_replica_may_run_without_leader_election(helm: Helm) -> None:
    objects = helm.render(
        [REQUIRED_VALUES], "controller.leaderElection.enabled=false", "controller.replicas=1"
    )
    env = environment(deployments(objects)["controller"])
    assert env["NODEWRIGHT_LEADER_ELECTION"] == "false"
    assert not [name for name in env if name.startswith("NODEWRIGHT_LEADER_ELECTION_")]


# What the defaults render


def test_two_controllers_share_a_lease_and_the_workers_have_none(helm: Helm) -> None:
    rendered = deployments(helm.render([REQUIRED_VALUES], namespace="nodewright-system"))
    controller, worker = rendered["controller"], rendered["worker"]
    assert controller["spec"]["replicas"] == 2
    assert container(controller)["args"] == ["controller", "--log-format", "json"]
    env = environment(controller)
    assert env["NODEWRIGHT_LEADER_ELECTION"] == "true"
    assert env["NODEWRIGHT_LEADER_ELECTION_NAME"] == "nodewright-leader-election"
    assert env["NODEWRIGHT_LEADER_ELECTION_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert (
        env["NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS"],
        env["NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS"],
        env["NODEWRIGHT_LEADER_ELECTION_RETRY_SECONDS"],
    ) == ("10", "8", "2")
    assert worker["spec"]["replicas"] == 2
    assert container(worker)["args"] == ["worker", "--log-format", "json"]
    worker_env = environment(worker)
    assert not [name for name in worker_env if name.startswith("NODEWRIGHT_LEADER_ELECTION")]
    assert worker_env["NODEWRIGHT_SHUTDOWN_GRACE_SECONDS"] == "20"
    assert (
        int(worker_env["NODEWRIGHT_SHUTDOWN_GRACE_SECONDS"])
        < pod_spec(worker)["terminationGracePeriodSeconds"]
    )
    for deployment in rendered.values():
        env = environment(deployment)
        assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["NODEWRIGHT_CLUSTER_NAME"] == "prod-eastus"
        assert env["NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET"] == "kube-system/bootstrap-token-abcdef"
        assert env["NODEWRIGHT_AZURE_RESOURCE_GROUP"] == "MC_prod_prod-eastus_eastus"
        assert "NODEWRIGHT_TEMPORAL_TLS" not in env and "NODEWRIGHT_TEMPORAL_API_KEY" not in env
        assert "NODEWRIGHT_KUBELET_IDENTITY_ID" not in env


def controller_settings(helm: Helm, monkeypatch: pytest.MonkeyPatch, *assignments: str) -> Settings:
    """The settings the controller loads from the environment the chart renders for it."""
    env = environment(deployments(helm.render([REQUIRED_VALUES], *assignments))["controller"])
    for name in list(os.environ):
        if name.startswith("NODEWRIGHT_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    return load_settings()


@pytest.mark.parametrize(
    ("assignments", "spot_to_spot", "repair", "policy"),
    [
        ((), False, False, MinValuesPolicy.STRICT),
        (
            (
                "settings.featureGates.spotToSpotConsolidation=true",
                "settings.featureGates.nodeRepair=true",
                "settings.minValuesPolicy=BestEffort",
            ),
            True,
            True,
            MinValuesPolicy.BEST_EFFORT,
        ),
    ],
)
def test_karpenters_feature_gates_and_min_values_policy_reach_the_controllers_loops(
    helm: Helm,
    monkeypatch: pytest.MonkeyPatch,
    assignments: tuple[str, ...],
    spot_to_spot: bool,
    repair: bool,
    policy: MinValuesPolicy,
) -> None:
    settings = controller_settings(helm, monkeypatch, *assignments)
    loop = disruption_input(settings).settings
    assert (loop.spot_to_spot_consolidation, loop.node_repair, loop.min_values_policy) == (
        spot_to_spot,
        repair,
        policy,
    )
    assert provisioner_input(settings).min_values_policy is policy
    assert settings.gates.reserved_capacity


@pytest.mark.parametrize(
    ("assignments", "percent"),
    [((), DEFAULT_MIN_SAVINGS_PERCENT), (("settings.repack.minSavingsPercent=12.5",), 12.5)],
)
def test_the_repacks_minimum_share_reaches_the_disruption_loops_planner(
    helm: Helm, monkeypatch: pytest.MonkeyPatch, assignments: tuple[str, ...], percent: float
) -> None:
    repack = disruption_input(controller_settings(helm, monkeypatch, *assignments)).settings.repack
    assert repack is not None
    options = repack_options(repack)
    assert options is not None and options.min_savings_percent == percent


def test_the_charts_repack_defaults_are_the_planners(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    repack = disruption_input(controller_settings(helm, monkeypatch)).settings.repack
    assert repack is not None
    options, planners = repack_options(repack), RepackOptions()
    assert options is not None
    assert (
        options.min_savings_micros,
        options.min_savings_percent,
        options.max_pods_moved,
        options.deadline,
    ) == (
        planners.min_savings_micros,
        planners.min_savings_percent,
        planners.max_pods_moved,
        planners.deadline,
    )


def test_a_gate_karpenter_does_not_have_fails_lint(helm: Helm) -> None:
    done = helm.template([REQUIRED_VALUES], "settings.featureGates.drift=true", check=False)
    assert done.returncode != 0
    assert "drift" in done.stderr


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_pods_run_locked_down_with_probes_and_a_writable_tmp(helm: Helm, value_set: str) -> None:
    for deployment in deployments(helm.render(VALUE_SETS[value_set])).values():
        pod = pod_spec(deployment)
        spec = container(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["securityContext"]["allowPrivilegeEscalation"] is False
        assert spec["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert {"name": "tmp", "mountPath": "/tmp"} in spec["volumeMounts"]
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
        assert spec["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert spec["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
        env = environment(deployment)
        assert str(ports["http-metrics"]) == env["NODEWRIGHT_METRICS_PORT"]
        assert str(ports["http"]) == env["NODEWRIGHT_HEALTH_PROBE_PORT"]
        assert pod["priorityClassName"].startswith("system-")
        assert pod["nodeSelector"]["kubernetes.io/os"] == "linux"
        assert "resources" in spec and "terminationGracePeriodSeconds" in pod
        assert "checksum/serviceaccount" in deployment["spec"]["template"]["metadata"]["annotations"]


def test_the_windows_admin_secret_is_passed_and_readable_alone(helm: Helm) -> None:
    rendered = helm.render(
        [REQUIRED_VALUES],
        "settings.azure.windows.adminSecret=kube-system/windows-admin",
        "settings.azure.windows.licenseType=Windows_Server",
    )
    for deployment in deployments(rendered).values():
        env = environment(deployment)
        assert env["NODEWRIGHT_WINDOWS_ADMIN_SECRET"] == "kube-system/windows-admin"
        assert env["NODEWRIGHT_WINDOWS_LICENSE_TYPE"] == "Windows_Server"
    [role] = [
        item for item in by_kind(rendered, "Role") if item["metadata"]["name"].endswith("-windows-admin")
    ]
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["windows-admin"], "verbs": ["get"]}
    ]
    [binding] = [
        b for b in by_kind(rendered, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["metadata"]["namespace"] == "kube-system"
    without = helm.render([REQUIRED_VALUES])
    assert not [item for item in without if item["metadata"]["name"].endswith("-windows-admin")]
    assert all("NODEWRIGHT_WINDOWS_ADMIN_SECRET" not in environment(d) for d in deployments(without).values())


def test_pods_stay_off_the_nodes_nodewright_manages_and_spread_over_hosts_and_zones(helm: Helm) -> None:
    rendered = deployments(helm.render([REQUIRED_VALUES]))
    for component, deployment in rendered.items():
        pod = pod_spec(deployment)
        own = deployment["spec"]["selector"]["matchLabels"]
        assert own["app.kubernetes.io/component"] == component
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
        (spread,) = pod["topologySpreadConstraints"]
        assert spread["topologyKey"] == "topology.kubernetes.io/zone"
        assert spread["labelSelector"] == {"matchLabels": own}
        anti = pod["affinity"]["podAntiAffinity"]
        if component == "controller":
            (required,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
            assert required == {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": own},
            }
            assert spread["whenUnsatisfiable"] == "DoNotSchedule"
        else:
            # Workers may outnumber the nodes they can run on.
            (preferred,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
            assert preferred["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
            assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
        assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]


def test_given_affinity_is_used_as_is_and_spread_constraints_get_the_components_selector(helm: Helm) -> None:
    rendered = deployments(helm.render([FULL_VALUES]))
    full = yaml.safe_load(FULL_VALUES.read_text(encoding="utf-8"))
    for deployment in rendered.values():
        pod = pod_spec(deployment)
        assert pod["affinity"] == full["affinity"]
        (spread,) = pod["topologySpreadConstraints"]
        assert spread == {
            **full["topologySpreadConstraints"][0],
            "labelSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
        }
        assert pod["nodeSelector"] == {"agentpool": "system", "kubernetes.io/os": "linux"}


def test_split_workers_run_workflows_and_activities_in_deployments_of_their_own(helm: Helm) -> None:
    objects = helm.render(
        [REQUIRED_VALUES], "worker.split=true", "worker.replicas=3", "worker.activities.replicas=5"
    )
    rendered = deployments(objects)
    workflows, activities = rendered["worker"], rendered["worker-activities"]
    assert container(workflows)["args"] == ["worker", "--log-format", "json", "--role", "workflows"]
    assert container(activities)["args"] == ["worker", "--log-format", "json", "--role", "activities"]
    assert (workflows["spec"]["replicas"], activities["spec"]["replicas"]) == (3, 5)
    assert environment(activities) == environment(workflows), "both take the worker's settings"
    assert workflows["spec"]["selector"] != activities["spec"]["selector"]
    budgets = {budget["metadata"]["name"] for budget in by_kind(objects, "PodDisruptionBudget")}
    assert budgets == {"nodewright-controller", "nodewright-worker", "nodewright-worker-activities"}


def test_one_disruption_budget_per_deployment(helm: Helm) -> None:
    objects = helm.render([REQUIRED_VALUES])
    budgets = {
        budget["metadata"]["labels"]["app.kubernetes.io/component"]: budget
        for budget in by_kind(objects, "PodDisruptionBudget")
    }
    for component, deployment in deployments(objects).items():
        assert budgets[component]["spec"] == {
            "maxUnavailable": 1,
            "selector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
        }
    assert sorted(budgets) == ["controller", "worker"]


def test_the_metrics_service_selects_both_components(helm: Helm) -> None:
    objects = helm.render([REQUIRED_VALUES])
    (service,) = [
        item for item in by_kind(objects, "Service") if item["metadata"]["name"] == "nodewright-metrics"
    ]
    assert service["spec"]["ports"] == [
        {"name": "http-metrics", "port": 8080, "targetPort": "http-metrics", "protocol": "TCP"}
    ]
    selector = service["spec"]["selector"]
    for deployment in deployments(objects).values():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
    assert by_kind(objects, "ServiceMonitor") == [], "no ServiceMonitor unless serviceMonitor.enabled"


def test_the_service_monitor_scrapes_the_service_and_labels_series_by_component(helm: Helm) -> None:
    objects = helm.render([FULL_VALUES], namespace="monitoring-test")
    (service,) = by_kind(objects, "Service")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["monitoring-test"]}
    assert monitor["spec"]["podTargetLabels"] == ["app.kubernetes.io/component"]
    assert monitor["spec"]["endpoints"] == [
        {"port": "http-metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]


def test_temporal_mtls_secret_is_mounted_read_only_and_the_api_key_comes_from_its_secret(helm: Helm) -> None:
    for deployment in deployments(helm.render([FULL_VALUES])).values():
        env = environment(deployment)
        assert env["NODEWRIGHT_TEMPORAL_ADDRESS"] == "nodewright.a1b2c.tmprl.cloud:7233"
        assert env["NODEWRIGHT_TEMPORAL_TLS"] == "true"
        assert env["NODEWRIGHT_TEMPORAL_TLS_CERT_FILE"] == "/etc/nodewright/temporal-tls/tls.crt"
        assert env["NODEWRIGHT_TEMPORAL_TLS_KEY_FILE"] == "/etc/nodewright/temporal-tls/tls.key"
        assert env["NODEWRIGHT_TEMPORAL_TLS_CA_FILE"] == "/etc/nodewright/temporal-tls/ca.crt"
        assert env["NODEWRIGHT_TEMPORAL_TLS_SERVER_NAME"] == "nodewright.a1b2c.tmprl.cloud"
        assert env["NODEWRIGHT_TEMPORAL_API_KEY"] == {
            "secretKeyRef": {"name": "temporal-api-key", "key": "key"}
        }
        mounts = {mount["name"]: mount for mount in container(deployment)["volumeMounts"]}
        assert mounts["temporal-tls"] == {
            "name": "temporal-tls",
            "mountPath": "/etc/nodewright/temporal-tls",
            "readOnly": True,
        }
        volumes = {volume["name"]: volume for volume in pod_spec(deployment)["volumes"]}
        secret = volumes["temporal-tls"]["secret"]
        assert secret["secretName"] == "temporal-client-tls"
        assert [item["key"] for item in secret["items"]] == ["tls.crt", "tls.key", "ca.crt"]
        assert "extra-config" in mounts and "extra-config" in volumes


@pytest.mark.parametrize(
    ("assignments", "expected"),
    [
        (["temporal.tls.enabled=true"], {"NODEWRIGHT_TEMPORAL_TLS"}),
        (["temporal.apiKey.secretName=key"], {"NODEWRIGHT_TEMPORAL_TLS", "NODEWRIGHT_TEMPORAL_API_KEY"}),
        (
            ["temporal.tls.secretName=tls"],
            {
                "NODEWRIGHT_TEMPORAL_TLS",
                "NODEWRIGHT_TEMPORAL_TLS_CERT_FILE",
                "NODEWRIGHT_TEMPORAL_TLS_KEY_FILE",
            },
        ),
        (
            [
                "temporal.tls.secretName=ca",
                "temporal.tls.clientCertificate=false",
                "temporal.tls.caCertificate=true",
            ],
            {"NODEWRIGHT_TEMPORAL_TLS", "NODEWRIGHT_TEMPORAL_TLS_CA_FILE"},
        ),
    ],
)
def test_each_temporal_connection_sets_only_its_variables(
    helm: Helm, assignments: list[str], expected: set[str]
) -> None:
    external = "temporal.address=temporal-frontend.temporal:7233"
    env = environment(deployments(helm.render([REQUIRED_VALUES], external, *assignments))["worker"])
    assert {
        name for name in env if name.startswith(("NODEWRIGHT_TEMPORAL_TLS", "NODEWRIGHT_TEMPORAL_API"))
    } == expected


def test_workload_identity_annotates_the_service_account_and_labels_the_pods(helm: Helm) -> None:
    objects = helm.render([FULL_VALUES])
    (account,) = by_kind(objects, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": "22222222-2222-2222-2222-222222222222",
        "azure.workload.identity/tenant-id": "11111111-1111-1111-1111-111111111111",
    }
    for deployment in deployments(objects).values():
        template = deployment["spec"]["template"]
        assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
        assert template["spec"]["serviceAccountName"] == account["metadata"]["name"]
        assert container(deployment)["image"] == (
            "example.azurecr.io/nodewright@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
    defaults = helm.render([REQUIRED_VALUES])
    (plain,) = by_kind(defaults, "ServiceAccount")
    assert "annotations" not in plain["metadata"]
    for deployment in deployments(defaults).values():
        assert "azure.workload.identity/use" not in deployment["spec"]["template"]["metadata"]["labels"]
        assert container(deployment)["image"] == "ghcr.io/nodewright/nodewright:0.1.0"


def test_a_new_workload_identity_rolls_the_pods(helm: Helm) -> None:
    def checksums(*assignments: str) -> set[str]:
        rendered = deployments(helm.render([REQUIRED_VALUES], *assignments)).values()
        return {
            item["spec"]["template"]["metadata"]["annotations"]["checksum/serviceaccount"]
            for item in rendered
        }

    first = checksums("azure.workloadIdentity.clientId=22222222-2222-2222-2222-222222222222")
    second = checksums("azure.workloadIdentity.clientId=33333333-3333-3333-3333-333333333333")
    assert len(first) == len(second) == 1 and first != second


SERVICE_PRINCIPAL = (
    "azure.credential=servicePrincipal",
    "azure.servicePrincipal.clientId=44444444-4444-4444-4444-444444444444",
    "azure.servicePrincipal.tenantId=11111111-1111-1111-1111-111111111111",
    "azure.servicePrincipal.secretName=nodewright-sp",
)


@pytest.mark.parametrize(
    ("assignments", "expected"),
    [
        (
            SERVICE_PRINCIPAL,
            {
                "AZURE_CLIENT_ID": "44444444-4444-4444-4444-444444444444",
                "AZURE_TENANT_ID": "11111111-1111-1111-1111-111111111111",
                "AZURE_CLIENT_SECRET": {"secretKeyRef": {"name": "nodewright-sp", "key": "client-secret"}},
            },
        ),
        (
            (*SERVICE_PRINCIPAL, "azure.servicePrincipal.certificate=true"),
            {
                "AZURE_CLIENT_ID": "44444444-4444-4444-4444-444444444444",
                "AZURE_TENANT_ID": "11111111-1111-1111-1111-111111111111",
                "AZURE_CLIENT_CERTIFICATE_PATH": "/etc/nodewright/azure/certificate.pem",
                "AZURE_CLIENT_CERTIFICATE_PASSWORD": {
                    "secretKeyRef": {"name": "nodewright-sp", "key": "certificate-password", "optional": True}
                },
            },
        ),
        (
            (
                "azure.credential=managedIdentity",
                "azure.managedIdentity.clientId=55555555-5555-5555-5555-555555555555",
            ),
            {"AZURE_CLIENT_ID": "55555555-5555-5555-5555-555555555555"},
        ),
        (("azure.credential=managedIdentity",), {}),
    ],
)
def test_each_azure_credential_gives_the_worker_alone_its_variables(
    helm: Helm, assignments: tuple[str, ...], expected: dict[str, Any], tmp_path: Path
) -> None:
    kind = assignments[0].partition("=")[2]
    objects = helm.render(
        [REQUIRED_VALUES],
        *assignments,
        "azure.workloadIdentity.clientId=22222222-2222-2222-2222-222222222222",
    )
    found = deployments(objects)
    env = environment(found["worker"])
    assert env["NODEWRIGHT_AZURE_CREDENTIAL"] == kind
    assert {name: value for name, value in env.items() if name.startswith("AZURE_")} == expected
    # The worker reads it as that credential (the Secret's values and the mounted file stood in for).
    literal = {name: value if isinstance(value, str) else "from-the-secret" for name, value in env.items()}
    if "AZURE_CLIENT_CERTIFICATE_PATH" in literal:
        literal["AZURE_CLIENT_CERTIFICATE_PATH"] = str(tmp_path / "certificate.pem")
        (tmp_path / "certificate.pem").write_text("-----PEM-----")
    credential = load_azure(load_settings(), literal).credential
    assert credential is not None and credential.kind.value == kind
    controller = environment(found["controller"])
    assert not any(name.startswith(("AZURE_", "NODEWRIGHT_AZURE_CREDENTIAL")) for name in controller)
    # Workload identity's client id stays unused: no annotation, no webhook label.
    (account,) = by_kind(objects, "ServiceAccount")
    assert "annotations" not in account["metadata"]
    for deployment in found.values():
        assert "azure.workload.identity/use" not in deployment["spec"]["template"]["metadata"]["labels"]
    certificate = "AZURE_CLIENT_CERTIFICATE_PATH" in expected
    for name, deployment in found.items():
        mounts = {mount["name"]: mount for mount in container(deployment)["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod_spec(deployment)["volumes"]}
        mounted = certificate and name == "worker"
        assert ("azure-credential" in mounts) is mounted and ("azure-credential" in volumes) is mounted
        if mounted:
            assert mounts["azure-credential"] == {
                "name": "azure-credential",
                "mountPath": "/etc/nodewright/azure",
                "readOnly": True,
            }
            assert volumes["azure-credential"]["secret"] == {
                "secretName": "nodewright-sp",
                "defaultMode": 0o440,
                "items": [{"key": "certificate.pem", "path": "certificate.pem"}],
            }


@pytest.mark.parametrize("path", ["clientId", "tenantId", "secretName"])
def test_a_service_principal_without_its_values_fails_naming_them(helm: Helm, path: str) -> None:
    done = helm.template(
        [REQUIRED_VALUES], *SERVICE_PRINCIPAL, f"azure.servicePrincipal.{path}=", check=False
    )
    assert done.returncode != 0
    assert f"azure.servicePrincipal.{path} is required" in done.stderr


def test_the_cloud_reaches_the_processes_by_the_providers_names(helm: Helm) -> None:
    env = environment(deployments(helm.render([REQUIRED_VALUES]))["worker"])
    assert env["NODEWRIGHT_AZURE_CLOUD"] == "AzurePublicCloud"
    env = environment(
        deployments(helm.render([REQUIRED_VALUES], "settings.azure.cloud=AzureUSGovernment"))["worker"]
    )
    assert env["NODEWRIGHT_AZURE_CLOUD"] == "AzureUSGovernment"
    done = helm.lint([REQUIRED_VALUES], "settings.azure.cloud=AzureGermanCloud", check=False)
    assert done.returncode != 0 and "at '/settings/azure/cloud'" in done.stdout + done.stderr


# The embedded Temporal


def temporal_objects(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The embedded Temporal's StatefulSet and Service."""
    (stateful,) = by_kind(objects, "StatefulSet")
    (service,) = [
        item for item in by_kind(objects, "Service") if item["metadata"]["name"].endswith("-temporal")
    ]
    return stateful, service


def test_without_a_temporal_address_the_release_runs_its_own_and_the_pods_use_it(helm: Helm) -> None:
    objects = helm.render([REQUIRED_VALUES], namespace="nodewright-system")
    stateful, service = temporal_objects(objects)
    assert stateful["metadata"]["name"] == service["metadata"]["name"] == "nodewright-temporal"
    spec = stateful["spec"]
    assert spec["replicas"] == 1 and spec["serviceName"] == "nodewright-temporal"
    # Its database outlives pods and releases, on a disk of the cluster's default class.
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}}
    pod = spec["template"]["spec"]
    server = container(stateful)
    assert server["args"] == [
        "dev-server", "--db-filename", "/var/lib/temporal/temporal.db", "--ui-port", "8233", "--probe-port", "8081"
    ]  # fmt: skip
    env = environment(stateful)
    assert env == {
        "NODEWRIGHT_TEMPORAL_ADDRESS": "0.0.0.0:7233",
        "NODEWRIGHT_TEMPORAL_NAMESPACE": "default",
        "USER": "temporal",
    }
    assert {"name": claim["metadata"]["name"], "mountPath": "/var/lib/temporal"} in server["volumeMounts"]
    assert {"name": "tmp", "mountPath": "/tmp"} in server["volumeMounts"]
    # Locked down as the other pods: the image's user, a read-only root, fsGroup making the disk writable.
    assert pod["securityContext"]["runAsUser"] == 65532 and pod["securityContext"]["fsGroup"] == 65532
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    ports = {port["name"]: port["containerPort"] for port in server["ports"]}
    assert ports == {"grpc": 7233, "http-ui": 8233, "http": 8081}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
    # The Service selects the server only, and every process of the release is pointed at it.
    assert service["spec"]["ports"] == [
        {"name": "grpc", "port": 7233, "targetPort": "grpc", "protocol": "TCP"},
        {"name": "http-ui", "port": 8233, "targetPort": "http-ui", "protocol": "TCP"},
    ]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "temporal"
    for deployment in deployments(objects).values():
        address = environment(deployment)["NODEWRIGHT_TEMPORAL_ADDRESS"]
        assert address == "nodewright-temporal.nodewright-system.svc:7233"


def test_the_embedded_temporal_takes_its_options(helm: Helm) -> None:
    objects = helm.render(list(VALUE_SETS["full-embedded"]))
    stateful, service = temporal_objects(objects)
    full = yaml.safe_load(FULL_VALUES.read_text(encoding="utf-8"))["temporal"]["embedded"]
    assert [port["port"] for port in service["spec"]["ports"]] == [full["port"], full["uiPort"]]
    (claim,) = stateful["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == full["persistence"]["storageClassName"]
    assert claim["spec"]["resources"]["requests"]["storage"] == full["persistence"]["size"]
    assert container(stateful)["resources"] == full["resources"]
    assert environment(stateful)["NODEWRIGHT_TEMPORAL_ADDRESS"] == f"0.0.0.0:{full['port']}"
    name = service["metadata"]["name"]
    for deployment in deployments(objects).values():
        assert (
            environment(deployment)["NODEWRIGHT_TEMPORAL_ADDRESS"] == f"{name}.nodewright.svc:{full['port']}"
        )


def test_a_temporal_address_switches_to_that_temporal_and_renders_none(helm: Helm) -> None:
    objects = helm.render([REQUIRED_VALUES], "temporal.address=temporal-frontend.temporal:7233")
    assert by_kind(objects, "StatefulSet") == []
    assert [item["metadata"]["name"] for item in by_kind(objects, "Service")] == ["nodewright-metrics"]
    for deployment in deployments(objects).values():
        assert environment(deployment)["NODEWRIGHT_TEMPORAL_ADDRESS"] == "temporal-frontend.temporal:7233"


# Against the real API server


@pytest.fixture(scope="module")
def servicemonitor_crd(control_plane: ControlPlane) -> Iterator[None]:
    """A minimal ServiceMonitor CRD for the chart's ServiceMonitor, removed afterwards."""
    control_plane.kubectl("apply", "--server-side", "-f", str(SERVICEMONITOR_CRD))
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com"
    )
    yield
    control_plane.kubectl("delete", "-f", str(SERVICEMONITOR_CRD), "--ignore-not-found", "--wait=true")


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = unique("chart")
    yield name
    control_plane.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=120s")


def resource(item: dict[str, Any]) -> str:
    """`kind.version.group/name`, as kubectl takes it, whatever the object's API group."""
    group, _, version = item["apiVersion"].rpartition("/")
    kind = f"{item['kind']}.{version}.{group}" if group else item["kind"]
    return f"{kind}/{item['metadata']['name']}"


def lookup(plane: ControlPlane, item: dict[str, Any], namespace: str) -> dict[str, Any] | None:
    done = plane.kubectl(
        "get",
        resource(item),
        "--namespace",
        item["metadata"].get("namespace", namespace),
        "--ignore-not-found",
        "-o",
        "json",
    )
    found: dict[str, Any] | None = yaml.safe_load(done.stdout) if done.stdout.strip() else None
    return found


def own_names(value_set: str, namespace: str) -> list[str]:
    """`--set` assignments that give the release's cluster-scoped objects names of the test's own (the full
    values fix fullnameOverride, from which those names derive)."""
    return [f"fullnameOverride={namespace}-full"] if value_set.startswith("full") else []


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_api_server_accepts_every_object_the_chart_renders(
    helm: Helm, control_plane: ControlPlane, servicemonitor_crd: None, namespace: str, value_set: str
) -> None:
    control_plane.kubectl("create", "namespace", namespace)
    sets = own_names(value_set, namespace)
    rendered = helm.template(
        VALUE_SETS[value_set], *sets, flags=["--include-crds"], release=namespace, namespace=namespace
    )
    objects = documents(rendered.stdout)
    # A pod is refused unless its ServiceAccount exists, and a dry run makes none: the release's, and the helm
    # test's, are made first (the namespace goes at the end).
    control_plane.apply(by_kind(objects, "ServiceAccount"))
    # Server-side apply, as the control plane installed the CRDs; every object names its own namespace (the
    # bootstrap token's Role lives in kube-system).
    done = control_plane.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        input=rendered.stdout,
    )
    accepted = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(objects), done.stdout
    kinds = {item["kind"] for item in objects}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "ServiceAccount",
        "Service",
        "PodDisruptionBudget",
    } <= kinds
    assert ("ServiceMonitor" in kinds) == value_set.startswith("full")
    assert ("StatefulSet" in kinds) == (value_set != "full"), "the embedded Temporal, unless temporal.address"


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_install_creates_every_object_and_uninstall_removes_them(
    helm: Helm, control_plane: ControlPlane, servicemonitor_crd: None, namespace: str, value_set: str
) -> None:
    release = namespace
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace]
    args = ["install", release, str(CHART), *kubeconfig, "--create-namespace"]
    for path in VALUE_SETS[value_set]:
        args += ["--values", str(path)]
    for assignment in own_names(value_set, namespace):
        args += ["--set", assignment]
    try:
        installed = helm.run(*args)
        assert "nodewright 0.1.0 is installed in namespace" in installed.stdout, "NOTES.txt"
        objects = documents(helm.run("get", "manifest", release, *kubeconfig).stdout)
        assert len(objects) >= 6
        for item in objects:
            found = lookup(control_plane, item, namespace)
            assert found is not None, f"{resource(item)} was rendered but not created"
            assert found["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
        # Every Deployment's pods were admitted (security context, priority class, ServiceAccount), though no node
        # runs them: the image is not published and the nodes here are kwok's.
        for deployment in by_kind(objects, "Deployment"):
            replicas = deployment["spec"]["replicas"]
            control_plane.kubectl(
                "wait",
                resource(deployment),
                "--namespace",
                namespace,
                f"--for=jsonpath={{.status.replicas}}={replicas}",
                "--timeout=60s",
            )
        helm.run("uninstall", release, *kubeconfig, "--wait", "--timeout", "120s")
        left = [resource(item) for item in objects if lookup(control_plane, item, namespace) is not None]
        assert left == [], "helm uninstall left these behind"
    finally:
        helm.run("uninstall", release, *kubeconfig, "--ignore-not-found", check=False)
