"""CapacityBuffers against the Kubernetes API: the buffer controller's reconcile and the provisioner's status.

`reconcile_buffer` is Karpenter's `capacitybuffer` controller for one buffer: it reads the PodTemplate or
workload the buffer names, resolves it (`core.capacity_buffer`), and writes `status.podTemplateRef`, `replicas`,
`podTemplateGeneration`, `provisioningStrategy` and the `ReadyForProvisioning` condition when they change. A
buffer that does not resolve gets a Warning event naming the field at fault. `write_provisioning_conditions` is
the provisioner's part: after a plan, the `Provisioning` condition from where each buffer's virtual pods went.
Writes carry the resourceVersion read as precondition; one that loses a race is left to the next reconcile or
plan, and a failure is logged: a buffer never holds up provisioning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from activities.kube import kube_event
from core.api.capacitybuffer import KIND, CapacityBuffer
from core.api.kube import Deployment, PodTemplate, ReplicaSet, StatefulSet, Workload
from core.api.manifests import without_nulls
from core.capacity_buffer import (
    PROVISIONING,
    BufferPods,
    Resolution,
    Targets,
    placements,
    provisioning_condition,
    resolve,
    resolved_status,
    set_condition,
    status_changed,
    target_of,
)
from core.cluster import ClusterAPI
from core.errors import CloudError
from core.scheduling.results import SchedulingResults

logger = logging.getLogger("nodewright.capacitybuffer")

_WORKLOADS: dict[str, type[Workload]] = {
    "Deployment": Deployment,
    "StatefulSet": StatefulSet,
    "ReplicaSet": ReplicaSet,
}


async def read_targets(cluster: ClusterAPI, buffer: CapacityBuffer) -> Targets:
    """The object the buffer names, if it exists, as `Targets`."""
    target = target_of(buffer)
    if target is None:
        return Targets({}, {})
    kind, namespace, name = target
    raw = await cluster.get_object(kind, name, namespace)
    if raw is None:
        return Targets({}, {})
    document: dict[str, Any] = without_nulls(raw)
    if kind == "PodTemplate":
        return Targets.of([PodTemplate.model_validate(document)], [])
    return Targets.of([], [(kind, _WORKLOADS[kind].model_validate(document))])


async def reconcile_buffer(cluster: ClusterAPI, buffer: CapacityBuffer, now: datetime) -> Resolution:
    """Resolve the buffer and write its status if that changes it; a buffer that does not resolve gets a
    Warning event (reason: the condition's) naming the field."""
    resolution = resolve(buffer, await read_targets(cluster, buffer))
    status = resolved_status(buffer, resolution, now)
    if not status_changed(buffer, status):
        return resolution
    try:
        await cluster.patch_status(
            KIND, buffer.name, status, buffer.metadata.resource_version or "", namespace=buffer.namespace
        )
    except CloudError as error:
        logger.warning("could not write the status of CapacityBuffer %s: %s", buffer.key, error)
    if not resolution.ready:
        message = f"{resolution.field}: {resolution.message}"
        logger.warning("CapacityBuffer %s is not ready for provisioning: %s", buffer.key, message)
        await cluster.record_event(
            kube_event(
                KIND,
                buffer.name,
                resolution.reason,
                message,
                buffer.namespace,
                warning=True,
                uid=buffer.metadata.uid,
            )
        )
    return resolution


async def write_provisioning_conditions(
    cluster: ClusterAPI, entries: Sequence[BufferPods], results: SchedulingResults, now: datetime
) -> int:
    """Write each buffer's Provisioning condition from where its virtual pods went; how many were written."""
    placed = placements(
        entries,
        existing=[placement.pods for placement in results.existing],
        new=[claim.pods for claim in results.nodeclaims],
        failed=[entry.pod for entry in results.unschedulable],
    )
    written = 0
    for entry in entries:
        buffer = entry.buffer
        condition = provisioning_condition(entry, placed.get(buffer.key))
        current = buffer.status.condition(PROVISIONING)
        if condition is None or not buffer.metadata.resource_version:
            continue
        ready, reason, message = condition
        if (
            current is not None
            and (current.status.value == "True") == ready
            and (current.reason, current.message) == (reason, message)
        ):
            continue
        conditions = set_condition(
            buffer.status.conditions, PROVISIONING, ready, reason, message, buffer.metadata.generation, now
        )
        try:
            if await cluster.patch_status(
                KIND,
                buffer.name,
                {"conditions": conditions},
                buffer.metadata.resource_version,
                namespace=buffer.namespace,
            ):
                written += 1
        except CloudError as error:
            logger.warning(
                "could not write the Provisioning condition of CapacityBuffer %s: %s", buffer.key, error
            )
    return written
