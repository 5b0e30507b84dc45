"""Settings come from NODEWRIGHT_* variables; a bad value is reported with the variable's name and the rule."""

from __future__ import annotations

from datetime import timedelta

import pytest

from workers.settings import LogLevel, Settings, SettingsError, load_settings, split_address


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for field in Settings.model_fields:
        monkeypatch.delenv(f"NODEWRIGHT_{field.upper()}", raising=False)


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
