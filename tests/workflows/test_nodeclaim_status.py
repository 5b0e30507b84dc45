"""A NodeClaim's status as Karpenter writes it, on the real control plane: the lifecycle's conditions (Ready
computed from Launched, Registered and Initialized), termination's Drained, VolumesDetached (waiting for the
node's VolumeAttachments) and InstanceTerminating, and the termination-timestamp annotation."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from core import labels
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import ConditionStatus
from core.messages import Phase
from tests.cluster import events
from tests.workflows.conftest import System, condition, deployment, eventually

LIFECYCLE = ("Launched", "Registered", "Initialized", "Ready")


async def serving(system: System, app: str, **nodepool_template_spec: object) -> tuple[str, str]:
    """One pod of `app` running on a node our lifecycle launched: the node and its NodeClaim."""
    await system.apply_examples(**nodepool_template_spec)
    await system.kube.apply([deployment(app, 1)])
    system.start_controller()
    [pod] = await eventually(lambda: system.running(app, 1), timeout=15, what=f"{app} running")
    node = pod.spec.node_name or ""
    return node, await system.claim_of(node)


def attachment(node: str, volume: str) -> dict[str, Any]:
    name = f"csi-{uuid.uuid4().hex}"
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {
            "attacher": "disk.csi.azure.com",
            "nodeName": node,
            "source": {"persistentVolumeName": volume},
        },
    }


@contextlib.asynccontextmanager
async def cleaned_up(system: System, *objects: dict[str, Any]) -> AsyncIterator[None]:
    """Objects the cluster reset leaves alone, deleted when the test ends."""
    try:
        yield
    finally:
        for manifest in objects:
            namespace = manifest["metadata"].get("namespace")
            with contextlib.suppress(Exception):
                await system.kube.delete_object(manifest["kind"], manifest["metadata"]["name"], namespace)


async def waiting_for_volumes(system: System, claim: str) -> NodeClaim | None:
    found = await system.nodeclaim(claim)
    volumes = condition(found, "VolumesDetached") if found is not None else None
    return found if volumes == ("Unknown", "AwaitingVolumeDetachment") else None


async def test_a_running_nodeclaim_carries_karpenters_lifecycle_conditions(system: System) -> None:
    node, name = await serving(system, "web")

    async def ready() -> NodeClaim | None:
        # The pod may run before the lifecycle has seen its Node initialized (as in Karpenter): wait for Ready.
        found = await system.nodeclaim(name)
        return found if found is not None and condition(found, "Ready") == ("True", "Ready") else None

    claim = await eventually(ready, timeout=15, what=f"{name} Ready")
    conditions = {c.type: c for c in claim.status.conditions}
    for kind in LIFECYCLE:
        found = conditions[kind]
        assert (found.status, found.reason, found.message) == (ConditionStatus.TRUE, kind, ""), found
        assert (
            found.last_transition_time is not None and found.observed_generation == claim.metadata.generation
        )
    assert claim.status.conditions[-1].type == "Ready"
    assert claim.status.node_name == node
    # Before it was Ready, Ready said which dependents it waited for, as Karpenter's root condition does.
    earlier = [
        NodeClaim.parse(event.object).status.condition("Ready")
        for event in system.events
        if event.kind == "NodeClaim" and event.name == name and event.object.get("status")
    ]
    waiting = [c for c in earlier if c is not None and c.status is ConditionStatus.UNKNOWN]
    assert waiting and waiting[0].reason == "ReconcilingDependents"
    assert "Registered=Unknown" in waiting[0].message and "Initialized=Unknown" in waiting[0].message


async def test_termination_waits_for_the_nodes_volume_attachments(system: System) -> None:
    node, claim = await serving(system, "web")
    blocking = attachment(node, f"pv-{claim}")
    # A pod that stays on the node (it tolerates the disrupted taint): its volume's attachment does not block.
    staying_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"keep-{claim}", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": f"pv-keep-{claim}",
            "storageClassName": "",
        },
    }
    staying_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"keeper-{claim}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "mcr.microsoft.com/oss/kubernetes/pause:3.6"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"keep-{claim}"}}],
        },
    }
    kept = attachment(node, f"pv-keep-{claim}")
    async with cleaned_up(system, blocking, kept, staying_claim):
        await system.kube.apply([staying_claim, staying_pod, blocking, kept])
        lifecycle = await system.nodeclaim_workflow(claim)

        await system.kube.delete_nodeclaim(claim)

        waiting = await eventually(
            lambda: waiting_for_volumes(system, claim), timeout=30, what="VolumesDetached=Unknown"
        )
        assert condition(waiting, "Drained") == ("True", "Drained")
        assert claim in await system.instance_names()  # the instance waits for the volume
        [event] = await eventually(
            lambda: events(system.kube, "AwaitingVolumeDetachment", {node}), what="the event"
        )
        assert (
            event["note"] == f"Awaiting deletion of bound volumeattachments ({blocking['metadata']['name']})"
        )

        await system.kube.delete_object("VolumeAttachment", blocking["metadata"]["name"])

        assert await eventually(
            lambda: system.gone(claim, node), timeout=30, what="node, instance, claim gone"
        )
        assert (await asyncio.wait_for(lifecycle.result(), 10)).phase is Phase.TERMINATED
    final = system.deleted_claim(claim)
    assert final is not None
    for kind, reason in (("Drained", "Drained"), ("VolumesDetached", "VolumesDetached")):
        assert condition(final, kind) == ("True", reason)
    assert condition(final, "InstanceTerminating") == ("True", "InstanceTerminating")
    # Deletion bumped the generation; the lifecycle's conditions are taken along, so Ready stays True.
    assert condition(final, "Ready") == ("True", "Ready")
    assert {c.observed_generation for c in final.status.conditions} == {final.metadata.generation}
    terminating = final.status.condition("InstanceTerminating")
    detached = final.status.condition("VolumesDetached")
    assert terminating is not None and detached is not None
    assert terminating.last_transition_time and detached.last_transition_time
    assert detached.last_transition_time <= terminating.last_transition_time


async def test_termination_grace_period_is_annotated_and_ends_the_wait_for_volumes(system: System) -> None:
    node, claim = await serving(system, "web", terminationGracePeriod="4s")
    stuck = attachment(node, f"pv-{claim}")
    async with cleaned_up(system, stuck):
        await system.kube.apply([stuck])
        lifecycle = await system.nodeclaim_workflow(claim)

        await system.kube.delete_nodeclaim(claim)

        assert await eventually(
            lambda: system.gone(claim, node), timeout=40, what="node, instance, claim gone"
        )
        assert (await asyncio.wait_for(lifecycle.result(), 10)).phase is Phase.TERMINATED
    final = system.deleted_claim(claim)
    assert final is not None and final.metadata.deletion_timestamp is not None
    assert final.spec.termination_grace_period == "4s"
    deadline = final.metadata.deletion_timestamp + timedelta(seconds=4)
    assert final.metadata.annotations[labels.TERMINATION_TIMESTAMP] == deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    detached = final.status.condition("VolumesDetached")
    assert detached is not None
    assert (detached.status, detached.reason, detached.message) == (
        ConditionStatus.FALSE,
        "TerminationGracePeriodElapsed",
        "TerminationGracePeriodElapsed",
    )
    [event] = await events(system.kube, "TerminationGracePeriodExpiring", {claim})
    assert (
        event["type"] == "Warning"
        and event["note"] == f"All pods will be deleted by {deadline:%Y-%m-%dT%H:%M:%SZ}"
    )
