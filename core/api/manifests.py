"""Turn manifests (what users apply, or what `kubectl get -o yaml` prints) into the objects nodewright reads.

Workloads become the pods their controllers would create, pending and named as Kubernetes names them, so a
Deployment of 50 replicas asks the scheduler for 50 pods. DaemonSets stay templates: which daemon pods a node
runs depends on the node. An invalid object becomes a problem that names the file, the object and the field,
and loading goes on with the rest, the way `kubectl apply -f` reports each object it rejects.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from core.api.aksnodeclass import AKSNodeClass
from core.api.capacitybuffer import CapacityBuffer
from core.api.kube import (
    DEFAULT_NAMESPACE,
    DaemonSet,
    Deployment,
    Job,
    Node,
    Pod,
    PodDisruptionBudget,
    PodPhase,
    PodStatus,
    PodTemplate,
    ReplicaSet,
    StatefulSet,
    Workload,
)
from core.api.meta import InvalidObjectError, KubeModel, ObjectMeta, OwnerReference, problems_of
from core.api.nodeclaim import NodeClaim
from core.api.nodeoverlay import NodeOverlay
from core.api.nodepool import NodePool
from core.api.unread import unread_fields

MAX_REPLICAS = 100_000
"""The most pods one workload expands into: a typo like `replicas: 10000000` must not exhaust memory."""

LABEL_POD_TEMPLATE_HASH = "pod-template-hash"
LABEL_STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_LEGACY_JOB_NAME = "job-name"
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_LEGACY_CONTROLLER_UID = "controller-uid"


class ManifestError(ValueError):
    """A file that is not YAML at all; the message names the file and the line."""


@dataclass
class Manifests:
    """Everything read from one source, with what was wrong and what was not for us."""

    nodepools: list[NodePool] = field(default_factory=list)
    nodeclaims: list[NodeClaim] = field(default_factory=list)
    nodeclasses: list[AKSNodeClass] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    nodeoverlays: list[NodeOverlay] = field(default_factory=list)
    """Read only where the NodeOverlay feature gate is on (`ignore_node_overlays` otherwise)."""
    capacitybuffers: list[CapacityBuffer] = field(default_factory=list)
    """Read only where the CapacityBuffer feature gate is on (`ignore_capacity_buffers` otherwise)."""
    podtemplates: list[PodTemplate] = field(default_factory=list)
    """PodTemplates, which CapacityBuffers' `podTemplateRef` name."""
    scalables: list[Deployment | StatefulSet | ReplicaSet] = field(default_factory=list)
    """The Deployments, StatefulSets and ReplicaSets read (their pods are in `pods`), which CapacityBuffers'
    `scalableRef` name."""
    problems: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    """Objects of kinds nodewright does not read, as `Kind/name`."""
    warnings: list[str] = field(default_factory=list)
    """With `check_unread`: each kind and field that was read past, naming the source, the object and the field."""

    def ignore_node_overlays(self) -> None:
        """Drop the NodeOverlays read, with a warning naming each: the NodeOverlay feature gate is off."""
        self.warnings.extend(
            f"NodeOverlay {overlay.name}: the NodeOverlay feature gate is off (FEATURE_GATES); ignored"
            for overlay in self.nodeoverlays
        )
        self.nodeoverlays.clear()

    def leave_other_providers(self) -> list[str]:
        """Drop the NodePools and NodeClaims whose nodeClassRef names another provider's NodeClass, as Karpenter
        lists only the ones its cloud provider manages (`IsManaged`) for provisioning, disruption, static pools and
        its cluster state; one line per object dropped, naming it and its nodeClassRef (Karpenter logs nothing of
        them: a what-if says it)."""
        left = [
            f"{kind} {name}: {path} is a {reference.group}/{reference.kind}, another provider's NodeClass; left "
            f"to that provider"
            for kind, path, objects in (
                ("NodePool", "spec.template.spec.nodeClassRef", self.nodepools),
                ("NodeClaim", "spec.nodeClassRef", self.nodeclaims),
            )
            for name, reference in ((o.name, o.node_class_ref) for o in objects)
            if not reference.is_managed
        ]
        if left:
            self.nodepools = [pool for pool in self.nodepools if pool.node_class_ref.is_managed]
            self.nodeclaims = [claim for claim in self.nodeclaims if claim.node_class_ref.is_managed]
        return left

    def ignore_capacity_buffers(self) -> None:
        """Drop the CapacityBuffers read, with a warning naming each: the CapacityBuffer feature gate is off."""
        self.warnings.extend(
            f"CapacityBuffer {buffer.key}: the CapacityBuffer feature gate is off (FEATURE_GATES); ignored"
            for buffer in self.capacitybuffers
        )
        self.capacitybuffers.clear()


def load_yaml(text: str, source: str) -> list[Any]:
    """The documents of a multi-document YAML text, `List` objects flattened and empty documents skipped.

    Raises `ManifestError` naming the source and line when the text is not valid YAML.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = list(yaml.load_all(text, Loader=loader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ManifestError(f"{source}: {where}{error.problem or error}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"{source}: {error}") from None
    return list(_flatten(document for document in documents if document is not None))


def _flatten(documents: Iterable[Any]) -> Iterator[Any]:
    """The items of `List` and `<Kind>List` objects in place of the list (API lists omit each item's kind)."""
    for document in documents:
        kind = document.get("kind") if isinstance(document, dict) else None
        items = document.get("items") if isinstance(document, dict) else None
        if not (isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)):
            yield document
            continue
        item_kind = kind.removesuffix("List")
        for item in items:
            if item_kind and isinstance(item, dict) and "kind" not in item:
                item = {"apiVersion": document.get("apiVersion"), "kind": item_kind, **item}
            yield item


# --- dispatch --------------------------------------------------------------------------------------------

_KUBE_KINDS: dict[tuple[str, str], tuple[str, type[KubeModel]]] = {
    ("", "Pod"): ("v1", Pod),
    ("", "Node"): ("v1", Node),
    ("", "PodTemplate"): ("v1", PodTemplate),
    ("apps", "DaemonSet"): ("apps/v1", DaemonSet),
    ("apps", "Deployment"): ("apps/v1", Deployment),
    ("apps", "ReplicaSet"): ("apps/v1", ReplicaSet),
    ("apps", "StatefulSet"): ("apps/v1", StatefulSet),
    ("batch", "Job"): ("batch/v1", Job),
    ("policy", "PodDisruptionBudget"): ("policy/v1", PodDisruptionBudget),
}
_API_VERSIONS = {kind: version for (_, kind), (version, _) in _KUBE_KINDS.items()}
_NAMESPACED = frozenset(_API_VERSIONS) - {"Node"}

_LISTS = {
    "NodePool": "nodepools",
    "NodeClaim": "nodeclaims",
    "AKSNodeClass": "nodeclasses",
    "Pod": "pods",
    "Node": "nodes",
    "DaemonSet": "daemonsets",
    "PodDisruptionBudget": "pdbs",
    "NodeOverlay": "nodeoverlays",
    "CapacityBuffer": "capacitybuffers",
    "PodTemplate": "podtemplates",
    "Scalable": "scalables",
}
"""Which list of `Manifests` holds each kind that is kept (workloads become pods)."""

_CRDS: dict[tuple[str, str], tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Any]]] = {
    ("karpenter.sh", "NodePool"): (("karpenter.sh/v1",), NodePool.parse),
    ("karpenter.sh", "NodeClaim"): (("karpenter.sh/v1",), NodeClaim.parse),
    ("karpenter.sh", "NodeOverlay"): (("karpenter.sh/v1alpha1",), NodeOverlay.parse),
    ("autoscaling.x-k8s.io", "CapacityBuffer"): (("autoscaling.x-k8s.io/v1beta1",), CapacityBuffer.parse),
    ("karpenter.azure.com", "AKSNodeClass"): (
        ("karpenter.azure.com/v1beta1", "karpenter.azure.com/v1alpha2"),
        AKSNodeClass.parse,
    ),
}
"""Karpenter's kinds, by API group: the versions nodewright reads and the parser that checks every rule."""
_NAMESPACED_CRDS = frozenset({"CapacityBuffer"})


ParseCache = dict[tuple[str, str], tuple[str, list[tuple[str, str, Any]]]]
"""What `parse_manifests` made of objects read from a cluster, by kind and uid, with their resourceVersion."""


def parse_manifests(
    documents: Iterable[Any], source: str, cache: ParseCache | None = None, check_unread: bool = False
) -> Manifests:
    """Read parsed documents (from `load_yaml` or JSON) into typed objects, expanding workloads into pods.

    Never raises on bad input: every rejected object adds a line to `problems` of the form
    `<source>: <Kind> <namespace/name>: <field path>: <rule>`, and the other objects are still read.

    With a `cache` (kept by the caller from one call to the next), an object with the uid and resourceVersion
    of one read last time is not parsed again: the same typed object is returned, so the objects of such
    snapshots are for reading only. The cache then holds this call's objects only.

    With `check_unread` (what-if commands), `warnings` names every object of a kind nodewright does not read
    and every field of a Kubernetes object that it neither reads nor knows to be irrelevant (`core.api.unread`).
    """
    manifests = Manifests()
    seen: set[tuple[str, str]] = set()
    kept: set[tuple[str, str]] = set()
    for number, document in enumerate(_flatten(documents), start=1):
        try:
            read = (
                _read(document, number, manifests)
                if cache is None
                else _recall(document, number, manifests, cache, kept)
            )
            if check_unread:
                manifests.warnings.extend(f"{source}: {line}" for line in _unread(document))
            for kind, name, obj in read:
                if (kind, name) in seen:
                    raise InvalidObjectError(
                        kind, name, ["metadata.name: repeats an earlier object; kept the first"]
                    )
                seen.add((kind, name))
                getattr(manifests, _LISTS[kind]).append(obj)
        except InvalidObjectError as error:
            manifests.problems.extend(f"{source}: {line}" for line in str(error).split("\n"))
    if cache is not None:
        for gone in cache.keys() - kept:
            del cache[gone]
    return manifests


def _recall(
    document: Any, number: int, manifests: Manifests, cache: ParseCache, kept: set[tuple[str, str]]
) -> list[tuple[str, str, Any]]:
    """`_read`, through the cache for an object with a uid and a resourceVersion."""
    metadata = document.get("metadata") if isinstance(document, dict) else None
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    if not isinstance(uid, str) or not isinstance(version, str) or not uid or not version:
        return _read(document, number, manifests)
    key = (str(document.get("kind")), uid)
    hit = cache.get(key)
    if hit is not None and hit[0] == version:
        kept.add(key)
        return hit[1]
    read = _read(document, number, manifests)
    if read:  # an ignored kind is noted again each time
        cache[key] = (version, read)
        kept.add(key)
    return read


def _read(document: Any, number: int, manifests: Manifests) -> list[tuple[str, str, Any]]:
    """The objects one document stands for, each with its kind and name (several for a workload)."""
    if not isinstance(document, dict):
        problem = f"expected a Kubernetes object (a mapping), not {type(document).__name__}"
        raise InvalidObjectError(f"document {number}", "", [problem])
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        name = _name(document, namespaced=False)
        raise InvalidObjectError(f"document {number}", f"({name})" if name else "", ["kind: Field required"])
    if not isinstance(api_version, str) or not api_version:
        raise InvalidObjectError(kind, _name(document, kind in _NAMESPACED), ["apiVersion: Field required"])
    group = api_version.rpartition("/")[0]
    if (group, kind) in _CRDS:
        versions, parse = _CRDS[group, kind]
        _check_version(kind, document, api_version, versions)
        return [(kind, _name(document, namespaced=kind in _NAMESPACED_CRDS), parse(document))]
    if (group, kind) in _KUBE_KINDS:
        version, model = _KUBE_KINDS[group, kind]
        _check_version(kind, document, api_version, (version,))
        obj = _parse_kube(kind, model, document)
        if isinstance(obj, Deployment | ReplicaSet | StatefulSet):
            pods = [("Pod", _key(pod.metadata), pod) for pod in workload_pods(obj)]
            return [("Scalable", f"{kind}/{_key(obj.metadata)}", obj), *pods]
        if isinstance(obj, Job):
            return [("Pod", _key(pod.metadata), pod) for pod in workload_pods(obj)]
        return [(kind, _key(obj.metadata), obj)]
    manifests.ignored.append(f"{kind}/{_name(document, namespaced=False) or '?'}")
    return []


def _unread(document: dict[str, Any]) -> list[str]:
    """Warnings for a document that was read: the fields read past, or its whole kind."""
    kind, api_version = document["kind"], document["apiVersion"]
    group = api_version.rpartition("/")[0]
    name = _name(document, kind in _NAMESPACED) or "?"
    if (group, kind) in _CRDS:
        return []  # Karpenter's kinds are parsed strictly: an unknown field is a problem, not a warning
    if (group, kind) not in _KUBE_KINDS:
        metadata = document.get("metadata")
        named = _name(document, isinstance(metadata, dict) and bool(metadata.get("namespace"))) or "?"
        return [f"{kind} {named}: {api_version} {kind} is not a kind nodewright reads; ignored"]
    model = _KUBE_KINDS[group, kind][1]
    return [
        f"{kind} {name}: {path}: not read by nodewright; ignored" for path in unread_fields(model, document)
    ]


def _check_version(kind: str, document: dict[str, Any], api_version: str, supported: tuple[str, ...]) -> None:
    if api_version not in supported:
        rule = f"{api_version} is not supported for {kind}; use {' or '.join(supported)}"
        raise InvalidObjectError(kind, _name(document, kind in _NAMESPACED), [f"apiVersion: {rule}"])


def _parse_kube(kind: str, model: type[KubeModel], document: dict[str, Any]) -> Any:
    namespaced = kind in _NAMESPACED
    try:
        obj: Any = model.model_validate(without_nulls(document))
    except ValidationError as error:
        raise InvalidObjectError(kind, _name(document, namespaced), problems_of(error)) from None
    metadata: ObjectMeta = obj.metadata
    if not metadata.name:
        raise InvalidObjectError(kind, "", ["metadata.name: Field required"])
    if isinstance(obj, Workload) and (count := _replica_count(obj)) > MAX_REPLICAS:
        path = "spec.parallelism" if isinstance(obj, Job) else "spec.replicas"
        problem = f"{path}: {count} pods are more than the {MAX_REPLICAS} one workload may expand into"
        raise InvalidObjectError(kind, _name(document, namespaced), [problem])
    if namespaced:
        metadata.namespace = metadata.namespace or DEFAULT_NAMESPACE
    return obj


def without_nulls(value: Any) -> Any:
    """The document without null fields: Kubernetes reads `field: null` as the field being unset."""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def _name(document: dict[str, Any], namespaced: bool) -> str:
    """`namespace/name` (namespace defaulted) or `name`, for messages, from a document of any shape."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return ""
    name = metadata.get("name") or metadata.get("generateName") or ""
    if not namespaced or not name:
        return str(name)
    return f"{metadata.get('namespace') or DEFAULT_NAMESPACE}/{name}"


def _key(metadata: ObjectMeta) -> str:
    return f"{metadata.namespace}/{metadata.name}" if metadata.namespace else metadata.name


# --- workload expansion ----------------------------------------------------------------------------------

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters Kubernetes uses in generated names (no vowels, no look-alike digits)."""
_SUFFIX_LENGTH = 5
_SUFFIXES = len(_NAME_ALPHABET) ** _SUFFIX_LENGTH
_SUFFIX_STEP = 7_368_787
"""Coprime to the number of suffixes, so stepping by it gives every replica index a different suffix."""
_UID_NAMESPACE = uuid.UUID("6f1d2a4e-8c3b-5e7f-9a0d-1b2c3d4e5f60")


def workload_pods(workload: Deployment | ReplicaSet | StatefulSet | Job) -> list[Pod]:
    """The pods the workload's controller would create, not yet bound to a node.

    Names, labels and owner references follow the Kubernetes controllers (`web-7c9f8d6b4x-k2x9q` through a
    ReplicaSet for a Deployment, `db-0`, `db-1` for a StatefulSet); hashes and uids are derived from the
    names, so the same manifest always gives the same pods and scaling up keeps the existing names.
    Replicas share the template's nested spec values: treat them as read-only.
    """
    namespace = workload.metadata.namespace or DEFAULT_NAMESPACE
    owner, replicas = _replicas(workload, namespace)
    template = workload.spec.template
    return [
        Pod(
            metadata=ObjectMeta(
                name=name,
                namespace=namespace,
                uid=_uid("Pod", namespace, name),
                labels={**template.metadata.labels, **labels},
                annotations=dict(template.metadata.annotations),
                owner_references=[owner],
            ),
            spec=template.spec.model_copy(),
            status=PodStatus(phase=PodPhase.PENDING),
        )
        for name, labels in replicas
    ]


def _replicas(
    workload: Deployment | ReplicaSet | StatefulSet | Job, namespace: str
) -> tuple[OwnerReference, list[tuple[str, dict[str, str]]]]:
    """The controller that owns the pods, and each pod's name with the labels its controller adds."""
    name = workload.metadata.name
    indexes = range(_replica_count(workload))
    if isinstance(workload, Deployment):
        # Kubernetes hashes the template; hashing the name keeps pod names stable while a template is edited.
        template_hash = _encode(_digest(f"{namespace}/{name}"), 10)
        replica_set = f"{name}-{template_hash}"
        owner = _owner("ReplicaSet", namespace, replica_set, uid="")
        return owner, [
            (_generated(replica_set, i), {LABEL_POD_TEMPLATE_HASH: template_hash}) for i in indexes
        ]
    owner = _owner(type(workload).__name__, namespace, name, workload.metadata.uid)
    if isinstance(workload, StatefulSet):
        return owner, [
            (f"{name}-{i}", {LABEL_STATEFULSET_POD_NAME: f"{name}-{i}", LABEL_POD_INDEX: str(i)})
            for i in indexes
        ]
    if isinstance(workload, Job):
        labels = {
            LABEL_JOB_NAME: name,
            LABEL_LEGACY_JOB_NAME: name,
            LABEL_CONTROLLER_UID: owner.uid,
            LABEL_LEGACY_CONTROLLER_UID: owner.uid,
        }
        return owner, [(_generated(name, i), labels) for i in indexes]
    return owner, [(_generated(name, i), {}) for i in indexes]


def _replica_count(workload: Workload) -> int:
    if isinstance(workload, Job):
        spec = workload.spec
        return spec.parallelism if spec.completions is None else min(spec.parallelism, spec.completions)
    return workload.spec.replicas


def _owner(kind: str, namespace: str, name: str, uid: str) -> OwnerReference:
    """A controller reference, with a uid derived from the name when the owner has none."""
    return OwnerReference(
        api_version=_API_VERSIONS[kind],
        kind=kind,
        name=name,
        uid=uid or _uid(kind, namespace, name),
        controller=True,
        block_owner_deletion=True,
    )


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _encode(number: int, length: int) -> str:
    characters = []
    for _ in range(length):
        number, digit = divmod(number, len(_NAME_ALPHABET))
        characters.append(_NAME_ALPHABET[digit])
    return "".join(characters)


def _generated(prefix: str, index: int) -> str:
    """`<prefix>-<5 characters>`, like a name from `generateName`, distinct for every index below 27**5."""
    return f"{prefix}-{_encode((_digest(prefix) + index * _SUFFIX_STEP) % _SUFFIXES, _SUFFIX_LENGTH)}"


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))
