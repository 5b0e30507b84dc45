"""The committed CRD files (`deploy/crds/` and the chart's `crds/`) are exactly what `nodewright crds` generates
from the models now."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import yaml

from core.api.crds import custom_resource_definitions
from workers.cli import main
from workers.crds import DEFAULT_DIRECTORIES, crd_files

REPOSITORY = Path(__file__).parents[2]
STALE = "is stale: run `nodewright crds` (from the repository root) and commit the result"


@pytest.mark.parametrize("directory", DEFAULT_DIRECTORIES, ids=str)
def test_the_committed_crds_are_what_the_models_generate(directory: Path) -> None:
    committed = REPOSITORY / directory
    generated = crd_files()
    assert sorted(path.name for path in committed.glob("*.yaml")) == sorted(generated), f"{directory} {STALE}"
    for name, text in generated.items():
        assert (committed / name).read_text(encoding="utf-8") == text, f"{directory / name} {STALE}"


def test_the_files_are_karpenters_names_and_read_back_as_the_definitions() -> None:
    files = crd_files()
    assert sorted(files) == [
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
        "karpenter.azure.com_aksnodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "karpenter.sh_nodepools.yaml",
        "nodewright.io_capacitywindows.yaml",
    ]
    assert [yaml.safe_load(text) for text in files.values()] == custom_resource_definitions()
    assert all("&id" not in text and "*id" not in text for text in files.values()), "no YAML anchors"


def test_nodewright_crds_writes_them_into_each_output_dir(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    first, second = tmp_path / "crds", tmp_path / "chart" / "crds"
    assert main(["crds", "--output-dir", str(first), "--output-dir", str(second)], out, err) == 0
    for directory in (first, second):
        written = {path.name: path.read_text(encoding="utf-8") for path in directory.iterdir()}
        assert written == crd_files()
    assert out.getvalue().splitlines() == [
        f"wrote {directory / name}" for directory in (first, second) for name in crd_files()
    ]


def test_without_output_dir_it_writes_deploy_crds_and_the_charts_crds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["crds"], io.StringIO(), io.StringIO()) == 0
    for directory in DEFAULT_DIRECTORIES:
        assert sorted(os.listdir(tmp_path / directory)) == sorted(crd_files())
