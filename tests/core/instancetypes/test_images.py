"""Which VM sizes an AKSNodeClass's images boot on: the rule the launch picks an image by is the rule that leaves
sizes out of planning, so a planned size always boots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from core import labels
from core.api.aksnodeclass import AKSNodeClass
from core.errors import InvalidError
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.images import NodeImages, SizeShape, bootable
from tests.builders import instance_type

EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "nodepool.yaml"
CATALOG = load_shipped_catalog("eastus")
TYPES = azure_instance_types(CATALOG)


def example_nodeclass() -> dict[str, Any]:
    """The shipped AKSNodeClass: Gen2 amd64, Gen1 amd64 and Gen2 arm64 images in its status."""
    [document] = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "AKSNodeClass"]
    manifest: dict[str, Any] = document
    return manifest


def amd64_only(**spec: Any) -> AKSNodeClass:
    manifest = example_nodeclass()
    manifest["spec"].update(spec)
    manifest["status"]["images"] = [
        image for image in manifest["status"]["images"] if image["requirements"][0]["values"] == ["amd64"]
    ]
    return AKSNodeClass.parse(manifest)


def without_images(version: str | None = "1.33.5", **spec: Any) -> AKSNodeClass:
    manifest = example_nodeclass()
    manifest["spec"].update(spec)
    del manifest["status"]["images"]
    if version is None:
        del manifest["status"]["kubernetesVersion"]
    else:
        manifest["status"]["kubernetesVersion"] = version
    return AKSNodeClass.parse(manifest)


def arch_of(name: str) -> str:
    return CATALOG.sku(name).architecture


def test_status_images_of_amd64_only_leave_every_arm64_size_out_with_the_launchs_reason() -> None:
    kept, refused = bootable(TYPES, NodeImages.of(amd64_only()))

    assert refused and {arch_of(name) for name in refused} == {"arm64"}
    assert {arch_of(t.name) for t in kept} == {"amd64"}
    assert refused["Standard_D4ps_v5"] == (
        "AKSNodeClass default: no image in status.images boots on Standard_D4ps_v5 (arm64, Hyper-V generations V2)"
    )


def test_the_shipped_status_boots_every_size() -> None:
    kept, refused = bootable(TYPES, NodeImages.of(AKSNodeClass.parse(example_nodeclass())))
    assert refused == {} and len(kept) == len(TYPES)


def test_a_gen1_only_size_needs_a_gen1_image() -> None:
    gen1 = next(t for t in TYPES if SizeShape.of(t) == SizeShape(t.name, "amd64", ("V1",)))
    manifest = example_nodeclass()
    manifest["status"]["images"] = manifest["status"]["images"][:1]  # Gen2 amd64 only
    _, refused = bootable([gen1], NodeImages.of(AKSNodeClass.parse(manifest)))
    assert "Hyper-V generations V1" in refused[gen1.name]


@pytest.mark.parametrize(
    ("nodeclass", "arm64_boots"),
    [
        pytest.param(without_images(), True, id="ubuntu-plain"),
        pytest.param(
            without_images(security={"trustedLaunch": {"vtpm": True}}),
            False,
            id="trusted-launch-has-no-arm64",
        ),
        pytest.param(without_images(imageFamily="Ubuntu", fipsMode="FIPS"), False, id="ubuntu-fips-is-2004"),
        pytest.param(
            without_images("1.31.2", imageFamily="AzureLinux", fipsMode="FIPS"), False, id="azurelinux2-fips"
        ),
        pytest.param(
            without_images("1.33.5", imageFamily="AzureLinux", fipsMode="FIPS"), True, id="azurelinux3-fips"
        ),
        pytest.param(
            without_images(None, imageFamily="AzureLinux", fipsMode="FIPS"),
            True,
            id="unknown-version-some-release-boots-it",
        ),
    ],
)
def test_without_status_images_the_image_familys_definitions_decide(
    nodeclass: AKSNodeClass, arm64_boots: bool
) -> None:
    arm = next(t for t in TYPES if t.name == "Standard_D4ps_v5")
    amd = next(t for t in TYPES if t.name == "Standard_D4s_v5")
    kept, refused = bootable([arm, amd], NodeImages.of(nodeclass))
    assert amd in kept
    assert (arm in kept) is arm64_boots
    if not arm64_boots:
        assert refused["Standard_D4ps_v5"].startswith("AKSNodeClass default: no ")


@pytest.mark.parametrize(
    "nodeclass",
    [amd64_only(), without_images(security={"trustedLaunch": {"secureBoot": True}})],
    ids=["amd64-status", "trusted-launch-defaults"],
)
def test_a_size_is_planned_exactly_when_its_launch_finds_an_image(nodeclass: AKSNodeClass) -> None:
    images = NodeImages.of(nodeclass)
    _, refused = bootable(TYPES, images)
    for planned in TYPES:
        sku = CATALOG.sku(planned.name)
        if planned.name in refused:
            with pytest.raises(InvalidError, match="boots on") as raised:
                images.image(sku, "1.33.5")
            assert str(raised.value) == refused[planned.name]
        else:
            images.image(sku, "1.33.5")


def test_any_catalogs_types_are_judged_by_their_labels() -> None:
    amd = instance_type("amd", arch="amd64")
    arm = instance_type("arm", arch="arm64")
    either = instance_type("either", labels={labels.ARCH: ["amd64", "arm64"]})
    unlabelled = instance_type("unlabelled", labels={labels.ARCH: None})
    kept, refused = bootable([amd, arm, either, unlabelled], NodeImages.of(amd64_only()))
    # No Hyper-V generation label: matched on architecture alone, as a size of unknown generations is.
    assert [t.name for t in kept] == ["amd", "either", "unlabelled"]
    assert list(refused) == ["arm"]


# --- Windows --------------------------------------------------------------------------------------------


def windows(family: str, version: str = "1.33.5", **spec: Any) -> AKSNodeClass:
    return AKSNodeClass.parse(
        {
            "metadata": {"name": "windows"},
            "spec": {"imageFamily": family, **spec},
            "status": {"kubernetesVersion": version},
        }
    )


@pytest.mark.parametrize(
    ("nodeclass", "gen2", "gen1"),
    [
        (windows("Windows2022"), "windows-2022-containerd-gen2", "windows-2022-containerd"),
        (windows("Windows2022", fipsMode="FIPS"), "windows-2022-containerd-gen2", "windows-2022-containerd"),
        (windows("Windows2025"), "windows-2025-gen2", "windows-2025"),
        (windows("Windows2025", security={"trustedLaunch": {"vtpm": True}}), "windows-2025-gen2-tl", None),
    ],
)
def test_windows_boots_the_aks_windows_gallery_by_generation(
    nodeclass: AKSNodeClass, gen2: str, gen1: str | None
) -> None:
    images = NodeImages.of(nodeclass)
    both = SizeShape("both", "amd64", ("V1", "V2"))
    only_gen1 = SizeShape("gen1", "amd64", ("V1",))

    chosen = images.image(both, "1.33.5")
    assert not isinstance(chosen, str)
    assert (chosen.gallery.name, chosen.gallery.community_name, chosen.name) == ("AKSWindows", None, gen2)
    if gen1 is None:
        assert images.refusal(only_gen1) is not None
    else:
        found = images.image(only_gen1, "1.33.5")
        assert not isinstance(found, str) and found.name == gen1
    assert images.refusal(SizeShape("arm", "arm64", ("V2",))) is not None


def test_windows2025_needs_kubernetes_1_32() -> None:
    refusal = NodeImages.of(windows("Windows2025", "1.31.9")).refusal(SizeShape("x", "amd64", ("V2",)))

    assert (
        refusal
        == "AKSNodeClass windows: image family Windows2025 needs Kubernetes 1.32 or later (the cluster runs 1.31)"
    )
    assert NodeImages.of(windows("Windows2025", "1.32.0")).refusal(SizeShape("x", "amd64", ("V2",))) is None
