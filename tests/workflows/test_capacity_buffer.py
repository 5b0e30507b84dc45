"""CapacityBuffers end to end, on the real control plane, the emulated Azure and the dev server: the controller
resolves a buffer and wakes the provisioner, the plan keeps room for its virtual pods, a real Deployment scaled
up takes that room at once (its pods run on the buffer's nodes, no NodeClaim launched for them), and the buffer
is then provisioned again."""

from __future__ import annotations

from typing import Any

from core.api.capacitybuffer import CapacityBuffer
from core.api.nodeclaim import NodeClaim
from core.scheduling.nominations import NOMINATED_PODS_ANNOTATION
from tests.workflows.conftest import System, deployment, eventually, pinned

CHUNKS = 2


def capacity_buffer(name: str, scalable: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": scalable},
            "replicas": replicas,
        },
    }


async def buffer(system: System, name: str) -> CapacityBuffer | None:
    raw = await system.kube.get_object("CapacityBuffer", name, "default")
    return None if raw is None else CapacityBuffer.parse(raw)


def condition(found: CapacityBuffer | None, kind: str) -> tuple[str, str] | None:
    entry = found.status.condition(kind) if found else None
    return None if entry is None else (entry.status.value, entry.reason)


async def registered(system: System, count: int) -> list[NodeClaim] | None:
    claims = await system.nodeclaims()
    nodes = [claim.status.node_name for claim in claims if claim.status.node_name]
    ready = [node for node in nodes if await system.node(node) is not None]
    return claims if len(claims) == count and len(ready) == count else None


async def test_a_buffer_keeps_room_a_scaled_deployment_takes_then_is_provisioned_again(
    system: System,
) -> None:
    system.start_controller(capacity_buffers=True)
    await system.apply_examples()
    # One 1-CPU chunk per Standard_D2s_v5 (2 vCPUs, less the examples' DaemonSet and reserved resources).
    await system.kube.apply(
        [deployment("web", 0, cpu="1", node_selector=pinned()), capacity_buffer("web-buffer", "web", CHUNKS)]
    )

    # The controller resolves the buffer and the provisioner keeps room for its chunks: one node each.
    first = await eventually(lambda: registered(system, CHUNKS), timeout=30, what="the buffer's nodes")
    resolved = await buffer(system, "web-buffer")
    assert resolved is not None and resolved.status.replicas == CHUNKS
    assert condition(resolved, "ReadyForProvisioning") == ("True", "Resolved")
    for claim in first:  # made for virtual pods, which are never nominated
        assert claim.metadata.annotations.get(NOMINATED_PODS_ANNOTATION, "") == ""

    async def fits() -> bool | None:
        found = condition(await buffer(system, "web-buffer"), "Provisioning")
        return True if found == ("True", "FitsExistingCapacity") else None

    await eventually(fits, timeout=15, what="Provisioning=True FitsExistingCapacity")

    # A real scale-up takes the buffer's room: its pods run on the buffer's nodes without a NodeClaim for them.
    await system.kube.scale("Deployment", "default", "web", CHUNKS)
    running = await eventually(lambda: system.running("web", CHUNKS), timeout=20, what="web running")
    buffer_nodes = {claim.status.node_name for claim in first}
    assert {pod.spec.node_name for pod in running} == buffer_nodes
    web_pods = {f"default/{pod.metadata.name}" for pod in running}

    # The next plan finds no room left for the chunks, and provisions the buffer again.
    second = await eventually(lambda: registered(system, 2 * CHUNKS), timeout=30, what="the buffer again")
    new = [claim for claim in second if claim.name not in {c.name for c in first}]
    assert len(new) == CHUNKS
    for claim in new:
        nominated = set(claim.metadata.annotations.get(NOMINATED_PODS_ANNOTATION, "").split(",")) - {""}
        assert not nominated & web_pods, "the web pods never needed a new NodeClaim"
    await eventually(fits, timeout=15, what="the buffer fits existing capacity again")
