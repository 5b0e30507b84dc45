"""What the lifecycle benchmark prints: the comparison of the sides, nodewright's tables and a run's profile."""

from __future__ import annotations

from typing import Any

from benchmarks.histories import SAMPLED_HISTORIES
from benchmarks.lifecycle_measure import PROCESSES
from benchmarks.nodewright import WORKER, is_worker

SHOWN_EVICTIONS = 5
SHOWN_REQUESTS = 12
SHOWN_AUDITED = 40


def _ratio(numerator: Any, denominator: Any) -> str:
    return f"{numerator / denominator:.2f}" if numerator is not None and denominator else "-"


COMPARED = (
    ("all created s", "first_pending_to_last_created"),
    ("all running s", "first_pending_to_last_running"),
    ("created p50", "pending_to_created_p50"),
    ("p99", "pending_to_created_p99"),
    ("running p50", "pending_to_running_p50"),
    ("p99", "pending_to_running_p99"),
    ("CPU s/claim", "autoscaler_cpu_seconds_per_nodeclaim"),
)
"""The comparison's columns: seconds from the first pod pending to the last NodeClaim (the floor: Node) seen
created and to the last pod Running; per pod, pending -> its NodeClaim (Node) created and -> Running; CPU
seconds of the autoscaler's own processes per NodeClaim."""


def print_comparison(rows: list[dict[str, Any]]) -> None:
    """One row per side and run, then nodewright's figures over Karpenter's and over the floor's."""
    widths = [max(11, len(title) + 1) for title, _ in COMPARED]
    print(
        f"{'side':<22}{'pods':>5}{'claims':>7}"
        + "".join(f"{title:>{width}}" for (title, _), width in zip(COMPARED, widths, strict=True))
        + f"{'autoscaler CPU s':>17}{'simulation CPU s':>17}{'control plane CPU s':>20}"
    )
    for count in sorted({row["pods"] for row in rows}):
        by_side = {row["side"]: row for row in rows if row["pods"] == count}
        for side in ("karpenter", "nodewright", "floor"):
            if (row := by_side.get(side)) is None:
                continue
            name = f"karpenter v{row['version']}" if side == "karpenter" else side
            claims = row["nodes"] if side == "floor" else row["nodeclaims_created"]
            print(
                f"{name + ('' if row['finished'] else ' (unfinished)'):<22}{count:>5}{claims:>7}"
                + "".join(f"{row[key]!s:>{width}}" for (_, key), width in zip(COMPARED, widths, strict=True))
                + f"{row['autoscaler_cpu_seconds']!s:>17}{row['simulation_cpu_seconds']!s:>17}"
                + f"{row.get('control_plane_cpu_seconds', '-')!s:>20}"
            )
        ours = by_side.get("nodewright")
        for other in ("karpenter", "floor"):
            if ours and (theirs := by_side.get(other)):
                print(
                    f"{'nodewright / ' + other:<22}{'':>12}"
                    + "".join(
                        f"{_ratio(ours[key], theirs[key]):>{width}}"
                        for (_, key), width in zip(COMPARED, widths, strict=True)
                    )
                )


def _fields(values: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in values.items())


def timed_out(row: dict[str, Any]) -> int:
    """Workflow tasks of the run that timed out (every workflow type, both timeouts)."""
    return sum(row.get("workflow_task_timeouts", {}).values())


def warned(row: dict[str, Any], what: str) -> int:
    """How often the run's workers logged `what` (one of WORKER_WARNINGS), all workers together."""
    return sum(counts.get(what, 0) for counts in row.get("worker_warnings", {}).values())


def measured(rows: list[dict[str, Any]]) -> list[str]:
    """The processes of the rows in PROCESSES' order, each worker process in the place of `worker`."""
    workers = sorted({name for row in rows for name in row["cpu_seconds_lifecycle"] if is_worker(name)})
    return [name for process in PROCESSES for name in (workers if process == WORKER else [process])]


def print_tables(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'pods':>5} {'workers':>7} {'claims':>6} {'init':>5} {'running':>7} {'claims/s':>8} {'trivial/s':>9} "
        f"{'ratio':>5} {'created p50':>11} {'p99':>5} {'running p50':>11} {'p99':>5} {'total s':>7} "
        f"{'wf tasks timed out':>18} {'slow':>5} {'refused':>7}"
    )
    for row in rows:
        roles = list(row.get("workers", {"worker": "all"}).values())
        workers = "split" if "workflows" in roles else str(len(roles))
        print(
            f"{row['pods']:>5} {workers:>7} {row['nodeclaims_created']:>6} {row['nodeclaims_initialized']:>5} "
            f"{row['pods_running']:>7} {row['nodeclaims_per_second']:>8} "
            f"{row['trivial_workflows_per_second']:>9} {row['ratio']:>5} "
            f"{row['pending_to_created_p50']!s:>11} {row['pending_to_created_p99']!s:>5} "
            f"{row['pending_to_running_p50']!s:>11} {row['pending_to_running_p99']!s:>5} "
            f"{row['first_pending_to_last_running']!s:>7} {timed_out(row):>18} "
            f"{warned(row, 'slow workflow tasks'):>5} {warned(row, 'completions refused'):>7}"
        )
    names = measured(rows)
    print(f"\n{'process':<24}" + "".join(f"{'CPU s N=' + str(row['pods']):>13}" for row in rows), end="")
    print("".join(f"{'peak MB N=' + str(row['pods']):>16}" for row in rows))
    for name in names:
        cpu = "".join(f"{row['cpu_seconds_lifecycle'].get(name, '-')!s:>13}" for row in rows)
        peak = "".join(f"{row['peak_mb'].get(name, '-')!s:>16}" for row in rows)
        print(f"{name:<24}{cpu}{peak}")

    def cpu_row(label: str, value: Any) -> None:
        print(f"{label:<24}" + "".join(f"{value(row)!s:>13}" for row in rows))

    cpu_row(
        "all of the above",
        lambda row: round(sum(row["cpu_seconds_lifecycle"].get(name, 0.0) for name in names), 1),
    )
    cpu_row("others on the machine", lambda row: row["cpu_seconds_lifecycle"]["others"])
    cpu_row("available (wall x cores)", lambda row: round(row["lifecycle_seconds"] * (row["cores"] or 1), 1))


def print_profile(row: dict[str, Any]) -> None:
    created = f", each VM's create {row['vm_create_seconds']:g} s" if row.get("vm_create_seconds") else ""
    if row.get("boot_seconds"):
        created += f", each node's boot {row['boot_seconds']:g} s"
    print(f"\nN = {row['pods']} ({row['shape']} pods{created})")
    if row["failure"]:
        print(f"  NOT FINISHED: {row['failure']}")
        print(
            f"  reached: {row['pods_pending']} pods pending, {row['nodeclaims_created']} nodeclaims created, "
            f"{row['nodeclaims_launched']} launched, {row['nodes']} nodes, "
            f"{row['nodeclaims_initialized']} initialized, {row['pods_running']} pods running"
        )
    print(
        f"  first pod pending -> first NodeClaim workflow started: {row['first_pending_to_first_nodeclaim_start']} s;"
        f" -> last NodeClaim Initialized: {row['first_pending_to_last_initialized']} s;"
        f" -> last pod Running: {row['first_pending_to_last_running']} s"
    )
    print(f"  pods nominated (Nominated events): {row['nominated_pods']}")
    print(
        f"  bench pods deleted: {row['pods_deleted']} (marked DisruptionTarget: {_fields(row['pods_disrupted'])}); "
        f"NodeClaims deleted: {row['nodeclaims_deleted']}; "
        f"nodes seen with NoExecute taints: {_fields(row['noexecute_taints'])}"
    )
    for eviction in row["evictions"][:SHOWN_EVICTIONS]:
        print(f"  evicted: {_fields(eviction)}")
    if len(row["evictions"]) > SHOWN_EVICTIONS:
        print(f"  ... and {len(row['evictions']) - SHOWN_EVICTIONS} more evictions")
    requests = row["apiserver_requests"]
    print(
        f"  API server: {sum(item['count'] for item in requests)} requests; the most frequent: "
        + "; ".join(
            f"{item['request']} {item['count']} ({item['seconds']} s)" for item in requests[:SHOWN_REQUESTS]
        )
    )
    for item in row.get("audited_requests", [])[:SHOWN_AUDITED]:
        print(f"  audited: {item['request']} {item['count']}")
    print(f"  provisioner: {_fields(row['provisioner'])}")
    for batch in row["batches"]:
        print(f"  batch: {_fields(batch)}")
    print(f"  one lifecycle up to Running (mean of {SAMPLED_HISTORIES}): {_fields(row['per_lifecycle'])}")
    print(f"  workflow tasks timed out (every history): {_fields(row['workflow_task_timeouts']) or 'none'}")
    for name, counts in row["worker_warnings"].items():
        print(f"  {name} (--role {row['workers'][name]}) logged: {_fields(counts)}")
    print(f"  one trivial workflow (mean of {SAMPLED_HISTORIES}): {_fields(row['per_trivial'])}")
    print(f"  CPU s, trivial workflows: {_fields(row['cpu_seconds_trivial'])}")
    print(f"  CPU s, lifecycles: {_fields(row['cpu_seconds_lifecycle'])}")
