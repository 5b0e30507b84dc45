"""What every object shares: metadata, taints, node-selector requirements, and how invalid input is reported.

Attributes are the snake_case of the Kubernetes field names (as the official Python client names them);
YAML and JSON use the camelCase names. Errors name the object, the field path and the rule, the way
`kubectl apply` reports a CRD validation failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


class KubeModel(BaseModel):
    """Base for Kubernetes objects we read: unknown fields are ignored, since we model a subset."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=False)


class StrictKubeModel(BaseModel):
    """Base for our own CRDs: unknown fields are rejected, as the API server's strict field validation does."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False)


class OwnerReference(KubeModel):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str = ""
    generate_name: str | None = None
    namespace: str | None = None
    uid: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    finalizers: list[str] = Field(default_factory=list)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    generation: int | None = None
    resource_version: str | None = None


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: TaintEffect
    time_added: datetime | None = None


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"
    GTE = "Gte"
    LTE = "Lte"


class NodeSelectorRequirement(KubeModel):
    """A node-selector expression as pods write it (Kubernetes accepts In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class InvalidObjectError(ValueError):
    """An object that breaks a rule of its schema; the message names the object, the field and the rule."""

    def __init__(self, kind: str, name: str, problems: Sequence[str]) -> None:
        self.kind = kind
        self.name = name
        self.problems = list(problems)
        label = f"{kind} {name}" if name else kind
        super().__init__("\n".join(f"{label}: {problem}" for problem in self.problems))


def field_path(location: Sequence[str | int]) -> str:
    """A pydantic error location as a Kubernetes field path: `spec.template.spec.requirements[1].minValues`."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("function-") or part in {"tagged-union", "union"}:
            continue
        else:
            path += f".{part}" if path else part
    return path


def problems_of(error: ValidationError) -> list[str]:
    """Each pydantic error as "<field path>: <rule>", without pydantic's own decoration."""
    problems = []
    for detail in error.errors(include_url=False):
        message = detail["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        path = field_path(detail["loc"])
        if not path:
            problems.append(message)
        elif message.startswith("("):
            # A rule that quotes the offending value reads as one phrase: "minValues (3) exceeds ...".
            problems.append(f"{path} {message}")
        else:
            problems.append(f"{path}: {message}")
    return problems


def object_name(raw: Any) -> str:
    """The name of a raw manifest, for error messages, whatever shape it has."""
    if isinstance(raw, dict):
        metadata = raw.get("metadata")
        if isinstance(metadata, dict):
            name = metadata.get("name") or metadata.get("generateName") or ""
            namespace = metadata.get("namespace")
            return f"{namespace}/{name}" if namespace and name else str(name)
    return ""
