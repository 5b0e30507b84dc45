"""The demo's CapacityWindow step (nodewright's extension, not part of Karpenter): a window on the static NodePool
that opens at the next whole minute far enough away, with a short lead time and duration. It is applied first, the
NodeOverlay step runs while it waits, and then the pool is seen scaled up before the window opens and back after
it closes; the window's Temporal Schedule is the place to pause it."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from workers.demo.static import STATIC_POOL, static_ready
from workers.demo.walkthrough import TASK_QUEUE, Walkthrough
from workflows.ids import capacity_window_id

WINDOW = "demo-window"
LEAD = timedelta(seconds=10)
DURATION = "10s"
WINDOW_REPLICAS = 4
BEFORE = 3
"""The static pool's replicas when the window opens (the static step scaled it to 3)."""


def window_manifest(opens: datetime) -> str:
    return f"""apiVersion: nodewright.io/v1alpha1
kind: CapacityWindow
metadata:
  name: {WINDOW}
spec:
  targetRef: {{apiGroup: karpenter.sh, kind: NodePool, name: {STATIC_POOL}}}
  schedule: "{opens.minute} {opens.hour} * * *"
  duration: {DURATION}
  replicas: {WINDOW_REPLICAS}
  leadTime: {int(LEAD.total_seconds())}s
"""


async def window_start(walk: Walkthrough, number: int) -> datetime:
    """Apply the window; when it opens."""
    # Cron has whole minutes: the first minute whose Schedule fire time (a lead time earlier) is 5 s away or more.
    earliest = datetime.now(UTC) + LEAD + timedelta(seconds=5)
    opens = earliest.replace(second=0, microsecond=0)
    if opens < earliest:
        opens += timedelta(minutes=1)
    walk.say(
        f"{number}. A CapacityWindow (nodewright's extension): NodePool {STATIC_POOL} at {WINDOW_REPLICAS} from "
        f"{opens:%H:%M:%S} UTC for {DURATION}, raised {int(LEAD.total_seconds())} s ahead"
    )
    text = window_manifest(opens)
    print(text.rstrip(), file=walk.out)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "capacity-window.yaml"
        path.write_text(text)
        await walk.kubectl("apply", "-f", str(path))
    schedule = capacity_window_id(walk.options.cluster, WINDOW)
    print(
        f"Its Temporal Schedule: {schedule} (Temporal UI, Schedules: pause or unpause it there)",
        file=walk.out,
    )
    print(f"(task queue {TASK_QUEUE}; the next step runs while the window waits)", file=walk.out)
    return opens


async def window_finish(walk: Walkthrough, number: int, opens: datetime) -> None:
    walk.say(
        f"{number}. The window: {STATIC_POOL} scales to {WINDOW_REPLICAS} before {opens:%H:%M:%S}, back after"
    )
    await walk.kubectl("get", "capacitywindows")
    await walk.until(f"{WINDOW_REPLICAS} static nodes", lambda: static_ready(walk, WINDOW_REPLICAS))
    now = datetime.now(UTC)
    ahead = (opens - now).total_seconds()
    when = f"{ahead:.0f} s before the window opens" if ahead >= 0 else f"{-ahead:.0f} s after it opened"
    print(f"{WINDOW_REPLICAS} nodes at {now:%H:%M:%S} UTC, {when}", file=walk.out)
    await walk.until(f"{BEFORE} static nodes again", lambda: static_ready(walk, BEFORE))
    await walk.kubectl("get", "capacitywindows", "-o", "wide")
    await walk.kubectl(
        "get",
        "events",
        "--field-selector",
        f"involvedObject.name={WINDOW}",
        "-o",
        "custom-columns=REASON:.reason,MESSAGE:.message",
    )
