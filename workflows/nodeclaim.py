"""The life of one NodeClaim, as a durable workflow: launch, register, initialize, run, terminate.

One workflow per NodeClaim (id `nodeclaim/<name>`). It follows Karpenter's lifecycle controllers: a launch
falls through the offerings in the provider's order when capacity or quota runs out; a node that does not
register within the TTL is cleaned up; termination taints, drains in Karpenter's order (honouring
PodDisruptionBudgets until the terminationGracePeriod runs out), deletes the instance, the Node and finally
the NodeClaim. The controller's signals wake it; a slow poll covers events it missed.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

# Passed through, as everything the lifecycle imports but itself: the sandbox runs only this module afresh for
# every NodeClaim it starts or replays.
with workflow.unsafe.imports_passed_through():
    from core import summaries
    from core.api.nodeclaim import INSUFFICIENT_CAPACITY_ERROR, LAUNCH_FAILED
    from core.errors import OFFERING_ERROR_KINDS, ErrorKind
    from core.messages import (
        ActivityName,
        ConditionUpdate,
        DeletionRequested,
        DisruptNodeClaim,
        DrainInput,
        DrainResult,
        InitializeInput,
        Interruption,
        LaunchFailure,
        LaunchInput,
        LaunchResult,
        LifecycleInput,
        LifecycleStatus,
        NodeEvent,
        NodeLeaving,
        NodeState,
        OfferingChoice,
        Phase,
        PodsPending,
        RegisterInput,
        TerminationReason,
        TerminationStart,
        UnavailableOffering,
        VolumeDetachmentInput,
        VolumeDetachmentResult,
    )
    from workflows import search_attributes as attributes
    from workflows.conventions import RETRY, log, log_error
    from workflows.ids import provisioner_id

EXTENDED_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")
LOCAL_STEPS = "register-initialize-local"
"""The patch under which registration and initialization run as local activities (histories from before
it take the activity path)."""
LOCAL_ACTIVITIES = (ActivityName.REGISTER_NODECLAIM, ActivityName.INITIALIZE_NODECLAIM)
"""What the lifecycle runs as local activities: in the worker that runs the workflow, which must have them."""
BEGIN_TERMINATION = "begin-termination"
"""Patch: termination starts by marking the NodeClaim deleting and telling the provisioner (histories recorded
before it tainted the Node only)."""
CLUSTER_PROVISIONER = "cluster-provisioner"
"""Patch: a lifecycle started without a provisioner (a disruption's replacement) tells the cluster's."""
WAKE_FROM_STEP = "wake-from-step"
"""Patch: a wait after registration's or initialization's step ends on a signal that arrived during the step
(the Node's change it waits for can land while the step reads the Node); histories from before it waited for
the next one."""
VOLUME_DETACHMENT = "volume-detachment"
"""Patch: after the drain, termination waits for the node's VolumeAttachments (histories from before it
deleted the instance right after the drain)."""
POLL_BACKOFF = "poll-backoff"
"""Patch: while registration or initialization waits, each look that no signal woke waits twice as long as the
one before, up to `poll_max_seconds` (histories from before it looked every `poll_seconds`)."""
SPOT_INTERRUPTION = "SpotInterruption"
"""Why an interrupted offering is unavailable, in the provisioner's cache."""
LAUNCH_LIVENESS = "launch-liveness"
"""Patch: Karpenter's launch liveness. Every attempt of the launch shares one deadline (`launch_timeout_seconds`
from the start), after which the NodeClaim is deleted; a failure that is not capacity or quota (an invalid
request, an image, a permission) deletes it with Launched=False and rules its offering out for the NodeClass; a
failed launch has the provisioner plan its pods again; a Node that registers for a NodeClaim that ended before
registering is deleted with its instance. Histories from before it gave each attempt the whole timeout, failed
the workflow on such errors, and left such Nodes."""
CURRENT = "lifecycle-2026-11"
"""Patch: a lifecycle that starts under it takes every patch in `CURRENT_PATCHES` as applied without asking, so its
history records one marker where it recorded one per patch (the SDK also upserts `TemporalChangeVersion` for each
marker: an event and a visibility write each). Histories from before it ask each patch, as they did. A patch
added later is not in `CURRENT_PATCHES`: it is asked as usual."""
CURRENT_PATCHES = frozenset(
    {
        LOCAL_STEPS,
        BEGIN_TERMINATION,
        CLUSTER_PROVISIONER,
        WAKE_FROM_STEP,
        VOLUME_DETACHMENT,
        POLL_BACKOFF,
        LAUNCH_LIVENESS,
    }
)
LAUNCH_TIMEOUT = "LaunchTimeout"
ASYNC_PROVISIONING_ERROR = "AsyncProvisioningError"
"""The AKS provider's event on a NodeClaim whose instance could not be created (it deletes the NodeClaim)."""
EVENT_MESSAGE_LENGTH = 500
"""The AKS provider cuts its events' error text to this many characters."""


def disruption_reason(reason: str) -> TerminationReason:
    """A disruption command's reason as the lifecycle's termination reason (a NodeClaim deletion when a newer
    planner sends one this code does not know)."""
    try:
        return TerminationReason(reason)
    except ValueError:
        return TerminationReason.NODECLAIM_DELETED


# Outside the SDK's sandbox, as the worker runs it by default: every lifecycle it starts or replays would import
# this module afresh in a sandbox of its own and enter it for every payload, about a fifth of a busy worker's
# CPU. The tests and the replayer run it inside the sandbox (`build_worker(sandbox_lifecycles=True)`), where a
# call that could not replay fails; `NODEWRIGHT_WORKER_LIFECYCLE_SANDBOX=true` runs it there in production too.
@workflow.defn(name="NodeClaim", sandboxed=False)
class NodeClaimWorkflow:
    @workflow.init
    def __init__(self, request: LifecycleInput) -> None:
        self._claim = request.nodeclaim
        self._settings = request.settings
        self._provisioner_given = request.provisioner_workflow_id
        self._cluster = request.cluster
        self._status = LifecycleStatus(name=request.nodeclaim.name, phase=Phase.LAUNCHING)
        self._node: str | None = None
        self._deletion: str | None = None
        """Why it is being terminated, in a sentence (the first request wins)."""
        self._termination: TerminationReason | None = None
        self._deletion_requested: datetime | None = None
        self._disruption: DisruptNodeClaim | None = None
        self._interruption: Interruption | None = None
        self._interruption_handled = False
        self._events = 0
        self._current = False
        """Whether this lifecycle started under `CURRENT` (asked first thing in `run`)."""
        self._tried = 0
        """How many of the NodeClaim's launch candidates the launch has tried."""
        self._offering: OfferingChoice | None = None
        """The offering of the last launch that returned."""
        self._creating = False
        """Whether that launch returned while its instance was still being created."""
        self._events_at_launch = 0
        """The signals counted when that launch started (the Node's may come while it runs)."""

    @workflow.signal
    def node_event(self, event: NodeEvent) -> None:
        self._node = self._node or event.node
        if event.deleting:
            self._request_deletion(TerminationReason.NODE_DELETED, summaries.node_deleted(event.node))
        self._events += 1

    @workflow.signal
    def delete(self, request: DeletionRequested) -> None:
        name = self._claim.name
        if request.reason is TerminationReason.GARBAGE_COLLECTED:
            self._request_deletion(request.reason, summaries.garbage_collected(name))
        else:
            self._request_deletion(request.reason, summaries.nodeclaim_deleted(name, request.by))
        self._events += 1

    @workflow.signal
    def disrupt(self, request: DisruptNodeClaim) -> None:
        """A disruption command chose this NodeClaim: terminate it as a deletion would, with the reason."""
        if self._deletion is None:
            self._disruption = request
        self._request_deletion(disruption_reason(request.reason), summaries.disrupted(request))
        self._events += 1

    @workflow.signal
    def interrupt(self, notice: Interruption) -> None:
        """Azure is evicting the VM: terminate now, draining by the notice's deadline (the first notice counts,
        and it shortens a termination already under way)."""
        if self._interruption is None:
            self._interruption = notice
        self._request_deletion(TerminationReason.INTERRUPTED, summaries.interrupted(notice))
        self._events += 1

    def _request_deletion(self, reason: TerminationReason, why: str) -> None:
        if self._deletion is None:
            self._deletion, self._termination = why, reason
            self._deletion_requested = workflow.now()

    @workflow.query
    def status(self) -> LifecycleStatus:
        return self._status

    @workflow.run
    async def run(self, request: LifecycleInput) -> LifecycleStatus:
        self._current = workflow.patched(CURRENT)
        self._publish(Phase.LAUNCHING)
        if await self._launch_and_register() and await self._initialize():
            await self._run()
        if self._status.phase is not Phase.FAILED:
            await self._terminate()
        workflow.set_current_details(f"{self._status.phase.value}: {self._status.reason}")
        return self._status

    # -------------------------------------------------------------------------------------------- phases

    async def _launch_and_register(self) -> bool:
        """Launch, then wait for the Node to register. An instance whose create fails for capacity or quota
        after its launch returned (the launch waits for the create only so long) moves the launch on to the next
        offering, as a launch that failed at once does."""
        while await self._launch():
            registered = await self._register()
            if registered is not None:
                return registered
        return False

    async def _launch(self) -> bool:
        claim = self._claim
        liveness = self._patched(LAUNCH_LIVENESS)
        timeout = timedelta(seconds=self._settings.launch_timeout_seconds)
        deadline = workflow.info().start_time + timeout
        candidates = claim.launch_candidates
        while self._tried < len(candidates):
            offering = candidates[self._tried]
            self._tried += 1
            if self._deletion is not None:
                return False
            left = deadline - workflow.now() if liveness else timeout
            if left <= timedelta(0):
                return await self._launch_timed_out(None)
            workflow.set_current_details(
                f"launching {offering.instance_type} in {offering.zone} ({offering.capacity_type})"
            )
            self._events_at_launch = self._events
            try:
                launched = await workflow.execute_activity(
                    ActivityName.LAUNCH_NODECLAIM,
                    LaunchInput(
                        nodeclaim=claim.name,
                        nodepool=claim.nodepool,
                        offering=offering,
                        labels=claim.labels,
                        taints=claim.taints,
                        startup_taints=claim.startup_taints,
                    ),
                    result_type=LaunchResult,
                    start_to_close_timeout=self._attempt_timeout(left),
                    schedule_to_close_timeout=left if liveness else None,
                    heartbeat_timeout=timedelta(seconds=self._settings.launch_heartbeat_seconds),
                    retry_policy=RETRY,
                    summary=summaries.launch_summary(offering),
                )
            except ActivityError as error:
                # The attempt found the NodeClaim gone or deleting (its deletion's signal may still be on the way).
                if _kind(error) == ErrorKind.NODECLAIM_DELETED:
                    self._request_deletion(
                        TerminationReason.NODECLAIM_DELETED, summaries.nodeclaim_deleted(claim.name, "")
                    )
                    return False
                failure = self._offering_failure(error, offering)
                if failure is None and not liveness:
                    raise
                if failure is None and _timed_out(error):
                    return await self._launch_timed_out(error)
                if failure is None:
                    return await self._launch_error(error, offering)
                await self._offering_failed(failure)
                continue
            await self._launched(launched, offering)
            return True
        return await self._fail_launch()

    async def _launched(self, launched: LaunchResult, offering: OfferingChoice) -> None:
        self._offering, self._creating = offering, launched.creating
        status = self._status
        status.instance_type, status.zone, status.capacity_type = (
            launched.instance_type,
            launched.zone,
            launched.capacity_type,
        )
        status.provider_id = launched.provider_id
        log(
            "launched nodeclaim",
            NodeClaim=self._claim.name,
            **{"provider-id": launched.provider_id, "instance-type": launched.instance_type},
            **{
                "zone": launched.zone,
                "capacity-type": launched.capacity_type,
                "allocatable": launched.allocatable,
            },
        )
        self._publish(Phase.REGISTERING)

    async def _fail_launch(self) -> bool:
        """Every offering ran out of capacity or quota (each is ruled out already): delete the NodeClaim."""
        message = summaries.launch_failed(self._status.launch_failures)
        self._ended(TerminationReason.LAUNCH_FAILED, message)
        await self._condition(
            "Launched",
            "False",
            reason=LAUNCH_FAILED,
            message=message,
            event_reason=INSUFFICIENT_CAPACITY_ERROR,
            event_message=f"NodeClaim {self._claim.name} event: {summaries.truncated(message)}",
            event_type="Warning",
        )
        log("failed launching nodeclaim", NodeClaim=self._claim.name, error=message)
        await self._delete_nodeclaim()
        if self._patched(LAUNCH_LIVENESS):
            await self._plan_again()
        self._publish(Phase.FAILED)
        return False

    async def _launch_error(
        self, error: ActivityError | ApplicationError, offering: OfferingChoice, made: bool = False
    ) -> bool:
        """A launch failed for a reason of its own (not capacity or quota: an invalid request, an image the size
        cannot boot, a permission), which no retry mends: Launched=False with the error, a warning on the NodeClaim
        and its NodePool, the offering ruled out for this NodeClass for a while, the NodeClaim deleted and its
        pods planned again (elsewhere). `made`: the instance's create failed after the launch returned, and what
        it made is deleted first (the AKS provider's asynchronous failure)."""
        claim = self._claim
        cause = _failure(error)
        kind = (cause.type if isinstance(cause, ApplicationError) else None) or type(cause or error).__name__
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or error.message)
        failure = LaunchFailure(
            instance_type=offering.instance_type,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            kind=kind,
            message=message,
        )
        self._status.launch_failures.append(failure)
        self._ended(TerminationReason.LAUNCH_FAILED, summaries.launch_error(failure))
        await self._condition(
            "Launched",
            "False",
            reason=LAUNCH_FAILED,
            message=message,
            event_reason=ASYNC_PROVISIONING_ERROR,
            event_type="Warning",
            event_message=f"Failed to register: {summaries.truncated(message, EVENT_MESSAGE_LENGTH)}",
            nodepool_event=True,
            disrupted="async_provisioning",
        )
        log_error(
            "failed launching nodeclaim",
            NodeClaim=claim.name,
            **{"instance-type": offering.instance_type, "zone": offering.zone},
            **{"capacity-type": offering.capacity_type, "error": message},
        )
        await self._report_unavailable(
            offering.instance_type, offering.zone, offering.capacity_type, kind, claim.nodeclass
        )
        if made:
            await self._delete_instance()
        await self._delete_nodeclaim()
        await self._plan_again()
        self._publish(Phase.FAILED)
        return False

    async def _launch_timed_out(self, error: ActivityError | None) -> bool:
        """Karpenter's liveness: not launched within the launch timeout. Whatever the launch made goes, then the
        NodeClaim, and its pods are planned again."""
        timeout = self._settings.launch_timeout_seconds
        message = summaries.launch_timed_out(timeout)
        last = _last_error(error)
        if last:
            message += f"; last error: {last}"
        self._ended(TerminationReason.LAUNCH_TIMEOUT, message)
        await self._condition(
            "Launched",
            "False",
            reason=LAUNCH_TIMEOUT,
            message=message,
            event_reason=LAUNCH_TIMEOUT,
            event_type="Warning",
            disrupted="launch_timeout",
        )
        log(
            "terminating due to timeout",
            NodeClaim=self._claim.name,
            timeout=summaries.duration(timeout),
            reason="launch_timeout",
        )
        await self._delete_instance()
        await self._delete_nodeclaim()
        await self._plan_again()
        self._publish(Phase.FAILED)
        return False

    async def _register(self) -> bool | None:
        """Whether the Node registered (False: the lifecycle ended); None when the instance's create failed for
        capacity or quota after the launch returned, and the next offering is to be launched."""
        ttl = timedelta(seconds=self._settings.registration_ttl_seconds)
        deadline = workflow.now() + ttl
        workflow.set_current_details(
            f"waiting up to {ttl} for a Node with providerID {self._status.provider_id}"
        )
        registered: str | None = None
        provider_id = self._status.provider_id or ""
        local = self._patched(LOCAL_STEPS)
        backstop = self._poll()
        woken = True
        # An instance still being created has no Node yet: the first look waits (the launch wrote Registered),
        # and a signal since the launch started wakes it.
        creating = self._creating
        vm = summaries.vm_name(provider_id)
        while self._deletion is None:
            seen = self._events_at_launch if creating else self._events_seen()
            if not creating:
                try:
                    registered = await self._look_for_node(provider_id, local, woken)
                except (ActivityError, ApplicationError) as error:
                    failure = _failure(error)
                    if not (isinstance(failure, ApplicationError) and failure.non_retryable):
                        raise
                    return await self._create_failed(failure)
                if registered is not None or workflow.now() >= deadline:
                    break
            what = (
                f"for VM {vm} to be created and its Node to register"
                if creating
                else f"for the Node of VM {vm} to register"
            )
            creating = False
            woken = await self._wait(min(backstop, deadline - workflow.now()), what, seen)
            backstop = self._next_poll(backstop, woken)
        if self._deletion is not None:
            return False
        if registered is None:
            message = summaries.registration_timed_out(provider_id, ttl.total_seconds())
            self._ended(TerminationReason.REGISTRATION_TIMEOUT, message)
            await self._condition(
                "Registered",
                "False",
                reason="RegistrationTimeout",
                message=message,
                event_reason="RegistrationTimeout",
                event_type="Warning",
            )
            log(
                "terminating due to timeout",
                NodeClaim=self._claim.name,
                timeout=summaries.duration(ttl.total_seconds()),
                reason="registration_timeout",
            )
            await self._delete_instance()
            await self._delete_late_node()
            await self._delete_nodeclaim()
            self._publish(Phase.FAILED)
            return False
        self._node = self._status.node = registered
        self._status.phase = Phase.INITIALIZING
        log("registered nodeclaim", NodeClaim=self._claim.name, Node=registered)
        return True

    async def _look_for_node(self, provider_id: str, local: bool, woken: bool) -> str | None:
        """Registration's look: the Node's name once it registered it, else None. A look that no signal woke also
        asks whether the instance's create failed (its only error for good, an `ApplicationError`)."""
        return await self._activity(
            ActivityName.REGISTER_NODECLAIM,
            RegisterInput(
                nodeclaim=self._claim.name,
                provider_id=provider_id,
                labels=self._claim.labels,
                node=self._node,
                launched=None if woken else self._offering,
            ),
            str,
            summaries.register_summary(provider_id),
            local=local,
        )

    async def _create_failed(self, error: ApplicationError) -> bool | None:
        """The instance's create failed after its launch returned (registration's look said so, the only error
        it raises for good): for capacity or quota, rule the offering out and launch the next one (None); for
        anything else, end the lifecycle as a launch error does."""
        offering = self._offering
        assert offering is not None
        failure = self._offering_failure(error, offering)
        if failure is None:
            return await self._launch_error(error, offering, made=True)
        await self._offering_failed(failure)
        self._publish(Phase.LAUNCHING)
        return None

    async def _offering_failed(self, failure: LaunchFailure) -> None:
        """An offering had no capacity or quota: record it, and rule it out of the provisioner's next plans."""
        self._status.launch_failures.append(failure)
        log(
            "failed launching nodeclaim, trying the next offering",
            NodeClaim=self._claim.name,
            **{"instance-type": failure.instance_type, "zone": failure.zone},
            **{"capacity-type": failure.capacity_type, "error": failure.message},
        )
        await self._report_unavailable(
            failure.instance_type, failure.zone, failure.capacity_type, failure.kind
        )

    async def _initialize(self) -> bool:
        assert self._node is not None
        startup = [taint.key for taint in self._claim.startup_taints]
        extended = [name for name in self._claim.requests if name.startswith(EXTENDED_RESOURCE_PREFIXES)]
        request = InitializeInput(
            nodeclaim=self._claim.name, node=self._node, startup_taints=startup, requested_resources=extended
        )
        local = self._patched(LOCAL_STEPS)
        backstop = self._poll()
        while self._deletion is None:
            seen = self._events_seen()
            state = await self._activity(
                ActivityName.INITIALIZE_NODECLAIM,
                request,
                NodeState,
                summaries.initialize_summary(self._node),
                local=local,
            )
            if not state.exists or state.deleting:
                self._request_deletion(TerminationReason.NODE_DELETED, summaries.node_deleted(self._node))
                break
            if state.initialized:
                log("initialized nodeclaim", NodeClaim=self._claim.name, Node=self._node)
                self._publish(Phase.RUNNING)
                return True
            taints = state.startup_taints_remaining + state.ephemeral_taints_remaining
            waiting = "Ready" if not state.ready else f"taints {taints}"
            workflow.set_current_details(f"waiting for node {self._node}: {waiting}")
            woken = await self._wait(backstop, f"for Node {self._node}: {waiting}", seen)
            backstop = self._next_poll(backstop, woken)
        return False

    async def _run(self) -> None:
        workflow.set_current_details(f"running as node {self._node}")
        expire = self._claim.expire_after_seconds or 0.0
        timeout = summary = None
        if expire:
            timeout = timedelta(seconds=expire) - (workflow.now() - workflow.info().start_time)
            summary = summaries.expiry_summary(timeout.total_seconds(), expire)
        try:
            await workflow.wait_condition(
                lambda: self._deletion is not None, timeout=timeout, timeout_summary=summary
            )
        except TimeoutError:
            self._request_deletion(TerminationReason.EXPIRED, summaries.expired(expire))
            log("deleting expired nodeclaim", NodeClaim=self._claim.name, expireAfter=f"{expire}s")

    async def _terminate(self) -> None:
        self._publish(Phase.TERMINATING)
        self._ended(self._termination or TerminationReason.NODECLAIM_DELETED, self._deletion or "")
        workflow.set_current_details(f"terminating: {self._deletion}")
        if self._disruption is not None:
            # Karpenter's message is the reason itself.
            await self._disrupted(self._disruption.reason, self._disruption.reason)
        await self._handle_interruption()
        node = self._node
        if node is not None and await self._begin_termination(node):
            log("tainted node", Node=node, taint="karpenter.sh/disrupted:NoSchedule")
            await self._drain(node)
            if self._patched(VOLUME_DETACHMENT):
                await self._await_volume_detachment(node)
        await self._delete_instance()
        if node is not None:
            await self._activity(ActivityName.DELETE_NODE, node, summary=summaries.delete_node_summary(node))
            log("deleted node", Node=node)
        else:
            await self._delete_late_node()
        await self._delete_nodeclaim()
        self._publish(Phase.TERMINATED)

    async def _disrupted(self, reason: str, message: str) -> None:
        """Record why, as Karpenter does: the DisruptionReason condition and our search attribute."""
        workflow.upsert_search_attributes([attributes.DISRUPTION_REASON.value_set(reason)])
        await self._condition("DisruptionReason", "True", reason=reason, message=message)

    async def _handle_interruption(self) -> None:
        """Once: rule the interrupted offering out for new launches and, when the notice ended this lifecycle,
        record it as the NodeClaim's disruption reason."""
        notice = self._interruption
        if notice is None or self._interruption_handled:
            return
        self._interruption_handled = True
        status = self._status
        log(
            "received spot interruption",
            NodeClaim=self._claim.name,
            Node=notice.node,
            **{"event-id": notice.event_id, "not-before": str(notice.not_before or "now")},
        )
        if status.instance_type and status.zone and status.capacity_type:
            await self._report_unavailable(
                status.instance_type, status.zone, status.capacity_type, SPOT_INTERRUPTION
            )
        if self._termination is TerminationReason.INTERRUPTED:
            await self._disrupted(TerminationReason.INTERRUPTED.value, summaries.interrupted(notice))

    async def _begin_termination(self, node: str) -> bool:
        """Mark the NodeClaim deleting and taint its Node, then have the provisioner plan for the Node's pods
        while it drains; False when the Node is gone."""
        if not self._patched(BEGIN_TERMINATION):
            return bool(
                await self._activity(
                    ActivityName.TAINT_FOR_TERMINATION, node, bool, summaries.taint_summary(node)
                )
            )
        start = TerminationStart(
            nodeclaim=self._claim.name,
            node=node,
            termination_grace_period_seconds=self._claim.termination_grace_period_seconds,
            # Karpenter's node repair annotates the NodeClaim to be drained at once.
            termination_time=self._drain_deadline()[0]
            if self._termination is TerminationReason.UNHEALTHY
            else None,
        )
        tainted = await self._activity(
            ActivityName.BEGIN_TERMINATION,
            start,
            bool,
            summaries.begin_termination_summary(self._claim.name, node),
        )
        if tainted:  # a provisioner between runs plans the pods when they turn pending
            leaving = NodeLeaving(node=node, nodeclaim=self._claim.name)
            await self._tell_provisioner("node_leaving", leaving, f"{node} is leaving")
        return bool(tainted)

    def _drain_deadline(self) -> tuple[datetime | None, str]:
        """When the drain stops asking and deletes what is left, and why: the interruption's deadline, now for a
        repair, else the terminationGracePeriod from the moment deletion was asked for (Karpenter's)."""
        requested = self._deletion_requested or workflow.now()
        if self._interruption is not None:
            return self._interruption.not_before or requested, "the Spot eviction deadline"
        if self._termination is TerminationReason.UNHEALTHY:
            return requested, "node repair"
        grace = self._claim.termination_grace_period_seconds
        if grace is None:
            return None, ""
        return requested + timedelta(seconds=grace), "terminationGracePeriod elapsed"

    async def _drain(self, node: str) -> None:
        while True:
            await self._handle_interruption()  # a notice may arrive mid-drain
            deadline, why = self._drain_deadline()
            force = deadline is not None and workflow.now() >= deadline
            result = await self._activity(
                ActivityName.DRAIN_NODE,
                DrainInput(
                    node=node,
                    force=force,
                    nodeclaim=self._claim.name,
                    min_drain_seconds=self._settings.min_drain_seconds,
                ),
                DrainResult,
                summaries.drain_summary(node, force, why),
            )
            if result.remaining == 0 and not result.settle_seconds:
                return
            if result.settle_seconds:
                left = "no pod left, looking again for pods bound before the taint"
            elif result.blocked:
                pod, reason = next(iter(result.blocked.items()))
                left = f"{len(result.blocked)} eviction(s) blocked, e.g. {pod}: {reason}"
            else:
                left = f"{result.remaining} pod(s) left"
            workflow.set_current_details(f"draining {node}: {left}")
            retry = timedelta(seconds=max(self._settings.drain_retry_seconds, result.settle_seconds))
            if deadline is not None and not force:
                retry = max(min(retry, deadline - workflow.now()), timedelta(milliseconds=100))
            await self._drain_pause(retry, f"to drain {node} again ({left})")

    async def _await_volume_detachment(self, node: str) -> None:
        """Wait until the node's volumes are detached before its instance goes (Karpenter waits for the
        VolumeAttachments of the drained pods), or until the drain deadline ends the wait."""
        announced: list[str] = []
        while True:
            deadline, _ = self._drain_deadline()
            elapsed = deadline is not None and workflow.now() >= deadline
            result = await self._activity(
                ActivityName.AWAIT_VOLUME_DETACHMENT,
                VolumeDetachmentInput(
                    nodeclaim=self._claim.name, node=node, grace_elapsed=elapsed, announced=announced
                ),
                VolumeDetachmentResult,
                summaries.volume_detachment_summary(node, elapsed),
            )
            if result.abandoned:
                log(
                    "terminationGracePeriod elapsed, not waiting for volume detachment",
                    Node=node,
                    volumeattachments=", ".join(result.abandoned),
                )
            if not result.pending:
                return
            announced = result.pending
            left = f"{len(result.pending)} volume attachment(s), e.g. {result.pending[0]}"
            workflow.set_current_details(f"waiting for {left} to detach from {node}")
            retry = timedelta(seconds=self._settings.drain_retry_seconds)
            if deadline is not None:
                retry = max(min(retry, deadline - workflow.now()), timedelta(milliseconds=100))
            await self._drain_pause(retry, f"for {left} to detach from {node}")

    async def _drain_pause(self, pause: timedelta, what: str) -> None:
        """Sleep between drain passes; an interruption notice cuts it short (it may bring the deadline forward)."""
        if not self._patched(BEGIN_TERMINATION):
            await workflow.sleep(pause, summary=summaries.wait_summary(pause.total_seconds(), what))
            return
        noticed = self._interruption is not None
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: (self._interruption is not None) != noticed,
                timeout=pause,
                timeout_summary=summaries.wait_summary(pause.total_seconds(), what),
            )

    # ------------------------------------------------------------------------------------------- helpers

    def _provisioner(self) -> str | None:
        """The provisioner to tell about unavailable offerings and leaving nodes: the one that planned this
        NodeClaim, else (a disruption's replacement) the cluster's. Histories from before the patch told none."""
        if self._provisioner_given is not None:
            return self._provisioner_given
        return provisioner_id(self._cluster) if self._patched(CLUSTER_PROVISIONER) else None

    def _attempt_timeout(self, left: timedelta) -> timedelta:
        """One launch attempt's timeout: the attempt timeout when set, never past the launch's deadline."""
        attempt = self._settings.launch_attempt_timeout_seconds
        return left if attempt is None else min(left, timedelta(seconds=attempt))

    def _activity_timeout(self) -> timedelta:
        return timedelta(seconds=self._settings.activity_timeout_seconds)

    def _poll(self) -> timedelta:
        return timedelta(seconds=self._settings.poll_seconds)

    def _next_poll(self, last: timedelta, woken: bool) -> timedelta:
        """How long the next wait for the Node may last: `poll_seconds` after a signal, else twice the last wait,
        up to `poll_max_seconds` (the signals wake a waiting lifecycle; the poll only covers one that was lost)."""
        if woken or not self._patched(POLL_BACKOFF):
            return self._poll()
        longest = max(self._poll(), timedelta(seconds=self._settings.poll_max_seconds))
        return min(last * 2, longest)

    def _events_seen(self) -> int | None:
        """The signals counted before a step, for the wait after it (None in histories from before the patch)."""
        return self._events if self._patched(WAKE_FROM_STEP) else None

    async def _wait(self, timeout: timedelta, what: str, since: int | None = None) -> bool:
        """Wait for a signal (True) or the timeout (False); `what` the wait is for, as its timer's summary. A
        signal counts from `since` (the count before the step that preceded the wait), else from now."""
        seen = self._events if since is None else since
        timeout = max(timeout, timedelta(seconds=1))
        try:
            await workflow.wait_condition(
                lambda: self._events != seen or self._deletion is not None,
                timeout=timeout,
                timeout_summary=summaries.wait_summary(timeout.total_seconds(), what),
            )
        except TimeoutError:
            return False
        return True

    async def _activity(
        self,
        name: ActivityName,
        argument: Any,
        result_type: type | None = None,
        summary: str | None = None,
        local: bool = False,
    ) -> Any:
        if local:
            # A few idempotent calls to the API server: run in the workflow task on the worker that has it
            # (one marker in history, no round trip through the server's task queue); a worker that dies
            # mid-call leaves the task to time out, and the next worker runs it again.
            return await workflow.execute_local_activity(
                name,
                argument,
                result_type=result_type,
                start_to_close_timeout=self._activity_timeout(),
                retry_policy=RETRY,
                summary=summary,
            )
        return await workflow.execute_activity(
            name,
            argument,
            result_type=result_type,
            start_to_close_timeout=self._activity_timeout(),
            retry_policy=RETRY,
            summary=summary,
        )

    def _ended(self, reason: TerminationReason, why: str) -> None:
        """Why the lifecycle ends, in its status (the query's answer and the result)."""
        self._status.termination_reason, self._status.reason = reason, why

    async def _condition(
        self, condition: str, value: str, reason: str = "", message: str = "", **fields: Any
    ) -> None:
        update = ConditionUpdate(
            name=self._claim.name,
            type=condition,
            status=value,
            reason=reason or condition,
            message=message,
            **fields,
        )
        summary = summaries.condition_summary(self._claim.name, condition, value, update.reason)
        await self._activity(ActivityName.UPDATE_NODECLAIM, update, bool, summary)

    async def _delete_instance(self) -> None:
        summary = summaries.delete_instance_summary(self._claim.name, self._status.provider_id)
        await self._activity(ActivityName.DELETE_INSTANCE, self._claim.name, summary=summary)

    async def _delete_late_node(self) -> None:
        """Once the instance is gone: delete the Node it registered after this lifecycle stopped waiting for one
        (the NodeClaim was deleted during its launch, or registration timed out as the Node joined)."""
        provider_id = self._status.provider_id
        if not provider_id or not self._patched(LAUNCH_LIVENESS):
            return
        summary = summaries.delete_unregistered_node_summary(provider_id)
        node = await self._activity(ActivityName.DELETE_UNREGISTERED_NODE, provider_id, summary=summary)
        if node:
            log("deleted node", Node=node)

    async def _plan_again(self) -> None:
        """Have the provisioner plan the pods this NodeClaim was for, now that it is gone (the plan takes every
        pending pod; these only wake it)."""
        pods = self._claim.pods
        if pods:
            await self._tell_provisioner(
                "pods_pending", PodsPending(pods=pods), f"{len(pods)} pod(s) are pending"
            )

    async def _delete_nodeclaim(self) -> None:
        summary = summaries.delete_nodeclaim_summary(self._claim.name)
        await self._activity(ActivityName.DELETE_NODECLAIM, self._claim.name, summary=summary)
        log("deleted nodeclaim", NodeClaim=self._claim.name)

    @staticmethod
    def _offering_failure(
        error: ActivityError | ApplicationError, offering: OfferingChoice
    ) -> LaunchFailure | None:
        cause = _failure(error)
        if isinstance(cause, ApplicationError) and cause.type in OFFERING_ERROR_KINDS:
            return LaunchFailure(
                instance_type=offering.instance_type,
                zone=offering.zone,
                capacity_type=offering.capacity_type,
                kind=cause.type or "",
                message=cause.message,
            )
        return None

    async def _report_unavailable(
        self, instance_type: str, zone: str, capacity_type: str, reason: str, nodeclass: str = ""
    ) -> None:
        """Rule the offering out of the provisioner's next plans for a while: for every NodeClass, or for
        `nodeclass` alone."""
        if self._provisioner() is None:
            return
        offering = UnavailableOffering(
            instance_type=instance_type,
            zone=zone,
            capacity_type=capacity_type,
            until=workflow.now() + timedelta(minutes=3),
            reason=reason,
            nodeclass=nodeclass,
        )
        scope = {"AKSNodeClass": nodeclass} if nodeclass else {}
        log(
            "marked offering unavailable",
            NodeClaim=self._claim.name,
            **{"instance-type": instance_type, "zone": zone},
            **{"capacity-type": capacity_type, "reason": reason},
            **scope,
        )
        # Between runs, the provisioner's next plan learns from the cloud anyway.
        await self._tell_provisioner("offering_unavailable", offering, f"{instance_type} is unavailable")

    async def _tell_provisioner(self, signal: str, argument: Any, what: str) -> None:
        """Signal the provisioner (if this lifecycle has one); one that is between runs misses it, and a
        warning says what it missed."""
        provisioner = self._provisioner()
        if provisioner is None:
            return
        try:
            await workflow.get_external_workflow_handle(provisioner).signal(signal, argument)
        except Exception:
            workflow.logger.warning("could not tell the provisioner that %s", what)

    def _patched(self, patch: str) -> bool:
        """`workflow.patched`, answered without a marker for a patch that `CURRENT` includes."""
        return (self._current and patch in CURRENT_PATCHES) or workflow.patched(patch)

    def _publish(self, phase: Phase) -> None:
        self._status.phase = phase
        status = self._status
        updates = [
            attributes.NODECLAIM.value_set(self._claim.name),
            attributes.NODEPOOL.value_set(self._claim.nodepool),
            attributes.PHASE.value_set(phase.value),
        ]
        if status.instance_type:
            updates.append(attributes.INSTANCE_TYPE.value_set(status.instance_type))
        if status.zone:
            updates.append(attributes.ZONE.value_set(status.zone))
        if status.capacity_type:
            updates.append(attributes.CAPACITY_TYPE.value_set(status.capacity_type))
        # Only what changes: a lifecycle started with its first values (`lifecycle_start`) upserts nothing at
        # start (histories started without them upsert them, as they did).
        held = workflow.info().typed_search_attributes
        updates = [update for update in updates if held.get(update.key) != update.value]
        if updates:
            workflow.upsert_search_attributes(updates)


def _kind(error: ActivityError) -> str | None:
    """The error kind an activity failed with (its `ApplicationError`'s type), if any."""
    return error.cause.type if isinstance(error.cause, ApplicationError) else None


def _failure(error: ActivityError | ApplicationError) -> BaseException | None:
    """What an activity failed with: an activity's failure comes as the `ActivityError`'s cause, a local
    activity's as its own error."""
    return error.cause if isinstance(error, ActivityError) else error


def _timed_out(error: ActivityError) -> bool:
    """Whether the launch ran out of time (an attempt's timeout, or no time left for another retry)."""
    return isinstance(error.cause, ActivityTimeoutError) or error.retry_state is RetryState.TIMEOUT


def _last_error(error: ActivityError | None) -> str:
    """The message of the last failure behind a timed-out launch, if one failed before time ran out."""
    cause: BaseException | None = error.cause if error is not None else None
    while cause is not None:
        if isinstance(cause, ApplicationError):
            return cause.message
        cause = cause.__cause__
    return ""
