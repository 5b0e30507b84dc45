"""Fixture builders for scheduler tests: pods, instance types (with Karpenter's "Catalog P"), NodePools, nodes,
and small readers that turn `SchedulingResults` into what a scenario asserts (where each pod went, the skew
of a topology key).

Builders take Kubernetes vocabulary (quantities as strings, manifests in camelCase) so that a scenario reads
like the Karpenter test it comes from.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core import labels as wk
from core.api.kube import Pod, pod_key
from core.api.meta import Taint
from core.instancetypes.types import InstanceType, Offering, Overhead
from core.quantity import parse_quantity
from core.resources import Resources, parse_resources
from core.scheduling.requirements import Operator, Requirement, Requirements
from core.scheduling.results import NewNodeClaim, SchedulingResults
from core.scheduling.scheduler import NodePoolSpec, NodeSnapshot, Scheduler, SchedulingOptions

ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
SPOT = wk.CAPACITY_TYPE_SPOT
ON_DEMAND = wk.CAPACITY_TYPE_ON_DEMAND
CATALOG_P_OFFERINGS = tuple((zone, SPOT) for zone in ZONES[:2]) + tuple((zone, ON_DEMAND) for zone in ZONES)
"""Catalog P sells spot in zones 1-2 and on-demand in zones 1-3."""
GPU_VENDOR_A = "fake.com/vendor-a"
GPU_VENDOR_B = "fake.com/vendor-b"
GPU_RESOURCES = (GPU_VENDOR_A, GPU_VENDOR_B, "nvidia.com/gpu", "amd.com/gpu")
SYSTEM_OVERHEAD = Overhead(kube_reserved={"cpu": 100, "memory": 10 * 2**20})
"""What every Catalog P node reserves: 100m CPU and 10Mi memory."""

Expression = dict[str, Any]

_names = itertools.count()
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------------------------------------ pods


def expr(key: str, operator: str, *values: str, min_values: int | None = None) -> Expression:
    """A node-selector expression (`matchExpressions` entry, or a NodePool requirement with minValues)."""
    entry: Expression = {"key": key, "operator": operator, "values": list(values)}
    if min_values is not None:
        entry["minValues"] = min_values
    return entry


def pod_term(
    topology_key: str,
    match_labels: Mapping[str, str] | None = None,
    *,
    namespaces: Sequence[str] | None = None,
    all_namespaces: bool = False,
    match_label_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A pod (anti-)affinity term selecting pods by labels; `all_namespaces` uses an empty namespace selector."""
    term: dict[str, Any] = {
        "topologyKey": topology_key,
        "labelSelector": {"matchLabels": dict(match_labels or {})},
    }
    if namespaces is not None:
        term["namespaces"] = list(namespaces)
    if all_namespaces:
        term["namespaceSelector"] = {}
    if match_label_keys:
        term["matchLabelKeys"] = list(match_label_keys)
    return term


def spread(
    topology_key: str,
    match_labels: Mapping[str, str] | None = None,
    *,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    match_label_keys: Sequence[str] | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
) -> dict[str, Any]:
    """A topology spread constraint; `match_labels=None` leaves the label selector out (it selects nothing)."""
    constraint: dict[str, Any] = {"topologyKey": topology_key, "maxSkew": max_skew, "whenUnsatisfiable": when}
    if match_labels is not None:
        constraint["labelSelector"] = {"matchLabels": dict(match_labels)}
    if min_domains is not None:
        constraint["minDomains"] = min_domains
    if match_label_keys:
        constraint["matchLabelKeys"] = list(match_label_keys)
    if node_affinity_policy is not None:
        constraint["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        constraint["nodeTaintsPolicy"] = node_taints_policy
    return constraint


def toleration(
    key: str = "", value: str = "", effect: str | None = None, operator: str | None = None
) -> dict[str, Any]:
    """A toleration; operator defaults to Equal when a value is given, else Exists."""
    entry: dict[str, Any] = {"key": key, "operator": operator or ("Equal" if value else "Exists")}
    if value:
        entry["value"] = value
    if effect:
        entry["effect"] = effect
    return entry


TOLERATE_ALL = toleration()


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> Taint:
    """A node or NodePool taint."""
    return Taint.model_validate({"key": key, "value": value, "effect": effect})


def pod(
    name: str | None = None,
    *,
    cpu: str | int | None = None,
    memory: str | None = None,
    requests: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str | int] | None = None,
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    node_selector: Mapping[str, str] | None = None,
    required: Sequence[Sequence[Expression]] | None = None,
    preferred: Sequence[tuple[int, Sequence[Expression]]] | None = None,
    affinity: Sequence[dict[str, Any]] = (),
    anti_affinity: Sequence[dict[str, Any]] = (),
    preferred_affinity: Sequence[tuple[int, dict[str, Any]]] = (),
    preferred_anti_affinity: Sequence[tuple[int, dict[str, Any]]] = (),
    spread_constraints: Sequence[dict[str, Any]] = (),
    tolerations: Sequence[dict[str, Any]] = (),
    host_ports: Sequence[int | tuple[int, str, str]] = (),
    owner_kind: str | None = None,
    owner_name: str = "owner",
    created_seconds: int | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    deleting: bool = False,
) -> Pod:
    """A pending pod (or, with `node_name`, a bound one). `required` holds the OR-terms of required node
    affinity, each a list of expressions; `preferred` holds (weight, expressions) pairs. Host ports are a
    port (TCP on every address) or (port, protocol, host IP)."""
    index = next(_names)
    name = name or f"pod-{index}"
    resources: dict[str, Any] = {}
    request_list = dict(requests or {})
    if cpu is not None:
        request_list["cpu"] = cpu
    if memory is not None:
        request_list["memory"] = memory
    if request_list:
        resources["requests"] = request_list
    if limits:
        resources["limits"] = dict(limits)
    container: dict[str, Any] = {"name": "app", "resources": resources}
    if host_ports:
        container["ports"] = [_port(entry, offset) for offset, entry in enumerate(host_ports)]
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    affinity_block = _affinity(
        required, preferred, affinity, anti_affinity, preferred_affinity, preferred_anti_affinity
    )
    if affinity_block:
        spec["affinity"] = affinity_block
    if spread_constraints:
        spec["topologySpreadConstraints"] = list(spread_constraints)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_name:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{index:06d}",
        "labels": dict(labels or {}),
        "creationTimestamp": (
            _EPOCH + timedelta(seconds=created_seconds if created_seconds is not None else index)
        )
        .isoformat()
        .replace("+00:00", "Z"),
    }
    if owner_kind:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": owner_name,
                "uid": f"{owner_kind}-{owner_name}",
                "controller": True,
            }
        ]
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    elif not node_name:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return Pod.model_validate({"metadata": metadata, "spec": spec, "status": status})


def pods(count: int, prefix: str | None = None, **options: Any) -> list[Pod]:
    """`count` identical pods (one deployment), named `<prefix>-<i>`."""
    prefix = prefix or f"deploy-{next(_names)}"
    return [pod(f"{prefix}-{i}", **options) for i in range(count)]


def daemonset(name: str = "ds", **options: Any) -> Pod:
    """A DaemonSet's pod as the scheduler receives it (owned by the DaemonSet `name`)."""
    return pod(f"{name}-pod", owner_kind="DaemonSet", owner_name=name, **options)


def _port(entry: int | tuple[int, str, str], offset: int) -> dict[str, Any]:
    port, protocol, host_ip = (entry, "TCP", "") if isinstance(entry, int) else entry
    result: dict[str, Any] = {"containerPort": 8000 + offset, "hostPort": port, "protocol": protocol}
    if host_ip:
        result["hostIP"] = host_ip
    return result


def _affinity(
    required: Sequence[Sequence[Expression]] | None,
    preferred: Sequence[tuple[int, Sequence[Expression]]] | None,
    affinity: Sequence[dict[str, Any]],
    anti_affinity: Sequence[dict[str, Any]],
    preferred_affinity: Sequence[tuple[int, dict[str, Any]]],
    preferred_anti_affinity: Sequence[tuple[int, dict[str, Any]]],
) -> dict[str, Any]:
    block: dict[str, Any] = {}
    node: dict[str, Any] = {}
    if required is not None:
        terms = [{"matchExpressions": list(term)} for term in required]
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if preferred:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "preference": {"matchExpressions": list(term)}} for weight, term in preferred
        ]
    if node:
        block["nodeAffinity"] = node
    for name, hard, soft in (
        ("podAffinity", affinity, preferred_affinity),
        ("podAntiAffinity", anti_affinity, preferred_anti_affinity),
    ):
        section: dict[str, Any] = {}
        if hard:
            section["requiredDuringSchedulingIgnoredDuringExecution"] = list(hard)
        if soft:
            section["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": weight, "podAffinityTerm": term} for weight, term in soft
            ]
        if section:
            block[name] = section
    return block


# -------------------------------------------------------------------------------------- instance types


def price_micros(resources: Mapping[str, int]) -> int:
    """Karpenter's fake price rule: $0.1 per vCPU, $0.1 per 10^9 bytes of memory, $1 per GPU resource kind."""
    dollars = 0.1 * resources.get("cpu", 0) / 1000 + 0.1 * resources.get("memory", 0) / 1e9
    dollars += sum(1.0 for name in GPU_RESOURCES if resources.get(name))
    return round(dollars * 1_000_000)


def offering(zone: str, capacity_type: str, price: int, available: bool = True, **extra: str) -> Offering:
    """One zone x capacity-type offering at a price in micro-dollars (`extra` adds offering-only labels)."""
    requirements = Requirements(
        [
            Requirement.new(wk.ZONE, Operator.IN, [zone]),
            Requirement.new(wk.CAPACITY_TYPE, Operator.IN, [capacity_type]),
            *(Requirement.new(key, Operator.IN, [value]) for key, value in extra.items()),
        ]
    )
    return Offering(zone, capacity_type, price, available, requirements)


def instance_type(
    name: str,
    cpu: str | int = 4,
    memory: str = "4Gi",
    *,
    pods: int = 5,
    arch: str = "amd64",
    os: Sequence[str] = ("linux", "windows", "darwin"),
    resources: Mapping[str, str | int] | None = None,
    offerings: Iterable[tuple[str, str]] = CATALOG_P_OFFERINGS,
    unavailable: Iterable[tuple[str, str]] = (),
    price: int | None = None,
    prices: Mapping[tuple[str, str], int] | None = None,
    labels: Mapping[str, str | Sequence[str] | None] | None = None,
    overhead: Overhead = SYSTEM_OVERHEAD,
) -> InstanceType:
    """An instance type shaped like Karpenter's fake ones: `integer` = vCPU, `size` small/large, `special`
    only on large types, labels for the zones and capacity types of its available offerings.

    `price` overrides the price rule for every offering, `prices` per (zone, capacity type); `labels`
    adds (or, with None, removes) label requirements; a list value means the type may carry any of them."""
    capacity = parse_resources({"cpu": cpu, "memory": memory, "pods": pods, **(resources or {})})
    base_price = price if price is not None else price_micros(capacity)
    closed = set(unavailable)
    offers = tuple(
        offering(
            zone,
            capacity_type,
            (prices or {}).get((zone, capacity_type), base_price),
            (zone, capacity_type) not in closed,
        )
        for zone, capacity_type in offerings
    )
    available = [o for o in offers if o.available]
    large = capacity["cpu"] > 4000 and capacity["memory"] > 8 * 2**30
    label_values: dict[str, Sequence[str] | None] = {
        wk.INSTANCE_TYPE: [name],
        wk.ARCH: [arch],
        wk.OS: list(os),
        wk.ZONE: sorted({o.zone for o in available}),
        wk.CAPACITY_TYPE: sorted({o.capacity_type for o in available}),
        "integer": [str(int(parse_quantity(cpu)))],
        "size": ["large" if large else "small"],
        "special": ["optional"] if large else None,
    }
    for key, value in (labels or {}).items():
        label_values[key] = [value] if isinstance(value, str) else value
    requirements = Requirements(
        Requirement.new(key, Operator.IN, values) if values else Requirement.new(key, Operator.DOES_NOT_EXIST)
        for key, values in label_values.items()
    )
    return InstanceType(name, requirements, offers, capacity, overhead)


def catalog_p() -> list[InstanceType]:
    """The default instance types of Karpenter's fake cloud provider (karpenter-core.md section 7.2)."""
    return [
        instance_type("small-instance-type", 2, "2Gi"),
        instance_type("default-instance-type", 4, "4Gi"),
        instance_type("gpu-vendor-instance-type", 4, "4Gi", resources={GPU_VENDOR_A: 2}),
        instance_type("gpu-vendor-b-instance-type", 4, "4Gi", resources={GPU_VENDOR_B: 2}),
        instance_type(
            "arm-instance-type", 16, "128Gi", arch="arm64", os=("linux", "windows", "darwin", "ios")
        ),
        instance_type("single-pod-instance-type", 4, "4Gi", pods=1),
    ]


# ---------------------------------------------------------------------------------- nodepools and nodes


def nodepool(
    name: str = "default",
    *,
    weight: int = 0,
    requirements: Sequence[Expression] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    startup_taints: Sequence[Taint] = (),
    limits: Mapping[str, str | int] | None = None,
) -> NodePoolSpec:
    """A NodePool as the scheduler sees it; limits are quantities (`{"cpu": "20"}`, `{"nodes": 1}`)."""
    return NodePoolSpec(
        name=name,
        weight=weight,
        requirements=Requirements.from_dicts(requirements),
        labels=dict(labels or {}),
        taints=tuple(taints),
        startup_taints=tuple(startup_taints),
        limits=parse_resources(limits) if limits is not None else None,
    )


def node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    nodepool: str | None = None,
    zone: str | None = None,
    capacity_type: str | None = None,
    instance_type: str | None = None,
    taints: Sequence[Taint] = (),
    cpu: str | int = 4,
    memory: str = "4Gi",
    pods: int = 110,
    capacity: Mapping[str, str | int] | None = None,
    bound: Sequence[Pod] = (),
    initialized: bool = True,
    overhead: Overhead = SYSTEM_OVERHEAD,
) -> NodeSnapshot:
    """A node of the cluster (allocatable = capacity - Catalog P overhead) with its bound pods."""
    node_labels = {wk.HOSTNAME: name, **(labels or {})}
    for key, value in (
        (wk.NODEPOOL, nodepool),
        (wk.ZONE, zone),
        (wk.CAPACITY_TYPE, capacity_type),
        (wk.INSTANCE_TYPE, instance_type),
    ):
        if value is not None:
            node_labels[key] = value
    total = parse_resources(
        capacity if capacity is not None else {"cpu": cpu, "memory": memory, "pods": pods}
    )
    reserved = overhead.total()
    allocatable = {key: max(0, amount - reserved.get(key, 0)) for key, amount in total.items()}
    return NodeSnapshot(name, node_labels, tuple(taints), allocatable, total, tuple(bound), initialized)


# --------------------------------------------------------------------------------------------- solving


def solve(
    pending: Sequence[Pod],
    *,
    pools: Sequence[NodePoolSpec] | None = None,
    types: Sequence[InstanceType] | Mapping[str, Sequence[InstanceType]] | None = None,
    nodes: Sequence[NodeSnapshot] = (),
    daemonsets: Sequence[Pod] = (),
    options: SchedulingOptions | None = None,
) -> SchedulingResults:
    """Run one provisioning simulation; by default one NodePool "default" over Catalog P. A plain list of
    types is offered to every pool."""
    pools = list(pools) if pools is not None else [nodepool()]
    catalog = types if types is not None else catalog_p()
    by_pool = catalog if isinstance(catalog, Mapping) else {pool.name: list(catalog) for pool in pools}
    return Scheduler(pools, by_pool, nodes, daemonsets, options or SchedulingOptions()).solve(pending)


def new_node_name(index: int) -> str:
    """The name `placements` gives the index-th new NodeClaim."""
    return f"new-{index}"


def placements(results: SchedulingResults) -> dict[str, str]:
    """Where each placed pod went: an existing node's name, or `new-<i>` for the i-th new NodeClaim."""
    where: dict[str, str] = {}
    for placement in results.existing:
        for key in placement.pods:
            where[key] = placement.node
    for index, claim in enumerate(results.nodeclaims):
        for key in claim.pods:
            where[key] = new_node_name(index)
    return where


def unschedulable(results: SchedulingResults) -> dict[str, list[str]]:
    """Reasons by pod key for every pod left pending."""
    return {entry.pod: entry.reasons for entry in results.unschedulable}


def launched_labels(claim: NewNodeClaim, types: Sequence[InstanceType] | None = None) -> dict[str, str]:
    """The labels a node launched for the claim carries: every single-valued label of its instance type (as
    the provider sets them), then the claim's own labels."""
    catalog = {it.name: it for it in (types if types is not None else catalog_p())}
    launched = catalog.get(claim.instance_type or "")
    type_labels = {}
    if launched is not None:
        type_labels = {
            r.key: next(iter(r.values))
            for r in launched.requirements
            if not r.complement and len(r.values) == 1
        }
    return {**type_labels, **claim.labels}


def node_labels(
    results: SchedulingResults,
    nodes: Sequence[NodeSnapshot] = (),
    types: Sequence[InstanceType] | None = None,
) -> dict[str, dict[str, str]]:
    """Labels by node name: existing nodes as given, new NodeClaims as launched (hostname = their name)."""
    by_name = {existing.name: dict(existing.labels) for existing in nodes}
    for index, claim in enumerate(results.nodeclaims):
        by_name[new_node_name(index)] = {**launched_labels(claim, types), wk.HOSTNAME: new_node_name(index)}
    return by_name


def launch(
    results: SchedulingResults,
    pending: Sequence[Pod],
    nodes: Sequence[NodeSnapshot] = (),
    types: Sequence[InstanceType] | None = None,
) -> list[NodeSnapshot]:
    """The cluster once the simulation's decisions are carried out, for the next batch: placed pods bound to
    their existing nodes, and one initialized node per new NodeClaim with its launched type's capacity."""
    catalog = {it.name: it for it in (types if types is not None else catalog_p())}
    where = placements(results)
    batch = f"round-{next(_names)}"
    renamed = {new_node_name(i): f"{batch}-{i}" for i in range(len(results.nodeclaims))}
    bound: dict[str, list[Pod]] = {}
    for candidate in pending:
        target = where.get(pod_key(candidate))
        if target is not None:
            name = renamed.get(target, target)
            spec = candidate.spec.model_copy(update={"node_name": name})
            bound.setdefault(name, []).append(candidate.model_copy(update={"spec": spec}))
    cluster = [
        NodeSnapshot(
            n.name,
            n.labels,
            n.taints,
            n.allocatable,
            n.capacity,
            (*n.pods, *bound.get(n.name, ())),
            n.initialized,
        )
        for n in nodes
    ]
    for index, claim in enumerate(results.nodeclaims):
        name = renamed[new_node_name(index)]
        launched = catalog[claim.instance_type or ""]
        claim_labels = {**launched_labels(claim, types), wk.HOSTNAME: name}
        cluster.append(
            NodeSnapshot(
                name,
                claim_labels,
                tuple(claim.taints),
                launched.allocatable(),
                dict(launched.capacity),
                tuple(bound.get(name, ())),
            )
        )
    return cluster


def domain_counts(
    results: SchedulingResults,
    pending: Sequence[Pod],
    key: str,
    match_labels: Mapping[str, str],
    nodes: Sequence[NodeSnapshot] = (),
    namespace: str = "default",
    types: Sequence[InstanceType] | None = None,
) -> Counter[str]:
    """How many pods matching the labels each domain of `key` holds after the simulation: pods already bound
    to the nodes plus placed pending pods. Nodes without the key hold no domain."""
    labels_of = node_labels(results, nodes, types)
    counts: Counter[str] = Counter()

    def matches(candidate: Pod) -> bool:
        meta = candidate.metadata
        return (meta.namespace or "default") == namespace and all(
            meta.labels.get(k) == v for k, v in match_labels.items()
        )

    for existing in nodes:
        domain = existing.labels.get(key)
        for bound in existing.pods:
            active = not bound.metadata.deletion_timestamp and bound.status.phase not in (
                "Succeeded",
                "Failed",
            )
            if domain is not None and active and matches(bound):
                counts[domain] += 1
    where = placements(results)
    for candidate in pending:
        target = where.get(pod_key(candidate))
        if target is None or not matches(candidate):
            continue
        domain = labels_of[target].get(key)
        if domain is not None:
            counts[domain] += 1
    return counts


def skew(
    results: SchedulingResults,
    pending: Sequence[Pod],
    key: str,
    match_labels: Mapping[str, str],
    nodes: Sequence[NodeSnapshot] = (),
) -> list[int]:
    """The non-zero pod counts per domain, sorted descending (Karpenter's `ExpectSkew ... ConsistOf`)."""
    return sorted(
        (count for count in domain_counts(results, pending, key, match_labels, nodes).values() if count),
        reverse=True,
    )


def resources(**quantities: str | int) -> Resources:
    """Quantities as a resource list (`resources(cpu="1.5", memory="1Gi")`)."""
    return parse_resources(quantities)


def local_dns_zone(name: str, destination: str, **fields: Any) -> dict[str, Any]:
    """One LocalDNS zone override (AKS's recommended values unless `fields` say otherwise)."""
    override = {
        "zone": name,
        "queryLogging": "Error",
        "protocol": "PreferUDP",
        "forwardDestination": destination,
        "forwardPolicy": "Sequential",
        "maxConcurrent": 1000,
        "cacheDuration": "1h",
        "serveStaleDuration": "1h",
        "serveStale": "Verify",
    }
    return {**override, **fields}


def configured_nodeclass_spec() -> dict[str, Any]:
    """An AKSNodeClass spec that sets every node setting: kubelet, maxPods, linuxOSConfig, FIPS, LocalDNS
    Required, artifact streaming and the GPU mode."""
    return {
        "imageFamily": "AzureLinux",
        "fipsMode": "FIPS",
        "maxPods": 42,
        "kubelet": {
            "cpuManagerPolicy": "static",
            "cpuCFSQuota": False,
            "cpuCFSQuotaPeriod": "200ms",
            "imageGCHighThresholdPercent": 70,
            "imageGCLowThresholdPercent": 60,
            "topologyManagerPolicy": "single-numa-node",
            "allowedUnsafeSysctls": ["kernel.msg*", "net.ipv4.route.min_pmtu"],
            "containerLogMaxSize": "100Mi",
            "containerLogMaxFiles": 7,
            "podPidsLimit": 4096,
            "failSwapOn": False,
        },
        "linuxOSConfig": {
            "swapFileSize": "2Gi",
            "transparentHugePageEnabled": "madvise",
            "transparentHugePageDefrag": "defer+madvise",
            "sysctls": {
                "netCoreSomaxconn": 16384,
                "netIPv4IPLocalPortRange": "32000 60000",
                "netIPv4TCPTwReuse": True,
                "vmMaxMapCount": 262144,
            },
        },
        "artifactStreaming": {"enabled": True},
        "gpu": {"mode": "Driver"},
        "localDNS": {
            "mode": "Required",
            "vnetDNSOverrides": [
                local_dns_zone(".", "VnetDNS"),
                local_dns_zone("cluster.local", "ClusterCoreDNS"),
            ],
            "kubeDNSOverrides": [
                local_dns_zone(".", "ClusterCoreDNS", queryLogging="Log", forwardPolicy="RoundRobin"),
                local_dns_zone("cluster.local", "ClusterCoreDNS", serveStale="Disable"),
            ],
        },
    }
