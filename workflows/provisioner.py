"""The provisioner: one workflow per cluster (id `provisioner/<cluster>`) that turns pending pods into NodeClaims.

The controller signals pods kube-scheduler could not place. Signals are batched as Karpenter batches them
(the window closes after `batch_idle_seconds` without a new one, or `batch_max_seconds` at most); then the
planning activity runs the scheduler on a fresh snapshot, creates the NodeClaims it decided and starts a
lifecycle workflow for each (from the activity, so this history holds one summary line per NodeClaim whatever
the batch size). Offerings that failed with capacity or quota errors are remembered for a
while and excluded from planning, as are, for their NodeClass alone, offerings whose launch failed otherwise.
The workflow continues as new every so many batches to keep its history short.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.conventions import RETRY

with workflow.unsafe.imports_passed_through():
    from core import summaries
    from core.messages import (
        ActivityName,
        NodeLeaving,
        PlanInput,
        PlanResult,
        PodsPending,
        ProvisionerInput,
        UnavailableOffering,
    )
    from workflows.ids import nodeclaim_id as nodeclaim_id
    from workflows.ids import provisioner_id as provisioner_id


@workflow.defn(name="Provisioner")
class ProvisionerWorkflow:
    @workflow.init
    def __init__(self, request: ProvisionerInput) -> None:
        self._pending: set[str] = set(request.pending)
        self._leaving: set[str] = set(request.leaving)
        self._signals = 0
        self._unavailable = {_key(u): u for u in request.unavailable}
        self._unavailable_ttl = request.unavailable_ttl_seconds
        self._batches = 0

    @workflow.signal
    def pods_pending(self, signal: PodsPending) -> None:
        self._pending.update(signal.pods)
        self._signals += 1

    @workflow.signal
    def node_leaving(self, signal: NodeLeaving) -> None:
        """A NodeClaim's termination began: its pods need capacity elsewhere (the plan finds them on the Node)."""
        self._leaving.add(signal.node)
        self._signals += 1

    @workflow.signal
    def offering_unavailable(self, offering: UnavailableOffering) -> None:
        # Never longer than the provisioner's TTL, whatever the reporter asked for.
        until = min(offering.until, workflow.now() + timedelta(seconds=self._unavailable_ttl))
        self._unavailable[_key(offering)] = offering.model_copy(update={"until": until})

    @workflow.query
    def unavailable_offerings(self) -> list[UnavailableOffering]:
        return self._live_unavailable()

    @workflow.run
    async def run(self, request: ProvisionerInput) -> None:
        for _ in range(request.batches_before_continue_as_new):
            workflow.set_current_details("waiting for pending pods")
            await workflow.wait_condition(lambda: bool(self._pending or self._leaving))
            await self._batch(request)
            pods, leaving = sorted(self._pending), sorted(self._leaving)
            self._pending.clear()
            self._leaving.clear()
            await self._provision(request, pods, leaving)
            if workflow.info().is_continue_as_new_suggested():
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            request.model_copy(
                update={
                    "unavailable": self._live_unavailable(),
                    "pending": sorted(self._pending),
                    "leaving": sorted(self._leaving),
                }
            )
        )

    async def _batch(self, request: ProvisionerInput) -> None:
        """Wait while pods keep arriving within the idle window, up to the maximum window."""
        opened = workflow.now()
        maximum = timedelta(seconds=request.batch_max_seconds)
        idle = timedelta(seconds=request.batch_idle_seconds)
        while (elapsed := workflow.now() - opened) < maximum:
            workflow.set_current_details(f"batching {len(self._pending)} pending pod(s)")
            wait = min(idle, maximum - elapsed)
            if not await self._next_signal(wait):
                return

    async def _next_signal(self, timeout: timedelta) -> bool:
        """Whether another pods-pending signal arrives within the timeout."""
        seen = self._signals
        summary = summaries.wait_summary(timeout.total_seconds(), "for more pending pods (batch window)")
        try:
            await workflow.wait_condition(
                lambda: self._signals != seen, timeout=timeout, timeout_summary=summary
            )
        except TimeoutError:
            return False
        return True

    async def _provision(self, request: ProvisionerInput, pods: list[str], leaving: list[str]) -> None:
        self._batches += 1
        what = summaries.count(len(pods), "pending pod")
        if leaving:
            what += f" and the pods of {summaries.count(len(leaving), 'leaving node')}"
        workflow.set_current_details(f"planning for {what}")
        await workflow.execute_activity(
            ActivityName.PLAN_PROVISIONING,
            PlanInput(
                cluster=request.cluster,
                unavailable=self._live_unavailable(),
                provisioner_workflow_id=workflow.info().workflow_id,
                batch=self._batches,
                lifecycle=request.lifecycle,
                min_values_policy=request.min_values_policy,
            ),
            result_type=PlanResult,
            start_to_close_timeout=timedelta(seconds=request.plan_timeout_seconds),
            heartbeat_timeout=timedelta(seconds=request.plan_heartbeat_seconds),
            retry_policy=RETRY,
            summary=f"plan NodeClaims for {what}",
        )
        # The plan itself logged Karpenter's lines, in Karpenter's order ("found provisionable pod(s)", "could not
        # schedule pod", "computed new nodeclaim(s) to fit pod(s)", "created nodeclaim" for each): thousands of
        # lines in this workflow task would outlast the SDK's deadlock detection on a busy worker.

    def _live_unavailable(self) -> list[UnavailableOffering]:
        now = workflow.now()
        return [offering for offering in self._unavailable.values() if offering.until > now]


def _key(offering: UnavailableOffering) -> tuple[str, str, str, str]:
    """One entry per offering and scope (every NodeClass, or one)."""
    return (offering.instance_type, offering.zone, offering.capacity_type, offering.nodeclass)
