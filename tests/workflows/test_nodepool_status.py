"""NodePool status on the real control plane, as `kubectl get nodepools` shows it: the controller counts the
pool's nodes and reports whether the pool is valid and its NodeClass ready."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.workflows.conftest import System, deployment, eventually
from workers.controlplane.run import ControlPlane

INVALID_POOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "invalid"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                # The API server takes it (no CEL rule knows the capacity types); Karpenter's validation does not.
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved-ish"]}
                ],
            }
        }
    },
}


async def get(control_plane: ControlPlane, *args: str) -> str:
    done = await asyncio.to_thread(control_plane.kubectl, "get", *args)
    return done.stdout


async def test_kubectl_get_nodepools_shows_the_nodes_and_readiness_the_controller_writes(
    system: System, control_plane: ControlPlane
) -> None:
    system.start_controller()
    await system.apply_examples()
    await system.kube.apply([INVALID_POOL])
    await system.kube.apply([deployment("web", 1)])
    await eventually(lambda: system.running("web", 1), timeout=60, what="web running")

    async def default_row() -> list[str] | None:
        lines = (await get(control_plane, "nodepools", "default")).splitlines()
        row = lines[1].split()
        return row if row[2:4] == ["1", "True"] else None

    header = (await get(control_plane, "nodepools", "default")).splitlines()[0].split()
    assert header == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    row = await eventually(default_row, timeout=30, what="NODES 1 and READY True")
    assert row[:2] == ["default", "default"]
    pool: dict[str, Any] = json.loads(await get(control_plane, "nodepool", "default", "-o", "json"))
    [claim] = await system.nodeclaims()
    assert pool["status"]["resources"]["nodes"] == "1"
    assert pool["status"]["resources"]["cpu"] == claim.status.capacity["cpu"]

    async def invalid_conditions() -> dict[str, dict[str, Any]] | None:
        raw = json.loads(await get(control_plane, "nodepool", "invalid", "-o", "json"))
        found = {c["type"]: c for c in raw.get("status", {}).get("conditions", [])}
        return found if "ValidationSucceeded" in found else None

    conditions = await eventually(invalid_conditions, timeout=30, what="the invalid pool's conditions")
    validation = conditions["ValidationSucceeded"]
    assert (validation["status"], validation["reason"]) == ("False", "NodePoolValidationFailed")
    assert "spec.template.spec.requirements[0].values" in validation["message"]
    assert "reserved-ish" in validation["message"]
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "UnhealthyDependents")
    assert (await get(control_plane, "nodepools", "invalid")).splitlines()[1].split()[2:4] == ["0", "False"]
