"""AzureCloudProvider: the VMs and NICs behind NodeClaims, through the real async Azure management SDKs.

It launches the way the AKS provider's script-less mode does (research section 3): a NIC named after the
NodeClaim, then a VM of the same name, each a PUT on a deterministic name, so a retried or replayed launch
finds what an earlier attempt made. A VM that already exists is adopted: still being created, it is waited for
as a new create is (a worker that died mid-launch resumes instead of starting over); failed, it is deleted, its
failure goes into the unavailable-offerings cache, and the launch starts over.
Long-running operations are polled here, calling `heartbeat` while they run, so the Temporal activity around the
provider stays alive. The VM's create is waited for at most `AzureSettings.create_wait`: as in the AKS provider, a
launch does not hold on for the tens of seconds Azure takes, and a create that fails after it is found by
`create_failure`, which registration asks while it waits for the node. A failure after the NIC was sent that
settles the launch (a refusal, a capacity or quota error, a failed provisioning) cleans up what the launch made;
one that leaves its outcome unknown (a server error, throttling, a lost response, a failed poll) leaves it for the
retry to adopt, so that no VM is deleted and made again. Capacity and quota failures mark offerings in the
unavailable-offerings cache with the provider's scopes and TTLs; a launch of an offering the cache rules out fails
at once, without calling Azure.

The image and Kubernetes version come from the launch's AKSNodeClass status (`status.images`: the first image the
VM size can boot; `status.kubernetesVersion`) when its image controller has filled them, as the AKS provider
does, and from the settings otherwise; the instance reports the image it booted (`Instance.image_id`, the
NodeClaim's `status.imageID`).

The bootstrap (the VM's custom data, which carries a cluster join token) is fetched through the injected
`bootstrap` callable during the launch and exists only inside it: it is never logged, returned, or put in an
error message (messages are scrubbed of it).

A Windows node (an AKSNodeClass of a Windows image family) is made as AKS makes one (`activities.azure.windows`):
its VM gets the admin account from the injected `windows_admin` (read from the operator's Secret, kept out of
logs and messages as the bootstrap is), a computer name of at most 15 characters, and once it is made the
CustomScriptExtension that runs its bootstrap. A create that outlives the launch gets its extension when a
later look finds the VM made (the adoption of a retry, or registration's `create_failure`).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from enum import Enum
from http import HTTPStatus
from typing import Any, Literal, TypeVar, overload

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.core.polling import AsyncLROPoller
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachine, VirtualMachineExtension
from azure.mgmt.network.aio import NetworkManagementClient
from azure.mgmt.network.models import NetworkInterface
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from activities.azure.bootstrap import BootstrapRequest, bootstrap_request
from activities.azure.errors import ArmError, arm_error, capacity_failure, classify, quota_limit_is_zero
from activities.azure.names import NodeNames, nic_id, nodeclaim_of, provider_id
from activities.azure.prices import RetailPricesClient
from activities.azure.unavailable import UnavailableOfferings
from activities.azure.vm import (
    BILLING_LINUX,
    BILLING_WINDOWS,
    CLUSTER_TAG,
    NODECLAIM_TAG,
    PRIORITY_SPOT,
    Json,
    Security,
    WindowsOS,
    image_id_of,
    image_reference,
    image_reference_for,
    nic_body,
    node_image_version,
    node_tags,
    vm_body,
)
from activities.azure.windows import (
    BOOTSTRAP_EXTENSION,
    LICENSE_NONE,
    LICENSE_WINDOWS_SERVER,
    WindowsAdmin,
    computer_name,
    extension_body,
)
from activities.catalog_source import CatalogSource
from activities.errors import NOT_OWNED
from core import labels
from core.api.aksnodeclass import AKSNodeClass, AKSNodeClassSpec, NetworkPlugin, NetworkPluginMode
from core.cloudprovider import Instance, InstanceState, LaunchRequest
from core.errors import (
    CloudError,
    ConflictError,
    CredentialError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)
from core.instancetypes.azure import REGIONAL_ZONE
from core.instancetypes.catalog import AzureCatalog, AzureSku
from core.instancetypes.images import NodeImages

logger = logging.getLogger(__name__)

T = TypeVar("T")

Bootstrap = Callable[[BootstrapRequest], Awaitable[str]]
"""The node's bootstrap script (custom data, before base64) for a launch, built from the bootstrap secret."""
NodeClassLookup = Callable[[LaunchRequest], Awaitable[AKSNodeClass | None]]
"""The AKSNodeClass of the launch's NodePool (None: the defaults)."""
Heartbeat = Callable[[str], None]
WindowsAdminLookup = Callable[[], Awaitable[WindowsAdmin]]
"""The admin account of Windows nodes (`activities.azure.windows.ClusterWindowsAdmin`)."""

_SUBNET_ID = (
    r"(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+"
    r"/subnets/[^/]+$"
)
_IN_PROGRESS = frozenset({"creating", "updating", "migrating"})
_RUNNING = frozenset({"succeeded", "updating", "migrating"})
_SPOT_PRIORITIES = frozenset({PRIORITY_SPOT.lower(), "low"})
"""`Low` is the older name of spot priority."""
FAILED = "failed"
DELETING = "deleting"
FAILED_STATUS_PREFIX = "ProvisioningState/failed/"
"""Instance-view status code of a VM whose create failed, followed by the ARM error code."""


class AzureSettingsError(ValueError):
    """Azure settings are missing or invalid; the message names every setting to fix."""


class AzureSettings(BaseModel):
    """Where the cluster's nodes go and how they are built (the AKS provider's operator options)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subscription_id: str = Field(min_length=1)
    resource_group: str = Field(min_length=1)
    """The node resource group (`MC_...`), where VMs and NICs are created."""
    location: str = Field(pattern=r"^[a-z0-9]+$")
    cluster_name: str = Field(min_length=1)
    subnet_id: str = Field(pattern=_SUBNET_ID)
    """The default node subnet, for AKSNodeClasses without `vnetSubnetID`."""
    kubernetes_version: str = Field(pattern=r"^v?\d+\.\d+(\.\d+)?$")
    """The cluster's Kubernetes version, which picks the node image release."""
    node_image_version: str = Field(min_length=1)
    """The node image version to boot, e.g. `202512.18.0`."""
    ssh_public_key: str = Field(min_length=1)
    cluster_endpoint: str = Field(min_length=1)
    """The API server's host name that nodes join (the AKS provider's `--cluster-endpoint`)."""
    bootstrap_token_secret: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
    )
    """`<namespace>/<name>` of the kubeadm-style bootstrap token Secret nodes join with."""
    admin_username: str = "azureuser"
    kubelet_identity_id: str | None = None
    """Resource ID of the kubelet's user-assigned identity, attached to every VM."""
    node_identities: tuple[str, ...] = ()
    """More user-assigned identity resource IDs to attach to every VM."""
    image_gallery_subscription_id: str | None = None
    """AKS's Shared Image Gallery subscription (managed AKS); without it, images come from the Community Gallery
    (which has no Windows images)."""
    windows_admin_secret: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
    )
    """`<namespace>/<name>` of the `kubernetes.io/basic-auth` Secret with Windows nodes' admin account (AKS's
    `windowsProfile`); Windows launches fail without it."""
    windows_license_type: Literal["None", "Windows_Server"] = LICENSE_NONE
    """AKS's `windowsProfile.licenseType`: None, or Windows_Server for Azure Hybrid Benefit."""
    additional_tags: dict[str, str] = Field(default_factory=dict)
    network_plugin: NetworkPlugin = NetworkPlugin.AZURE
    network_plugin_mode: NetworkPluginMode = NetworkPluginMode.OVERLAY
    load_balancer_backend_pool_ids: tuple[str, ...] = ()
    network_security_group_id: str | None = None
    poll_interval: timedelta = timedelta(seconds=3)
    """Between polls of a long-running operation."""
    heartbeat_interval: timedelta = timedelta(seconds=5)
    """Between heartbeats while waiting on Azure."""
    create_wait: timedelta = Field(default=timedelta(seconds=10), ge=timedelta(0))
    """How long a launch waits for its VM's create before it returns with the VM still being created. The AKS
    provider returns once the PUT is accepted; a create that ends within this wait is settled in the launch (a
    failure there moves the lifecycle to its next offering), and one that ends later is read by registration's
    looks (`create_failure`). Azure's creates take tens of seconds: a launch holds its activity slot this long,
    not that long."""

    @classmethod
    def load(cls, values: Mapping[str, Any], name: Callable[[str], str] = str) -> AzureSettings:
        """Settings from `values`; `AzureSettingsError` names (with `name`, e.g. the environment variable) every
        missing or invalid setting at once."""
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            missing = [
                name(str(detail["loc"][0])) for detail in error.errors() if detail["type"] == "missing"
            ]
            invalid = [
                f"{name(str(detail['loc'][0]))}: {detail['msg']}"
                for detail in error.errors(include_url=False)
                if detail["type"] != "missing" and detail["loc"]
            ]
            parts = []
            if missing:
                parts.append(f"missing Azure settings: {', '.join(missing)}")
            parts.extend(f"invalid Azure setting {problem}" for problem in invalid)
            raise AzureSettingsError("; ".join(parts)) from None

    @property
    def identities(self) -> tuple[str, ...]:
        """Every user-assigned identity a VM gets: the kubelet identity first, without repeats."""
        first = (self.kubelet_identity_id,) if self.kubelet_identity_id else ()
        return tuple(dict.fromkeys((*first, *self.node_identities)))


class AzureCloudProvider:
    """Instances for NodeClaims as Azure VMs; implements `core.cloudprovider.CloudProvider`."""

    def __init__(
        self,
        compute_client: ComputeManagementClient,
        network_client: NetworkManagementClient,
        settings: AzureSettings,
        bootstrap: Bootstrap,
        *,
        catalog: AzureCatalog | CatalogSource | None = None,
        node_class: NodeClassLookup | None = None,
        unavailable: UnavailableOfferings | None = None,
        heartbeat: Heartbeat | None = None,
        windows_admin: WindowsAdminLookup | None = None,
        retail_prices: RetailPricesClient | None = None,
    ) -> None:
        self.compute = compute_client
        self.network = network_client
        self.retail_prices = retail_prices or RetailPricesClient()
        """Where the catalog refresh reads live prices: the cloud's Retail Prices API (none in a sovereign cloud)."""
        self.settings = settings
        self.catalogs = (
            CatalogSource.of(catalog) if catalog is not None else CatalogSource.shipped(settings.location)
        )
        """The VM sizes of the region, read at each call, so a refreshed catalog takes effect at the next."""
        self.unavailable = unavailable or UnavailableOfferings()
        self._bootstrap = bootstrap
        self._node_class = node_class
        self._heartbeat = heartbeat or (lambda _detail: None)
        self._windows_admin = windows_admin

    @property
    def catalog(self) -> AzureCatalog:
        return self.catalogs.current

    # --- CloudProvider -------------------------------------------------------------------------------------

    async def create(self, request: LaunchRequest) -> Instance:
        """The NodeClaim's VM: adopted if it exists, else made (NIC, then VM) and waited for."""
        names = NodeNames.of(request.name)
        offering = Offering(request.instance_type, request.zone, request.capacity_type)
        existing = await self._find_vm(names.vm)
        if existing is not None:
            adopted = await self._adopt(existing, names)
            if adopted is not None:
                return adopted
        sku = self._sku(request.instance_type)
        self._raise_if_unavailable(sku, offering)
        nodeclass = await self._node_class(request) if self._node_class else None
        spec = nodeclass.spec if nodeclass is not None else AKSNodeClassSpec()
        image_id, kubernetes_version = self._image(nodeclass, sku)
        settings = self.settings
        script = await self._bootstrap(
            bootstrap_request(
                request,
                nodeclass,
                sku,
                kubernetes_version,
                node_image_version(image_id),
                spec.resolved_max_pods(settings.network_plugin, settings.network_plugin_mode),
            )
        )
        custom_data = base64.b64encode(script.encode()).decode()
        secrets: tuple[str, ...] = (script, custom_data)
        windows = None
        if spec.image_family.is_windows:
            windows = WindowsOS(
                computer_name(names.vm, request.name), await self._windows_account(), self._license_type
            )
            secrets = (*secrets, windows.admin.password)
        nic, vm_request = self._bodies(
            request, names, sku, spec, custom_data, image_reference_for(image_id), windows
        )
        logger.info(
            "creating VM %s (%s, zone %s, %s)", names.vm, sku.name, request.zone, request.capacity_type
        )
        try:
            await self._wait(
                await self.network.network_interfaces.begin_create_or_update(
                    settings.resource_group,
                    names.nic,
                    NetworkInterface(nic),
                    polling_interval=self._poll_seconds,
                ),
                f"creating NIC {names.nic}",
            )
            vm = await self._wait(
                await self.compute.virtual_machines.begin_create_or_update(
                    settings.resource_group,
                    names.vm,
                    VirtualMachine(vm_request),
                    polling_interval=self._poll_seconds,
                ),
                f"creating VM {names.vm}",
                settings.create_wait,
            )
            if vm is not None and windows is not None:
                await self._bootstrap_extension(names.vm, vm_request["tags"])
        except AzureError as error:
            failure = self._launch_failure(error, sku, offering, secrets)
            if _settles_launch(error, failure):
                await self._clean_up(names)
            # Not chained: the SDK error's own message is not scrubbed of the bootstrap.
            raise failure from None
        if vm is None:
            # Still being created: the instance as the PUT asked for it (the AKS provider builds its ID the same
            # way rather than read it back).
            logger.info("VM %s is still being created; its node registers when it is done", names.vm)
            return Instance(
                name=request.name,
                provider_id=provider_id(settings.subscription_id, settings.resource_group, names.vm),
                instance_type=sku.name,
                zone=request.zone,
                capacity_type=request.capacity_type,
                state=InstanceState.CREATING,
                tags=dict(vm_request.get("tags") or {}),
                created_at=datetime.now(UTC),
                image_id=image_id,
            )
        return self._instance(vm)

    async def create_failure(self, name: str) -> CloudError | None:
        """Why the NodeClaim's VM failed to be created, when a create that outlived the launch's wait failed (the
        offering is ruled out as a failed launch's is, and the VM and its NIC are left for the lifecycle to
        delete); None while it is being created or once it is made. A VM that is gone is a failure too: its node
        will never register."""
        vm_name = NodeNames.of(name).vm
        vm = await self._find_vm(vm_name)
        if vm is None or not self._owned(vm):
            return NotFoundError(f"VM {vm_name} is gone before its node registered", code="ResourceNotFound")
        if _state(vm) == FAILED:
            return await self._failed_create(vm)
        await self._complete(vm)
        return None

    async def get(self, name: str) -> Instance:
        """The NodeClaim's VM; `NotFoundError` when there is none (or it is not this cluster's)."""
        vm = await self._find_vm(NodeNames.of(name).vm)
        if vm is None or not self._owned(vm):
            raise NotFoundError(f"no VM for NodeClaim {name!r}", code="ResourceNotFound")
        return self._instance(vm)

    async def list(self) -> builtins.list[Instance]:
        """The VMs in the node resource group tagged for this cluster, sorted by name."""
        try:
            instances = [
                self._instance(vm)
                async for vm in self.compute.virtual_machines.list(self.settings.resource_group)
                if self._owned(vm)
            ]
        except AzureError as error:
            raise classify(error) from error
        return sorted(instances, key=lambda instance: instance.name)

    async def delete(self, name: str) -> None:
        """Delete the NodeClaim's VM and wait, then its NIC, then its OS disk unless it went with the VM.

        Anything already gone counts as deleted. A VM of the same name that is not this cluster's is left alone.
        """
        names = NodeNames.of(name)
        vm = await self._find_vm(names.vm)
        if vm is not None and not self._owned(vm):
            raise ConflictError(
                f"VM {names.vm} is not tagged for cluster {self.settings.cluster_name}; not deleting it",
                code=NOT_OWNED,
            )
        try:
            await self._delete_resources(names, vm)
        except AzureError as error:
            raise classify(error) from error

    # --- launch helpers ------------------------------------------------------------------------------------

    def _sku(self, name: str) -> AzureSku:
        try:
            return self.catalog.sku(name)
        except KeyError:
            raise InvalidError(
                f"VM size {name!r} is not offered in {self.settings.location}", code="InvalidParameter"
            ) from None

    def _image(self, nodeclass: AKSNodeClass | None, sku: AzureSku) -> tuple[str, str]:
        """The image version ID and Kubernetes version a VM of this size boots: from the AKSNodeClass status when
        its image controller resolved them, else from the image family and the settings (`NodeImages`, whose
        rule also leaves out of planning the sizes no image boots on)."""
        settings = self.settings
        images = NodeImages.of(nodeclass)
        version = images.kubernetes_version or settings.kubernetes_version
        chosen = images.image(sku, version)
        if isinstance(chosen, str):
            return chosen, version
        reference = image_reference(
            chosen, chosen.version or settings.node_image_version, settings.image_gallery_subscription_id
        )
        return image_id_of(reference), version

    @property
    def _license_type(self) -> str:
        return (
            LICENSE_WINDOWS_SERVER
            if self.settings.windows_license_type == LICENSE_WINDOWS_SERVER
            else LICENSE_NONE
        )

    async def _windows_account(self) -> WindowsAdmin:
        if self._windows_admin is None:
            raise InvalidError(
                "this provider has no Windows admin account to give Windows nodes", code="WindowsAdminNotSet"
            )
        return await self._windows_admin()

    async def _complete(self, vm: VirtualMachine) -> None:
        """What a made VM still needs: a Windows VM its bootstrap extension."""
        if _state(vm) in _RUNNING and _os_type(vm) == "windows":
            try:
                await self._bootstrap_extension(vm.name or "", dict(vm.tags or {}))
            except AzureError as error:
                raise classify(error) from error

    async def _bootstrap_extension(self, vm_name: str, tags: Mapping[str, str]) -> None:
        """Install the CustomScriptExtension that runs a Windows VM's bootstrap, unless it is there."""
        group = self.settings.resource_group
        try:
            await self.compute.virtual_machine_extensions.get(group, vm_name, BOOTSTRAP_EXTENSION)
            return
        except ResourceNotFoundError:
            pass
        logger.info("installing the bootstrap extension of VM %s", vm_name)
        await self._wait(
            await self.compute.virtual_machine_extensions.begin_create_or_update(
                group,
                vm_name,
                BOOTSTRAP_EXTENSION,
                VirtualMachineExtension(extension_body(self.settings.location, tags)),
                polling_interval=self._poll_seconds,
            ),
            f"installing extension {BOOTSTRAP_EXTENSION} on VM {vm_name}",
        )

    def _bodies(
        self,
        request: LaunchRequest,
        names: NodeNames,
        sku: AzureSku,
        spec: AKSNodeClassSpec,
        custom_data: str,
        image: Json,
        windows: WindowsOS | None = None,
    ) -> tuple[Json, Json]:
        """The NIC and VM create bodies of a launch."""
        settings = self.settings
        security = _security(spec)
        tags = node_tags(
            settings.cluster_name,
            request.nodepool,
            request.name,
            settings.additional_tags,
            spec.tags,
            request.tags,
            billing=BILLING_LINUX if windows is None else BILLING_WINDOWS,
        )
        nic = nic_body(
            name=names.nic,
            location=settings.location,
            subnet_id=spec.vnet_subnet_id or settings.subnet_id,
            accelerated_networking=sku.accelerated_networking,
            tags=tags,
            ip_configurations=self._ip_configurations(spec),
            backend_pool_ids=settings.load_balancer_backend_pool_ids,
            network_security_group_id=settings.network_security_group_id,
        )
        vm = vm_body(
            names=names,
            location=settings.location,
            sku=sku,
            zone=request.zone,
            capacity_type=request.capacity_type,
            os_disk_size_gb=spec.os_disk_size_gb,
            image=image,
            nic_id=nic_id(settings.subscription_id, settings.resource_group, names.nic),
            admin_username=settings.admin_username,
            ssh_public_key=settings.ssh_public_key,
            custom_data=custom_data,
            tags=tags,
            identities=settings.identities,
            security=security,
            windows=windows,
        )
        return nic, vm

    def _raise_if_unavailable(self, sku: AzureSku, offering: Offering) -> None:
        """Fail without calling Azure when a recent failure already ruled the offering out."""
        block = self.unavailable.blocked(sku, offering.zone, offering.capacity_type)
        if block is None:
            return
        message = (
            f"{sku.name} ({offering.capacity_type}) in zone {offering.zone} is unavailable until "
            f"{block.until.isoformat(timespec='seconds')} after {block.reason.value}"
        )
        scope = block.reason.quota_scope
        if scope is not None:
            raise QuotaExceededError(message, offering, scope=scope, code=block.reason.value)
        raise InsufficientCapacityError(message, offering, code=block.reason.value)

    def _ip_configurations(self, spec: AKSNodeClassSpec) -> int:
        """Azure CNI with pods in the node subnet gives the NIC one IP configuration per pod; others need one."""
        settings = self.settings
        if (
            settings.network_plugin is NetworkPlugin.AZURE
            and settings.network_plugin_mode is NetworkPluginMode.NODE_SUBNET
        ):
            return spec.resolved_max_pods(settings.network_plugin, settings.network_plugin_mode)
        return 1

    def _launch_failure(
        self, error: AzureError | ArmError, sku: AzureSku, offering: Offering, secrets: tuple[str, ...]
    ) -> CloudError:
        """The classified launch error; capacity and quota failures also mark the cache."""
        details = error if isinstance(error, ArmError) else arm_error(error)
        failure = classify(details, offering, redact=secrets)
        kind = capacity_failure(details)
        if kind is not None:
            self.unavailable.record(
                kind, sku, offering.zone, offering.capacity_type, self.catalog, quota_limit_is_zero(details)
            )
        logger.warning("launching %s failed: %s", offering.instance_type, failure)
        return failure

    async def _adopt(self, vm: VirtualMachine, names: NodeNames) -> Instance | None:
        """Take over a VM an earlier attempt made, waiting while it is being created. A VM whose create failed
        is removed and its failure recorded like a launch failure; then `None`: the launch starts over."""
        if not self._owned(vm):
            raise ConflictError(
                f"VM {names.vm} exists but is not tagged for cluster {self.settings.cluster_name}",
                code=NOT_OWNED,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.create_wait.total_seconds()
        while (state := _state(vm)) in _IN_PROGRESS:
            if loop.time() >= deadline:
                return self._instance(vm)  # still being created, as a new create that outlives the wait
            self._heartbeat(f"waiting for VM {names.vm}: {state}")
            await asyncio.sleep(min(self._poll_seconds, max(deadline - loop.time(), 0.0)))
            found = await self._find_vm(names.vm)
            if found is None:
                # Deleted while being made: by the lifecycle that gave up on this launch (this attempt outlived
                # it), or by a failed attempt's clean-up. Not made again here; a retry of a launch still
                # wanted starts it afresh.
                raise TransientError(f"VM {names.vm} was deleted while being created", code="Deleted")
            vm = found
        if state == DELETING:
            raise TransientError(
                f"VM {names.vm} is being deleted; launch again once it is gone", code="Deleting"
            )
        if state != FAILED:
            await self._complete(vm)
            return self._instance(vm)
        await self._failed_create(vm)
        await self._clean_up(names)
        return None

    async def _failed_create(self, vm: VirtualMachine) -> CloudError:
        """The classified error of a VM whose create failed, recorded as a failed launch of the offering the VM
        was made with (which may not be the one a launch asks for now)."""
        made = self._instance(vm)
        return self._launch_failure(
            await self._provisioning_error(vm.name or ""),
            self._sku(made.instance_type),
            Offering(made.instance_type, made.zone, made.capacity_type),
            (),
        )

    async def _provisioning_error(self, vm_name: str) -> ArmError:
        """Why a VM's create failed, from its instance view (`ProvisioningState/failed/<code>`)."""
        try:
            vm = await self.compute.virtual_machines.get(
                self.settings.resource_group, vm_name, expand="instanceView"
            )
        except AzureError as error:
            raise classify(error) from error
        view = vm.properties.instance_view if vm.properties else None
        for status in (view.statuses if view else None) or []:
            code = status.code or ""
            if code.startswith(FAILED_STATUS_PREFIX):
                return ArmError(
                    status=200, code=code.removeprefix(FAILED_STATUS_PREFIX), message=status.message or ""
                )
        return ArmError(status=200, code="ProvisioningFailed", message=f"VM {vm_name} failed provisioning")

    async def _clean_up(self, names: NodeNames) -> None:
        """Delete what a failed launch made; failures are logged and left to garbage collection."""
        try:
            await self._delete_resources(names, await self._find_vm(names.vm))
        except (AzureError, CloudError) as error:
            logger.warning("cleaning up after the failed launch of %s failed: %s", names.vm, error)

    # --- delete helpers ------------------------------------------------------------------------------------

    async def _delete_resources(self, names: NodeNames, vm: VirtualMachine | None) -> None:
        group = self.settings.resource_group
        disk_goes_with_vm = False
        if vm is not None:
            disk = (
                vm.properties.storage_profile.os_disk
                if vm.properties and vm.properties.storage_profile
                else None
            )
            disk_goes_with_vm = disk is not None and _text(disk.delete_option).lower() == "delete"
            await self._gone(
                self.compute.virtual_machines.begin_delete(
                    group, names.vm, force_deletion=True, polling_interval=self._poll_seconds
                ),
                f"deleting VM {names.vm}",
            )
        await self._gone(
            self.network.network_interfaces.begin_delete(
                group, names.nic, polling_interval=self._poll_seconds
            ),
            f"deleting NIC {names.nic}",
        )
        if not disk_goes_with_vm:
            await self._gone(
                self.compute.disks.begin_delete(group, names.os_disk, polling_interval=self._poll_seconds),
                f"deleting disk {names.os_disk}",
            )

    async def _gone(self, begin: Awaitable[AsyncLROPoller[None]], what: str) -> None:
        """Run a delete to the end; a resource that is not there is already deleted."""
        try:
            await self._wait(await begin, what)
        except ResourceNotFoundError:
            return

    # --- shared --------------------------------------------------------------------------------------------

    @property
    def _poll_seconds(self) -> float:
        return self.settings.poll_interval.total_seconds()

    @overload
    async def _wait(self, poller: AsyncLROPoller[T], what: str) -> T: ...

    @overload
    async def _wait(self, poller: AsyncLROPoller[T], what: str, at_most: timedelta) -> T | None: ...

    async def _wait(self, poller: AsyncLROPoller[T], what: str, at_most: timedelta | None = None) -> T | None:
        """The operation's result, heartbeating with its status until it is done; None when it is not done
        `at_most` from now (the operation goes on in Azure)."""
        result = asyncio.ensure_future(poller.result())
        loop = asyncio.get_running_loop()
        deadline = None if at_most is None else loop.time() + at_most.total_seconds()
        try:
            while True:
                self._heartbeat(f"{what}: {poller.status()}")
                beat = self.settings.heartbeat_interval.total_seconds()
                if deadline is not None:
                    beat = min(beat, deadline - loop.time())
                done, _ = await asyncio.wait({result}, timeout=max(beat, 0.0))
                if done:
                    return result.result()
                if deadline is not None and loop.time() >= deadline:
                    return None
        finally:
            result.cancel()

    async def _find_vm(self, vm_name: str) -> VirtualMachine | None:
        try:
            return await self.compute.virtual_machines.get(self.settings.resource_group, vm_name)
        except ResourceNotFoundError:
            return None
        except AzureError as error:
            raise classify(error) from error

    def _owned(self, vm: VirtualMachine) -> bool:
        return (vm.tags or {}).get(CLUSTER_TAG) == self.settings.cluster_name

    def _instance(self, vm: VirtualMachine) -> Instance:
        settings = self.settings
        properties = vm.properties
        tags = dict(vm.tags or {})
        vm_name = vm.name or ""
        zones = vm.zones or []
        size = properties.hardware_profile.vm_size if properties and properties.hardware_profile else None
        created: datetime | None = properties.time_created if properties else None
        storage = properties.storage_profile if properties else None
        reference = storage.image_reference if storage else None
        return Instance(
            name=tags.get(NODECLAIM_TAG) or nodeclaim_of(vm_name),
            provider_id=provider_id(settings.subscription_id, settings.resource_group, vm_name),
            instance_type=_text(size),
            zone=f"{settings.location}-{zones[0]}" if zones else REGIONAL_ZONE,
            capacity_type=(
                labels.CAPACITY_TYPE_SPOT
                if properties and _text(properties.priority).lower() in _SPOT_PRIORITIES
                else labels.CAPACITY_TYPE_ON_DEMAND
            ),
            state=_instance_state(_state(vm)),
            tags=tags,
            created_at=created,
            image_id=(reference.community_gallery_image_id or reference.id or "") if reference else "",
        )

    # --- garbage collection: the cluster's NICs ------------------------------------------------------------

    async def list_nics(self) -> builtins.list[NetworkInterface]:
        """The NICs in the node resource group tagged for this cluster, sorted by name."""
        try:
            nics = [
                nic
                async for nic in self.network.network_interfaces.list(self.settings.resource_group)
                if (nic.tags or {}).get(CLUSTER_TAG) == self.settings.cluster_name
            ]
        except AzureError as error:
            raise classify(error) from error
        return sorted(nics, key=lambda nic: nic.name or "")

    async def delete_nic(self, name: str) -> None:
        """Delete a NIC and wait; one that is already gone counts as deleted."""
        try:
            await self._gone(
                self.network.network_interfaces.begin_delete(
                    self.settings.resource_group, name, polling_interval=self._poll_seconds
                ),
                f"deleting NIC {name}",
            )
        except AzureError as error:
            raise classify(error) from error


def _settles_launch(error: AzureError, failure: CloudError) -> bool:
    """Whether a failed launch is over: its request was refused for good, or its operation ended failed. A server
    error, throttling, a lost response or a failed poll says nothing of the VM, which may be made or on its way:
    it stays for the retry to adopt (deleting it would have the retry make it a second time), and a lifecycle that
    gives up on the launch deletes it. So does a refused identity, which could not have made anything this time."""
    if not isinstance(failure, TransientError | ThrottledError | CredentialError):
        return True
    return arm_error(error).status == HTTPStatus.OK  # the operation ran and failed


def _security(spec: AKSNodeClassSpec) -> Security:
    trusted = spec.security.trusted_launch if spec.security else None
    return Security(
        encryption_at_host=spec.encryption_at_host,
        secure_boot=bool(trusted and trusted.secure_boot),
        vtpm=bool(trusted and trusted.vtpm),
    )


def _text(value: object) -> str:
    """An SDK value as the string Azure sent (the SDK turns known values into enums)."""
    if value is None:
        return ""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _os_type(vm: VirtualMachine) -> str:
    """The VM's OS (`linux`, `windows`), from its OS disk."""
    storage = vm.properties.storage_profile if vm.properties else None
    disk = storage.os_disk if storage else None
    return _text(disk.os_type if disk else None).lower()


def _state(vm: VirtualMachine) -> str:
    return _text(vm.properties.provisioning_state if vm.properties else None).lower()


def _instance_state(state: str) -> InstanceState:
    """A VM being created, or whose create failed, is not running yet; updates happen to running VMs."""
    if state == DELETING:
        return InstanceState.DELETING
    if state in _RUNNING:
        return InstanceState.RUNNING
    return InstanceState.CREATING
