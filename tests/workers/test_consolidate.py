"""`nodewright consolidate` against a stand-in workflow handle: the plan printed as `plan-disruption` prints it,
the confirmation question, the answer signalled, the results and the exit codes."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from activities.disruption import repack_options
from core.disruption.options import RepackOptions
from core.messages import (
    CommandOutcome,
    CommandResult,
    DisruptedCandidate,
    DisruptionCommand,
    DisruptionInput,
    DisruptionMode,
    DisruptionPassRecord,
    DisruptionStatus,
    KeptNode,
    KeptReason,
)
from core.repack_defaults import DEFAULT_MIN_SAVINGS_MICROS, DEFAULT_MIN_SAVINGS_PERCENT
from workers.cli import build_parser
from workers.cli import repack_options as cli_repack_options
from workers.consolidate import consolidate, disruption_input, lifecycle_settings
from workers.settings import SettingsError, load_settings

COMMAND = DisruptionCommand(
    method="single-node-consolidation",
    reason="Underutilized",
    decision="replace",
    candidates=[DisruptedCandidate(node="big", nodeclaim="big", nodepool="default")],
    savings_micros=512_000,
    message="disrupting via consolidation replace, terminating 1 nodes (1 pods) big/Standard_D16s_v5/on-demand",
)
PLAN = DisruptionPassRecord(
    at=datetime(2026, 1, 1, tzinfo=UTC),
    commands=[COMMAND],
    kept=[KeptNode(node="small", reasons=[KeptReason(code="Budget", message="budget is 0")])],
    savings_micros=512_000,
)


class Handle:
    """The manual workflow as the CLI sees it: a plan once planned, then the results for the answer."""

    def __init__(self, request: DisruptionInput, outcome: CommandOutcome) -> None:
        self.id = "consolidation/c/1"
        self.request = request
        self.outcome = outcome
        self.queries = 0
        self.signals: list[bool] = []

    def _status(self, results: list[CommandResult]) -> DisruptionStatus:
        return DisruptionStatus(cluster="c", mode=DisruptionMode.MANUAL, plan=PLAN, results=results)

    async def query(self, query: Any) -> DisruptionStatus:
        self.queries += 1
        if self.queries == 1:  # not planned yet
            return DisruptionStatus(cluster="c", mode=DisruptionMode.MANUAL, waiting_for="")
        return self._status([])

    async def signal(self, signal: Any, confirmed: bool) -> None:
        self.signals.append(confirmed)

    async def result(self) -> DisruptionStatus:
        if self.request.dry_run:
            return self._status([CommandResult(command=COMMAND, outcome=CommandOutcome.DRY_RUN)])
        if not self.signals[-1]:
            return self._status([CommandResult(command=COMMAND, outcome=CommandOutcome.CANCELLED)])
        return self._status(
            [CommandResult(command=COMMAND, outcome=self.outcome, replacements=["default-x"])]
        )


class Client:
    def __init__(self, outcome: CommandOutcome = CommandOutcome.EXECUTED) -> None:
        self.outcome = outcome
        self.handle: Handle | None = None
        self.summary = ""

    async def start_workflow(
        self, run: Any, request: DisruptionInput, *, id: str, task_queue: str, static_summary: str, **_: Any
    ) -> Handle:
        assert id.startswith("consolidation/c/") and task_queue == "q"
        self.handle, self.summary = Handle(request, self.outcome), static_summary
        return self.handle


def request(dry_run: bool = False) -> DisruptionInput:
    return DisruptionInput(cluster="c", mode=DisruptionMode.MANUAL, dry_run=dry_run, nodepools=["default"])


def never_asked(question: str) -> str:
    raise AssertionError(f"asked {question!r}")


async def test_a_dry_run_prints_the_plan_and_changes_nothing() -> None:
    client, out = Client(), io.StringIO()
    code = await consolidate(client, "q", request(dry_run=True), False, "table", out, never_asked)
    assert code == 0
    assert client.handle is not None and client.handle.signals == []
    assert client.summary == "manual consolidation (dry run) of NodePools default"
    text = out.getvalue()
    assert (
        "Disruption commands (1), in the order they would start:\n  disrupting via consolidation replace"
        in text
    )
    assert "Nodes kept (1):\n  small: budget is 0" in text
    assert "Savings: $0.5120/hour" in text


async def test_a_declined_plan_is_cancelled_and_exits_1() -> None:
    client, out = Client(), io.StringIO()
    questions: list[str] = []

    def answer(question: str) -> str:
        questions.append(question)
        return "n"

    code = await consolidate(client, "q", request(), False, "table", out, answer)
    assert code == 1
    assert questions == ["Execute 1 command(s) saving $0.512/h? [y/N] "]
    assert client.handle is not None and client.handle.signals == [False]
    assert "cancelled" in out.getvalue()


async def test_yes_executes_without_asking_and_prints_the_results() -> None:
    client, out = Client(), io.StringIO()
    code = await consolidate(client, "q", request(), True, "table", out, never_asked)
    assert code == 0
    assert client.handle is not None and client.handle.signals == [True]
    assert "executed (replacements: default-x) - disrupting via consolidation replace" in out.getvalue()


async def test_a_command_that_did_not_execute_exits_1() -> None:
    client, out = Client(CommandOutcome.ROLLED_BACK), io.StringIO()
    assert await consolidate(client, "q", request(), False, "json", out, lambda question: "y") == 1
    assert '"outcome": "rolled-back"' in out.getvalue()


def test_the_command_line() -> None:
    args = build_parser().parse_args(["consolidate", "--nodepool", "a", "--nodepool", "b", "--dry-run"])
    assert (args.nodepool, args.dry_run, args.yes, args.output) == (["a", "b"], True, False, "table")


def test_the_disruption_loop_takes_its_timings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEWRIGHT_DISRUPTION_POLL_SECONDS", "2.5")
    monkeypatch.setenv("NODEWRIGHT_DISRUPTION_VALIDATION_SECONDS", "4")
    loop = disruption_input(load_settings(cluster_name="prod"))
    assert (loop.cluster, loop.mode) == ("prod", DisruptionMode.AUTOMATIC)
    assert (loop.settings.poll_seconds, loop.settings.validation_seconds) == (2.5, 4.0)
    monkeypatch.setenv("NODEWRIGHT_DISRUPTION_POLL_SECONDS", "0")
    with pytest.raises(SettingsError, match="NODEWRIGHT_DISRUPTION_POLL_SECONDS='0'"):
        load_settings()


def test_lifecycles_take_their_liveness_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    default = lifecycle_settings(load_settings())
    assert (default.launch_timeout_seconds, default.registration_ttl_seconds) == (300.0, 900.0), "Karpenter's"
    monkeypatch.setenv("NODEWRIGHT_LAUNCH_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("NODEWRIGHT_REGISTRATION_TTL_SECONDS", "11")
    settings = load_settings(cluster_name="prod")
    lifecycle = lifecycle_settings(settings)
    assert (lifecycle.launch_timeout_seconds, lifecycle.registration_ttl_seconds) == (7.0, 11.0)
    assert disruption_input(settings).lifecycle == lifecycle, "replacements have the same liveness"
    monkeypatch.setenv("NODEWRIGHT_LAUNCH_TIMEOUT_SECONDS", "0")
    with pytest.raises(SettingsError, match="NODEWRIGHT_LAUNCH_TIMEOUT_SECONDS='0'"):
        load_settings()


def test_the_repacks_minimum_share_reaches_the_planner_of_the_loop_and_of_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`NODEWRIGHT_REPACK_MIN_SAVINGS_PERCENT` beside the absolute minimum, into the options the loop's plans and
    `plan-disruption` run the repack with."""

    def planners() -> list[RepackOptions]:
        looped = disruption_input(load_settings()).settings.repack
        assert looped is not None
        options = repack_options(looped)
        assert options is not None
        return [options, cli_repack_options(argparse.Namespace(repack=None))]

    defaults = (DEFAULT_MIN_SAVINGS_MICROS, DEFAULT_MIN_SAVINGS_PERCENT)
    assert [(o.min_savings_micros, o.min_savings_percent) for o in planners()] == [defaults] * 2
    monkeypatch.setenv("NODEWRIGHT_REPACK_MIN_SAVINGS_PER_HOUR", "0.05")
    monkeypatch.setenv("NODEWRIGHT_REPACK_MIN_SAVINGS_PERCENT", "7.5")
    assert [(o.min_savings_micros, o.min_savings_percent) for o in planners()] == [(50_000, 7.5)] * 2
    monkeypatch.setenv("NODEWRIGHT_REPACK_MIN_SAVINGS_PERCENT", "120")
    with pytest.raises(SettingsError, match="NODEWRIGHT_REPACK_MIN_SAVINGS_PERCENT='120'"):
        load_settings()


def test_an_unreachable_temporal_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.cli import main

    monkeypatch.setenv("NODEWRIGHT_TEMPORAL_ADDRESS", "127.0.0.1:1")
    out, err = io.StringIO(), io.StringIO()
    assert main(["consolidate", "--dry-run"], out, err) == 1
    assert err.getvalue().startswith(
        "error: cannot reach Temporal at 127.0.0.1:1 (NODEWRIGHT_TEMPORAL_ADDRESS)"
    )
    assert "Traceback" not in err.getvalue() and out.getvalue() == ""
