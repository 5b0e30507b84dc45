"""The CapacityWindow workflow: one run per window, started by the window's Temporal Schedule a lead time before the
window opens (id `capacity-window/<cluster>/<window>-<scheduled time>`).

It raises the target's `spec.replicas` to the window's (remembering what it replaced), sleeps until the window
closes, then puts the remembered value back unless someone changed the replicas meanwhile (then it leaves them,
and says so in an event). Each step is an activity whose result says what it did and why; the sleep is a timer
whose summary says until when.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey

from workflows.conventions import RETRY, log

with workflow.unsafe.imports_passed_through():
    from core.capacity_window import Window, window_of_run
    from core.capacity_window_messages import (
        RAISE_WINDOW_REPLICAS,
        RESTORE_WINDOW_REPLICAS,
        CapacityWindowRun,
        RaiseInput,
        RaiseResult,
        RestoreInput,
        RestoreResult,
    )
    from workflows.ids import capacity_window_id as capacity_window_id

SCHEDULED_START = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
"""The time a Schedule's run was scheduled for, which Temporal sets on every run a Schedule starts."""


@workflow.defn(name="CapacityWindow")
class CapacityWindowWorkflow:
    @workflow.run
    async def run(self, request: CapacityWindowRun) -> RestoreResult | None:
        window = self._window(request)
        raised = await self._raise(request, window)
        if not raised.changed or raised.previous is None or raised.applied is None:
            workflow.set_current_details(f"{request.target.describe()}: {raised.reason}; nothing to restore")
            return None
        await self._hold(request, window)
        return await self._restore(request, raised.previous, raised.applied)

    def _window(self, request: CapacityWindowRun) -> Window:
        lead = timedelta(seconds=request.lead_seconds)
        duration = timedelta(seconds=request.duration_seconds)
        if request.opens_at is not None:
            return Window(request.opens_at, request.opens_at + duration)
        scheduled: datetime | None = workflow.info().typed_search_attributes.get(SCHEDULED_START)
        return window_of_run(scheduled or workflow.now(), lead, duration)

    async def _raise(self, request: CapacityWindowRun, window: Window) -> RaiseResult:
        target = request.target.describe()
        workflow.set_current_details(
            f"{target}: raising to {request.replicas} for the window {window.opens:%H:%M:%S}-{window.closes:%H:%M:%S}"
        )
        result: RaiseResult = await workflow.execute_activity(
            RAISE_WINDOW_REPLICAS,
            RaiseInput(
                window=request.window,
                target=request.target,
                replicas=request.replicas,
                opens=window.opens,
                closes=window.closes,
            ),
            result_type=RaiseResult,
            start_to_close_timeout=timedelta(seconds=request.activity_timeout_seconds),
            retry_policy=RETRY,
            summary=f"raise {target} to {request.replicas} replicas (window opens {window.opens:%Y-%m-%d %H:%M:%S}Z)",
        )
        log("capacity window raised", CapacityWindow=request.window, target=target, reason=result.reason)
        return result

    async def _hold(self, request: CapacityWindowRun, window: Window) -> None:
        target = request.target.describe()
        workflow.set_current_details(f"{target}: holding {request.replicas} until {window.closes:%H:%M:%S}Z")
        remaining = window.closes - workflow.now()
        if remaining > timedelta(0):
            await workflow.sleep(
                remaining, summary=f"until the window closes at {window.closes:%Y-%m-%d %H:%M:%S}Z"
            )

    async def _restore(self, request: CapacityWindowRun, previous: int, applied: int) -> RestoreResult:
        target = request.target.describe()
        result: RestoreResult = await workflow.execute_activity(
            RESTORE_WINDOW_REPLICAS,
            RestoreInput(window=request.window, target=request.target, previous=previous, applied=applied),
            result_type=RestoreResult,
            start_to_close_timeout=timedelta(seconds=request.activity_timeout_seconds),
            retry_policy=RETRY,
            summary=f"restore {target} to {previous} replicas unless changed from {applied}",
        )
        log("capacity window closed", CapacityWindow=request.window, target=target, reason=result.reason)
        workflow.set_current_details(f"{target}: {result.reason}")
        return result
