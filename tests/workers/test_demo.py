"""What `nodewright demo --keep-running` tells a user to paste into another shell, and the demo in another region
(`--region`): its examples' zones."""

from __future__ import annotations

import io
import json
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from workers.cli import main
from workers.demo import explore_exports
from workers.demo.region import pinned_zone, regional_examples, regional_zone
from workers.demo.walkthrough import EXAMPLES, DemoOptions


def test_the_exports_put_kubectl_and_nodewright_on_the_path(tmp_path: Path) -> None:
    kubectl_dir = tmp_path / "bin dir"
    kubectl_dir.mkdir()
    kubectl = kubectl_dir / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    exports = explore_exports(tmp_path / "kubeconfig", kubectl_dir, "127.0.0.1:7233", DemoOptions())
    script = "\n".join([*exports, "command -v kubectl", "command -v nodewright", 'echo "$KUBECONFIG"'])
    done = subprocess.run(
        ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True
    )
    found_kubectl, found_nodewright, kubeconfig = done.stdout.splitlines()
    assert found_kubectl == str(kubectl)
    assert Path(found_nodewright) == Path(sysconfig.get_path("scripts")) / "nodewright"
    assert kubeconfig == str(tmp_path / "kubeconfig")
    assert "NODEWRIGHT_TEMPORAL_ADDRESS=127.0.0.1:7233" in exports[1]


def _scaled_inflate(examples: Path, directory: Path) -> Path:
    """`examples` with inflate at two replicas, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in examples.glob("*.yaml"):
        text = path.read_text()
        if path.name == "inflate.yaml":
            text = text.replace("replicas: 0", "replicas: 2", 1)
        (directory / path.name).write_text(text)
    return directory


@pytest.mark.parametrize("region", ["westeurope", "uksouth"])
def test_the_demo_s_examples_place_inflate_in_the_region_it_plays(tmp_path: Path, region: str) -> None:
    """As shipped, the examples pin inflate to eastus-2, which no node of another region is in; the demo's copy
    pins it to the region's own zone 2, where it gets its arm64 on-demand node."""

    def inflate_nodeclaims(examples: Path) -> list[dict[str, Any]]:
        out, err = io.StringIO(), io.StringIO()
        scaled = _scaled_inflate(examples, tmp_path / examples.name / "scaled")
        assert main(["schedule", "-o", "json", "-f", str(scaled), "--region", region], out, err) == 0, err
        return list(json.loads(out.getvalue())["nodeclaims"])

    assert inflate_nodeclaims(EXAMPLES) == []
    examples = regional_examples(EXAMPLES, region, tmp_path / "regional")
    [claim] = inflate_nodeclaims(examples)
    assert (claim["zone"], claim["instance_type"], claim["capacity_type"]) == (
        f"{region}-2",
        "Standard_D4ps_v5",
        "on-demand",
    )
    assert pinned_zone(examples) == f"{region}-2" and pinned_zone(EXAMPLES) == "eastus-2"
    assert regional_examples(EXAMPLES, "eastus", tmp_path / "unused") == EXAMPLES
    assert regional_zone("eastus-2", "brazilsoutheast") == "0"  # a region without availability zones


def test_nodewright_demo_takes_the_region_to_play(monkeypatch: pytest.MonkeyPatch) -> None:
    played: list[DemoOptions] = []

    async def run_demo(options: DemoOptions, out: object) -> int:
        played.append(options)
        return 0

    monkeypatch.setattr("workers.demo.run_demo", run_demo)
    out, err = io.StringIO(), io.StringIO()
    assert main(["demo", "--region", "West Europe"], out, err) == 0
    assert main(["demo"], out, err) == 0
    assert [options.region for options in played] == ["westeurope", "eastus"]
    assert main(["demo", "--region", "mars"], out, err) == 2
    assert err.getvalue().startswith("error: --region mars: not an Azure public region")
