"""Fields of an input object that nodewright does not read, so what-if commands can warn about them.

The Kubernetes models here hold only what placement and disruption depend on, and ignore the rest. Most of
the rest is irrelevant to where a pod can run (a container's image, its probes, a Deployment's rollout
strategy); those fields are listed below as known. Any other field in a `spec` is one nodewright neither
models nor knows to be irrelevant (`schedulingGates`, `resourceClaims`, a Job's `suspend`, a typo), and the
commands that answer "what would you do" name it rather than answer as if it were not there.

`metadata` and `status` are not checked: metadata carries bookkeeping of every kind, and status is what the
cluster observed, read where it matters and otherwise not an instruction.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

NOT_CHECKED = frozenset({"apiVersion", "kind", "metadata", "status"})

_POD_SPEC_IRRELEVANT = frozenset(
    {
        "activeDeadlineSeconds",
        "automountServiceAccountToken",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "imagePullSecrets",
        "os",
        "preemptionPolicy",
        "readinessGates",
        "restartPolicy",
        "runtimeClassName",  # admission resolves it into spec.overhead, which is read
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
    }
)
_CONTAINER_IRRELEVANT = frozenset(
    {
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "readinessProbe",
        "resizePolicy",
        "restartPolicyRules",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    }
)
_WORKLOAD_IRRELEVANT = frozenset(
    {
        # Deployment, ReplicaSet, StatefulSet, DaemonSet: how updates roll out.
        "minReadySeconds",
        "ordinals",
        "paused",
        "persistentVolumeClaimRetentionPolicy",
        "podManagementPolicy",
        "progressDeadlineSeconds",
        "revisionHistoryLimit",
        "serviceName",
        "strategy",
        "updateStrategy",
        "volumeClaimTemplates",
        # Job: what happens after its pods ran or failed.
        "activeDeadlineSeconds",
        "backoffLimit",
        "backoffLimitPerIndex",
        "completionMode",
        "managedBy",
        "manualSelector",
        "maxFailedIndexes",
        "podFailurePolicy",
        "podReplacementPolicy",
        "successPolicy",
        "ttlSecondsAfterFinished",
    }
)
_NODE_SPEC_IRRELEVANT = frozenset({"configSource", "externalID", "podCIDR", "podCIDRs"})

IRRELEVANT: dict[str, frozenset[str]] = {
    "PodSpec": _POD_SPEC_IRRELEVANT,
    "Container": _CONTAINER_IRRELEVANT,
    "ContainerPort": frozenset({"name"}),
    "WorkloadSpec": _WORKLOAD_IRRELEVANT,
    "JobSpec": _WORKLOAD_IRRELEVANT,
    "NodeSpec": _NODE_SPEC_IRRELEVANT,
}
"""By model class name: the Kubernetes fields of that object that do not change placement or disruption."""


def unread_fields(model: type[BaseModel], document: Mapping[str, Any]) -> list[str]:
    """The paths (`spec.schedulingGates`, `spec.template.spec.containers[1].foo`) of the fields in `document`
    that `model` does not hold and that are not known to be irrelevant, in document order."""
    found: list[str] = []
    _walk(model, document, "", found, top=True)
    return found


def _walk(
    model: type[BaseModel], document: Mapping[str, Any], path: str, found: list[str], top: bool
) -> None:
    fields = _fields_by_key(model)
    irrelevant = IRRELEVANT.get(model.__name__, frozenset())
    for key, value in document.items():
        if key in NOT_CHECKED and (top or key == "metadata"):
            continue
        where = f"{path}.{key}" if path else str(key)
        annotation = fields.get(key)
        if annotation is None:
            if key not in irrelevant:
                found.append(where)
            continue
        nested, many = _model_in(annotation)
        if nested is None:
            continue
        if many and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, Mapping):
                    _walk(nested, item, f"{where}[{index}]", found, top=False)
        elif isinstance(value, Mapping):
            _walk(nested, value, where, found, top=False)


def _fields_by_key(model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields by the key a document spells them with (their alias), and by name too."""
    keys: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        keys[name] = info.annotation
        if info.alias:
            keys[info.alias] = info.annotation
    return keys


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model an annotation holds (directly, optionally, or as list items), and whether it is a list."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _model_in(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            nested, many = _model_in(arg)
            if nested is not None:
                return nested, many
        return None, False
    if origin is list:
        args = get_args(annotation)
        nested, _ = _model_in(args[0]) if args else (None, False)
        return nested, nested is not None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False
