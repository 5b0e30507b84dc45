"""The CustomResourceDefinitions of NodePool, NodeClaim, AKSNodeClass, NodeOverlay and CapacityBuffer, generated
from the API models.

The pydantic models in `core.api` are the one source of truth for what a valid object is. This module walks
their fields and writes the structural OpenAPI v3 schema the API server needs: types, required fields, enums,
patterns and bounds come from the field annotations; defaults from the field defaults (spec only: status is
written by controllers, metadata belongs to the API server); and the rules the models check in Python become
`x-kubernetes-validations` CEL rules, with Karpenter's messages where Karpenter's CRDs have the same rule.

The schema never rejects an object the models accept, with two deliberate exceptions: quantities must be
integers or strings in the Kubernetes form (the API server's int-or-string; the models also take floats and
surrounding spaces), and requirement values are at most 63 characters even for Gt/Lt integers. Some model
rules stay in Python only, where CEL would cost too much or a pattern cannot say it: the lengths of label key
parts, duplicate taints across `taints` and `startupTaints`, cron fields that never fire, valid capacity-type
values, and a leading "+" on values of operators other than Gt/Lt/Gte/Lte. The controller still parses every
object with the models, so those are reported there.

The patterns come from the models' own regular expressions (private names of `core.api.nodepool`,
`core.api.aksnodeclass` and `core.quantity`), so a rule has one spelling.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from core import labels
from core.api.aksnodeclass import (
    _GO_DURATION,
    _TAG_KEY_FORBIDDEN,
    ALWAYS_FIPS_FAMILIES,
    CLUSTER_ZONE,
    NO_TRUSTED_LAUNCH_FAMILIES,
    ROOT_ZONE,
    TRUSTED_LAUNCH_FIPS_FAMILIES,
    WINDOWS_FAMILIES,
    AKSNodeClass,
    AKSNodeClassSpec,
    FIPSMode,
    ImageFamily,
    KubeletConfiguration,
    LocalDNS,
    LocalDNSForwardDestination,
    LocalDNSMode,
    LocalDNSProtocol,
    LocalDNSServeStale,
    LocalDNSZoneOverride,
    SysctlConfiguration,
)
from core.api.capacitybuffer import GROUP as CAPACITY_BUFFER_GROUP
from core.api.capacitybuffer import CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus
from core.api.capacitywindow import (
    CapacityWindow,
    CapacityWindowSpec,
    TargetKind,
    TargetReference,
    target_group,
)
from core.api.kube import Quantity
from core.api.meta import Taint
from core.api.nodeclaim import NodeClaim
from core.api.nodeoverlay import (
    PRICE,
    PRICE_ADJUSTMENT,
    RESTRICTED_CAPACITY,
    NodeOverlay,
    NodeOverlayRequirement,
    NodeOverlaySpec,
)
from core.api.nodepool import (
    _BOUND_OPERATORS,
    _BUDGET_DURATION,
    _BUDGET_NODES,
    _DNS_SUBDOMAIN,
    _DURATION,
    _KUBERNETES_KEYS,
    _KUBERNETES_SUBDOMAINS,
    _LABEL_NAME,
    _MAX_LABELS,
    _NODECLASS_LABEL,
    _NON_NEGATIVE_INTEGER,
    _VALUELESS_OPERATORS,
    NEVER,
    Budget,
    BudgetDuration,
    Duration,
    NillableDuration,
    NodeClaimTemplateSpec,
    NodeClassReference,
    NodePool,
    NodePoolSpec,
    NodeSelectorRequirementWithMinValues,
    TemplateMetadata,
    restricted_label_problem,
)
from core.quantity import _PATTERN as _QUANTITY

Schema = dict[str, Any]
"""One node of an OpenAPI v3 schema, or a whole CustomResourceDefinition, as plain JSON-able dicts."""

# --- regular expressions, from the models' own ----------------------------------------------------------


def _whole(pattern: str) -> str:
    """An OpenAPI pattern (unanchored, like `re.search`) matching what `re.fullmatch(pattern)` matches."""
    return f"^(?:{pattern})$"


_LABEL_VALUE = f"^(?:{_LABEL_NAME.pattern})?$"
_QUALIFIED_NAME = f"^(?:(?:{_DNS_SUBDOMAIN.pattern})/)?(?:{_LABEL_NAME.pattern})$"
_REQUIREMENT_VALUE = f"^(?:(?:{_LABEL_NAME.pattern})?|{_NON_NEGATIVE_INTEGER.pattern})$"
_LABEL_VALUE_MAX_LENGTH = 63
_SCHEDULE = (
    r"^\s*(?:@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s*$"
)
"""A descriptor or five whitespace-separated fields; `core.cron` checks each field."""

_ALIASES: tuple[tuple[Any, Schema], ...] = (
    (Duration, {"type": "string", "pattern": _whole(_DURATION.pattern)}),
    (NillableDuration, {"type": "string", "pattern": _whole(f"{_DURATION.pattern}|{NEVER}")}),
    (BudgetDuration, {"type": "string", "pattern": _whole(_BUDGET_DURATION.pattern)}),
    (
        Quantity,
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": _QUANTITY.pattern,
            "x-kubernetes-int-or-string": True,
        },
    ),
)
"""Annotated types whose validator says more than their base type: their schema replaces the walk's."""


# --- CEL --------------------------------------------------------------------------------------------------


def _literal(text: str) -> str:
    """`text` as a CEL string literal."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_literal(value) for value in sorted(values)) + "]"


def _rule(rule: str, message: str, field: str | None = None) -> Schema:
    validation: Schema = {"rule": rule, "message": message}
    if field is not None:
        validation["fieldPath"] = f".{field}"
    return validation


def _in_domain(key: str, parent: str) -> str:
    """CEL: whether label key `key` is in the domain `parent` or a subdomain of it."""
    return (
        f"({key}.startsWith({_literal(parent + '/')}) || "
        f"({key}.contains('/') && {key}.split('/')[0].endsWith({_literal('.' + parent)})))"
    )


def _allowed_or_outside(key: str, allowed: Iterable[str], domain: str) -> str:
    return f"{key} in {_list(allowed)} || !{_in_domain(key, domain)}"


def _restricted_label_rules(key: str, nodepool: bool) -> list[tuple[str, str]]:
    """(CEL condition on `key`, message) for each label key a NodePool or NodeClaim may not use.

    The same rules as `restricted_label_problem`; deprecated beta keys are listed where the key they stand for
    is allowed, since the model normalizes them first. NodePools also may not set `karpenter.sh/nodepool`.
    """
    kubernetes_keys = {
        key for key in (*_KUBERNETES_KEYS, *labels.NORMALIZED_LABELS) if not restricted_label_problem(key)
    }
    azure_keys = {
        name
        for name in (*labels.WELL_KNOWN_LABELS, _NODECLASS_LABEL)
        if labels.label_domain(name) == labels.AZURE_DOMAIN
    }
    kubernetes_subdomains = " || ".join(_in_domain(key, domain) for domain in _KUBERNETES_SUBDOMAINS)
    rules = [
        (f"{key} != {_literal(restricted)}", f'label "{restricted}" is restricted')
        for restricted in sorted(labels.RESTRICTED_LABELS)
    ]
    if nodepool:
        rules.append((f"{key} != {_literal(labels.NODEPOOL)}", f'label "{labels.NODEPOOL}" is restricted'))
    rules += [
        (
            _allowed_or_outside(key, (labels.CAPACITY_TYPE, labels.NODEPOOL), labels.KARPENTER_DOMAIN),
            f'label domain "{labels.KARPENTER_DOMAIN}" is restricted',
        ),
        (
            _allowed_or_outside(key, labels.AKS_ALLOWED_IN_NODEPOOL, labels.AKS_DOMAIN),
            f'label domain "{labels.AKS_DOMAIN}" is restricted',
        ),
        (
            f"{key} in {_list(kubernetes_keys)} || {kubernetes_subdomains} || !{_in_domain(key, 'kubernetes.io')}",
            'label domain "kubernetes.io" is restricted',
        ),
        (
            f"{_in_domain(key, 'kops.k8s.io')} || !{_in_domain(key, 'k8s.io')}",
            'label domain "k8s.io" is restricted',
        ),
        (
            _allowed_or_outside(key, azure_keys, labels.AZURE_DOMAIN),
            f'label domain "{labels.AZURE_DOMAIN}" is restricted',
        ),
    ]
    return rules


_DOMAIN_RESTRICTED = 'label domain "%s" is restricted'


def _requirement_rules() -> list[Schema]:
    """The operator rules of one requirement (`NodeSelectorRequirementWithMinValues._rule_problems`)."""
    bounds, valueless = _list(_BOUND_OPERATORS), _list(_VALUELESS_OPERATORS)
    integer = _literal(_whole(_NON_NEGATIVE_INTEGER.pattern))
    return [
        _rule(
            "self.operator != 'In' || (has(self.values) && size(self.values) != 0)",
            "requirements with operator 'In' must have a value defined",
        ),
        _rule(
            f"!(self.operator in {valueless}) || !has(self.values) || size(self.values) == 0",
            "requirements with operator 'Exists' or 'DoesNotExist' must not have values",
        ),
        _rule(
            f"!(self.operator in {bounds}) || "
            f"(has(self.values) && size(self.values) == 1 && self.values[0].matches({integer}))",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        _rule(
            "!(self.operator == 'In' && has(self.minValues)) || "
            "(has(self.values) && size(self.values) >= self.minValues)",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    ]


def _trusted_launch() -> str:
    launch = "self.security.trustedLaunch"
    enabled = " || ".join(f"(has({launch}.{flag}) && {launch}.{flag})" for flag in ("vtpm", "secureBoot"))
    return f"(has(self.security) && has({launch}) && ({enabled}))"


def _fips_rules() -> list[Schema]:
    """`AKSNodeClassSpec._fips_problems` as CEL (an absent imageFamily is Ubuntu, which allows FIPS)."""
    fips = f"has(self.fipsMode) && self.fipsMode == {_literal(FIPSMode.FIPS)}"

    def family(value: ImageFamily) -> str:
        return f"has(self.imageFamily) && self.imageFamily == {_literal(value)}"

    others = [
        value
        for value in ImageFamily
        if value not in TRUSTED_LAUNCH_FIPS_FAMILIES | NO_TRUSTED_LAUNCH_FAMILIES | {ImageFamily.UBUNTU_2404}
    ]
    return [
        _rule(
            f"!({fips} && {family(ImageFamily.UBUNTU_2404)})",
            "FIPS is not supported with imageFamily Ubuntu2404",
            "fipsMode",
        ),
        _rule(
            f"!({fips} && {family(ImageFamily.UBUNTU_2204)} && !{_trusted_launch()})",
            "FIPS with imageFamily Ubuntu2204 requires Trusted Launch (vtpm or secureBoot)",
            "fipsMode",
        ),
        _rule(
            f"!({fips} && {_trusted_launch()} && has(self.imageFamily) && self.imageFamily in {_list(others)})",
            f"FIPS with Trusted Launch is not supported with imageFamily {' or '.join(others)}",
            "fipsMode",
        ),
    ]


def _windows_rules() -> list[Schema]:
    """`AKSNodeClassSpec._windows_problems` as CEL: one rule per family and setting, so that each message names
    the family as the model's does."""
    rules: list[Schema] = []
    for value in sorted(NO_TRUSTED_LAUNCH_FAMILIES):
        rules.append(
            _rule(
                f"!(has(self.imageFamily) && self.imageFamily == {_literal(value)} && {_trusted_launch()})",
                f"Trusted Launch is not supported with imageFamily {value}",
                "security.trustedLaunch",
            )
        )
    for value in sorted(ALWAYS_FIPS_FAMILIES):
        rules.append(
            _rule(
                f"!(has(self.imageFamily) && self.imageFamily == {_literal(value)} && has(self.fipsMode) && "
                f"self.fipsMode == {_literal(FIPSMode.DISABLED)})",
                f"FIPS cannot be disabled with imageFamily {value}",
                "fipsMode",
            )
        )
    disabled = _literal(LocalDNSMode.DISABLED)
    linux_only = (
        ("has(self.linuxOSConfig)", "linuxOSConfig is not supported", "linuxOSConfig"),
        (
            "has(self.artifactStreaming) && has(self.artifactStreaming.enabled) && self.artifactStreaming.enabled",
            "artifact streaming is not supported",
            "artifactStreaming.enabled",
        ),
        (
            f"has(self.localDNS) && self.localDNS.mode != {disabled}",
            "LocalDNS is not supported",
            "localDNS.mode",
        ),
    )
    for value in sorted(WINDOWS_FAMILIES):
        family = f"has(self.imageFamily) && self.imageFamily == {_literal(value)}"
        rules.extend(
            _rule(f"!({family} && {condition})", f"{message} with imageFamily {value}", field)
            for condition, message, field in linux_only
        )
    return rules


def _at_most(small: str, large: str) -> Schema:
    return _rule(
        f"!has(self.{small}) || !has(self.{large}) || self.{small} <= self.{large}",
        f"{small} must be <= {large}",
        small,
    )


def _port_rules() -> list[Schema]:
    field = "netIPv4IPLocalPortRange"

    def port(index: int) -> str:
        return f"int(self.{field}.split(' ')[{index}])"

    def rule(condition: str, message: str) -> Schema:
        return _rule(f"!has(self.{field}) || ({condition})", message, field)

    return [
        rule(f"{port(0)} >= 1024 && {port(0)} <= 60999", f"{field} first port must be in [1024, 60999]"),
        rule(f"{port(1)} >= 32768 && {port(1)} <= 65535", f"{field} last port must be in [32768, 65535]"),
        rule(f"{port(0)} <= {port(1)}", f"{field} first port must be <= last port"),
    ]


_ROOT, _CLUSTER = _literal(ROOT_ZONE), _literal(CLUSTER_ZONE)
_CLUSTER_CORE_DNS = _literal(LocalDNSForwardDestination.CLUSTER_CORE_DNS)


def _required_zones() -> Schema:
    return _rule(
        f"[{_ROOT}, {_CLUSTER}].all(z, self.exists(x, x.zone == z))",
        f"must contain required zones {_ROOT} and {_CLUSTER}",
    )


_FIELD_EXTRAS: dict[tuple[type[BaseModel], str], Schema] = {
    (NodeSelectorRequirementWithMinValues, "key"): {
        "pattern": _QUALIFIED_NAME,
        "x-kubernetes-validations": [
            _rule(condition, message)
            for condition, message in _restricted_label_rules("self", nodepool=False)
        ],
    },
    (NodeSelectorRequirementWithMinValues, "values"): {
        "items": {"maxLength": _LABEL_VALUE_MAX_LENGTH, "pattern": _REQUIREMENT_VALUE},
        "x-kubernetes-list-type": "atomic",
    },
    (NodeOverlayRequirement, "key"): {
        "pattern": _QUALIFIED_NAME,
        "x-kubernetes-validations": [
            _rule(
                f"self in {_list((labels.CAPACITY_TYPE, labels.NODEPOOL))} || "
                f"!self.split('/')[0].endsWith({_literal(labels.KARPENTER_DOMAIN)})",
                f'label domain "{labels.KARPENTER_DOMAIN}" is restricted',
            ),
            _rule(f"self != {_literal(labels.HOSTNAME)}", f'label "{labels.HOSTNAME}" is restricted'),
            # The AKS provider's copy of the CRD also keeps its own two domains to their well-known keys.
            *(
                _rule(condition, message)
                for condition, message in _restricted_label_rules("self", nodepool=False)
                if message
                in (_DOMAIN_RESTRICTED % labels.AZURE_DOMAIN, _DOMAIN_RESTRICTED % labels.AKS_DOMAIN)
            ),
        ],
    },
    (NodeOverlayRequirement, "values"): {
        "items": {"maxLength": _LABEL_VALUE_MAX_LENGTH, "pattern": _LABEL_VALUE},
        "x-kubernetes-list-type": "atomic",
    },
    (NodeOverlaySpec, "requirements"): {
        "x-kubernetes-list-type": "atomic",
        "x-kubernetes-validations": [
            _rule(
                "self.all(x, x.operator != 'NotIn' || (has(x.values) && size(x.values) != 0))",
                "requirements with operator 'NotIn' must have a value defined",
            ),
            _rule(
                "self.all(x, x.operator != 'In' || (has(x.values) && size(x.values) != 0))",
                "requirements with operator 'In' must have a value defined",
            ),
            _rule(
                f"self.all(x, !(x.operator in {_list(_BOUND_OPERATORS)}) || (has(x.values) && "
                f"size(x.values) == 1 && x.values[0].matches({_literal(_whole(_NON_NEGATIVE_INTEGER.pattern))})))",
                "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            ),
        ],
    },
    (CapacityBufferSpec, "replicas"): {"format": "int32"},
    (CapacityBufferSpec, "percentage"): {"format": "int32"},
    (CapacityBufferStatus, "replicas"): {"format": "int32"},
    (CapacityBufferStatus, "pod_template_generation"): {"format": "int64"},
    (NodeOverlaySpec, "price"): {"pattern": _whole(PRICE.pattern)},
    (NodeOverlaySpec, "price_adjustment"): {"pattern": _whole(PRICE_ADJUSTMENT.pattern)},
    (NodeOverlaySpec, "capacity"): {
        "x-kubernetes-validations": [
            _rule(f"self.all(x, !(x in {_list(RESTRICTED_CAPACITY)}))", "invalid resource restricted")
        ]
    },
    (Taint, "key"): {"pattern": _QUALIFIED_NAME},
    (Taint, "value"): {"maxLength": _LABEL_VALUE_MAX_LENGTH, "pattern": _LABEL_VALUE},
    (NodeClassReference, "group"): {
        "pattern": "^[^/]*$",
        "x-kubernetes-validations": [_rule("self != ''", "group may not be empty")],
    },
    (NodeClassReference, "kind"): {
        "x-kubernetes-validations": [_rule("self != ''", "kind may not be empty")]
    },
    (NodeClassReference, "name"): {
        "x-kubernetes-validations": [_rule("self != ''", "name may not be empty")]
    },
    (NodeClaimTemplateSpec, "requirements"): {
        "x-kubernetes-validations": [
            _rule(
                f"self.all(x, x.key != {_literal(labels.NODEPOOL)})",
                f'label "{labels.NODEPOOL}" is restricted',
            )
        ]
    },
    (NodeClaimTemplateSpec, "node_class_ref"): {
        "x-kubernetes-validations": [
            _rule("self.group == oldSelf.group", "nodeClassRef.group is immutable"),
            _rule("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable"),
        ]
    },
    (TemplateMetadata, "labels"): {
        "maxProperties": _MAX_LABELS,
        "additionalProperties": {"maxLength": _LABEL_VALUE_MAX_LENGTH, "pattern": _LABEL_VALUE},
        "x-kubernetes-validations": [
            _rule(
                f"self.all(x, x.matches({_literal(_QUALIFIED_NAME)}))",
                "label keys must be qualified names: an optional DNS subdomain prefix and '/', then "
                "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
            ),
            *(
                _rule(f"self.all(x, {condition})", message)
                for condition, message in _restricted_label_rules("x", nodepool=True)
            ),
        ],
    },
    (Budget, "nodes"): {"pattern": _whole(_BUDGET_NODES.pattern)},
    (Budget, "schedule"): {"pattern": _SCHEDULE},
    (CapacityWindowSpec, "schedule"): {"pattern": _SCHEDULE},
    (Budget, "reasons"): {"x-kubernetes-list-type": "set"},
    (KubeletConfiguration, "cpu_cfs_quota_period"): {"pattern": _whole(_GO_DURATION.pattern)},
    (LocalDNS, "vnet_dns_overrides"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["zone"],
        "x-kubernetes-validations": [
            _required_zones(),
            _rule(
                f"!self.exists(x, x.zone == {_ROOT} && x.forwardDestination == {_CLUSTER_CORE_DNS})",
                "root zone '.' cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides",
            ),
            _rule(
                f"!self.exists(x, x.zone != {_ROOT} && !x.zone.endsWith({_CLUSTER}) && "
                f"x.forwardDestination == {_CLUSTER_CORE_DNS})",
                "external domains cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides",
            ),
        ],
    },
    (LocalDNS, "kube_dns_overrides"): {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["zone"],
        "x-kubernetes-validations": [_required_zones()],
    },
    (AKSNodeClassSpec, "tags"): {
        "x-kubernetes-validations": [
            _rule("self.all(k, size(k) <= 512)", "tags keys must be less than 512 characters"),
            _rule(
                f"self.all(k, !k.matches({_literal(_TAG_KEY_FORBIDDEN.pattern)}))",
                "tags keys must not contain '<', '>', '%', '&', '?' or '\\'",
            ),
            _rule("self.all(k, size(self[k]) <= 256)", "tags values must be less than 256 characters"),
        ]
    },
}
"""What a field's schema adds to what its annotation says, for the rules the models check in Python.

Looked up along the owner's MRO, so a subclass adds to its base: a NodePool template's requirements get the
NodeClaim rules and its own.
"""

_MODEL_EXTRAS: dict[type[BaseModel], Schema] = {
    NodeSelectorRequirementWithMinValues: {"x-kubernetes-validations": _requirement_rules()},
    Budget: {
        "x-kubernetes-validations": [
            _rule("has(self.schedule) == has(self.duration)", "'schedule' must be set with 'duration'")
        ]
    },
    NodePoolSpec: {
        "x-kubernetes-validations": [
            _rule(
                "has(self.replicas) == has(oldSelf.replicas)",
                "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) "
                "provisioning modes",
                "replicas",
            ),
            _rule(
                "!has(self.replicas) || !has(self.limits) || size(self.limits) == 0 || "
                "(size(self.limits) == 1 && 'nodes' in self.limits)",
                "only 'limits.nodes' is supported on static NodePools",
                "limits",
            ),
            _rule(
                "!has(self.replicas) || !has(self.weight)",
                "'weight' is not supported on static NodePools",
                "weight",
            ),
        ]
    },
    TargetReference: {
        "x-kubernetes-validations": [
            *(
                _rule(
                    f"self.kind != {_literal(kind)} || self.apiGroup == {_literal(target_group(kind))}",
                    f"a {kind} is in group {target_group(kind)}",
                    "apiGroup",
                )
                for kind in TargetKind
            ),
            _rule(
                f"self.kind != {_literal(TargetKind.NODEPOOL)} || !has(self.namespace)",
                "a NodePool is cluster-scoped: leave namespace out",
                "namespace",
            ),
            _rule(
                f"self.kind != {_literal(TargetKind.CAPACITY_BUFFER)} || has(self.namespace)",
                "a CapacityBuffer is namespaced: give its namespace",
                "namespace",
            ),
        ]
    },
    CapacityBufferSpec: {
        "x-kubernetes-validations": [
            _rule(
                "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
                "If podTemplateRef is set, replicas or limits must also be set",
            ),
            _rule(
                "!(has(self.podTemplateRef) && has(self.scalableRef))",
                "You must define either PodTemplateRef or ScalableRef, but not both",
            ),
        ]
    },
    NodeOverlaySpec: {
        "x-kubernetes-validations": [
            _rule(
                "!has(self.price) || !has(self.priceAdjustment)",
                "cannot set both 'price' and 'priceAdjustment'",
            )
        ]
    },
    KubeletConfiguration: {
        "x-kubernetes-validations": [
            _rule(
                "!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || "
                "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent",
                "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            )
        ]
    },
    SysctlConfiguration: {
        "x-kubernetes-validations": [
            _at_most("netCoreRmemDefault", "netCoreRmemMax"),
            _at_most("netCoreWmemDefault", "netCoreWmemMax"),
            _at_most("netIPv4NeighDefaultGcThresh1", "netIPv4NeighDefaultGcThresh2"),
            _at_most("netIPv4NeighDefaultGcThresh2", "netIPv4NeighDefaultGcThresh3"),
            *_port_rules(),
        ]
    },
    LocalDNSZoneOverride: {
        "x-kubernetes-validations": [
            _rule(
                f"!(self.zone.endsWith({_CLUSTER}) && "
                f"self.forwardDestination == {_literal(LocalDNSForwardDestination.VNET_DNS)})",
                "'cluster.local' cannot be forwarded to VnetDNS",
                "forwardDestination",
            ),
            _rule(
                f"!(self.serveStale == {_literal(LocalDNSServeStale.VERIFY)} && "
                f"self.protocol == {_literal(LocalDNSProtocol.FORCE_TCP)})",
                "serveStale Verify cannot be used with protocol ForceTCP",
                "serveStale",
            ),
        ]
    },
    AKSNodeClassSpec: {
        "x-kubernetes-validations": [
            *_fips_rules(),
            *_windows_rules(),
            _rule(
                "!has(self.linuxOSConfig) || !has(self.linuxOSConfig.swapFileSize) || "
                "(has(self.kubelet) && has(self.kubelet.failSwapOn) && self.kubelet.failSwapOn == false)",
                "kubelet.failSwapOn must be set to false when linuxOSConfig.swapFileSize is specified",
                "kubelet.failSwapOn",
            ),
        ]
    },
}
"""Object-level rules: the cross-field checks of each model's validator."""


def _merge(base: Schema, extra: Schema) -> None:
    """Add `extra` to `base` in place: nested schemas merge, validation lists concatenate."""
    for key, value in extra.items():
        if key == "x-kubernetes-validations":
            base[key] = [*base.get(key, []), *value]
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _extras(table: dict[Any, Schema], owner: type[BaseModel], field: str | None = None) -> Schema:
    merged: Schema = {}
    for cls in reversed(owner.__mro__):
        extra = table.get(cls if field is None else (cls, field))
        if extra is not None:
            _merge(merged, extra)
    return merged


# --- the walk ----------------------------------------------------------------------------------------------


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [member for member in get_args(annotation) if member is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _constrain(schema: Schema, metadata: Sequence[Any], where: str) -> None:
    """Apply pydantic's field constraints (`Field(ge=..., max_length=..., pattern=...)`) to `schema`."""
    sizes = {"string": "Length", "array": "Items", "object": "Properties"}
    for constraint in metadata:
        if isinstance(constraint, annotated_types.Ge):
            schema["minimum"] = constraint.ge
        elif isinstance(constraint, annotated_types.Le):
            schema["maximum"] = constraint.le
        elif isinstance(constraint, annotated_types.MinLen):
            schema["min" + sizes[schema["type"]]] = constraint.min_length
        elif isinstance(constraint, annotated_types.MaxLen):
            schema["max" + sizes[schema["type"]]] = constraint.max_length
        elif isinstance(getattr(constraint, "pattern", None), str):
            schema["pattern"] = constraint.pattern
        elif not isinstance(constraint, AfterValidator):
            # An AfterValidator is a rule the model checks in Python; anything else would be lost silently.
            raise TypeError(f"{where}: no OpenAPI form for the constraint {constraint!r}")


def _type_schema(annotation: Any, where: str, defaults: bool) -> Schema:
    annotation = _without_none(annotation)
    for alias, schema in _ALIASES:
        if annotation == alias:
            return dict(schema)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        schema = _type_schema(args[0], where, defaults)
        _constrain(schema, args[1:], where)
        return schema
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], where, defaults)}
    if origin is dict and args[0] is str:
        return {"type": "object", "additionalProperties": _type_schema(args[1], where, defaults)}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return _object_schema(annotation, defaults)
        if issubclass(annotation, Enum):
            return {"type": "string", "enum": [member.value for member in annotation]}
        if issubclass(annotation, datetime):
            return {"type": "string", "format": "date-time"}
        for python, openapi in ((bool, "boolean"), (int, "integer"), (str, "string")):
            if issubclass(annotation, python):
                return {"type": openapi}
    raise TypeError(f"{where}: no structural OpenAPI form for {annotation!r}")


def _default(field: FieldInfo) -> Any:
    """The field's default as the API server should store it, or PydanticUndefined for none.

    Scalars as they are; non-empty lists as dumped; objects built by a factory as `{}`, so the API server
    applies their own fields' defaults. None and empty collections mean "absent" and get no default.
    """
    value = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return {}
    if isinstance(value, list) and value:
        return [
            item.model_dump(mode="json", by_alias=True, exclude_none=True)
            if isinstance(item, BaseModel)
            else item
            for item in value
        ]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool | int | str) and value != "":
        return value
    return PydanticUndefined


def _field_schema(owner: type[BaseModel], name: str, field: FieldInfo, defaults: bool) -> Schema:
    where = f"{owner.__name__}.{name}"
    schema = _type_schema(field.rebuild_annotation(), where, defaults)
    if defaults and not field.is_required():
        default = _default(field)
        if default is not PydanticUndefined:
            schema["default"] = default
    _merge(schema, _extras(_FIELD_EXTRAS, owner, name))
    return schema


def _object_schema(model: type[BaseModel], defaults: bool) -> Schema:
    properties = {
        field.alias or name: _field_schema(model, name, field, defaults)
        for name, field in model.model_fields.items()
    }
    required = [field.alias or name for name, field in model.model_fields.items() if field.is_required()]
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    _merge(schema, _extras(_MODEL_EXTRAS, model))
    return schema


_KEY_ORDER = (
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "anyOf",
    "x-kubernetes-int-or-string",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)


def _ordered(schema: Schema) -> Schema:
    """The schema with its keys in one fixed order, at every level, so the generated YAML is stable."""
    unknown = set(schema) - set(_KEY_ORDER)
    if unknown:
        raise ValueError(f"unexpected schema keys {sorted(unknown)}")
    ordered = {key: schema[key] for key in _KEY_ORDER if key in schema}
    if "properties" in ordered:
        ordered["properties"] = {name: _ordered(value) for name, value in ordered["properties"].items()}
    for key in ("items", "additionalProperties"):
        if key in ordered:
            ordered[key] = _ordered(ordered[key])
    return ordered


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural `openAPIV3Schema` of a top-level object: apiVersion, kind, metadata, spec, status.

    The API server owns `metadata` (only `type: object` is allowed there), and `apiVersion` and `kind` are
    plain strings it checks itself. Defaults apply under `spec` only.
    """
    properties: Schema = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
    }
    required = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if alias in properties:
            continue
        properties[alias] = _field_schema(model, name, field, defaults=alias == "spec")
        if field.is_required():
            required.append(alias)
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return _ordered(schema)


# --- the CustomResourceDefinitions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of `kubectl get`; priority 1 shows only with `-o wide`."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""

    def to_json(self) -> Schema:
        column: Schema = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            column["priority"] = self.priority
        if self.description:
            column["description"] = self.description
        return column


def _condition(condition_type: str) -> str:
    return f'.status.conditions[?(@.type=="{condition_type}")].status'


def _label(key: str) -> str:
    return ".metadata.labels." + key.replace(".", "\\.")


_READY = Column("Ready", _condition("Ready"))
_AGE = Column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class Resource:
    """What a CustomResourceDefinition says besides the schema: names, versions and `kubectl get` columns."""

    model: type[BaseModel]
    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    """Served versions, the storage version first; all share the model's schema."""
    columns: tuple[Column, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("karpenter", "nap")
    scale: tuple[str, str] | None = None
    """The `scale` subresource's spec and status replica paths (`kubectl scale`), as Karpenter's NodePool has."""
    scope: str = "Cluster"

    def definition(self) -> Schema:
        """The `apiextensions.k8s.io/v1` CustomResourceDefinition."""
        names: Schema = {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.kind.lower(),
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        names["categories"] = list(self.categories)
        schema = openapi_schema(self.model)
        versions = []
        for index, version in enumerate(self.versions):
            entry: Schema = {"name": version, "served": True, "storage": index == 0}
            if index > 0:
                entry["deprecated"] = True
                entry["deprecationWarning"] = (
                    f"{self.group}/{version} {self.kind} is deprecated; use {self.group}/{self.versions[0]}"
                )
            entry["subresources"] = {"status": {}}
            if self.scale is not None:
                spec_path, status_path = self.scale
                entry["subresources"] = {
                    "scale": {"specReplicasPath": spec_path, "statusReplicasPath": status_path},
                    "status": {},
                }
            entry["additionalPrinterColumns"] = [column.to_json() for column in self.columns]
            entry["schema"] = {"openAPIV3Schema": schema}
            versions.append(entry)
        definition = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{self.plural}.{self.group}"},
            "spec": {"group": self.group, "names": names, "scope": self.scope, "versions": versions},
        }
        # A JSON round trip leaves no part shared between two places, which YAML would write as anchors.
        fresh: Schema = json.loads(json.dumps(definition))
        return fresh


RESOURCES = (
    Resource(
        NodePool,
        group="karpenter.sh",
        kind="NodePool",
        plural="nodepools",
        versions=("v1",),
        columns=(
            Column("NodeClass", ".spec.template.spec.nodeClassRef.name"),
            Column("Nodes", ".status.nodes"),
            _READY,
            _AGE,
            Column("Weight", ".spec.weight", "integer", priority=1),
            Column("CPU", ".status.resources.cpu", priority=1),
            Column("Memory", ".status.resources.memory", priority=1),
        ),
        scale=(".spec.replicas", ".status.nodes"),
    ),
    Resource(
        NodeClaim,
        group="karpenter.sh",
        kind="NodeClaim",
        plural="nodeclaims",
        versions=("v1",),
        columns=(
            Column("Type", _label(labels.INSTANCE_TYPE)),
            Column("Capacity", _label(labels.CAPACITY_TYPE)),
            Column("Zone", _label(labels.ZONE)),
            Column("Node", ".status.nodeName"),
            _READY,
            _AGE,
            Column("ID", ".status.providerID", priority=1),
            Column("NodePool", _label(labels.NODEPOOL), priority=1),
            Column("NodeClass", ".spec.nodeClassRef.name", priority=1),
            Column("Drifted", _condition("Drifted"), priority=1),
        ),
    ),
    Resource(
        AKSNodeClass,
        group=labels.AZURE_DOMAIN,
        kind="AKSNodeClass",
        plural="aksnodeclasses",
        versions=("v1beta1", "v1alpha2"),
        columns=(_READY, _AGE, Column("ImageFamily", ".spec.imageFamily", priority=1)),
        short_names=("aksnc", "aksncs"),
    ),
    Resource(
        NodeOverlay,
        group=labels.KARPENTER_DOMAIN,
        kind="NodeOverlay",
        plural="nodeoverlays",
        versions=("v1alpha1",),
        columns=(_READY, _AGE, Column("Weight", ".spec.weight", "integer", priority=1)),
        short_names=("overlays",),
        categories=("karpenter",),
    ),
    Resource(
        CapacityBuffer,
        group=CAPACITY_BUFFER_GROUP,
        kind="CapacityBuffer",
        plural="capacitybuffers",
        versions=("v1beta1",),
        columns=(
            Column("Strategy", ".spec.provisioningStrategy", description="The strategy to be used."),
            Column(
                "PodTemplate", ".status.podTemplateRef.name", description="The name of the PodTemplate used."
            ),
            Column(
                "Replicas", ".status.replicas", "integer", description="The actual number of buffer chunks."
            ),
            Column(
                "ConditionsType", ".status.conditions[*].type", description="List of all condition types."
            ),
            Column(
                "ConditionsStatus",
                ".status.conditions[*].status",
                description="List of all condition statuses.",
            ),
            Column(
                "ConditionsReason",
                ".status.conditions[*].reason",
                description="List of all condition reasons.",
            ),
            Column(
                "Age", ".metadata.creationTimestamp", "date", description="The age of the CapacityBuffer."
            ),
        ),
        short_names=("cb",),
        categories=("autoscaling",),
        scope="Namespaced",
    ),
    Resource(
        CapacityWindow,
        group=labels.NODEWRIGHT_DOMAIN,
        kind="CapacityWindow",
        plural="capacitywindows",
        versions=("v1alpha1",),
        columns=(
            Column("Target", ".spec.targetRef.name"),
            Column("Replicas", ".spec.replicas", "integer"),
            Column("Schedule", ".spec.schedule"),
            Column("Active", ".status.active", "boolean"),
            Column("Opens", ".status.nextWindowOpens"),
            _READY,
            _AGE,
            Column("Kind", ".spec.targetRef.kind", priority=1),
            Column("Closes", ".status.nextWindowCloses", priority=1),
            Column("Schedule ID", ".status.scheduleID", priority=1),
        ),
        short_names=("cw",),
        categories=("nodewright",),
    ),
)
"""The CRDs nodewright reads, in the order they are installed: Karpenter's and the AKS provider's, then nodewright's
own extension (CapacityWindow)."""


def custom_resource_definitions() -> list[Schema]:
    """The CustomResourceDefinitions of NodePool, NodeClaim and AKSNodeClass, generated from the models."""
    return [resource.definition() for resource in RESOURCES]
