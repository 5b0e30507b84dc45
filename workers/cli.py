"""The `nodewright` command line.

`nodewright schedule` answers "what would you create for these pods?" from manifests, without a cluster:
the same simulation the provisioner runs, on the shipped Azure catalog or the user's own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from core.api.manifests import Manifests, load_yaml, parse_manifests
from core.api.meta import InvalidObjectError
from core.instancetypes.catalog import UnknownRegionError, load_shipped_catalog, shipped_regions
from core.instancetypes.custom import custom_instance_types
from core.instancetypes.types import dollars
from core.scheduling.results import SchedulingResults
from core.scheduling.scheduler import Scheduler, SchedulingOptions
from core.scheduling.snapshot import (
    InstanceTypeProvider,
    azure_provider,
    build_snapshot,
    fixed_provider,
    merge,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


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
        parts.append(parse_manifests(documents, str(path)))
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
    region: str, catalog: str | None, unavailable: frozenset[tuple[str, str, str]]
) -> InstanceTypeProvider:
    if catalog is not None:
        path = Path(catalog)
        if not path.is_file():
            raise UsageError(f"--catalog {catalog}: no such file")
        try:
            raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as error:
            raise UsageError(f"--catalog {catalog}: not valid YAML or JSON: {error}") from error
        return fixed_provider(custom_instance_types(raw, unavailable))
    try:
        return azure_provider(load_shipped_catalog(region), unavailable)
    except UnknownRegionError as error:
        raise UsageError(f"--region {region}: {error}") from error


def _taint_text(taint: dict[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def render_table(results: SchedulingResults, out: TextIO) -> None:
    """A person's view of the plan: new NodeClaims, pods on existing nodes, unschedulable pods, total."""
    claims = [claim.to_json() for claim in results.nodeclaims]
    if claims:
        rows = [("NODEPOOL", "INSTANCE-TYPE", "ZONE", "CAPACITY", "$/HOUR", "PODS", "OPTIONS")]
        for claim in claims:
            price = claim["price_per_hour"]
            rows.append(
                (
                    str(claim["nodepool"]),
                    str(claim["instance_type"]),
                    str(claim["zone"]),
                    str(claim["capacity_type"]),
                    f"{price:.4f}" if isinstance(price, float) else "-",
                    str(len(claim["pods"])),  # type: ignore[arg-type]
                    str(len(claim["instance_type_options"])),  # type: ignore[arg-type]
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        print(f"New NodeClaims ({len(claims)}):", file=out)
        for row in rows:
            print(
                "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
                file=out,
            )
        for index, claim in enumerate(claims, start=1):
            options: list[str] = claim["instance_type_options"]  # type: ignore[assignment]
            shown = ", ".join(options[:5]) + (f", ... ({len(options) - 5} more)" if len(options) > 5 else "")
            print(
                f"  [{index}] {claim['nodepool']}/{claim['instance_type']}: pods {', '.join(claim['pods'])}",
                file=out,
            )  # type: ignore[arg-type]
            print(f"      options (cheapest first): {shown}", file=out)
            taints: list[dict[str, Any]] = claim["taints"]  # type: ignore[assignment]
            if taints:
                print(f"      taints: {', '.join(_taint_text(t) for t in taints)}", file=out)
    else:
        print("New NodeClaims: none", file=out)
    if results.existing:
        print(f"Existing nodes receiving pods ({len(results.existing)}):", file=out)
        for placement in results.existing:
            print(f"  {placement.node}: {', '.join(placement.pods)}", file=out)
    if results.unschedulable:
        print(f"Unschedulable pods ({len(results.unschedulable)}):", file=out)
        for pod in results.unschedulable:
            print(f"  {pod.pod}:", file=out)
            for reason in pod.reasons:
                print(f"    - {reason}", file=out)
    print(f"Total for new NodeClaims: ${dollars(results.total_price_micros):.4f}/hour", file=out)


def schedule(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    manifests = read_manifests(args.filename)
    provider = instance_type_provider(args.region, args.catalog, parse_unavailable(args.unavailable))
    snapshot = build_snapshot(manifests, provider)
    options = SchedulingOptions(
        respect_preferences=args.preference_policy == "Respect",
        min_values_best_effort=args.min_values_policy == "BestEffort",
    )
    scheduler = Scheduler(
        snapshot.nodepools, snapshot.instance_types, snapshot.nodes, snapshot.daemonsets, options
    )
    results = scheduler.solve(snapshot.pending)
    for problem in manifests.problems:
        print(f"error: {problem}", file=err)
    for note in snapshot.notes:
        print(f"note: {note}", file=err)
    if args.output == "json":
        document = results.to_json()
        document["errors"] = manifests.problems
        document["notes"] = snapshot.notes
        json.dump(document, out, indent=2)
        out.write("\n")
    else:
        render_table(results, out)
    return 1 if manifests.problems else 0


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
    plan.add_argument(
        "-f", "--filename", action="append", required=True, help="manifest file or directory (repeatable)"
    )
    source = plan.add_mutually_exclusive_group()
    source.add_argument(
        "--region", default="eastus", help=f"shipped Azure catalog: {', '.join(shipped_regions())}"
    )
    source.add_argument("--catalog", help="your own instance-type catalog (YAML or JSON; see README)")
    plan.add_argument(
        "--unavailable",
        action="append",
        default=[],
        metavar="SKU:ZONE:CAPACITY-TYPE",
        help="treat this offering as unavailable (repeatable)",
    )
    plan.add_argument("-o", "--output", choices=("table", "json"), default="table")
    plan.add_argument("--preference-policy", choices=("Respect", "Ignore"), default="Respect")
    plan.add_argument("--min-values-policy", choices=("Strict", "BestEffort"), default="Strict")
    plan.set_defaults(handler=schedule)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args, out, err)
    except (UsageError, InvalidObjectError) as error:
        print(f"error: {error}", file=err)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
