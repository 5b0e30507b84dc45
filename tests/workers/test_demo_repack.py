"""The demo's repack step (`workers.demo.repack`) rests on a layout: its two nodes with their pods as the step lays
them out, in its NodePool once it allows the wider families. Planned as the step's dry run plans it, Karpenter's
methods find nothing, and the repack retires the Standard_F8s_v2 onto an F4s_v2, an F2s_v2 and the D8s_v5's room,
with the bound beside the plan and the lines `explain` shows."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from activities.disruption import pass_record
from benchmarks.disruption import NOW, Pool, node_pair
from benchmarks.repack import provider
from core import labels
from core.api.manifests import parse_manifests
from core.disruption import DisruptionOptions, DisruptionPlan, Method, plan_disruption
from core.disruption.options import RepackOptions
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import load_shipped_catalog
from workers.demo.repack import GROUPS, POOL, WIDER, deployment, pool_manifest
from workers.demo.walkthrough import EXAMPLES
from workers.explain import Pass, disruption_spans


def _documents() -> list[Any]:
    """The examples' AKSNodeClass and DaemonSet, the step's NodePool as it is planned, and each node with the pods
    its Deployments ran there."""
    examples = [
        document
        for path in (EXAMPLES / "nodepool.yaml", EXAMPLES / "daemonset.yaml")
        for document in yaml.safe_load_all(path.read_text())
        if document and document["kind"] in ("AKSNodeClass", "DaemonSet")
    ]
    types = {it.name: it for it in azure_instance_types(load_shipped_catalog("eastus"))}
    pool = Pool(POOL, "amd64", (), ("on-demand",), 1.0, "100%")
    documents: list[Any] = [*examples, yaml.safe_load(pool_manifest(WIDER))]
    for group, (instance_type, pods) in enumerate(GROUPS):
        node = f"node-{group}"
        documents.extend(node_pair(node, pool, types[instance_type], "eastus-1", "on-demand"))
        for cpu, memory, replicas in pods:
            template = yaml.safe_load(deployment(f"repack-{group}-{cpu}m-{memory}mi", cpu, memory, replicas))
            app = template["metadata"]["name"]
            for replica in range(replicas):
                owner = {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": app,
                    "uid": app,
                    "controller": True,
                }
                documents.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": f"{app}-{replica}",
                            "namespace": "default",
                            "labels": template["spec"]["template"]["metadata"]["labels"],
                            "ownerReferences": [owner],
                        },
                        "spec": {**template["spec"]["template"]["spec"], "nodeName": node},
                        "status": {"phase": "Running"},
                    }
                )
    return documents


@functools.cache
def _plan(repack: RepackOptions | None) -> DisruptionPlan:
    options = DisruptionOptions(nodepools=frozenset({POOL}), repack=repack)
    return plan_disruption(parse_manifests(_documents(), "demo"), provider(), options, NOW)


def test_karpenters_methods_leave_the_step_s_nodes_and_the_repack_splits_one_onto_two_smaller_nodes() -> None:
    """What the step's dry run prints and then carries out: one of the two nodes retires, two smaller nodes and
    the other node's room take its pods, for at least the $0.084/h of retiring the F8s_v2 (in this model, without
    the live cluster's placement, retiring the D8s_v5 saves $0.096/h, and the solver takes that)."""
    assert _plan(None).commands == ()
    plan = _plan(RepackOptions())
    (command,) = plan.commands
    assert command.method is Method.REPACK
    (retired,) = command.candidates
    assert retired.instance_type in {instance_type for instance_type, _ in GROUPS}
    assert len(command.replacements) == 2
    assert all(r.labels.get(labels.NODEPOOL) == POOL for r in command.replacements)
    stays = next(f"node-{g}" for g in range(len(GROUPS)) if f"node-{g}" != retired.node)
    assert {move.destination for move in command.pods_moved} == {
        stays,
        *(r.name for r in command.replacements),
    }
    assert command.savings_micros >= 84_000
    assert command.repacked is not None
    assert len(command.repacked.launched) == 2
    assert command.repacked.receiving == (
        f"{stays}: {sum(m.destination == stays for m in command.pods_moved)} pods",
    )
    assert plan.cost is not None
    assert plan.cost.bound_micros <= plan.cost.after_micros == plan.cost.now_micros - command.savings_micros


def test_explain_says_where_the_retired_node_s_pods_went_and_why_the_new_set_is_cheaper() -> None:
    """The lines the step prints from `nodewright explain nodeclaim` for the retired node, from the pass the
    disruption workflow records."""
    plan = _plan(RepackOptions())
    (command,) = plan.commands
    (retired,) = command.candidates
    record = pass_record(plan, NOW)
    [span] = disruption_spans(
        [Pass(workflow_id="disruption/c", record=record)], retired.node, retired.nodeclaim
    )
    assert (span.outcome, span.method) == ("chosen", "repack")
    assert command.repacked is not None
    assert span.repack[0] == f"why cheaper: {command.repacked.message}"
    assert [line for line in span.repack if line.startswith("launches ")] == [
        f"launches {line}" for line in command.repacked.launched
    ]
    moves = [line for line in span.repack if line.startswith("pod ")]
    assert len(moves) == retired.pods == len(command.pods_moved)
    assert all(f": {retired.node} -> " in line for line in moves)
