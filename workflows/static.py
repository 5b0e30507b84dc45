"""The static NodePool workflow: one per static NodePool (id `static/<cluster>/<nodepool>`) that holds it at its
`replicas`, as Karpenter's static provisioning and deprovisioning controllers do.

Each step reads the pool and its NodeClaims, then creates the missing ones (never past `limits.nodes`) or deletes
the surplus (not launched first, then empty nodes, then the cheapest to disrupt). The controller signals it when
`replicas` changes or one of the pool's NodeClaims goes (deleted, expired, interrupted, repaired, drifted away),
and it looks again every `poll_seconds` regardless. It ends when the NodePool is gone or no longer static, and
continues as new every so many steps.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.conventions import RETRY, log

with workflow.unsafe.imports_passed_through():
    from core import summaries
    from core.static_messages import (
        RECONCILE_STATIC_NODEPOOL,
        StaticPoolChanged,
        StaticPoolInput,
        StaticStepInput,
        StaticStepResult,
    )
    from workflows.ids import provisioner_id
    from workflows.ids import static_id as static_id


@workflow.defn(name="StaticNodePool")
class StaticNodePoolWorkflow:
    @workflow.init
    def __init__(self, request: StaticPoolInput) -> None:
        self._why: list[str] = list(request.pending)

    @workflow.signal
    def changed(self, signal: StaticPoolChanged) -> None:
        self._why.append(signal.why)

    @workflow.run
    async def run(self, request: StaticPoolInput) -> None:
        pool = request.nodepool
        for step in range(1, request.steps_before_continue_as_new + 1):
            why = "; ".join(dict.fromkeys(self._why)) or "periodic check"
            self._why.clear()
            result = await self._step(request, step, why)
            if not result.found:
                log("static nodepool no longer static or gone, stopping", NodePool=pool)
                workflow.set_current_details(f"NodePool {pool}: {result.reason}; stopped")
                return
            workflow.set_current_details(
                f"NodePool {pool}: {result.current} of {result.desired} replica(s) ({why}): {result.reason}"
            )
            wait = request.limited_poll_seconds if result.limited else request.poll_seconds
            if result.created or result.deleted:
                continue  # look again at once: the next step sees what this one did
            await self._wait(wait)
            if workflow.info().is_continue_as_new_suggested():
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(request.model_copy(update={"pending": list(self._why)}))

    async def _step(self, request: StaticPoolInput, step: int, why: str) -> StaticStepResult:
        workflow.set_current_details(f"NodePool {request.nodepool}: reconciling ({why})")
        result: StaticStepResult = await workflow.execute_activity(
            RECONCILE_STATIC_NODEPOOL,
            StaticStepInput(
                cluster=request.cluster,
                nodepool=request.nodepool,
                step=step,
                why=why,
                provisioner_workflow_id=provisioner_id(request.cluster),
                max_launch_candidates=request.max_launch_candidates,
                lifecycle=request.lifecycle,
            ),
            result_type=StaticStepResult,
            start_to_close_timeout=timedelta(seconds=request.step_timeout_seconds),
            retry_policy=RETRY,
            summary=f"reconcile static NodePool {request.nodepool} ({why})",
        )
        return result

    async def _wait(self, seconds: float) -> None:
        summary = summaries.wait_summary(seconds, "for a change to the static NodePool")
        try:
            await workflow.wait_condition(
                lambda: bool(self._why), timeout=timedelta(seconds=seconds), timeout_summary=summary
            )
        except TimeoutError:
            return
