"""What the static NodePool workflow (`static/<cluster>/<nodepool>`), its activity and the controller say to each
other: one typed object per input, signal and result."""

from __future__ import annotations

from pydantic import BaseModel, Field

from core.messages import LifecycleSettings

RECONCILE_STATIC_NODEPOOL = "reconcile_static_nodepool"
"""The activity that reads a static pool, decides one scale step and carries it out."""


class StaticPoolInput(BaseModel):
    cluster: str
    nodepool: str
    poll_seconds: float = 60.0
    """How often the pool is looked at without a signal (Karpenter requeues a static pool every minute)."""
    limited_poll_seconds: float = 30.0
    """How soon to look again while `limits.nodes` holds the pool below its replicas."""
    step_timeout_seconds: float = 300.0
    max_launch_candidates: int = 20
    steps_before_continue_as_new: int = 200
    lifecycle: LifecycleSettings | None = None
    pending: list[str] = Field(default_factory=list)
    """Why the pool was signalled and not yet reconciled, carried over continue-as-new."""


class StaticPoolChanged(BaseModel):
    """Signal: something that changes the pool's count happened (replicas edited, a NodeClaim went)."""

    why: str


class StaticStepInput(BaseModel):
    cluster: str
    nodepool: str
    step: int
    """With the workflow's run, names the NodeClaims the step creates, so a retry finds them."""
    why: str = ""
    """What woke the workflow for this step, logged with the step."""
    provisioner_workflow_id: str = ""
    """Where the lifecycles report unavailable offerings and leaving nodes."""
    max_launch_candidates: int = 20
    lifecycle: LifecycleSettings | None = None


class StaticStepResult(BaseModel):
    """One step's account for the history: the counts, what it created and deleted, and why."""

    found: bool = True
    """False: the NodePool is gone, or no longer static: the workflow ends."""
    current: int = 0
    desired: int = 0
    created: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    limited: bool = False
    reason: str = ""
