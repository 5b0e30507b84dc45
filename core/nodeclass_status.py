"""The status conditions the AKS provider's `nodeclass.status` controller writes on an AKSNodeClass.

`Ready` is the root of ImagesReady, KubernetesVersionReady, SubnetsReady, ValidationSucceeded and LocalDNSReady
(`core.api.condition_set`), so a NodeClass that cannot launch shows `Ready=False` in `kubectl get aksnodeclasses`
and its NodePools show `NodeClassReady=False` with the same reason and message.

- SubnetsReady checks the node subnet (`vnetSubnetID`, else the cluster's): an ID that does not parse, a custom
  subnet in the AKS-managed VNet or outside the cluster's VNet is `SubnetIDInvalid`; one Azure does not have is
  `SubnetNotFound`; another failure reading it is `SubnetUnknownError`. The ID checks are here
  (`subnet_id_problem`); the read is the caller's.
- KubernetesVersionReady is True, and so is ImagesReady: nodewright boots the images and version of the status
  when they are there, and otherwise resolves them from the image family and the cluster's version. Unless that
  resolves to no image (`images_problem`): a Windows family without status images and without AKS's Shared Image
  Gallery, where AKS publishes Windows images only, is `SIGRequiredForWindows` (as the provider says
  `SIGRequiredForFIPS`); a family the cluster's Kubernetes version has no image of (Windows2025 before 1.32) is
  `ImagesNotFound`.
- ValidationSucceeded is True (nodewright takes no disk encryption set whose access the provider would check).
- LocalDNSReady is True: `localDNSState` is resolved as soon as the controller sees the NodeClass
  (`AKSNodeClass.resolved_local_dns_state`).

One more condition is nodewright's and no dependent of `Ready` (launches go on): `PricingFallback`, True with
reason `RegionNotInPriceTable` while the region's instance types are priced with another region's prices (the
shipped price table lacks the region, as it lacks every sovereign cloud's, and no live prices replaced the AKS
provider's fallback), and absent otherwise, as Karpenter's `Drifted` is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.api.aksnodeclass import AKSNodeClass, AKSNodeClassConditionType
from core.api.condition_set import ConditionSet
from core.api.nodepool import StatusCondition
from core.errors import InvalidError
from core.instancetypes.images import AMD64, GEN1, GEN2, NodeImages, SizeShape

NODECLASS_DEPENDENTS = (
    AKSNodeClassConditionType.IMAGES_READY,
    AKSNodeClassConditionType.KUBERNETES_VERSION_READY,
    AKSNodeClassConditionType.SUBNETS_READY,
    AKSNodeClassConditionType.VALIDATION_SUCCEEDED,
    AKSNodeClassConditionType.LOCAL_DNS_READY,
)

SIG_REQUIRED_FOR_WINDOWS = "SIGRequiredForWindows"
IMAGES_NOT_FOUND = "ImagesNotFound"

PRICING_FALLBACK = "PricingFallback"
REGION_NOT_IN_PRICE_TABLE = "RegionNotInPriceTable"

SUBNET_NOT_FOUND = "SubnetNotFound"
SUBNET_ID_INVALID = "SubnetIDInvalid"
SUBNET_UNKNOWN_ERROR = "SubnetUnknownError"

_MANAGED_VNET = re.compile(r"(?i)^aks-vnet-\d{8}$")
_MANAGED_SUBNET = "aks-subnet"


@dataclass(frozen=True, slots=True)
class SubnetID:
    subscription: str
    resource_group: str
    vnet: str
    subnet: str

    def same_vnet(self, other: SubnetID) -> bool:
        """Whether both are in one virtual network (subscription, resource group and name, as written)."""
        return (self.subscription, self.resource_group, self.vnet) == (
            other.subscription,
            other.resource_group,
            other.vnet,
        )


def parse_subnet_id(text: str) -> SubnetID | None:
    """The parts of `/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<v>
    /subnets/<n>` (case-insensitive keywords), or None when it is not one."""
    parts = text.split("/")
    if len(parts) != 11:
        return None
    found = SubnetID(parts[2], parts[4], parts[8], parts[10])
    mirror = (
        f"/subscriptions/{found.subscription}/resourceGroups/{found.resource_group}/providers/"
        f"Microsoft.Network/virtualNetworks/{found.vnet}/subnets/{found.subnet}"
    )
    return found if mirror.lower() == text.lower() else None


def is_managed_vnet(subnet: SubnetID, node_resource_group: str) -> bool:
    """Whether the subnet is the one AKS made for the cluster (`aks-vnet-<8 digits>/aks-subnet` in the node
    resource group)."""
    return (
        bool(_MANAGED_VNET.match(subnet.vnet))
        and subnet.resource_group.lower() == node_resource_group.lower()
        and subnet.subnet.lower() == _MANAGED_SUBNET
    )


def subnet_id_problem(
    subnet_id: str, cluster_subnet_id: str, node_resource_group: str
) -> tuple[str, str] | None:
    """The SubnetsReady reason and message when the node subnet's ID rules it out before Azure is asked."""
    subnet = parse_subnet_id(subnet_id)
    if subnet is None:
        return SUBNET_ID_INVALID, f"Failed to parse vnetSubnetID {subnet_id}"
    if subnet_id == cluster_subnet_id:
        return None
    cluster = parse_subnet_id(cluster_subnet_id)
    if cluster is None:
        return None
    if is_managed_vnet(cluster, node_resource_group) and cluster.same_vnet(subnet):
        return (
            SUBNET_ID_INVALID,
            f"custom subnet cannot be in the same VNet as cluster managed VNet: {subnet_id}",
        )
    if not cluster.same_vnet(subnet):
        return (
            SUBNET_ID_INVALID,
            "vnetSubnetID does not match the cluster subscription, resource group, or virtual network: "
            f"{subnet_id}",
        )
    return None


def subnet_not_found(subnet_id: str) -> tuple[str, str]:
    """SubnetsReady's reason and message for a subnet Azure does not have."""
    return SUBNET_NOT_FOUND, f"resource not found: {subnet_id}"


def subnet_unknown_error(error: str) -> tuple[str, str]:
    """SubnetsReady's reason and message when reading the subnet failed otherwise."""
    return SUBNET_UNKNOWN_ERROR, f"unknown error getting subnet: {error}"


def images_problem(
    nodeclass: AKSNodeClass, kubernetes_version: str, shared_gallery: bool
) -> tuple[str, str] | None:
    """ImagesReady's reason and message when no image would boot the AKSNodeClass's nodes (None: one would):
    `kubernetes_version` is the cluster's, for a status without one; `shared_gallery` whether images may come from
    AKS's Shared Image Gallery."""
    images = NodeImages.of(nodeclass)
    if images.status:
        return None
    try:
        definition = images.image(_ANY_SIZE, images.kubernetes_version or kubernetes_version)
    except InvalidError as error:
        return IMAGES_NOT_FOUND, str(error)
    if isinstance(definition, str) or shared_gallery or definition.gallery.community_name is not None:
        return None
    return (
        SIG_REQUIRED_FOR_WINDOWS,
        f"{definition.gallery.name} images are published only in AKS's Shared Image Gallery: set "
        "NODEWRIGHT_IMAGE_GALLERY_SUBSCRIPTION_ID, or give the AKSNodeClass status.images",
    )


_ANY_SIZE = SizeShape("any", AMD64, (GEN1, GEN2))
"""A size every family has an image for, when the family has one at all."""


def nodeclass_conditions(
    current: Sequence[StatusCondition],
    generation: int | None,
    created: datetime | None,
    subnet_problem: tuple[str, str] | None,
    now: datetime,
    *,
    price_fallback: str | None = None,
    images: tuple[str, str] | None = None,
) -> list[StatusCondition]:
    """The AKSNodeClass's conditions after a status reconcile; `subnet_problem` is the SubnetsReady reason and
    message when the subnet is not usable (None: it is), `price_fallback` why prices are another region's when
    they are, `images` ImagesReady's reason and message when no image would boot its nodes (`images_problem`)."""
    conditions = ConditionSet(current, NODECLASS_DEPENDENTS, generation, created, now)
    conditions.set_true(AKSNodeClassConditionType.KUBERNETES_VERSION_READY)
    if images is None:
        conditions.set_true(AKSNodeClassConditionType.IMAGES_READY)
    else:
        conditions.set_false(AKSNodeClassConditionType.IMAGES_READY, *images)
    if subnet_problem is None:
        conditions.set_true(AKSNodeClassConditionType.SUBNETS_READY)
    else:
        conditions.set_false(AKSNodeClassConditionType.SUBNETS_READY, *subnet_problem)
    conditions.set_true(AKSNodeClassConditionType.VALIDATION_SUCCEEDED)
    conditions.set_true(AKSNodeClassConditionType.LOCAL_DNS_READY)
    if price_fallback is None:
        conditions.clear(PRICING_FALLBACK)
    else:
        conditions.set_true(PRICING_FALLBACK, REGION_NOT_IN_PRICE_TABLE, price_fallback)
    return conditions.conditions
