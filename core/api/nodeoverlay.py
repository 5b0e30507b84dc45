"""NodeOverlay (`karpenter.sh/v1alpha1`, behind Karpenter's `NodeOverlay` feature gate).

A NodeOverlay changes what the scheduler believes about the instance types its requirements select: their
price (`price` replaces it, `priceAdjustment` shifts it by an amount or a percentage) and their capacity
(`capacity` adds extended resources). Parsing enforces the rules of Karpenter's CRD schema and CEL; the rules
Karpenter checks at runtime (restricted label keys, valid values, no values for Exists/DoesNotExist) are
`runtime_problems`, reported on the overlay's `ValidationSucceeded` condition rather than refusing it
(`core.instancetypes.overlay`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from core import labels
from core.api.kube import ResourceList
from core.api.meta import NodeSelectorOperator, ObjectMeta, StrictKubeModel
from core.api.nodepool import (
    _BOUND_OPERATORS,
    _NON_NEGATIVE_INTEGER,
    _VALUELESS_OPERATORS,
    ConditionedStatus,
    Problem,
    label_key_problem,
    label_value_problem,
    parse_manifest,
    raise_problems,
    restricted_label_problem,
)
from core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from core.scheduling.requirements import Requirement, Requirements

API_VERSION = "karpenter.sh/v1alpha1"

PRICE = re.compile(r"\d+(\.\d+)?", re.ASCII)
"""An absolute price in the provider's units per hour (Karpenter's pattern for `price`)."""
PRICE_ADJUSTMENT = re.compile(r"([+-]\d*\.?\d+)|(\+\d*\.?\d+%)|(-\d{1,2}(\.\d+)?%)|(-100%)", re.ASCII)
"""A signed amount, an increase by any percentage, or a decrease by at most 100% (Karpenter's pattern)."""

RESTRICTED_CAPACITY = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
"""Resources an overlay may not set: it adds extended resources only."""
_ALLOWED_KARPENTER_KEYS = (labels.CAPACITY_TYPE, labels.NODEPOOL)


class NodeOverlayConditionType(StrEnum):
    READY = "Ready"
    VALIDATION_SUCCEEDED = "ValidationSucceeded"


RUNTIME_VALIDATION = "RuntimeValidation"
"""The reason of ValidationSucceeded=False for an overlay that breaks a rule checked at runtime."""
CONFLICT = ("Conflict", "conflict with another overlay")
"""Reason and message of ValidationSucceeded=False for an overlay that conflicts with one of equal weight."""


class NodeOverlayRequirement(StrictKubeModel):
    """A node-selector requirement over the labels of instance types, offerings and NodePools."""

    key: str = Field(max_length=316)
    operator: NodeSelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        key_problem = label_key_problem(self.key)
        prefix = self.key.split("/")[0]
        if key_problem:
            problems.append((("key",), key_problem))
        elif self.key == labels.HOSTNAME:
            problems.append((("key",), f'label "{labels.HOSTNAME}" is restricted'))
        elif self.key not in _ALLOWED_KARPENTER_KEYS and prefix.endswith(labels.KARPENTER_DOMAIN):
            problems.append((("key",), f'label domain "{labels.KARPENTER_DOMAIN}" is restricted'))
        if self.operator in (NodeSelectorOperator.IN, NodeSelectorOperator.NOT_IN) and not self.values:
            problems.append(
                (("values",), f"requirements with operator '{self.operator}' must have a value defined")
            )
        if self.operator in _BOUND_OPERATORS and (
            len(self.values) != 1 or not _NON_NEGATIVE_INTEGER.fullmatch(self.values[0])
        ):
            problems.append(
                (
                    ("values",),
                    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
                )
            )
        raise_problems("requirement", problems)
        return self

    def runtime_problems(self) -> list[str]:
        """What Karpenter's runtime validation refuses in this requirement (not checked by the CRD)."""
        problems = []
        restricted = restricted_label_problem(self.key)
        if restricted:
            problems.append(f"key {self.key}: {restricted}")
        if self.operator in _VALUELESS_OPERATORS and self.values:
            problems.append(f"key {self.key} with operator {self.operator} must not have values")
        if self.operator not in _BOUND_OPERATORS:
            problems.extend(
                f"key {self.key}: {problem}"
                for value in self.values
                if (problem := label_value_problem(value))
            )
        return problems

    def to_requirement(self) -> Requirement:
        """This requirement in the scheduler's algebra."""
        return Requirement.new(self.key, self.operator, self.values)


class NodeOverlaySpec(StrictKubeModel):
    requirements: list[NodeOverlayRequirement] = Field(max_length=100)
    price_adjustment: str | None = None
    price: str | None = None
    capacity: ResourceList | None = None
    weight: int | None = Field(default=None, ge=1, le=10000)

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        problems: list[Problem] = []
        if self.price is not None and not PRICE.fullmatch(self.price):
            problems.append((("price",), f"{self.price!r} is not a price (digits, optionally with decimals)"))
        if self.price_adjustment is not None and not PRICE_ADJUSTMENT.fullmatch(self.price_adjustment):
            problems.append(
                (
                    ("priceAdjustment",),
                    f"{self.price_adjustment!r} is not a price adjustment: a signed amount (-0.5, +1.2) or a "
                    "percentage (+10%, -15%, at most -100%)",
                )
            )
        if self.price is not None and self.price_adjustment is not None:
            problems.append(((), "cannot set both 'price' and 'priceAdjustment'"))
        if any(name in RESTRICTED_CAPACITY for name in self.capacity or {}):
            problems.append((("capacity",), "invalid resource restricted"))
        raise_problems("spec", problems)
        return self

    @property
    def price_change(self) -> str | None:
        """`price` or `priceAdjustment`, whichever is set."""
        return self.price if self.price is not None else self.price_adjustment


class NodeOverlayStatus(ConditionedStatus):
    pass


class NodeOverlay(StrictKubeModel):
    """A `karpenter.sh/v1alpha1` NodeOverlay; build one with `NodeOverlay.parse(manifest)`."""

    api_version: Literal["karpenter.sh/v1alpha1"] = "karpenter.sh/v1alpha1"
    kind: Literal["NodeOverlay"] = "NodeOverlay"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeOverlaySpec
    status: NodeOverlayStatus = Field(default_factory=NodeOverlayStatus)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Self:
        """Validate a manifest; raises `InvalidObjectError` naming every broken rule with its field path."""
        return parse_manifest(cls, "NodeOverlay", raw)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def weight_or_zero(self) -> int:
        """The overlay's precedence; one without a weight counts as 0."""
        return self.spec.weight or 0

    def requirements(self) -> Requirements:
        """The requirements as the scheduler's algebra."""
        return Requirements(requirement.to_requirement() for requirement in self.spec.requirements)

    def runtime_problems(self) -> list[str]:
        """What Karpenter's runtime validation refuses: restricted keys, bad values, restricted capacity."""
        return [
            problem for requirement in self.spec.requirements for problem in requirement.runtime_problems()
        ]
