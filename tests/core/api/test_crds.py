"""The CRDs generated from the API models: structural, Karpenter's names and columns, and in step with the models.

A small OpenAPI checker below validates objects against the generated schemas the way the API server does before
its CEL rules run (types, enums, patterns, bounds, required and unknown fields); the CEL rules themselves are
checked against a real API server in `tests/controlplane/test_crd_validation.py`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.api.aksnodeclass import AKSNodeClass
from core.api.crds import custom_resource_definitions, openapi_schema
from core.api.meta import InvalidObjectError
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool

ROOT = Path(__file__).parents[3]
MODELS: dict[str, Any] = {"NodePool": NodePool, "NodeClaim": NodeClaim, "AKSNodeClass": AKSNodeClass}
DEFINITIONS = {
    definition["spec"]["names"]["kind"]: definition for definition in custom_resource_definitions()
}
SCHEMAS = {kind: openapi_schema(model) for kind, model in MODELS.items()}
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]

# --- a structural-schema checker -------------------------------------------------------------------------


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path, depth first."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """What keeps `schema` from being a structural schema the API server accepts, node by node."""
    problems = []
    for path, node in nodes(schema):
        where = path or "<root>"
        for key in ("$ref", "$defs", "definitions", "title", "nullable", "allOf", "oneOf", "not"):
            if key in node:
                problems.append(f"{where}: has {key}")
        if "default" in node and node["default"] is None:
            problems.append(f"{where}: default null")
        if "anyOf" in node:
            if node["anyOf"] != INT_OR_STRING or node.get("x-kubernetes-int-or-string") is not True:
                problems.append(f"{where}: anyOf other than the int-or-string form")
        elif "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{where}: no type")
        if node.get("type") == "object":
            shapes = [key for key in ("properties", "additionalProperties") if key in node]
            if path != ".metadata" and len(shapes) != 1:
                problems.append(
                    f"{where}: an object needs either properties or additionalProperties, got {shapes}"
                )
            if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
                problems.append(f"{where}: additionalProperties must be a schema")
        elif "properties" in node or "additionalProperties" in node:
            problems.append(f"{where}: properties on a {node.get('type')}")
        if node.get("type") == "array" and not isinstance(node.get("items"), dict):
            problems.append(f"{where}: an array needs an items schema")
        if "pattern" in node:
            try:
                re.compile(node["pattern"])
            except re.error as error:
                problems.append(f"{where}: pattern does not compile: {error}")
    if schema["properties"]["metadata"] != {"type": "object"}:
        problems.append(".metadata: must be exactly {type: object}")
    return problems


# --- a small OpenAPI validator (no CEL) -----------------------------------------------------------------

_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
}


def violations(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Where `value` breaks `schema`, as the API server's OpenAPI validation would say (CEL rules aside)."""
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{where}: must be an integer or a string"]
        if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
            return [f"{where}: does not match {schema['pattern']}"]
        return []
    kind = schema["type"]
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: must be an object"]
        return object_violations(value, schema, path)
    if not isinstance(value, _TYPES[kind]) or (kind != "boolean" and isinstance(value, bool)):
        return [f"{where}: must be of type {kind}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
    bounds = (
        ("minimum", 1),
        ("maximum", -1),
        ("minLength", 1),
        ("maxLength", -1),
        ("minItems", 1),
        ("maxItems", -1),
    )
    for key, sign in bounds:
        if key in schema:
            measure = value if key in ("minimum", "maximum") else len(value)
            if (measure - schema[key]) * sign < 0:
                problems.append(f"{where}: {key} {schema[key]} (got {measure})")
    if kind == "array":
        for index, item in enumerate(value):
            problems.extend(violations(item, schema["items"], f"{path}[{index}]"))
    return problems


def object_violations(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        problems.append(f"{path}: more than {schema['maxProperties']} properties")
    for name in schema.get("required", []):
        if name not in value:
            problems.append(f"{path}.{name}: Required value")
    if "additionalProperties" in schema:
        for name, item in value.items():
            problems.extend(violations(item, schema["additionalProperties"], f"{path}[{name}]"))
    elif "properties" in schema:
        for name, item in value.items():
            if name not in schema["properties"]:
                problems.append(f"{path}.{name}: unknown field")
            else:
                problems.extend(violations(item, schema["properties"][name], f"{path}.{name}"))
    return problems


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """`value` with the schema's defaults applied, as the API server applies them (outside in)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in schema:
        for name, child in schema["properties"].items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
        return {
            name: with_defaults(item, schema["properties"][name]) if name in schema["properties"] else item
            for name, item in value.items()
        }
    if isinstance(value, list) and "items" in schema:
        return [with_defaults(item, schema["items"]) for item in value]
    return value


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every NodePool, NodeClaim and AKSNodeClass in deploy/examples and deploy/snapshots."""
    found = []
    for directory in ("examples", "snapshots"):
        for path in sorted((ROOT / "deploy" / directory).glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if isinstance(document, dict) and document.get("kind") in MODELS:
                    found.append((f"{directory}/{path.name}:{document['metadata']['name']}", document))
    return found


MANIFESTS = manifests()

# --- the schema ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_schemas_are_structural(kind: str) -> None:
    assert structural_problems(SCHEMAS[kind]) == []


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_every_version_carries_the_schema_and_a_status_subresource(kind: str) -> None:
    definition = DEFINITIONS[kind]
    assert definition["apiVersion"] == "apiextensions.k8s.io/v1"
    assert definition["spec"]["scope"] == "Cluster"
    versions = definition["spec"]["versions"]
    assert [version["storage"] for version in versions].count(True) == 1
    for version in versions:
        assert version["served"] is True
        assert version["subresources"]["status"] == {}
        assert version["schema"]["openAPIV3Schema"] == SCHEMAS[kind]
    # As Karpenter's: `kubectl scale nodepool` sets a static pool's replicas and reads its node count.
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}
    assert versions[0]["subresources"].get("scale") == (scale if kind == "NodePool" else None)


def test_names_are_karpenters() -> None:
    names = {kind: definition["spec"]["names"] for kind, definition in DEFINITIONS.items()}
    assert DEFINITIONS["NodePool"]["metadata"]["name"] == "nodepools.karpenter.sh"
    assert DEFINITIONS["NodeClaim"]["metadata"]["name"] == "nodeclaims.karpenter.sh"
    assert DEFINITIONS["AKSNodeClass"]["metadata"]["name"] == "aksnodeclasses.karpenter.azure.com"
    assert names["AKSNodeClass"]["shortNames"] == ["aksnc", "aksncs"]
    assert "shortNames" not in names["NodePool"] and "shortNames" not in names["NodeClaim"]
    assert DEFINITIONS["NodeOverlay"]["metadata"]["name"] == "nodeoverlays.karpenter.sh"
    assert names["NodeOverlay"]["shortNames"] == ["overlays"]
    # nodewright's own extension is in its own group and category, outside Karpenter's.
    assert DEFINITIONS["CapacityWindow"]["metadata"]["name"] == "capacitywindows.nodewright.io"
    assert names.pop("CapacityWindow")["categories"] == ["nodewright"]
    categories = {"NodeOverlay": ["karpenter"], "CapacityBuffer": ["autoscaling"]}
    for kind, name in names.items():
        assert name["categories"] == categories.get(kind, ["karpenter", "nap"])
        assert name["listKind"] == f"{kind}List"
        assert name["singular"] == kind.lower()
    versions = {kind: [v["name"] for v in d["spec"]["versions"]] for kind, d in DEFINITIONS.items()}
    assert versions == {
        "NodePool": ["v1"],
        "NodeClaim": ["v1"],
        "AKSNodeClass": ["v1beta1", "v1alpha2"],
        "NodeOverlay": ["v1alpha1"],
        "CapacityWindow": ["v1alpha1"],
        "CapacityBuffer": ["v1beta1"],
    }


def columns(kind: str) -> list[tuple[str, str, str, int]]:
    (version, *_) = DEFINITIONS[kind]["spec"]["versions"]
    return [
        (column["name"], column["jsonPath"], column["type"], column.get("priority", 0))
        for column in version["additionalPrinterColumns"]
    ]


READY = ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string", 0)
AGE = ("Age", ".metadata.creationTimestamp", "date", 0)


def test_kubectl_get_nodeclaims_shows_karpenters_columns() -> None:
    assert columns("NodeClaim") == [
        ("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type", "string", 0),
        ("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type", "string", 0),
        ("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone", "string", 0),
        ("Node", ".status.nodeName", "string", 0),
        READY,
        AGE,
        ("ID", ".status.providerID", "string", 1),
        ("NodePool", ".metadata.labels.karpenter\\.sh/nodepool", "string", 1),
        ("NodeClass", ".spec.nodeClassRef.name", "string", 1),
        ("Drifted", '.status.conditions[?(@.type=="Drifted")].status', "string", 1),
    ]


def test_kubectl_get_nodepools_shows_karpenters_columns() -> None:
    assert columns("NodePool") == [
        ("NodeClass", ".spec.template.spec.nodeClassRef.name", "string", 0),
        ("Nodes", ".status.nodes", "string", 0),
        READY,
        AGE,
        ("Weight", ".spec.weight", "integer", 1),
        ("CPU", ".status.resources.cpu", "string", 1),
        ("Memory", ".status.resources.memory", "string", 1),
    ]


def test_kubectl_get_aksnodeclasses_shows_the_providers_columns() -> None:
    assert columns("AKSNodeClass") == [READY, AGE, ("ImageFamily", ".spec.imageFamily", "string", 1)]


def test_the_nodeoverlay_crd_is_structural_with_karpenters_columns() -> None:
    schema = DEFINITIONS["NodeOverlay"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    assert schema["properties"]["spec"]["required"] == ["requirements"]
    assert columns("NodeOverlay") == [READY, AGE, ("Weight", ".spec.weight", "integer", 1)]


def test_defaults_live_under_spec_only() -> None:
    for kind, schema in SCHEMAS.items():
        for path, node in nodes(schema):
            if "default" in node:
                assert path.startswith(".spec"), f"{kind}{path} has a default outside spec"


def test_the_generator_is_deterministic() -> None:
    assert custom_resource_definitions() == custom_resource_definitions()


# --- the schema and the models agree -------------------------------------------------------------------------


def test_there_are_manifests_of_every_kind() -> None:
    assert {manifest["kind"] for _, manifest in MANIFESTS} == set(MODELS)


@pytest.mark.parametrize(("name", "manifest"), MANIFESTS, ids=[name for name, _ in MANIFESTS])
def test_every_example_manifest_validates_against_its_schema(name: str, manifest: dict[str, Any]) -> None:
    assert violations(manifest, SCHEMAS[manifest["kind"]]) == []


@pytest.mark.parametrize(("name", "manifest"), MANIFESTS, ids=[name for name, _ in MANIFESTS])
def test_the_api_servers_defaults_do_not_change_what_the_models_read(
    name: str, manifest: dict[str, Any]
) -> None:
    model = MODELS[manifest["kind"]]
    defaulted = with_defaults(manifest, SCHEMAS[manifest["kind"]])
    assert violations(defaulted, SCHEMAS[manifest["kind"]]) == []
    assert model.parse(defaulted).model_dump() == model.parse(manifest).model_dump()


def nodepool(**spec: Any) -> dict[str, Any]:
    template_spec = {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
    }
    template_spec.update(spec.pop("template_spec", {}))
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": template_spec}, **spec},
    }


def nodeclass(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "c"},
        "spec": spec,
    }


def requirement(**fields: Any) -> dict[str, Any]:
    return nodepool(template_spec={"requirements": [fields]})


INVALID = {
    "weight above 100": (nodepool(weight=101), ".spec.weight: maximum"),
    "negative replicas": (nodepool(replicas=-1), ".spec.replicas: minimum"),
    "unknown operator": (requirement(key="a", operator="Sometimes", values=["x"]), ".operator"),
    "minValues 0": (requirement(key="a", operator="In", values=["x"], minValues=0), ".minValues: minimum"),
    "minValues 51": (requirement(key="a", operator="Exists", minValues=51), ".minValues: maximum"),
    "key with two slashes": (requirement(key="a/b/c", operator="Exists"), ".key"),
    "key too long": (requirement(key="a" * 317, operator="Exists"), ".key: maxLength"),
    "value with a space": (requirement(key="a", operator="In", values=["x y"]), ".values[0]"),
    "expireAfter in days": (nodepool(template_spec={"expireAfter": "30d"}), ".expireAfter"),
    "terminationGracePeriod Never": (
        nodepool(template_spec={"terminationGracePeriod": "Never"}),
        ".terminationGracePeriod",
    ),
    "bad taint effect": (
        nodepool(template_spec={"taints": [{"key": "a", "effect": "Sometimes"}]}),
        ".effect",
    ),
    "taint without key": (nodepool(template_spec={"taints": [{"effect": "NoSchedule"}]}), ".key: Required"),
    "unknown consolidation policy": (
        nodepool(disruption={"consolidationPolicy": "WhenUnderutilized"}),
        ".consolidationPolicy",
    ),
    "budget of 101%": (nodepool(disruption={"budgets": [{"nodes": "101%"}]}), ".nodes"),
    "budget duration in seconds": (
        nodepool(disruption={"budgets": [{"schedule": "@daily", "duration": "30s"}]}),
        ".duration",
    ),
    "budget schedule of four fields": (
        nodepool(disruption={"budgets": [{"schedule": "0 9 * *", "duration": "1h"}]}),
        ".schedule",
    ),
    "unknown budget reason": (nodepool(disruption={"budgets": [{"reasons": ["Expired"]}]}), ".reasons[0]"),
    "51 budgets": (nodepool(disruption={"budgets": [{"nodes": "1"}] * 51}), ".budgets: maxItems"),
    "101 labels": (
        nodepool(
            template={
                "metadata": {"labels": {f"l{i}": "v" for i in range(101)}},
                "spec": nodepool()["spec"]["template"]["spec"],
            }
        ),
        "more than 100 properties",
    ),
    "quantity with a unit typo": (nodepool(limits={"cpu": "10 cores"}), ".limits[cpu]"),
    "unknown spec field": (nodepool(provider={}), ".spec.provider: unknown field"),
    "OS disk of 10 GB": (nodeclass(osDiskSizeGB=10), ".osDiskSizeGB: minimum"),
    "unknown image family": (nodeclass(imageFamily="Windows2019"), ".imageFamily"),
    "maxPods 5": (nodeclass(maxPods=5), ".maxPods: minimum"),
    "subnet that is not a subnet ID": (nodeclass(vnetSubnetID="/subscriptions/x/vnet"), ".vnetSubnetID"),
    "log file size without a unit": (
        nodeclass(kubelet={"containerLogMaxSize": "50"}),
        ".containerLogMaxSize",
    ),
    "cpuCFSQuotaPeriod without a unit": (
        nodeclass(kubelet={"cpuCFSQuotaPeriod": "100"}),
        ".cpuCFSQuotaPeriod",
    ),
    "swappiness 101": (nodeclass(linuxOSConfig={"sysctls": {"vmSwappiness": 101}}), ".vmSwappiness: maximum"),
}


@pytest.mark.parametrize(("manifest", "expected"), INVALID.values(), ids=INVALID.keys())
def test_what_the_schema_rejects_the_models_reject_too(manifest: dict[str, Any], expected: str) -> None:
    problems = violations(manifest, SCHEMAS[manifest["kind"]])
    assert any(expected in problem for problem in problems), problems
    with pytest.raises(InvalidObjectError):
        MODELS[manifest["kind"]].parse(manifest)


VALID = {
    "Gt with a leading plus": requirement(key="a", operator="Gt", values=["+5"]),
    "an empty label value": requirement(key="a", operator="In", values=[""]),
    "a schedule with extra spaces": nodepool(
        disruption={"budgets": [{"schedule": " 0  9 * * mon-fri ", "duration": "8h"}]}
    ),
    "a budget duration ending in 0s": nodepool(
        disruption={"budgets": [{"schedule": "@daily", "duration": "1h30m0s"}]}
    ),
    "consolidateAfter Never": nodepool(disruption={"consolidateAfter": "Never"}),
    "expireAfter Never": nodepool(template_spec={"expireAfter": "Never"}),
    "a quantity as an integer": nodepool(limits={"cpu": 100, "memory": "1.5Ti"}),
    "a case-insensitive subnet ID": nodeclass(
        vnetSubnetID="/SUBSCRIPTIONS/s/resourcegroups/rg/providers/microsoft.network/virtualnetworks/v/subnets/n"
    ),
    "a Go duration with a fraction": nodeclass(kubelet={"cpuCFSQuotaPeriod": "1.5ms"}),
}


@pytest.mark.parametrize("manifest", VALID.values(), ids=VALID.keys())
def test_what_the_models_accept_the_schema_accepts(manifest: dict[str, Any]) -> None:
    MODELS[manifest["kind"]].parse(manifest)
    assert violations(manifest, SCHEMAS[manifest["kind"]]) == []
