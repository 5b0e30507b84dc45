"""What the activity tests do to the real control plane of the `aks` fixture: apply `deploy/examples/`, scale a
deployment and wait until kube-scheduler has marked its pods unschedulable (as the controller waits for before
it signals the provisioner), read the events Karpenter recorded, and run activities under a workflow run id of
their own (NodeClaim names derive from it; events outlive a test on the shared API server)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.kubeclient import KubernetesCluster
from core.api.kube import Pod
from tests.workflows.conftest import eventually

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"
SCHEDULING_TIMEOUT = 30.0
"""How long kube-scheduler may take to try a new pod (it tries at once; this is for a loaded machine)."""


async def apply_examples(kube: KubernetesCluster) -> None:
    """`deploy/examples/`, with the AKSNodeClass status the image controller would write."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        await kube.apply(path.read_text())


def is_unschedulable(pod: Pod) -> bool:
    """Whether kube-scheduler tried the pod and found no node for it (`PodScheduled=False`, `Unschedulable`)."""
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions
    )


async def unschedulable(kube: KubernetesCluster, app: str, count: int) -> list[str]:
    """The keys (`default/<name>`) of the app's pods once all `count` exist and kube-scheduler has marked every
    one unschedulable."""

    async def marked() -> list[str]:
        pods = await kube.list_pods("default", label_selector=f"app={app}")
        if len(pods) != count or not all(is_unschedulable(pod) for pod in pods):
            return []
        return sorted(f"default/{pod.metadata.name}" for pod in pods)

    return await eventually(marked, timeout=SCHEDULING_TIMEOUT, what=f"{count} unschedulable {app} pods")


async def scale_pending(kube: KubernetesCluster, app: str, replicas: int) -> list[str]:
    """Scale the deployment and wait until its pods are unschedulable; their keys."""
    await kube.scale("Deployment", "default", app, replicas)
    return await unschedulable(kube, app, replicas)


def activity_environment(run_id: str | None = None, attempt: int = 1) -> ActivityEnvironment:
    """An activity environment whose workflow run (and so every NodeClaim name a plan derives) is new."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(
        environment.info, workflow_run_id=run_id or uuid.uuid4().hex, attempt=attempt
    )
    return environment


async def events(
    kube: KubernetesCluster, reason: str, regarding: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """The `events.k8s.io/v1` Events in `default` with this reason, about the named objects when given."""
    return [
        event
        for event in await kube.list_objects("Event", "default")
        if event.get("reason") == reason
        and (regarding is None or (event.get("regarding") or {}).get("name") in regarding)
    ]
