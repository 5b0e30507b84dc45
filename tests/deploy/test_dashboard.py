"""The Grafana dashboard the chart ships: every panel's query (and the NodePool variable's) parses as PromQL and
names only series nodewright exports, a counter by its `_total`, a histogram by its `_bucket`, `_sum` and `_count`;
it covers what a user watches; and the chart renders it as a ConfigMap with Grafana's sidecar label, only when
asked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest
from prometheus_client import CollectorRegistry

from activities.metrics import Metrics
from tests.deploy.helm import CHART, REQUIRED_VALUES, Helm

DASHBOARD = CHART / "dashboards" / "nodewright.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$nodepool": ".*"}
"""What Grafana puts in place of its variables before it sends a query."""
SERIES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}
"""The series a metric family of each type exposes, by suffix of its name."""
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*[a-zA-Z_]\w*\)$")


def exported() -> set[str]:
    """Every series name nodewright's metrics expose (`activities.metrics.Metrics`, which the worker and the
    controller serve)."""
    registry = CollectorRegistry()
    Metrics(registry)
    return {family.name + suffix for family in registry.collect() for suffix in SERIES[family.type]}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in node.get("panels", ()):
        yield panel
        yield from panels(panel)


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target, and the selector of every `label_values` variable."""
    for panel in panels(board):
        for target in panel.get("targets", ()):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            text = variable["query"]["query"]
            found = _LABEL_VALUES.match(text)
            assert found, f"variable {variable['name']}: {text!r} is not label_values(<selector>, <label>)"
            yield f"variable {variable['name']}", found["selector"]


def metric_names(query: str) -> list[str]:
    """The metric names a query selects, after Grafana's variables; ValueError when it is not PromQL or selects
    by something other than a name."""
    for variable, value in GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if not node.name:
                raise ValueError(f"a selector without a metric name: {node}")
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(query), pre_visit=visit)
    return names


def test_every_query_names_only_series_nodewright_exports() -> None:
    known = exported()
    used = {where: metric_names(query) for where, query in queries(dashboard())}
    assert len(used) >= 25 and all(used.values())
    unknown = {where: sorted(set(names) - known) for where, names in used.items() if set(names) - known}
    assert unknown == {}


def test_the_check_catches_a_misspelt_metric_a_bare_histogram_and_broken_promql() -> None:
    known = exported()
    assert "karpenter_nodes_allocatable" in known and "karpenter_nodeclaims_created_total" in known
    assert metric_names("sum(karpenter_nodes_alocatable)")[0] not in known
    assert metric_names("rate(karpenter_cloudprovider_duration_seconds[$__rate_interval])")[0] not in known
    assert "karpenter_cloudprovider_duration_seconds_bucket" in known
    with pytest.raises(ValueError):
        metric_names("sum by (nodepool) (rate(karpenter_nodeclaims_created_total[5m])")
    with pytest.raises(ValueError, match="without a metric name"):
        metric_names('{__name__=~"karpenter_.*"}')


def test_the_dashboard_shows_nodes_pods_decisions_cost_latencies_and_the_bootstrap_token() -> None:
    board = dashboard()
    used = {name for _, query in queries(board) for name in metric_names(query)}
    assert used >= {
        "karpenter_nodes_allocatable",
        "karpenter_nodeclaims_created_total",
        "karpenter_nodeclaims_terminated_total",
        "karpenter_pods_state",
        "karpenter_nodeclaims_disrupted_total",
        "karpenter_voluntary_disruption_decisions_total",
        "karpenter_nodepools_cost_total",
        "karpenter_pods_startup_duration_seconds",
        "karpenter_cloudprovider_duration_seconds_bucket",
        "nodewright_bootstrap_token_expiration_timestamp_seconds",
        "nodewright_bootstrap_token_rotations_total",
    }
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def configmaps(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in objects if item["kind"] == "ConfigMap"]


def test_the_chart_ships_it_as_a_configmap_for_grafanas_sidecar_when_asked(helm: Helm) -> None:
    assert configmaps(helm.render([REQUIRED_VALUES])) == [], "off by default"

    [shipped] = configmaps(helm.render([REQUIRED_VALUES], "grafanaDashboard.enabled=true"))
    assert shipped["metadata"]["name"] == "nodewright-dashboard"
    assert shipped["metadata"]["namespace"] == "nodewright"
    assert shipped["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "annotations" not in shipped["metadata"]
    assert json.loads(shipped["data"]["nodewright.json"]) == dashboard()

    [moved] = configmaps(
        helm.render(
            [REQUIRED_VALUES],
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.label=dashboards.example.com/grafana",
            "grafanaDashboard.labelValue=yes",
            "grafanaDashboard.namespace=monitoring",
            "grafanaDashboard.folder=Autoscaling",
        )
    )
    assert moved["metadata"]["labels"]["dashboards.example.com/grafana"] == "yes"
    assert "grafana_dashboard" not in moved["metadata"]["labels"]
    assert moved["metadata"]["namespace"] == "monitoring"
    assert moved["metadata"]["annotations"] == {"grafana_folder": "Autoscaling"}
