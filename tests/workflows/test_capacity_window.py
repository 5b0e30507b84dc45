"""CapacityWindows on the real control plane: the workflow raises a static NodePool's replicas, holds them until the
window closes and restores them (or leaves them when someone changed them meanwhile); the controller keeps the
window's Temporal Schedule and status, refuses what it cannot schedule, and a window opening a minute from now
scales the pool up before it opens and back down after it closes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import ScheduleHandle

from activities.capacity_window import LEFT_AS_IS, RAISED, RESTORED
from core.capacity_window import TARGET_CONFLICT, TARGET_NOT_SCALABLE
from core.capacity_window_messages import CapacityWindowRun, RestoreResult, Target
from core.static_messages import StaticPoolInput
from tests.cluster import events, eventually
from tests.workflows.conftest import FAST, TIMER, System, fresh_name, step_summaries
from tests.workflows.test_static import POOL, ready_nodes, static_pool
from workers.controller import Controller
from workers.controller.capacity_windows import CapacityWindows
from workers.controller.static_pools import StaticPools
from workflows.capacity_window import CapacityWindowWorkflow, capacity_window_id

NODEPOOL = Target(kind="NodePool", api_version="karpenter.sh/v1", name=POOL)


def capacity_window(
    name: str, schedule: str, duration: str, replicas: int, lead: str, target: str = POOL
) -> dict[str, Any]:
    return {
        "apiVersion": "nodewright.io/v1alpha1",
        "kind": "CapacityWindow",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiGroup": "karpenter.sh", "kind": "NodePool", "name": target},
            "schedule": schedule,
            "duration": duration,
            "replicas": replicas,
            "leadTime": lead,
        },
    }


async def replicas(system: System, pool: str = POOL) -> int | None:
    manifest = await system.kube.get_object("NodePool", pool)
    return None if manifest is None else manifest["spec"].get("replicas")


async def window_status(system: System, name: str) -> dict[str, Any]:
    manifest = await system.kube.get_object("CapacityWindow", name)
    return dict((manifest or {}).get("status") or {})


async def run_window(system: System, name: str, opens_in: float, duration: float, to: int) -> Any:
    opens = datetime.now(UTC) + timedelta(seconds=opens_in)
    return await system.client.start_workflow(
        CapacityWindowWorkflow.run,
        CapacityWindowRun(
            cluster=system.cluster,
            window=name,
            target=NODEPOOL,
            replicas=to,
            lead_seconds=opens_in,
            duration_seconds=duration,
            opens_at=opens,
        ),
        id=fresh_name(capacity_window_id(system.cluster, name)),
        task_queue=system.task_queue,
    )


async def test_a_window_raises_holds_and_restores_the_replicas(system: System) -> None:
    name = fresh_name("hold")
    await system.kube.apply([static_pool(1), capacity_window(name, "0 8 * * *", "10h", 3, "5m")])
    handle = await run_window(system, name, opens_in=1, duration=3, to=3)

    assert await eventually(lambda: _equals(replicas(system), 3), timeout=10, what="replicas raised to 3")
    raised_status = await window_status(system, name)
    result: RestoreResult = await handle.result()

    assert result.restored and result.current == 3
    assert await replicas(system) == 1
    assert raised_status.get("replacedReplicas") == 1
    status = await window_status(system, name)
    assert status.get("restoredReplicas") == 1 and "replacedReplicas" not in status
    steps = await step_summaries(system.client, handle)
    assert [kind for kind, _ in steps] == ["raise_window_replicas", TIMER, "restore_window_replicas"]
    assert "raise NodePool fixed to 3 replicas" in steps[0][1]
    assert steps[1][1].startswith("until the window closes at")
    [raised] = await events(system.kube, RAISED, [name])
    assert "raised NodePool fixed from 1 to 3 replicas" in raised["note"]
    assert await events(system.kube, RESTORED, [name, POOL])


async def test_replicas_someone_changed_during_the_window_stay(system: System) -> None:
    name = fresh_name("changed")
    await system.kube.apply([static_pool(1), capacity_window(name, "0 8 * * *", "10h", 3, "5m")])
    handle = await run_window(system, name, opens_in=1, duration=4, to=3)
    await eventually(lambda: _equals(replicas(system), 3), timeout=10, what="replicas raised to 3")

    await system.kube.apply([static_pool(4)])
    result: RestoreResult = await handle.result()

    assert not result.restored and result.current == 4
    assert await replicas(system) == 4
    [event] = await events(system.kube, LEFT_AS_IS, [name])
    assert event["type"] == "Warning" and "has 4 replicas, not the 3 it set" in event["note"]


async def test_a_pool_already_at_the_windows_replicas_is_left_alone(system: System) -> None:
    name = fresh_name("above")
    await system.kube.apply([static_pool(4), capacity_window(name, "0 8 * * *", "10h", 3, "5m")])
    handle = await run_window(system, name, opens_in=1, duration=2, to=3)

    assert await handle.result() is None
    assert await replicas(system) == 4
    assert [kind for kind, _ in await step_summaries(system.client, handle)] == ["raise_window_replicas"]


async def test_the_controller_refuses_what_it_cannot_schedule_naming_the_field(system: System) -> None:
    await system.apply_examples()  # the dynamic NodePool "default"
    first, second, dynamic, monthly = (fresh_name(n) for n in ("first", "second", "dynamic", "monthly"))
    await system.kube.apply([static_pool(1), capacity_window(first, "0 8 * * *", "10h", 3, "5m")])
    await asyncio.sleep(1.1)  # creation timestamps have whole seconds: the first is the older
    await system.kube.apply(
        [
            capacity_window(second, "0 9 * * *", "1h", 2, "5m"),
            capacity_window(dynamic, "0 8 * * *", "10h", 3, "5m", target="default"),
            capacity_window(monthly, "0 0 1 * *", "10h", 3, "5m", target="other"),
        ]
    )
    windows = CapacityWindows(system.client, system.kube, system.cluster, system.task_queue)
    try:
        await windows.reconcile()

        def validation(status: dict[str, Any]) -> tuple[str, str, str]:
            found = next(c for c in status["conditions"] if c["type"] == "ValidationSucceeded")
            return found["status"], found["reason"], found["message"]

        good = await window_status(system, first)
        assert validation(good)[0] == "True"
        assert good["scheduleID"] == capacity_window_id(system.cluster, first)
        assert next(c for c in good["conditions"] if c["type"] == "Ready")["status"] == "True"
        description = await system.client.get_schedule_handle(good["scheduleID"]).describe()
        [calendar] = description.schedule.spec.calendars
        assert (calendar.hour[0].start, calendar.minute[0].start) == (7, 55)

        assert validation(await window_status(system, second))[:2] == ("False", TARGET_CONFLICT)
        assert f"CapacityWindow {first} already scales" in validation(await window_status(system, second))[2]
        status, reason, message = validation(await window_status(system, dynamic))
        assert (status, reason) == ("False", TARGET_NOT_SCALABLE) and message.startswith("spec.targetRef")
        status, reason, message = validation(await window_status(system, monthly))
        assert reason == "ScheduleNotShiftable" and "spec.schedule" in message and "spec.leadTime" in message
        assert await events(system.kube, TARGET_NOT_SCALABLE, [dynamic])
        assert "scheduleID" not in await window_status(system, dynamic)

        # The window goes: so does its Schedule.
        await system.kube.delete_object("CapacityWindow", first)
        await windows.reconcile()
        assert not await _exists(system.client.get_schedule_handle(good["scheduleID"]))
    finally:
        await _delete_schedules(system, first, second, dynamic, monthly)


async def test_a_scheduled_window_scales_the_pool_up_before_it_opens_and_down_after(system: System) -> None:
    """The one test that waits for a real Schedule: the window opens at the next whole minute at least 30 s away
    (cron has minutes), with a 20 s lead and a 15 s duration."""
    windows = CapacityWindows(
        system.client, system.kube, system.cluster, system.task_queue, resync_seconds=0.5
    )
    static = StaticPools(
        system.client,
        system.kube,
        system.task_queue,
        True,
        StaticPoolInput(cluster=system.cluster, nodepool="", lifecycle=FAST, poll_seconds=2),
    )
    controller = Controller(
        system.client,
        system.kube,
        system.provisioner_input(),
        system.task_queue,
        debounce_seconds=0.05,
        requeue_seconds=30.0,
        static=static,
        windows=windows,
    )
    system._tasks.append(asyncio.create_task(controller.run()))
    await system.apply_examples()
    await system.kube.apply([static_pool(1)])
    await eventually(lambda: ready_nodes(system, 1), timeout=60, what="1 static node")

    opens = (datetime.now(UTC) + timedelta(seconds=90)).replace(second=0, microsecond=0)
    name = fresh_name("soon")
    await system.kube.apply([capacity_window(name, f"{opens.minute} {opens.hour} * * *", "15s", 2, "20s")])
    try:
        status = await eventually(lambda: _ready(system, name), timeout=10, what="the window Ready")
        assert status["nextWindowOpens"] == opens.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert status["active"] is False

        await eventually(lambda: ready_nodes(system, 2), timeout=120, what="2 static nodes")
        assert datetime.now(UTC) < opens, "the pool should have scaled up before the window opened"
        assert (await window_status(system, name)).get("replacedReplicas") == 1

        await eventually(lambda: _equals(replicas(system), 1), timeout=60, what="replicas restored to 1")
        assert datetime.now(UTC) >= opens + timedelta(seconds=15)
        await eventually(lambda: ready_nodes(system, 1), timeout=60, what="back to 1 static node")
        assert (await window_status(system, name)).get("restoredReplicas") == 1
    finally:
        await _delete_schedules(system, name)


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _ready(system: System, name: str) -> dict[str, Any] | None:
    status = await window_status(system, name)
    conditions = status.get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return status if ready and status.get("nextWindowOpens") else None


async def _exists(handle: ScheduleHandle) -> bool:
    try:
        await handle.describe()
    except Exception:
        return False
    return True


async def _delete_schedules(system: System, *names: str) -> None:
    for name in names:
        handle = system.client.get_schedule_handle(capacity_window_id(system.cluster, name))
        if await _exists(handle):
            await handle.delete()
