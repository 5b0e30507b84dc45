"""The controller's part in CapacityWindows: one Temporal Schedule per window (`capacity-window/<cluster>/<window>`),
created, updated when the spec changes and deleted when the window goes or turns invalid, and the window's status.

Every `resync_seconds` it lists the CapacityWindows (a cluster without the CRD is told once in the log, and runs as
before), judges each (`core.capacity_window`: a spec that parses, a schedule its lead time shifts exactly, no
overlap, one window per target, a target that exists with `spec.replicas`) and writes `ValidationSucceeded` and
`Ready` with a reason and a message naming the field at fault, the Schedule's id, and the window now open or next
to open. A refusal is also an event on the window, once per message. Updating a Schedule keeps its state, so a
window paused in the Temporal UI stays paused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
)
from temporalio.service import RPCError, RPCStatusCode

from activities.capacity_window import KIND
from activities.kube import kube_event
from activities.kubeclient.cluster import KubernetesCluster
from core.api.capacitywindow import CapacityWindow, CapacityWindowConditionType
from core.api.condition_set import ConditionSet, conditions_json, readable_conditions
from core.api.meta import InvalidObjectError
from core.capacity_window import (
    INVALID_SPEC,
    TARGET_CONFLICT,
    TARGET_NOT_FOUND,
    TARGET_NOT_SCALABLE,
    Calendar,
    Verdict,
    conflicts,
    current_or_next,
    judge,
)
from core.capacity_window_messages import CapacityWindowRun, Target
from core.errors import CloudError, InvalidError
from workers.schedules import ensure_schedule
from workflows.capacity_window import CapacityWindowWorkflow, capacity_window_id

logger = logging.getLogger("nodewright.controller")

RESYNC_SECONDS = 5.0
"""How often the windows are listed: a change to one reaches its Schedule within this."""
MIN_CATCHUP = timedelta(seconds=10)
"""Temporal's smallest catch-up window."""


def ranges(values: Sequence[int]) -> list[ScheduleRange]:
    """Sorted values as the fewest inclusive ranges (`0, 1, 2, 5` is `0-2, 5`)."""
    found: list[ScheduleRange] = []
    for value in sorted(values):
        if found and found[-1].end == value - 1:
            found[-1] = ScheduleRange(found[-1].start, value)
        else:
            found.append(ScheduleRange(value, value))
    return found


def calendar_spec(calendar: Calendar) -> ScheduleCalendarSpec:
    return ScheduleCalendarSpec(
        second=ranges(calendar.seconds),
        minute=ranges(calendar.minutes),
        hour=ranges(calendar.hours),
        day_of_month=ranges(calendar.days_of_month),
        month=ranges(calendar.months),
        day_of_week=ranges(calendar.days_of_week),
    )


def window_run(cluster: str, window: CapacityWindow) -> CapacityWindowRun:
    spec = window.spec
    ref = spec.target_ref
    return CapacityWindowRun(
        cluster=cluster,
        window=window.name,
        target=Target(
            kind=ref.kind.value, api_version=ref.api_version, name=ref.name, namespace=ref.namespace
        ),
        replicas=spec.replicas,
        lead_seconds=spec.lead.total_seconds(),
        duration_seconds=spec.window.total_seconds(),
    )


def window_schedule(
    cluster: str, window: CapacityWindow, calendars: Sequence[Calendar], task_queue: str
) -> Schedule:
    spec = window.spec
    target = spec.target_ref.describe()
    return Schedule(
        action=ScheduleActionStartWorkflow(
            CapacityWindowWorkflow.run,
            window_run(cluster, window),
            id=capacity_window_id(cluster, window.name),
            task_queue=task_queue,
            static_summary=f"CapacityWindow {window.name}: {target} at {spec.replicas}",
            static_details=(
                f"raises {target} to {spec.replicas} replicas {spec.lead_time} before each window of "
                f'"{spec.schedule}" (UTC) opens, for {spec.duration}; then restores what it replaced'
            ),
        ),
        spec=ScheduleSpec(calendars=[calendar_spec(calendar) for calendar in calendars]),
        # A run holds its target until its window closes; the next may not raise meanwhile (judge refuses windows
        # that would overlap, this is the backstop). A window missed while Temporal was down is still run late,
        # as long as it has not closed.
        policy=SchedulePolicy(
            overlap=ScheduleOverlapPolicy.SKIP, catchup_window=max(spec.lead + spec.window, MIN_CATCHUP)
        ),
    )


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CapacityWindows:
    def __init__(
        self,
        client: Client,
        cluster: KubernetesCluster,
        cluster_name: str,
        task_queue: str,
        resync_seconds: float = RESYNC_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.cluster_name = cluster_name
        self.task_queue = task_queue
        self.resync_seconds = resync_seconds
        self.clock = clock
        self._scheduled: dict[str, str] = {}
        """Each window with a Schedule, to the JSON of the Schedule last written for it."""
        self._verdicts: dict[str, Verdict] = {}
        """Verdicts by the spec's JSON: the overlap check walks many windows, so it runs once per spec."""
        self._reported: dict[str, str] = {}
        """The refusal each window was last told of in an event."""
        self._missing_crd = False

    def prefix(self) -> str:
        return capacity_window_id(self.cluster_name, "")

    async def run(self) -> None:
        await self._adopt()
        while True:
            try:
                await self.reconcile()
            except Exception:  # a window, or Temporal, never stops the controller: try again later
                logger.exception("could not reconcile the CapacityWindows")
            await asyncio.sleep(self.resync_seconds)

    async def _adopt(self) -> None:
        """Schedules an earlier controller made: those whose window is gone are deleted at the first reconcile."""
        try:
            async for listed in await self.client.list_schedules():
                if listed.id.startswith(self.prefix()):
                    self._scheduled[listed.id.removeprefix(self.prefix())] = ""
        except RPCError as error:
            logger.warning("could not list the CapacityWindow schedules: %s", error)

    async def reconcile(self) -> None:
        """One pass: every window's Schedule and status as its spec and target say."""
        try:
            manifests = await self.cluster.list_objects(KIND)
        except InvalidError as error:
            if not self._missing_crd:
                logger.info("CapacityWindows are not served (%s): install the CRD to use them", error)
            self._missing_crd = True
            manifests = []
        now = self.clock()
        windows: list[tuple[dict[str, Any], CapacityWindow | None, Verdict]] = []
        for manifest in manifests:
            try:
                window = CapacityWindow.parse(manifest)
            except InvalidObjectError as error:
                windows.append(
                    (manifest, None, Verdict(reason=INVALID_SPEC, message="; ".join(error.problems)))
                )
                continue
            windows.append((manifest, window, self._judge(window, now)))
        refused = conflicts(parsed for _, parsed, verdict in windows if parsed is not None and verdict.valid)
        names = set()
        for manifest, parsed, verdict in windows:
            name = manifest["metadata"]["name"]
            names.add(name)
            if parsed is not None and name in refused:
                verdict = Verdict(
                    reason=TARGET_CONFLICT,
                    message=(
                        f"spec.targetRef: CapacityWindow {refused[name]} already scales "
                        f"{parsed.spec.target_ref.describe()} (one window per target)"
                    ),
                )
            elif parsed is not None and verdict.valid:
                verdict = await self._check_target(parsed, verdict)
            await self._settle(manifest, parsed, verdict, now)
        for gone in set(self._scheduled) - names:
            await self._unschedule(gone)

    def _judge(self, window: CapacityWindow, now: datetime) -> Verdict:
        key = window.spec.model_dump_json()
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = judge(window, now)
        return verdict

    async def _check_target(self, window: CapacityWindow, verdict: Verdict) -> Verdict:
        ref = window.spec.target_ref
        try:
            target = await self.cluster.get_object(ref.kind.value, ref.name, ref.namespace, ref.api_version)
        except InvalidError as error:
            return Verdict(reason=TARGET_NOT_FOUND, message=f"spec.targetRef: {ref.describe()}: {error}")
        if target is None:
            return Verdict(
                reason=TARGET_NOT_FOUND, message=f"spec.targetRef: {ref.describe()} does not exist"
            )
        replicas = (target.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int):
            what = (
                "a dynamic NodePool (no spec.replicas)" if ref.kind == "NodePool" else "without spec.replicas"
            )
            return Verdict(
                reason=TARGET_NOT_SCALABLE,
                message=f"spec.targetRef: {ref.describe()} is {what}: a window sets spec.replicas",
            )
        return verdict

    async def _settle(
        self, manifest: dict[str, Any], window: CapacityWindow | None, verdict: Verdict, now: datetime
    ) -> None:
        name = manifest["metadata"]["name"]
        schedule_id = capacity_window_id(self.cluster_name, name)
        if window is not None and verdict.valid:
            schedule = window_schedule(self.cluster_name, window, verdict.calendars, self.task_queue)
            written = (
                json.dumps(dataclasses.asdict(schedule.spec), default=str)
                + window_run(self.cluster_name, window).model_dump_json()
            )
            if self._scheduled.get(name) != written:
                await ensure_schedule(self.client, schedule_id, schedule)
                self._scheduled[name] = written
                logger.info("CapacityWindow %s: schedule %s written", name, schedule_id)
            self._reported.pop(name, None)
        else:
            await self._unschedule(name)
            if self._reported.get(name) != verdict.message:
                self._reported[name] = verdict.message
                logger.warning("CapacityWindow %s: %s: %s", name, verdict.reason, verdict.message)
                uid = manifest["metadata"].get("uid")
                await self.cluster.record_event(
                    kube_event(KIND, name, verdict.reason, verdict.message, warning=True, uid=uid)
                )
        await self._write_status(manifest, window, verdict, schedule_id, now)

    async def _unschedule(self, name: str) -> None:
        if name not in self._scheduled:
            return
        try:
            await self.client.get_schedule_handle(capacity_window_id(self.cluster_name, name)).delete()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
        del self._scheduled[name]
        logger.info("CapacityWindow %s: schedule deleted", name)

    async def _write_status(
        self,
        manifest: dict[str, Any],
        window: CapacityWindow | None,
        verdict: Verdict,
        schedule_id: str,
        now: datetime,
    ) -> None:
        metadata = manifest["metadata"]
        current = manifest.get("status") or {}
        created = window.metadata.creation_timestamp if window is not None else None
        conditions = ConditionSet(
            readable_conditions(current),
            [CapacityWindowConditionType.VALIDATION_SUCCEEDED],
            metadata.get("generation"),
            created,
            now,
        )
        if verdict.valid:
            conditions.set_true(CapacityWindowConditionType.VALIDATION_SUCCEEDED)
        else:
            conditions.set_false(
                CapacityWindowConditionType.VALIDATION_SUCCEEDED, verdict.reason, verdict.message
            )
        status: dict[str, Any] = {
            "conditions": conditions_json(conditions.conditions),
            "scheduleID": schedule_id if verdict.valid else None,
        }
        upcoming = None
        if window is not None and verdict.valid:
            upcoming = current_or_next(window.spec.cron(), window.spec.window, now)
        status["active"] = upcoming.is_open(now) if upcoming is not None else None
        status["nextWindowOpens"] = _time(upcoming.opens) if upcoming is not None else None
        status["nextWindowCloses"] = _time(upcoming.closes) if upcoming is not None else None
        if all(current.get(key) == value for key, value in status.items()):
            return
        try:
            await self.cluster.patch_status(
                KIND, metadata["name"], status, metadata.get("resourceVersion", "")
            )
        except CloudError as error:
            logger.warning("could not write the status of CapacityWindow %s: %s", metadata["name"], error)
