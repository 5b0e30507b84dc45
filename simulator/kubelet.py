"""The kubelet model: what happens on a VM of the simulated cloud once it runs.

After the registration delay its Node appears, named after the VM, with the labels and taints of the
LaunchRequest (the NodePool's taints, startup taints and `karpenter.sh/unregistered`), the instance type's
capacity and allocatable, and the AKS provider ID. The Node turns Ready after another delay, and the startup
taints go away after a third, as the agents that own them would remove them. A VM marked never to register
gets no Node; a VM being deleted stops its kubelet, so the Node turns NotReady (the NodeClaim lifecycle
deletes the Node object itself). Pods bound to a Ready node run and turn Ready after the pod delay.

A VM registers at most once: a Node deleted while its VM still runs is not registered again.
"""

from __future__ import annotations

import contextlib
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
from core.resources import format_resources
from core.scheduling.requirements import Operator
from simulator.compute import Compute, Machine
from simulator.state import NODE, NODECLAIM, POD, ClusterState, Write, set_condition

STARTUP_TAINTS_TAG = "nodewright_startup-taints"
"""A LaunchRequest tag listing startup taint keys (comma-separated), for VMs launched without a NodeClaim;
otherwise the startup taints are those of the NodeClaim the VM is named after."""


class KubeletSettings(BaseModel):
    """How long each step of a node's and a pod's start takes."""

    model_config = ConfigDict(ser_json_timedelta="float", validate_assignment=True)

    registration_delay: timedelta = timedelta(seconds=1)
    """From a running VM to its Node object."""
    node_ready_delay: timedelta = timedelta(seconds=1)
    """From registration to the Node being Ready."""
    startup_taint_delay: timedelta = timedelta(seconds=1)
    """From Ready to the startup taints being removed."""
    pod_ready_delay: timedelta = timedelta(seconds=0.5)
    """From a pod being bound to a Ready node to the pod running and Ready."""
    kubernetes_version: str = "v1.31.1"


@dataclass(slots=True)
class _Progress:
    """How far a VM's node has come."""

    registered_at: float
    ready_at: float | None = None
    initialized: bool = False
    stopped: bool = False


class Kubelet:
    """Registers, readies and initializes the Node of every running VM, and starts the pods bound to nodes."""

    def __init__(self, state: ClusterState, compute: Compute, settings: KubeletSettings) -> None:
        self.settings = settings
        self._state = state
        self._compute = compute
        self._progress: dict[str, _Progress] = {}
        self._bound_since: dict[str, float] = {}

    def step(self, now: float) -> float | None:
        """Do what is due; the time something next falls due, if anything is waiting."""
        due = [self._run_machine(machine, now) for machine in self._compute.machines()]
        self._stop_vanished()
        due.append(self._start_pods(now))
        return min((at for at in due if at is not None), default=None)

    def _run_machine(self, machine: Machine, now: float) -> float | None:
        name = machine.instance.name
        progress = self._progress.get(name)
        if machine.deleting_since is not None:
            if progress is not None and not progress.stopped:
                self._stop(name, progress)
            return None
        if machine.running_since is None or not machine.registers:
            return None
        settings = self.settings
        if progress is None:
            at = machine.running_since + settings.registration_delay.total_seconds()
            if now < at:
                return at
            progress = self._register(machine, now)
        if progress.stopped:
            return None
        if progress.ready_at is None:
            at = progress.registered_at + settings.node_ready_delay.total_seconds()
            if now < at:
                return at
            self._report_ready(name, True)
            progress.ready_at = now
        if not progress.initialized:
            at = progress.ready_at + settings.startup_taint_delay.total_seconds()
            if now < at:
                return at
            self._remove_startup_taints(machine)
            progress.initialized = True
        return None

    def _register(self, machine: Machine, now: float) -> _Progress:
        instance, request, instance_type = machine.instance, machine.request, machine.instance_type
        node_labels: dict[str, str] = {}
        offering = next(
            offer
            for offer in instance_type.offerings
            if (offer.zone, offer.capacity_type) == (request.zone, request.capacity_type)
        )
        for requirements in (instance_type.requirements, offering.requirements):
            for requirement in requirements:
                if requirement.operator() is Operator.IN and len(requirement.values) == 1:
                    node_labels[requirement.key] = next(iter(requirement.values))
        node_labels.update(request.labels)
        node_labels[labels.HOSTNAME] = instance.name
        node = Node(
            metadata=ObjectMeta(name=instance.name, labels=node_labels),
            spec=NodeSpec(
                taints=[taint.model_copy() for taint in request.taints], provider_id=instance.provider_id
            ),
            status=NodeStatus(
                capacity=dict(format_resources(instance_type.capacity)),
                allocatable=dict(format_resources(instance_type.allocatable())),
                conditions=[
                    Condition(
                        type="Ready",
                        status="False",
                        reason="KubeletNotReady",
                        message="container runtime is starting",
                    )
                ],
                node_info=NodeSystemInfo(
                    kubelet_version=self.settings.kubernetes_version,
                    operating_system=node_labels.get(labels.OS, "linux"),
                    architecture=node_labels.get(labels.ARCH, ""),
                    container_runtime_version="containerd://1.7.27",
                ),
            ),
        )
        # A Node of that name made by hand is left as it is.
        with contextlib.suppress(ConflictError):
            self._state.create(NODE.name, node)
        progress = _Progress(registered_at=now)
        self._progress[instance.name] = progress
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

    def _stop(self, name: str, progress: _Progress) -> None:
        self._report_ready(name, False)
        progress.stopped = True

    def _stop_vanished(self) -> None:
        """Stop the kubelets of VMs that are gone, and forget them once their Node is gone too."""
        for name, progress in list(self._progress.items()):
            if self._compute.machine(name) is not None:
                continue
            if not progress.stopped:
                self._stop(name, progress)
            if self._state.get(NODE.name, name) is None:
                del self._progress[name]

    def _remove_startup_taints(self, machine: Machine) -> None:
        request = machine.request
        keys = {key for key in request.tags.get(STARTUP_TAINTS_TAG, "").split(",") if key}
        claim = self._state.get(NODECLAIM.name, request.name)
        if claim is not None:
            keys.update(taint.key for taint in claim.spec.startup_taints)
        node = self._state.get(NODE.name, machine.instance.name)
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
