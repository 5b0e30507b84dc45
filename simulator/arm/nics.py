"""Network interfaces: create or update (PUT) with addresses allocated from the node subnet."""

from __future__ import annotations

import copy

from simulator.arm.errors import ArmError
from simulator.arm.faults import Call
from simulator.arm.operations import Operations
from simulator.arm.resources import Json, Operation, ProvisioningState, Resource, ResourceType, check_tags


class NetworkInterfaces(Operations):
    """The network interfaces of the state."""

    def put_nic(
        self, resource_group: str, name: str, body: Json, call: Call
    ) -> tuple[int, Resource, Operation]:
        """Create or update a NIC: 201 or 200 with an operation that ends Succeeded."""
        resource_type = ResourceType.NETWORK_INTERFACE
        self._check_location(resource_type, body)
        check_tags(body)
        existing = self.resource(resource_type, name, resource_group)
        if existing is not None and existing.provisioning_state == ProvisioningState.DELETING:
            raise ArmError(
                409,
                "AnotherOperationInProgress",
                f"Another operation on this or dependent resource is in progress. Resource: {existing.id}",
            )
        nic_id = self.resource_id(resource_type, resource_group, name)
        stored = copy.deepcopy(body)
        stored.update(id=nic_id, name=name, type=resource_type.value, etag=f'W/"{self._new_id()}"')
        properties: Json = stored.setdefault("properties", {})
        previous = existing.properties if existing is not None else {}
        properties["resourceGuid"] = previous.get("resourceGuid") or self._new_id()
        properties.setdefault("enableAcceleratedNetworking", False)
        properties.setdefault("enableIPForwarding", False)
        properties["nicType"] = "Standard"
        for key in ("virtualMachine", "macAddress"):
            if key in previous:
                properties[key] = previous[key]
        old_ips = {
            ipc.get("name"): (ipc.get("properties") or {}).get("privateIPAddress")
            for ipc in previous.get("ipConfigurations") or []
        }
        for index, ip_configuration in enumerate(properties.get("ipConfigurations") or []):
            ip_name = ip_configuration.setdefault("name", f"ipconfig{index + 1}")
            ip_configuration["id"] = f"{nic_id}/ipConfigurations/{ip_name}"
            ip_configuration["type"] = f"{resource_type.value}/ipConfigurations"
            ip_properties: Json = ip_configuration.setdefault("properties", {})
            ip_properties.setdefault("privateIPAllocationMethod", "Dynamic")
            ip_properties.setdefault("privateIPAddressVersion", "IPv4")
            ip_properties.setdefault("primary", index == 0)
            if (
                ip_properties["privateIPAllocationMethod"] == "Dynamic"
                or "privateIPAddress" not in ip_properties
            ):
                ip_properties["privateIPAddress"] = old_ips.get(ip_name) or self._allocate_ip()
            ip_properties["provisioningState"] = ProvisioningState.SUCCEEDED.value
        resource = Resource(resource_type, resource_group, name, stored)
        if existing is None:
            self.counters.nics_created += 1
        operation = self._store(
            resource, existing, call, ProvisioningState.UPDATING, provision=existing is None
        )
        return (200 if existing is not None else 201), resource, operation

    def _allocate_ip(self) -> str:
        address = self._next_ip
        self._next_ip += 1
        return f"10.224.{address // 256}.{address % 256}"
