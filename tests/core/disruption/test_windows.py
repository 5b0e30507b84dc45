"""Consolidation in a mixed cluster: Windows pods move among Windows capacity only, Linux pods never onto a
Windows node (its taint), however much room the other OS's nodes have."""

from __future__ import annotations

from typing import Any

from core import labels as wk
from core.api.nodepool import NodePool
from core.disruption.commands import Decision, Method
from core.disruption.options import RepackOptions
from tests.core.disruption.fixtures import (
    bound,
    catalog_d,
    cluster,
    disrupted,
    node_pair,
    nodepool,
    only_command,
    plan,
)

WINDOWS_TAINT = {"key": "os", "value": "windows", "effect": "NoSchedule"}
WINDOWS_POD: dict[str, Any] = {
    "node_selector": {wk.OS: "windows"},
    "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}],
}
KEEPER = {wk.DO_NOT_DISRUPT: "true"}


def of(os: str, cpu: int = 8, memory: int = 32) -> Any:
    return next(
        it for it in catalog_d() if it.name == f"{cpu}-cpu-{memory}-mem-amd64-{os}-test-zone-1-on-demand"
    )


def pools() -> list[NodePool]:
    windows = nodepool("windows", requirements=[{"key": wk.OS, "operator": "In", "values": ["windows"]}])
    manifest = windows.model_dump(mode="json", by_alias=True, exclude_none=True)
    manifest["spec"]["template"]["spec"]["taints"] = [WINDOWS_TAINT]
    linux = nodepool("linux", requirements=[{"key": wk.OS, "operator": "In", "values": ["linux"]}])
    return [linux, NodePool.parse(manifest)]


def windows_node(name: str, **options: Any) -> Any:
    return node_pair(
        name, of("windows"), pool="windows", node_labels={wk.OS: "windows"}, taints=[WINDOWS_TAINT], **options
    )


def roomy_linux_node() -> Any:
    return node_pair(
        "linux-big", of("linux", 64, 128), pool="linux", node_labels={wk.OS: "linux"}, node_annotations=KEEPER
    )


def test_a_windows_nodes_pods_move_to_another_windows_node_not_to_the_roomy_linux_one() -> None:
    snapshot = cluster(
        pools(),
        [windows_node("win-a"), windows_node("win-b", node_annotations=KEEPER), roomy_linux_node()],
        [bound("win-a", cpu="1", **WINDOWS_POD), bound("win-b", cpu="1", **WINDOWS_POD)],
    )

    command = only_command(plan(snapshot))

    assert (command.decision, disrupted(plan(snapshot))) == (Decision.DELETE, [["win-a"]])
    assert [move.destination for move in command.pods_moved] == ["win-b"]


def test_a_windows_node_with_no_other_windows_node_is_replaced_by_a_cheaper_windows_node() -> None:
    snapshot = cluster(
        pools(), [windows_node("win-a"), roomy_linux_node()], [bound("win-a", cpu="1", **WINDOWS_POD)]
    )

    command = only_command(plan(snapshot))

    assert command.decision is Decision.REPLACE
    [replacement] = command.replacements
    assert (replacement.nodepool, replacement.labels[wk.OS]) == ("windows", "windows")
    assert all("windows" in option for option in replacement.instance_type_options)


def test_linux_pods_never_move_onto_a_windows_node() -> None:
    snapshot = cluster(
        pools(),
        [
            node_pair("linux-a", of("linux"), pool="linux", node_labels={wk.OS: "linux"}),
            windows_node("win-keeper", node_annotations=KEEPER),
        ],
        [bound("linux-a", cpu="1")],
    )

    command = only_command(plan(snapshot))

    assert command.decision is Decision.REPLACE, "the Windows node's room is not the Linux pod's"
    [replacement] = command.replacements
    assert (replacement.nodepool, replacement.labels[wk.OS]) == ("linux", "linux")


def test_the_repack_keeps_each_os_on_its_own_capacity() -> None:
    snapshot = cluster(
        pools(),
        [
            windows_node("win-a"),
            windows_node("win-b"),
            node_pair("linux-a", of("linux"), pool="linux", node_labels={wk.OS: "linux"}),
            roomy_linux_node(),
        ],
        [
            bound("win-a", cpu="1", **WINDOWS_POD),
            bound("win-b", cpu="2", **WINDOWS_POD),
            bound("linux-a", cpu="1"),
        ],
    )

    # The repack alone, so that Karpenter's methods leave it every candidate.
    result = plan(snapshot, methods=[Method.REPACK], repack=RepackOptions(min_savings_micros=0))

    moves = {(move.source, move.destination) for command in result.commands for move in command.pods_moved}
    assert moves == {("linux-a", "linux-big"), ("win-a", "replacement-1"), ("win-b", "replacement-1")}
    [replacement] = [r for command in result.commands for r in command.replacements]
    assert (replacement.nodepool, replacement.labels[wk.OS]) == ("windows", "windows")
