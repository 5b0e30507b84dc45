"""Karpenter's operator settings that change decisions: its feature gates and its minValues policy.

A Karpenter user sets them as `FEATURE_GATES=SpotToSpotConsolidation=true,NodeRepair=false` and
`MIN_VALUES_POLICY=BestEffort` (the chart's `settings.featureGates` and `settings.minValuesPolicy`); the
names and defaults here are those of Karpenter v1.14. A gate not named keeps its default, and a name that is
not a gate, or a value that is not a boolean, is refused with a message naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import StrEnum


class MinValuesPolicy(StrEnum):
    """What the scheduler does when a NodePool's `minValues` cannot be met (Karpenter's MIN_VALUES_POLICY)."""

    STRICT = "Strict"
    """Refuse the NodeClaim: the pods stay pending."""
    BEST_EFFORT = "BestEffort"
    """Relax minValues as far as needed and launch anyway (the NodeClaim says so in an annotation)."""


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """Karpenter's feature gates with the defaults of its v1.14 release."""

    node_repair: bool = False
    reserved_capacity: bool = True
    spot_to_spot_consolidation: bool = False
    node_overlay: bool = False
    static_capacity: bool = False
    capacity_buffer: bool = False

    def render(self) -> str:
        """`Gate=value,...` in Karpenter's spelling and order, as FEATURE_GATES takes it."""
        return ",".join(f"{GATE_NAMES[f.name]}={str(getattr(self, f.name)).lower()}" for f in fields(self))

    def unsupported(self) -> list[str]:
        """The gates that are on and that nodewright does not implement yet: their objects are not read."""
        return [GATE_NAMES[name] for name in UNIMPLEMENTED if getattr(self, name)]


GATE_NAMES = {
    "node_repair": "NodeRepair",
    "reserved_capacity": "ReservedCapacity",
    "spot_to_spot_consolidation": "SpotToSpotConsolidation",
    "node_overlay": "NodeOverlay",
    "static_capacity": "StaticCapacity",
    "capacity_buffer": "CapacityBuffer",
}
"""Each gate's field and the name Karpenter gives it."""
_FIELDS = {gate: name for name, gate in GATE_NAMES.items()}

UNIMPLEMENTED: tuple[str, ...] = ()
"""Gates whose APIs nodewright does not act on yet (none: every v1.14 gate is implemented)."""


def parse_feature_gates(text: str, base: FeatureGates | None = None) -> FeatureGates:
    """`base` (Karpenter's defaults) with the gates `text` names set, e.g. `SpotToSpotConsolidation=true`.

    Raises ValueError naming each entry that is not `<Gate>=<true|false>` for one of Karpenter's gates."""
    gates = base or FeatureGates()
    problems: list[str] = []
    changes: dict[str, bool] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        gate, equals, value = (part.strip() for part in entry.partition("="))
        if gate not in _FIELDS:
            problems.append(f"{gate!r} is not one of Karpenter's feature gates ({', '.join(_FIELDS)})")
        elif not equals or value.lower() not in ("true", "false"):
            problems.append(f"{entry!r}: expected {gate}=true or {gate}=false")
        else:
            changes[_FIELDS[gate]] = value.lower() == "true"
    if problems:
        raise ValueError("; ".join(problems))
    return replace(gates, **changes)
