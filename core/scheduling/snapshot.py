"""From the objects of a cluster (as manifests) to what one provisioning simulation needs.

NodePools become templates with their instance types (built per AKSNodeClass, less those no image of the
AKSNodeClass boots on: `core.instancetypes.images`), Nodes and launching NodeClaims become existing capacity
with the pods bound to them, DaemonSets become per-node overhead, and every pod without a node is pending. For
provisioning, as Karpenter's provisioner does, a Node that is being deleted (it or its NodeClaim has a deletion
timestamp) is not capacity, and the pods that will have to leave it are pending too ("reschedulable"), so that
their replacement capacity launches while the node drains. Whatever cannot be used is said in `notes`, never
dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime

from core import labels
from core.api.aksnodeclass import AKSNodeClass, LocalDNSState
from core.api.kube import DaemonSet, Node, Pod, is_daemonset_pod, is_node_ready, is_terminal, owner_kind
from core.api.manifests import Manifests
from core.api.meta import ObjectMeta, OwnerReference
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import ConditionStatus, NodePool
from core.capacity_buffer import BufferPods, Targets, buffer_pods
from core.instancetypes.azure import GpuMode, ImageFamily, NodeClassSettings, azure_instance_types
from core.instancetypes.catalog import AzureCatalog
from core.instancetypes.custom import CustomInstanceType, catalog_instance_types
from core.instancetypes.images import NodeImages, bootable
from core.instancetypes.overlay import OverlayPool, OverlayVerdict, apply_overlays
from core.instancetypes.types import InstanceType
from core.resources import min_each, parse_resources
from core.scheduling import nominations
from core.scheduling.requirements import Operator
from core.scheduling.scheduler import NodePoolSpec, NodeSnapshot

InstanceTypeProvider = Callable[[AKSNodeClass | None], list[InstanceType]]
"""Instance types for a NodePool, given its AKSNodeClass (None when the manifests do not include it)."""


def nodeclass_settings(nodeclass: AKSNodeClass | None) -> NodeClassSettings:
    """The AKSNodeClass fields that shape instance types (disk size, max pods, image family and with it the OS,
    filters, the FIPS label)."""
    if nodeclass is None:
        return NodeClassSettings()
    spec = nodeclass.spec
    return NodeClassSettings(
        os_disk_size_gb=spec.os_disk_size_gb,
        max_pods=nodeclass.resolved_max_pods(),
        image_family=ImageFamily(spec.image_family),
        encryption_at_host=spec.encryption_at_host,
        trusted_launch=spec.trusted_launch_enabled,
        gpu_mode=GpuMode(spec.gpu_mode),
        artifact_streaming=spec.artifact_streaming_enabled,
        local_dns=nodeclass.resolved_local_dns_state() is LocalDNSState.ENABLED,
        fips=spec.fips_enabled,
    )


def nodeclass_provider(
    build: Callable[[NodeClassSettings, AKSNodeClass | None], list[InstanceType]],
) -> InstanceTypeProvider:
    """Instance types shaped by each NodePool's AKSNodeClass, built once per distinct set of its settings."""
    cache: dict[NodeClassSettings, list[InstanceType]] = {}

    def provide(nodeclass: AKSNodeClass | None) -> list[InstanceType]:
        settings = nodeclass_settings(nodeclass)
        if settings not in cache:
            cache[settings] = build(settings, nodeclass)
        return cache[settings]

    return provide


def azure_provider(
    catalog: AzureCatalog,
    unavailable: Collection[tuple[str, str, str]] = (),
    base: InstanceTypeProvider | None = None,
) -> InstanceTypeProvider:
    """Instance types from an Azure catalog, shaped by each NodePool's AKSNodeClass. `base`, the same catalog's
    provider without `unavailable`, lends every instance type the unavailable offerings leave alone."""
    blocked = frozenset(unavailable)

    def build(settings: NodeClassSettings, nodeclass: AKSNodeClass | None) -> list[InstanceType]:
        reuse = base(nodeclass) if base is not None and blocked else ()
        return azure_instance_types(catalog, settings, blocked, reuse)

    return nodeclass_provider(build)


def catalog_provider(
    entries: Collection[CustomInstanceType], unavailable: Collection[tuple[str, str, str]] = ()
) -> InstanceTypeProvider:
    """Instance types from a user's own catalog (`--catalog`), shaped by each NodePool's AKSNodeClass by the
    same rules as the Azure catalogs."""
    blocked = frozenset(unavailable)
    return nodeclass_provider(lambda settings, _: catalog_instance_types(entries, settings, blocked))


def fixed_provider(instance_types: list[InstanceType]) -> InstanceTypeProvider:
    """The same instance types for every NodePool, whatever its AKSNodeClass."""
    return lambda _nodeclass: instance_types


@dataclass(slots=True)
class SchedulingSnapshot:
    nodepools: list[NodePoolSpec] = field(default_factory=list)
    instance_types: dict[str, list[InstanceType]] = field(default_factory=dict)
    """What each NodePool can launch: its AKSNodeClass's instance types that one of its images boots on."""
    listed_instance_types: dict[str, list[InstanceType]] = field(default_factory=dict)
    """Every instance type of each NodePool's AKSNodeClass, those left out included: what the nodes that
    exist are looked up in."""
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per NodePool, each instance type its requirements allow that is left out of `instance_types`, and why (no
    image boots on it)."""
    nodes: list[NodeSnapshot] = field(default_factory=list)
    daemonsets: list[Pod] = field(default_factory=list)
    pending: list[Pod] = field(default_factory=list)
    nominated: list[Pod] = field(default_factory=list)
    """Pods without a node held for the in-flight NodeClaim they were nominated to (`nominations`)."""
    rescheduled: int = 0
    """How many of `pending` are bound to a Node being deleted (with `reschedule_deleting`)."""
    notes: list[str] = field(default_factory=list)
    overlays: dict[str, OverlayVerdict] = field(default_factory=dict)
    """Each NodeOverlay's verdict, by name (`core.instancetypes.overlay`)."""
    buffers: list[BufferPods] = field(default_factory=list)
    """Each CapacityBuffer with its resolution; the virtual pods of the ready ones are in `pending`."""


def merge(parts: Sequence[Manifests]) -> Manifests:
    """Several sources read as one."""
    merged = Manifests()
    for part in parts:
        for kept in fields(Manifests):
            getattr(merged, kept.name).extend(getattr(part, kept.name))
    return merged


def daemonset_pod(daemonset: DaemonSet) -> Pod:
    """The pod a DaemonSet would run on a node, owned by the DaemonSet."""
    template = daemonset.spec.template
    namespace = daemonset.metadata.namespace or "default"
    metadata = ObjectMeta(
        name=f"{daemonset.metadata.name}-daemon",
        namespace=namespace,
        uid=f"daemonset/{namespace}/{daemonset.metadata.name}",
        labels=dict(template.metadata.labels),
        owner_references=[
            OwnerReference(
                api_version="apps/v1",
                kind="DaemonSet",
                name=daemonset.metadata.name,
                uid=daemonset.metadata.uid or daemonset.metadata.name,
                controller=True,
            )
        ],
    )
    return Pod(metadata=metadata, spec=template.spec)


def _nodepool(pool: NodePool) -> NodePoolSpec:
    return NodePoolSpec(
        name=pool.name,
        weight=pool.weight_or_zero,
        requirements=pool.requirements(),
        labels=dict(pool.spec.template.metadata.labels),
        taints=tuple(pool.taints),
        startup_taints=tuple(pool.startup_taints),
        limits=pool.resource_limits or None,
    )


def _node(node: Node, pods: list[Pod]) -> NodeSnapshot:
    ready = is_node_ready(node)
    node_labels = dict(node.metadata.labels)
    node_labels.setdefault(labels.HOSTNAME, node.metadata.name)
    return NodeSnapshot(
        name=node.metadata.name,
        labels=node_labels,
        taints=tuple(node.spec.taints),
        allocatable=parse_resources(node.status.allocatable),
        capacity=parse_resources(node.status.capacity or node.status.allocatable),
        pods=tuple(pods),
        initialized=ready and node_labels.get(labels.INITIALIZED, "true") == "true",
    )


def _launching(claim: NodeClaim, types: dict[str, InstanceType]) -> NodeSnapshot | None:
    """A NodeClaim without a Node yet, as capacity that will exist: its allocatable from its status once
    launched, before that the least any of its instance-type options offers."""
    claim_labels = dict(claim.labels)
    requirements = claim.spec.requirement_set()
    for requirement in requirements:
        if requirement.operator() is Operator.IN and len(requirement.values) == 1:
            claim_labels.setdefault(requirement.key, next(iter(requirement.values)))
    if claim.nodepool_name:
        claim_labels.setdefault(labels.NODEPOOL, claim.nodepool_name)
    claim_labels.setdefault(labels.HOSTNAME, claim.name)
    allocatable = parse_resources(claim.status.allocatable)
    capacity = parse_resources(claim.status.capacity)
    if not allocatable:
        # Not launched yet: it will be one of its options, so count on what the smallest of them offers.
        options = [types[name] for name in requirements.get(labels.INSTANCE_TYPE).values if name in types]
        if not options:
            return None
        allocatable = min_each([option.allocatable() for option in options])
        capacity = min_each([option.capacity for option in options])
    return NodeSnapshot(
        name=claim.name,
        labels=claim_labels,
        taints=tuple(claim.taints),
        allocatable=allocatable,
        capacity=capacity or allocatable,
        initialized=False,
    )


def must_leave(pod: Pod) -> bool:
    """Whether a pod bound to a Node being deleted will need a place elsewhere: not finished, not already
    terminating (its replacement, if any, is a pending pod of its own), neither a DaemonSet's nor a static pod."""
    return (
        not is_terminal(pod)
        and pod.metadata.deletion_timestamp is None
        and owner_kind(pod) not in ("DaemonSet", "Node")
    )


def deleting_nodes(manifests: Manifests) -> set[str]:
    """The Nodes being deleted: their own deletion timestamp, or their NodeClaim's."""
    deleting = {node.metadata.name for node in manifests.nodes if node.metadata.deletion_timestamp}
    deleting.update(
        claim.status.node_name
        for claim in manifests.nodeclaims
        if claim.metadata.deletion_timestamp is not None and claim.status.node_name
    )
    return deleting


def left_out_summary(refused: Mapping[str, str]) -> str:
    """The instance types left out of a NodePool (`SchedulingSnapshot.left_out`) in one line: how many, and why
    the first is."""
    return (
        f"{len(refused)} instance type(s) left out as no image boots on them; first: {refused[min(refused)]}"
    )


def _unbound(pod: Pod) -> Pod:
    return pod.model_copy(update={"spec": pod.spec.model_copy(update={"node_name": None})})


def _overlay(snapshot: SchedulingSnapshot, manifests: Manifests) -> None:
    """Apply the NodeOverlays to every pool's instance types; say which ones are not in force and why."""
    pools = [OverlayPool(pool.name, pool.labels) for pool in snapshot.nodepools]
    # Every listed type (existing nodes are priced from them too), then the bootable ones taken from those.
    result = apply_overlays(manifests.nodeoverlays, pools, snapshot.listed_instance_types)
    snapshot.listed_instance_types = result.instance_types
    for name, types in snapshot.instance_types.items():
        kept = {it.name for it in types}
        snapshot.instance_types[name] = [it for it in result.instance_types.get(name, []) if it.name in kept]
    snapshot.overlays = result.verdicts
    snapshot.notes.extend(
        f"NodeOverlay {name}: not applied ({verdict.reason}: {verdict.message})"
        for name, verdict in sorted(result.verdicts.items())
        if not verdict.valid
    )


def build_snapshot(
    manifests: Manifests,
    provider: InstanceTypeProvider,
    reschedule_deleting: bool = False,
    now: datetime | None = None,
) -> SchedulingSnapshot:
    """What the scheduler needs from the cluster's objects. With `reschedule_deleting` (provisioning), Nodes
    being deleted are left out and the pods that must leave them are pending; given `now`, pods nominated to
    in-flight NodeClaims are held for them (`nominations`)."""
    snapshot = SchedulingSnapshot()
    nodeclasses = {nodeclass.name: nodeclass for nodeclass in manifests.nodeclasses}
    for pool in manifests.nodepools:
        if pool.metadata.deletion_timestamp is not None:
            snapshot.notes.append(f"NodePool {pool.name}: being deleted, not used for new nodes")
            continue
        if pool.is_static:
            snapshot.notes.append(
                f"NodePool {pool.name}: static (replicas is set), not used for pending pods"
            )
            continue
        ready = pool.status.condition("Ready")
        if ready is not None and ready.status is ConditionStatus.FALSE:
            # Karpenter's provisioner ignores a NodePool that is not Ready; one whose status was never written
            # (a what-if input, a NodePool just created) is used.
            snapshot.notes.append(
                f"NodePool {pool.name}: not Ready ({ready.reason}: {ready.message}), not used for new nodes"
            )
            continue
        reference = pool.spec.template.spec.node_class_ref
        nodeclass = nodeclasses.get(reference.name)
        if nodeclass is None and manifests.nodeclasses:
            snapshot.notes.append(
                f"NodePool {pool.name}: AKSNodeClass {reference.name} is not among the inputs; using its defaults"
            )
        spec = _nodepool(pool)
        snapshot.nodepools.append(spec)
        listed = provider(nodeclass)
        snapshot.listed_instance_types[pool.name] = listed
        snapshot.instance_types[pool.name], refused = bootable(listed, NodeImages.of(nodeclass))
        # Said only of the types the NodePool's requirements would have let it launch.
        wanted = {
            it.name: reason
            for it in listed
            if (reason := refused.get(it.name)) is not None
            and it.requirements.intersects(spec.requirements) is None
        }
        if wanted:
            snapshot.left_out[pool.name] = wanted
            snapshot.notes.append(f"NodePool {pool.name}: {left_out_summary(wanted)}")
    if manifests.nodeoverlays:
        _overlay(snapshot, manifests)

    known_nodes = {node.metadata.name for node in manifests.nodes}
    bound: dict[str, list[Pod]] = {name: [] for name in known_nodes}
    for pod in manifests.pods:
        if is_terminal(pod):
            continue
        node_name = pod.spec.node_name
        if node_name:
            if node_name in bound:
                bound[node_name].append(pod)
            elif not is_daemonset_pod(pod):
                # A DaemonSet pod outlives its deleted Node until the pod garbage collector removes it.
                snapshot.notes.append(
                    f"Pod {pod.metadata.namespace}/{pod.metadata.name}: bound to unknown node {node_name}"
                )
        elif not is_daemonset_pod(pod):
            snapshot.pending.append(pod)
    leaving = deleting_nodes(manifests) if reschedule_deleting else set()
    for name in sorted(leaving & known_nodes):
        moving = [_unbound(pod) for pod in bound[name] if must_leave(pod)]
        snapshot.pending.extend(moving)
        snapshot.rescheduled += len(moving)
    snapshot.nodes = [
        _node(node, bound[node.metadata.name])
        for node in manifests.nodes
        if node.metadata.name not in leaving
    ]

    all_types = {it.name: it for types in snapshot.listed_instance_types.values() for it in types}
    pool_types = {
        pool: {it.name: it for it in types} for pool, types in snapshot.listed_instance_types.items()
    }
    for claim in manifests.nodeclaims:
        if claim.status.node_name and claim.status.node_name in known_nodes:
            continue
        if reschedule_deleting and claim.metadata.deletion_timestamp is not None:
            continue
        # Its own NodePool's types: one size is a Linux and a Windows type with different overheads.
        launching = _launching(claim, pool_types.get(claim.nodepool_name or "", all_types))
        if launching is None:
            snapshot.notes.append(
                f"NodeClaim {claim.name}: no allocatable known yet, not counted as capacity"
            )
        else:
            snapshot.nodes.append(launching)
    snapshot.daemonsets = [daemonset_pod(daemonset) for daemonset in manifests.daemonsets]
    if now is not None:
        snapshot.pending, snapshot.nodes, snapshot.nominated = nominations.hold(
            snapshot.pending, snapshot.nodes, manifests.nodeclaims, now
        )
    if manifests.capacitybuffers:
        # After the nominations: a virtual pod is never nominated, so each pass places it anew.
        targets = Targets.of(manifests.podtemplates, ((type(w).__name__, w) for w in manifests.scalables))
        snapshot.buffers, virtual = buffer_pods(manifests.capacitybuffers, targets)
        snapshot.pending.extend(virtual)
    return snapshot
