"""Subnets: GET of `virtualNetworks/{vnet}/subnets/{subnet}`, read-only. The cluster's own subnet (the AKS-managed
`aks-vnet-12345678/aks-subnet` in the node resource group) exists, and so do the IDs in `ArmSettings.subnets`;
any other is 404, `ResourceNotFound` when its virtual network is unknown too, else `NotFound`, as Azure answers."""

from __future__ import annotations

from simulator.arm.errors import ArmError
from simulator.arm.resources import Json
from simulator.arm.store import ArmSettings

MANAGED_VNET = "aks-vnet-12345678"
MANAGED_SUBNET = "aks-subnet"
SUBNET_TYPE = "Microsoft.Network/virtualNetworks/subnets"


def subnet_id(subscription: str, resource_group: str, vnet: str, subnet: str) -> str:
    return (
        f"/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network"
        f"/virtualNetworks/{vnet}/subnets/{subnet}"
    )


def _existing(settings: ArmSettings) -> list[str]:
    managed = subnet_id(settings.subscription_id, settings.resource_group, MANAGED_VNET, MANAGED_SUBNET)
    return [managed, *settings.subnets]


def get_subnet(settings: ArmSettings, resource_group: str, vnet: str, name: str) -> Json:
    """The subnet's body, or the ArmError Azure answers for one that does not exist."""
    wanted = subnet_id(settings.subscription_id, resource_group, vnet, name)
    existing = _existing(settings)
    for index, found in enumerate(existing):
        if found.lower() == wanted.lower():
            return {
                "id": found,
                "name": found.rsplit("/", 1)[1],
                "type": SUBNET_TYPE,
                "properties": {"provisioningState": "Succeeded", "addressPrefix": f"10.{224 + index}.0.0/16"},
            }
    vnet_prefix = wanted.lower().rsplit("/subnets/", 1)[0] + "/subnets/"
    if not any(found.lower().startswith(vnet_prefix) for found in existing):
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Network/virtualNetworks/{vnet}' under resource group '{resource_group}' "
            "was not found.",
        )
    raise ArmError(404, "NotFound", f"Resource {wanted} not found.")
