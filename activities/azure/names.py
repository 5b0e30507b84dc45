"""Names and IDs of the Azure resources behind a NodeClaim, all derived from the NodeClaim name.

The VM, its NIC and its OS disk are all called `aks-<nodeclaim>`, as the AKS provider names them. Because the
name is the idempotency key, a create that is retried or replayed finds what an earlier attempt made instead of
making a second VM. The provider ID is the form AKS writes on Nodes: `azure://` and the VM's resource ID with
only the resource group lower-cased (the lifecycle matches Nodes by it, so it must be exactly this).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidError

PREFIX = "aks-"
MAX_VM_NAME_LENGTH = 64
"""Azure's limit for Linux VM names (and computer names); the NIC and disk limits are longer."""

_VM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<resource_group>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachines/(?P<vm>[^/]+)$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class NodeNames:
    """The resource names of one NodeClaim's node."""

    nodeclaim: str
    vm: str
    nic: str
    os_disk: str

    @classmethod
    def of(cls, nodeclaim: str) -> NodeNames:
        """The names for this NodeClaim; `InvalidError` if Azure would refuse them."""
        vm = f"{PREFIX}{nodeclaim}"
        if len(vm) > MAX_VM_NAME_LENGTH or not _VM_NAME.match(vm):
            raise InvalidError(
                f"NodeClaim name {nodeclaim!r} gives the VM name {vm!r}, which Azure does not accept: at most "
                f"{MAX_VM_NAME_LENGTH} characters of lower-case letters, digits, '-' and '.'",
                code="InvalidResourceName",
            )
        return cls(nodeclaim=nodeclaim, vm=vm, nic=vm, os_disk=vm)


def nodeclaim_of(vm_name: str) -> str:
    """The NodeClaim name a VM was made for (its name without the `aks-` prefix)."""
    return vm_name.removeprefix(PREFIX)


def resource_id(subscription_id: str, resource_group: str, provider: str, kind: str, name: str) -> str:
    """An ARM resource ID: `/subscriptions/<s>/resourceGroups/<rg>/providers/<provider>/<kind>/<name>`."""
    return (
        f"/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/{provider}/{kind}/{name}"
    )


def vm_id(subscription_id: str, resource_group: str, vm_name: str) -> str:
    return resource_id(subscription_id, resource_group, "Microsoft.Compute", "virtualMachines", vm_name)


def nic_id(subscription_id: str, resource_group: str, nic_name: str) -> str:
    return resource_id(subscription_id, resource_group, "Microsoft.Network", "networkInterfaces", nic_name)


def provider_id(subscription_id: str, resource_group: str, vm_name: str) -> str:
    """The Node `spec.providerID` of a VM, with the resource group lower-cased as AKS writes it."""
    return f"azure://{vm_id(subscription_id, resource_group.lower(), vm_name)}"


def vm_name_from_provider_id(value: str) -> str:
    """The VM name in a provider ID; `InvalidError` for anything that is not an Azure VM provider ID."""
    match = _PROVIDER_ID.match(value)
    if match is None:
        raise InvalidError(
            f"{value!r} is not an Azure VM provider ID (azure:///subscriptions/<subscription>/resourceGroups/"
            "<group>/providers/Microsoft.Compute/virtualMachines/<name>)",
            code="InvalidProviderID",
        )
    return match["vm"]
