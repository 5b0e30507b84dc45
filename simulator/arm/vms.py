"""Virtual machines: create or update (PUT) with Azure's validation (size, zones, NICs, accelerated networking,
ephemeral OS disk, custom data, and for Windows VMs the computer name, admin account and license type), the
managed OS disk they make, what their create and delete do to NICs and disks, and their extensions (PUT, GET and
DELETE of `virtualMachines/<vm>/extensions/<name>`, answered at once: an extension's handler is not run, but the
node agent reads what a Windows VM's CustomScriptExtension would run)."""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

from core.instancetypes.catalog import AzureSku
from simulator.arm.errors import ArmError, sku_not_available_message
from simulator.arm.faults import Call
from simulator.arm.operations import Operations
from simulator.arm.resources import (
    Json,
    Operation,
    ProvisioningState,
    Resource,
    ResourceType,
    check_tags,
    iso,
    json_object,
    resource_key,
)
from simulator.arm.skus import GIB

CUSTOM_DATA_MAX_CHARS = 87_380
"""Azure's limit on `osProfile.customData` (base64 characters)."""
WINDOWS_COMPUTER_NAME_MAX = 15
WINDOWS_LICENSE_TYPES = frozenset({"Windows_Server", "Windows_Client", "None"})
_RESERVED_ADMIN_NAMES = frozenset(
    {
        "administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123", "a",
        "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root",
        "server", "sql", "support", "support_388945a0", "sys", "test2", "test3", "user4", "user5",
    }
)  # fmt: skip
_COMPUTER_NAME_FORBIDDEN = frozenset("`~!@#$%^&*()=+_[]{}\\|;:.'\",<>/?")


class VirtualMachines(Operations):
    """The virtual machines of the state."""

    def put_vm(
        self, resource_group: str, name: str, body: Json, call: Call
    ) -> tuple[int, Resource, Operation]:
        """Create or update a VM: 201 (200 for an update) with an operation; see `simulator.arm`."""
        resource_type = ResourceType.VIRTUAL_MACHINE
        properties = json_object(body.get("properties", {}), "properties")
        os_profile = json_object(properties.get("osProfile", {}), "properties.osProfile")
        custom_data = os_profile.get("customData")
        existing = self.resource(resource_type, name, resource_group)
        if existing is not None:
            self._check_update(existing, body, custom_data)
        self._check_location(resource_type, body)
        check_tags(body)
        vm_size = json_object(properties.get("hardwareProfile", {}), "properties.hardwareProfile").get(
            "vmSize"
        )
        if not isinstance(vm_size, str) or not vm_size:
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'hardwareProfile.vmSize' is missing (null).",
                target="hardwareProfile.vmSize",
            )
        sku = self._available_sku(vm_size, call.zone or "")
        nics = self._referenced_nics(body)
        self._check_accelerated_networking(sku, nics, name)
        self._check_ephemeral_os_disk(sku, os_disk_of(body))
        if custom_data is not None:
            check_custom_data(custom_data)
        if is_windows(body):
            check_windows(properties, os_profile)

        vm_id = self.resource_id(resource_type, resource_group, name)
        stored = copy.deepcopy(body)
        stored.update(id=vm_id, name=name, type=resource_type.value)
        stored_properties: Json = stored.setdefault("properties", {})
        stored_os_profile = stored_properties.get("osProfile")
        if isinstance(stored_os_profile, dict):
            stored_os_profile.pop("customData", None)
            stored_os_profile.pop("adminPassword", None)
        if existing is not None:
            stored_properties["vmId"] = existing.properties.get("vmId")
            stored_properties["timeCreated"] = existing.properties.get("timeCreated")
        else:
            stored_properties["vmId"] = self._new_id()
            stored_properties["timeCreated"] = iso(self._wall_clock())
        os_disk = stored_properties.setdefault("storageProfile", {}).setdefault("osDisk", {})
        os_disk.setdefault("osType", "Linux")
        existing_disk_name = os_disk_of(existing.body).get("name") if existing is not None else None
        os_disk.setdefault("name", existing_disk_name or f"{name}_OsDisk_1_{self._new_id().replace('-', '')}")
        disk = (
            self._os_disk_resource(resource_group, stored, os_disk)
            if "diffDiskSettings" not in os_disk
            else None
        )

        resource = Resource(resource_type, resource_group, name, stored, custom_data)
        if existing is not None and custom_data is None:
            resource.custom_data = existing.custom_data
        if existing is None:
            self.counters.vms_created += 1
            if name.lower() in self._vm_names:
                self.counters.vms_created_again.append(name)
            self._vm_names.add(name.lower())
        disk_key = resource_key(ResourceType.DISK, resource_group, str(os_disk["name"]))
        if disk is not None and disk_key not in self._resources:
            self._resources[disk_key] = disk
            self.counters.disks_created += 1
        for nic in nics:
            nic.properties["virtualMachine"] = {"id": vm_id}
        # A failed or canceled VM is provisioned again by a PUT, as Azure does.
        provision = existing is None or existing.provisioning_state in (
            ProvisioningState.FAILED,
            ProvisioningState.CANCELED,
        )
        operation = self._store(resource, existing, call, ProvisioningState.CREATING, provision)
        return (201 if existing is None else 200), resource, operation

    def _check_update(self, existing: Resource, body: Json, custom_data: Any) -> None:
        if existing.provisioning_state == ProvisioningState.DELETING:
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'put' is not allowed on VM '{existing.name}' since the VM is marked for deletion. You "
                "can only retry the Delete operation (or wait for an ongoing one to complete).",
            )
        if sorted(body.get("zones") or []) != sorted(existing.body.get("zones") or []):
            raise ArmError(
                409, "PropertyChangeNotAllowed", "Changing property 'zones' is not allowed.", target="zones"
            )
        if custom_data is not None and custom_data != existing.custom_data:
            raise ArmError(
                409,
                "PropertyChangeNotAllowed",
                "Changing property 'customData' is not allowed.",
                target="customData",
            )

    def _available_sku(self, vm_size: str, zone: str) -> AzureSku:
        """The catalog size, if the subscription may create it in that zone; else 409 SkuNotAvailable."""
        sku = self.sku(vm_size)
        restriction = self._restrictions.get(vm_size.lower())
        zones = self.catalog.zones if sku is None or sku.zones is None else sku.zones
        unavailable = (
            sku is None
            or (restriction is not None and (not restriction.zones or zone in restriction.zones))
            or (zone != "" and zone not in zones)
        )
        if unavailable or sku is None:
            raise ArmError(409, "SkuNotAvailable", sku_not_available_message(vm_size, self.settings.region))
        return sku

    def _referenced_nics(self, body: Json) -> list[Resource]:
        nics = []
        for index, reference in enumerate(nic_references(body)):
            nic_id = str(reference.get("id", ""))
            nic = self._by_id(nic_id)
            if nic is None or nic.type is not ResourceType.NETWORK_INTERFACE:
                raise ArmError(
                    400,
                    "InvalidResourceReference",
                    f"Resource {nic_id} referenced by resource {body.get('name') or 'the virtual machine'} was not "
                    "found. Please make sure that the referenced resource exists, and that both resources are in "
                    "the same region.",
                    target=f"networkProfile.networkInterfaces[{index}].id",
                )
            nics.append(nic)
        return nics

    def _check_accelerated_networking(self, sku: AzureSku, nics: list[Resource], vm_name: str) -> None:
        for index, nic in enumerate(nics):
            if nic.properties.get("enableAcceleratedNetworking") and not sku.accelerated_networking:
                raise ArmError(
                    400,
                    "VMSizeIsNotPermittedToEnableAcceleratedNetworking",
                    f"Virtual Machine size {sku.name} is not in the allowed list of VM sizes for accelerated "
                    f"networking to be enabled on the VM at index {index} for VM {vm_name}.",
                )

    def _check_ephemeral_os_disk(self, sku: AzureSku, os_disk: Json) -> None:
        diff = os_disk.get("diffDiskSettings")
        if not isinstance(diff, dict):
            return
        placement = str(diff.get("placement") or "CacheDisk")
        capacity = _placement_bytes(sku, placement)
        size_gb = int(os_disk.get("diskSizeGB") or 30)
        if not sku.ephemeral_os_disk_supported or capacity is None or size_gb * GIB > capacity:
            raise ArmError(
                400,
                "InvalidParameter",
                f"OS disk of Ephemeral VM with size greater than {capacity // GIB if capacity else 0} GB is not "
                f"allowed for VM size {sku.name} when the DiffDiskPlacement is {placement}.",
                target="osDisk.diskSizeGB",
            )

    def _os_disk_resource(self, resource_group: str, vm: Json, os_disk: Json) -> Resource:
        disk_type = ResourceType.DISK
        name = str(os_disk["name"])
        disk_id = self.resource_id(disk_type, resource_group, name)
        managed = os_disk.setdefault("managedDisk", {})
        managed["id"] = disk_id
        managed.setdefault("storageAccountType", "Premium_LRS")
        image = (vm["properties"].get("storageProfile") or {}).get("imageReference") or {}
        body: Json = {
            "id": disk_id,
            "name": name,
            "type": disk_type.value,
            "location": vm.get("location"),
            "managedBy": vm["id"],
            "sku": {"name": managed["storageAccountType"]},
            "properties": {
                "osType": os_disk.get("osType", "Linux"),
                "diskSizeGB": int(os_disk.get("diskSizeGB") or 30),
                "diskState": "Attached",
                "provisioningState": ProvisioningState.SUCCEEDED.value,
                "creationData": {"createOption": "FromImage", "imageReference": dict(image)},
                "timeCreated": iso(self._wall_clock()),
            },
        }
        if vm.get("zones"):
            body["zones"] = list(vm["zones"])
        return Resource(disk_type, resource_group, name, body)

    def _provisioned(self, resource: Resource) -> None:
        """A created VM's NICs get their MAC address and primary flag."""
        super()._provisioned(resource)
        if resource.type is not ResourceType.VIRTUAL_MACHINE:
            return
        for reference in nic_references(resource.body):
            nic = self._by_id(str(reference.get("id", "")))
            if nic is not None:
                nic.properties.setdefault("macAddress", self._mac_address())
                nic.properties["primary"] = bool((reference.get("properties") or {}).get("primary", True))

    def _mac_address(self) -> str:
        return "-".join(f"{byte:02X}" for byte in (0x00, 0x0D, 0x3A, *self._random.randbytes(3)))

    def _released(self, resource: Resource) -> None:
        """What a VM delete does to its NICs and OS disk: delete those marked Delete, detach the others."""
        super()._released(resource)
        if resource.type is not ResourceType.VIRTUAL_MACHINE:
            return
        vm = resource
        for reference in nic_references(vm.body):
            nic = self._by_id(str(reference.get("id", "")))
            if nic is None:
                continue
            if (reference.get("properties") or {}).get("deleteOption") == "Delete":
                self._remove(nic)
            else:
                nic.properties.pop("virtualMachine", None)
        os_disk = os_disk_of(vm.body)
        disk = self._by_id(str((os_disk.get("managedDisk") or {}).get("id", "")))
        if disk is not None:
            if os_disk.get("deleteOption") == "Delete":
                self._remove(disk)
            else:
                disk.body.pop("managedBy", None)
                disk.properties["diskState"] = "Unattached"

    # --- extensions ----------------------------------------------------------------------------------------

    def put_extension(self, resource_group: str, vm_name: str, name: str, body: Json) -> tuple[int, Json]:
        """Create or update an extension of a made VM: 201 (200 for an update), Succeeded at once."""
        vm = self.get(ResourceType.VIRTUAL_MACHINE, resource_group, vm_name)
        if vm.provisioning_state not in (ProvisioningState.SUCCEEDED, ProvisioningState.UPDATING):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'PUT extension' is not allowed on VM '{vm.name}' in provisioning state "
                f"'{vm.provisioning_state}'.",
            )
        check_tags(body)
        properties = json_object(body.get("properties", {}), "properties")
        for required in ("publisher", "type", "typeHandlerVersion"):
            if not isinstance(properties.get(required), str) or not properties[required]:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"Required parameter '{required}' is missing (null).",
                    target=required,
                )
        handler = f"{properties['publisher']}.{properties['type']}"
        if handler in _LINUX_ONLY_HANDLERS and is_windows(vm.body):
            raise ArmError(
                400, "OperationNotAllowed", f"The extension {handler} is not supported on a Windows VM."
            )
        key = name.lower()
        status = 200 if key in vm.extensions else 201
        stored = copy.deepcopy(body)
        stored.update(id=f"{vm.id}/extensions/{name}", name=name, type=f"{vm.type.value}/extensions")
        stored.setdefault("location", vm.body.get("location"))
        stored["properties"]["provisioningState"] = ProvisioningState.SUCCEEDED.value
        vm.extensions[key] = stored
        vm.body["resources"] = [extension_view(extension) for extension in vm.extensions.values()]
        return status, extension_view(stored)

    def get_extension(self, resource_group: str, vm_name: str, name: str) -> Json:
        vm = self.get(ResourceType.VIRTUAL_MACHINE, resource_group, vm_name)
        extension = vm.extensions.get(name.lower())
        if extension is None:
            raise ArmError(
                404,
                "NotFound",
                f"The entity was not found in this Azure location. (extension '{name}' of VM '{vm.name}')",
            )
        return extension_view(extension)

    def delete_extension(self, resource_group: str, vm_name: str, name: str) -> bool:
        """Remove it; False when there was none."""
        vm = self.get(ResourceType.VIRTUAL_MACHINE, resource_group, vm_name)
        removed = vm.extensions.pop(name.lower(), None) is not None
        vm.body["resources"] = [extension_view(extension) for extension in vm.extensions.values()]
        return removed


_LINUX_ONLY_HANDLERS = frozenset({"Microsoft.Azure.Extensions.CustomScript"})


def extension_view(extension: Json) -> Json:
    """An extension as GET shows it: without its protected settings."""
    view = copy.deepcopy(extension)
    view.get("properties", {}).pop("protectedSettings", None)
    return view


def is_windows(vm: Json) -> bool:
    """Whether a VM body is a Windows VM's (its OS disk, or its Windows configuration, says so)."""
    properties = vm.get("properties") or {}
    os_profile = properties.get("osProfile") or {}
    return os_disk_of(vm).get("osType") == "Windows" or "windowsConfiguration" in os_profile


def check_windows(properties: Json, os_profile: Json) -> None:
    """What Azure checks of a Windows VM: computer name, admin account, license type."""
    name = str(os_profile.get("computerName") or "")
    if (
        not name
        or len(name) > WINDOWS_COMPUTER_NAME_MAX
        or name.isdigit()
        or set(name) & _COMPUTER_NAME_FORBIDDEN
    ):
        raise ArmError(
            400,
            "InvalidParameter",
            f"Windows computer name cannot be more than {WINDOWS_COMPUTER_NAME_MAX} characters long, be entirely "
            "numeric, or contain the following characters: ` ~ ! @ # $ % ^ & * ( ) = + _ [ ] { } \\ | ; : . ' \" "
            ", < > / ?.",
            target="computerName",
        )
    username = str(os_profile.get("adminUsername") or "")
    if not username or username.lower() in _RESERVED_ADMIN_NAMES or len(username) > 20:
        raise ArmError(
            400, "InvalidParameter", "The Admin Username specified is not allowed.", target="adminUsername"
        )
    password = os_profile.get("adminPassword")
    if not isinstance(password, str):
        raise ArmError(
            400,
            "InvalidParameter",
            "Required parameter 'adminPassword' is missing (null).",
            target="adminPassword",
        )
    classes = sum(
        (
            any(c.isupper() for c in password),
            any(c.islower() for c in password),
            any(c.isdigit() for c in password),
            any(not c.isalnum() for c in password),
        )
    )
    if not 8 <= len(password) <= 123 or classes < 3:
        raise ArmError(
            400,
            "InvalidParameter",
            "The supplied password must be between 8-123 characters long and must satisfy at least 3 of password "
            "complexity requirements from the following: 1) Contains an uppercase character 2) Contains a "
            "lowercase character 3) Contains a numeric digit 4) Contains a special character 5) Control "
            "characters are not allowed",
            target="adminPassword",
        )
    if "linuxConfiguration" in os_profile:
        raise ArmError(
            400,
            "InvalidParameter",
            "Linux configuration cannot be specified for a Windows virtual machine.",
            target="linuxConfiguration",
        )
    license_type = properties.get("licenseType")
    if license_type is not None and license_type not in WINDOWS_LICENSE_TYPES:
        raise ArmError(
            400,
            "InvalidParameter",
            f"The value '{license_type}' of parameter 'licenseType' is not allowed. Allowed values are "
            f"'{', '.join(sorted(WINDOWS_LICENSE_TYPES))}'.",
            target="licenseType",
        )


def nic_references(vm: Json) -> list[Json]:
    network_profile = (vm.get("properties") or {}).get("networkProfile") or {}
    return [
        reference
        for reference in network_profile.get("networkInterfaces") or []
        if isinstance(reference, dict)
    ]


def os_disk_of(vm: Json) -> Json:
    storage = (vm.get("properties") or {}).get("storageProfile") or {}
    os_disk = storage.get("osDisk") or {}
    return os_disk if isinstance(os_disk, dict) else {}


def check_custom_data(custom_data: Any) -> None:
    message = (
        f"Custom data in OSProfile must be in Base64 encoding and with a maximum length of {CUSTOM_DATA_MAX_CHARS} "
        "characters."
    )
    if not isinstance(custom_data, str) or len(custom_data) > CUSTOM_DATA_MAX_CHARS:
        raise ArmError(400, "InvalidParameter", message, target="customData")
    try:
        base64.b64decode(custom_data, validate=True)
    except binascii.Error:
        raise ArmError(400, "InvalidParameter", message, target="customData") from None


def _placement_bytes(sku: AzureSku, placement: str) -> int | None:
    """Room for an ephemeral OS disk in a placement, as the SKU capabilities describe it."""
    temp = int((sku.temp_disk_gib or 0) * GIB)
    if placement == "NvmeDisk":
        return temp if sku.temp_disk_nvme else None
    if placement == "CacheDisk":
        return int(sku.cached_disk_gib * GIB) if sku.cached_disk_gib else None
    if placement == "ResourceDisk":
        return temp if temp and not sku.temp_disk_nvme else None
    return None
