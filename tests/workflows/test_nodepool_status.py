"""NodePool status on the real control plane, as `kubectl get nodepools` shows it: the controller counts the
pool's nodes and reports whether the pool is valid and its NodeClass ready."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any, cast

from activities.azure.nodeclass_status import NodeClassStatusActivities
from activities.azure.provider import AzureCloudProvider
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


async def test_a_nodeclass_whose_subnet_is_unusable_makes_it_and_its_nodepool_not_ready(
    system: System, control_plane: ControlPlane
) -> None:
    system.start_controller()
    provider = cast(AzureCloudProvider, system.cloud)
    settings = provider.settings
    elsewhere = (
        f"/subscriptions/{settings.subscription_id}/resourceGroups/other-rg/providers/Microsoft.Network"
        "/virtualNetworks/other-vnet/subnets/nodes"
    )
    nodeclass = {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "broken"},
        "spec": {"vnetSubnetID": elsewhere},
    }
    pool = json.loads(json.dumps(INVALID_POOL))
    pool["metadata"]["name"] = "broken"
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "broken"
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = ["spot"]
    await system.kube.apply([nodeclass, pool])

    await NodeClassStatusActivities(system.kube, provider).reconcile(datetime.now(UTC))

    assert (await get(control_plane, "aksnodeclasses", "broken")).splitlines()[1].split()[1] == "False"

    async def pool_conditions() -> dict[str, dict[str, Any]] | None:
        raw = json.loads(await get(control_plane, "nodepool", "broken", "-o", "json"))
        found = {c["type"]: c for c in raw.get("status", {}).get("conditions", [])}
        ready = found.get("NodeClassReady", {})
        return found if ready.get("reason") == "UnhealthyDependents" else None

    conditions = await eventually(pool_conditions, timeout=30, what="NodeClassReady following the NodeClass")
    assert conditions["NodeClassReady"]["status"] == "False"
    assert conditions["NodeClassReady"]["message"] == "SubnetsReady=False"
    assert conditions["ValidationSucceeded"]["status"] == "True"
    assert (await get(control_plane, "nodepools", "broken")).splitlines()[1].split()[3] == "False"
