"""What a provisioning simulation decided: pods on existing nodes, new NodeClaims with their launch choice
and instance-type options, and unschedulable pods with a reason per NodePool."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from core import labels
from core.api.meta import Taint
from core.instancetypes.types import Offering, dollars
from core.resources import Resources, format_resources
from core.scheduling.instancetypeset import InstanceTypeSet
from core.scheduling.nodes import NodeClaimTemplate
from core.scheduling.requirements import Requirements


@dataclass(frozen=True, slots=True)
class Launch:
    """The instance type and offering a NodeClaim would be launched with."""

    instance_type: str
    offering: Offering
    labels: dict[str, str]


def _offering_order(offering: Offering) -> tuple[int, bool, bool, str]:
    # The AKS provider's allocation order: cheapest first, spot before on-demand at equal price,
    # zonal before regional ("0"); then by zone name instead of the provider's random shuffle.
    return (
        offering.price_micros,
        offering.capacity_type != labels.CAPACITY_TYPE_SPOT,
        offering.zone == "0",
        offering.zone,
    )


def launch_order(
    types: InstanceTypeSet, ordered: Sequence[int], requirements: Requirements, limit: int = 20
) -> list[Launch]:
    """The offerings the provider would try, best first, over all remaining types (at most `limit`)."""
    allowed = np.zeros(len(types), dtype=np.bool_)
    allowed[list(ordered)] = True
    # Over every offering of every type, vectorized: a Python loop over them took 5 ms per NodeClaim.
    columns = np.flatnonzero(types.offering_mask(requirements) & allowed[types.offering_type])
    candidates = []
    for column in columns.tolist():
        row, offering = int(types.offering_type[column]), types.offerings[column]
        candidates.append((_offering_order(offering), types.names[row], row, offering))
    candidates.sort(key=lambda candidate: candidate[:2])
    launches = []
    for _, name, row, offering in candidates[:limit]:
        launches.append(Launch(name, offering, types.types[row].node_labels(offering)))
    return launches


def nodeclaim_labels(template: NodeClaimTemplate, requirements: Requirements) -> dict[str, str]:
    """The labels a NodeClaim is created with: its NodePool's template labels and `karpenter.sh/nodepool`,
    and one value for each custom key its requirements constrain.

    Keys the instance types define are left out, as Karpenter leaves out well-known ones: the launched
    instance type labels them, and a value chosen from a requirement (say `Gt 8`) would be an invention."""
    resolved = {
        key: value for key, value in requirements.labels().items() if key not in template.allowed_undefined
    }
    return {**resolved, **template.labels}


@dataclass(frozen=True, slots=True)
class NewNodeClaim:
    nodepool: str
    instance_type: str | None
    zone: str | None
    capacity_type: str | None
    price_micros: int | None
    instance_type_options: list[str]
    pods: list[str]
    labels: dict[str, str]
    """The node's labels after launch: the launched instance type's and offering's own single-valued
    labels, then the NodeClaim's (`nodeclaim_labels`)."""
    taints: list[Taint]
    startup_taints: list[Taint]
    requirements: list[dict[str, object]]
    requests: Resources
    annotations: dict[str, str] = field(default_factory=dict)
    launch_candidates: list[Launch] = field(default_factory=list)
    """Offerings in the order the provider would try them; the first is the launch."""
    nodeclaim_labels: dict[str, str] = field(default_factory=dict)
    """The labels the NodeClaim object is created with (see `nodeclaim_labels`); the lifecycle launches
    the node with these over its instance type's labels, whichever offering it lands on."""

    @classmethod
    def build(
        cls,
        template: NodeClaimTemplate,
        requirements: Requirements,
        options: list[str],
        launches: list[Launch],
        pods: list[str],
        requests: Resources,
        annotations: dict[str, str] | None = None,
    ) -> NewNodeClaim:
        launch = launches[0] if launches else None
        claim_labels = nodeclaim_labels(template, requirements)
        node_labels: dict[str, str] = {}
        if launch:
            node_labels.update(launch.labels)
            node_labels[labels.INSTANCE_TYPE] = launch.instance_type
            node_labels[labels.ZONE] = launch.offering.zone
            node_labels[labels.CAPACITY_TYPE] = launch.offering.capacity_type
        node_labels.update(claim_labels)
        return cls(
            nodepool=template.nodepool,
            instance_type=launch.instance_type if launch else None,
            zone=launch.offering.zone if launch else None,
            capacity_type=launch.offering.capacity_type if launch else None,
            price_micros=launch.offering.price_micros if launch else None,
            instance_type_options=options,
            pods=pods,
            labels=dict(sorted(node_labels.items())),
            taints=list(template.taints),
            startup_taints=list(template.startup_taints),
            requirements=requirements.to_dicts(),
            requests=requests,
            annotations=dict(annotations or {}),
            launch_candidates=launches,
            nodeclaim_labels=dict(sorted(claim_labels.items())),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "nodepool": self.nodepool,
            "instance_type": self.instance_type,
            "zone": self.zone,
            "capacity_type": self.capacity_type,
            "price_per_hour": dollars(self.price_micros) if self.price_micros is not None else None,
            "instance_type_options": self.instance_type_options,
            "pods": self.pods,
            "labels": self.labels,
            "taints": [
                taint.model_dump(mode="json", by_alias=True, exclude_none=True) for taint in self.taints
            ],
            "startup_taints": [
                taint.model_dump(mode="json", by_alias=True, exclude_none=True)
                for taint in self.startup_taints
            ],
            "requirements": self.requirements,
            "annotations": self.annotations,
            "requests": format_resources(self.requests),
        }


@dataclass(frozen=True, slots=True)
class ExistingPlacement:
    node: str
    pods: list[str]

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "pods": self.pods}


@dataclass(frozen=True, slots=True)
class Unschedulable:
    pod: str
    reasons: list[str]

    def to_json(self) -> dict[str, object]:
        return {"pod": self.pod, "reasons": self.reasons}


@dataclass(slots=True)
class SchedulingResults:
    nodeclaims: list[NewNodeClaim] = field(default_factory=list)
    existing: list[ExistingPlacement] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    static_price_micros: int = 0
    """What the NodeClaims static NodePools would create cost per hour (the what-if commands count them)."""

    @property
    def total_price_micros(self) -> int:
        """What every NodeClaim to create costs per hour: the new ones, and the static pools'."""
        return sum(claim.price_micros or 0 for claim in self.nodeclaims) + self.static_price_micros

    def without(self, pods: Collection[str]) -> SchedulingResults:
        """The results with these pods (`namespace/name`) left out wherever a pod is listed, and the existing
        nodes that then receive none: what is said of pods, the virtual ones of CapacityBuffers being no pods of
        the cluster. NodeClaims stay, with the requests they were sized for."""
        return SchedulingResults(
            nodeclaims=[
                replace(claim, pods=[pod for pod in claim.pods if pod not in pods])
                for claim in self.nodeclaims
            ],
            existing=[
                ExistingPlacement(placement.node, kept)
                for placement in self.existing
                if (kept := [pod for pod in placement.pods if pod not in pods])
            ],
            unschedulable=[entry for entry in self.unschedulable if entry.pod not in pods],
            static_price_micros=self.static_price_micros,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "nodeclaims": [claim.to_json() for claim in self.nodeclaims],
            "existing": [placement.to_json() for placement in self.existing],
            "unschedulable": [pod.to_json() for pod in self.unschedulable],
            "total_price_per_hour": round(dollars(self.total_price_micros), 6),
        }
