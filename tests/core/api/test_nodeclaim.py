from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from core.api.meta import InvalidObjectError
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.api.nodepool import ConditionStatus
from core.scheduling.requirements import Requirement, Requirements

LAUNCHED_NODECLAIM = """
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  labels:
    karpenter.sh/nodepool: default
    karpenter.azure.com/aksnodeclass: default
    node.kubernetes.io/instance-type: Standard_D4s_v5
    karpenter.sh/capacity-type: spot
  annotations:
    karpenter.sh/nodepool-hash: "6821555240594823858"
    karpenter.sh/nodepool-hash-version: v3
  finalizers: [karpenter.sh/termination]
spec:
  nodeClassRef:
    group: karpenter.azure.com
    kind: AKSNodeClass
    name: default
  expireAfter: 720h
  terminationGracePeriod: 1h
  requirements:
    - key: karpenter.sh/nodepool
      operator: In
      values: [default]
    - key: node.kubernetes.io/instance-type
      operator: In
      values: [Standard_D4s_v5, Standard_D8s_v5]
    - key: karpenter.sh/capacity-type
      operator: In
      values: [spot]
    - key: karpenter.azure.com/sku-family
      operator: Exists
      values: []
      minValues: 2
  resources:
    requests:
      cpu: 2150m
      memory: 4Gi
      pods: "12"
  taints:
    - key: dedicated
      value: batch
      effect: NoSchedule
  startupTaints:
    - key: node.cilium.io/agent-not-ready
      value: "true"
      effect: NoExecute
status:
  nodeName: aks-default-x7k2p
  providerID: azure:///subscriptions/sub/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/aks-default-x7k2p
  imageID: /CommunityGalleries/AKSUbuntu-38d80f77/images/2204gen2containerd/versions/2024.10.01
  capacity:
    cpu: "4"
    memory: 16Gi
    pods: "110"
  allocatable:
    cpu: 3860m
    memory: 12Gi
    pods: "110"
  lastPodEventTime: "2024-10-07T10:15:00Z"
  conditions:
    - type: Launched
      status: "True"
      reason: Launched
      message: ""
      lastTransitionTime: "2024-10-07T10:00:00Z"
      observedGeneration: 1
    - type: Registered
      status: "True"
      reason: Registered
      message: ""
      lastTransitionTime: "2024-10-07T10:01:00Z"
      observedGeneration: 1
    - type: Initialized
      status: Unknown
      reason: StartupTaintsExist
      message: StartupTaint "node.cilium.io/agent-not-ready=true:NoExecute" still exists
      lastTransitionTime: "2024-10-07T10:01:00Z"
      observedGeneration: 1
"""


def manifest(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "claim"},
        "spec": base | spec,
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObjectError) as caught:
        NodeClaim.parse(raw)
    return str(caught.value).splitlines()


def test_a_launched_nodeclaim_round_trips() -> None:
    raw = yaml.safe_load(LAUNCHED_NODECLAIM)

    claim = NodeClaim.parse(raw)
    dumped = claim.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert dumped["spec"] == raw["spec"]
    assert dumped["status"] == raw["status"]
    assert NodeClaim.parse(dumped) == claim


def test_a_launched_nodeclaim_reads_as_its_fields() -> None:
    claim = NodeClaim.parse(yaml.safe_load(LAUNCHED_NODECLAIM))

    assert claim.name == "default-x7k2p"
    assert claim.nodepool_name == "default"
    assert claim.labels["node.kubernetes.io/instance-type"] == "Standard_D4s_v5"
    assert claim.node_name == "aks-default-x7k2p"
    assert claim.provider_id is not None and claim.provider_id.endswith("/virtualMachines/aks-default-x7k2p")
    assert claim.status.image_id is not None and claim.status.image_id.endswith("/versions/2024.10.01")
    assert claim.node_class_ref.kind == "AKSNodeClass"
    assert claim.requests == {"cpu": 2150, "memory": 4 * 2**30, "pods": 12}
    assert claim.capacity == {"cpu": 4000, "memory": 16 * 2**30, "pods": 110}
    assert claim.allocatable == {"cpu": 3860, "memory": 12 * 2**30, "pods": 110}
    assert [(taint.key, taint.value) for taint in claim.taints] == [("dedicated", "batch")]
    assert [taint.key for taint in claim.startup_taints] == ["node.cilium.io/agent-not-ready"]
    assert claim.spec.expire_after_duration == timedelta(hours=720)
    assert claim.spec.termination_grace_period_duration == timedelta(hours=1)
    assert claim.status.last_pod_event_time == datetime(2024, 10, 7, 10, 15, tzinfo=UTC)


def test_conditions_are_found_by_type() -> None:
    claim = NodeClaim.parse(yaml.safe_load(LAUNCHED_NODECLAIM))
    initialized = claim.status.condition(NodeClaimConditionType.INITIALIZED)

    assert claim.is_true(NodeClaimConditionType.LAUNCHED)
    assert claim.is_true(NodeClaimConditionType.REGISTERED)
    assert not claim.is_true(NodeClaimConditionType.INITIALIZED)
    assert not claim.is_true(NodeClaimConditionType.DRIFTED)
    assert initialized is not None
    assert initialized.status is ConditionStatus.UNKNOWN
    assert initialized.reason == "StartupTaintsExist"
    assert claim.status.condition(NodeClaimConditionType.DRIFTED) is None


def test_condition_types_are_karpenters() -> None:
    assert [str(condition) for condition in NodeClaimConditionType] == [
        "Launched",
        "Registered",
        "Initialized",
        "Ready",
        "Consolidatable",
        "Drifted",
        "DisruptionReason",
        "Drained",
        "VolumesDetached",
        "InstanceTerminating",
        "ConsistentStateFound",
    ]


def test_requirements_read_as_the_scheduler_reads_them() -> None:
    claim = NodeClaim.parse(yaml.safe_load(LAUNCHED_NODECLAIM))

    assert claim.requirements() == Requirements(
        [
            Requirement.new("karpenter.sh/nodepool", "In", ["default"]),
            Requirement.new("node.kubernetes.io/instance-type", "In", ["Standard_D4s_v5", "Standard_D8s_v5"]),
            Requirement.new("karpenter.sh/capacity-type", "In", ["spot"]),
            Requirement.new("karpenter.azure.com/sku-family", "Exists", min_values=2),
        ]
    )


def test_a_fresh_nodeclaim_has_defaults_and_an_empty_status() -> None:
    claim = NodeClaim.parse(manifest())

    assert claim.spec.expire_after == "720h"
    assert claim.spec.termination_grace_period is None
    assert claim.requests == {}
    assert claim.capacity == {}
    assert claim.provider_id is None
    assert claim.node_name is None
    assert claim.nodepool_name is None
    assert claim.status.conditions == []


def test_nodeclaims_may_pin_the_nodepool_but_not_restricted_keys() -> None:
    nodepool = {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}

    assert NodeClaim.parse(manifest(requirements=[nodepool]))
    assert problems(manifest(requirements=[nodepool, hostname])) == [
        'NodeClaim claim: spec.requirements[1].key: label "kubernetes.io/hostname" is restricted'
    ]


def test_requirement_rules_are_those_of_nodepools() -> None:
    too_few = {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"], "minValues": 2}

    assert problems(manifest(requirements=[too_few], expireAfter="1w")) == [
        "NodeClaim claim: spec.requirements[0].minValues (2) exceeds the number of values (1)",
        'NodeClaim claim: spec.expireAfter: "1w" is not a duration such as "720h" or "1h30m", nor "Never"',
    ]


def test_duplicate_taints_are_rejected() -> None:
    taint = {"key": "dedicated", "effect": "NoSchedule"}

    assert problems(manifest(taints=[taint], startupTaints=[taint])) == [
        "NodeClaim claim: spec.startupTaints[0]: duplicate taint dedicated:NoSchedule across taints and startupTaints"
    ]


def test_resource_requests_are_quantities() -> None:
    assert problems(manifest(resources={"requests": {"cpu": "2 cores"}})) == [
        "NodeClaim claim: spec.resources.requests.cpu: quantity '2 cores' does not match the Kubernetes quantity "
        "format"
    ]


def test_unknown_status_fields_are_rejected() -> None:
    raw = manifest()
    raw["status"] = {"phase": "Running"}

    assert problems(raw) == ["NodeClaim claim: status.phase: Extra inputs are not permitted"]


def test_condition_status_is_true_false_or_unknown() -> None:
    raw = manifest()
    raw["status"] = {"conditions": [{"type": "Launched", "status": "Yes"}]}

    assert problems(raw) == [
        "NodeClaim claim: status.conditions[0].status: Input should be 'True', 'False' or 'Unknown'"
    ]
