"""The vocabulary of a disruption plan: methods, decisions, why a node was kept, and commands.

A command is what one Karpenter disruption pass would start: some candidates, the NodeClaims launched to
replace them, where their pods go, and what it saves per hour. A node that no command takes keeps every
reason it was kept for, each with a machine-readable code and a sentence a person can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from core.api.meta import Taint
from core.instancetypes.types import MICROS_PER_DOLLAR, dollars


class Method(StrEnum):
    """Karpenter's disruption methods, plus expiration, which deletes without asking the budgets, and the
    repack, which runs after them (`core.disruption.repack`)."""

    EXPIRATION = "expiration"
    EMPTINESS = "emptiness"
    DRIFT = "drift"
    MULTI_NODE_CONSOLIDATION = "multi-node-consolidation"
    SINGLE_NODE_CONSOLIDATION = "single-node-consolidation"
    REPACK = "repack"

    @property
    def log_name(self) -> str:
        """How Karpenter's log line names the method ("disrupting via consolidation replace"); a repack is a
        consolidation to Karpenter's users."""
        if self in (Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION, Method.REPACK):
            return "consolidation"
        return self.value


EXPIRED = "Expired"
"""The reason of expiration commands; the other reasons are `DisruptionReason` values."""


class Decision(StrEnum):
    DELETE = "delete"
    REPLACE = "replace"


class BlockReason(StrEnum):
    """Why a node was not disrupted, as a code a program can match on."""

    NOT_MANAGED = "NotManaged"
    NOT_SELECTED = "NotSelected"
    NODEPOOL_NOT_FOUND = "NodePoolNotFound"
    STATIC_NODEPOOL = "StaticNodePool"
    NOT_INITIALIZED = "NotInitialized"
    DELETING = "Deleting"
    DISRUPTING = "Disrupting"
    EXPIRING = "Expiring"
    NOMINATED = "Nominated"
    DO_NOT_DISRUPT_NODE = "DoNotDisruptNode"
    DO_NOT_DISRUPT_POD = "DoNotDisruptPod"
    POD_DISRUPTION_BUDGET = "PodDisruptionBudget"
    INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
    PRICE_UNKNOWN = "PriceUnknown"
    CONSOLIDATION_DISABLED = "ConsolidationDisabled"
    CONSOLIDATE_AFTER = "ConsolidateAfter"
    WHEN_EMPTY = "WhenEmptyPolicy"
    BUDGET = "Budget"
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    BUFFER_PODS = "BufferPods"
    """A CapacityBuffer's virtual pods hold room on the node (emptiness leaves it)."""
    MULTIPLE_REPLACEMENTS = "MultipleReplacements"
    NOT_CHEAPER = "NotCheaper"
    SPOT_TO_SPOT_DISABLED = "SpotToSpotDisabled"
    SPOT_TO_SPOT_TOO_FEW_OPTIONS = "SpotToSpotTooFewOptions"
    MIN_VALUES = "MinValues"
    BALANCED = "BalancedScore"


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a node was kept: its code, a sentence, and the method that gave it (None: every method)."""

    code: BlockReason
    message: str
    method: Method | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method.value if self.method else None,
            "reason": self.code.value,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Blocked:
    """A node no command disrupts, with every reason it was kept, in the order the methods gave them."""

    node: str
    nodeclaim: str | None
    nodepool: str | None
    reasons: tuple[Reason, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "nodeclaim": self.nodeclaim,
            "nodepool": self.nodepool,
            "reasons": [reason.to_json() for reason in self.reasons],
        }


@dataclass(frozen=True, slots=True)
class Disrupted:
    """A candidate a command disrupts, as the command's log line and the workflow need it."""

    node: str
    nodeclaim: str
    nodepool: str
    instance_type: str | None
    zone: str | None
    capacity_type: str | None
    price_micros: int | None
    pods: int
    """Pods that must be rescheduled elsewhere."""
    detail: str | None = None
    """Why this node: the drift reason, or when it expired."""

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.node,
            "nodeclaim": self.nodeclaim,
            "nodepool": self.nodepool,
            "instance_type": self.instance_type,
            "zone": self.zone,
            "capacity_type": self.capacity_type,
            "price_per_hour": _dollars_or_none(self.price_micros),
            "pods": self.pods,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Replacement:
    """A NodeClaim a command launches before the candidates go (for expiration: the one the provisioner
    is expected to launch for the evicted pods)."""

    name: str
    """The name pod moves use for it; the real NodeClaim gets `<nodepool>-<suffix>` when launched."""
    nodepool: str
    instance_type: str | None
    zone: str | None
    capacity_type: str | None
    price_micros: int | None
    instance_type_options: tuple[str, ...]
    capacity_types: tuple[str, ...]
    requirements: tuple[dict[str, object], ...]
    labels: dict[str, str]
    """The node's labels once launched as planned: its instance type's and offering's, then the NodeClaim's."""
    taints: tuple[Taint, ...]
    pods: tuple[str, ...]
    requests: dict[str, str] = field(default_factory=dict)
    """The pods' summed requests plus DaemonSet overhead, as the NodeClaim's `spec.resources.requests`."""
    nodeclaim_labels: dict[str, str] = field(default_factory=dict)
    """The labels the NodeClaim is created with (`core.scheduling.results.nodeclaim_labels`)."""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "nodepool": self.nodepool,
            "instance_type": self.instance_type,
            "zone": self.zone,
            "capacity_type": self.capacity_type,
            "price_per_hour": _dollars_or_none(self.price_micros),
            "instance_type_options": list(self.instance_type_options),
            "capacity_types": list(self.capacity_types),
            "requirements": list(self.requirements),
            "labels": self.labels,
            "taints": [
                taint.model_dump(mode="json", by_alias=True, exclude_none=True) for taint in self.taints
            ],
            "pods": list(self.pods),
            "requests": self.requests,
        }


@dataclass(frozen=True, slots=True)
class PodMove:
    """Where a pod of a candidate goes: an existing node, a replacement, or nowhere (with why)."""

    pod: str
    source: str
    destination: str | None
    problem: str | None = None

    def to_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"pod": self.pod, "from": self.source, "to": self.destination}
        if self.problem is not None:
            entry["problem"] = self.problem
        return entry


@dataclass(frozen=True, slots=True)
class Repacked:
    """Why a repack's new set of nodes is cheaper: what it retires, what it launches, which nodes that stay take
    pods, and a sentence that says it with the prices."""

    retired: tuple[str, ...]
    """"node (type, $/h)" per candidate."""
    launched: tuple[str, ...]
    """"name (type, $/h): N pods" per replacement."""
    receiving: tuple[str, ...]
    """"node: N pods" per node that stays and takes pods."""
    message: str

    def to_json(self) -> dict[str, object]:
        return {
            "retired": list(self.retired),
            "launched": list(self.launched),
            "receiving": list(self.receiving),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Command:
    """What one disruption pass starts, in the order the plan starts them."""

    method: Method
    reason: str
    decision: Decision
    candidates: tuple[Disrupted, ...]
    replacements: tuple[Replacement, ...]
    savings_micros: int
    """Per hour: the candidates' prices minus the replacements' (negative when drift costs more)."""
    pods_moved: tuple[PodMove, ...]
    repacked: Repacked | None = None
    """For a repack: why the new set is cheaper."""

    def log_line(self) -> str:
        """The command as Karpenter logs it when it starts one."""
        pods = sum(candidate.pods for candidate in self.candidates)
        nodes = ", ".join(
            f"{c.node}/{c.instance_type or 'unknown'}/{c.capacity_type or 'unknown'}" for c in self.candidates
        )
        line = (
            f"disrupting via {self.method.log_name} {self.decision.value}, "
            f"terminating {len(self.candidates)} nodes ({pods} pods) {nodes}"
        )
        if len(self.replacements) == 1:
            replacement = self.replacements[0]
            kind = f"{replacement.capacity_types[0]} node" if len(replacement.capacity_types) == 1 else "node"
            line += f" and replacing with {kind} from types {type_list(replacement.instance_type_options)}"
        elif self.replacements:
            spot = sum(1 for r in self.replacements if "spot" in r.capacity_types)
            on_demand = sum(1 for r in self.replacements if "on-demand" in r.capacity_types)
            line += (
                f" and replacing with {spot} spot and {on_demand} on-demand, from types "
                f"{type_list(self.replacements[0].instance_type_options)}"
            )
        return line + f" (savings: {format_price(self.savings_micros)}/h)"

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method.value,
            "reason": self.reason,
            "decision": self.decision.value,
            "candidates": [candidate.to_json() for candidate in self.candidates],
            "replacements": [replacement.to_json() for replacement in self.replacements],
            "savings_per_hour": round(dollars(self.savings_micros), 6),
            "pods_moved": [move.to_json() for move in self.pods_moved],
            "message": self.log_line(),
            **({"repack": self.repacked.to_json()} if self.repacked is not None else {}),
        }


def type_list(names: tuple[str, ...], shown: int = 5) -> str:
    """Instance type names as Karpenter lists them in logs: the first five, then how many others."""
    text = ", ".join(names[:shown])
    if len(names) > shown:
        text += f" and {len(names) - shown} other(s)"
    return text


def format_price(micros: int) -> str:
    """A price per hour for people: "$0.192", "$0.0104", "-$0.5"; at least three decimals, at most six."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS_PER_DOLLAR)
    digits = f"{fraction:06d}".rstrip("0").ljust(3, "0")
    return f"{sign}${whole}.{digits}"


def _dollars_or_none(micros: int | None) -> float | None:
    return None if micros is None else round(dollars(micros), 6)
