"""The repack under zonal topology spread: the packing program knows which zones each spread pod may go to and pins
each new node to a zone, so that the scheduling simulation accepts its proposal; the spread holds after the plan."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from benchmarks.disruption import apply_commands, node_pair, pod
from benchmarks.repack import POOL, build, catalog, plan_once
from core.disruption import Method
from core.disruption import repack as repack_module
from core.disruption.options import RepackOptions
from core.disruption.simulation import Outcome
from core.scheduling.removal import RemovalSimulation
from core.scheduling.topology import Topology

ZONE = "topology.kubernetes.io/zone"
SPREAD = {
    "maxSkew": 1,
    "topologyKey": ZONE,
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}


def _web(name: str, node: str, annotations: dict[str, str]) -> dict[str, Any]:
    document = pod(name, "web", node, POOL, 1800, 2048, annotations)
    document["spec"]["topologySpreadConstraints"] = [SPREAD]
    document["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    return document


def _cluster() -> list[Any]:
    """A Standard_F8s_v2 in eastus-3 holding two CPU-heavy pods and one of three `web` pods spread over the zones
    (maxSkew 1, DoNotSchedule); the other two run on nodes of eastus-1 and eastus-2 that nothing may disrupt,
    tainted for `web` alone, with room for another. Karpenter's methods find nothing. The cheapest home, to a
    program blind to zones, sends the web pod to that free room and the rest to one Standard_F4s_v2: the
    simulation refuses it (the web pod must stay in eastus-3). Zone-aware, it is a Standard_F4s_v2 and a
    Standard_F2s_v2, both in eastus-3."""
    types = catalog()
    documents: list[Any] = build(
        (("Standard_F8s_v2", "eastus-3", ((1500, 1536), (1800, 2048))),), types
    ).documents
    documents.append(_web("web-0", "node-0", {}))
    for index, zone in enumerate(("eastus-1", "eastus-2"), start=1):
        for document in node_pair(f"room-{index}", POOL, types["Standard_D8s_v5"], zone, "on-demand"):
            if document["kind"] == "Node":
                document["spec"]["taints"] = [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
            documents.append(document)
        documents.append(_web(f"web-{index}", f"room-{index}", {"karpenter.sh/do-not-disrupt": "true"}))
    return documents


def _web_zones(documents: list[Any]) -> Counter[str]:
    zones = {d["metadata"]["name"]: d["metadata"]["labels"][ZONE] for d in documents if d["kind"] == "Node"}
    return Counter(
        zones[d["spec"]["nodeName"]]
        for d in documents
        if d["kind"] == "Pod" and d["metadata"]["labels"].get("app") == "web"
    )


def test_a_zone_blind_program_is_refused_where_the_zone_aware_one_finds_a_cheaper_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    documents = _cluster()
    assert plan_once(documents, RepackOptions(enabled=False)).commands == ()

    # As the program was before it knew zones: no zones per pod, no limit per spread group, and a refusal only
    # drops the set of candidates.
    refusals: list[str] = []
    describe = Outcome.describe_problems

    def recorded(outcome: Outcome) -> str:
        refusals.append(describe(outcome))
        return refusals[-1]

    with monkeypatch.context() as patched:
        patched.setattr(RemovalSimulation, "_spread_zones", lambda self, pod, node: None)
        patched.setattr(Topology, "owned", lambda self, pod, term: None)
        patched.setattr(
            repack_module._Window,
            "refusals",
            lambda self, directions, outcome: np.zeros(self.problem.admits.shape, dtype=np.bool_),
        )
        patched.setattr(Outcome, "describe_problems", recorded)
        assert plan_once(documents, RepackOptions()).commands == ()
    assert refusals
    assert all("topology spread" in refusal and ZONE in refusal for refusal in refusals)

    plan = plan_once(documents, RepackOptions())
    (command,) = plan.commands
    assert command.method is Method.REPACK
    assert [c.node for c in command.candidates] == ["node-0"]
    assert sorted((r.instance_type or "", r.zone) for r in command.replacements) == [
        ("Standard_F2s_v2", "eastus-3"),
        ("Standard_F4s_v2", "eastus-3"),
    ]
    assert command.savings_micros > 0
    assert plan.cost is not None and plan.cost.after_micros < plan.cost.now_micros

    # Carried out, the spread holds (one web pod per zone), and a plan on the result finds nothing more to do.
    after = apply_commands(documents, plan, 0, catalog(), {POOL.name: POOL})
    assert _web_zones(after) == Counter({"eastus-1": 1, "eastus-2": 1, "eastus-3": 1})
    assert plan_once(after, RepackOptions()).commands == ()


def test_new_nodes_are_pinned_to_the_zone_the_program_chose() -> None:
    """The verified NodeClaims carry the zone the program gave their slot, so that a spread pod lands where the
    program counted it."""
    plan = plan_once(_cluster(), RepackOptions())
    (command,) = plan.commands
    web = next(move for move in command.pods_moved if move.pod == "default/web-0")
    replacement = next(r for r in command.replacements if r.name == web.destination)
    assert replacement.zone == "eastus-3"
