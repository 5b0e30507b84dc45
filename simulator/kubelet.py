"""The kubelet model: what happens on a VM of the simulated Azure (the ARM emulator's state) once it runs.

A VM tagged for the cluster (`karpenter.azure.com_cluster`) whose create has succeeded boots; after the boot and
registration delays its kubelet reads the VM's custom data (`simulator.nodeboot`) and, if the bootstrap token is
the cluster's, registers a Node named after the VM's computer name with the labels and taints of the kubelet
flags (`--node-labels`, `--register-with-taints`), the VM size's capacity and allocatable, the AKS provider ID,
and the Kubernetes version and node image of the bootstrap. A wrong token, or custom data without a bootstrap,
never registers, as TLS bootstrapping would refuse it. The Node turns Ready after another delay, and the startup
taints go away after a third, as the agents that own them would remove them. A VM being deleted (or gone)
stops its kubelet, so the Node turns NotReady (the NodeClaim lifecycle deletes the Node object itself). Pods
bound to a Ready node run and turn Ready after the pod delay.

A VM registers at most once: a Node deleted while its VM still runs is not registered again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from core import labels
from core.api.kube import (
    Condition,
    Node,
    NodeSpec,
    NodeStatus,
    NodeSystemInfo,
    Pod,
    PodPhase,
    is_node_ready,
    is_terminal,
)
from core.api.kube import is_pod_ready as is_ready
from core.api.meta import ObjectMeta
from core.errors import ConflictError
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.types import InstanceType
from core.resources import format_resources
from simulator.arm import ArmState, ProvisioningState, Resource, ResourceType
from simulator.nodeboot import BootstrapError, NodeBootstrap, read_custom_data
from simulator.state import NODE, NODECLAIM, POD, ClusterState, Write, set_condition

logger = logging.getLogger(__name__)

CLUSTER_TAG = "karpenter.azure.com_cluster"
NODECLAIM_TAG = "karpenter.sh_nodeclaim"
VM_PREFIX = "aks-"
STARTUP_TAINTS_TAG = "nodewright_startup-taints"
"""A VM tag listing startup taint keys (comma-separated), for VMs launched without a NodeClaim; otherwise the
startup taints are those of the NodeClaim the VM was made for."""
NODE_IMAGE_VERSION_LABEL = "kubernetes.azure.com/node-image-version"
_BOOTED = frozenset({ProvisioningState.SUCCEEDED.value, ProvisioningState.UPDATING.value})
"""A VM in these states has finished creating (updates happen to running VMs)."""


@functools.cache
def shipped_instance_types(region: str) -> dict[str, InstanceType]:
    """The VM sizes of the shipped catalog of a region, by name (built once per region)."""
    catalog = load_shipped_catalog(region)
    return {instance_type.name: instance_type for instance_type in azure_instance_types(catalog)}


def provider_id(subscription_id: str, resource_group: str, vm_name: str) -> str:
    """The Node `spec.providerID` of a VM, as AKS writes it (resource group lower-cased)."""
    return (
        f"azure:///subscriptions/{subscription_id}/resourceGroups/{resource_group.lower()}"
        f"/providers/Microsoft.Compute/virtualMachines/{vm_name}"
    )


class KubeletSettings(BaseModel):
    """How long each step of a node's and a pod's start takes."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    boot_delay: timedelta = timedelta(seconds=1)
    """From the VM's create succeeding to its kubelet starting."""
    registration_delay: timedelta = timedelta(seconds=1)
    """From the kubelet starting to its Node object."""
    node_ready_delay: timedelta = timedelta(seconds=1)
    """From registration to the Node being Ready."""
    startup_taint_delay: timedelta = timedelta(seconds=1)
    """From Ready to the startup taints being removed."""
    pod_ready_delay: timedelta = timedelta(seconds=0.5)
    """From a pod being bound to a Ready node to the pod running and Ready."""


@dataclass(slots=True)
class _Progress:
    """How far a VM's node has come."""

    node: str
    registered_at: float
    ready_at: float | None = None
    initialized: bool = False
    stopped: bool = False


class Kubelet:
    """Registers, readies and initializes the Node of every running VM of the cluster, and starts the pods
    bound to nodes."""

    def __init__(
        self,
        state: ClusterState,
        arm: ArmState,
        settings: KubeletSettings,
        cluster_name: str,
        tokens: Callable[[], frozenset[str]],
    ) -> None:
        """`tokens` gives the bootstrap tokens the cluster accepts now."""
        self.settings = settings
        self._state = state
        self._arm = arm
        self._cluster_name = cluster_name
        self._tokens = tokens
        self._types = shipped_instance_types(arm.settings.region)
        self._running_since: dict[str, float] = {}
        self._progress: dict[str, _Progress] = {}
        self._refused: set[str] = set()
        self._never_register: set[str] = set()
        self._bound_since: dict[str, float] = {}

    def never_register(self, vm_name: str) -> None:
        """Make this VM's kubelet never register (a node whose boot fails), e.g. to test the registration TTL."""
        self._never_register.add(vm_name.lower())

    def step(self, now: float) -> float | None:
        """Do what is due; the time something next falls due, if anything is waiting."""
        vms = [vm for vm in self._arm.resources(ResourceType.VIRTUAL_MACHINE) if self._ours(vm)]
        due = [self._run_vm(vm, now) for vm in vms]
        self._stop_vanished({vm.name.lower() for vm in vms})
        due.append(self._start_pods(now))
        return min((at for at in due if at is not None), default=None)

    def _ours(self, vm: Resource) -> bool:
        return vm.tags.get(CLUSTER_TAG) == self._cluster_name

    def _run_vm(self, vm: Resource, now: float) -> float | None:
        key = vm.name.lower()
        progress = self._progress.get(key)
        state = vm.provisioning_state
        if state == ProvisioningState.DELETING:
            if progress is not None and not progress.stopped:
                self._stop(progress)
            return None
        if state not in _BOOTED or key in self._never_register or key in self._refused:
            return None
        settings = self.settings
        if progress is None:
            running_since = self._running_since.setdefault(key, now)
            at = running_since + (settings.boot_delay + settings.registration_delay).total_seconds()
            if now < at:
                return at
            registered = self._register(vm, now)
            if registered is None:
                self._refused.add(key)
                return None
            progress = registered
        if progress.stopped:
            return None
        if progress.ready_at is None:
            at = progress.registered_at + settings.node_ready_delay.total_seconds()
            if now < at:
                return at
            self._report_ready(progress.node, True)
            progress.ready_at = now
        if not progress.initialized:
            at = progress.ready_at + settings.startup_taint_delay.total_seconds()
            if now < at:
                return at
            self._remove_startup_taints(vm, progress.node)
            progress.initialized = True
        return None

    def _bootstrap(self, vm: Resource) -> NodeBootstrap | None:
        """The VM's bootstrap if it can join the cluster; None (logged, without the token) if it cannot."""
        if vm.custom_data is None:
            logger.warning("VM %s has no custom data; its kubelet cannot join the cluster", vm.name)
            return None
        try:
            boot = read_custom_data(vm.custom_data)
        except BootstrapError as error:
            logger.warning("VM %s cannot bootstrap: %s", vm.name, error)
            return None
        if boot.token not in self._tokens():
            logger.warning(
                "VM %s: TLS bootstrap refused, its bootstrap token is not a token of this cluster", vm.name
            )
            return None
        return boot

    def _register(self, vm: Resource, now: float) -> _Progress | None:
        boot = self._bootstrap(vm)
        if boot is None:
            return None
        properties = vm.properties
        size = str((properties.get("hardwareProfile") or {}).get("vmSize", ""))
        instance_type = self._types.get(size) or self._types.get(_by_lower(self._types, size))
        name = str((properties.get("osProfile") or {}).get("computerName") or vm.name)
        node_labels = {**boot.labels, labels.HOSTNAME: name}
        if boot.node_image_version:
            node_labels[NODE_IMAGE_VERSION_LABEL] = boot.node_image_version
        settings = self._arm.settings
        capacity = format_resources(instance_type.capacity) if instance_type else {}
        allocatable = format_resources(instance_type.allocatable()) if instance_type else {}
        version = boot.kubernetes_version
        node = Node(
            metadata=ObjectMeta(name=name, labels=node_labels),
            spec=NodeSpec(
                taints=[taint.model_copy() for taint in boot.taints],
                provider_id=provider_id(settings.subscription_id, vm.resource_group, vm.name),
            ),
            status=NodeStatus(
                capacity=dict(capacity),
                allocatable=dict(allocatable),
                conditions=[
                    Condition(
                        type="Ready",
                        status="False",
                        reason="KubeletNotReady",
                        message="container runtime is starting",
                    )
                ],
                node_info=NodeSystemInfo(
                    kubelet_version=f"v{version.removeprefix('v')}" if version else "",
                    operating_system=node_labels.get(labels.OS, "linux"),
                    architecture=node_labels.get(labels.ARCH, ""),
                    container_runtime_version="containerd://1.7.27",
                ),
            ),
        )
        # A Node of that name made by hand is left as it is.
        with contextlib.suppress(ConflictError):
            self._state.create(NODE.name, node)
        progress = _Progress(node=name, registered_at=now)
        self._progress[vm.name.lower()] = progress
        return progress

    def _report_ready(self, name: str, ready: bool) -> None:
        node = self._state.get(NODE.name, name)
        if node is None:
            return
        if ready:
            condition = Condition(
                type="Ready", status="True", reason="KubeletReady", message="kubelet is posting ready status"
            )
        else:
            condition = Condition(
                type="Ready",
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
            )
        status = node.status.model_copy(
            update={"conditions": set_condition(node.status.conditions, condition)}
        )
        self._state.update(NODE.name, node.model_copy(update={"status": status}), Write.STATUS)

    def _stop(self, progress: _Progress) -> None:
        self._report_ready(progress.node, False)
        progress.stopped = True

    def _stop_vanished(self, present: set[str]) -> None:
        """Stop the kubelets of VMs that are gone, and forget them once their Node is gone too."""
        for key in [key for key in self._running_since if key not in present]:
            del self._running_since[key]
        self._refused &= present
        for key, progress in list(self._progress.items()):
            if key in present:
                continue
            if not progress.stopped:
                self._stop(progress)
            if self._state.get(NODE.name, progress.node) is None:
                del self._progress[key]

    def _remove_startup_taints(self, vm: Resource, node_name: str) -> None:
        tags = vm.tags
        keys = {key for key in tags.get(STARTUP_TAINTS_TAG, "").split(",") if key}
        claim = self._state.get(NODECLAIM.name, tags.get(NODECLAIM_TAG) or vm.name.removeprefix(VM_PREFIX))
        if claim is not None:
            keys.update(taint.key for taint in claim.spec.startup_taints)
        node = self._state.get(NODE.name, node_name)
        if node is None or not keys:
            return
        spec = node.spec.model_copy(
            update={"taints": [taint for taint in node.spec.taints if taint.key not in keys]}
        )
        self._state.update(NODE.name, node.model_copy(update={"spec": spec}), Write.OBJECT)

    def _start_pods(self, now: float) -> float | None:
        """Pods bound to Ready nodes run and turn Ready once they have been bound for the pod delay."""
        delay = self.settings.pod_ready_delay.total_seconds()
        ready_nodes = {node.metadata.name for node in self._state.nodes() if is_node_ready(node)}
        waiting: dict[str, float] = {}
        due: list[float] = []
        for pod in self._state.pods():
            if pod.spec.node_name not in ready_nodes or is_ready(pod) or is_terminal(pod):
                continue
            if pod.metadata.deletion_timestamp is not None:
                continue
            since = self._bound_since.get(pod.metadata.uid, now)
            if now >= since + delay:
                self._run(pod)
            else:
                waiting[pod.metadata.uid] = since
                due.append(since + delay)
        self._bound_since = waiting
        return min(due, default=None)

    def _run(self, pod: Pod) -> None:
        conditions = pod.status.conditions
        for condition_type in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            conditions = set_condition(conditions, Condition(type=condition_type, status="True"))
        status = pod.status.model_copy(update={"phase": PodPhase.RUNNING, "conditions": conditions})
        self._state.update(POD.name, pod.model_copy(update={"status": status}), Write.STATUS)


def _by_lower(types: dict[str, InstanceType], size: str) -> str:
    """The catalog name of a VM size written in another case (ARM names are case-insensitive)."""
    return next((name for name in types if name.lower() == size.lower()), size)
