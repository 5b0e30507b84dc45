"""The objects of the fuzz benchmark (benchmarks/fuzz.py): drawn from the CRDs' own OpenAPI schemas and from the
pod spec the API server publishes, then varied, all from one seed.

Drawing is hypothesis-jsonschema's: a strategy from a JSON Schema, run under `@given` with a fixed seed, so the
same seed gives the same objects. What the CRDs say in OpenAPI is turned into the JSON Schema it means (an object
with `properties` takes no other field, as the API server's strict field validation has it; `int32` and `int64`
become bounds); the `x-kubernetes-validations` (CEL) rules are left to the API server, which is what judges them.
The pod spec comes from the API server's `/openapi/v3/api/v1`, cut to what placement reads (affinities, spreads,
tolerations, node selectors, pod-level and container resources, volumes, priority, scheduling gates), with
quantities, label keys and label values drawn from odd but plausible forms so that the API server accepts some.

Drawing a whole object takes hypothesis tens of milliseconds to a second, so a share of the objects (`drawn`) is
drawn and the rest are variations of the drawn ones, guided by the same schema: a field taken from another drawn
object of the kind (`crossed`, usually still valid), or a field broken (`broken`: another JSON type, an odd
string or number, a field no schema has, a field removed). Whether each object is valid is decided by the schema
itself (`jsonschema`), never assumed.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis_jsonschema._from_schema as jsonschema_strategies
import jsonschema
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis_jsonschema import from_schema

from benchmarks.fuzz_rules import Rules, at, go_pattern

CRDS = Path(__file__).resolve().parent.parent / "deploy" / "crds"
POD_API = "/openapi/v3/api/v1"
"""Where the API server publishes the core/v1 schemas (PodSpec and what it refers to)."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind the benchmark makes objects of, and where the API server serves it."""

    name: str
    api_version: str
    path: str
    """The collection's path on the API server, e.g. `/apis/karpenter.sh/v1/nodepools`."""
    namespaced: bool
    schema: dict[str, Any]
    """The JSON Schema of the object without `apiVersion`, `kind` and `metadata` (ours to give)."""
    rules: Rules
    """What the schema cannot say: the CRD's CEL rules, or the pod validation rules (`POD_RULES`)."""
    prefix: str
    """Object names are `<prefix>-<index>`."""


@dataclass(slots=True)
class Fuzzed:
    kind: Kind
    body: dict[str, Any]
    origin: str
    """`drawn`, `crossed` or `broken`, and for the last two what changed."""
    valid: bool
    """Whether the object satisfies its schema and the rules the schema cannot say (`Kind.rules`)."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def key(self) -> str:
        """`Kind name`, or `Kind namespace/name`: how nodewright names an object in its messages."""
        return f"{self.kind.name} {'default/' if self.kind.namespaced else ''}{self.name}"


# --- schemas ---------------------------------------------------------------------------------------------


VOCABULARY = [
    "default",
    "karpenter.azure.com",
    "karpenter.sh",
    "AKSNodeClass",
    "NodePool",
    "Deployment",
    "apps",
    "web",
    "0 8 * * mon-fri",
    "@daily",
    "*/5 * * * *",
    "10h",
    "30m",
    "1h30m",
    "Never",
    "10%",
    "2",
    "Ubuntu2204",
    "AzureLinux",
]
"""Words the CRDs' free strings take in real objects (names, references, cron schedules, durations): drawn
beside any string, so that the CEL rules the schema cannot say let some objects through."""


def json_schema(openapi: Any) -> Any:
    """The JSON Schema an OpenAPI v3 structural schema means, its CEL rules and descriptions left out (`Rules`
    judges the rules); patterns match what Go's match (`go_pattern`), integers are int64 unless a format says
    int32, and a string may also be one of `VOCABULARY` (where its pattern takes the word)."""
    if isinstance(openapi, list):
        return [json_schema(item) for item in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out: dict[str, Any] = {}
    for key, value in openapi.items():
        if key.startswith("x-kubernetes") or key in ("description", "default", "example", "format"):
            if key == "format" and value not in ("int32", "int64"):
                out[key] = value
            continue
        out[key] = go_pattern(value) if key == "pattern" else json_schema(value)
    if openapi.get("type") == "integer":
        limit = 2**31 if openapi.get("format") == "int32" else 2**63
        out["minimum"], out["maximum"] = (
            max(out.get("minimum", -limit), -limit),
            min(out.get("maximum", limit - 1), limit - 1),
        )
    if "properties" in openapi and not openapi.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if out.get("type") == "string" and not {"enum", "format"} & set(out):
        words = [word for word in VOCABULARY if re.search(out.get("pattern", ""), word)]
        if words:
            return {"anyOf": [{"enum": words}, out]}
    return out


def _content_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """The object's schema without `apiVersion`, `kind` and `metadata`, which the benchmark gives."""
    schema = dict(openapi)
    schema["properties"] = {
        key: value
        for key, value in openapi.get("properties", {}).items()
        if key not in ("apiVersion", "kind", "metadata")
    }
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in ("apiVersion", "kind", "metadata")]
    return schema


def crd_kinds() -> list[Kind]:
    """A kind per CRD of deploy/crds, at its storage version."""
    kinds = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        version = next(v for v in spec["versions"] if v.get("storage"))
        namespaced = spec["scope"] == "Namespaced"
        plural = spec["names"]["plural"]
        content = _content_schema(version["schema"]["openAPIV3Schema"])
        collection = f"/apis/{spec['group']}/{version['name']}"
        collection += f"/namespaces/default/{plural}" if namespaced else f"/{plural}"
        kinds.append(
            Kind(
                name=spec["names"]["kind"],
                api_version=f"{spec['group']}/{version['name']}",
                path=collection,
                namespaced=namespaced,
                schema=json_schema(content),
                rules=Rules(content, VOCABULARY),
                prefix=f"fz-{spec['names']['kind'].lower()}",
            )
        )
    return kinds


WELL_KNOWN_KEYS = [
    "topology.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "karpenter.sh/capacity-type",
    "node.kubernetes.io/instance-type",
    "karpenter.azure.com/sku-family",
    "karpenter.azure.com/sku-cpu",
    "kubernetes.azure.com/fips_enabled",
    "karpenter.sh/nodepool",
]
WELL_KNOWN_VALUES = [
    "eastus-1",
    "eastus-2",
    "0",
    "amd64",
    "arm64",
    "spot",
    "on-demand",
    "Standard_D4s_v5",
    "D",
    "4",
]
LABEL_KEY = {
    "anyOf": [
        {"enum": WELL_KNOWN_KEYS},
        {
            "type": "string",
            "pattern": r"^([a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4}){0,2}/)?"
            r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?$",
        },
    ]
}
LABEL_VALUE = {
    "anyOf": [
        {"enum": WELL_KNOWN_VALUES},
        {"type": "string", "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?$"},
    ]
}
LABELS = {
    "type": "object",
    "propertyNames": LABEL_KEY,
    "additionalProperties": LABEL_VALUE,
    "maxProperties": 4,
}
QUANTITY = {
    "anyOf": [
        {
            "type": "string",
            # Kubernetes' quantity grammar, and some forms just outside it (a lone suffix, two points).
            "pattern": r"^[+-]?([0-9]{1,4}(\.[0-9]{0,4})?|\.[0-9]{1,3}|[0-9]{19,20})"
            r"(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]{1,3}|n|u|\.5)?$",
        },
        {"type": "integer", "minimum": -(2**10), "maximum": 2**40},
        {"type": "number", "minimum": -1, "maximum": 1e6},
    ]
}
RESOURCES = {
    "type": "object",
    "properties": {
        name: QUANTITY
        for name in (
            "cpu",
            "memory",
            "ephemeral-storage",
            "nvidia.com/gpu",
            "hugepages-2Mi",
            "example.com/dongle",
        )
    },
    "additionalProperties": False,
}
SMALL_NAME = {"type": "string", "pattern": r"^[a-z]([a-z0-9-]{0,6}[a-z0-9])?$"}
POD_FIELDS = {
    "io.k8s.api.core.v1.PodSpec": [
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "nodeSelector",
        "resources",
        "overhead",
        "volumes",
        "schedulingGates",
        "containers",
        "initContainers",
    ],
    "io.k8s.api.core.v1.Container": ["name", "image", "resources", "ports", "restartPolicy"],
    "io.k8s.api.core.v1.Volume": ["name", "persistentVolumeClaim", "emptyDir", "hostPath", "configMap"],
    "io.k8s.api.core.v1.ResourceRequirements": ["requests", "limits"],
    "io.k8s.api.core.v1.ContainerPort": ["containerPort", "hostPort", "protocol"],
    "io.k8s.api.core.v1.ConfigMapVolumeSource": ["name", "optional"],
}
"""Per definition, the properties kept: what placement reads, and what a pod cannot be created without."""
POD_OVERRIDES: dict[tuple[str, str], Any] = {
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector"): LABELS,
    ("io.k8s.api.core.v1.PodSpec", "overhead"): RESOURCES,
    ("io.k8s.api.core.v1.ResourceRequirements", "requests"): RESOURCES,
    ("io.k8s.api.core.v1.ResourceRequirements", "limits"): RESOURCES,
    ("io.k8s.api.core.v1.Container", "name"): SMALL_NAME,
    ("io.k8s.api.core.v1.Container", "image"): {"const": "registry.k8s.io/pause:3.10"},
    ("io.k8s.api.core.v1.Volume", "name"): SMALL_NAME,
    ("io.k8s.api.core.v1.ContainerPort", "containerPort"): {
        "type": "integer",
        "minimum": 1,
        "maximum": 65535,
    },
    ("io.k8s.api.core.v1.ContainerPort", "hostPort"): {"type": "integer", "minimum": 0, "maximum": 65535},
    ("io.k8s.api.core.v1.PodSchedulingGate", "name"): {
        "type": "string",
        "pattern": r"^example\.com/[a-z]{1,5}$",
    },
    ("io.k8s.api.core.v1.NodeSelectorRequirement", "key"): LABEL_KEY,
    ("io.k8s.api.core.v1.NodeSelectorRequirement", "values"): {"type": "array", "items": LABEL_VALUE},
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "key"): LABEL_KEY,
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "values"): {
        "type": "array",
        "items": LABEL_VALUE,
    },
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", "matchLabels"): LABELS,
    ("io.k8s.api.core.v1.PodAffinityTerm", "topologyKey"): LABEL_KEY,
    ("io.k8s.api.core.v1.TopologySpreadConstraint", "topologyKey"): LABEL_KEY,
    ("io.k8s.api.core.v1.Toleration", "key"): LABEL_KEY,
    ("io.k8s.api.core.v1.Toleration", "value"): LABEL_VALUE,
    ("io.k8s.api.core.v1.Toleration", "operator"): {"enum": ["Equal", "Exists"]},
    ("io.k8s.api.core.v1.TopologySpreadConstraint", "maxSkew"): {
        "type": "integer",
        "minimum": 1,
        "maximum": 10,
    },
    ("io.k8s.api.core.v1.TopologySpreadConstraint", "minDomains"): {
        "type": "integer",
        "minimum": 1,
        "maximum": 10,
    },
    ("io.k8s.api.core.v1.TopologySpreadConstraint", "matchLabelKeys"): {"type": "array", "items": LABEL_KEY},
    ("io.k8s.api.core.v1.PodAffinityTerm", "matchLabelKeys"): {"type": "array", "items": LABEL_KEY},
    ("io.k8s.api.core.v1.PodAffinityTerm", "mismatchLabelKeys"): {"type": "array", "items": LABEL_KEY},
    ("io.k8s.api.core.v1.PodAffinityTerm", "namespaces"): {"type": "array", "items": SMALL_NAME},
    ("io.k8s.api.core.v1.WeightedPodAffinityTerm", "weight"): {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
    },
    ("io.k8s.api.core.v1.PreferredSchedulingTerm", "weight"): {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
    },
    ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", "operator"): {
        "enum": ["In", "NotIn", "Exists", "DoesNotExist"]
    },
    ("io.k8s.api.core.v1.Container", "restartPolicy"): {"enum": ["Always"]},
    ("io.k8s.api.core.v1.PersistentVolumeClaimVolumeSource", "claimName"): SMALL_NAME,
    ("io.k8s.api.core.v1.ConfigMapVolumeSource", "name"): SMALL_NAME,
    ("io.k8s.api.core.v1.EmptyDirVolumeSource", "medium"): {"enum": ["", "Memory"]},
    ("io.k8s.api.core.v1.HostPathVolumeSource", "path"): {
        "type": "string",
        "pattern": r"^(/[a-z0-9]{1,6}){1,3}$",
    },
}
"""Fields drawn from narrower forms than the published schema's `string`: names the API server takes, label keys
and values that select real labels (or nearly), odd quantities."""

_VALUES_GIVEN = "(has(self.values) && size(self.values) > 0)"
_NO_VALUES = "(!has(self.values) || size(self.values) == 0)"
_NOT_SELECTED = (
    "!has(self.labelSelector) || !has(self.{keys}) || self.{keys}.all(k, !(has(self.labelSelector.matchLabels) && "
    "k in self.labelSelector.matchLabels) && !(has(self.labelSelector.matchExpressions) && "
    "self.labelSelector.matchExpressions.exists(e, e.key == k)))"
)


def _resources_rules(names: str = "") -> list[str]:
    """Kubernetes' rules of a ResourceRequirements (`ValidateResourceRequirements`); given `names`, a CEL
    condition on `k`, the resources it may name (pod-level resources take only some)."""
    rules = []
    for part in ("requests", "limits"):
        every = f"!has(self.{part}) || self.{part}.all(k, "
        rules += [
            every + f"isQuantity(self.{part}[k]) && quantityCompare(self.{part}[k], 0) in [0, 1])",
            every + f"!k.startsWith('hugepages-') || isWholeMultiple(self.{part}[k], '2Mi'))",
            every + f"!k.contains('/') || isWholeQuantity(self.{part}[k]))",
        ]
        if names:
            rules.append(every + f"{names})")
    return [
        *rules,
        # Extended resources and hugepages cannot be overcommitted: a request needs the same limit.
        "!has(self.requests) || self.requests.all(k, !(k.contains('/') || k.startsWith('hugepages-')) || "
        "(has(self.limits) && k in self.limits && quantityCompare(self.requests[k], self.limits[k]) == 0))",
        "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
        "quantityCompare(self.requests[k], self.limits[k]) in [-1, 0])",
        "!((has(self.limits) && self.limits.exists(k, k.startsWith('hugepages-'))) || (has(self.requests) && "
        "self.requests.exists(k, k.startsWith('hugepages-')))) || (has(self.limits) && ('cpu' in self.limits || "
        "'memory' in self.limits)) || (has(self.requests) && ('cpu' in self.requests || 'memory' in self.requests))",
    ]


POD_RULES: dict[str, list[str]] = {
    "io.k8s.api.core.v1.PodSpec": [
        "!has(self.overhead)",  # admission refuses an overhead without a RuntimeClass that defines one
        "isUnique(self.containers.map(c, c.name) + (has(self.initContainers) ? "
        "self.initContainers.map(c, c.name) : []))",
        "!has(self.volumes) || isUnique(self.volumes.map(v, v.name))",
        "!has(self.schedulingGates) || isUnique(self.schedulingGates.map(g, g.name))",
        "!has(self.topologySpreadConstraints) || "
        "isUnique(self.topologySpreadConstraints.map(t, [t.topologyKey, t.whenUnsatisfiable]))",
    ],
    "io.k8s.api.core.v1.ResourceRequirements": _resources_rules(),
    "io.k8s.api.core.v1.Toleration": [
        "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
    ],
    "io.k8s.api.core.v1.TopologySpreadConstraint": [
        "!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
        "!has(self.matchLabelKeys) || (has(self.labelSelector) && isUnique(self.matchLabelKeys))",
        _NOT_SELECTED.format(keys="matchLabelKeys"),
    ],
    "io.k8s.api.core.v1.NodeSelectorRequirement": [
        f"!(self.operator in ['In', 'NotIn']) || {_VALUES_GIVEN}",
        f"!(self.operator in ['Exists', 'DoesNotExist']) || {_NO_VALUES}",
        "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1 && "
        "self.values[0].matches('^-?[0-9]+$'))",
    ],
    "io.k8s.api.core.v1.NodeSelectorTerm": [
        "!has(self.matchFields) || self.matchFields.all(f, f.key == 'metadata.name' && f.operator in ['In', "
        "'NotIn'] && has(f.values) && size(f.values) == 1 && f.values[0].matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$'))",
    ],
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement": [
        f"!(self.operator in ['In', 'NotIn']) || {_VALUES_GIVEN}",
        f"!(self.operator in ['Exists', 'DoesNotExist']) || {_NO_VALUES}",
    ],
    "io.k8s.api.core.v1.PodAffinityTerm": [
        "!has(self.matchLabelKeys) || (has(self.labelSelector) && isUnique(self.matchLabelKeys))",
        "!has(self.mismatchLabelKeys) || (has(self.labelSelector) && isUnique(self.mismatchLabelKeys))",
        "!has(self.matchLabelKeys) || !has(self.mismatchLabelKeys) || "
        "self.matchLabelKeys.all(k, !(k in self.mismatchLabelKeys))",
        _NOT_SELECTED.format(keys="matchLabelKeys"),
        _NOT_SELECTED.format(keys="mismatchLabelKeys"),
    ],
    "io.k8s.api.core.v1.Volume": [
        " + ".join(f"(has(self.{source}) ? 1 : 0)" for source in POD_FIELDS["io.k8s.api.core.v1.Volume"][1:])
        + " == 1",
    ],
    "io.k8s.api.core.v1.EmptyDirVolumeSource": [
        "!has(self.sizeLimit) || quantityCompare(self.sizeLimit, 0) in [0, 1]"
    ],
}
"""Kubernetes' pod validation, as much of it as the benchmark's pods meet, in CEL over the cut PodSpec: what the
API server checks in Go and no published schema says. `Rules` judges and repairs pods by them as it does the CRDs'
objects by theirs."""
POD_FIELD_RULES: dict[tuple[str, str], list[str]] = {
    ("containers", "items"): ["!has(self.restartPolicy)"],  # only an init container may set it (a sidecar)
    ("resources", ""): _resources_rules("k in ['cpu', 'memory'] || k.startsWith('hugepages-')"),
}
"""Rules for one PodSpec field (where its definition is shared with others): under `properties[field]`, at the
key given (`items` for each item, `` for the field)."""


POD_LIST_ITEMS = 4
"""The most items a pod's list is drawn with, where the schema says nothing: enough for every combination the
scheduler meets, few enough that a pod is repaired and planned quickly."""


def pod_kind(openapi: dict[str, Any]) -> Kind:
    """Pods from the API server's own PodSpec (`openapi`: its `/openapi/v3/api/v1` document), cut to
    `POD_FIELDS` with `POD_OVERRIDES`, and labels drawn as `LABELS`."""
    definitions = openapi["components"]["schemas"]

    def resolve(node: Any, owner: str | None = None) -> Any:
        if isinstance(node, list):
            return [resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref") or (node.get("allOf") or [{}])[0].get("$ref")
        if ref:
            name = ref.rsplit("/", 1)[1]
            if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
                return QUANTITY
            return definition(name)
        out = {}
        for key, value in node.items():
            if key == "properties" and owner is not None:
                kept = POD_FIELDS.get(owner)
                out[key] = {}
                for field, schema in value.items():
                    if kept is not None and field not in kept:
                        continue
                    override = POD_OVERRIDES.get((owner, field))
                    out[key][field] = override if override is not None else resolve(schema)
            elif key == "required" and owner is not None:
                out[key] = [r for r in value if r in (POD_FIELDS.get(owner) or value)]
            else:
                out[key] = resolve(value)
        if out.get("type") == "array":
            out.setdefault("maxItems", POD_LIST_ITEMS)
        return out

    @functools.cache
    def definition(name: str) -> Any:
        resolved = resolve(definitions[name], name)
        if name in POD_RULES:
            resolved["x-kubernetes-validations"] = [{"rule": rule} for rule in POD_RULES[name]]
        return resolved

    spec = definition("io.k8s.api.core.v1.PodSpec")
    spec["properties"]["containers"].update(minItems=1, maxItems=3)
    container = definition("io.k8s.api.core.v1.Container")
    container["required"] = ["name", "image"]
    for (field, under), rules in POD_FIELD_RULES.items():
        place = spec["properties"][field]
        place = place[under] if under else place
        shared = copy.deepcopy(place)
        shared["x-kubernetes-validations"] = [{"rule": rule} for rule in rules]
        if under:
            spec["properties"][field][under] = shared
        else:
            spec["properties"][field] = shared
    openapi = {
        "type": "object",
        "properties": {"spec": spec, "labels": LABELS},
        "required": ["spec"],
        "additionalProperties": False,
    }
    return Kind(
        "Pod",
        "v1",
        "/api/v1/namespaces/default/pods",
        True,
        json_schema(openapi),
        Rules(openapi, VOCABULARY),
        "fz-pod",
    )


# --- drawing -----------------------------------------------------------------------------------------------


def _memoized(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` answering the same arguments with the same strategy: hypothesis-jsonschema builds the strategy
    of every object field again at every draw, which took four fifths of the time; a strategy is a description,
    safe to reuse."""
    cache: dict[str, Any] = {}

    def memoized(*args: Any, **kwargs: Any) -> Any:
        key = json.dumps([args, sorted(kwargs.items())], sort_keys=True, default=id)
        if key not in cache:
            cache[key] = function(*args, **kwargs)
        return cache[key]

    return memoized


for _name in ("from_js_regex", "merged_as_strategies", "__from_schema"):
    setattr(jsonschema_strategies, _name, _memoized(getattr(jsonschema_strategies, _name)))


def draw(schema: dict[str, Any], count: int, seed_value: int) -> list[Any]:
    """`count` values of the schema (fewer if hypothesis runs out of distinct ones), the same for the same seed."""
    found: list[Any] = []

    @seed(seed_value)
    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(from_schema(schema, codec="utf-8"))
    def collect(value: Any) -> None:
        found.append(value)

    collect()
    return found


# --- variations --------------------------------------------------------------------------------------------

ODD_STRINGS = ["", " ", "-1", "1e400", "NaN", "Inf", "0x10", "1.5.5", "Gi", "日本", "a" * 300, "null", "true"]
ODD_NUMBERS: list[Any] = [-1, 0, 2**63, -(2**63) - 1, 1e308, 0.5, -0.0001, 10**30]
ODD_VALUES: list[Any] = [None, True, [], {}, [None], {"unexpected": 1}, *ODD_STRINGS[:4], *ODD_NUMBERS[:4]]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) in a JSON value, the root excluded."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*prefix, key), child
        yield from paths(child, (*prefix, key))


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    at(value, path[:-1])[path[-1]] = new


def crossed(
    body: dict[str, Any], donors: list[dict[str, Any]], rng: random.Random
) -> tuple[dict[str, Any], str]:
    """The object with one field taken from another drawn object of the kind, at the same path."""
    changed = copy.deepcopy(body)
    donor = rng.choice(donors)
    shared = [path for path, _ in paths(donor) if _has(changed, path[:-1])]
    if not shared:
        return changed, "crossed: nothing in common"
    path = rng.choice(shared)
    parent = at(changed, path[:-1])
    if isinstance(parent, list) and path[-1] >= len(parent):
        parent.append(copy.deepcopy(at(donor, path)))
    else:
        _set(changed, path, copy.deepcopy(at(donor, path)))
    return changed, f"crossed: {_dotted(path)}"


def _has(value: Any, path: tuple[Any, ...]) -> bool:
    try:
        return isinstance(at(value, path), (dict, list))
    except KeyError:
        return False


def broken(body: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """The object with one field broken: another type, an odd value, a field no schema has, or one removed."""
    changed = copy.deepcopy(body)
    fields = list(paths(changed))
    if not fields:
        changed["spec"] = rng.choice(ODD_VALUES)
        return changed, "broken: spec replaced"
    path, value = rng.choice(fields)
    how = rng.random()
    if how < 0.15 and isinstance(at(changed, path[:-1]), dict):
        del at(changed, path[:-1])[path[-1]]
        return changed, f"broken: {_dotted(path)} removed"
    if how < 0.3:
        container = value if isinstance(value, dict) else at(changed, path[:-1])
        if isinstance(container, dict):
            container[rng.choice(["unknownField", "Spec", "requirements ", "x"])] = rng.choice(ODD_VALUES)
            return changed, f"broken: a field no schema has under {_dotted(path)}"
    if isinstance(value, str):
        new: Any = rng.choice([*ODD_STRINGS, *ODD_NUMBERS[:3], value + rng.choice(ODD_STRINGS)])
    elif isinstance(value, bool):
        new = rng.choice(["true", 1, None])
    elif isinstance(value, (int, float)):
        new = rng.choice([*ODD_NUMBERS, str(value), math.copysign(1, value) * 1e-9])
    elif isinstance(value, list):
        new = rng.choice([value * 40, [rng.choice(ODD_VALUES)], "[]", None])
    else:
        new = rng.choice(ODD_VALUES)
    _set(changed, path, new)
    return changed, f"broken: {_dotted(path)}"


def _dotted(path: tuple[Any, ...]) -> str:
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")


# --- objects ---------------------------------------------------------------------------------------------

SHARES = {
    "Pod": 0.3,
    "NodePool": 0.15,
    "NodeClaim": 0.15,
    "AKSNodeClass": 0.1,
    "NodeOverlay": 0.1,
    "CapacityBuffer": 0.1,
    "CapacityWindow": 0.1,
}
"""Each kind's share of the objects: pods are most of what a cluster sees."""


NODECLASS_REFERENCES = {
    "NodePool": ("spec", "template", "spec", "nodeClassRef"),
    "NodeClaim": ("spec", "nodeClassRef"),
}
OURS = 0.5
"""The share of drawn NodePools and NodeClaims made to reference the AKSNodeClass `default` (the running system's):
the others reference what was drawn, nearly always another provider's NodeClass, which nodewright leaves alone."""


def _ours(kind: Kind, content: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    path = NODECLASS_REFERENCES.get(kind.name)
    if path is not None and _has(content, path) and rng.random() < OURS:
        _set(content, path, {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"})
    return content


def manifest(kind: Kind, index: int, content: dict[str, Any]) -> dict[str, Any]:
    """The object as `kubectl apply` would send it: our apiVersion, kind and name around the drawn content."""
    metadata: dict[str, Any] = {"name": f"{kind.prefix}-{index:05d}"}
    if kind.namespaced:
        metadata["namespace"] = "default"
    body = {"apiVersion": kind.api_version, "kind": kind.name, "metadata": metadata}
    content = dict(content)
    if kind.name == "Pod" and "labels" in content:
        labels = content.pop("labels")
        if labels:
            metadata["labels"] = labels
    body.update(content)
    return body


def objects(kinds: list[Kind], total: int, seed_value: int, drawn_share: float) -> list[Fuzzed]:
    """`total` objects over the kinds by `SHARES`, a `drawn_share` of each kind's drawn and the rest varied, half
    crossed and half broken; shuffled by the seed. The drawn and the crossed are meant to be valid: each is
    repaired against the rules its schema cannot say (`Rules.repair`); the broken are left broken."""
    rng = random.Random(seed_value)
    made: list[Fuzzed] = []
    for kind in kinds:
        count = max(2, round(total * SHARES[kind.name]))
        wanted = max(1, math.ceil(count * drawn_share))
        contents = [
            kind.rules.repair(_ours(kind, content, rng)) for content in draw(kind.schema, wanted, seed_value)
        ]
        validator = jsonschema.Draft7Validator(kind.schema)
        for index in range(count):
            base = contents[index % len(contents)]
            if index < len(contents):
                content, origin = copy.deepcopy(base), "drawn"
            elif rng.random() < 0.5:
                content, origin = crossed(base, contents, rng)
                content = kind.rules.repair(content)
            else:
                content, origin = broken(base, rng)
            body = manifest(kind, index, content)
            judged = _content(kind, body)
            valid = validator.is_valid(judged) and not kind.rules.failures(judged)
            made.append(Fuzzed(kind, body, origin, valid))
    rng.shuffle(made)
    return made


def _content(kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
    """What the schema describes of a manifest (ours: apiVersion, kind, metadata, less the pods' labels)."""
    content = {key: value for key, value in body.items() if key not in ("apiVersion", "kind", "metadata")}
    if kind.name == "Pod" and "labels" in body["metadata"]:
        content["labels"] = body["metadata"]["labels"]
    return content
