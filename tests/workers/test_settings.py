"""Settings come from NODEWRIGHT_* variables; a bad value is reported with the variable's name and the rule."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig

from core.features import FeatureGates, MinValuesPolicy
from workers import worker
from workers.cli import main
from workers.consolidate import disruption_input
from workers.serve import provisioner_input
from workers.settings import (
    LogFormat,
    LogLevel,
    Settings,
    SettingsError,
    TemporalConnection,
    load_settings,
    pod_namespace,
    split_address,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for field in Settings.model_fields:
        monkeypatch.delenv(f"NODEWRIGHT_{field.upper()}", raising=False)
    for variable in ("FEATURE_GATES", "MIN_VALUES_POLICY"):
        monkeypatch.delenv(variable, raising=False)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.temporal_address == "localhost:7233"
    assert settings.temporal_namespace == "default"
    assert settings.task_queue == "nodewright"
    assert settings.cluster_name == "nodewright-demo"
    assert settings.kubeconfig is None
    assert settings.kube_context is None
    assert (settings.kube_qps, settings.kube_burst) == (200.0, 300)
    assert settings.batch_idle == timedelta(seconds=1)
    assert settings.batch_max == timedelta(seconds=10)
    assert settings.registration_ttl == timedelta(minutes=15)
    assert settings.region == "eastus"
    assert settings.log_level == LogLevel.INFO


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", "temporal-frontend.temporal:7233")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_NAMESPACE", "karpenter")
    monkeypatch.setenv("NODEWRIGHT_TASK_QUEUE", "nw")
    monkeypatch.setenv("NODEWRIGHT_CLUSTER_NAME", "prod-1")
    monkeypatch.setenv("NODEWRIGHT_KUBECONFIG", "/etc/nodewright/kubeconfig")
    monkeypatch.setenv("NODEWRIGHT_KUBE_CONTEXT", "aks-prod")
    monkeypatch.setenv("NODEWRIGHT_KUBE_QPS", "20")
    monkeypatch.setenv("NODEWRIGHT_BATCH_IDLE_SECONDS", "0.5")
    monkeypatch.setenv("NODEWRIGHT_BATCH_MAX_SECONDS", "2")
    monkeypatch.setenv("NODEWRIGHT_REGISTRATION_TTL_SECONDS", "3")
    monkeypatch.setenv("NODEWRIGHT_REGION", "southcentralus")
    monkeypatch.setenv("NODEWRIGHT_LOG_LEVEL", "debug")
    settings = load_settings()
    assert settings.temporal_address == "temporal-frontend.temporal:7233"
    assert settings.temporal_namespace == "karpenter"
    assert settings.task_queue == "nw"
    assert settings.cluster_name == "prod-1"
    assert settings.kubeconfig == "/etc/nodewright/kubeconfig"
    assert settings.kube_context == "aks-prod"
    assert settings.kube_qps == 20.0
    assert settings.batch_idle == timedelta(seconds=0.5)
    assert settings.batch_max == timedelta(seconds=2)
    assert settings.registration_ttl == timedelta(seconds=3)
    assert settings.region == "southcentralus"
    assert settings.log_level == LogLevel.DEBUG


def test_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_TASK_QUEUE", "from-env")
    assert load_settings(task_queue="from-flag").task_queue == "from-flag"


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("NODEWRIGHT_TEMPORAL_ADDRESS", "http://localhost:7233", "without a scheme"),
        ("NODEWRIGHT_TEMPORAL_ADDRESS", "localhost", "host:port with a port from 1 to 65535"),
        ("NODEWRIGHT_TEMPORAL_ADDRESS", "localhost:70000", "host:port with a port from 1 to 65535"),
        ("NODEWRIGHT_KUBE_QPS", "0", "greater than 0"),
        ("NODEWRIGHT_KUBE_BURST", "0", "greater than or equal to 1"),
        ("NODEWRIGHT_BATCH_IDLE_SECONDS", "soon", "valid number"),
        ("NODEWRIGHT_BATCH_IDLE_SECONDS", "0", "greater than 0"),
        ("NODEWRIGHT_REGISTRATION_TTL_SECONDS", "-1", "greater than 0"),
        ("NODEWRIGHT_CLUSTER_NAME", "My_Cluster", "should match pattern"),
        ("NODEWRIGHT_REGION", "East US", "should match pattern"),
        ("NODEWRIGHT_TASK_QUEUE", "", "at least 1 character"),
        ("NODEWRIGHT_LOG_LEVEL", "loud", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
        ("NODEWRIGHT_WORKER_ACTIVITIES", "0", "greater than or equal to 1"),
        ("NODEWRIGHT_BOOTSTRAP_TOKEN_ROTATION_SECONDS", "0.5", "0 (off) or at least 1"),
    ],
)
def test_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, rule: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert f"{variable}={value!r}: " in str(raised.value)
    assert rule in str(raised.value)


def test_every_bad_variable_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_BATCH_IDLE_SECONDS", "x")
    monkeypatch.setenv("NODEWRIGHT_REGION", "")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "NODEWRIGHT_BATCH_IDLE_SECONDS='x'" in str(raised.value)
    assert "NODEWRIGHT_REGION=''" in str(raised.value)


def test_batch_maximum_below_the_idle_time_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_BATCH_IDLE_SECONDS", "5")
    monkeypatch.setenv("NODEWRIGHT_BATCH_MAX_SECONDS", "2")
    with pytest.raises(
        SettingsError,
        match=r"NODEWRIGHT_BATCH_MAX_SECONDS=2\.0 is shorter than NODEWRIGHT_BATCH_IDLE_SECONDS=5\.0",
    ):
        load_settings()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("localhost:7233", ("localhost", 7233)),
        ("10.0.0.5:443", ("10.0.0.5", 443)),
        ("[::1]:7233", ("::1", 7233)),
    ],
)
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


# --- the worker's and the controller's settings as cluster components ----------------------------------------


def test_component_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    settings = load_settings()
    assert (settings.metrics_port, settings.health_probe_port) == (8080, 8081)
    assert settings.log_format is LogFormat.TEXT
    assert settings.leader_election is True
    assert settings.leader_election_name == "nodewright-leader-election"
    assert (
        settings.leader_election_lease_seconds,
        settings.leader_election_renew_seconds,
        settings.leader_election_retry_seconds,
    ) == (10, 8.0, 2.0)
    assert settings.shutdown_grace == timedelta(seconds=20)
    connection = settings.temporal_connection()
    assert connection == TemporalConnection("localhost:7233", "default")


def test_the_lease_namespace_is_the_pods(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    account = tmp_path / "namespace"
    account.write_text("karpenter\n")
    assert pod_namespace({}, account) == "karpenter"
    assert pod_namespace({"POD_NAMESPACE": "kube-system"}, account) == "kube-system"
    assert pod_namespace({}, tmp_path / "missing") == "default"
    monkeypatch.setenv("POD_NAMESPACE", "nodewright")
    assert load_settings().leader_election_namespace == "nodewright"
    monkeypatch.setenv("NODEWRIGHT_LEADER_ELECTION_NAMESPACE", "elsewhere")
    assert load_settings().leader_election_namespace == "elsewhere"


def test_temporal_tls_files_are_read_at_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("client.pem", "client.key", "ca.pem"):
        (tmp_path / name).write_bytes(f"-----{name}-----".encode())
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", "ns.a1b2c.tmprl.cloud:7233")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_CERT_FILE", str(tmp_path / "client.pem"))
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_KEY_FILE", str(tmp_path / "client.key"))
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_SERVER_NAME", "temporal.internal")
    connection = load_settings().temporal_connection()
    assert connection.tls
    assert connection.client_cert == b"-----client.pem-----"
    assert connection.client_key == b"-----client.key-----"
    assert connection.server_root_ca == b"-----ca.pem-----"
    assert connection.server_name == "temporal.internal"
    assert "client.key-----" not in repr(connection)


def test_server_only_tls_trusts_the_system_cas(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not load_settings().temporal_connection().tls
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS", "true")
    connection = load_settings().temporal_connection()
    assert connection.tls and connection.server_root_ca is None and connection.client_cert is None


def test_an_api_key_implies_tls_and_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_API_KEY", "sekrit-api-key")
    settings = load_settings()
    connection = settings.temporal_connection()
    assert connection.tls and connection.api_key == "sekrit-api-key"
    assert "sekrit" not in repr(settings) and "sekrit" not in repr(connection)
    monkeypatch.setenv("NODEWRIGHT_KUBE_QPS", "lots")
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "NODEWRIGHT_KUBE_QPS='lots'" in str(raised.value)
    assert "sekrit" not in str(raised.value)


def test_empty_tls_variables_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("CERT_FILE", "KEY_FILE", "CA_FILE", "SERVER_NAME"):
        monkeypatch.setenv(f"NODEWRIGHT_TEMPORAL_TLS_{variable}", "")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_API_KEY", "")
    assert not load_settings().temporal_connection().tls


def test_a_client_certificate_without_its_key_names_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "client.pem").write_text("cert")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_CERT_FILE", str(tmp_path / "client.pem"))
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "NODEWRIGHT_TEMPORAL_TLS_CERT_FILE and NODEWRIGHT_TEMPORAL_TLS_KEY_FILE go together" in str(
        raised.value
    )


def test_unreadable_tls_files_name_their_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_CERT_FILE", str(tmp_path / "missing.pem"))
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_KEY_FILE", str(tmp_path))  # a directory
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert f"NODEWRIGHT_TEMPORAL_TLS_CERT_FILE='{tmp_path / 'missing.pem'}': cannot read" in message
    assert "No such file or directory" in message
    assert f"NODEWRIGHT_TEMPORAL_TLS_KEY_FILE='{tmp_path}': cannot read" in message
    assert "Is a directory" in message
    assert "NODEWRIGHT_TEMPORAL_TLS_CA_FILE=" in message


def test_leader_election_timings_must_nest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS", "12")
    with pytest.raises(
        SettingsError, match="RETRY_SECONDS=2 < NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS=12 < "
    ):
        load_settings()


def test_the_controller_reports_every_bad_variable_at_once_with_exit_code_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODEWRIGHT_HEALTH_PROBE_PORT", "http")
    monkeypatch.setenv("NODEWRIGHT_LEADER_ELECTION", "maybe")
    monkeypatch.setenv("NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS", "0")
    monkeypatch.setenv("NODEWRIGHT_LOG_FORMAT", "xml")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", "temporal")
    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_API_KEY", "sekrit-api-key")
    out, err = io.StringIO(), io.StringIO()
    assert main(["controller"], out=out, err=err) == 2
    message = err.getvalue()
    assert message.startswith("error: invalid settings:\n")
    for fragment in (
        "NODEWRIGHT_HEALTH_PROBE_PORT='http': ",
        "NODEWRIGHT_LEADER_ELECTION='maybe': ",
        "NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS='0': ",
        "NODEWRIGHT_LOG_FORMAT='xml': Input should be 'text' or 'json'",
        "NODEWRIGHT_TEMPORAL_ADDRESS='temporal': ",
    ):
        assert fragment in message
    assert "Traceback" not in message and "sekrit" not in message
    assert out.getvalue() == ""


def test_an_invalid_log_format_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--log-format", "xml"])
    assert exited.value.code == 2
    assert "argument --log-format: invalid choice: 'xml'" in capsys.readouterr().err


async def test_connect_hands_the_tls_material_and_api_key_to_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    async def connect(target_host: str, **options: Any) -> str:
        calls.append((target_host, options))
        return "client"

    monkeypatch.setattr(Client, "connect", connect)
    await worker.connect("localhost:7233", "ns")
    await worker.connect(
        TemporalConnection(
            "ns.a1b2c.tmprl.cloud:7233",
            "ns.a1b2c",
            tls=True,
            server_root_ca=b"ca",
            server_name="temporal.internal",
            client_cert=b"cert",
            client_key=b"key",
            api_key="sekrit",
        )
    )
    await worker.connect(
        TemporalConnection("eastus.azure.api.temporal.io:7233", "ns.a1b2c", tls=True, api_key="k")
    )
    plain, mtls, api_key = calls
    assert plain[0] == "localhost:7233"
    assert plain[1]["namespace"] == "ns" and plain[1]["tls"] is False and plain[1]["api_key"] is None
    assert mtls[0] == "ns.a1b2c.tmprl.cloud:7233" and mtls[1]["api_key"] == "sekrit"
    assert mtls[1]["tls"] == TLSConfig(
        server_root_ca_cert=b"ca", domain="temporal.internal", client_cert=b"cert", client_private_key=b"key"
    )
    assert api_key[1]["tls"] == TLSConfig() and api_key[1]["api_key"] == "k"
    assert all(options["data_converter"] is pydantic_data_converter for _, options in calls)


def test_karpenters_feature_gates_and_min_values_policy_default_as_in_its_v1_14() -> None:
    settings = load_settings()
    assert settings.gates == FeatureGates()
    assert settings.gates.render() == (
        "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,"
        "StaticCapacity=false,CapacityBuffer=false"
    )
    assert settings.min_values_policy is MinValuesPolicy.STRICT
    loop = disruption_input(settings).settings
    assert (loop.spot_to_spot_consolidation, loop.node_repair) == (False, False)


@pytest.mark.parametrize("prefix", ["", "NODEWRIGHT_"])
def test_karpenters_variables_reach_the_provisioner_and_the_disruption_loop(
    monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    monkeypatch.setenv(f"{prefix}FEATURE_GATES", "SpotToSpotConsolidation=true, NodeRepair=true")
    monkeypatch.setenv(f"{prefix}MIN_VALUES_POLICY", "BestEffort")
    settings = load_settings()
    assert settings.gates == FeatureGates(spot_to_spot_consolidation=True, node_repair=True)
    loop = disruption_input(settings).settings
    assert (loop.spot_to_spot_consolidation, loop.node_repair) == (True, True)
    assert loop.min_values_policy is MinValuesPolicy.BEST_EFFORT
    assert provisioner_input(settings).min_values_policy is MinValuesPolicy.BEST_EFFORT


def test_nodewrights_own_variable_wins_over_karpenters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEATURE_GATES", "SpotToSpotConsolidation=true")
    monkeypatch.setenv("NODEWRIGHT_FEATURE_GATES", "SpotToSpotConsolidation=false")
    assert not load_settings().gates.spot_to_spot_consolidation


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("FEATURE_GATES", "SpotToSpot=true", "'SpotToSpot' is not one of Karpenter's feature gates"),
        ("FEATURE_GATES", "NodeRepair=yes", "expected NodeRepair=true or NodeRepair=false"),
        ("MIN_VALUES_POLICY", "Lenient", "'Strict' or 'BestEffort'"),
    ],
)
def test_a_bad_gate_or_policy_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, rule: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert f"{variable}={value!r}: " in str(raised.value)
    assert rule in str(raised.value)
