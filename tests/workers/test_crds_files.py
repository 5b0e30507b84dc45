"""The committed `deploy/crds/` files are exactly what `nodewright crds` generates from the models now."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from core.api.crds import custom_resource_definitions
from workers.cli import main
from workers.crds import crd_files

CRDS = Path(__file__).parents[2] / "deploy" / "crds"
STALE = "deploy/crds is stale: run `nodewright crds` (from the repository root) and commit the result"


def test_the_committed_crds_are_what_the_models_generate() -> None:
    generated = crd_files()
    assert sorted(path.name for path in CRDS.glob("*.yaml")) == sorted(generated), STALE
    for name, text in generated.items():
        assert (CRDS / name).read_text(encoding="utf-8") == text, f"{name}: {STALE}"


def test_the_files_are_karpenters_names_and_read_back_as_the_definitions() -> None:
    files = crd_files()
    assert sorted(files) == [
        "karpenter.azure.com_aksnodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodepools.yaml",
    ]
    assert [yaml.safe_load(text) for text in files.values()] == custom_resource_definitions()
    assert all("&id" not in text and "*id" not in text for text in files.values()), "no YAML anchors"


def test_nodewright_crds_writes_them_into_the_output_dir(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["crds", "--output-dir", str(tmp_path / "crds")], out, err) == 0
    written = {path.name: path.read_text(encoding="utf-8") for path in (tmp_path / "crds").iterdir()}
    assert written == crd_files()
    assert out.getvalue().splitlines() == [f"wrote {tmp_path / 'crds' / name}" for name in crd_files()]
