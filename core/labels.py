"""Label, annotation and taint keys users already know from Karpenter and AKS, and which of them are well known.

Well-known keys may appear in pod constraints without being declared on a NodePool: their values come from
instance types and offerings.
"""

from __future__ import annotations

# Kubernetes
HOSTNAME = "kubernetes.io/hostname"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"

# nodewright's own annotations and API group (extensions beyond Karpenter, such as CapacityWindow)
NODEWRIGHT_DOMAIN = "nodewright.io"
REPACK_TARGET = "nodewright.io/repack-target"
"""On a repack's new node while its steered drain moves pods onto it (`core.disruption.steering`), with the Unix
time until which the drain holds it: no other disruption takes it meanwhile, as Karpenter leaves a node alone that
pods were just nominated to (a drain that never came back does not hold it past that time)."""

# Karpenter
KARPENTER_DOMAIN = "karpenter.sh"
NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
REGISTERED = "karpenter.sh/registered"
INITIALIZED = "karpenter.sh/initialized"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
KNOWN_EPHEMERAL_TAINTS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
)
"""Taints Kubernetes puts on a node that is not ready to run pods yet; Karpenter's initialization waits for
them to go (kube-scheduler cannot bind pods until they do)."""
TERMINATION_FINALIZER = "karpenter.sh/termination"
TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
"""When a NodeClaim's drain ends whatever blocks it: its deletion plus its terminationGracePeriod."""

CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_RESERVED = "reserved"
CAPACITY_TYPES = (CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED)

# Azure provider (karpenter.azure.com) and AKS (kubernetes.azure.com)
AZURE_DOMAIN = "karpenter.azure.com"
AKS_DOMAIN = "kubernetes.azure.com"
NODECLASS_HASH = "karpenter.azure.com/aksnodeclass-hash"
NODECLASS_HASH_VERSION = "karpenter.azure.com/aksnodeclass-hash-version"
SKU_NAME = "karpenter.azure.com/sku-name"
SKU_FAMILY = "karpenter.azure.com/sku-family"
SKU_SERIES = "karpenter.azure.com/sku-series"
SKU_VERSION = "karpenter.azure.com/sku-version"
SKU_CPU = "karpenter.azure.com/sku-cpu"
SKU_MEMORY = "karpenter.azure.com/sku-memory"
SKU_NETWORKING_ACCELERATED = "karpenter.azure.com/sku-networking-accelerated"
SKU_STORAGE_PREMIUM_CAPABLE = "karpenter.azure.com/sku-storage-premium-capable"
SKU_STORAGE_EPHEMERALOS_MAXSIZE = "karpenter.azure.com/sku-storage-ephemeralos-maxsize"
SKU_STORAGE_ULTRA_SSD = "karpenter.azure.com/sku-storage-ultra-ssd"
SKU_GPU_NAME = "karpenter.azure.com/sku-gpu-name"
SKU_GPU_MANUFACTURER = "karpenter.azure.com/sku-gpu-manufacturer"
SKU_GPU_COUNT = "karpenter.azure.com/sku-gpu-count"
SKU_HYPERV_GENERATION = "karpenter.azure.com/sku-hyperv-generation"
PLACEMENT_SCOPE = "karpenter.azure.com/placement-scope"
AKS_SKU_CPU = "kubernetes.azure.com/sku-cpu"
AKS_SKU_MEMORY = "kubernetes.azure.com/sku-memory"
AKS_CLUSTER = "kubernetes.azure.com/cluster"
AKS_MODE = "kubernetes.azure.com/mode"
AKS_SCALESET_PRIORITY = "kubernetes.azure.com/scalesetpriority"
AKS_PRIORITY = "kubernetes.azure.com/priority"
AKS_OS_SKU = "kubernetes.azure.com/os-sku"
AKS_FIPS_ENABLED = "kubernetes.azure.com/fips_enabled"

AZURE_LABELS = frozenset(
    {
        SKU_NAME,
        SKU_FAMILY,
        SKU_SERIES,
        SKU_VERSION,
        SKU_CPU,
        SKU_MEMORY,
        SKU_NETWORKING_ACCELERATED,
        SKU_STORAGE_PREMIUM_CAPABLE,
        SKU_STORAGE_EPHEMERALOS_MAXSIZE,
        SKU_STORAGE_ULTRA_SSD,
        SKU_GPU_NAME,
        SKU_GPU_MANUFACTURER,
        SKU_GPU_COUNT,
        PLACEMENT_SCOPE,
        AKS_SKU_CPU,
        AKS_SKU_MEMORY,
        AKS_CLUSTER,
        AKS_MODE,
        AKS_SCALESET_PRIORITY,
        AKS_PRIORITY,
        AKS_OS_SKU,
        AKS_FIPS_ENABLED,
    }
)
"""Provider labels that pods may select without the NodePool declaring them."""

AKS_ALLOWED_IN_NODEPOOL = frozenset(
    {
        AKS_MODE,
        AKS_SCALESET_PRIORITY,
        AKS_PRIORITY,
        AKS_FIPS_ENABLED,
        AKS_OS_SKU,
        AKS_CLUSTER,
        AKS_SKU_CPU,
        AKS_SKU_MEMORY,
        "kubernetes.azure.com/ebpf-dataplane",
        "kubernetes.azure.com/ebpf-host-routing",
        "kubernetes.azure.com/network-policy",
        "kubernetes.azure.com/hostedvm",
    }
)
"""The only `kubernetes.azure.com` keys a NodePool may use in labels and requirements."""

WELL_KNOWN_LABELS = frozenset(
    {NODEPOOL, ZONE, REGION, INSTANCE_TYPE, ARCH, OS, CAPACITY_TYPE, WINDOWS_BUILD} | AZURE_LABELS
)

RESTRICTED_LABELS = frozenset({HOSTNAME})
"""Keys no NodePool label or requirement may set, besides the Karpenter domain."""

NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": REGION,
    "beta.kubernetes.io/arch": ARCH,
    "beta.kubernetes.io/os": OS,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
}
"""Deprecated beta keys and the keys they mean."""


def normalize_key(key: str) -> str:
    """The current key for a deprecated beta label key."""
    return NORMALIZED_LABELS.get(key, key)


def label_domain(key: str) -> str:
    """The domain prefix of a label key ("" when it has none)."""
    return key.split("/", 1)[0] if "/" in key else ""


def is_restricted_nodepool_label(key: str) -> bool:
    """Whether a NodePool may not use this key in its template labels or requirements.

    Karpenter forbids the hostname, `karpenter.sh/nodepool` and the rest of the `karpenter.sh` domain
    except the capacity type; the AKS provider also restricts `kubernetes.azure.com` to an allow-list.
    """
    key = normalize_key(key)
    if key in RESTRICTED_LABELS or key == NODEPOOL:
        return True
    domain = label_domain(key)
    if domain == KARPENTER_DOMAIN or domain.endswith("." + KARPENTER_DOMAIN):
        return key != CAPACITY_TYPE
    if domain == AKS_DOMAIN or domain.endswith("." + AKS_DOMAIN):
        return key not in AKS_ALLOWED_IN_NODEPOOL
    return False
