from __future__ import annotations

import re
import textwrap
from typing import Any

import pytest

from core.api.kube import (
    DaemonSet,
    Deployment,
    Job,
    PodPhase,
    ReplicaSet,
    StatefulSet,
    is_pending,
    pod_requests,
)
from core.api.manifests import (
    MAX_REPLICAS,
    ManifestError,
    Manifests,
    load_yaml,
    parse_manifests,
    workload_pods,
)

GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"


def read(text: str, source: str = "test.yaml") -> Manifests:
    return parse_manifests(load_yaml(textwrap.dedent(text), source), source)


def template(labels: dict[str, str] | None = None, cpu: str = "100m") -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
    }


def workload(kind: str, name: str = "web", namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    api_version = {"Job": "batch/v1"}.get(kind, "apps/v1")
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata,
        "spec": {"template": template(), **spec},
    }


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [], **spec}}


# --- YAML ------------------------------------------------------------------------------------------------


def test_load_yaml_reads_every_document_and_skips_empty_ones() -> None:
    documents = load_yaml("---\na: 1\n---\n---\n# only a comment\n---\nb: 2\n", "x.yaml")
    assert documents == [{"a": 1}, {"b": 2}]


def test_load_yaml_flattens_kubectl_lists() -> None:
    text = """
    apiVersion: v1
    kind: List
    items:
    - {apiVersion: v1, kind: Pod, metadata: {name: a}}
    - {apiVersion: v1, kind: Node, metadata: {name: n}}
    metadata: {resourceVersion: ""}
    """
    documents = load_yaml(textwrap.dedent(text), "x.yaml")
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [("Pod", "a"), ("Node", "n")]


def test_api_lists_give_their_items_the_kind() -> None:
    pod_list = {"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "a"}, "spec": {}}]}
    manifests = parse_manifests([pod_list], "pods.json")
    assert [p.metadata.name for p in manifests.pods] == ["a"]
    assert manifests.problems == []


def test_load_yaml_names_the_file_and_line_of_a_syntax_error() -> None:
    with pytest.raises(
        ManifestError, match=r"^broken\.yaml: line 2, column 5: mapping values are not allowed"
    ):
        load_yaml("a: 1\nb: c: d\n", "broken.yaml")


# --- kube objects ----------------------------------------------------------------------------------------

KUBECTL_GET = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: aks-default-abcde
    uid: 5b1d2c1e-0000-4000-8000-000000000001
    creationTimestamp: "2025-03-01T10:00:00Z"
    resourceVersion: "12345"
    labels:
      kubernetes.io/arch: amd64
      karpenter.sh/nodepool: default
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1: {"f:metadata": {"f:labels": {}}}
      manager: kubelet
      operation: Update
  spec:
    providerID: azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/aks-default-abcde
    taints:
    - {key: karpenter.sh/disrupted, effect: NoSchedule}
  status:
    capacity: {cpu: "4", memory: 16365492Ki, pods: "110", ephemeral-storage: 129886128Ki}
    allocatable: {cpu: 3860m, memory: 12880564Ki, pods: "110"}
    conditions:
    - {type: Ready, status: "True", reason: KubeletReady, message: kubelet is posting ready status,
       lastHeartbeatTime: "2025-03-01T10:05:00Z", lastTransitionTime: "2025-03-01T10:01:00Z"}
    nodeInfo:
      kubeletVersion: v1.31.2
      osImage: Ubuntu 22.04.5 LTS
      architecture: amd64
      operatingSystem: linux
      kernelVersion: 5.15.0-1079-azure
      containerRuntimeVersion: containerd://1.7.25
      machineID: abc
    addresses:
    - {type: InternalIP, address: 10.224.0.5}
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-7d4b9c8f6d-x2x9q
    namespace: shop
    uid: 9c1d2c1e-0000-4000-8000-000000000002
    creationTimestamp: "2025-03-01T10:06:00Z"
    labels: {app: web, pod-template-hash: 7d4b9c8f6d}
    ownerReferences:
    - apiVersion: apps/v1
      kind: ReplicaSet
      name: web-7d4b9c8f6d
      uid: 7c1d2c1e-0000-4000-8000-000000000003
      controller: true
      blockOwnerDeletion: true
  spec:
    nodeName: aks-default-abcde
    schedulerName: default-scheduler
    priority: 0
    containers:
    - name: web
      image: nginx:1.27
      resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {memory: 512Mi}}
      ports: [{containerPort: 80, protocol: TCP}]
      volumeMounts: [{name: kube-api-access, mountPath: /var/run/secrets, readOnly: true}]
    tolerations:
    - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
    volumes:
    - name: kube-api-access
      projected: {sources: [{serviceAccountToken: {path: token}}]}
  status:
    phase: Running
    podIP: 10.244.1.7
    qosClass: Burstable
    conditions:
    - {type: PodScheduled, status: "True", lastTransitionTime: "2025-03-01T10:06:00Z"}
    containerStatuses:
    - {name: web, ready: true, restartCount: 0, image: nginx:1.27}
- apiVersion: v1
  kind: Pod
  metadata: {name: batch-1, namespace: shop}
  spec:
    containers: [{name: job, resources: {requests: {cpu: "2"}}}]
  status:
    phase: Pending
    conditions:
    - {type: PodScheduled, status: "False", reason: Unschedulable, message: "0/1 nodes are available"}
"""


def test_kubectl_get_output_with_status_and_managed_fields_parses() -> None:
    manifests = read(KUBECTL_GET)
    assert manifests.problems == []
    [node] = manifests.nodes
    assert node.spec.provider_id.startswith("azure:///subscriptions/")
    assert node.spec.taints[0].key == "karpenter.sh/disrupted"
    assert node.status.allocatable["cpu"] == "3860m"
    assert node.status.node_info.kubelet_version == "v1.31.2"
    assert node.status.conditions[0].type == "Ready"
    bound, waiting = manifests.pods
    assert bound.spec.node_name == "aks-default-abcde"
    assert not is_pending(bound)
    assert bound.metadata.creation_timestamp is not None
    assert pod_requests(bound) == {"cpu": 250, "memory": 256 * 2**20}
    assert bound.spec.volumes[0]["name"] == "kube-api-access"
    assert is_pending(waiting)
    assert waiting.status.conditions[0].reason == "Unschedulable"


def test_pods_without_namespace_land_in_default() -> None:
    manifests = parse_manifests([pod("solo")], "p.yaml")
    assert manifests.pods[0].metadata.namespace == "default"


def test_null_fields_read_as_unset() -> None:
    spread = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": None,
    }
    deployment = workload("Deployment", replicas=None)
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] = [spread]
    manifests = parse_manifests([deployment], "d.yaml")
    assert manifests.problems == []
    [only] = manifests.pods
    assert only.spec.topology_spread_constraints[0].label_selector is None


def test_daemonsets_and_pdbs_are_kept_as_objects() -> None:
    daemonset = workload("DaemonSet", name="agent", namespace="kube-system")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
    }
    manifests = parse_manifests([daemonset, budget], "x.yaml")
    assert manifests.pods == []
    assert [d.metadata.name for d in manifests.daemonsets] == ["agent"]
    assert isinstance(manifests.daemonsets[0], DaemonSet)
    assert manifests.pdbs[0].metadata.namespace == "default"
    assert manifests.pdbs[0].spec.selector is not None
    assert manifests.pdbs[0].spec.selector.matches({"app": "web"})


def test_kinds_nodewright_does_not_read_are_listed_as_ignored() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}
    foreign_job = {"apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": "j"}}
    manifests = parse_manifests([service, namespace, foreign_job], "x.yaml")
    assert manifests.ignored == ["Service/web", "Namespace/shop", "Job/j"]
    assert manifests.problems == []


# --- workload expansion ----------------------------------------------------------------------------------


def test_deployment_becomes_pending_pods_behind_a_replica_set() -> None:
    manifests = parse_manifests([workload("Deployment", replicas=3)], "d.yaml")
    assert manifests.problems == []
    assert len(manifests.pods) == 3
    names = [p.metadata.name for p in manifests.pods]
    assert all(re.fullmatch(f"web-{GENERATED}{{10}}-{GENERATED}{{5}}", name) for name in names)
    assert len(set(names)) == 3
    template_hash = names[0].split("-")[1]
    for replica in manifests.pods:
        assert replica.metadata.namespace == "default"
        assert replica.metadata.labels == {"app": "web", "pod-template-hash": template_hash}
        [owner] = replica.metadata.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.controller) == (
            "apps/v1",
            "ReplicaSet",
            f"web-{template_hash}",
            True,
        )
        assert replica.metadata.creation_timestamp is None
        assert replica.spec.node_name is None
        assert replica.status.phase is PodPhase.PENDING
        assert is_pending(replica)
        assert pod_requests(replica) == {"cpu": 100}
    assert len({p.metadata.uid for p in manifests.pods}) == 3


def test_expansion_is_deterministic_and_scaling_keeps_names() -> None:
    def names(replicas: int) -> list[str]:
        return [
            p.metadata.name for p in parse_manifests([workload("Deployment", replicas=replicas)], "d").pods
        ]

    def uids() -> list[str]:
        return [p.metadata.uid for p in parse_manifests([workload("Deployment", replicas=2)], "d").pods]

    assert names(3) == names(3)
    assert names(5)[:3] == names(3)
    assert uids() == uids()


def test_deployments_of_the_same_name_in_other_namespaces_get_other_names() -> None:
    first = parse_manifests([workload("Deployment", namespace="a")], "d").pods[0]
    second = parse_manifests([workload("Deployment", namespace="b")], "d").pods[0]
    assert first.metadata.name != second.metadata.name
    assert second.metadata.namespace == "b"


def test_many_replicas_never_share_a_name() -> None:
    deployment = Deployment.model_validate(workload("Deployment", replicas=3000))
    assert len({p.metadata.name for p in workload_pods(deployment)}) == 3000


def test_replicas_get_their_own_spec_to_bind() -> None:
    first, second = workload_pods(Deployment.model_validate(workload("Deployment", replicas=2)))
    first.spec.node_name = "node-1"
    assert second.spec.node_name is None


def test_statefulset_pods_have_ordinal_names() -> None:
    statefulset = StatefulSet.model_validate(workload("StatefulSet", name="db", namespace="data", replicas=3))
    pods = workload_pods(statefulset)
    assert [p.metadata.name for p in pods] == ["db-0", "db-1", "db-2"]
    assert pods[2].metadata.labels["statefulset.kubernetes.io/pod-name"] == "db-2"
    assert pods[2].metadata.labels["apps.kubernetes.io/pod-index"] == "2"
    assert pods[0].metadata.owner_references[0].kind == "StatefulSet"
    assert pods[0].metadata.owner_references[0].name == "db"


@pytest.mark.parametrize(
    ("spec", "count"),
    [({}, 1), ({"parallelism": 4}, 4), ({"parallelism": 4, "completions": 2}, 2), ({"parallelism": 0}, 0)],
)
def test_job_runs_parallelism_pods_up_to_its_completions(spec: dict[str, int], count: int) -> None:
    pods = workload_pods(Job.model_validate(workload("Job", name="etl", **spec)))
    assert len(pods) == count
    for replica in pods:
        assert re.fullmatch(f"etl-{GENERATED}{{5}}", replica.metadata.name)
        assert replica.metadata.labels["batch.kubernetes.io/job-name"] == "etl"
        assert replica.metadata.owner_references[0].api_version == "batch/v1"


def test_replica_set_pods_point_at_the_replica_set_and_its_uid() -> None:
    raw = workload("ReplicaSet", name="cache", replicas=2)
    raw["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    pods = workload_pods(ReplicaSet.model_validate(raw))
    assert all(re.fullmatch(f"cache-{GENERATED}{{5}}", p.metadata.name) for p in pods)
    assert {p.metadata.owner_references[0].uid for p in pods} == {"11111111-2222-3333-4444-555555555555"}


def test_replicas_default_to_one_and_zero_means_none() -> None:
    assert len(parse_manifests([workload("Deployment")], "d").pods) == 1
    assert parse_manifests([workload("Deployment", replicas=0)], "d").pods == []


# --- problems --------------------------------------------------------------------------------------------

BROKEN = """
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    resources: {requests: {cpu: 1x}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  replicas: three
  template: {spec: {containers: [{name: api}]}}
---
- just
- a list
---
metadata: {name: orphan}
spec: {}
---
apiVersion: v1
kind: Pod
metadata: {name: fine}
spec: {containers: [{name: app, resources: {requests: {cpu: 500m}}}]}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
---
apiVersion: policy/v1beta1
kind: PodDisruptionBudget
metadata: {name: old, namespace: shop}
---
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Node
metadata: {labels: {a: b}}
---
apiVersion: v1
kind: Pod
metadata: {name: fine}
spec: {containers: []}
"""


def test_every_bad_object_is_reported_and_the_rest_still_load() -> None:
    manifests = read(BROKEN, "workloads.yaml")
    assert manifests.problems == [
        "workloads.yaml: Pod default/web: spec.containers[0].resources.requests.cpu: "
        "quantity '1x' does not match the Kubernetes quantity format",
        "workloads.yaml: Deployment shop/api: spec.replicas: "
        "Input should be a valid integer, unable to parse string as an integer",
        "workloads.yaml: document 3: expected a Kubernetes object (a mapping), not list",
        "workloads.yaml: document 4 (orphan): kind: Field required",
        "workloads.yaml: NodePool old: apiVersion: karpenter.sh/v1beta1 is not supported for NodePool; "
        "use karpenter.sh/v1",
        "workloads.yaml: PodDisruptionBudget shop/old: apiVersion: policy/v1beta1 is not supported for "
        "PodDisruptionBudget; use policy/v1",
        "workloads.yaml: Node n1: apiVersion: Field required",
        "workloads.yaml: Node: metadata.name: Field required",
        "workloads.yaml: Pod default/fine: metadata.name: repeats an earlier object; kept the first",
    ]
    [fine] = manifests.pods
    assert fine.metadata.name == "fine"
    assert pod_requests(fine) == {"cpu": 500}


def test_a_bad_workload_template_names_the_template_field() -> None:
    deployment = workload("Deployment", namespace="shop")
    deployment["spec"]["template"]["spec"]["tolerations"] = [{"key": "a", "operator": "Maybe"}]
    [problem] = parse_manifests([deployment], "d.yaml").problems
    assert problem.startswith("d.yaml: Deployment shop/web: spec.template.spec.tolerations[0].operator: ")


def test_a_missing_template_is_reported() -> None:
    raw = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 1},
    }
    assert parse_manifests([raw], "s.yaml").problems == [
        "s.yaml: StatefulSet default/db: spec.template: Field required"
    ]


def test_an_absurd_replica_count_is_refused_rather_than_expanded() -> None:
    manifests = parse_manifests([workload("Deployment", replicas=MAX_REPLICAS + 1)], "d.yaml")
    assert manifests.pods == []
    assert manifests.problems == [
        f"d.yaml: Deployment default/web: spec.replicas: {MAX_REPLICAS + 1} pods are more than the "
        f"{MAX_REPLICAS} one workload may expand into"
    ]


def test_wrong_types_anywhere_become_problems_not_exceptions() -> None:
    documents: list[Any] = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": "web"},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": 1}}},
        {"apiVersion": 7, "kind": "Pod", "metadata": {"name": "q"}},
        {"apiVersion": "v1", "kind": ["Pod"]},
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "lots"}},
        },
        None,
        42,
    ]
    manifests = parse_manifests(documents, "mixed.json")
    assert manifests.problems == [
        "mixed.json: Pod: metadata: Input should be a valid dictionary or instance of ObjectMeta",
        "mixed.json: Pod default/p: metadata.labels.app: Input should be a valid string",
        "mixed.json: Pod default/q: apiVersion: Field required",
        "mixed.json: document 4: kind: Field required",
        "mixed.json: Node n: status.allocatable.cpu: "
        "quantity 'lots' does not match the Kubernetes quantity format",
        "mixed.json: document 6: expected a Kubernetes object (a mapping), not NoneType",
        "mixed.json: document 7: expected a Kubernetes object (a mapping), not int",
    ]


# --- Karpenter objects -----------------------------------------------------------------------------------

KARPENTER = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: broken}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: Sometimes, values: [on-demand]}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: default-x7k2p}
spec:
  nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
  requirements:
  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"""


def test_karpenter_objects_are_dispatched_to_their_models() -> None:
    manifests = read(KARPENTER, "karpenter.yaml")
    assert [p.metadata.name for p in manifests.nodepools] == ["default"]
    assert [c.metadata.name for c in manifests.nodeclaims] == ["default-x7k2p"]
    [problem] = manifests.problems
    assert problem.startswith(
        "karpenter.yaml: NodePool broken: spec.template.spec.requirements[0].operator: "
    )


def served(name: str, uid: str, version: str, cpu: str = "100m") -> dict[str, Any]:
    """A Pod as the API server lists it: with a uid and a resourceVersion."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": version},
        **{key: value for key, value in template(cpu=cpu).items() if key == "spec"},
    }


def test_a_parse_cache_returns_unchanged_objects_as_they_were_read_and_forgets_the_gone() -> None:
    cache: dict[Any, Any] = {}
    first = parse_manifests(
        [served("a", "u-a", "1"), served("b", "u-b", "1"), {"kind": "Pod"}], "cluster", cache
    )
    assert len(first.problems) == 1 and len(first.pods) == 2
    second = parse_manifests(
        [served("a", "u-a", "1"), served("b", "u-b", "2", cpu="2"), {"kind": "Pod"}], "cluster", cache
    )
    a1, b1 = first.pods
    a2, b2 = second.pods
    assert a2 is a1, "unchanged: not parsed again"
    assert b2 is not b1 and pod_requests(b2)["cpu"] == 2000, "a new resourceVersion is parsed"
    assert len(second.problems) == 1, "a bad object is reported every time"
    parse_manifests([served("b", "u-b", "2", cpu="2")], "cluster", cache)
    assert set(cache) == {("Pod", "u-b")}, "what a snapshot no longer holds is forgotten"


def test_other_providers_nodepools_and_nodeclaims_are_left_with_a_line_each() -> None:
    def reference(group: str, kind: str) -> str:
        return f"{{group: {group}, kind: {kind}, name: default}}"

    ours, theirs = (
        reference("karpenter.azure.com", "AKSNodeClass"),
        reference("karpenter.k8s.aws", "EC2NodeClass"),
    )
    pools = "".join(
        f"""
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec: {{template: {{spec: {{nodeClassRef: {ref}, requirements: []}}}}}}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {{name: {name}-a}}
spec: {{nodeClassRef: {ref}, requirements: []}}
"""
        for name, ref in (
            ("ours", ours),
            ("theirs", theirs),
            ("aks-kind-elsewhere", reference("example.com", "AKSNodeClass")),
        )
    )
    manifests = read(pools)
    assert manifests.problems == []
    left = manifests.leave_other_providers()
    assert [pool.name for pool in manifests.nodepools] == ["ours"]
    assert [claim.name for claim in manifests.nodeclaims] == ["ours-a"]
    assert left[0] == (
        "NodePool theirs: spec.template.spec.nodeClassRef is a karpenter.k8s.aws/EC2NodeClass, another provider's "
        "NodeClass; left to that provider"
    )
    assert [line.split(":")[0] for line in left] == [
        "NodePool theirs",
        "NodePool aks-kind-elsewhere",
        "NodeClaim theirs-a",
        "NodeClaim aks-kind-elsewhere-a",
    ]
