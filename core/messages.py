"""Inputs and outputs of the provisioning and lifecycle workflows and their activities.

They live in `core` because workflows and activities may not import each other, and they are small on
purpose: histories hold decisions (which NodeClaims, which offerings), never cluster snapshots.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from core.api.meta import Taint
from core.features import MinValuesPolicy
from core.repack_defaults import (
    DEFAULT_DEADLINE_SECONDS,
    DEFAULT_MAX_PODS_MOVED,
    DEFAULT_MIN_SAVINGS_MICROS,
    DEFAULT_MIN_SAVINGS_PERCENT,
)


class OfferingChoice(BaseModel):
    """One offering a NodeClaim may be launched with, in the order the provider would try them."""

    instance_type: str
    zone: str
    capacity_type: str
    price_micros: int
    price_overlay: str | None = None
    """The NodeOverlay that set this price, None for the provider's own."""


class UnavailableOffering(BaseModel):
    """An offering a launch failure ruled out, until `until`: for every NodeClass (capacity, quota), or only for
    the NodeClaims of `nodeclass` (a launch that failed for a reason of its own, e.g. an image the size cannot
    boot)."""

    instance_type: str
    zone: str
    capacity_type: str
    until: datetime
    reason: str = ""
    nodeclass: str = ""
    """The AKSNodeClass it is unavailable for; empty: for all."""


class PlanInput(BaseModel):
    cluster: str
    unavailable: list[UnavailableOffering] = Field(default_factory=list)
    max_launch_candidates: int = 20
    provisioner_workflow_id: str = ""
    batch: int = 0
    """The provisioner's batch number: with its run, it names the NodeClaims, so a retried plan finds them."""
    lifecycle: LifecycleSettings | None = None
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT


MAX_RECORDED_PODS = 50
"""Pods named in a PlannedNodeClaim: enough to explain it, small enough for the lifecycle's start input."""


class PlannedNodeClaim(BaseModel):
    """A NodeClaim the planning activity created, with what its lifecycle needs and nothing more.

    The NodeClaim object itself (every requirement, up to 600 instance-type options) lives in the cluster;
    carrying it here would make a large plan exceed Temporal's payload limit."""

    name: str
    nodepool: str
    launch_candidates: list[OfferingChoice]
    labels: dict[str, str]
    taints: list[Taint] = Field(default_factory=list)
    startup_taints: list[Taint] = Field(default_factory=list)
    requests: dict[str, str] = Field(default_factory=dict)
    instance_types: str = ""
    """The first few instance-type options and how many more, as Karpenter logs them."""
    pod_count: int = 0
    pods: list[str] = Field(default_factory=list)
    """The pods it was created for (namespace/name), the first `MAX_RECORDED_PODS`; `pod_count` has them all."""
    reason: str = ""
    """Why this NodeClaim and this launch, in one line, as `nodewright explain` shows it."""
    batch: int = 0
    """The provisioner batch that planned it."""
    expire_after_seconds: float | None = None
    termination_grace_period_seconds: float | None = None
    nodeclass: str = ""
    """Its NodePool's AKSNodeClass: a launch failure of its own rules the offering out for it alone."""


class NodeClaimSummary(BaseModel):
    """What the provisioner logs of a NodeClaim the plan created (its lifecycle has the rest)."""

    name: str
    nodepool: str
    requests: dict[str, str] = Field(default_factory=dict)
    instance_types: str = ""
    pod_count: int = 0


class PlanResult(BaseModel):
    pods: int
    """Pending pods the plan considered."""
    nominated: int = 0
    """Pending pods it left to the in-flight NodeClaims they were nominated to (not simulated again)."""
    nodeclaims: list[NodeClaimSummary] = Field(default_factory=list)
    """NodeClaims created, each with its lifecycle workflow started."""
    scheduled_on_existing: int = 0
    unschedulable: dict[str, list[str]] = Field(default_factory=dict)
    """Pod key to reasons, for at most a few pods (the count is `unschedulable_count`)."""
    unschedulable_count: int = 0


class ProvisionerInput(BaseModel):
    cluster: str
    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    unavailable_ttl_seconds: float = 180.0
    batches_before_continue_as_new: int = 200
    plan_timeout_seconds: float = 900.0
    """How long one plan may take: creating, starting and nominating for thousands of NodeClaims takes minutes on
    a busy worker (120 s cut a plan of 2,400 short, and its retries too); its heartbeat notices a dead worker."""
    plan_heartbeat_seconds: float = 10.0
    """A plan whose worker died is retried after this long without a heartbeat, not after the whole timeout."""
    lifecycle: LifecycleSettings | None = None
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT
    """Karpenter's MIN_VALUES_POLICY for every plan."""
    unavailable: list[UnavailableOffering] = Field(default_factory=list)
    """Carried over continue-as-new."""
    pending: list[str] = Field(default_factory=list)
    """Pods signalled but not yet planned, carried over continue-as-new."""
    leaving: list[str] = Field(default_factory=list)
    """Nodes whose termination began and whose pods are not yet planned, carried over continue-as-new."""


class PodsPending(BaseModel):
    """From the controller: pods kube-scheduler could not place."""

    pods: list[str]


class NodeLeaving(BaseModel):
    """From a NodeClaim lifecycle whose termination began: plan for the pods that must leave its Node now, so
    that their new capacity launches while it drains (Karpenter's provisioner is triggered by such nodes)."""

    node: str
    nodeclaim: str


class LifecycleSettings(BaseModel):
    """Every wait of a NodeClaim lifecycle, so tests and demos can shrink them."""

    registration_ttl_seconds: float = 900.0
    poll_seconds: float = 30.0
    """How often to look again when no event arrives: a backstop for a lost signal, since the controller signals
    every change of the Node the lifecycle waits on (each look is a workflow task and a call to the API server)."""
    poll_max_seconds: float = 240.0
    """The longest such wait: each look that no signal woke waits twice as long as the one before, up to this,
    so a Node that stays not Ready for minutes (a slow kubelet, a busy API server) costs a few looks, not one
    every `poll_seconds`; a signal starts again from `poll_seconds`."""
    drain_retry_seconds: float = 1.0
    min_drain_seconds: float = 5.0
    """Karpenter's MinDrainTime: a node counts as drained only this long after its drain began, so that pods
    bound just before the disrupted taint landed are drained too."""
    launch_timeout_seconds: float = 300.0
    """Karpenter's liveness `LaunchTimeout`: a NodeClaim not launched this long after its lifecycle started is
    deleted (every attempt and retry shares it)."""
    launch_attempt_timeout_seconds: float | None = None
    """Start-to-close timeout of one launch attempt (an attempt lost with its worker is retried after it); None:
    whatever is left of the launch timeout."""
    launch_heartbeat_seconds: float = 15.0
    """A launch that has not heartbeated for this long (it beats every second) is retried: its worker died, or lost
    it, and a retry finds the VM an earlier attempt created by its name."""
    activity_timeout_seconds: float = 30.0
    """Start-to-close timeout of every other lifecycle activity (a dead worker's activity is retried after it)."""


class Phase(StrEnum):
    LAUNCHING = "Launching"
    REGISTERING = "Registering"
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"


class LifecycleInput(BaseModel):
    cluster: str
    nodeclaim: PlannedNodeClaim
    settings: LifecycleSettings = Field(default_factory=LifecycleSettings)
    provisioner_workflow_id: str | None = None


class LaunchResult(BaseModel):
    name: str
    provider_id: str
    instance_type: str
    zone: str
    capacity_type: str
    capacity: dict[str, str]
    allocatable: dict[str, str]
    creating: bool = False
    """The instance was still being created when the launch returned: no Node can have registered yet."""


class LaunchFailure(BaseModel):
    """Why an offering could not be launched; `offering_unavailable` when it should be avoided for a while."""

    instance_type: str
    zone: str
    capacity_type: str
    kind: str
    message: str


class NodeEvent(BaseModel):
    """From the controller: the Node of a NodeClaim appeared or changed."""

    node: str
    ready: bool = False
    deleting: bool = False
    taints: list[str] = Field(default_factory=list)
    """Its taints' keys but nodewright's own: initialization waits for the startup and not-ready ones to go."""
    resources: list[str] = Field(default_factory=list)
    """The resources it reports allocatable: initialization waits for requested extended resources."""


class TerminationReason(StrEnum):
    """Why a NodeClaim's lifecycle ended: a disruption reason (Karpenter's `DisruptionReason`, and `Expired`),
    or what else removed it."""

    EMPTY = "Empty"
    DRIFTED = "Drifted"
    UNDERUTILIZED = "Underutilized"
    EXPIRED = "Expired"
    """expireAfter elapsed (the lifecycle's own timer, or an expiration command)."""
    NODE_DELETED = "NodeDeleted"
    """Someone deleted its Node (`kubectl delete node`)."""
    NODECLAIM_DELETED = "NodeClaimDeleted"
    """Someone deleted the NodeClaim, or a rolled-back disruption deleted its replacement."""
    GARBAGE_COLLECTED = "GarbageCollected"
    """Its VM vanished from the cloud while its Node was not Ready."""
    REGISTRATION_TIMEOUT = "RegistrationTimeout"
    """No Node registered within the registration TTL (Karpenter's liveness check)."""
    LAUNCH_FAILED = "LaunchFailed"
    """No offering could be launched."""
    LAUNCH_TIMEOUT = "LaunchTimeout"
    """Not launched within the launch timeout (Karpenter's liveness check)."""
    INTERRUPTED = "Interrupted"
    """Azure is evicting its Spot VM (a Preempt Scheduled Event): drained by the event's deadline."""
    UNHEALTHY = "Unhealthy"
    """Node repair: a condition of its Node was unhealthy past its toleration; drained forcefully."""


TERMINATION_REASON_ANNOTATION = "nodewright.io/termination-reason"
"""Set on a NodeClaim by whatever deletes it on nodewright's behalf (garbage collection), so that the
controller can tell its lifecycle why; a `TerminationReason` value."""


class Interruption(BaseModel):
    """The `interrupt` signal of a NodeClaim workflow, from the controller: Azure is evicting its Spot VM, as the
    Node's `PreemptionScheduled=True` condition says (AKS's node-problem-detector writes it from the VM's
    Scheduled Events)."""

    node: str
    event_id: str
    status: str = "Scheduled"
    """The Scheduled Event's status: Scheduled (it has a deadline) or Started (the eviction is under way)."""
    not_before: datetime | None = None
    """The event's deadline: the VM is deleted then. None once the event has started: the deadline is now."""
    noticed: datetime | None = None
    """When the Node's condition turned True (its lastTransitionTime): when the notice reached the cluster."""


class DeletionRequested(BaseModel):
    """From the controller: someone deleted the NodeClaim or its Node."""

    by: str
    """Who or what asked, in a few words ("nodeclaim deleted", "disruption rolled back: ...")."""
    reason: TerminationReason = TerminationReason.NODECLAIM_DELETED


class NodeState(BaseModel):
    """What the lifecycle needs to know of a Node to move on."""

    name: str
    exists: bool = True
    ready: bool = False
    startup_taints_remaining: list[str] = Field(default_factory=list)
    ephemeral_taints_remaining: list[str] = Field(default_factory=list)
    """Kubernetes' own not-ready taints still on it (`labels.KNOWN_EPHEMERAL_TAINTS`)."""
    missing_resources: list[str] = Field(default_factory=list)
    deleting: bool = False
    initialized: bool = False
    waiting_reason: str = ""
    """Why it is not initialized yet, as Karpenter's Initialized condition says it (`NodeNotReady` ...)."""
    waiting_message: str = ""


class DrainResult(BaseModel):
    remaining: int
    settle_seconds: float = 0.0
    """Nothing is left, but the drain began less than `min_drain_seconds` ago: look again after this long."""
    evicted: list[str] = Field(default_factory=list)
    blocked: dict[str, str] = Field(default_factory=dict)
    """Pod key to why its eviction was refused (a PodDisruptionBudget)."""


class ConditionUpdate(BaseModel):
    name: str
    type: str
    status: str
    reason: str = ""
    message: str = ""
    provider_id: str | None = None
    node_name: str | None = None
    capacity: dict[str, str] | None = None
    allocatable: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    event_reason: str = ""
    """When set, also record a Kubernetes Event on the NodeClaim with this reason and `message`."""
    event_type: str = "Normal"
    image_id: str | None = None
    event_message: str = ""
    """The event's message, when it is not `message`."""
    nodepool_event: bool = False
    """Record the event on the NodeClaim's NodePool too."""
    disrupted: str = ""
    """The `nodeclaims_disrupted_total` reason this update records, when it is not the one its condition implies
    (`activities.metrics.disrupted_reason`)."""
    also: list[ConditionUpdate] = Field(default_factory=list)
    """More conditions set in the same write (their type, status, reason and message; the rest is ignored)."""


class LifecycleStatus(BaseModel):
    """The answer to the lifecycle's status query, and its result."""

    name: str
    phase: Phase
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    node: str | None = None
    provider_id: str | None = None
    launch_failures: list[LaunchFailure] = Field(default_factory=list)
    reason: str = ""
    """Why it ended, in a sentence (`core.summaries`); empty while it runs."""
    termination_reason: TerminationReason | None = None
    """Why it ended, as a code; None while it runs."""


PlanInput.model_rebuild()
ProvisionerInput.model_rebuild()


class ActivityName(StrEnum):
    """Activity names, shared by the workflows that call them and the activities that implement them."""

    PLAN_PROVISIONING = "plan_provisioning"
    UPDATE_NODECLAIM = "update_nodeclaim"
    LAUNCH_NODECLAIM = "launch_nodeclaim"
    REGISTER_NODECLAIM = "register_nodeclaim"
    INITIALIZE_NODECLAIM = "initialize_nodeclaim"
    TAINT_FOR_TERMINATION = "taint_for_termination"
    DRAIN_NODE = "drain_node"
    DELETE_NODE = "delete_node"
    DELETE_NODECLAIM = "delete_nodeclaim"
    DELETE_INSTANCE = "delete_instance"
    DELETE_UNREGISTERED_NODE = "delete_unregistered_node"
    """Delete the Node an instance registered after its lifecycle stopped waiting for it (the cloud node lifecycle
    controller's part, once the instance is gone)."""
    BEGIN_TERMINATION = "begin_termination"
    """Mark the NodeClaim deleting (its finalizer holds it) and taint its Node: Karpenter's start of termination."""
    PLAN_DISRUPTION = "plan_disruption"
    """Returns a `DisruptionPassRecord`: the history's account of one disruption pass."""
    AWAIT_VOLUME_DETACHMENT = "await_volume_detachment"
    """The VolumeAttachments a drained node still waits for, recorded as the NodeClaim's VolumesDetached."""


class LaunchInput(BaseModel):
    nodeclaim: str
    nodepool: str
    offering: OfferingChoice
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    startup_taints: list[Taint] = Field(default_factory=list)


class RegisterInput(BaseModel):
    nodeclaim: str
    provider_id: str
    labels: dict[str, str] = Field(default_factory=dict)
    node: str | None = None
    """The Node, when the controller already said which one it is."""
    launched: OfferingChoice | None = None
    """The offering launched, when this look should also ask the cloud whether the instance's create failed
    (a look that no signal woke: the create may have failed after the launch returned)."""


class InitializeInput(BaseModel):
    nodeclaim: str
    node: str
    startup_taints: list[str] = Field(default_factory=list)
    requested_resources: list[str] = Field(default_factory=list)


class TerminationStart(BaseModel):
    nodeclaim: str
    node: str
    termination_grace_period_seconds: float | None = None
    """The NodeClaim's terminationGracePeriod, for one whose spec does not carry it."""
    termination_time: datetime | None = None
    """When the drain ends regardless of the grace period (node repair: when it was decided), annotated so."""


class DrainInput(BaseModel):
    node: str
    force: bool = False
    """The NodeClaim's terminationGracePeriod has elapsed: delete what is left, PDBs or not."""
    nodeclaim: str = ""
    """Whose Drained condition the drain keeps (none when empty)."""
    min_drain_seconds: float = 0.0
    """How long after its first pass the drain may end (`LifecycleSettings.min_drain_seconds`)."""


class VolumeDetachmentInput(BaseModel):
    nodeclaim: str
    node: str
    grace_elapsed: bool = False
    """The drain deadline (terminationGracePeriod) has passed: stop waiting, whatever is attached."""
    announced: list[str] = Field(default_factory=list)
    """The attachments the previous pass waited for (an event says so when they change)."""


class VolumeDetachmentResult(BaseModel):
    pending: list[str] = Field(default_factory=list)
    """The VolumeAttachments still to wait for; empty once they are gone or the wait was cut short."""
    abandoned: list[str] = Field(default_factory=list)
    """Those left attached because the terminationGracePeriod ran out."""


# ------------------------------------------------------------------------------------------------ disruption
# The disruption and manual-consolidation workflows (workflows/disruption.py) and their activities
# (activities/disruption.py). A pass's record is the history's account of what was considered, what was chosen
# and why; `nodewright explain` reads these records back out of the histories.


class DisruptionMode(StrEnum):
    AUTOMATIC = "automatic"
    """Karpenter's disruption loop: every method, forever, one command at a time."""
    MANUAL = "manual"
    """`nodewright consolidate`: one consolidation pass, planned, shown, confirmed, executed."""


class DisruptionSettings(BaseModel):
    """Timings of the disruption workflows; every one is an input so tests can shrink it."""

    poll_seconds: float = 10.0
    """Between passes of the automatic loop (Karpenter polls every 10 s)."""
    validation_seconds: float = 15.0
    """How long a consolidation decision must hold before it executes (Karpenter's 15 s)."""
    replacement_timeout_seconds: float = 600.0
    """How long replacements may take to initialize before the command is rolled back."""
    confirmation_timeout_seconds: float = 600.0
    """How long a manual consolidation waits for `--yes` / confirmation before it gives up."""
    activity_timeout_seconds: float = 60.0
    passes_before_continue_as_new: int = 100
    max_events_per_pass: int = Field(default=100, ge=2)
    """Kubernetes events one pass sends at most (a Node's and its NodeClaim's count as two); the rest follow."""
    spot_to_spot_consolidation: bool = False
    """Karpenter's SpotToSpotConsolidation feature gate."""
    node_repair: bool = False
    """Repair unhealthy nodes each pass, with the AKS provider's policies (Karpenter's `NodeRepair` gate)."""
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT
    """Karpenter's MIN_VALUES_POLICY for the simulations that place the candidates' pods."""
    repair_not_ready_seconds: float = 600.0
    """How long a Node may be Ready=False or Ready=Unknown before it is repaired (the AKS provider's 10 min)."""
    repack: RepackSettings | None = None
    """The repack after Karpenter's methods (`core.disruption.repack`); None: Karpenter's methods alone, and no
    cost or bound in the plan (what a workflow started before the repack existed does)."""
    steer_settle_seconds: float = Field(default=10.0, gt=0)
    """A repack's steered drain: how long one step waits for the evicted pod's replacement to be scheduled
    before it hands the wait back to the workflow."""
    steer_wait_seconds: float = Field(default=120.0, gt=0)
    """A repack's steered drain: how long an evicted pod's replacement may stay unscheduled (or an eviction stay
    refused by a PodDisruptionBudget) before the drain gives up steering and drains the rest as Karpenter does."""


class RepackSettings(BaseModel):
    """The repack's settings (`core.disruption.options.RepackOptions`)."""

    enabled: bool = True
    """False: Karpenter's methods alone; plans still state their cost and bound."""
    min_savings_micros: int = Field(default=DEFAULT_MIN_SAVINGS_MICROS, ge=0)
    """A repack command saves at least this per hour (micro-dollars)."""
    min_savings_percent: float = Field(default=DEFAULT_MIN_SAVINGS_PERCENT, ge=0, le=100)
    """And at least this share (in percent) of the price of the nodes it retires."""
    max_pods_moved: int = Field(default=DEFAULT_MAX_PODS_MOVED, ge=1)
    """A repack command evicts at most this many pods."""
    deadline_seconds: float = Field(default=DEFAULT_DEADLINE_SECONDS, gt=0)
    """How long one plan's repack may search."""


class DisruptionInput(BaseModel):
    cluster: str
    mode: DisruptionMode = DisruptionMode.AUTOMATIC
    nodepools: list[str] = Field(default_factory=list)
    """Only these NodePools (empty: all)."""
    dry_run: bool = False
    """Manual mode: plan and record, change nothing."""
    settings: DisruptionSettings = Field(default_factory=DisruptionSettings)
    lifecycle: LifecycleSettings | None = None
    """Settings for the replacements' lifecycle workflows."""
    passes: int = 0
    """Passes run by earlier runs of this workflow (continue-as-new carries it)."""


class DisruptedCandidate(BaseModel):
    """A node a command disrupts."""

    node: str
    nodeclaim: str
    nodepool: str
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    price_micros: int | None = None
    pods: int = 0
    detail: str | None = None


class PlannedReplacement(BaseModel):
    """A NodeClaim a command launches before its candidates go (as `core.disruption.Replacement.to_json()`)."""

    nodepool: str
    instance_type: str | None = None
    capacity_type: str | None = None
    price_micros: int | None = None
    instance_type_options: list[str] = Field(default_factory=list)
    capacity_types: list[str] = Field(default_factory=list)
    requirements: list[dict[str, object]] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    pods: list[str] = Field(default_factory=list)
    requests: dict[str, str] = Field(default_factory=dict)
    nodeclaim_labels: dict[str, str] = Field(default_factory=dict)
    """The labels the replacement NodeClaim is created with (the launch adds its instance type's)."""


class DisruptionCommand(BaseModel):
    """One command of a plan: what Karpenter's disruption controller would start."""

    method: str
    """`core.disruption.Method` value: expiration, emptiness, drift, multi-/single-node-consolidation."""
    reason: str
    """Karpenter's disruption reason: Empty, Drifted, Underutilized, Expired."""
    decision: str
    """delete or replace."""
    candidates: list[DisruptedCandidate]
    replacements: list[PlannedReplacement] = Field(default_factory=list)
    savings_micros: int = 0
    pods_moved: int = 0
    message: str = ""
    """Karpenter's log line for it ("disrupting via consolidation replace, terminating 1 nodes ...")."""
    repack: RepackRecord | None = None
    """For a repack command: why the new set is cheaper, and where each pod goes."""


class RepackRecord(BaseModel):
    """What a repack command retires and launches, which nodes that stay take pods, each pod's move, and why the
    new set is cheaper (`core.disruption.commands.Repacked`)."""

    retired: list[str] = Field(default_factory=list)
    launched: list[str] = Field(default_factory=list)
    receiving: list[str] = Field(default_factory=list)
    moves: list[str] = Field(default_factory=list)
    """"namespace/name: from -> to" per pod."""
    message: str = ""
    staying: dict[str, str] = Field(default_factory=dict)
    """The pods sent to nodes that stay: pod (`namespace/name`) -> node (those sent to a new node are listed by
    their replacement); the steered drain reads it."""


class PlanCostRecord(BaseModel):
    """The cluster's cost per hour now and after a plan, and the bound no plan made now can beat
    (`core.disruption.bound`), in micro-dollars."""

    now_micros: int
    after_micros: int
    bound_micros: int
    exact: bool = False

    @property
    def gap_micros(self) -> int:
        return self.after_micros - self.bound_micros


class KeptReason(BaseModel):
    code: str
    """`core.disruption.BlockReason` value."""
    message: str
    method: str | None = None


class KeptNode(BaseModel):
    """A node a pass considered and kept, with every reason."""

    node: str
    nodeclaim: str | None = None
    nodepool: str | None = None
    reasons: list[KeptReason] = Field(default_factory=list)


class RepairRecord(BaseModel):
    """A node repair a pass made, or refused (too much of the NodePool is unhealthy)."""

    node: str
    nodeclaim: str
    nodepool: str
    condition: str
    """`<type>=<status>`, e.g. `Ready=Unknown`."""
    message: str
    refused: bool = False


class DisruptionPassRecord(BaseModel):
    """What one planning pass saw and decided: the plan activity's result, so it is in the history."""

    at: datetime
    commands: list[DisruptionCommand] = Field(default_factory=list)
    kept: list[KeptNode] = Field(default_factory=list)
    budgets: list[str] = Field(default_factory=list)
    """One line per NodePool and reason, e.g. "default/Underutilized: 1 of 10% allowed (1 disrupting)"."""
    notes: list[str] = Field(default_factory=list)
    savings_micros: int = 0
    fingerprint: str = ""
    """A digest of the commands and kept reasons, so an idle loop can skip recording an identical pass."""
    unchanged: bool = False
    """The pass matched the previous fingerprint: commands and kept are left empty and mean "as before"."""
    repairs: list[RepairRecord] = Field(default_factory=list)
    """Node repairs, made at once (no budget, no validation) or refused."""
    cost: PlanCostRecord | None = None
    """The cluster's cost now, after the plan, and the lower bound (with the repack's settings)."""
    validating: str = ""
    """The log line of the command this pass is the fresh plan of, after its validation wait (empty: a pass that
    plans). Its commands are what a plan made now would do, not a decision: the validated command is what goes
    ahead, or nothing (`core.disruption.validation`)."""


class CommandOutcome(StrEnum):
    EXECUTED = "executed"
    ABANDONED = "abandoned"
    """Validation found the cluster changed during the wait: nothing was done."""
    ROLLED_BACK = "rolled-back"
    """A replacement failed to initialize: the candidates were untainted and kept."""
    DRY_RUN = "dry-run"
    CANCELLED = "cancelled"


class SteeredDrain(BaseModel):
    """What a steered drain (a repack's, or a consolidation's) did: pods evicted one by one, where each landed
    against the plan, and why it stopped steering early, if it did (the rest was then drained as Karpenter
    drains)."""

    evicted: int = 0
    as_planned: int = 0
    elsewhere: list[str] = Field(default_factory=list)
    """"namespace/name: planned -> landed" for each pod kube-scheduler put elsewhere (the rest was planned
    again from there)."""
    gave_up: str = ""


class CommandResult(BaseModel):
    command: DisruptionCommand
    outcome: CommandOutcome
    replacements: list[str] = Field(default_factory=list)
    """Names of the NodeClaims launched to replace the candidates."""
    detail: str = ""
    steered: SteeredDrain | None = None
    """The command's steered drain: a repack's, or a consolidation's while the repack is on (None for other
    commands, and for those before it existed)."""


class DisruptionStatus(BaseModel):
    """The `plan` query of a disruption workflow: the latest plan and what became of each command."""

    cluster: str
    mode: DisruptionMode
    passes: int = 0
    waiting_for: str = ""
    """"confirmation", "validation", "replacements", "" when idle."""
    plan: DisruptionPassRecord | None = None
    results: list[CommandResult] = Field(default_factory=list)


class DisruptNodeClaim(BaseModel):
    """The `disrupt` signal of a NodeClaim workflow: terminate, because a disruption command chose it."""

    reason: str
    """Karpenter's disruption reason (Empty, Drifted, Underutilized, Expired)."""
    command: str = ""
    """The disruption workflow that sent it, for the NodeClaim's history."""
    method: str = ""
    """The command's `core.disruption.Method` value (drift, emptiness, ...); empty in older signals."""
    decision: str = ""
    """delete or replace; empty in older signals."""
    detail: str = ""
    """Why this NodeClaim, when the command says more than its reason (a repair: which condition, how long)."""


# ------------------------------------------------------------------------------------------ disruption (2)
# What the disruption workflow sends its activities, and what they answer.


class DisruptionPlanInput(BaseModel):
    """The plan activity's input: which pass of which workflow, and what it may plan."""

    cluster: str
    mode: DisruptionMode = DisruptionMode.AUTOMATIC
    nodepools: list[str] = Field(default_factory=list)
    spot_to_spot_consolidation: bool = False
    min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT
    repair_not_ready_seconds: float | None = None
    """Plan node repairs too, with a NotReady toleration this long; None: no repairs (validation, manual)."""
    previous_fingerprint: str = ""
    """The last recorded pass's fingerprint: an identical pass comes back `unchanged`, without its lists."""
    repack: RepackSettings | None = None
    """The repack's settings; None: Karpenter's methods alone."""
    repack_candidates: list[str] = Field(default_factory=list)
    """The candidates of a repack command being validated: the repack tries them first, together."""
    validating: str = ""
    """The log line of the command this fresh plan validates (empty: a pass that plans); the record says it too."""


class LaunchReplacementsInput(BaseModel):
    """Launch a command's replacements as NodeClaim lifecycles, named after the command (`key`) so that a
    retried activity finds the NodeClaims an earlier attempt created."""

    cluster: str
    command: DisruptionCommand
    key: str
    lifecycle: LifecycleSettings | None = None
    max_launch_candidates: int = 20


class ReplacementProgress(BaseModel):
    """Where a command's replacements are: initialized, gone (their launch failed), or still coming up."""

    initialized: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    waiting: list[str] = Field(default_factory=list)


class DisruptionEvent(BaseModel):
    """A Kubernetes Event the disruption workflow records on a Node or NodeClaim."""

    kind: str
    """Node or NodeClaim."""
    name: str
    reason: str
    """Karpenter's event reason: DisruptionBlocked, Unconsolidatable, DisruptionLaunching, ..."""
    message: str
    warning: bool = False


class TaintCandidates(BaseModel):
    """The `taint_disruption_candidates` input: the command's nodes, and the decision it executes (counted as
    `karpenter_voluntary_disruption_decisions_total`)."""

    nodes: list[str]
    decision: str = ""
    reason: str = ""
    method: str = ""


class SteeredPod(BaseModel):
    """A pod the steered drain evicted, and how to recognise its replacement: the next pod of its owner."""

    pod: str
    """`namespace/name`."""
    owner: str = ""
    """Its controller's uid ("": none, nothing comes back to wait for)."""
    known: list[str] = Field(default_factory=list)
    """The uids of the owner's pods when it was evicted: its replacement is one not among them."""
    expected: str = ""
    """The node kube-scheduler should put the replacement on."""
    planned: str = ""
    """The node the plan sent the pod to."""
    landed: str = ""
    """The node the replacement was scheduled to, once it was."""


class SteerInput(BaseModel):
    """One step of a steered drain (`core.disruption.steering`)."""

    candidates: list[str]
    """The command's nodes."""
    held: list[str]
    """The command's replacement NodeClaims: their Nodes stay cordoned but for the one the next pod goes to."""
    destinations: dict[str, str] = Field(default_factory=dict)
    """Where the plan sent each pod: a node's name, or a replacement NodeClaim's."""
    awaiting: SteeredPod | None = None
    """The pod evicted last, whose replacement the step first waits for."""
    settle_seconds: float = 10.0
    """How long the step waits for a replacement to be scheduled before it answers `waiting`."""


class SteerStep(BaseModel):
    """What a step of the steered drain did."""

    landed: SteeredPod | None = None
    """The awaited pod, its replacement scheduled."""
    evicted: SteeredPod | None = None
    """The pod evicted by this step (its replacement awaited by the next)."""
    waiting: str = ""
    """Why nothing could be evicted yet (a replacement not scheduled, a PodDisruptionBudget): try again."""
    done: bool = False
    """No pod is left to steer."""
    problem: str = ""
    """Why the rest cannot be steered: the drain goes on as Karpenter's."""


class DisruptionActivity(StrEnum):
    """The disruption workflow's activities besides `ActivityName.PLAN_DISRUPTION`."""

    TAINT_CANDIDATES = "taint_disruption_candidates"
    UNTAINT_CANDIDATES = "untaint_disruption_candidates"
    LAUNCH_REPLACEMENTS = "launch_disruption_replacements"
    REPLACEMENT_PROGRESS = "disruption_replacement_progress"
    RECORD_EVENTS = "record_disruption_events"
    STEER_DRAIN = "steer_repack_drain"
    RELEASE_HELD = "release_repack_nodes"


# ----------------------------------------------------------------------------------------------- maintenance
# The scheduled maintenance workflows (workflows/maintenance.py): the catalog refresh, which replaces the
# worker's VM sizes and prices with live ones from the Resource SKUs and Retail Prices APIs, and garbage
# collection of the cluster's leaked VMs and NICs and of NodeClaims whose VM is gone.


class MaintenanceActivity(StrEnum):
    """The maintenance workflows' activities."""

    REFRESH_CATALOG = "refresh_catalog"
    COLLECT_GARBAGE = "collect_garbage"
    RECONCILE_NODECLASS_STATUS = "reconcile_nodeclass_status"


class CatalogOrigin(StrEnum):
    """Where the VM sizes and prices a worker plans and launches with came from."""

    SHIPPED = "shipped"
    """The snapshot shipped as package data (until a live refresh succeeds, or after live calls failed)."""
    LIVE = "live"
    """The Resource SKUs and Retail Prices APIs, at `refreshed_at`."""


class CatalogRefreshInput(BaseModel):
    cluster: str
    timeout_seconds: float = 300.0
    """For the whole refresh: every page of both APIs (the Retail Prices API pages 1,000 items at a time)."""
    heartbeat_seconds: float = 10.0
    """The activity heartbeats every second: a worker that died with it is noticed this long after."""


class CatalogRefreshResult(BaseModel):
    """What one refresh did: replaced the catalog's sizes (`refreshed`) and prices (`prices_refreshed`) with live
    ones, or kept those in use and why."""

    region: str
    refreshed: bool
    origin: CatalogOrigin
    """Of the catalog in use after the refresh."""
    refreshed_at: datetime | None = None
    """When the catalog in use was built from live data (None: the shipped snapshot)."""
    skus: int = 0
    """VM sizes in the catalog in use."""
    live_on_demand_prices: int = 0
    live_spot_prices: int = 0
    failure: str | None = None
    """What failed, when the refresh kept the sizes or prices in use."""
    prices_refreshed: bool = False
    """Whether live prices were read (never in a cloud without the Retail Prices API)."""
    prices: str = ""
    """The prices in use after the refresh, e.g. `the shipped westeurope prices of 2026-06-18`."""


class GarbageCollectionInput(BaseModel):
    cluster: str
    grace_seconds: float = 300.0
    """A VM with no NodeClaim is left alone this long after its creation (the provider's 5 minutes): its
    NodeClaim may not have its providerID yet."""
    timeout_seconds: float = 300.0
    heartbeat_seconds: float = 10.0
    """The activity heartbeats every second: a worker that died with it is noticed this long after."""


class NodeClassStatusInput(BaseModel):
    cluster: str
    timeout_seconds: float = 120.0
    heartbeat_seconds: float = 10.0
    """The activity heartbeats every second: a worker that died with it is noticed this long after."""


class NodeClassStatusResult(BaseModel):
    """Per AKSNodeClass, whether it is Ready, and which statuses were written."""

    ready: list[str] = Field(default_factory=list)
    not_ready: dict[str, str] = Field(default_factory=dict)
    """AKSNodeClass to the reason and message of its Ready=False."""
    written: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    """One line per AKSNodeClass whose status could not be computed or written; the next run tries again."""


class GarbageCollectionResult(BaseModel):
    """What one garbage collection removed, by name, and what it failed to remove."""

    instances: list[str] = Field(default_factory=list)
    """NodeClaim names of the VMs deleted (with their NICs and disks)."""
    nodes: list[str] = Field(default_factory=list)
    nics: list[str] = Field(default_factory=list)
    nodeclaims: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    """One line per deletion that failed; the next run tries again."""
