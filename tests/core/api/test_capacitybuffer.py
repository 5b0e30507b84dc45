"""The CapacityBuffer model and its generated CRD, checked against Karpenter v1.14's published one (vendored
under `data/`, see its README) field by field: names, scope, printer columns, and the spec's types, formats,
bounds, defaults, required fields and CEL rules; the status's fields and types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from core.api.capacitybuffer import ACTIVE_CAPACITY, CapacityBuffer
from core.api.crds import custom_resource_definitions
from core.api.meta import InvalidObjectError

PUBLISHED = yaml.safe_load(
    (Path(__file__).parent / "data" / "autoscaling.x-k8s.io_capacitybuffers.yaml").read_text()
)
OURS = next(d for d in custom_resource_definitions() if d["spec"]["names"]["kind"] == "CapacityBuffer")


def _version(definition: dict[str, Any]) -> dict[str, Any]:
    (version,) = definition["spec"]["versions"]
    return version


def _shape(schema: dict[str, Any], with_required: bool = True) -> dict[str, Any]:
    """What a schema node says about valid objects, without descriptions; properties recursively."""
    shape: dict[str, Any] = {
        key: schema[key]
        for key in ("type", "format", "minimum", "minLength", "default", "x-kubernetes-int-or-string")
        if key in schema
    }
    if with_required and "required" in schema:
        shape["required"] = sorted(schema["required"])
    if "x-kubernetes-validations" in schema:
        shape["rules"] = [(rule["rule"], rule["message"]) for rule in schema["x-kubernetes-validations"]]
    if "properties" in schema:
        shape["properties"] = {
            name: _shape(child, with_required) for name, child in sorted(schema["properties"].items())
        }
    if isinstance(schema.get("additionalProperties"), dict):
        shape["additionalProperties"] = _shape(schema["additionalProperties"], with_required)
    if isinstance(schema.get("items"), dict):
        shape["items"] = _shape(schema["items"], with_required)
    return shape


def test_names_scope_and_subresources_are_karpenters() -> None:
    assert OURS["metadata"]["name"] == PUBLISHED["metadata"]["name"]
    for key in ("group", "scope"):
        assert OURS["spec"][key] == PUBLISHED["spec"][key]
    assert OURS["spec"]["names"] == PUBLISHED["spec"]["names"]
    ours, theirs = _version(OURS), _version(PUBLISHED)
    assert (ours["name"], ours["served"], ours["storage"]) == (theirs["name"], True, True)
    assert ours["subresources"] == theirs["subresources"]


def test_printer_columns_are_karpenters() -> None:
    def columns(definition: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        return [
            (c["name"], c["type"], c["jsonPath"], c["description"])
            for c in _version(definition)["additionalPrinterColumns"]
        ]

    assert columns(OURS) == columns(PUBLISHED)


def test_the_spec_schema_is_karpenters() -> None:
    ours = _version(OURS)["schema"]["openAPIV3Schema"]
    theirs = _version(PUBLISHED)["schema"]["openAPIV3Schema"]
    spec, published = _shape(ours["properties"]["spec"]), _shape(theirs["properties"]["spec"])
    # Our quantity pattern is our own spelling of the same grammar (`core.quantity`); the rest is equal.
    del spec["properties"]["limits"]["additionalProperties"]
    del published["properties"]["limits"]["additionalProperties"]
    assert spec == published
    assert ours["properties"]["spec"]["properties"]["limits"]["additionalProperties"]["anyOf"] == [
        {"type": "integer"},
        {"type": "string"},
    ]
    assert ours["required"] == theirs["required"] == ["spec"]


def test_the_status_has_karpenters_fields_and_types() -> None:
    # Condition entries are the repository's one StatusCondition (lenient on reason and message, as for every
    # Karpenter object nodewright generates); fields and types are Karpenter's.
    ours = _shape(_version(OURS)["schema"]["openAPIV3Schema"]["properties"]["status"], with_required=False)
    theirs = _shape(
        _version(PUBLISHED)["schema"]["openAPIV3Schema"]["properties"]["status"], with_required=False
    )

    def strip(shape: dict[str, Any], dropped: tuple[str, ...]) -> dict[str, Any]:
        return {
            key: strip(value, dropped) if isinstance(value, dict) else value
            for key, value in shape.items()
            if key not in dropped
        }

    ours_conditions = ours["properties"].pop("conditions")
    theirs_conditions = theirs["properties"].pop("conditions")
    assert ours == theirs
    leniency = ("minimum", "minLength", "format")
    assert strip(ours_conditions, leniency) == strip(theirs_conditions, leniency)


def buffer(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "b"},
        "spec": spec,
    }


def test_a_buffer_defaults_its_strategy_and_namespace() -> None:
    parsed = CapacityBuffer.parse(buffer(podTemplateRef={"name": "t"}, replicas=2))
    assert parsed.spec.provisioning_strategy == ACTIVE_CAPACITY
    assert parsed.key == "default/b"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"podTemplateRef": {"name": "t"}}, "If podTemplateRef is set, replicas or limits must also be set"),
        (
            {
                "podTemplateRef": {"name": "t"},
                "scalableRef": {"kind": "Deployment", "name": "d"},
                "replicas": 1,
            },
            "You must define either PodTemplateRef or ScalableRef, but not both",
        ),
        ({"scalableRef": {"kind": "Deployment", "name": "d"}, "replicas": -1}, "spec.replicas"),
        ({"scalableRef": {"kind": "", "name": "d"}}, "spec.scalableRef.kind"),
        ({"scalableRef": {"kind": "Deployment", "name": "d"}, "limits": {"cpu": "lots"}}, "spec.limits"),
    ],
)
def test_what_karpenters_schema_refuses_is_refused_naming_the_field(
    spec: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidObjectError, match="CapacityBuffer") as error:
        CapacityBuffer.parse(buffer(**spec))
    assert problem in str(error.value)
