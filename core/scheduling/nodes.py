"""The places a pod can go during a simulation: nodes that exist (or are launching), NodeClaims created
earlier in this simulation, and NodeClaim templates (one per NodePool) from which new ones are made.

Checks run in Karpenter's order and fail with a `Rejection` that says which stage refused the pod, so the
scheduler can both explain the refusal and know whether it may remember it (a refusal by requirements,
taints, host ports or hostname topology can only get worse as the simulation fills nodes up).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from core import labels
from core.api.kube import tolerates
from core.api.meta import Taint
from core.resources import format_resources
from core.scheduling.instancetypeset import BoolArray, InstanceTypeSet, IntArray
from core.scheduling.pods import Constraints, PodInfo
from core.scheduling.requirements import Requirements
from core.scheduling.topology import Topology, TopologyError


class Stage(StrEnum):
    TAINTS = "taints"
    HOST_PORTS = "host ports"
    RESOURCES = "resources"
    REQUIREMENTS = "requirements"
    TOPOLOGY = "topology"
    INSTANCE_TYPES = "instance types"
    LIMITS = "limits"


MONOTONE_STAGES = frozenset({Stage.TAINTS, Stage.HOST_PORTS, Stage.REQUIREMENTS})
"""Refusals that stay true for the rest of a simulation, so they can be remembered per pod shape."""


class Rejection(Exception):
    """Why a pod cannot go somewhere; the detail is formatted only when someone reads it."""

    def __init__(self, stage: Stage, detail: object) -> None:
        self.stage = stage
        self.detail = detail
        super().__init__(stage)

    @property
    def message(self) -> str:
        return str(self.detail)

    def __str__(self) -> str:
        return self.message


def untolerated_taint(taints: Sequence[Taint], constraints: Constraints) -> Taint | None:
    """The first taint the pod does not tolerate (PreferNoSchedule only until relaxed)."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule" and constraints.tolerate_prefer_no_schedule:
            continue
        if not tolerates(constraints.tolerations, taint):
            return taint
    return None


def describe_taint(taint: Taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def check_host_ports(used: set[tuple[str, str, int]], wanted: Sequence[tuple[str, str, int]]) -> None:
    for ip, protocol, port in wanted:
        for used_ip, used_protocol, used_port in used:
            same_ip = ip == used_ip or "0.0.0.0" in (ip, used_ip) or "" in (ip, used_ip)
            if port == used_port and protocol == used_protocol and same_ip:
                raise Rejection(Stage.HOST_PORTS, f"host port {port}/{protocol} is already in use")


def check_taints_and_ports(
    taints: Sequence[Taint], used_ports: set[tuple[str, str, int]], pod: PodInfo, constraints: Constraints
) -> None:
    """The first two checks of every placement: the pod tolerates the taints and its host ports are free."""
    taint = untolerated_taint(taints, constraints)
    if taint is not None:
        raise Rejection(Stage.TAINTS, f"did not tolerate taint {describe_taint(taint)}")
    check_host_ports(used_ports, pod.host_ports)


@dataclass(eq=False)
class ExistingNode:
    """A node in the cluster, or a NodeClaim still launching, with what is left on it."""

    name: str
    node_labels: dict[str, str]
    requirements: Requirements
    taints: tuple[Taint, ...]
    available: IntArray
    nodepool: str | None
    initialized: bool
    host_ports: set[tuple[str, str, int]] = field(default_factory=set)
    pods: list[PodInfo] = field(default_factory=list)

    def try_add(
        self,
        pod: PodInfo,
        constraints: Constraints,
        pod_requirements: Requirements,
        requests: IntArray,
        topology: Topology,
    ) -> Requirements:
        """The node's requirements after adding the pod (raises `Rejection`); nothing changes until `commit`."""
        check_taints_and_ports(self.taints, self.host_ports, pod, constraints)
        if np.any(requests > self.available):
            raise Rejection(Stage.RESOURCES, "not enough resources left")
        # A node that exists has every label it will ever have: no undefined key is taken on trust.
        reason = self.requirements.compatible(pod_requirements, frozenset())
        if reason is not None:
            raise Rejection(Stage.REQUIREMENTS, reason)
        try:
            narrowed = topology.add_requirements(
                pod, constraints, constraints.strict_requirements(), self.requirements
            )
        except TopologyError as error:
            raise Rejection(Stage.TOPOLOGY, error) from error
        # A node cannot move to another domain: its labels must satisfy what topology asked for.
        reason = self.requirements.compatible(narrowed, frozenset())
        if reason is not None:
            raise Rejection(Stage.TOPOLOGY, reason)
        return narrowed

    def commit(self, pod: PodInfo, requests: IntArray, requirements: Requirements) -> None:
        self.available = self.available - requests
        self.host_ports.update(pod.host_ports)
        self.pods.append(pod)


@dataclass(eq=False)
class DaemonOverhead:
    """DaemonSet pods that would run on each instance type of a template, summed."""

    requests: IntArray
    """Per instance type (rows) the summed DaemonSet requests (columns are resource axes)."""
    host_ports: list[tuple[BoolArray, tuple[tuple[str, str, int], ...]]]
    """For each DaemonSet with host ports: the types it lands on and its ports."""


@dataclass(eq=False)
class NodeClaimTemplate:
    """What a NodePool can make: its requirements, taints and instance types with DaemonSet overhead."""

    nodepool: str
    weight: int
    requirements: Requirements
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    instance_types: InstanceTypeSet
    daemons: DaemonOverhead
    base_mask: BoolArray
    headroom: IntArray
    """Allocatable minus DaemonSet overhead, per type."""
    min_values_best_effort: bool = False
    """Karpenter's MIN_VALUES_POLICY=BestEffort: launch with fewer values than minValues asks rather than fail."""
    allowed_undefined: frozenset[str] = field(init=False)
    """Keys a pod may constrain without the NodePool declaring them: well-known ones and those the types
    define. Computed once, since every try of a pod on a NodeClaim asks."""

    def __post_init__(self) -> None:
        self.allowed_undefined = labels.WELL_KNOWN_LABELS | frozenset(self.instance_types.defined_keys())


@dataclass(eq=False)
class SimNodeClaim:
    """A NodeClaim created by this simulation: requirements narrowed by its pods, and the types still possible."""

    index: int
    template: NodeClaimTemplate
    hostname: str
    requirements: Requirements
    mask: BoolArray
    requests: IntArray
    pods: list[PodInfo] = field(default_factory=list)
    host_ports: set[tuple[str, str, int]] = field(default_factory=set)

    def try_add(
        self,
        pod: PodInfo,
        constraints: Constraints,
        pod_requirements: Requirements,
        requests: IntArray,
        topology: Topology,
        limit_mask: BoolArray | None = None,
    ) -> tuple[Requirements, BoolArray]:
        """The claim's requirements and remaining types after adding the pod (raises `Rejection`)."""
        template = self.template
        check_taints_and_ports(template.taints, self.host_ports, pod, constraints)
        reason = self.requirements.compatible(pod_requirements, template.allowed_undefined)
        if reason is not None:
            raise Rejection(Stage.REQUIREMENTS, reason)
        merged = self.requirements.copy()
        merged.add(*pod_requirements)
        try:
            merged = topology.add_requirements(pod, constraints, constraints.strict_requirements(), merged)
        except TopologyError as error:
            raise Rejection(Stage.TOPOLOGY, error) from error
        mask = filter_instance_types(template, self.mask, merged, self.requests + requests, pod, limit_mask)
        return merged, mask

    def commit(self, pod: PodInfo, requests: IntArray, requirements: Requirements, mask: BoolArray) -> None:
        self.requirements = requirements
        self.mask = mask
        self.requests = self.requests + requests
        self.host_ports.update(pod.host_ports)
        self.pods.append(pod)


def filter_instance_types(
    template: NodeClaimTemplate,
    current: BoolArray,
    requirements: Requirements,
    requests: IntArray,
    pod: PodInfo,
    limit_mask: BoolArray | None,
) -> BoolArray:
    """Types that still match the requirements, fit the requests plus DaemonSet overhead, and have an
    available offering; raises a `Rejection` that says which of the three eliminated the last one."""
    types = template.instance_types
    unlimited = current & types.compatible(requirements)
    compatible = unlimited & limit_mask if limit_mask is not None else unlimited
    fits = np.all(template.headroom >= requests, axis=1)
    for ports_mask, ports in template.daemons.host_ports:
        if any(port in ports for port in pod.host_ports):
            fits &= ~ports_mask
    offered = types.has_offering(requirements)
    remaining: BoolArray = compatible & fits & offered
    if remaining.any():
        unmet = unmet_min_values(types, remaining, requirements)
        if unmet and not template.min_values_best_effort:
            raise Rejection(Stage.INSTANCE_TYPES, unmet[0])
        return remaining
    if (unlimited & fits & offered).any():
        raise Rejection(
            Stage.LIMITS,
            f'all instance types with enough resources exceed the limits of nodepool "{template.nodepool}"',
        )
    raise Rejection(
        Stage.INSTANCE_TYPES, _explain_no_type(template, compatible, fits, requirements, requests)
    )


def unmet_min_values(types: InstanceTypeSet, mask: BoolArray, requirements: Requirements) -> list[str]:
    """Each minValues requirement the types in the mask cannot cover, as a sentence."""
    unmet = []
    for requirement in requirements:
        if requirement.min_values is not None:
            values = types.values_of(requirement.key, np.flatnonzero(mask))
            if len(values) < requirement.min_values:
                unmet.append(
                    f"minValues requirement is not met for label {requirement.key} "
                    f"({len(values)} of {requirement.min_values} values available)"
                )
    return unmet


def _explain_no_type(
    template: NodeClaimTemplate,
    compatible: BoolArray,
    fits: BoolArray,
    requirements: Requirements,
    requests: IntArray,
) -> str:
    axes = template.instance_types.axes
    if not compatible.any():
        relevant = [r for r in requirements if r.key not in (labels.HOSTNAME,)]
        return "no instance type satisfied requirements " + ", ".join(str(r) for r in relevant)
    if not (compatible & fits).any():
        largest = template.headroom[compatible].max(axis=0)
        short = [
            name
            for name, need, have in zip(axes.names, requests.tolist(), largest.tolist(), strict=True)
            if need > have
        ]
        wanted = format_resources({name: int(requests[axes.index[name]]) for name in short})
        biggest = format_resources({name: int(largest[axes.index[name]]) for name in short})
        return (
            f"no instance type has enough {', '.join(short)} "
            f"(needs {_inline(wanted)}, largest allocatable after daemonset overhead {_inline(biggest)})"
        )
    zones = requirements.get(labels.ZONE)
    capacity = requirements.get(labels.CAPACITY_TYPE)
    return f"no instance type which had enough resources has an available offering for {zones} and {capacity}"


def _inline(resources: dict[str, str]) -> str:
    return "{" + ", ".join(f"{name}: {amount}" for name, amount in resources.items()) + "}"
