"""The generated CRDs on a real API server: it rejects what the models reject, naming the field, and accepts
what they accept.

Every object here goes through `kubectl apply --dry-run=server` against the session's control plane (which
installed `deploy/crds/`), so the API server runs its OpenAPI validation and every CEL rule but stores nothing;
only the update rules need objects that exist, and those tests delete what they made.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from core.api.aksnodeclass import AKSNodeClass
from core.api.capacitywindow import CapacityWindow
from core.api.meta import InvalidObjectError
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool
from tests.core.api.test_crds import MANIFESTS
from workers.controlplane.run import ControlPlane

MODELS: dict[str, Any] = {
    "NodePool": NodePool,
    "NodeClaim": NodeClaim,
    "AKSNodeClass": AKSNodeClass,
    "CapacityWindow": CapacityWindow,
}
NODE_CLASS_REF = {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"}
SPOT = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}


def nodepool(name: str = "invalid", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    template_spec = {"nodeClassRef": NODE_CLASS_REF, "requirements": [SPOT], **spec.pop("template_spec", {})}
    template: dict[str, Any] = {"spec": template_spec}
    if labels is not None:
        template["metadata"] = {"labels": labels}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def requirement(**fields: Any) -> dict[str, Any]:
    return nodepool(template_spec={"requirements": [fields]})


def nodeclaim(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "invalid"},
        "spec": {"nodeClassRef": NODE_CLASS_REF, "requirements": [SPOT], **spec},
    }


def nodeclass(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "invalid"},
        "spec": spec,
    }


def capacity_window(**change: Any) -> dict[str, Any]:
    spec = {
        "targetRef": {"apiGroup": "karpenter.sh", "kind": "NodePool", "name": "fixed"},
        "schedule": "0 8 * * mon-fri",
        "duration": "10h",
        "replicas": 5,
        **change,
    }
    return {
        "apiVersion": "nodewright.io/v1alpha1",
        "kind": "CapacityWindow",
        "metadata": {"name": "invalid"},
        "spec": spec,
    }


def zone(name: str, destination: str = "VnetDNS", **fields: Any) -> dict[str, Any]:
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


def local_dns(vnet: list[dict[str, Any]], kube: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    kube = kube or [zone(".", "ClusterCoreDNS"), zone("cluster.local", "ClusterCoreDNS")]
    return nodeclass(localDNS={"mode": "Required", "vnetDNSOverrides": vnet, "kubeDNSOverrides": kube})


VNET_ZONES = [zone("."), zone("cluster.local", "ClusterCoreDNS")]
REQUIREMENTS = "spec.template.spec.requirements"
LABELS = "spec.template.metadata.labels"
SYSCTLS = "spec.linuxOSConfig.sysctls"

LINUX_ONLY: dict[str, tuple[dict[str, Any], str]] = {
    "linuxOSConfig": ({"linuxOSConfig": {"transparentHugePageEnabled": "never"}}, "spec.linuxOSConfig"),
    "artifact streaming": ({"artifactStreaming": {"enabled": True}}, "spec.artifactStreaming.enabled"),
    "LocalDNS": (local_dns(VNET_ZONES)["spec"], "spec.localDNS.mode"),
}
"""What AKS refuses on a Windows AKSNodeClass: the spec that asks for it, and the field the refusal names."""
INVALID: dict[str, tuple[dict[str, Any], str, str]] = {
    # NodePool requirements
    "hostname requirement": (
        requirement(key="kubernetes.io/hostname", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label "kubernetes.io/hostname" is restricted',
    ),
    "nodepool requirement": (
        requirement(key="karpenter.sh/nodepool", operator="In", values=["a"]),
        REQUIREMENTS,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    "karpenter.sh requirement": (
        requirement(key="karpenter.sh/custom", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label domain "karpenter.sh" is restricted',
    ),
    "kubernetes.io requirement": (
        requirement(key="kubernetes.io/custom", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label domain "kubernetes.io" is restricted',
    ),
    "k8s.io requirement": (
        requirement(key="example.k8s.io/custom", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label domain "k8s.io" is restricted',
    ),
    "karpenter.azure.com requirement": (
        requirement(key="karpenter.azure.com/custom", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label domain "karpenter.azure.com" is restricted',
    ),
    "kubernetes.azure.com requirement": (
        requirement(key="kubernetes.azure.com/agentpool", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        'label domain "kubernetes.azure.com" is restricted',
    ),
    "key with two slashes": (
        requirement(key="example.com/a/b", operator="Exists"),
        f"{REQUIREMENTS}[0].key",
        "should match",
    ),
    "In without values": (
        requirement(key="example.com/a", operator="In"),
        f"{REQUIREMENTS}[0]",
        "requirements with operator 'In' must have a value defined",
    ),
    "Exists with values": (
        requirement(key="example.com/a", operator="Exists", values=["x"]),
        f"{REQUIREMENTS}[0]",
        "requirements with operator 'Exists' or 'DoesNotExist' must not have values",
    ),
    "Gt with a word": (
        requirement(key="example.com/a", operator="Gt", values=["many"]),
        f"{REQUIREMENTS}[0]",
        "must have a single positive integer value",
    ),
    "Lte with two values": (
        requirement(key="example.com/a", operator="Lte", values=["1", "2"]),
        f"{REQUIREMENTS}[0]",
        "must have a single positive integer value",
    ),
    "minValues above the values": (
        requirement(key="example.com/a", operator="In", values=["a", "b"], minValues=3),
        f"{REQUIREMENTS}[0]",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
    "minValues 0": (
        requirement(key="example.com/a", operator="Exists", minValues=0),
        f"{REQUIREMENTS}[0].minValues",
        "should be greater than or equal to 1",
    ),
    "unknown operator": (
        requirement(key="example.com/a", operator="Sometimes"),
        f"{REQUIREMENTS}[0].operator",
        "Unsupported value",
    ),
    # NodePool template
    "nodepool label": (
        nodepool(labels={"karpenter.sh/nodepool": "a"}),
        LABELS,
        'label "karpenter.sh/nodepool" is restricted',
    ),
    "hostname label": (
        nodepool(labels={"kubernetes.io/hostname": "a"}),
        LABELS,
        'label "kubernetes.io/hostname" is restricted',
    ),
    "label key with a space": (nodepool(labels={"a b": "c"}), LABELS, "label keys must be qualified names"),
    "label value with a space": (nodepool(labels={"a": "b c"}), f"{LABELS}.a", "should match"),
    "empty nodeClassRef group": (
        nodepool(template_spec={"nodeClassRef": {**NODE_CLASS_REF, "group": ""}}),
        "spec.template.spec.nodeClassRef.group",
        "group may not be empty",
    ),
    "nodeClassRef group with a version": (
        nodepool(template_spec={"nodeClassRef": {**NODE_CLASS_REF, "group": "karpenter.azure.com/v1beta1"}}),
        "spec.template.spec.nodeClassRef.group",
        "should match",
    ),
    "expireAfter in days": (
        nodepool(template_spec={"expireAfter": "30d"}),
        "spec.template.spec.expireAfter",
        "should match",
    ),
    "taint with a bad effect": (
        nodepool(template_spec={"taints": [{"key": "a", "effect": "Sometimes"}]}),
        "spec.template.spec.taints[0].effect",
        "Unsupported value",
    ),
    # NodePool disruption and limits
    "schedule without duration": (
        nodepool(disruption={"budgets": [{"nodes": "1", "schedule": "@daily"}]}),
        "spec.disruption.budgets[0]",
        "'schedule' must be set with 'duration'",
    ),
    "duration without schedule": (
        nodepool(disruption={"budgets": [{"nodes": "1", "duration": "1h"}]}),
        "spec.disruption.budgets[0]",
        "'schedule' must be set with 'duration'",
    ),
    "budget of 101%": (
        nodepool(disruption={"budgets": [{"nodes": "101%"}]}),
        "spec.disruption.budgets[0].nodes",
        "should match",
    ),
    "duplicate budget reasons": (
        nodepool(disruption={"budgets": [{"nodes": "1", "reasons": ["Empty", "Empty"]}]}),
        "spec.disruption.budgets[0].reasons[1]",
        "Duplicate value",
    ),
    "consolidateAfter in days": (
        nodepool(disruption={"consolidateAfter": "1d"}),
        "spec.disruption.consolidateAfter",
        "should match",
    ),
    "weight 0": (nodepool(weight=0), "spec.weight", "should be greater than or equal to 1"),
    "static pool with a weight": (
        nodepool(replicas=3, weight=10),
        "spec.weight",
        "'weight' is not supported on static NodePools",
    ),
    "static pool with a cpu limit": (
        nodepool(replicas=3, limits={"cpu": "10"}),
        "spec.limits",
        "only 'limits.nodes' is supported on static NodePools",
    ),
    "limit that is not a quantity": (nodepool(limits={"cpu": "ten"}), "spec.limits.cpu", "should match"),
    # NodeClaim
    "NodeClaim hostname requirement": (
        nodeclaim(requirements=[{"key": "kubernetes.io/hostname", "operator": "Exists"}]),
        "spec.requirements[0].key",
        'label "kubernetes.io/hostname" is restricted',
    ),
    "NodeClaim minValues above the values": (
        nodeclaim(requirements=[{"key": "example.com/a", "operator": "In", "values": ["x"], "minValues": 2}]),
        "spec.requirements[0]",
        "requirements with 'minValues' must have at least that many values",
    ),
    "NodeClaim without a nodeClassRef": (
        {**nodeclaim(), "spec": {"requirements": [SPOT]}},
        "spec.nodeClassRef",
        "Required value",
    ),
    # AKSNodeClass
    "FIPS on Ubuntu2404": (
        nodeclass(fipsMode="FIPS", imageFamily="Ubuntu2404"),
        "spec.fipsMode",
        "FIPS is not supported with imageFamily Ubuntu2404",
    ),
    "FIPS on Ubuntu2204 without Trusted Launch": (
        nodeclass(fipsMode="FIPS", imageFamily="Ubuntu2204"),
        "spec.fipsMode",
        "requires Trusted Launch",
    ),
    "FIPS with Trusted Launch on AzureLinux": (
        nodeclass(fipsMode="FIPS", imageFamily="AzureLinux", security={"trustedLaunch": {"vtpm": True}}),
        "spec.fipsMode",
        "FIPS with Trusted Launch is not supported with imageFamily AzureLinux",
    ),
    "FIPS disabled on Windows2025": (
        nodeclass(imageFamily="Windows2025", fipsMode="Disabled"),
        "spec.fipsMode",
        "FIPS cannot be disabled with imageFamily Windows2025",
    ),
    "Trusted Launch on Windows2022": (
        nodeclass(imageFamily="Windows2022", security={"trustedLaunch": {"secureBoot": True}}),
        "spec.security.trustedLaunch",
        "Trusted Launch is not supported with imageFamily Windows2022",
    ),
    "swap without failSwapOn false": (
        nodeclass(linuxOSConfig={"swapFileSize": "1Gi"}),
        "spec.kubelet.failSwapOn",
        "must be set to false when linuxOSConfig.swapFileSize is specified",
    ),
    "image GC high below low": (
        nodeclass(kubelet={"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
        "spec.kubelet",
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    "rmem default above max": (
        nodeclass(linuxOSConfig={"sysctls": {"netCoreRmemDefault": 300000, "netCoreRmemMax": 250000}}),
        f"{SYSCTLS}.netCoreRmemDefault",
        "netCoreRmemDefault must be <= netCoreRmemMax",
    ),
    "port range from 80": (
        nodeclass(linuxOSConfig={"sysctls": {"netIPv4IPLocalPortRange": "80 40000"}}),
        f"{SYSCTLS}.netIPv4IPLocalPortRange",
        "first port must be in [1024, 60999]",
    ),
    "port range reversed": (
        nodeclass(linuxOSConfig={"sysctls": {"netIPv4IPLocalPortRange": "50000 40000"}}),
        f"{SYSCTLS}.netIPv4IPLocalPortRange",
        "first port must be <= last port",
    ),
    "tag key with <": (nodeclass(tags={"a<b": "c"}), "spec.tags", "tags keys must not contain"),
    "tag value of 257 characters": (
        nodeclass(tags={"a": "b" * 257}),
        "spec.tags",
        "tags values must be less than 256",
    ),
    "OS disk of 10 GB": (
        nodeclass(osDiskSizeGB=10),
        "spec.osDiskSizeGB",
        "should be greater than or equal to 30",
    ),
    "LocalDNS without cluster.local": (
        local_dns([zone(".")]),
        "spec.localDNS.vnetDNSOverrides",
        "must contain required zones '.' and 'cluster.local'",
    ),
    "LocalDNS root zone to ClusterCoreDNS": (
        local_dns([zone(".", "ClusterCoreDNS"), zone("cluster.local", "ClusterCoreDNS")]),
        "spec.localDNS.vnetDNSOverrides",
        "root zone '.' cannot be forwarded to ClusterCoreDNS from vnetDNSOverrides",
    ),
    "LocalDNS cluster.local to VnetDNS": (
        local_dns(VNET_ZONES, [zone(".", "ClusterCoreDNS"), zone("cluster.local", "VnetDNS")]),
        "spec.localDNS.kubeDNSOverrides[1].forwardDestination",
        "'cluster.local' cannot be forwarded to VnetDNS",
    ),
    "LocalDNS Verify over TCP": (
        local_dns([zone(".", protocol="ForceTCP"), zone("cluster.local", "ClusterCoreDNS")]),
        "spec.localDNS.vnetDNSOverrides[0].serveStale",
        "serveStale Verify cannot be used with protocol ForceTCP",
    ),
    "CapacityWindow on a NodePool in the wrong group": (
        capacity_window(targetRef={"apiGroup": "apps", "kind": "NodePool", "name": "fixed"}),
        "spec.targetRef.apiGroup",
        "a NodePool is in group karpenter.sh",
    ),
    "CapacityWindow on a CapacityBuffer without its namespace": (
        capacity_window(
            targetRef={"apiGroup": "autoscaling.x-k8s.io", "kind": "CapacityBuffer", "name": "b"}
        ),
        "spec.targetRef.namespace",
        "a CapacityBuffer is namespaced: give its namespace",
    ),
    "CapacityWindow with a lead time of Never": (
        capacity_window(leadTime="Never"),
        "spec.leadTime",
        "should match",
    ),
    "CapacityWindow with negative replicas": (
        capacity_window(replicas=-1),
        "spec.replicas",
        "should be greater than or equal to 0",
    ),
    "LocalDNS zone twice": (
        local_dns([*VNET_ZONES, zone(".")]),
        "spec.localDNS.vnetDNSOverrides[2]",
        "Duplicate value",
    ),
}
INVALID.update(
    {
        f"{setting} on {family}": (
            nodeclass(**spec, imageFamily=family),
            field,
            f"{setting} is not supported with imageFamily {family}",
        )
        for setting, (spec, field) in LINUX_ONLY.items()
        for family in ("Windows2022", "Windows2025")
    }
)


def dry_run(control_plane: ControlPlane, manifest: dict[str, Any]) -> str | None:
    """None if the API server would accept `manifest`, else its error message."""
    done = control_plane.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(manifest), check=False
    )
    return done.stderr.strip() if done.returncode else None


def model_accepts(manifest: dict[str, Any]) -> bool:
    try:
        MODELS[manifest["kind"]].parse(manifest)
    except InvalidObjectError:
        return False
    return True


@pytest.mark.parametrize(("manifest", "field", "message"), INVALID.values(), ids=INVALID.keys())
def test_the_api_server_rejects_what_the_models_reject_naming_the_field(
    control_plane: ControlPlane, manifest: dict[str, Any], field: str, message: str
) -> None:
    assert not model_accepts(manifest)
    error = dry_run(control_plane, manifest)
    assert error is not None, "the API server accepted it"
    assert f"{field}: " in error and message in error, error


def test_the_table_covers_every_kind_and_twenty_objects() -> None:
    assert len(INVALID) >= 20
    assert {manifest["kind"] for manifest, _, _ in INVALID.values()} == set(MODELS)


@pytest.mark.parametrize(("name", "manifest"), MANIFESTS, ids=[name for name, _ in MANIFESTS])
def test_the_api_server_accepts_the_example_manifests(
    control_plane: ControlPlane, name: str, manifest: dict[str, Any]
) -> None:
    assert dry_run(control_plane, manifest) is None


VALID = {
    "Gt with a leading plus": requirement(key="example.com/a", operator="Gt", values=["+5"]),
    "deprecated beta keys": nodepool(
        template_spec={
            "requirements": [
                {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "failure-domain.beta.kubernetes.io/zone", "operator": "Exists"},
            ]
        }
    ),
    "Karpenter's and AKS's labels": nodepool(
        labels={"karpenter.sh/capacity-type": "spot", "kubernetes.azure.com/mode": "user", "team": ""},
        template_spec={
            "requirements": [{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}]
        },
    ),
    "a static pool with a node limit": nodepool(replicas=2, limits={"nodes": 2}),
    "budgets with schedules": nodepool(
        disruption={
            "consolidateAfter": "Never",
            "budgets": [
                {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h0s", "reasons": ["Drifted"]}
            ],
        }
    ),
    "a NodeClaim of its NodePool": nodeclaim(
        requirements=[{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
        resources={"requests": {"cpu": "3100m", "memory": "3200Mi", "pods": 4}},
    ),
    "FIPS on Ubuntu2204 with Trusted Launch": nodeclass(
        fipsMode="FIPS", imageFamily="Ubuntu2204", security={"trustedLaunch": {"secureBoot": True}}
    ),
    "Windows2022 with FIPS": nodeclass(imageFamily="Windows2022", fipsMode="FIPS"),
    "Windows2025 with Trusted Launch and LocalDNS off": nodeclass(
        imageFamily="Windows2025",
        security={"trustedLaunch": {"vtpm": True, "secureBoot": True}},
        artifactStreaming={"enabled": False},
        localDNS={"mode": "Disabled", "vnetDNSOverrides": VNET_ZONES, "kubeDNSOverrides": VNET_ZONES},
    ),
    "swap with failSwapOn false": nodeclass(
        linuxOSConfig={"swapFileSize": "1Gi"}, kubelet={"failSwapOn": False}
    ),
    "a Go duration in microseconds": nodeclass(kubelet={"cpuCFSQuotaPeriod": "1500µs"}),
    "LocalDNS with a cluster subzone": local_dns([*VNET_ZONES, zone("svc.cluster.local", "ClusterCoreDNS")]),
    "a case-insensitive subnet ID": nodeclass(
        vnetSubnetID="/SUBSCRIPTIONS/s/resourcegroups/rg/providers/microsoft.network/virtualnetworks/v/subnets/n"
    ),
}


@pytest.mark.parametrize("manifest", VALID.values(), ids=VALID.keys())
def test_the_api_server_accepts_what_the_models_accept(
    control_plane: ControlPlane, manifest: dict[str, Any]
) -> None:
    assert model_accepts(manifest)
    assert dry_run(control_plane, manifest) is None


KEYS = [
    "example.com/team",
    "team",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "kubernetes.io/hostname",
    "kubernetes.io/custom",
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/custom",
    "node.kubernetes.io/instance-type",
    "node.kubernetes.io/custom",
    "sub.node-restriction.kubernetes.io/custom",
    "kubernetes.io.example.com/custom",
    "k8s.io/custom",
    "example.k8s.io/custom",
    "kops.k8s.io/custom",
    "a.kops.k8s.io/custom",
    "karpenter.sh/capacity-type",
    "karpenter.sh/nodepool",
    "karpenter.sh/custom",
    "sub.karpenter.sh/custom",
    "notkarpenter.sh/custom",
    "karpenter.azure.com/sku-family",
    "karpenter.azure.com/aksnodeclass",
    "karpenter.azure.com/custom",
    "kubernetes.azure.com/mode",
    "kubernetes.azure.com/agentpool",
]


def requirement_on(key: str) -> dict[str, Any]:
    return requirement(key=key, operator="Exists")


def nodeclaim_requirement_on(key: str) -> dict[str, Any]:
    return nodeclaim(requirements=[{"key": key, "operator": "Exists"}])


def label(key: str) -> dict[str, Any]:
    return nodepool(labels={key: "x"})


@pytest.mark.parametrize(
    "build", [requirement_on, nodeclaim_requirement_on, label], ids=lambda build: build.__name__
)
def test_the_api_server_and_the_models_agree_on_every_label_key(
    control_plane: ControlPlane, build: Callable[[str], dict[str, Any]]
) -> None:
    disagreements = {}
    for key in KEYS:
        manifest = build(key)
        error = dry_run(control_plane, manifest)
        if (error is None) != model_accepts(manifest):
            disagreements[key] = error or "accepted by the API server, rejected by the model"
    assert disagreements == {}


@pytest.fixture
def created(control_plane: ControlPlane) -> Any:
    """Create objects for the test and delete them afterwards."""
    made: list[dict[str, Any]] = []

    def create(manifest: dict[str, Any]) -> dict[str, Any]:
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
        made.append(manifest)
        return manifest

    yield create
    for manifest in made:
        control_plane.kubectl("delete", "--wait=false", "-f", "-", input=yaml.safe_dump(manifest))


def changed(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**manifest, "spec": {**manifest["spec"], **spec}}


def with_ref(manifest: dict[str, Any], **ref: str) -> dict[str, Any]:
    template = manifest["spec"]["template"]
    spec = {**template["spec"], "nodeClassRef": {**NODE_CLASS_REF, **ref}}
    return changed(manifest, template={**template, "spec": spec})


UPDATES: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], str, str]] = {
    "nodeClassRef group": (
        lambda pool: with_ref(pool, group="example.com"),
        "spec.template.spec.nodeClassRef",
        "nodeClassRef.group is immutable",
    ),
    "nodeClassRef kind": (
        lambda pool: with_ref(pool, kind="OtherNodeClass"),
        "spec.template.spec.nodeClassRef",
        "nodeClassRef.kind is immutable",
    ),
    "dynamic to static": (
        lambda pool: changed(pool, replicas=3),
        "spec.replicas",
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset)",
    ),
}


@pytest.mark.parametrize(("change", "field", "message"), UPDATES.values(), ids=UPDATES.keys())
def test_the_api_server_rejects_the_updates_the_models_reject(
    control_plane: ControlPlane,
    created: Callable[[dict[str, Any]], dict[str, Any]],
    change: Callable[[dict[str, Any]], dict[str, Any]],
    field: str,
    message: str,
) -> None:
    pool = created(nodepool(name=f"update-{uuid.uuid4().hex[:8]}"))
    updated = change(pool)
    with pytest.raises(InvalidObjectError):
        NodePool.parse(updated).validate_update(NodePool.parse(pool))
    error = dry_run(control_plane, updated)
    assert error is not None, "the API server accepted the update"
    assert f"{field}: " in error and message in error, error


def test_the_name_of_the_nodeclass_may_change(
    control_plane: ControlPlane, created: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    pool = created(nodepool(name=f"update-{uuid.uuid4().hex[:8]}"))
    NodePool.parse(with_ref(pool, name="other")).validate_update(NodePool.parse(pool))
    assert dry_run(control_plane, with_ref(pool, name="other")) is None


def header(control_plane: ControlPlane, resource: str, *args: str) -> list[str]:
    return control_plane.kubectl("get", resource, *args).stdout.splitlines()[0].split()


def test_kubectl_get_shows_karpenters_columns(
    control_plane: ControlPlane, created: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    pool = created(nodepool(name=f"columns-{suffix}"))
    claim = created({**nodeclaim(), "metadata": {"name": f"columns-{suffix}"}})
    claims = f"nodeclaims/{claim['metadata']['name']}"
    pools = f"nodepools/{pool['metadata']['name']}"
    assert header(control_plane, claims) == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert header(control_plane, claims, "-o", "wide")[7:] == ["ID", "NODEPOOL", "NODECLASS", "DRIFTED"]
    assert header(control_plane, pools) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    assert header(control_plane, pools, "-o", "wide")[5:] == ["WEIGHT", "CPU", "MEMORY"]
