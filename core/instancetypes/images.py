"""The node image a VM of an AKSNodeClass boots, and which VM sizes can boot one at all.

A launch boots the first image of the AKSNodeClass's `status.images` (kept by the AKS provider's image
controller) whose requirements the size meets: architecture and Hyper-V generation. While the status has no
images, it boots the image family's definition for the Kubernetes version, Trusted Launch and FIPS (research
notes, azure-provider §3.4). The launch (`activities.azure.provider`) and the instance types planned for a
NodePool (`core.scheduling.snapshot`) both read these rules, so a size that is planned is a size that boots:
one that no image boots on is left out before scheduling, with the sentence its launch would fail with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from core import labels
from core.api.aksnodeclass import AKSNodeClass, ImageFamily, NodeImage
from core.api.meta import NodeSelectorOperator
from core.errors import InvalidError
from core.instancetypes.azure import ARM64
from core.instancetypes.types import InstanceType

UNSUPPORTED_IMAGE = "UnsupportedImage"
AMD64 = "amd64"
GEN1 = "V1"
GEN2 = "V2"


class BootTarget(Protocol):
    """What decides which images a VM size boots (an `AzureSku` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def architecture(self) -> str: ...

    @property
    def hyperv_generations(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class SizeShape:
    """A size as its instance type's labels describe it: one architecture, and Hyper-V generations `V1`/`V2`
    (none when unknown)."""

    name: str
    architecture: str
    hyperv_generations: tuple[str, ...] = ()

    @classmethod
    def of(cls, instance_type: InstanceType) -> SizeShape | None:
        """The shape an instance type's labels give; None when they do not name one architecture."""
        arch = instance_type.requirements.get(labels.ARCH)
        if arch.complement or len(arch.values) != 1:
            return None
        generation = instance_type.requirements.get(labels.SKU_HYPERV_GENERATION)
        generations = () if generation.complement else tuple(sorted(f"V{g}" for g in generation.values))
        return cls(instance_type.name, next(iter(arch.values)), generations)


def _describe(size: BootTarget) -> str:
    generations = ", ".join(size.hyperv_generations) or "unknown"
    return f"{size.name} ({size.architecture}, Hyper-V generations {generations})"


# --- the image families' definitions ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gallery:
    """An AKS node image gallery, as a Shared Image Gallery (managed AKS) and as a Community Gallery (None when
    AKS publishes none: Windows images are in the Shared Image Gallery only)."""

    name: str
    resource_group: str
    community_name: str | None


UBUNTU_GALLERY = Gallery("AKSUbuntu", "AKS-Ubuntu", "AKSUbuntu-38d80f77-467a-481f-a8d4-09b6d4220bd2")
AZURE_LINUX_GALLERY = Gallery(
    "AKSAzureLinux", "AKS-AzureLinux", "AKSAzureLinux-f7c7cda5-1c9a-4bdc-a222-9614c968580b"
)
WINDOWS_GALLERY = Gallery("AKSWindows", "AKS-Windows", None)


@dataclass(frozen=True, slots=True)
class ImageDefinition:
    """One image definition of a gallery and the VMs that can boot it (architecture, Hyper-V generation)."""

    gallery: Gallery
    name: str
    architecture: str = AMD64
    generation: str = GEN2
    version: str | None = None
    """The version booted when the AKSNodeClass status names none; None for the Linux definitions, which boot the
    operator's node image version (their releases share one version scheme; Windows releases number theirs by
    the OS build)."""

    def boots_on(self, size: BootTarget) -> bool:
        """Whether a VM of this size can boot the image (a size with unknown generations is not excluded)."""
        return size.architecture == self.architecture and (
            not size.hyperv_generations or self.generation in size.hyperv_generations
        )


def _definitions(
    gallery: Gallery, gen2: str, gen1: str | None, arm64: str | None, version: str | None = None
) -> tuple[ImageDefinition, ...]:
    """A family's definitions in the provider's priority order: Gen2, then Gen1, then Arm64."""
    found = [ImageDefinition(gallery, gen2, version=version)]
    if gen1 is not None:
        found.append(ImageDefinition(gallery, gen1, generation=GEN1, version=version))
    if arm64 is not None:
        found.append(ImageDefinition(gallery, arm64, architecture=ARM64, version=version))
    return tuple(found)


class _Variant(StrEnum):
    PLAIN = "plain"
    TRUSTED_LAUNCH = "trusted launch"
    FIPS = "FIPS"
    FIPS_TRUSTED_LAUNCH = "FIPS with trusted launch"


_U = UBUNTU_GALLERY
_AL = AZURE_LINUX_GALLERY
_W = WINDOWS_GALLERY
WINDOWS_2022_VERSION = "20348.4529.251212"
WINDOWS_2025_VERSION = "26100.7462.251212"
"""The AKS Windows node image release of 2025-12-12 (OS build, update revision, release date), the newest in the
AKS provider's NodeImageVersions snapshot (`docs/windows.md` has the sources)."""
_IMAGES: dict[tuple[str, _Variant], tuple[ImageDefinition, ...]] = {
    ("Ubuntu2004", _Variant.FIPS): _definitions(_U, "2004gen2fipscontainerd", "2004fipscontainerd", None),
    ("Ubuntu2204", _Variant.PLAIN): _definitions(
        _U, "2204gen2containerd", "2204containerd", "2204gen2arm64containerd"
    ),
    ("Ubuntu2204", _Variant.TRUSTED_LAUNCH): _definitions(_U, "2204gen2TLcontainerd", None, None),
    ("Ubuntu2204", _Variant.FIPS_TRUSTED_LAUNCH): _definitions(_U, "2204gen2fipsTLcontainerd", None, None),
    ("Ubuntu2404", _Variant.PLAIN): _definitions(
        _U, "2404gen2containerd", "2404containerd", "2404gen2arm64containerd"
    ),
    ("Ubuntu2404", _Variant.TRUSTED_LAUNCH): _definitions(_U, "2404gen2TLcontainerd", None, None),
    ("AzureLinux2", _Variant.PLAIN): _definitions(_AL, "V2gen2", "V2", "V2gen2arm64"),
    ("AzureLinux2", _Variant.FIPS): _definitions(_AL, "V2gen2fips", "V2fips", None),
    ("AzureLinux2", _Variant.TRUSTED_LAUNCH): _definitions(_AL, "V2gen2TL", None, None),
    ("AzureLinux3", _Variant.PLAIN): _definitions(_AL, "V3gen2", "V3", "V3gen2arm64"),
    ("AzureLinux3", _Variant.FIPS): _definitions(_AL, "V3gen2fips", "V3fips", "V3gen2arm64fips"),
    ("AzureLinux3", _Variant.TRUSTED_LAUNCH): _definitions(_AL, "V3gen2TL", None, None),
    # Windows has one image with and without FIPS (FIPS is set at boot) and no Arm64 image.
    ("Windows2022", _Variant.PLAIN): _definitions(
        _W, "windows-2022-containerd-gen2", "windows-2022-containerd", None, WINDOWS_2022_VERSION
    ),
    ("Windows2025", _Variant.PLAIN): _definitions(
        _W, "windows-2025-gen2", "windows-2025", None, WINDOWS_2025_VERSION
    ),
    ("Windows2025", _Variant.TRUSTED_LAUNCH): _definitions(
        _W, "windows-2025-gen2-tl", None, None, WINDOWS_2025_VERSION
    ),
}

_VERSION = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?")
UBUNTU_2404_FROM = (1, 34)
"""The Ubuntu family boots Ubuntu 24.04 from this Kubernetes version on, 22.04 below it."""
AZURE_LINUX_3_FROM = (1, 32)
WINDOWS_2025_FROM = (1, 32)
"""AKS runs Windows Server 2025 nodes from this Kubernetes version on."""


def kubernetes_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version such as `1.33.2` or `v1.34`."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise InvalidError(
            f"Kubernetes version {version!r} is not of the form 1.33 or 1.33.2", code="InvalidVersion"
        )
    return int(match["major"]), int(match["minor"])


def _variant(trusted_launch: bool, fips: bool) -> _Variant:
    if fips:
        return _Variant.FIPS_TRUSTED_LAUNCH if trusted_launch else _Variant.FIPS
    return _Variant.TRUSTED_LAUNCH if trusted_launch else _Variant.PLAIN


def _release(family: ImageFamily, variant: _Variant, minor: tuple[int, int]) -> str:
    match family:
        case ImageFamily.WINDOWS_2022:
            return "Windows2022"
        case ImageFamily.WINDOWS_2025 if minor < WINDOWS_2025_FROM:
            raise InvalidError(
                f"image family {family} needs Kubernetes {WINDOWS_2025_FROM[0]}.{WINDOWS_2025_FROM[1]} or later "
                f"(the cluster runs {minor[0]}.{minor[1]})",
                code=UNSUPPORTED_IMAGE,
            )
        case ImageFamily.WINDOWS_2025:
            return "Windows2025"
        case ImageFamily.AZURE_LINUX:
            return "AzureLinux3" if minor >= AZURE_LINUX_3_FROM else "AzureLinux2"
        case ImageFamily.UBUNTU_2204:
            return "Ubuntu2204"
        case ImageFamily.UBUNTU_2404:
            return "Ubuntu2404"
        case _ if variant is _Variant.FIPS:
            return "Ubuntu2004"
        case _ if variant is not _Variant.PLAIN:
            return "Ubuntu2204"
        case _:
            return "Ubuntu2404" if minor >= UBUNTU_2404_FROM else "Ubuntu2204"


def image_definition(
    family: ImageFamily,
    kubernetes_version: str,
    size: BootTarget,
    trusted_launch: bool = False,
    fips: bool = False,
) -> ImageDefinition:
    """The node image definition a VM of this size boots: the first of the release's definitions it can boot.

    Ubuntu (the default family) is Ubuntu 24.04 from Kubernetes 1.34 and 22.04 below; with Trusted Launch it is
    22.04, and with FIPS 20.04 (or 22.04 with FIPS and Trusted Launch). AzureLinux is Azure Linux 3 from
    Kubernetes 1.32 and 2 below. Windows boots the same image with or without FIPS; Windows2025 needs Kubernetes
    1.32. Raises `InvalidError` (UnsupportedImage) when none boots on the size.
    """
    variant = _variant(trusted_launch, fips and not family.is_windows)
    release = _release(family, variant, kubernetes_minor(kubernetes_version))
    definitions = _IMAGES.get((release, variant))
    if definitions is None:
        raise InvalidError(
            f"image family {family} has no {variant} image ({release})", code=UNSUPPORTED_IMAGE
        )
    for definition in definitions:
        if definition.boots_on(size):
            return definition
    raise InvalidError(f"no {release} {variant} image boots on {_describe(size)}", code=UNSUPPORTED_IMAGE)


# --- the AKSNodeClass status's images ------------------------------------------------------------------


def _size_values(size: BootTarget) -> dict[str, set[str]]:
    """The image-matching label values of a size (architecture, Hyper-V generations `1`/`2`); a size whose
    generations are unknown has no value for that key, so it matches on architecture alone."""
    values = {labels.ARCH: {size.architecture}}
    if size.hyperv_generations:
        values[labels.SKU_HYPERV_GENERATION] = {
            gen.upper().removeprefix("V") for gen in size.hyperv_generations
        }
    return values


def boots_on(image: NodeImage, size: BootTarget) -> bool:
    """Whether the size satisfies every requirement of an AKSNodeClass status image (keys it has no value
    for are not held against it)."""
    values = _size_values(size)
    for requirement in image.requirements:
        have = values.get(requirement.key)
        if have is None:
            continue
        wanted = set(requirement.values)
        match requirement.operator:
            case NodeSelectorOperator.IN:
                if not have & wanted:
                    return False
            case NodeSelectorOperator.NOT_IN:
                if have <= wanted:
                    return False
            case NodeSelectorOperator.DOES_NOT_EXIST:
                return False
    return True


def status_image(images: Sequence[NodeImage], size: BootTarget) -> str | None:
    """The image a size boots from an AKSNodeClass status: the first (in priority order) it can boot, as the
    AKS provider picks it; None when no image fits."""
    return next((image.id for image in images if boots_on(image, size)), None)


# --- one AKSNodeClass ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeImages:
    """Where the VMs of one AKSNodeClass get their image: its status images, or its family's definitions."""

    nodeclass: str = ""
    """The AKSNodeClass's name, for messages ("" for a launch without one, which gets the defaults)."""
    status: tuple[NodeImage, ...] = ()
    family: ImageFamily = ImageFamily.UBUNTU
    kubernetes_version: str | None = None
    """From the AKSNodeClass status; without it the launch uses the operator's setting."""
    trusted_launch: bool = False
    fips: bool = False

    @classmethod
    def of(cls, nodeclass: AKSNodeClass | None) -> NodeImages:
        """The images of an AKSNodeClass (the defaults for None)."""
        if nodeclass is None:
            return cls()
        spec = nodeclass.spec
        return cls(
            nodeclass=nodeclass.name,
            status=tuple(nodeclass.status.images),
            family=spec.image_family,
            kubernetes_version=nodeclass.status.kubernetes_version,
            trusted_launch=spec.trusted_launch_enabled,
            fips=spec.fips_enabled,
        )

    def _refused(self, detail: str) -> InvalidError:
        prefix = f"AKSNodeClass {self.nodeclass}: " if self.nodeclass else ""
        return InvalidError(prefix + detail, code=UNSUPPORTED_IMAGE)

    def image(self, size: BootTarget, default_version: str) -> str | ImageDefinition:
        """What a VM of this size boots: the ID of the first status image it can boot, or (while the status has
        none) its family's definition for the status's Kubernetes version, else `default_version`. Raises
        `InvalidError` (UnsupportedImage), naming the AKSNodeClass, when none boots on the size."""
        if self.status:
            chosen = status_image(self.status, size)
            if chosen is None:
                raise self._refused(f"no image in status.images boots on {_describe(size)}")
            return chosen
        try:
            return image_definition(
                self.family,
                self.kubernetes_version or default_version,
                size,
                trusted_launch=self.trusted_launch,
                fips=self.fips,
            )
        except InvalidError as error:
            raise self._refused(str(error)) from None

    def refusal(self, size: BootTarget) -> str | None:
        """Why no image boots on the size, as its launch would fail; None when one does. Without a Kubernetes
        version in the status (the launch then takes the operator's), a size that one of the family's releases
        boots on is not refused."""
        versions = (self.kubernetes_version,) if self.kubernetes_version else _EVERY_RELEASE
        refusals = []
        for version in versions:
            try:
                self.image(size, version)
            except InvalidError as error:
                refusals.append(str(error))
            else:
                return None
        return refusals[0]


_EVERY_RELEASE = (f"1.{AZURE_LINUX_3_FROM[1] - 1}", f"1.{UBUNTU_2404_FROM[1]}")
"""A Kubernetes version on each side of every release boundary: between them they pick every release."""


def bootable(
    instance_types: Iterable[InstanceType], images: NodeImages
) -> tuple[list[InstanceType], dict[str, str]]:
    """The instance types an image of the AKSNodeClass boots on, and every other one with why not.

    Types whose labels name no single architecture are kept: nothing says they cannot boot."""
    kept: list[InstanceType] = []
    refused: dict[str, str] = {}
    boots: dict[tuple[str, tuple[str, ...]], bool] = {}
    for instance_type in instance_types:
        shape = SizeShape.of(instance_type)
        if shape is None:
            kept.append(instance_type)
            continue
        key = (shape.architecture, shape.hyperv_generations)
        verdict = boots.get(key)
        if verdict is None:
            verdict = boots[key] = images.refusal(shape) is None
        if verdict:
            kept.append(instance_type)
        else:
            refused[instance_type.name] = images.refusal(shape) or ""
    return kept, refused
