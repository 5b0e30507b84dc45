"""What the benchmark's own watch of the API server sees happen, and when: pods pending and Running, NodeClaims
created, launched and initialized, Nodes, evictions; and the latencies drawn from it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from activities.kubeclient.cluster import KubernetesCluster
from benchmarks.workload import APP
from core.cluster import EventType as WatchEventType


@dataclass
class Observed:
    """When this process saw each thing happen (time.time()), through its watch of the API server."""

    pod_pending: dict[str, float] = field(default_factory=dict)
    pod_running: dict[str, float] = field(default_factory=dict)
    claim_created: dict[str, float] = field(default_factory=dict)
    claim_launched: dict[str, float] = field(default_factory=dict)
    claim_initialized: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, float] = field(default_factory=dict)
    pods_deleted: set[str] = field(default_factory=set)
    pods_disrupted: dict[str, str] = field(default_factory=dict)
    """Pods marked DisruptionTarget, with its reason (DeletionByTaintManager, ...)."""
    claims_deleted: set[str] = field(default_factory=set)
    node_taints: dict[str, set[str]] = field(default_factory=dict)
    """The nodes each NoExecute taint key was seen on."""
    noexecute_now: dict[str, list[str]] = field(default_factory=dict)
    """The NoExecute taint keys each node has now."""
    evictions: list[dict[str, Any]] = field(default_factory=list)
    """Bench pods marked DisruptionTarget: the node they were on and its NoExecute taints at that moment."""
    noexecute_cleared: dict[str, float] = field(default_factory=dict)
    """When each node was last seen losing its NoExecute taints."""

    @property
    def running(self) -> int:
        """Pods Running now (evicted ones no longer count)."""
        return len(self.pod_running.keys() - self.pods_deleted)

    def reached(self) -> dict[str, int]:
        """How far a run got, as its figures name it."""
        return {
            "pods_pending": len(self.pod_pending),
            "pods_running": self.running,
            "nodeclaims_created": len(self.claim_created),
            "nodeclaims_launched": len(self.claim_launched),
            "nodes": len(self.nodes),
            "nodeclaims_initialized": len(self.claim_initialized),
        }


def condition(manifest: dict[str, Any], condition: str) -> dict[str, Any]:
    conditions = manifest.get("status", {}).get("conditions") or []
    return next((item for item in conditions if item.get("type") == condition), {})


async def observe(kube: KubernetesCluster, since: int, seen: Observed) -> None:
    # Raw manifests, not models: only the fields timed here are read.
    async for event in kube.watch(since):
        now = time.time()
        manifest = event.object
        if event.kind == "Pod":
            if not str(event.name).startswith(f"{APP}-"):
                continue  # the DaemonSet's pods
            key = f"{event.namespace or 'default'}/{event.name}"
            if event.type is WatchEventType.DELETED:
                seen.pods_deleted.add(key)
                continue
            disrupted = condition(manifest, "DisruptionTarget")
            if disrupted.get("status") == "True" and key not in seen.pods_disrupted:
                node = str((manifest.get("spec") or {}).get("nodeName") or "")
                cleared = seen.noexecute_cleared.get(node)
                seen.pods_disrupted[key] = str(disrupted.get("reason"))
                seen.evictions.append(
                    {
                        "pod": key,
                        "reason": str(disrupted.get("reason")),
                        "node": node,
                        "node's NoExecute taints": seen.noexecute_now.get(node, []),
                        "s after the node appeared": since(seen.nodes.get(node, now), now),
                        "s after its NoExecute taints went": since(cleared, now) if cleared else None,
                    }
                )
            scheduled = condition(manifest, "PodScheduled")
            if key not in seen.pod_pending and scheduled.get("reason") == "Unschedulable":
                seen.pod_pending[key] = now
            if key not in seen.pod_running and manifest.get("status", {}).get("phase") == "Running":
                seen.pod_running[key] = now
        elif event.kind == "NodeClaim":
            seen.claim_created.setdefault(event.name, now)
            if event.type is WatchEventType.DELETED or manifest["metadata"].get("deletionTimestamp"):
                seen.claims_deleted.add(event.name)
            if (
                event.name not in seen.claim_launched
                and condition(manifest, "Launched").get("status") == "True"
            ):
                seen.claim_launched[event.name] = now
            if (
                event.name not in seen.claim_initialized
                and condition(manifest, "Initialized").get("status") == "True"
            ):
                seen.claim_initialized[event.name] = now
        elif event.kind == "Node":
            seen.nodes.setdefault(event.name, now)
            taints = (manifest.get("spec") or {}).get("taints") or []
            before = seen.noexecute_now.get(event.name)
            seen.noexecute_now[event.name] = [
                str(t.get("key")) for t in taints if t.get("effect") == "NoExecute"
            ]
            if before and not seen.noexecute_now[event.name]:
                seen.noexecute_cleared[event.name] = now
            for key in seen.noexecute_now[event.name]:
                seen.node_taints.setdefault(key, set()).add(event.name)


async def nominations(kube: KubernetesCluster) -> dict[str, list[str]]:
    """The pods of each NodeClaim, from the Nominated events planning records ("Pod should schedule on: ...")."""
    pods_of: dict[str, list[str]] = {}
    for event in await kube.list_objects("Event", "default"):
        if event.get("reason") == "Nominated":
            note = str(event.get("note") or event.get("message") or "")
            regarding = event.get("regarding") or event.get("involvedObject") or {}
            pods_of.setdefault(note.rpartition("nodeclaim/")[2], []).append(
                f"{regarding.get('namespace') or 'default'}/{regarding.get('name')}"
            )
    return pods_of


def progress(seen: Observed) -> str:
    return (
        f"{len(seen.pod_pending)} pods pending, {len(seen.claim_created)} nodeclaims created, "
        f"{len(seen.claim_launched)} launched, {len(seen.nodes)} nodes, "
        f"{len(seen.claim_initialized)} initialized, {seen.running} pods running"
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def pending_latencies(
    seen: Observed, pods_of: dict[str, list[str]], created_at: dict[str, float]
) -> tuple[list[float], list[float]]:
    """Seconds from each pod seen pending to the capacity made for it (`created_at`, by what `pods_of` names) and
    to the pod seen Running."""
    to_created = [
        created_at[claim] - seen.pod_pending[pod]
        for claim, pods in pods_of.items()
        if claim in created_at
        for pod in pods
        if pod in seen.pod_pending
    ]
    to_running = [
        seen.pod_running[pod] - at for pod, at in seen.pod_pending.items() if pod in seen.pod_running
    ]
    return to_created, to_running


def p50_p99(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return round(statistics.median(values), 2), round(percentile(values, 0.99), 2)


def latency_figures(
    seen: Observed, pods_of: dict[str, list[str]], created_at: dict[str, float]
) -> dict[str, float | None]:
    """p50 and p99 of the seconds from pending to created (`pending_latencies`) and to Running."""
    to_created, to_running = pending_latencies(seen, pods_of, created_at)
    created_p50, created_p99 = p50_p99(to_created)
    running_p50, running_p99 = p50_p99(to_running)
    return {
        "pending_to_created_p50": created_p50,
        "pending_to_created_p99": created_p99,
        "pending_to_running_p50": running_p50,
        "pending_to_running_p99": running_p99,
    }


def since(origin: float, moment: float | None) -> float | None:
    return round(moment - origin, 2) if moment is not None else None
