"""The `nodewright` command line.

`nodewright schedule` answers "what would you create for these pods?" from manifests, without a cluster:
the same simulation the provisioner runs, on the shipped Azure catalog or the user's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from core.api.manifests import Manifests, load_yaml, parse_manifests
from core.api.meta import InvalidObjectError
from core.capacity_buffer import buffer_report, destinations
from core.disruption.options import DisruptionOptions, RepackOptions
from core.disruption.plan import plan_disruption
from core.disruption.repair import aks_repair_policies
from core.features import FeatureGates, MinValuesPolicy
from core.instancetypes.catalog import UnknownRegionError, load_shipped_catalog, snapshot_regions
from core.instancetypes.custom import parse_custom_catalog
from core.instancetypes.regions import normalize_region
from core.scheduling.results import SchedulingResults
from core.scheduling.scheduler import Scheduler, SchedulingOptions
from core.scheduling.snapshot import (
    InstanceTypeProvider,
    azure_provider,
    build_snapshot,
    catalog_provider,
    merge,
)
from core.static_capacity import StaticPreview, gate_off_message, static_preview
from workers.planner_flags import add_min_values_argument, add_repack_argument, add_spot_to_spot_argument
from workers.tables import render_disruption_table, render_static_table, render_table

if TYPE_CHECKING:
    from workers.settings import Settings, TemporalConnection

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
DEV_SERVER_DB = "dev-server/temporal.db"
"""Where `nodewright dev-server` keeps Temporal's state by default, under the cache directory."""
DEV_SERVER_DB_HELP = f"~/.cache/nodewright/{DEV_SERVER_DB}; delete it to start fresh"


class UsageError(Exception):
    """Bad command-line input; the message says what to change."""


def manifest_files(paths: Sequence[str]) -> list[Path]:
    """Files named directly, and the manifest files directly inside named directories (like `kubectl -f`)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"-f {name}: no such file or directory")
    return files


def read_manifests(paths: Sequence[str]) -> Manifests:
    parts = []
    for path in manifest_files(paths):
        try:
            documents = load_yaml(path.read_text(), str(path))
        except ValueError as error:
            parts.append(Manifests(problems=[str(error)]))
            continue
        parts.append(parse_manifests(documents, str(path), check_unread=True))
    return merge(parts)


def parse_unavailable(values: Sequence[str]) -> frozenset[tuple[str, str, str]]:
    offerings = set()
    for value in values:
        parts = value.split(":")
        if len(parts) != 3 or not all(parts):
            raise UsageError(
                f"--unavailable {value!r}: expected <sku>:<zone>:<capacity-type>, e.g. Standard_D4s_v5:eastus-1:spot"
            )
        offerings.add((parts[0], parts[1], parts[2]))
    return frozenset(offerings)


def instance_type_provider(
    region: str, catalog: str | None, unavailable: frozenset[tuple[str, str, str]], err: TextIO
) -> InstanceTypeProvider:
    if catalog is not None:
        path = Path(catalog)
        if not path.is_file():
            raise UsageError(f"--catalog {catalog}: no such file")
        try:
            raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as error:
            raise UsageError(f"--catalog {catalog}: not valid YAML or JSON: {error}") from error
        entries = parse_custom_catalog(raw)
        for index, entry in enumerate(entries):
            for field in entry.replaced():
                print(
                    f"warning: --catalog {catalog}: instanceTypes[{index}] ({entry.name}): {field} is replaced "
                    "by each NodePool's AKSNodeClass (maxPods, osDiskSizeGB), as for the shipped catalogs",
                    file=err,
                )
        return catalog_provider(entries, unavailable)
    try:
        return azure_provider(load_shipped_catalog(region), unavailable)
    except UnknownRegionError as error:
        raise UsageError(f"--region {region}: {error}") from error


def read_inputs(args: argparse.Namespace, err: TextIO) -> tuple[Manifests, InstanceTypeProvider]:
    """The manifests and instance types the arguments name; invalid objects, and the kinds and fields read
    past, are reported on `err`."""
    manifests = read_manifests(args.filename)
    provider = instance_type_provider(args.region, args.catalog, parse_unavailable(args.unavailable), err)
    if args.catalog is None and normalize_region(args.region) not in snapshot_regions():
        print(
            f"warning: {normalize_region(args.region)} is planned with the AKS provider's shipped on-demand prices; "
            "they have no spot prices, so spot is priced as on-demand, as the provider does until it reads live "
            "prices (a worker reads them from the Retail Prices API)",
            file=err,
        )
    manifests.warnings.extend(manifests.leave_other_providers())
    gates = karpenter_settings()[0]
    if manifests.nodeoverlays and not gates.node_overlay:
        manifests.ignore_node_overlays()
    if manifests.capacitybuffers and not gates.capacity_buffer:
        manifests.ignore_capacity_buffers()
    for problem in manifests.problems:
        print(f"error: {problem}", file=err)
    for warning in manifests.warnings:
        print(f"warning: {warning}", file=err)
    return manifests, provider


def karpenter_settings() -> tuple[FeatureGates, MinValuesPolicy]:
    """The feature gates and minValues policy of the environment (`FEATURE_GATES`, `MIN_VALUES_POLICY`, as the
    controller reads them), which the what-if commands apply unless a flag says otherwise."""
    from workers.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as error:
        raise UsageError(str(error)) from None
    return settings.gates, settings.min_values_policy


def repack_options(args: argparse.Namespace) -> RepackOptions:
    """The repack of a what-if plan: the environment's settings (`NODEWRIGHT_REPACK_*`, as the worker reads
    them) unless a flag says otherwise."""
    import time

    from workers.consolidate import repack_settings
    from workers.settings import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as error:
        raise UsageError(str(error)) from None
    options = RepackOptions.from_settings(repack_settings(settings), time.monotonic)
    return options if args.repack is None else replace(options, enabled=args.repack)


def write_json(document: dict[str, object], manifests: Manifests, out: TextIO) -> None:
    """A command's JSON answer, with the invalid objects it left out under `errors` and what it read past
    under `warnings`."""
    document["errors"] = manifests.problems
    document["warnings"] = manifests.warnings
    json.dump(document, out, indent=2)
    out.write("\n")


def schedule(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    manifests, provider = read_inputs(args, err)
    snapshot = build_snapshot(manifests, provider, reschedule_deleting=True)
    policy = MinValuesPolicy(args.min_values_policy or karpenter_settings()[1])
    options = SchedulingOptions(
        respect_preferences=args.preference_policy == "Respect",
        min_values_best_effort=policy is MinValuesPolicy.BEST_EFFORT,
    )
    scheduler = Scheduler(
        snapshot.nodepools, snapshot.instance_types, snapshot.nodes, snapshot.daemonsets, options
    )
    results = scheduler.solve(snapshot.pending)
    for note in snapshot.notes:
        print(f"note: {note}", file=err)
    static = static_pools(manifests, provider, err)
    buffers = buffer_report(snapshot.buffers, scheduled_destinations(results))
    # As the provisioner does, nothing said of pods names a virtual one: `buffers` says where they go.
    results = results.without({pod for entry in snapshot.buffers for pod in entry.pods})
    results.static_price_micros = static.price_micros
    if args.output == "json":
        document = results.to_json()
        document["notes"] = snapshot.notes
        document["instance_types_left_out"] = snapshot.left_out
        document["static"] = static.pools
        if buffers:
            document["buffers"] = buffers
        write_json(document, manifests, out)
    else:
        render_table(results, out, snapshot.left_out)
        render_static_table(static.pools, out)
        render_buffers(buffers, out)
    return 1 if manifests.problems else 0


def static_pools(manifests: Manifests, provider: InstanceTypeProvider, err: TextIO) -> StaticPreview:
    """What the static NodePools would do now, as the controller acts on them: only with the StaticCapacity gate
    on; with it off, the controller's warning for each (in `warnings` and on `err`)."""
    if karpenter_settings()[0].static_capacity:
        return static_preview(manifests, provider, datetime.now(UTC))
    for pool in manifests.nodepools:
        if pool.spec.replicas is not None and pool.metadata.deletion_timestamp is None:
            warning = gate_off_message(pool.name, pool.spec.replicas)
            manifests.warnings.append(warning)
            print(f"warning: {warning}", file=err)
    return StaticPreview([])


def scheduled_destinations(results: SchedulingResults) -> dict[str, str]:
    """Where each pod of a simulation went (`core.capacity_buffer.destinations`); new NodeClaims are numbered as
    the table lists them."""
    return destinations(
        ((placement.node, placement.pods) for placement in results.existing),
        (
            (f"{index} ({claim.nodepool}, {claim.instance_type})", claim.pods)
            for index, claim in enumerate(results.nodeclaims, start=1)
        ),
        ((entry.pod, entry.reasons) for entry in results.unschedulable),
    )


def render_buffers(buffers: list[dict[str, object]], out: TextIO) -> None:
    """One line per CapacityBuffer: its chunks and where they go, or why it has none."""
    if not buffers:
        return
    out.write("\nCapacityBuffers:\n")
    for entry in buffers:
        if not entry["ready"]:
            out.write(f"  {entry['buffer']}: not ready ({entry['reason']}: {entry['message']})\n")
            continue
        pods = entry["pods"]
        assert isinstance(pods, dict)
        places = sorted({str(where) for where in pods.values()})
        out.write(f"  {entry['buffer']}: {entry['replicas']} chunk(s) -> {', '.join(places) or 'none'}\n")


def plan_disruption_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """What disruption would do now to the cluster in these manifests, and why every other node stays."""
    manifests, provider = read_inputs(args, err)
    gates, policy = karpenter_settings()
    spot_to_spot = gates.spot_to_spot_consolidation if args.spot_to_spot is None else args.spot_to_spot
    repair = gates.node_repair if args.repair is None else args.repair
    options = DisruptionOptions(
        spot_to_spot_consolidation=spot_to_spot,
        nodepools=frozenset(args.nodepool) if args.nodepool else None,
        scheduling=SchedulingOptions(
            min_values_best_effort=MinValuesPolicy(args.min_values_policy or policy)
            is MinValuesPolicy.BEST_EFFORT
        ),
        repair=aks_repair_policies(timedelta(seconds=args.repair_not_ready_seconds)) if repair else None,
        repack=repack_options(args),
    )
    now = datetime.fromisoformat(args.now) if args.now else datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    plan = plan_disruption(manifests, provider, options, now)
    if args.output == "json":
        write_json(plan.to_json(), manifests, out)
    else:
        from activities.disruption import pass_record

        render_disruption_table(pass_record(plan, now), out, err)
        render_buffers(list(plan.buffers), out)
    return 1 if manifests.problems else 0


def demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.demo import run_demo
    from workers.demo.region import UnknownDemoRegionError, demo_region
    from workers.demo.walkthrough import DemoOptions

    record = Path(args.record_histories) if args.record_histories else None
    directory = Path(args.dir) if args.dir else None
    try:
        region = demo_region(args.region)
    except UnknownDemoRegionError as error:
        raise UsageError(str(error)) from None
    options = DemoOptions(
        keep_running=args.keep_running, record_histories=record, directory=directory, region=region
    )
    return asyncio.run(run_demo(options, out))


def explain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.explain import explain_command

    return explain_command(args, out, err)


def dev_server(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.controlplane.build import cache_root
    from workers.settings import load_settings
    from workers.temporal_server import run_dev_server

    database = (
        None
        if args.in_memory
        else Path(args.db_filename)
        if args.db_filename
        else cache_root() / DEV_SERVER_DB
    )
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(
        run_dev_server(
            load_settings(), ui_port=args.ui_port, db_filename=database, probe_port=args.probe_port
        )
    )
    return 0


def _serve(main: Coroutine[Any, Any, None], err: TextIO) -> int:
    """Run a long-running command until SIGINT or SIGTERM (then exit 0); a cluster it cannot reach or a probe
    port it cannot serve is one line and exit 2, a lost leader Lease exit 1."""
    from activities.kubeclient.errors import ClusterConfigError
    from workers.health import ProbeServerError
    from workers.leader import LeadershipLostError
    from workers.processes import until_signalled

    try:
        asyncio.run(until_signalled(main))
    except (ClusterConfigError, ProbeServerError) as error:
        print(f"error: {error}", file=err)
        return 2
    except LeadershipLostError as error:
        print(f"error: {error}", file=err)
        return 1
    return 0


def start_metrics_server(port: int, variable: str, err: TextIO) -> bool:
    """Serve `/metrics` on `port` (0: not at all) with the build info set; False, after one line on `err`
    naming the variable, when the port cannot be bound."""
    from activities.metrics import default_metrics
    from workers.metrics import serve_metrics, set_build_info

    if not port:
        return True
    try:
        serve_metrics(port)
    except OSError as error:
        print(f"error: cannot serve metrics on port {port} ({variable}): {error.strerror or error}", file=err)
        return False
    set_build_info(default_metrics())
    return True


def component_settings(args: argparse.Namespace, err: TextIO) -> Settings | None:
    """The settings of a worker or controller, with `--log-format` over `NODEWRIGHT_LOG_FORMAT`; None after
    one message on `err` naming every invalid variable."""
    from workers.settings import SettingsError, load_settings

    overrides = {"log_format": args.log_format} if args.log_format else {}
    try:
        return load_settings(**overrides)
    except SettingsError as error:
        print(f"error: {error}", file=err)
        return None


def start_component(settings: Settings, out: TextIO, err: TextIO) -> TemporalConnection | None:
    """What a worker and a controller do before their loop starts: read the Temporal TLS files, set up
    logging, serve `/metrics`, keep full garbage collections short and malloc's arenas few; None after one line
    on `err` when something cannot be used."""
    from workers.logs import setup_logging
    from workers.processes import freeze_after_full_collections, limit_malloc_arenas
    from workers.settings import SettingsError

    limit_malloc_arenas()  # before the first thread of our own
    try:
        connection = settings.temporal_connection()
    except SettingsError as error:
        print(f"error: {error}", file=err)
        return None
    if not start_metrics_server(settings.metrics_port, "NODEWRIGHT_METRICS_PORT", err):
        return None
    setup_logging(out, level=logging.getLevelName(settings.log_level.value), log_format=settings.log_format)
    freeze_after_full_collections()
    return connection


def worker(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from activities.azure import AzureSettingsError
    from workers.azure import load_azure
    from workers.serve import serve_worker
    from workers.worker import WorkerRole

    settings = component_settings(args, err)
    if settings is None:
        return 2
    try:
        azure = load_azure(settings)
    except AzureSettingsError as error:
        print(f"error: {error}", file=err)
        return 2
    connection = start_component(settings, out, err)
    if connection is None:
        return 2
    return _serve(serve_worker(settings, azure, connection, WorkerRole(args.role)), err)


def controller(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.serve import serve_controller

    settings = component_settings(args, err)
    if settings is None:
        return 2
    connection = start_component(settings, out, err)
    if connection is None:
        return 2
    return _serve(serve_controller(settings, connection), err)


def cluster(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from workers.localcluster import ClusterOptions, run_cluster
    from workers.settings import load_settings

    settings = load_settings()
    region = normalize_region(args.region or settings.region)
    options = ClusterOptions(
        directory=Path(args.dir) if args.dir else None,
        cluster_name=settings.cluster_name,
        region=region,
        arm_port=args.arm_port,
        seed=args.seed,
    )
    return _serve(run_cluster(options, out), err)


def add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    """What every command that plans on manifests takes: the manifests, the catalog, unavailable offerings
    and the output format."""
    parser.add_argument(
        "-f", "--filename", action="append", required=True, help="manifest file or directory (repeatable)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--region",
        default="eastus",
        help="the Azure region whose shipped catalog to plan with: any of the 57 public regions of the AKS "
        "provider's price table (default eastus; see docs/cli.md)",
    )
    source.add_argument("--catalog", help="your own instance-type catalog (YAML or JSON; see docs/cli.md)")
    parser.add_argument(
        "--unavailable",
        action="append",
        default=[],
        metavar="SKU:ZONE:CAPACITY-TYPE",
        help="treat this offering as unavailable (repeatable)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodewright", description="Karpenter for AKS, on durable workflows."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "schedule",
        help="what would be created for the pending pods in these manifests",
        description="Simulate Karpenter's provisioning for the manifests: pods on existing nodes, new NodeClaims, "
        "unschedulable pods with reasons. Changes nothing.",
    )
    add_snapshot_arguments(plan)
    plan.add_argument("--preference-policy", choices=("Respect", "Ignore"), default="Respect")
    add_min_values_argument(plan)
    plan.set_defaults(handler=schedule)

    disrupt = commands.add_parser(
        "plan-disruption",
        help="what disruption would do now to the cluster in these manifests, with reasons",
        description="Karpenter's disruption methods (expiration, emptiness, drift, multi- and single-node "
        "consolidation), then the repack, on a cluster snapshot: the commands in order with savings, why every "
        "other node stays, and the cluster's cost now, after the plan and its lower bound. Changes nothing.",
    )
    add_snapshot_arguments(disrupt)
    disrupt.add_argument("--nodepool", action="append", default=[], help="only these NodePools (repeatable)")
    add_spot_to_spot_argument(disrupt)
    add_repack_argument(disrupt)
    disrupt.add_argument("--now", help="plan as of this time (ISO 8601; default now, UTC)")
    disrupt.add_argument(
        "--repair",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="plan node repairs (default: the NodeRepair gate of FEATURE_GATES, off as in Karpenter)",
    )
    add_min_values_argument(disrupt)
    disrupt.add_argument(
        "--repair-not-ready-seconds",
        type=float,
        default=600.0,
        help="how long a Node may be NotReady before node repair replaces it (default 600, the AKS provider's)",
    )
    disrupt.set_defaults(handler=plan_disruption_command)

    from workers.consolidate import add_consolidate_parser
    from workers.crds import add_crds_parser

    add_consolidate_parser(commands)
    add_crds_parser(commands)

    walk = commands.add_parser(
        "demo",
        help="run the whole system on a local control plane and walk through what Karpenter users do",
        description="Starts the Temporal dev server (with UI), a real Kubernetes control plane and the emulated "
        "Azure around it, a worker and the controller, applies deploy/examples/ and walks through scale-ups, "
        "consolidation, emptiness, drift under a PDB and a node deletion.",
    )
    walk.add_argument("--keep-running", action="store_true", help="leave everything up to explore afterwards")
    walk.add_argument("--record-histories", metavar="DIR", help="write every workflow history to DIR as JSON")
    walk.add_argument(
        "--dir",
        help="where state, logs and the kubeconfig go (default: the cache directory's demo/, wiped each run)",
    )
    walk.add_argument(
        "--region",
        default="eastus",
        help="the Azure region the emulated AKS plays: its VM sizes, zones and prices; the examples' eastus zones "
        "become the region's (default eastus)",
    )
    walk.set_defaults(handler=demo)

    story = commands.add_parser(
        "explain",
        help="the story of one node: why it was created, kept or chosen by disruption, and removed",
        description="Reads the NodeClaim's workflow history and every disruption pass of its cluster from Temporal "
        "(NODEWRIGHT_TEMPORAL_ADDRESS): the pods it was created for and why that launch, each offering tried, "
        "registration and initialization, each disruption pass that kept or chose it and why, what removed it.",
    )
    story.add_argument("kind", choices=("node", "nodeclaim"))
    story.add_argument("name")
    story.add_argument("-o", "--output", choices=("text", "json"), default="text")
    story.set_defaults(handler=explain)

    server = commands.add_parser(
        "dev-server", help="run a Temporal dev server with the UI and our search attributes"
    )
    server.add_argument("--ui-port", type=int, default=None)
    server.add_argument(
        "--probe-port",
        type=int,
        default=0,
        help="serve /healthz and /readyz (ready while the namespace answers) on this port (default: none)",
    )
    persistence = server.add_mutually_exclusive_group()
    persistence.add_argument(
        "--db-filename",
        default=None,
        help=f"keep Temporal's state in this SQLite file (default: {DEV_SERVER_DB_HELP})",
    )
    persistence.add_argument(
        "--in-memory",
        action="store_true",
        help="keep Temporal's state in memory (lost when the server stops)",
    )
    server.set_defaults(handler=dev_server)

    for name, handler, summary in (
        ("worker", worker, "host workflows and activities (settings from NODEWRIGHT_* variables)"),
        ("controller", controller, "watch the cluster and signal workflows, while holding the leader Lease"),
    ):
        component = commands.add_parser(name, help=summary)
        component.add_argument(
            "--log-format",
            choices=("json", "text"),
            help="one JSON object per line, or Karpenter's text lines (default: NODEWRIGHT_LOG_FORMAT, else text)",
        )
        component.set_defaults(handler=handler)
        if name == "worker":
            component.add_argument(
                "--role",
                choices=("all", "workflows", "activities"),
                default="all",
                help="poll the task queue for workflow and activity tasks (all), or run only workflows (with the "
                "lifecycle's local activities) or only activities, for processes of each kind (default: all)",
            )

    local = commands.add_parser(
        "cluster",
        help="run a local Kubernetes control plane and the emulated Azure around it, and print how to use them",
        description="Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler (Kubernetes 1.36.3) and "
        "kwok on loopback (built from the Go module proxy on first use and cached), installs the CRDs and the "
        "bootstrap token, serves the ARM emulator whose VMs join the cluster, and prints the KUBECONFIG and "
        "NODEWRIGHT_* exports for `nodewright worker` and `nodewright controller`. Runs until Ctrl-C.",
    )
    local.add_argument("--dir", help="where state, logs and the kubeconfig go (default: the cache directory)")
    local.add_argument("--arm-port", type=int, default=0, help="the ARM emulator's port (default: any free)")
    local.add_argument(
        "--region",
        help="the Azure region the emulator plays: its VM sizes, zones and prices (default NODEWRIGHT_REGION, "
        "else eastus)",
    )
    local.add_argument("--seed", type=int, default=7)
    local.set_defaults(handler=cluster)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args, out, err)
    except (UsageError, InvalidObjectError) as error:
        print(f"error: {error}", file=err)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        # Settings, dev-server and timeout errors explain themselves; a traceback would not help a user.
        if type(error).__name__ in {
            "SettingsError",
            "DevServerError",
            "SearchAttributeError",
            "TimeoutError",
            "TemporalUnreachableError",
            "ClusterConfigError",
            "BuildError",
            "ControlPlaneError",
        }:
            print(f"error: {error}", file=err)
            return 1
        raise
    return code


if __name__ == "__main__":
    sys.exit(main())
