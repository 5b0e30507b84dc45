"""`nodewright crds`: write the CustomResourceDefinitions generated from the API models to `deploy/crds/` and to
the Helm chart's `crds/`.

The files are committed so that `kubectl apply -f deploy/crds/` (and the local control plane) installs them, and
so that `helm install` installs the chart's copies; a test fails when either directory differs from what the
models generate, so they never drift from the models.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from core.api.crds import Schema, custom_resource_definitions

DEFAULT_DIRECTORIES = (Path("deploy") / "crds", Path("deploy") / "charts" / "nodewright" / "crds")
"""Where `nodewright crds` writes without `--output-dir`: the plain manifests and the chart's copies."""
HEADER = (
    "# Generated from the models in core/api by `nodewright crds`: change the models, then run it again.\n"
)


def crd_filename(definition: Schema) -> str:
    """`<group>_<plural>.yaml`, as Karpenter names its CRD files."""
    spec = definition["spec"]
    return f"{spec['group']}_{spec['names']['plural']}.yaml"


def render_crd(definition: Schema) -> str:
    """One CRD as YAML, keys in the generator's order, long CEL rules on one line each."""
    return HEADER + yaml.safe_dump(
        definition, sort_keys=False, explicit_start=True, allow_unicode=True, width=sys.maxsize
    )


def crd_files() -> dict[str, str]:
    """Every CRD file's name and text, as `write_crds` writes them."""
    return {crd_filename(definition): render_crd(definition) for definition in custom_resource_definitions()}


def write_crds(directory: Path) -> list[Path]:
    """Write the CRD files into `directory` (made if missing) and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in crd_files().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def crds_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    directories = args.output_dir or DEFAULT_DIRECTORIES
    for directory in map(Path, directories):
        for path in write_crds(directory):
            print(f"wrote {path}", file=out)
    return 0


def add_crds_parser(commands: Any) -> None:
    """Register `nodewright crds` on the CLI's subcommands."""
    parser = commands.add_parser(
        "crds",
        help="write the NodePool, NodeClaim and AKSNodeClass CRDs generated from the API models",
        description="Generates the CustomResourceDefinitions (structural schemas with Karpenter's CEL rules and "
        "printer columns) from the pydantic models in core/api and writes one YAML file per CRD.",
    )
    parser.add_argument(
        "--output-dir",
        action="append",
        help="where to write them (repeatable; default: deploy/crds and deploy/charts/nodewright/crds)",
    )
    parser.set_defaults(handler=crds_command)
