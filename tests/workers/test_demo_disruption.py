"""The demo's image release: every image of the AKSNodeClass status is bumped, none is dropped."""

from __future__ import annotations

from pathlib import Path

import yaml

from core.api.aksnodeclass import AKSNodeClass
from workers.demo.disruption import newer_image, status_images

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "nodepool.yaml"


def _example_nodeclass() -> AKSNodeClass:
    documents = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    return AKSNodeClass.parse(next(doc for doc in documents if doc["kind"] == "AKSNodeClass"))


def test_newer_image_bumps_the_release() -> None:
    assert newer_image("/g/images/2204gen2containerd/versions/202512.18.0") == (
        "/g/images/2204gen2containerd/versions/202512.19.0"
    )


def test_every_image_is_kept_with_its_requirements_one_version_later() -> None:
    nodeclass = _example_nodeclass()
    images = status_images(nodeclass)
    old = nodeclass.status.images
    assert len(old) == 3
    assert [image["id"] for image in images] == [newer_image(image.id) for image in old]
    assert all(image["id"].endswith("/versions/202512.19.0") for image in images)
    requirements = [{(r["key"], tuple(r["values"])) for r in image["requirements"]} for image in images]
    assert ("kubernetes.io/arch", ("arm64",)) in requirements[2]
    assert ("karpenter.azure.com/sku-hyperv-generation", ("1",)) in requirements[1]
    # What the demo patches into the status parses back as the status it replaces, ids aside.
    patched = AKSNodeClass.parse(
        {**nodeclass.model_dump(by_alias=True, exclude_none=True), "status": {"images": images}}
    )
    assert [image.requirements for image in patched.status.images] == [image.requirements for image in old]
