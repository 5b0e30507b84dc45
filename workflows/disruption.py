"""Disruption as a durable workflow: Karpenter's disruption loop, and manual consolidation.

Automatic (`disruption/<cluster>`): every `poll_seconds` a pass plans on a fresh snapshot (emptiness, drift,
consolidation, expiration, within budgets and PDBs) and starts the first command. Emptiness and consolidation
commands must still hold after `validation_seconds` (a fresh plan must choose the same candidates the same
way, the replacement no dearer), else they are abandoned, as Karpenter validates them; what goes ahead is the
command as planned (the fresh plan only checks it, and its record names the command it validates). A command
taints its candidates, launches the replacements as NodeClaim lifecycles and waits until they are initialized,
then signals each candidate's lifecycle to terminate; a replacement that fails rolls the command back (candidates
untainted, other replacements deleted). Passes that find what the previous idle pass found are recorded as
unchanged, so an idle loop's history stays small. It continues as new every so many passes.

Manual (`consolidation/<cluster>/<time>`, `nodewright consolidate`): one pass of the consolidation methods
only; a dry run ends there; otherwise it waits for `confirm`, then executes the commands one after another,
each validated against a fresh plan first. The `plan` query answers in both modes, and the manual workflow
returns the same status as its result, so the plan stays readable after it finished.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.conventions import RETRY, log

with workflow.unsafe.imports_passed_through():
    from core import summaries
    from core.disruption.commands import EXPIRED, BlockReason, Method
    from core.disruption.methods import BUFFER_PODS_SUFFIX
    from core.disruption.validation import validate
    from core.messages import (
        ActivityName,
        CommandOutcome,
        CommandResult,
        DeletionRequested,
        DisruptionActivity,
        DisruptionCommand,
        DisruptionEvent,
        DisruptionInput,
        DisruptionMode,
        DisruptionPassRecord,
        DisruptionPlanInput,
        DisruptionStatus,
        DisruptNodeClaim,
        KeptNode,
        LaunchReplacementsInput,
        RepairRecord,
        ReplacementProgress,
        SteeredDrain,
        SteerInput,
        SteerStep,
        TaintCandidates,
        TerminationReason,
    )
    from workflows import search_attributes as attributes
    from workflows.provisioner import nodeclaim_id

VALIDATED = frozenset(
    {Method.EMPTINESS, Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION, Method.REPACK}
)
"""Methods whose commands wait and are validated before they execute (Karpenter's commandValidationDelay)."""

UNCONSOLIDATABLE = frozenset(
    {
        BlockReason.PODS_UNSCHEDULABLE,
        BlockReason.BUFFER_PODS,
        BlockReason.MULTIPLE_REPLACEMENTS,
        BlockReason.NOT_CHEAPER,
        BlockReason.SPOT_TO_SPOT_DISABLED,
        BlockReason.SPOT_TO_SPOT_TOO_FEW_OPTIONS,
        BlockReason.MIN_VALUES,
        BlockReason.WHEN_EMPTY,
        BlockReason.BALANCED,
    }
)
"""Reasons consolidation gives for a candidate it looked at and kept: Karpenter's `Unconsolidatable` events."""
BLOCKED = frozenset(
    {
        BlockReason.DO_NOT_DISRUPT_NODE,
        BlockReason.DO_NOT_DISRUPT_POD,
        BlockReason.POD_DISRUPTION_BUDGET,
        BlockReason.BUDGET,
        BlockReason.NOMINATED,
        BlockReason.NODEPOOL_NOT_FOUND,
        BlockReason.INSTANCE_TYPE_NOT_FOUND,
        BlockReason.PRICE_UNKNOWN,
    }
)
"""Reasons a node cannot be a candidate at all: Karpenter's `DisruptionBlocked` events. Other reasons
(not managed, not initialized, already leaving, consolidateAfter not reached) are states, not news."""
MAX_RESULTS = 20
"""Results the status query keeps (the history has them all)."""
STEERED_DRAIN = "repack-steered-drain"
"""The patch of a repack's steered drain: histories from before it drained a repack's candidates at once."""
STEERED_CONSOLIDATION = "consolidation-steered-drain"
"""The patch that steers the drain of Karpenter's consolidation commands too, while the repack is on: histories
from before it drained them at once."""
STEERED = frozenset({Method.MULTI_NODE_CONSOLIDATION, Method.SINGLE_NODE_CONSOLIDATION})
"""Karpenter's methods whose commands' drain is steered while the repack is on (the command itself unchanged):
drained at once, kube-scheduler puts the evicted pods on the least allocated nodes, not where the simulation found
room, and a pod left without room makes the provisioner launch a node the command did not pay for."""
STEER_PAUSE = timedelta(seconds=1)
"""Between steps of the steered drain that found nothing to evict yet."""


def disruption_id(cluster: str) -> str:
    return f"disruption/{cluster}"


def consolidation_id(cluster: str, stamp: str) -> str:
    return f"consolidation/{cluster}/{stamp}"


def kept_event(kept: KeptNode) -> tuple[str, str] | None:
    """The event a kept node gets (reason, message), from the first reason that calls for one."""
    for reason in kept.reasons:
        if reason.code == BlockReason.BUFFER_PODS:  # Karpenter's sentence, without the buffers' names
            return "Unconsolidatable", reason.message.partition(BUFFER_PODS_SUFFIX)[0]
        if reason.code in UNCONSOLIDATABLE:
            return "Unconsolidatable", reason.message
        if reason.code in BLOCKED:
            return "DisruptionBlocked", reason.message
    return None


def node_events(
    node: str, nodeclaim: str | None, reason: str, message: str, prefix: str = "", warning: bool = False
) -> list[DisruptionEvent]:
    """The same event on a Node and its NodeClaim; with a prefix, Karpenter's "<prefix> Node: <message>"."""
    targets = [("Node", node)] + ([("NodeClaim", nodeclaim)] if nodeclaim else [])
    return [
        DisruptionEvent(
            kind=kind,
            name=name,
            reason=reason,
            message=f"{prefix} {kind}: {message}" if prefix else message,
            warning=warning,
        )
        for kind, name in targets
    ]


@workflow.defn(name="Disruption")
class DisruptionWorkflow:
    @workflow.init
    def __init__(self, request: DisruptionInput) -> None:
        self._status = DisruptionStatus(cluster=request.cluster, mode=request.mode, passes=request.passes)
        self._confirmed: bool | None = None
        self._commands = 0
        """Commands this run carried out: with the run, it names their replacements."""
        self._activity_timeout = timedelta(seconds=request.settings.activity_timeout_seconds)
        self._max_events = request.settings.max_events_per_pass
        self._event_reasons: dict[str, tuple[str, str]] = {}
        self._refused_repairs: dict[str, str] = {}
        """The message each node's refused repair last announced."""
        """The last event each kept node got, so that one is emitted only when the reason changes."""

    @workflow.query
    def plan(self) -> DisruptionStatus:
        return self._status

    @workflow.signal
    def confirm(self, execute: bool) -> None:
        """Manual mode: go ahead (True) or cancel (False)."""
        self._confirmed = execute

    @workflow.run
    async def run(self, request: DisruptionInput) -> DisruptionStatus:
        if request.mode is DisruptionMode.MANUAL:
            status = await self._manual(request)
            workflow.set_current_details(summaries.consolidation_outcome(status))
            return status
        await self._automatic(request)
        return self._status

    # ---------------------------------------------------------------------------------------------- modes

    async def _automatic(self, request: DisruptionInput) -> None:
        settings = request.settings
        fingerprint = ""
        for _ in range(settings.passes_before_continue_as_new):
            self._waiting("")
            self._status.passes += 1
            record = await self._plan(request, fingerprint, self._pass_summary(request), repair=True)
            await self._repair(record.repairs)
            announced = True
            if not record.unchanged:
                self._status.plan = record
                announced = await self._explain(record)
            # Only an idle pass whose events all went out may be summarized by the next: a pass with a command,
            # or with events left for later, must be planned in full so the next one can act on it.
            fingerprint = record.fingerprint if not record.commands and announced else ""
            executed = False
            if record.commands:
                result = await self._execute(
                    request, record.commands[0], validate_after=settings.validation_seconds
                )
                executed = result.outcome is CommandOutcome.EXECUTED
            if workflow.info().is_continue_as_new_suggested():
                break
            if not executed:
                # Karpenter looks again at once after starting a command, else after its poll period.
                workflow.set_current_details("waiting for the next disruption pass")
                await workflow.sleep(
                    timedelta(seconds=settings.poll_seconds),
                    summary=summaries.wait_summary(settings.poll_seconds, "for the next disruption pass"),
                )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(request.model_copy(update={"passes": self._status.passes}))

    async def _manual(self, request: DisruptionInput) -> DisruptionStatus:
        self._status.passes += 1
        record = await self._plan(request, "", self._pass_summary(request))
        self._status.plan = record
        commands = record.commands
        if request.dry_run:
            self._status.results = [
                CommandResult(command=c, outcome=CommandOutcome.DRY_RUN) for c in commands
            ]
        if request.dry_run or not commands:
            return self._status
        self._waiting("confirmation")
        confirmation = request.settings.confirmation_timeout_seconds
        try:
            await workflow.wait_condition(
                lambda: self._confirmed is not None,
                timeout=timedelta(seconds=confirmation),
                timeout_summary=summaries.wait_summary(confirmation, "for confirmation"),
            )
        except TimeoutError:
            self._confirmed = False
        if not self._confirmed:
            self._waiting("")
            self._status.results = [
                CommandResult(command=c, outcome=CommandOutcome.CANCELLED, detail="not confirmed")
                for c in commands
            ]
            return self._status
        for command in commands:
            await self._execute(request, command, validate_after=0.0)
        self._waiting("")
        return self._status

    # ------------------------------------------------------------------------------------------ commands

    async def _execute(
        self, request: DisruptionInput, command: DisruptionCommand, validate_after: float
    ) -> CommandResult:
        """Validate (when the method calls for it), then carry out one command; its result is recorded."""
        result = await self._carry_out(request, command, validate_after)
        self._status.results = [*self._status.results, result][-MAX_RESULTS:]
        self._waiting("")
        workflow.upsert_search_attributes(
            [attributes.DISRUPTION_REASON.value_unset(), attributes.DECISION.value_unset()]
        )
        return result

    async def _carry_out(
        self, request: DisruptionInput, command: DisruptionCommand, validate_after: float
    ) -> CommandResult:
        manual = request.mode is DisruptionMode.MANUAL
        self._commands += 1
        key = f"{workflow.info().run_id}/{self._commands}"
        if command.reason != EXPIRED and (manual or command.method in VALIDATED):
            if validate_after > 0:
                self._waiting("validation")
                workflow.set_current_details(f"waiting for validation: {summaries.command_summary(command)}")
                await workflow.sleep(
                    timedelta(seconds=validate_after),
                    summary=summaries.validation_wait_summary(validate_after, command),
                )
            # A repack is planned again around the same candidates first, so that the fresh plan answers for them.
            hint = [c.node for c in command.candidates] if command.method == Method.REPACK else []
            fresh = await self._plan(
                request, "", summaries.validate_summary(command), hint=hint, validating=command.message
            )
            validated, why = validate(command, fresh)
            if validated is None:
                log(
                    "abandoning disruption command, command is no longer valid",
                    command=command.message,
                    reason=why,
                )
                return CommandResult(command=command, outcome=CommandOutcome.ABANDONED, detail=why)
            command = validated
        log(command.message)
        workflow.set_current_details(f"executing {summaries.command_summary(command)}")
        workflow.upsert_search_attributes(
            [
                attributes.DISRUPTION_REASON.value_set(command.reason),
                attributes.DECISION.value_set(command.decision),
            ]
        )
        nodes = [candidate.node for candidate in command.candidates]
        await self._activity(
            DisruptionActivity.TAINT_CANDIDATES,
            TaintCandidates(
                nodes=nodes, decision=command.decision, reason=command.reason, method=command.method
            ),
            list[str],
            summaries.taint_candidates_summary(command),
        )
        replacements: list[str] = []
        if command.replacements:
            try:
                replacements = await self._activity(
                    DisruptionActivity.LAUNCH_REPLACEMENTS,
                    LaunchReplacementsInput(
                        cluster=request.cluster,
                        command=command,
                        key=key,
                        lifecycle=request.lifecycle,
                    ),
                    list[str],
                    summaries.launch_replacements_summary(command),
                )
                failure = await self._await_replacements(request, replacements)
            except ActivityError as error:
                failure = str(error.cause or error)
            if failure:
                await self._roll_back(command, replacements, failure)
                return CommandResult(
                    command=command,
                    outcome=CommandOutcome.ROLLED_BACK,
                    replacements=replacements,
                    detail=failure,
                )
        steered = None
        if self._steers(request, command):
            steered = await self._steer(request, command, replacements)
        await self._terminate(command)
        return CommandResult(
            command=command, outcome=CommandOutcome.EXECUTED, replacements=replacements, steered=steered
        )

    @staticmethod
    def _steers(request: DisruptionInput, command: DisruptionCommand) -> bool:
        """Whether the command's drain is steered: a repack's always; a consolidation of Karpenter's that moves
        pods while the repack is on (off, Karpenter's behaviour alone)."""
        if command.method == Method.REPACK:
            return workflow.patched(STEERED_DRAIN)
        repack = request.settings.repack
        return (
            command.method in STEERED
            and command.pods_moved > 0
            and repack is not None
            and repack.enabled
            and workflow.patched(STEERED_CONSOLIDATION)
        )

    async def _steer(
        self, request: DisruptionInput, command: DisruptionCommand, replacements: list[str]
    ) -> SteeredDrain:
        """A steered drain (`core.disruption.steering`): the candidates' pods evicted one at a time, each once
        the previous one's replacement is scheduled, with the new nodes cordoned but for the one the next pod
        should go to; then the new nodes are uncordoned and the candidates terminate as any command's (their
        drain finds nothing left to move, or, when steering gave up, drains the rest as Karpenter's)."""
        settings = request.settings
        destinations = dict(command.repack.staying) if command.repack is not None else {}
        for name, replacement in zip(replacements, command.replacements, strict=False):
            destinations.update(dict.fromkeys(replacement.pods, name))
        step_input = SteerInput(
            candidates=[c.node for c in command.candidates],
            held=replacements,
            destinations=destinations,
            settle_seconds=settings.steer_settle_seconds,
        )
        drain = SteeredDrain()
        waiting_since = None
        self._waiting("steered drain")
        while True:
            awaited = step_input.awaiting.pod if step_input.awaiting is not None else None
            workflow.set_current_details(f"steered drain: {drain.evicted} pod(s) moved")
            step: SteerStep = await self._activity(
                DisruptionActivity.STEER_DRAIN, step_input, SteerStep, summaries.steer_summary(awaited)
            )
            if step.landed is not None:
                landed = step.landed
                if landed.landed == landed.planned:
                    drain.as_planned += 1
                else:
                    drain.elsewhere.append(f"{landed.pod}: {landed.planned} -> {landed.landed}")
                step_input.awaiting = None
            if step.problem:
                drain.gave_up = step.problem
                break
            if step.done:
                break
            if step.evicted is not None:
                drain.evicted += 1
                step_input.awaiting = step.evicted if step.evicted.owner else None
                waiting_since = None
                continue
            waiting_since = waiting_since or workflow.now()
            if workflow.now() - waiting_since >= timedelta(seconds=settings.steer_wait_seconds):
                drain.gave_up = f"{step.waiting} for {settings.steer_wait_seconds:g}s"
                break
            await workflow.sleep(STEER_PAUSE, summary=summaries.wait_summary(1, step.waiting))
        if replacements:
            await self._activity(
                DisruptionActivity.RELEASE_HELD, replacements, summary=summaries.release_summary(replacements)
            )
        log(
            "steered the drain of a repack"
            if command.method == Method.REPACK
            else "steered the drain of a consolidation",
            command=command.message,
            evicted=drain.evicted,
            asPlanned=drain.as_planned,
            elsewhere=len(drain.elsewhere),
            gaveUp=drain.gave_up,
        )
        return drain

    async def _await_replacements(self, request: DisruptionInput, names: list[str]) -> str:
        """Wait until every replacement is initialized; why not, when one failed or time ran out."""
        self._waiting("replacements")
        deadline = workflow.now() + timedelta(seconds=request.settings.replacement_timeout_seconds)
        announced = False
        while True:
            progress: ReplacementProgress = await self._activity(
                DisruptionActivity.REPLACEMENT_PROGRESS,
                names,
                ReplacementProgress,
                summaries.replacement_progress_summary(names),
            )
            if progress.failed:
                return f"replacement nodeclaim(s) {', '.join(progress.failed)} failed to launch or register"
            if not progress.waiting:
                return ""
            if workflow.now() >= deadline:
                return (
                    f"replacement nodeclaim(s) {', '.join(progress.waiting)} not initialized within "
                    f"{request.settings.replacement_timeout_seconds:g}s"
                )
            if not announced:
                announced = True
                await self._events(
                    [
                        DisruptionEvent(
                            kind="NodeClaim",
                            name=name,
                            reason="DisruptionWaitingReadiness",
                            message="Waiting on readiness to continue disruption",
                        )
                        for name in progress.waiting
                    ]
                )
            workflow.set_current_details(f"waiting for {len(progress.waiting)} replacement(s) to initialize")
            poll = request.settings.poll_seconds
            waiting = summaries.names(progress.waiting)
            await workflow.sleep(
                timedelta(seconds=poll),
                summary=summaries.wait_summary(poll, f"for replacements {waiting} to initialize"),
            )

    async def _roll_back(self, command: DisruptionCommand, replacements: list[str], failure: str) -> None:
        """Karpenter's rollback: the candidates are untainted and kept, the replacements deleted."""
        log("failed to disrupt nodes, rolling back", command=command.message, error=failure)
        nodes = [c.node for c in command.candidates]
        await self._activity(
            DisruptionActivity.UNTAINT_CANDIDATES, nodes, summary=summaries.untaint_summary(nodes)
        )
        for name in replacements:
            await self._signal(name, "delete", DeletionRequested(by=f"disruption rolled back: {failure}"))

    async def _terminate(self, command: DisruptionCommand) -> None:
        """Hand every candidate to its lifecycle's termination, as Karpenter deletes their NodeClaims."""
        self._waiting("")
        await self._events(
            [
                event
                for candidate in command.candidates
                for event in node_events(
                    candidate.node, candidate.nodeclaim, "DisruptionTerminating", command.reason, "Disrupting"
                )
            ]
        )
        sender = workflow.info().workflow_id
        for candidate in command.candidates:
            disrupt = DisruptNodeClaim(
                reason=command.reason, command=sender, method=command.method, decision=command.decision
            )
            await self._signal(candidate.nodeclaim, "disrupt", disrupt)

    # ------------------------------------------------------------------------------------------- helpers

    def _pass_summary(self, request: DisruptionInput) -> str:
        return summaries.plan_pass_summary(request, self._status.passes)

    async def _plan(
        self,
        request: DisruptionInput,
        fingerprint: str,
        summary: str,
        repair: bool = False,
        hint: list[str] | None = None,
        validating: str = "",
    ) -> DisruptionPassRecord:
        workflow.set_current_details("planning")
        settings = request.settings
        record: DisruptionPassRecord = await self._activity(
            ActivityName.PLAN_DISRUPTION,
            DisruptionPlanInput(
                cluster=request.cluster,
                mode=request.mode,
                nodepools=request.nodepools,
                spot_to_spot_consolidation=settings.spot_to_spot_consolidation,
                min_values_policy=settings.min_values_policy,
                repair_not_ready_seconds=settings.repair_not_ready_seconds
                if repair and settings.node_repair
                else None,
                previous_fingerprint=fingerprint,
                repack=settings.repack,
                repack_candidates=hint or [],
                validating=validating,
            ),
            DisruptionPassRecord,
            summary,
        )
        return record

    async def _repair(self, repairs: list[RepairRecord]) -> None:
        """Node repair, at once and outside budgets: each unhealthy node's lifecycle terminates forcefully. A
        refused repair gets Karpenter's NodeRepairBlocked event on its Node, NodeClaim and NodePool, once."""
        sender = workflow.info().workflow_id
        refused: dict[str, str] = {}
        events: list[DisruptionEvent] = []
        for repair in repairs:
            if repair.refused:
                refused[repair.node] = repair.message
                if self._refused_repairs.get(repair.node) != repair.message:
                    events.extend(
                        node_events(
                            repair.node, repair.nodeclaim, "NodeRepairBlocked", repair.message, warning=True
                        )
                    )
                    events.append(
                        DisruptionEvent(
                            kind="NodePool",
                            name=repair.nodepool,
                            reason="NodeRepairBlocked",
                            message=repair.message,
                            warning=True,
                        )
                    )
                continue
            log(
                "repairing unhealthy node",
                Node=repair.node,
                NodeClaim=repair.nodeclaim,
                NodePool=repair.nodepool,
                condition=repair.condition,
            )
            disrupt = DisruptNodeClaim(
                reason=TerminationReason.UNHEALTHY.value,
                command=sender,
                method="repair",
                decision="delete",
                detail=repair.message,
            )
            await self._signal(repair.nodeclaim, "disrupt", disrupt)
        self._refused_repairs = refused
        if events:
            await self._events(events[: self._max_events])

    async def _explain(self, record: DisruptionPassRecord) -> bool:
        """Events for kept nodes whose reason changed since the last event: DisruptionBlocked or
        Unconsolidatable, on the Node and its NodeClaim. False when some were left for the next pass."""
        current: dict[str, tuple[str, str]] = {}
        events: list[DisruptionEvent] = []
        deferred = False
        for kept in record.kept:
            event = kept_event(kept)
            if event is None:
                continue
            if self._event_reasons.get(kept.node) == event:
                current[kept.node] = event
                continue
            if len(events) + 2 > self._max_events:
                deferred = True  # left for the next pass, which finds it still unannounced
                continue
            current[kept.node] = event
            reason, message = event
            prefix = "Cannot disrupt" if reason == "DisruptionBlocked" else ""
            events.extend(node_events(kept.node, kept.nodeclaim, reason, message, prefix))
        self._event_reasons = current
        if events:
            await self._events(events)
        return not deferred

    async def _events(self, events: list[DisruptionEvent]) -> None:
        await self._activity(
            DisruptionActivity.RECORD_EVENTS, events, summary=summaries.events_summary(events)
        )

    async def _signal(self, nodeclaim: str, signal: str, argument: Any) -> None:
        handle = workflow.get_external_workflow_handle(nodeclaim_id(nodeclaim))
        try:
            await handle.signal(signal, argument)
        except Exception:  # the lifecycle already finished: the NodeClaim is gone anyway
            workflow.logger.warning("could not signal %s to nodeclaim %s", signal, nodeclaim)

    def _waiting(self, what: str) -> None:
        self._status.waiting_for = what
        if what:
            workflow.set_current_details(f"waiting for {what}")

    async def _activity(
        self, name: str, argument: Any, result_type: Any = None, summary: str | None = None
    ) -> Any:
        return await workflow.execute_activity(
            name,
            argument,
            result_type=result_type,
            start_to_close_timeout=self._activity_timeout,
            retry_policy=RETRY,
            summary=summary,
        )
