"""Lifecycle benchmark: N pending pods that each need a node of their own, provisioned through the whole
system on a real Kubernetes control plane until every NodeClaim is Initialized and every pod Running, at
N = 200 and 1,000 (`--runs` adds 3,000). Prints figures; asserts nothing.

A run is the system as users run it, each part in a process of its own, with default settings (batching
idle 1 s, max 10 s; lifecycle poll 30 s; client rate limit 200 requests/s, burst 300) but the controller's
leader-election lease (60 s, renewed within 50 s: the default 8 s renew deadline was missed on a machine
loaded by other work, and the only controller exited):

- a control plane started by the benchmark in a temporary directory (`workers.controlplane`: etcd,
  kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which runs the pods bound to the nodes);
- the emulated Azure (`python -m simulator --instant`): the ARM emulator the worker's Azure provider creates
  NICs and VMs in through the real Azure SDK, and the node agent each VM runs to join the cluster by TLS
  bootstrap, with zero boot, registration and readiness delays;
- the Temporal dev server, in memory (`--temporal-db`: its state in a SQLite file, as the chart's embedded
  Temporal keeps it);
- one worker (`nodewright worker`; `--workers N` starts N, `--split` one `--role workflows` and one
  `--role activities`) and the controller (`nodewright controller`), all reaching the cluster
  through the control plane's kubeconfig (`NODEWRIGHT_KUBECONFIG`) and the emulated Azure through the
  `NODEWRIGHT_*` variables the emulator describes (`workers.azure.emulator_environment`).

This process only starts them, runs the trivial workflows, applies the manifests and watches the API server.
`deploy/examples/` is applied (without the NodePool's CPU limit, so N nodes fit), then a deployment of N
replicas with required hostname anti-affinity: kube-scheduler marks the pods Unschedulable, the controller
signals the provisioner, which plans, creates the NodeClaims and starts their lifecycle workflows.

- NodeClaims/s: NodeClaims Initialized ÷ (last one Initialized - first NodeClaim workflow start).
- trivial wf/s: on the same server just before, N workflows of three no-op activities started at once on a
  worker in this process with the lifecycle worker's options ÷ (last close - first start). The target ratio
  is at least 0.5.
- pending -> created: from the moment a pod is seen PodScheduled=False/Unschedulable (through a watch of the
  API server) to the moment the NodeClaim the provisioner nominated it for ("Nominated" events) is seen
  created; p50 and p99. Target p50 under 1.5 s.
- pending -> running: from the same moment to the pod seen Running; p50 and p99.
- per process: CPU seconds (utime + stime from /proc/<pid>/stat) while the trivial workflows ran and while
  the NodeClaims were provisioned, and peak memory (VmHWM from /proc/<pid>/status), read before they exit;
  and the machine's busy time that none of them used ("others": other work on a shared machine).
- a profile: the provisioner's batches, what one lifecycle's history holds, the API server's requests by
  verb and resource (from its /metrics), and bench pods deleted under the system (by the taint-eviction
  controller, say) with the node they ran on.
- workflow tasks that timed out, over every history of the run by workflow type and timeout (StartToClose: a
  worker held the task past its 10 s; ScheduleToStart: it waited on a worker's sticky queue past 10 s), and
  what each worker logged about slow workflow tasks: "Workflow task duration exceeded 5 seconds" ([TMPRL1104])
  and "Task not found when completing" (a completion the server no longer wanted: the task had timed out, and
  the workflow is replayed from its history).

`--peer karpenter` compares, at each N, three runs on the same pods, each on a fresh control plane started the
same way, in a process of its own: Karpenter's kwok controller (`sigs.k8s.io/karpenter/kwok`, built once from
the Go module proxy beside the other binaries), with Karpenter's own CRDs, a KWOKNodeClass, deploy/examples/'
NodePool pointed at it and the emulated Azure's instance types (the shipped catalog) as its instance-types
file; the floor, where this process creates one kwok Node (a Standard_D2s_v5's labels and size) the moment it
sees each pod pending, with no autoscaler; and nodewright as above. It prints one row per side: seconds from
the first pod pending to the last NodeClaim (the floor: Node) created and to the last pod Running, p50 and p99
of pending -> created and -> Running, and the CPU seconds per NodeClaim of the autoscaler's own processes
(Karpenter's; nodewright's worker, controller and Temporal); the emulated Azure and its node agents are the
simulation, counted as neither side's. Then nodewright's figures over Karpenter's and over the floor's.

Pods are `pinned` to one instance type by default (as the demo's `inflate` is); `--shape any` leaves the
choice to the scheduler. Each run happens in a fresh process (and a fresh control plane), so that each peak
is its own. A run that does not finish within its timeout (`--timeout`, 900 s) prints what it reached, and
the benchmark exits with 1. `--keep` keeps each run's directory: the control plane's state and every
process's log.

    python benchmarks/lifecycle.py                          # N = 200 and 1,000: tables and a profile
    python benchmarks/lifecycle.py --runs 200,1000,3000     # and 3,000 (make bench-lifecycle RUNS=...)
    python benchmarks/lifecycle.py --run 200 --shape any    # one run, JSON
    python benchmarks/lifecycle.py --run 50 --peer karpenter  # Karpenter, the floor, nodewright at N = 50
    python benchmarks/lifecycle.py --run 50 --side floor      # one run of the floor (or karpenter), JSON
    python benchmarks/lifecycle.py --runs 200 --workers 2     # two worker processes (make ... WORKERS=2)
    python benchmarks/lifecycle.py --runs 200 --split         # one workflows and one activities process (SPLIT=1)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client
from temporalio.worker import Worker


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


# The workflow sandbox runs this module again for the trivial workflow: nothing here may touch the outside.
if not workflow.unsafe.in_sandbox():
    sys.path.insert(0, str(project_root()))

with workflow.unsafe.imports_passed_through():
    from activities.kubeclient.cluster import KubernetesCluster, load_cluster
    from benchmarks.karpenter import (
        KWOK_NODECLASS,
        fresh_control_plane,
        karpenter_nodepool,
        running_karpenter,
    )
    from benchmarks.nodewright import (
        CLUSTER,
        WORKER,
        emulated_azure,
        examples,
        is_worker,
        running_nodewright,
        settings,
        worker_roles,
    )
    from benchmarks.processes import (
        cpu_of,
        cpu_since,
        figures_of,
        first_exit,
        log_path,
        peak_rss_mb,
        temporal_pid,
    )
    from core.cluster import EventType as WatchEventType
    from core.messages import PlanResult
    from workers.controlplane.build import KARPENTER_VERSION, ensure_karpenter
    from workers.controlplane.run import (
        KWOK_ANNOTATION,
        KWOK_ANNOTATION_VALUE,
        ControlPlane,
    )
    from workers.temporal_server import DevServer
    from workers.worker import STICKY_SECONDS, WORKFLOW_TASKS, connect
    from workflows.provisioner import provisioner_id

RUNS = [200, 1000]
SHAPES = ("pinned", "any")
PINNED_INSTANCE_TYPE = "Standard_D2s_v5"
TASK_QUEUE = "bench-lifecycle"
TRIVIAL_QUEUE = "bench-trivial"
APP = "bench"
TIMEOUT_SECONDS = 900.0
SAMPLED_HISTORIES = 20
PROGRESS_SECONDS = 5.0
STUCK_SECONDS = 30.0
CATCH_UP_SECONDS = 1.0
SIGNALLED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PROCESSES = (*CONTROL_PLANE, "azure", "temporal", WORKER, "controller", "bench")
"""Every process measured, in the order they are printed (`worker` stands for each worker process); `bench` is
this one (the trivial workflows' worker and the watch that times what happens)."""
WORKER_WARNINGS = {
    "slow workflow tasks": "[TMPRL1104]",
    "completions refused": "Task not found when completing",
    "activations failed": "Failed handling activation",
}
"""What a worker logs when a workflow task took more than 5 s, and when the server refused its completion
(the task had timed out), and when an activation failed (one that held its thread for 2 s, a "potential
deadlock", included), by the marker of the line."""
OBSERVER_QPS = 200.0
SHOWN_EVICTIONS = 5
SHOWN_REQUESTS = 12
SHOWN_AUDITED = 40
SIDES = ("nodewright", "karpenter", "floor")
"""What provisions the nodes of a run: nodewright; Karpenter's kwok controller (`--peer karpenter`); or this
process, which creates a Node the moment it sees a pod pending (the floor)."""
PEERS = ("karpenter",)
AUTOSCALER = {"nodewright": (WORKER, "controller", "temporal"), "karpenter": ("karpenter",), "floor": ()}
"""Each side's own processes, whose CPU counts as the autoscaler's (`worker`: every worker process)."""
SIMULATION = ("azure",)
"""The emulated Azure and the node agents it runs: our simulation, counted as neither side's."""
FLOOR_CONCURRENCY = 32
FLOOR_NODE_CAPACITY = {"cpu": "2", "memory": "8Gi", "pods": "110"}
"""A Standard_D2s_v5's size: what the floor's Nodes report."""


# --- the trivial workflow: what the server and one worker do for three no-op activities -------------------


@activity.defn(name="bench_noop")
async def noop(step: int) -> int:
    return step


@workflow.defn(name="BenchTrivial")
class TrivialWorkflow:
    @workflow.run
    async def run(self) -> None:
        for step in range(3):
            await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30))


async def trivial_rate(client: Client, count: int) -> float:
    """Workflows/s for `count` trivial workflows started at once, from the first start to the last close."""
    # build_worker's options, so that both rates come from the same worker setup, but its activity slots as they
    # were when this measure began (64): no-op activities never wait, and the pace stays comparable across runs.
    worker = Worker(
        client,
        task_queue=TRIVIAL_QUEUE,
        workflows=[TrivialWorkflow],
        activities=[noop],
        sticky_queue_schedule_to_start_timeout=STICKY_SECONDS,
        graceful_shutdown_timeout=timedelta(seconds=5),
        max_concurrent_activities=64,
        max_concurrent_workflow_tasks=WORKFLOW_TASKS,
    )
    query = 'WorkflowType="BenchTrivial"'
    async with worker:
        await asyncio.gather(
            *(
                client.start_workflow(TrivialWorkflow.run, id=f"trivial/{i}", task_queue=TRIVIAL_QUEUE)
                for i in range(count)
            )
        )
        while (await client.count_workflows(query + ' AND ExecutionStatus="Completed"')).count < count:
            await asyncio.sleep(0.2)
    starts, closes = [], []
    async for execution in client.list_workflows(query):
        starts.append(execution.start_time.timestamp())
        closes.append(execution.close_time.timestamp() if execution.close_time else time.time())
    return count / (max(closes) - min(starts))


# --- the cluster and the processes ---------------------------------------------------------------------------


def bench_deployment(
    replicas: int, shape: str, name: str = APP, instance_type: str = PINNED_INSTANCE_TYPE
) -> dict[str, Any]:
    """Pods that each need a node of their own (required anti-affinity on the hostname), `pinned` to one instance
    type or not."""
    selector = {"matchLabels": {"app": name}}
    node_selector = {"node.kubernetes.io/instance-type": instance_type} if shape == "pinned" else {}
    anti_affinity = {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
    container = {
        "name": "app",
        "image": "mcr.microsoft.com/oss/kubernetes/pause:3.6",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": node_selector,
                    "affinity": {
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti_affinity]}
                    },
                    "containers": [container],
                },
            },
        },
    }


def apiserver_requests(plane: ControlPlane) -> dict[str, list[float]]:
    """The API server's requests so far from its /metrics: `VERB resource[/subresource]` to [count, seconds
    spent answering] (seconds are not kept for WATCH, which stays open)."""
    request = urllib.request.Request(
        plane.server + "/metrics", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        text = response.read().decode()
    totals: dict[str, list[float]] = {}
    for line in text.splitlines():
        metric, _, rest = line.partition("{")
        if metric not in ("apiserver_request_total", "apiserver_request_duration_seconds_sum"):
            continue
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '')} {resource}"
        counted = totals.setdefault(key, [0.0, 0.0])
        if metric == "apiserver_request_total":
            counted[0] += float(value)
        elif labels.get("verb") != "WATCH":
            counted[1] += float(value)
    return totals


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}
"""`--audit`: every request once, without bodies (auditing costs the API server CPU of its own)."""


def requester(event: dict[str, Any]) -> str:
    """Who made an audited request: a controller's service account, a node, or the client's User-Agent."""
    user = event.get("user", {}).get("username", "")
    agent = event.get("userAgent", "").split(" ")[0].split("/v")[0]
    if user.startswith("system:serviceaccount:kube-system:"):
        return user.rpartition(":")[2]
    if user.startswith("system:node:") or user.startswith("system:bootstrap:"):
        return f"{user.split(':')[1]} ({agent})"
    return agent or user


def audit_profile(log: Path, since: float, until: float) -> list[dict[str, Any]]:
    """The audited requests made between two moments, by requester, verb and resource; the most frequent
    first."""
    counted: Counter[str] = Counter()
    with log.open() as lines:
        for line in lines:
            event = json.loads(line)
            moment = event.get("requestReceivedTimestamp", "")
            at = datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() if moment else 0.0
            if not since <= at <= until:
                continue
            ref = event.get("objectRef", {})
            resource = ref.get("resource", event.get("requestURI", "").split("?")[0])
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            counted[f"{requester(event)} {event.get('verb', '').upper()} {resource}"] += 1
    return [{"request": key, "count": count} for key, count in counted.most_common()]


def request_profile(before: dict[str, list[float]], after: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The requests of a phase, the most frequent first."""
    rows = []
    for key, (count, seconds) in after.items():
        count -= before.get(key, [0.0, 0.0])[0]
        seconds -= before.get(key, [0.0, 0.0])[1]
        if count >= 1:
            rows.append({"request": key, "count": int(count), "seconds": round(seconds, 1)})
    return sorted(rows, key=lambda row: -row["count"])


# --- the processes ------------------------------------------------------------------------------------------


def process_of(name: str) -> str:
    """The entry of PROCESSES a measured process is printed under."""
    return WORKER if is_worker(name) else name


def worker_warnings(log: Path) -> dict[str, int]:
    """How often the worker logged each of WORKER_WARNINGS."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    return {what: sum(marker in line for line in lines) for what, marker in WORKER_WARNINGS.items()}


# --- what happened ---------------------------------------------------------------------------------------


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
    noexecute_cleared: dict[str, float] = field(default_factory=dict)
    """When each node was last seen losing its NoExecute taints."""

    @property
    def running(self) -> int:
        """Pods Running now (evicted ones no longer count)."""
        return len(self.pod_running.keys() - self.pods_deleted)

    """Bench pods marked DisruptionTarget: the node they were on and its NoExecute taints at that moment."""


def _condition(manifest: dict[str, Any], condition: str) -> dict[str, Any]:
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
            disrupted = _condition(manifest, "DisruptionTarget")
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
                        "s after the node appeared": _since(seen.nodes.get(node, now), now),
                        "s after its NoExecute taints went": _since(cleared, now) if cleared else None,
                    }
                )
            scheduled = _condition(manifest, "PodScheduled")
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
                and _condition(manifest, "Launched").get("status") == "True"
            ):
                seen.claim_launched[event.name] = now
            if (
                event.name not in seen.claim_initialized
                and _condition(manifest, "Initialized").get("status") == "True"
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


async def _histories(client: Client, query: str, limit: int | None = None) -> list[Any]:
    histories = []
    async for execution in client.list_workflows(query, limit=limit):
        histories.append(
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        )
    return histories


def _seconds(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


async def provisioner_profile(client: Client, origin: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each batch of the provisioner: when its planning started
    (seconds after `origin`), how long planning and creation took, and when its children started."""
    batches: list[dict[str, Any]] = []
    histories = await _histories(client, f'WorkflowId="{provisioner_id(CLUSTER)}"')
    for history in histories:
        scheduled: dict[int, tuple[str, float]] = {}
        signalled: float | None = None  # the first signal of the batch (or the start of a run)
        closed: float | None = None  # the batch window's last timer
        for event in history.events:
            at = _seconds(event)
            if event.event_type in (SIGNALLED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED):
                signalled = at if signalled is None else signalled
            elif event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
                closed = at
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                name = attributes.activity_type.name
                scheduled[event.event_id] = (name, at)
                if name == "plan_provisioning":
                    batches.append(
                        {
                            "signalled at": _since(origin, signalled),
                            "window closed at": _since(origin, closed),
                            "planned at": _since(origin, at),
                            "nodeclaims": 0,
                        }
                    )
                    signalled = closed = None
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and batches:
                completed = event.activity_task_completed_event_attributes
                name, started = scheduled[completed.scheduled_event_id]
                batches[-1][f"{name} s"] = round(at - started, 2)
                if name == "plan_provisioning":
                    (plan,) = await client.data_converter.decode(completed.result.payloads, [PlanResult])
                    batches[-1]["pods"] = plan.pods
                    batches[-1]["nodeclaims"] = len(plan.nodeclaims)
                    batches[-1]["plan bytes"] = completed.result.ByteSize()
            elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED and batches:
                batches[-1].setdefault("first child started at", _since(origin, at))
                batches[-1]["last child started at"] = _since(origin, at)
    events = [event for history in histories for event in history.events]
    totals = {
        "runs": len(histories),
        "events": len(events),
        "workflow tasks": sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events),
        "signals": sum(e.event_type == SIGNALLED for e in events),
        "history MB": round(sum(event.ByteSize() for event in events) / 1e6, 1),
    }
    return sorted(batches, key=lambda batch: batch["planned at"] or 0.0), totals


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


async def history_profile(client: Client, workflow_type: str) -> dict[str, float]:
    """What one history of the type holds, averaged over a sample: events by kind, activities (and local
    activities) by name."""
    histories = await _histories(client, f'WorkflowType="{workflow_type}"', limit=SAMPLED_HISTORIES)
    counts: Counter[str] = Counter()
    for history in histories:
        counts["events"] += len(history.events)
        for event in history.events:
            counts[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()] += 1
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                counts["activity " + event.activity_task_scheduled_event_attributes.activity_type.name] += 1
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                marker = event.marker_recorded_event_attributes
                if marker.marker_name == "core_local_activity":
                    local = json.loads(marker.details["data"].payloads[0].data)["activity_type"]
                    counts["local activity " + local] += 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                # StartToClose: the worker took too long; ScheduleToStart: a sticky task waited too long.
                timeout = event.workflow_task_timed_out_event_attributes.timeout_type
                counts[
                    "workflow_task_timed_out " + TimeoutType.Name(timeout).removeprefix("TIMEOUT_TYPE_")
                ] += 1
    return (
        {kind: round(count / len(histories), 1) for kind, count in sorted(counts.items())}
        if histories
        else {}
    )


async def workflow_task_timeouts(client: Client) -> dict[str, int]:
    """Workflow tasks that timed out, over every history of the run, by workflow type and timeout."""
    counts: Counter[str] = Counter()
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                timeout = event.workflow_task_timed_out_event_attributes.timeout_type
                counts[
                    f"{execution.workflow_type} {TimeoutType.Name(timeout).removeprefix('TIMEOUT_TYPE_')}"
                ] += 1
    return dict(sorted(counts.items()))


async def provisioner_failure(client: Client) -> str:
    """Why the provisioner's pending activity keeps failing, if it does."""
    with contextlib.suppress(Exception):
        description = await client.get_workflow_handle(provisioner_id(CLUSTER)).describe()
        for pending in description.raw_description.pending_activities:
            if pending.attempt > 1 and pending.last_failure.message:
                return (
                    f"{pending.activity_type.name} attempt {pending.attempt}: {pending.last_failure.message}"
                )
    return ""


def progress(seen: Observed) -> str:
    return (
        f"{len(seen.pod_pending)} pods pending, {len(seen.claim_created)} nodeclaims created, "
        f"{len(seen.claim_launched)} launched, {len(seen.nodes)} nodes, "
        f"{len(seen.claim_initialized)} initialized, {seen.running} pods running"
    )


async def wait_until_done(
    client: Client,
    seen: Observed,
    count: int,
    timeout: float,
    processes: dict[str, subprocess.Popen[bytes]],
    plane: ControlPlane,
) -> str:
    """Until `count` NodeClaims are Initialized and `count` pods Running, with progress on stderr. Returns ""
    when done, else why not: the timeout, a process that exited, or the provisioner stuck on a failing
    activity."""
    started = last_report = time.time()
    while len(seen.claim_initialized) < count or seen.running < count:
        await asyncio.sleep(0.25)
        now = time.time()
        if exited := first_exit({**processes, **plane.processes}):
            return exited
        if now - started > timeout:
            return f"not done within {timeout:g} s: {progress(seen)}"
        if now - last_report < PROGRESS_SECONDS:
            continue
        last_report = now
        print(f"{now - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
        stuck = not seen.claim_created and now - started > STUCK_SECONDS
        if stuck and (failure := await provisioner_failure(client)):
            return f"the provisioner is stuck: {failure}"
    return ""


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


# --- one run ---------------------------------------------------------------------------------------------


async def run_one(
    count: int,
    shape: str,
    timeout: float,
    keep: bool = False,
    audit: bool = False,
    side: str = SIDES[0],
    workers: dict[str, str] | None = None,
    vm_create_seconds: float = 0.0,
    boot_seconds: float = 0.0,
    temporal_db: bool = False,
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    async with fresh_control_plane(side, "bench-lifecycle-", keep, AUDIT_POLICY if audit else None) as (
        plane,
        directory,
        logs,
    ):
        if side == "nodewright":
            row = await _run_on(
                plane,
                directory,
                logs,
                count,
                shape,
                timeout,
                workers or worker_roles(1, False),
                vm_create_seconds,
                boot_seconds,
                temporal_db,
            )
        else:
            row = await run_without_nodewright(plane, directory, logs, count, shape, timeout, side)
        window = row.pop("window")
        if audit:
            row["audited_requests"] = audit_profile(plane.audit_log, *window)
        return row


async def _run_on(
    plane: ControlPlane,
    directory: Path,
    logs: Path,
    count: int,
    shape: str,
    timeout: float,
    workers: dict[str, str],
    vm_create_seconds: float = 0.0,
    boot_seconds: float = 0.0,
    temporal_db: bool = False,
) -> dict[str, Any]:
    kube = load_cluster(str(plane.kubeconfig), qps=OBSERVER_QPS, burst=int(2 * OBSERVER_QPS))
    async with (
        kube,
        DevServer(
            log_path=logs / "temporal.log", db_filename=directory / "temporal.db" if temporal_db else None
        ) as temporal,
        emulated_azure(
            plane, directory, logs, vm_create_seconds=vm_create_seconds, boot_seconds=boot_seconds
        ) as (
            azure,
            azure_environment,
        ),
    ):
        client = await connect(temporal.target)
        pids = {name: plane.processes[name].pid for name in CONTROL_PLANE}
        pids |= {"azure": azure.pid, "temporal": temporal_pid(), "bench": os.getpid()}

        before = cpu_of(pids)
        trivial_per_second = await trivial_rate(client, count)
        trivial_cpu = cpu_since(before, pids)

        await kube.apply(examples())
        nodepool = await kube.get_object("NodePool", "default")
        version = int((nodepool or {}).get("metadata", {}).get("resourceVersion") or 0)
        environment = {
            **settings(plane, temporal.target, TASK_QUEUE, azure_environment),
            # The disruption loop plans once at start, then idles: this measures provisioning alone.
            "NODEWRIGHT_DISRUPTION_POLL_SECONDS": "3600",
        }
        seen = Observed()

        async with contextlib.AsyncExitStack() as stack:
            ours: dict[str, subprocess.Popen[bytes]] = {"azure": azure}
            ours |= await stack.enter_async_context(
                running_nodewright(plane, logs, environment, workers, client, watched=ours)
            )
            group = await stack.enter_async_context(asyncio.TaskGroup())
            pids |= {name: process.pid for name, process in ours.items()}
            watcher = group.create_task(observe(kube, version, seen))
            await asyncio.sleep(CATCH_UP_SECONDS)  # every watch of this process open, and the controller's
            requests_before = await asyncio.to_thread(apiserver_requests, plane)
            before = cpu_of(pids)
            started = time.time()
            await kube.apply([bench_deployment(count, shape)])
            failure = await wait_until_done(client, seen, count, timeout, ours, plane)
            lifecycle_cpu = cpu_since(before, pids)
            elapsed = time.time() - started
            rss = {name: peak_rss_mb(pid) for name, pid in pids.items()}
            requests = request_profile(requests_before, await asyncio.to_thread(apiserver_requests, plane))
            print(f"{time.time() - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
            watcher.cancel()
            await asyncio.sleep(1)  # the last workflow tasks land in the histories
        warnings = {name: worker_warnings(log_path(logs, name)) for name in workers}

        first_pending = min(seen.pod_pending.values(), default=started)
        starts = [e.start_time.timestamp() async for e in client.list_workflows('WorkflowType="NodeClaim"')]
        batches, provisioner = await provisioner_profile(client, first_pending)
        pods_of = await nominations(kube)
        per_lifecycle = await history_profile(client, "NodeClaim")
        per_trivial = await history_profile(client, "BenchTrivial")
        timeouts = await workflow_task_timeouts(client)

    initialized = len(seen.claim_initialized)
    first_start, last_initialized = (
        min(starts, default=None),
        max(seen.claim_initialized.values(), default=None),
    )
    claims_per_second = (
        initialized / (last_initialized - first_start) if first_start and last_initialized else 0.0
    )
    to_created, to_running = pending_latencies(seen, pods_of, seen.claim_created)
    created_p50, created_p99 = p50_p99(to_created)
    running_p50, running_p99 = p50_p99(to_running)
    return {
        "side": "nodewright",
        **side_figures("nodewright", seen, first_pending, lifecycle_cpu),
        "pods": count,
        "shape": shape,
        "finished": not failure,
        "failure": failure,
        "pods_pending": len(seen.pod_pending),
        "pods_running": seen.running,
        "nodeclaims_created": len(seen.claim_created),
        "nodeclaims_launched": len(seen.claim_launched),
        "nodes": len(seen.nodes),
        "nodeclaims_initialized": initialized,
        "nominated_pods": sum(len(pods) for pods in pods_of.values()),
        "pods_deleted": len(seen.pods_deleted),
        "pods_disrupted": dict(Counter(seen.pods_disrupted.values())),
        "nodeclaims_deleted": len(seen.claims_deleted),
        "noexecute_taints": {key: len(nodes) for key, nodes in sorted(seen.node_taints.items())},
        "evictions": seen.evictions,
        "apiserver_requests": requests,
        "nodeclaims_per_second": round(claims_per_second, 1),
        "trivial_workflows_per_second": round(trivial_per_second, 1),
        "ratio": round(claims_per_second / trivial_per_second, 2),
        "pending_to_created_p50": created_p50,
        "pending_to_created_p99": created_p99,
        "pending_to_running_p50": running_p50,
        "pending_to_running_p99": running_p99,
        "first_pending_to_first_nodeclaim_start": _since(first_pending, first_start),
        "first_pending_to_last_initialized": _since(first_pending, last_initialized),
        "first_pending_to_last_running": _since(first_pending, max(seen.pod_running.values(), default=None)),
        "peak_mb": rss,
        "provisioner": provisioner,
        "batches": batches,
        "per_lifecycle": per_lifecycle,
        "per_trivial": per_trivial,
        "workers": workers,
        "vm_create_seconds": vm_create_seconds,
        "boot_seconds": boot_seconds,
        "workflow_task_timeouts": timeouts,
        "worker_warnings": warnings,
        "cpu_seconds_trivial": {name: round(value, 1) for name, value in trivial_cpu.items()},
        "cpu_seconds_lifecycle": {name: round(value, 1) for name, value in lifecycle_cpu.items()},
        "lifecycle_seconds": round(elapsed, 1),
        "window": (started, started + elapsed),
        "cores": os.cpu_count(),
    }


# --- the peer (Karpenter's kwok controller) and the floor (no autoscaler) -----------------------------------


def side_figures(side: str, seen: Observed, first_pending: float, cpu: dict[str, float]) -> dict[str, Any]:
    """What the comparison table shows of a run beyond the latencies: when the last NodeClaim (the floor: the
    last Node) was seen created, and the CPU seconds of the side's own processes and of the simulation."""
    created = seen.nodes if side == "floor" else seen.claim_created
    autoscaler = float(sum(value for name, value in cpu.items() if process_of(name) in AUTOSCALER[side]))
    return {
        "first_pending_to_last_created": _since(first_pending, max(created.values(), default=None)),
        "autoscaler_cpu_seconds": round(autoscaler, 1),
        "autoscaler_cpu_seconds_per_nodeclaim": round(autoscaler / len(created), 3) if created else None,
        "simulation_cpu_seconds": round(sum(cpu.get(name, 0.0) for name in SIMULATION), 1),
        # The machine is the limit: with every core busy, the side whose run costs the control plane less
        # CPU (fewer writes, pods pending for less time in kube-scheduler's queue) finishes sooner.
        "control_plane_cpu_seconds": round(sum(cpu.get(name, 0.0) for name in CONTROL_PLANE), 1),
    }


def without_autoscaler_objects() -> list[dict[str, Any]]:
    """deploy/examples/ without its NodePool and AKSNodeClass: the same DaemonSet and workloads on every side."""
    return [document for document in examples() if document["kind"] not in ("NodePool", "AKSNodeClass")]


def karpenter_objects() -> list[dict[str, Any]]:
    """A KWOKNodeClass and deploy/examples/' NodePool pointed at it (its AKS-only requirements left out), then
    the examples' other objects."""
    nodepool = next(document for document in examples() if document["kind"] == "NodePool")
    return [KWOK_NODECLASS, karpenter_nodepool(nodepool), *without_autoscaler_objects()]


def floor_node(name: str) -> dict[str, Any]:
    """A Node the plane's kwok keeps Ready, with the labels the bench pods need (a Standard_D2s_v5's)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": PINNED_INSTANCE_TYPE,
                "type": "kwok",
            },
        },
        "status": {"capacity": FLOOR_NODE_CAPACITY, "allocatable": FLOOR_NODE_CAPACITY},
    }


async def make_floor_nodes(kube: KubernetesCluster, seen: Observed, count: int, made: dict[str, str]) -> None:
    """One Node for each pod, created the moment the pod is seen pending (up to `FLOOR_CONCURRENCY` at once):
    no planning, no cloud, no lifecycle. A pod created after the first Nodes can run on a Node made for another
    pod without ever being pending; seen Running, it counts as one more pod to make a Node for, so the pod it
    displaced gets one too. `made` maps each pod to its Node's name."""
    semaphore = asyncio.Semaphore(FLOOR_CONCURRENCY)

    async def create(name: str) -> None:
        async with semaphore:
            await kube.apply([floor_node(name)])

    creating = []
    while len(made) < count:
        for pod in [*seen.pod_pending, *seen.pod_running]:
            if pod not in made:
                made[pod] = name = f"floor-{len(made)}"
                creating.append(asyncio.create_task(create(name)))
        await asyncio.sleep(0.05)
    await asyncio.gather(*creating)


async def nominations_or_placements(kube: KubernetesCluster) -> dict[str, list[str]]:
    """The pods of each NodeClaim: from its Nominated events, and for a pod without one (Karpenter records at
    most 5 a second, in bursts of 10) the NodeClaim of the Node it runs on."""
    pods_of = await nominations(kube)
    nominated = {pod for pods in pods_of.values() for pod in pods}
    claim_of = {
        str((claim.get("status") or {}).get("nodeName")): claim["metadata"]["name"]
        for claim in await kube.list_objects("NodeClaim")
    }
    for pod in await kube.list_objects("Pod", "default", label_selector=f"app={APP}"):
        key = f"default/{pod['metadata']['name']}"
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if key not in nominated and node in claim_of:
            pods_of.setdefault(claim_of[node], []).append(key)
    return pods_of


async def wait_until_settled(
    side: str,
    seen: Observed,
    count: int,
    timeout: float,
    processes: dict[str, subprocess.Popen[bytes]],
    plane: ControlPlane,
) -> str:
    """`wait_until_done` without Temporal: until `count` pods are Running (and, for Karpenter, `count`
    NodeClaims Initialized). Returns "" when done, else why not."""
    started = last_report = time.time()
    claims = count if side == "karpenter" else 0
    while len(seen.claim_initialized) < claims or seen.running < count:
        await asyncio.sleep(0.25)
        now = time.time()
        if exited := first_exit({**processes, **plane.processes}):
            return exited
        if now - started > timeout:
            return f"not done within {timeout:g} s: {progress(seen)}"
        if now - last_report >= PROGRESS_SECONDS:
            last_report = now
            print(f"{side} {now - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
    return ""


async def run_without_nodewright(
    plane: ControlPlane, directory: Path, logs: Path, count: int, shape: str, timeout: float, side: str
) -> dict[str, Any]:
    """A run whose nodes come from Karpenter's kwok controller (`karpenter`) or from this process (`floor`), on
    a control plane of its own started as nodewright's is; the same pods, watched and timed the same way."""
    kube = load_cluster(str(plane.kubeconfig), qps=OBSERVER_QPS, burst=int(2 * OBSERVER_QPS))
    async with kube, contextlib.AsyncExitStack() as stack:
        pids = {name: plane.processes[name].pid for name in CONTROL_PLANE} | {"bench": os.getpid()}
        processes: dict[str, subprocess.Popen[bytes]] = {}
        if side == "karpenter":
            await kube.apply(karpenter_objects())
            karpenter = await stack.enter_async_context(running_karpenter(plane, directory, logs, kube))
            processes["karpenter"] = karpenter
            pids["karpenter"] = karpenter.pid
        else:
            await kube.apply(without_autoscaler_objects())
        daemonset = await kube.get_object("DaemonSet", "log-agent", "kube-system")
        version = int((daemonset or {}).get("metadata", {}).get("resourceVersion") or 0)
        seen = Observed()
        made: dict[str, str] = {}
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(observe(kube, version, seen))
            await asyncio.sleep(CATCH_UP_SECONDS)
            requests_before = await asyncio.to_thread(apiserver_requests, plane)
            before = cpu_of(pids)
            started = time.time()
            await kube.apply([bench_deployment(count, shape)])
            maker = group.create_task(make_floor_nodes(kube, seen, count, made)) if side == "floor" else None
            failure = await wait_until_settled(side, seen, count, timeout, processes, plane)
            cpu = cpu_since(before, pids)
            elapsed = time.time() - started
            rss = {name: peak_rss_mb(pid) for name, pid in pids.items()}
            requests = request_profile(requests_before, await asyncio.to_thread(apiserver_requests, plane))
            print(f"{side} {time.time() - started:6.1f} s: {progress(seen)}", file=sys.stderr, flush=True)
            watcher.cancel()
            if maker:
                maker.cancel()
        pods_of = await nominations_or_placements(kube) if side == "karpenter" else {}

    if side == "floor":
        pods_of = {node: [pod] for pod, node in made.items()}
    created_at = seen.nodes if side == "floor" else seen.claim_created
    first_pending = min(seen.pod_pending.values(), default=started)
    to_created, to_running = pending_latencies(seen, pods_of, created_at)
    created_p50, created_p99 = p50_p99(to_created)
    running_p50, running_p99 = p50_p99(to_running)
    return {
        "side": side,
        **side_figures(side, seen, first_pending, cpu),
        "version": KARPENTER_VERSION if side == "karpenter" else None,
        "pods": count,
        "shape": shape,
        "finished": not failure,
        "failure": failure,
        "pods_pending": len(seen.pod_pending),
        "pods_running": seen.running,
        "nodeclaims_created": len(seen.claim_created),
        "nodeclaims_launched": len(seen.claim_launched),
        "nodes": len(seen.nodes),
        "nodeclaims_initialized": len(seen.claim_initialized),
        "nominated_pods": sum(len(pods) for pods in pods_of.values()),
        "pods_deleted": len(seen.pods_deleted),
        "nodeclaims_deleted": len(seen.claims_deleted),
        "apiserver_requests": requests,
        "pending_to_created_p50": created_p50,
        "pending_to_created_p99": created_p99,
        "pending_to_running_p50": running_p50,
        "pending_to_running_p99": running_p99,
        "first_pending_to_last_initialized": _since(
            first_pending, max(seen.claim_initialized.values(), default=None)
        ),
        "first_pending_to_last_running": _since(first_pending, max(seen.pod_running.values(), default=None)),
        "peak_mb": rss,
        "cpu_seconds_lifecycle": {name: round(value, 1) for name, value in cpu.items()},
        "lifecycle_seconds": round(elapsed, 1),
        "window": (started, started + elapsed),
        "cores": os.cpu_count(),
    }


def _ratio(numerator: Any, denominator: Any) -> str:
    return f"{numerator / denominator:.2f}" if numerator is not None and denominator else "-"


COMPARED = (
    ("all created s", "first_pending_to_last_created"),
    ("all running s", "first_pending_to_last_running"),
    ("created p50", "pending_to_created_p50"),
    ("p99", "pending_to_created_p99"),
    ("running p50", "pending_to_running_p50"),
    ("p99", "pending_to_running_p99"),
    ("CPU s/claim", "autoscaler_cpu_seconds_per_nodeclaim"),
)
"""The comparison's columns: seconds from the first pod pending to the last NodeClaim (the floor: Node) seen
created and to the last pod Running; per pod, pending -> its NodeClaim (Node) created and -> Running; CPU
seconds of the autoscaler's own processes per NodeClaim."""


def print_comparison(rows: list[dict[str, Any]]) -> None:
    """One row per side and run, then nodewright's figures over Karpenter's and over the floor's."""
    widths = [max(11, len(title) + 1) for title, _ in COMPARED]
    print(
        f"{'side':<22}{'pods':>5}{'claims':>7}"
        + "".join(f"{title:>{width}}" for (title, _), width in zip(COMPARED, widths, strict=True))
        + f"{'autoscaler CPU s':>17}{'simulation CPU s':>17}{'control plane CPU s':>20}"
    )
    for count in sorted({row["pods"] for row in rows}):
        by_side = {row["side"]: row for row in rows if row["pods"] == count}
        for side in ("karpenter", "nodewright", "floor"):
            if (row := by_side.get(side)) is None:
                continue
            name = f"karpenter v{row['version']}" if side == "karpenter" else side
            claims = row["nodes"] if side == "floor" else row["nodeclaims_created"]
            print(
                f"{name + ('' if row['finished'] else ' (unfinished)'):<22}{count:>5}{claims:>7}"
                + "".join(f"{row[key]!s:>{width}}" for (_, key), width in zip(COMPARED, widths, strict=True))
                + f"{row['autoscaler_cpu_seconds']!s:>17}{row['simulation_cpu_seconds']!s:>17}"
                + f"{row.get('control_plane_cpu_seconds', '-')!s:>20}"
            )
        ours = by_side.get("nodewright")
        for other in ("karpenter", "floor"):
            if ours and (theirs := by_side.get(other)):
                print(
                    f"{'nodewright / ' + other:<22}{'':>12}"
                    + "".join(
                        f"{_ratio(ours[key], theirs[key]):>{width}}"
                        for (_, key), width in zip(COMPARED, widths, strict=True)
                    )
                )


def _since(origin: float, moment: float | None) -> float | None:
    return round(moment - origin, 2) if moment is not None else None


def _fields(values: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in values.items())


def timed_out(row: dict[str, Any]) -> int:
    """Workflow tasks of the run that timed out (every workflow type, both timeouts)."""
    return sum(row.get("workflow_task_timeouts", {}).values())


def warned(row: dict[str, Any], what: str) -> int:
    """How often the run's workers logged `what` (one of WORKER_WARNINGS), all workers together."""
    return sum(counts.get(what, 0) for counts in row.get("worker_warnings", {}).values())


def measured(rows: list[dict[str, Any]]) -> list[str]:
    """The processes of the rows in PROCESSES' order, each worker process in the place of `worker`."""
    workers = sorted({name for row in rows for name in row["cpu_seconds_lifecycle"] if is_worker(name)})
    return [name for process in PROCESSES for name in (workers if process == WORKER else [process])]


def print_tables(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'pods':>5} {'workers':>7} {'claims':>6} {'init':>5} {'running':>7} {'claims/s':>8} {'trivial/s':>9} "
        f"{'ratio':>5} {'created p50':>11} {'p99':>5} {'running p50':>11} {'p99':>5} {'total s':>7} "
        f"{'wf tasks timed out':>18} {'slow':>5} {'refused':>7}"
    )
    for row in rows:
        roles = list(row.get("workers", {"worker": "all"}).values())
        workers = "split" if "workflows" in roles else str(len(roles))
        print(
            f"{row['pods']:>5} {workers:>7} {row['nodeclaims_created']:>6} {row['nodeclaims_initialized']:>5} "
            f"{row['pods_running']:>7} {row['nodeclaims_per_second']:>8} "
            f"{row['trivial_workflows_per_second']:>9} {row['ratio']:>5} "
            f"{row['pending_to_created_p50']!s:>11} {row['pending_to_created_p99']!s:>5} "
            f"{row['pending_to_running_p50']!s:>11} {row['pending_to_running_p99']!s:>5} "
            f"{row['first_pending_to_last_running']!s:>7} {timed_out(row):>18} "
            f"{warned(row, 'slow workflow tasks'):>5} {warned(row, 'completions refused'):>7}"
        )
    names = measured(rows)
    print(f"\n{'process':<24}" + "".join(f"{'CPU s N=' + str(row['pods']):>13}" for row in rows), end="")
    print("".join(f"{'peak MB N=' + str(row['pods']):>16}" for row in rows))
    for name in names:
        cpu = "".join(f"{row['cpu_seconds_lifecycle'].get(name, '-')!s:>13}" for row in rows)
        peak = "".join(f"{row['peak_mb'].get(name, '-')!s:>16}" for row in rows)
        print(f"{name:<24}{cpu}{peak}")

    def cpu_row(label: str, value: Any) -> None:
        print(f"{label:<24}" + "".join(f"{value(row)!s:>13}" for row in rows))

    cpu_row(
        "all of the above",
        lambda row: round(sum(row["cpu_seconds_lifecycle"].get(name, 0.0) for name in names), 1),
    )
    cpu_row("others on the machine", lambda row: row["cpu_seconds_lifecycle"]["others"])
    cpu_row("available (wall x cores)", lambda row: round(row["lifecycle_seconds"] * (row["cores"] or 1), 1))


def print_profile(row: dict[str, Any]) -> None:
    created = f", each VM's create {row['vm_create_seconds']:g} s" if row.get("vm_create_seconds") else ""
    if row.get("boot_seconds"):
        created += f", each node's boot {row['boot_seconds']:g} s"
    print(f"\nN = {row['pods']} ({row['shape']} pods{created})")
    if row["failure"]:
        print(f"  NOT FINISHED: {row['failure']}")
        print(
            f"  reached: {row['pods_pending']} pods pending, {row['nodeclaims_created']} nodeclaims created, "
            f"{row['nodeclaims_launched']} launched, {row['nodes']} nodes, "
            f"{row['nodeclaims_initialized']} initialized, {row['pods_running']} pods running"
        )
    print(
        f"  first pod pending -> first NodeClaim workflow started: {row['first_pending_to_first_nodeclaim_start']} s;"
        f" -> last NodeClaim Initialized: {row['first_pending_to_last_initialized']} s;"
        f" -> last pod Running: {row['first_pending_to_last_running']} s"
    )
    print(f"  pods nominated (Nominated events): {row['nominated_pods']}")
    print(
        f"  bench pods deleted: {row['pods_deleted']} (marked DisruptionTarget: {_fields(row['pods_disrupted'])}); "
        f"NodeClaims deleted: {row['nodeclaims_deleted']}; "
        f"nodes seen with NoExecute taints: {_fields(row['noexecute_taints'])}"
    )
    for eviction in row["evictions"][:SHOWN_EVICTIONS]:
        print(f"  evicted: {_fields(eviction)}")
    if len(row["evictions"]) > SHOWN_EVICTIONS:
        print(f"  ... and {len(row['evictions']) - SHOWN_EVICTIONS} more evictions")
    requests = row["apiserver_requests"]
    print(
        f"  API server: {sum(item['count'] for item in requests)} requests; the most frequent: "
        + "; ".join(
            f"{item['request']} {item['count']} ({item['seconds']} s)" for item in requests[:SHOWN_REQUESTS]
        )
    )
    for item in row.get("audited_requests", [])[:SHOWN_AUDITED]:
        print(f"  audited: {item['request']} {item['count']}")
    print(f"  provisioner: {_fields(row['provisioner'])}")
    for batch in row["batches"]:
        print(f"  batch: {_fields(batch)}")
    print(f"  one lifecycle up to Running (mean of {SAMPLED_HISTORIES}): {_fields(row['per_lifecycle'])}")
    print(f"  workflow tasks timed out (every history): {_fields(row['workflow_task_timeouts']) or 'none'}")
    for name, counts in row["worker_warnings"].items():
        print(f"  {name} (--role {row['workers'][name]}) logged: {_fields(counts)}")
    print(f"  one trivial workflow (mean of {SAMPLED_HISTORIES}): {_fields(row['per_trivial'])}")
    print(f"  CPU s, trivial workflows: {_fields(row['cpu_seconds_trivial'])}")
    print(f"  CPU s, lifecycles: {_fields(row['cpu_seconds_lifecycle'])}")


def run_in_process(count: int, args: argparse.Namespace, side: str = SIDES[0]) -> dict[str, Any] | None:
    """One run in a fresh process (so that each peak is its own): its figures, or None if it printed none."""
    return figures_of(
        [
            sys.executable,
            __file__,
            "--run",
            str(count),
            "--side",
            side,
            "--shape",
            args.shape,
            "--timeout",
            str(args.timeout),
            *(["--keep"] if args.keep else []),
            *(["--audit"] if args.audit else []),
            *(["--split"] if args.split else []),
            "--workers",
            str(args.workers),
            "--vm-create-seconds",
            str(args.vm_create_seconds),
            "--boot-seconds",
            str(args.boot_seconds),
            *(["--temporal-db"] if args.temporal_db else []),
        ],
        f"the {side} run of {count} pods",
    )


def compare(counts: list[int], args: argparse.Namespace) -> None:
    """`--peer karpenter`: for each N, Karpenter's run, the floor's and nodewright's, each on a fresh control
    plane in a process of its own; the comparison, then nodewright's tables and profile."""
    ensure_karpenter()  # built once (minutes) before any run's clock starts
    rows: list[dict[str, Any]] = []
    for count in counts:
        for side in (args.peer, "floor", "nodewright"):
            row = run_in_process(count, args, side)
            if row is None:
                if rows:
                    print_comparison(rows)
                sys.exit(1)
            rows.append(row)
    print_comparison(rows)
    ours = [row for row in rows if row["side"] == "nodewright"]
    print()
    print_tables(ours)
    for row in ours:
        print_profile(row)
    if not all(row["finished"] for row in rows):
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=int, metavar="PODS", help="one run in this process, as JSON")
    parser.add_argument(
        "--runs",
        default=",".join(str(count) for count in RUNS),
        metavar="PODS,...",
        help="the runs to make and tabulate (default %(default)s; 200,1000,3000 adds the run of 3,000)",
    )
    parser.add_argument("--shape", choices=SHAPES, default=SHAPES[0], help="the pods' node constraints")
    parser.add_argument(
        "--timeout", type=float, default=TIMEOUT_SECONDS, help="seconds a run may take once the pods exist"
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="audit every request (costs the API server CPU) and profile them by who made them",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each run's directory (control plane state, every process's log)",
    )
    parser.add_argument(
        "--peer",
        choices=PEERS,
        help=f"compare with Karpenter v{KARPENTER_VERSION}'s kwok controller and with the floor (Nodes made by "
        "this process, no autoscaler), each on a fresh control plane, at N = --run or each of --runs",
    )
    parser.add_argument(
        "--side",
        choices=SIDES,
        default=SIDES[0],
        help="with --run (and no --peer): what provisions the nodes",
    )
    parser.add_argument(
        "--vm-create-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="nodewright: each VM's create takes S seconds in the emulated Azure, as Azure's take tens of "
        "seconds (default 0: as fast as the machine goes); not with --peer, whose kwok nodes take no time",
    )
    parser.add_argument(
        "--boot-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="nodewright: each node registers S seconds after its VM's create ended, as an AKS node's kubelet "
        "does (default 0); not with --peer",
    )
    parser.add_argument(
        "--temporal-db",
        action="store_true",
        help="nodewright: the Temporal dev server keeps its state in a SQLite file (WAL), as the chart's embedded "
        "Temporal does, instead of in memory",
    )
    workers = parser.add_mutually_exclusive_group()
    workers.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="nodewright: N worker processes, each with every role (default 1)",
    )
    workers.add_argument(
        "--split",
        action="store_true",
        help="nodewright: one worker process for workflows (--role workflows), one for activities",
    )
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.vm_create_seconds < 0:
        parser.error("--vm-create-seconds must not be negative")
    if args.vm_create_seconds and args.peer:
        parser.error("--vm-create-seconds is for nodewright's runs alone: the peer's kwok nodes take no time")
    if args.boot_seconds < 0:
        parser.error("--boot-seconds must not be negative")
    if args.boot_seconds and args.peer:
        parser.error("--boot-seconds is for nodewright's runs alone: the peer's kwok nodes take no time")
    if args.peer:
        compare([args.run] if args.run else [int(count) for count in args.runs.split(",")], args)
        return
    if args.run:
        one = asyncio.run(
            run_one(
                args.run,
                args.shape,
                args.timeout,
                args.keep,
                args.audit,
                args.side,
                worker_roles(args.workers, args.split),
                args.vm_create_seconds,
                args.boot_seconds,
                args.temporal_db,
            )
        )
        print(json.dumps(one))
        sys.exit(0 if one["finished"] else 1)
    rows: list[dict[str, Any]] = []
    for count in (int(count) for count in args.runs.split(",")):
        row = run_in_process(count, args)
        if row is None:
            if rows:
                print_tables(rows)
            sys.exit(1)
        rows.append(row)
    print_tables(rows)
    for row in rows:
        print_profile(row)
    if not all(row["finished"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
