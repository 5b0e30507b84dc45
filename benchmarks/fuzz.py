"""Fuzz benchmark: thousands of seeded objects, valid and invalid, drawn from the CRDs' own schemas and the pod spec
(benchmarks/fuzz_objects.py), through the API server, nodewright's models and what-if commands, and a sample of
them through the running controller and worker. Prints one table; exits with 1 on a crash, a stopped loop or
workflow, or an object nodewright cannot honour that it does not report.

Every object goes

(a) to the real API server (this benchmark's own control plane: `workers.controlplane`), as a server-side dry run
    with strict field validation: accepted, or refused with the API server's reason;
(b) through nodewright's models (`parse_manifests`, as the controller and the CLI read objects), then, in batches
    beside a small running cluster (deploy/snapshots/cluster.yaml), through `nodewright schedule` and `nodewright
    plan-disruption` (in-process, `workers.cli.main`, every feature gate on). An exception out of them is a crash;
    the batch is then run again object by object to name the culprit;
(c) for a sample of those the API server accepted (every one nodewright's models refuse, then others at random, up
    to `--sample`), into the running system: the same control plane with the emulated Azure around it, the
    Temporal dev server, one `nodewright worker` and one `nodewright controller` (every feature gate on), where
    each object is created for real. Then a canary pod must still get a NodeClaim (the watch loops and the
    provisioner keep going), no workflow may have failed or be stuck on a failing workflow task, neither process
    may have exited or logged a traceback, and every sampled object nodewright cannot honour (its models refuse
    it as the API server stores it) must have an event or a status condition naming it and the field (the
    model's first field path). A NodePool or NodeClaim whose nodeClassRef is another provider's is not
    nodewright's to honour: Karpenter leaves it to that provider, and so does nodewright.

The table: objects by kind, valid (by their schema, CEL aside) and accepted by the API server; crashes (0),
stopped loops and workflows (0); accepted objects nodewright cannot honour, reported and not (the unreported
listed by name and field).

    python benchmarks/fuzz.py                          # 10,000 objects (make bench-fuzz)
    python benchmarks/fuzz.py --objects 300 --sample 12  # the small version `make test` runs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import ssl
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fuzz_objects import POD_API, Fuzzed, Kind, crd_kinds, objects, pod_kind
from core.api.manifests import parse_manifests
from core.api.nodepool import is_managed_manifest
from workers.controlplane.run import ControlPlane, start_control_plane

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "deploy" / "snapshots" / "cluster.yaml"
NOW = "2026-11-22T10:00:00Z"
ALL_GATES = "NodeOverlay=true,CapacityBuffer=true,StaticCapacity=true"
"""Every gate whose objects the benchmark makes, on: a gate that is off makes nodewright ignore them."""
DRY_RUN_CONCURRENCY = 16
BATCH = 50
"""Objects per what-if run: each run plans them beside the snapshot's cluster."""
FIELD = re.compile(r"^(?:[^:]+: )?(?:\S+ \S+): ((?:spec|metadata|status|template)[^\s:(]*)")
"""The first field path of a model problem line (`<source>: <Kind> <name>: <field>: <rule>`)."""


@dataclass
class Options:
    objects: int = 10_000
    seed: int = 1
    drawn: float = 0.25
    """The share of each kind drawn from its schema; the rest are variations of those (fuzz_objects)."""
    sample: int = 300
    """Accepted objects created for real in the running system."""
    settle: float = 30.0
    """Seconds the running system gets after the sample is created, before it is checked."""
    canary_timeout: float = 120.0
    keep: bool = False


@dataclass
class Outcome:
    """What became of one object."""

    fuzzed: Fuzzed
    accepted: bool | None = None
    refusal: str = ""
    problems: list[str] = field(default_factory=list)
    """What nodewright's models say is wrong with it (empty: it can be honoured)."""
    crashes: list[str] = field(default_factory=list)
    sampled: bool = False
    reported: str | None = None
    """For a sampled object nodewright refuses: the event or condition that says so, when there is one."""

    @property
    def ours(self) -> bool:
        """Whether nodewright is the one to honour the object: a NodePool or NodeClaim whose nodeClassRef is
        another provider's is left to that provider, as Karpenter leaves it."""
        if self.fuzzed.kind.name not in ("NodePool", "NodeClaim"):
            return True
        return is_managed_manifest(self.stored or self.fuzzed.body)

    @property
    def unhonoured(self) -> bool:
        return bool(self.accepted and self.problems and self.ours)

    @property
    def field(self) -> str:
        """The field the first problem names (or the whole problem when it names none)."""
        for problem in self.problems:
            found = FIELD.match(problem)
            if found:
                return found.group(1)
        return self.problems[0] if self.problems else ""


# --- (a) the API server ------------------------------------------------------------------------------------


def _session(plane: ControlPlane) -> aiohttp.ClientSession:
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    return aiohttp.ClientSession(
        base_url=plane.server,
        headers={"Authorization": f"Bearer {plane.admin_token}"},
        connector=aiohttp.TCPConnector(ssl=context, limit=DRY_RUN_CONCURRENCY),
        timeout=aiohttp.ClientTimeout(total=60),
    )


async def create(
    session: aiohttp.ClientSession, kind: Kind, body: dict[str, Any], dry_run: bool
) -> tuple[str | None, dict[str, Any] | None]:
    """(None, the object as stored) when the API server takes the object (with strict field validation), else
    (its reason, None)."""
    params = {"fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
    data = json.dumps(body, allow_nan=True)
    headers = {"Content-Type": "application/json"}
    async with session.post(kind.path, params=params, data=data, headers=headers) as response:
        text = await response.text()
        if response.status < 300:
            return None, json.loads(text)
        with contextlib.suppress(ValueError):
            return str(json.loads(text).get("message") or text), None
        return text, None


async def dry_runs(plane: ControlPlane, outcomes: Sequence[Outcome]) -> None:
    async with _session(plane) as session:
        semaphore = asyncio.Semaphore(DRY_RUN_CONCURRENCY)

        async def one(outcome: Outcome) -> None:
            async with semaphore:
                refusal, outcome.stored = await create(
                    session, outcome.fuzzed.kind, outcome.fuzzed.body, dry_run=True
                )
            outcome.accepted = refusal is None
            outcome.refusal = refusal or ""

        await asyncio.gather(*(one(outcome) for outcome in outcomes))


async def pod_openapi(plane: ControlPlane) -> dict[str, Any]:
    async with _session(plane) as session, session.get(POD_API) as response:
        response.raise_for_status()
        document: dict[str, Any] = await response.json()
        return document


# --- (b) nodewright's models and what-if commands -----------------------------------------------------------


def models(outcome: Outcome) -> None:
    """What the models say of the object alone, as sent and as stored (a crash when they raise instead)."""
    for body in filter(None, (outcome.fuzzed.body, outcome.stored)):
        try:
            outcome.problems = parse_manifests([body], "fuzz").problems
        except Exception:
            outcome.crashes.append(f"models: {_last_line(traceback.format_exc())}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    frames = [line.strip() for line in lines if line.strip().startswith("File ")]
    return f"{lines[-1]} ({frames[-1] if frames else 'no frame'})"


def what_if(batch: Sequence[Outcome], directory: Path) -> list[str]:
    """Run `schedule` and `plan-disruption` on the batch beside the snapshot; the crashes, as one line each."""
    from workers.cli import main

    path = directory / "batch.yaml"
    path.write_text(yaml.safe_dump_all([outcome.fuzzed.body for outcome in batch], allow_unicode=True))
    crashes = []
    for command in (
        ["schedule", "-o", "json"],
        ["plan-disruption", "-o", "json", "--now", NOW, "--repair", "--spot-to-spot"],
    ):
        try:
            main([*command, "-f", str(SNAPSHOT), "-f", str(path)], io.StringIO(), io.StringIO())
        except Exception:
            crashes.append(f"{command[0]}: {_last_line(traceback.format_exc())}")
    return crashes


def through_nodewright(outcomes: Sequence[Outcome], directory: Path) -> None:
    """(b): every object through the models, then in batches through the what-if commands; a batch that crashes
    is run again object by object."""
    for outcome in outcomes:
        models(outcome)
    for start in range(0, len(outcomes), BATCH):
        batch = outcomes[start : start + BATCH]
        if not what_if(batch, directory):
            continue
        for outcome in batch:
            outcome.crashes.extend(what_if([outcome], directory))


@contextlib.contextmanager
def feature_gates(value: str) -> Iterator[None]:
    before = os.environ.get("FEATURE_GATES")
    os.environ["FEATURE_GATES"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("FEATURE_GATES", None)
        else:
            os.environ["FEATURE_GATES"] = before


# --- (c) the running system --------------------------------------------------------------------------------

TASK_QUEUE = "bench-fuzz"
CANARY = "fz-canary"
CREATE_ORDER = (
    "AKSNodeClass",
    "NodePool",
    "NodeOverlay",
    "CapacityWindow",
    "CapacityBuffer",
    "NodeClaim",
    "Pod",
)
"""Objects are created for real in this order: what others refer to first."""
TRACEBACK = "Traceback (most recent call last)"


def sample(outcomes: Sequence[Outcome], size: int, seed_value: int) -> list[Outcome]:
    """Every accepted object nodewright refuses (up to `size`), then accepted others at random."""
    import random

    accepted = [outcome for outcome in outcomes if outcome.accepted]
    refused = [outcome for outcome in accepted if outcome.unhonoured][:size]
    others = [outcome for outcome in accepted if not outcome.problems]
    random.Random(seed_value).shuffle(others)
    chosen = refused + others[: max(0, size - len(refused))]
    return sorted(chosen, key=lambda outcome: CREATE_ORDER.index(outcome.fuzzed.kind.name))


def canary_pod() -> dict[str, Any]:
    """A pod only the examples' NodePool takes: it gets a node while the watch loops and the provisioner work."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CANARY, "namespace": "default"},
        "spec": {
            "nodeSelector": {"karpenter.sh/nodepool": "default", "kubernetes.io/arch": "amd64"},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m"}},
                }
            ],
        },
    }


def tracebacks(log: Path) -> list[str]:
    """The last line of each traceback in a process's log: an exception that escaped to a loop or the SDK."""
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    found = []
    for number, line in enumerate(lines):
        if TRACEBACK not in line:
            continue
        for later in lines[number + 1 :]:
            if later and not later.startswith((" ", "\t", "Traceback")) and "most recent call" not in later:
                found.append(later.strip()[:300])
                break
    return found


async def workflow_problems(client: Any) -> tuple[list[str], list[str]]:
    """Workflows that ended badly (failed, timed out, terminated), and open ones stuck on a failing workflow
    task."""
    ended = []
    async for execution in client.list_workflows(
        'ExecutionStatus="Failed" OR ExecutionStatus="TimedOut" OR ExecutionStatus="Terminated"'
    ):
        ended.append(f"{execution.id}: {execution.status.name}")
    stuck = []
    async for execution in client.list_workflows('ExecutionStatus="Running"'):
        description = await client.get_workflow_handle(execution.id, run_id=execution.run_id).describe()
        task = description.raw_description.pending_workflow_task
        if task is not None and task.attempt > 1:
            stuck.append(f"{execution.id}: workflow task attempt {task.attempt}")
    return ended, stuck


async def report_of(kube: Any, outcome: Outcome, events: Sequence[dict[str, Any]]) -> str | None:
    """The event or condition that names the object and the field nodewright refuses, if there is one."""
    fuzzed, wanted = outcome.fuzzed, outcome.field
    for event in events:
        regarding = event.get("regarding") or event.get("involvedObject") or {}
        text = str(event.get("note") or event.get("message") or "")
        if (
            regarding.get("kind") == fuzzed.kind.name
            and regarding.get("name") == fuzzed.name
            and wanted in text
        ):
            return f"event {event.get('reason')}: {text[:200]}"
    current = await kube.get_object(
        fuzzed.kind.name, fuzzed.name, "default" if fuzzed.kind.namespaced else None
    )
    for condition in ((current or {}).get("status") or {}).get("conditions") or []:
        if wanted in str(condition.get("message") or ""):
            return f"condition {condition.get('type')}={condition.get('status')}: {condition.get('message')}"[
                :260
            ]
    return None


@dataclass
class SystemCheck:
    created: int = 0
    create_refused: list[str] = field(default_factory=list)
    canary_seconds: float | None = None
    exits: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    workflows_ended: list[str] = field(default_factory=list)
    workflows_stuck: list[str] = field(default_factory=list)


async def through_the_system(
    plane: ControlPlane, chosen: Sequence[Outcome], directory: Path, options: Options
) -> SystemCheck:
    """(c): the sample created for real while the worker and the controller run."""
    from activities.kubeclient.cluster import load_cluster
    from benchmarks.nodewright import CLUSTER, emulated_azure, examples, has_pollers, workflow_exists
    from benchmarks.processes import child_process
    from workers.temporal_server import DevServer, free_port
    from workers.worker import connect
    from workflows.disruption import disruption_id

    logs = directory / "logs"
    logs.mkdir(exist_ok=True)
    check = SystemCheck()
    kube = load_cluster(str(plane.kubeconfig))
    temporal = DevServer(log_path=logs / "temporal.log")
    async with (
        kube,
        temporal,
        emulated_azure(plane, directory, logs, options.seed) as (_azure, azure_environment),
    ):
        client = await connect(temporal.target)
        environment = {
            "NODEWRIGHT_KUBECONFIG": str(plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": temporal.target,
            "NODEWRIGHT_TASK_QUEUE": TASK_QUEUE,
            "NODEWRIGHT_CLUSTER_NAME": CLUSTER,
            "POD_NAMESPACE": "default",
            "FEATURE_GATES": ALL_GATES,
            "PYTHONFAULTHANDLER": "1",
            **azure_environment,
        }
        nodewright = (sys.executable, "-m", "workers.cli")
        processes = {}
        async with contextlib.AsyncExitStack() as stack:
            for role in ("worker", "controller"):
                ports = {
                    "NODEWRIGHT_METRICS_PORT": str(free_port()),
                    "NODEWRIGHT_HEALTH_PROBE_PORT": str(free_port()),
                }
                processes[role] = await stack.enter_async_context(
                    child_process(
                        (*nodewright, role), logs / f"{role}.log", {**environment, **ports, "POD_NAME": role}
                    )
                )
            deadline = time.monotonic() + 120
            while not (
                await has_pollers(client, TASK_QUEUE)
                and await workflow_exists(client, disruption_id(CLUSTER))
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker and the controller did not start (see their logs)")
                await asyncio.sleep(0.5)
            await kube.apply(examples())
            async with _session(plane) as session:
                for outcome in chosen:
                    refusal, _ = await create(
                        session, outcome.fuzzed.kind, outcome.fuzzed.body, dry_run=False
                    )
                    if refusal is None:
                        outcome.sampled = True
                        check.created += 1
                    else:
                        check.create_refused.append(f"{outcome.fuzzed.key}: {refusal[:160]}")
            await asyncio.sleep(options.settle)
            await kube.apply([canary_pod()])
            started = time.monotonic()
            while time.monotonic() - started < options.canary_timeout:
                # Raw: the sample holds pods the models refuse.
                canary = await kube.get_object("Pod", CANARY, "default") or {}
                if (canary.get("spec") or {}).get("nodeName"):
                    check.canary_seconds = round(time.monotonic() - started, 1)
                    break
                await asyncio.sleep(1.0)
            events = await kube.list_objects("Event")
            for outcome in chosen:
                if outcome.sampled and outcome.unhonoured:
                    outcome.reported = await report_of(kube, outcome, events)
            check.workflows_ended, check.workflows_stuck = await workflow_problems(client)
            check.exits = [
                f"{role} exited {p.returncode}" for role, p in processes.items() if p.poll() is not None
            ]
        for role in processes:
            check.tracebacks += [f"{role}: {line}" for line in tracebacks(logs / f"{role}.log")]
    return check


# --- one run -----------------------------------------------------------------------------------------------


async def run(options: Options) -> dict[str, Any]:
    """The whole benchmark; the figures as a row (`problems` says what fails it)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-fuzz-"))
    if options.keep:
        print(f"state and logs: {directory}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        plane = await asyncio.to_thread(start_control_plane, directory / "control-plane")
        try:
            kinds = [*crd_kinds(), pod_kind(await pod_openapi(plane))]
            outcomes = [
                Outcome(fuzzed) for fuzzed in objects(kinds, options.objects, options.seed, options.drawn)
            ]
            generated = time.monotonic()
            await dry_runs(plane, outcomes)
            dry_run = time.monotonic()
            with feature_gates(ALL_GATES):
                await asyncio.to_thread(through_nodewright, outcomes, directory)
            in_process = time.monotonic()
            chosen = sample(outcomes, options.sample, options.seed)
            check = await through_the_system(plane, chosen, directory, options)
            finished = time.monotonic()
        finally:
            await asyncio.to_thread(plane.stop)
    finally:
        if not options.keep:
            shutil.rmtree(directory, ignore_errors=True)
    return figures(outcomes, check, options, [started, generated, dry_run, in_process, finished])


def figures(
    outcomes: Sequence[Outcome], check: SystemCheck, options: Options, moments: list[float]
) -> dict[str, Any]:
    by_kind: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        counts = by_kind.setdefault(outcome.fuzzed.kind.name, Counter())
        counts["objects"] += 1
        counts["valid"] += outcome.fuzzed.valid
        counts["accepted"] += bool(outcome.accepted)
        counts["valid, refused"] += outcome.fuzzed.valid and not outcome.accepted
        counts["invalid, accepted"] += (not outcome.fuzzed.valid) and bool(outcome.accepted)
        counts[outcome.fuzzed.origin.split(":")[0]] += 1
        counts["unhonoured"] += outcome.unhonoured
    unhonoured = [outcome for outcome in outcomes if outcome.unhonoured]
    sampled = [outcome for outcome in unhonoured if outcome.sampled]
    names = ("generate", "API server", "models and what-if", "running system")
    return {
        "objects": len(outcomes),
        "seed": options.seed,
        "by_kind": {kind: dict(counts) for kind, counts in sorted(by_kind.items())},
        "crashes": [f"{o.fuzzed.key} ({o.fuzzed.origin}): {crash}" for o in outcomes for crash in o.crashes],
        "unhonoured": len(unhonoured),
        "unhonoured_sampled": len(sampled),
        "reported": len([o for o in sampled if o.reported]),
        "unreported": [f"{o.fuzzed.key}: {o.field}" for o in sampled if not o.reported],
        "unhonoured_fields": dict(
            Counter(f"{o.fuzzed.kind.name}: {o.field}" for o in unhonoured).most_common(15)
        ),
        "sampled": check.created,
        "create_refused": check.create_refused,
        "canary_seconds": check.canary_seconds,
        "process_exits": check.exits,
        "tracebacks": check.tracebacks,
        "workflows_ended": check.workflows_ended,
        "workflows_stuck": check.workflows_stuck,
        "seconds": {name: round(b - a, 1) for name, a, b in zip(names, moments, moments[1:], strict=False)},
    }


def problems(row: dict[str, Any]) -> list[str]:
    """What fails the run: a crash, a stopped loop or workflow, an unreported object nodewright cannot honour."""
    found = []
    if row["crashes"] or row["tracebacks"]:
        found.append(f"{len(row['crashes']) + len(row['tracebacks'])} crash(es)")
    if row["canary_seconds"] is None:
        found.append("the canary pod got no node: a loop stopped")
    stopped = row["process_exits"] + row["workflows_ended"] + row["workflows_stuck"]
    if stopped:
        found.append(f"stopped: {'; '.join(stopped)}")
    if row["unreported"]:
        found.append(f"{len(row['unreported'])} unhonoured object(s) not reported")
    return found


def print_table(row: dict[str, Any]) -> None:
    columns = ("objects", "valid", "accepted", "drawn", "crossed", "broken", "unhonoured")
    print(f"{'kind':<16}" + "".join(f"{column:>11}" for column in columns))
    totals: Counter[str] = Counter()
    for kind, counts in row["by_kind"].items():
        totals.update(counts)
        print(f"{kind:<16}" + "".join(f"{counts.get(column, 0):>11}" for column in columns))
    print(f"{'total':<16}" + "".join(f"{totals.get(column, 0):>11}" for column in columns))
    lines = [
        (f"objects (seed {row['seed']})", row["objects"]),
        ("crashes (models, what-if, worker, controller)", len(row["crashes"]) + len(row["tracebacks"])),
        ("processes exited", len(row["process_exits"])),
        ("workflows failed, timed out or terminated", len(row["workflows_ended"])),
        ("workflows stuck on a failing task", len(row["workflows_stuck"])),
        ("canary pod -> node after the sample (s)", row["canary_seconds"]),
        ("accepted objects nodewright cannot honour", row["unhonoured"]),
        ("  of them into the running system", row["unhonoured_sampled"]),
        ("  reported by event or condition", row["reported"]),
        ("  not reported", len(row["unreported"])),
        ("objects created in the running system", row["sampled"]),
    ]
    lines += [(f"time: {name} (s)", seconds) for name, seconds in row["seconds"].items()]
    for label, value in lines:
        print(f"{label:<50} {value!s:>8}")
    for name in (
        "crashes",
        "tracebacks",
        "process_exits",
        "workflows_ended",
        "workflows_stuck",
        "unreported",
    ):
        for line in row[name]:
            print(f"{name}: {line}")
    for where, count in row["unhonoured_fields"].items():
        print(f"unhonoured field: {where} ({count})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Options()
    parser.add_argument(
        "--objects", type=int, default=defaults.objects, help="how many (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--drawn", type=float, default=defaults.drawn, help="share drawn from the schemas")
    parser.add_argument("--sample", type=int, default=defaults.sample, help="objects into the running system")
    parser.add_argument("--settle", type=float, default=defaults.settle, help="seconds before the checks")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the table")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's state and every log")
    args = parser.parse_args()
    options = Options(
        objects=args.objects,
        seed=args.seed,
        drawn=args.drawn,
        sample=args.sample,
        settle=args.settle,
        keep=args.keep,
    )
    row = asyncio.run(run(options))
    print_table(row)
    if args.json:
        print(json.dumps(row))
    if found := problems(row):
        print("FAILED: " + "; ".join(found))
        sys.exit(1)


if __name__ == "__main__":
    main()
