"""Leader election: client-go's rules on a Lease (against an in-memory Lease store with a clock the test moves),
then two real `nodewright controller` processes on the test process's control plane: exactly one leads, both
are ready, a killed leader is replaced within 15 s with the default timings, and a leader stopped with SIGTERM
releases the Lease so its standby takes over at once."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import signal
import socket
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from activities.kubeclient.cluster import KubernetesCluster, load_cluster
from core.errors import ConflictError, TransientError
from tests.workers.component import Component, until
from workers.controlplane.run import ControlPlane
from workers.leader import LeaderElectionConfig, LeaderElector, LeadershipLostError

NAMESPACE = "default"


class Leases:
    """One namespace's Leases in memory, with the API server's rules: create fails when the name exists,
    update fails when the resourceVersion is not the stored one."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.failing = False
        self.calls: list[str] = []

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if self.failing:
            raise TransientError("the API server does not answer")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check("get")
        return copy.deepcopy(self.stored.get(name))

    async def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check("create")
        name = lease["metadata"]["name"]
        if name in self.stored:
            raise ConflictError(f'leases "{name}" already exists', code="AlreadyExists")
        return self._store(lease)

    async def update_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check("update")
        current = self.stored[lease["metadata"]["name"]]
        if lease["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ConflictError("the object has been modified", code="Conflict")
        return self._store(lease)

    def _store(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.stored[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def holder(self, name: str = "lease") -> str | None:
        lease = self.stored.get(name)
        return None if lease is None else lease["spec"].get("holderIdentity")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(leases: Leases, identity: str, clock: Clock | None = None, **timings: float) -> LeaderElector:
    """An elector on the in-memory Leases; the real monotonic clock unless the test moves its own."""
    config = LeaderElectionConfig(
        NAMESPACE,
        "lease",
        identity,
        **{key: timedelta(seconds=value) for key, value in timings.items()},
    )
    return LeaderElector(leases, config, clock=clock or time.monotonic)


async def attempt(candidate: LeaderElector) -> bool:
    return await candidate._try(timedelta(seconds=5))


async def test_a_missing_lease_is_created_and_held() -> None:
    leases = Leases()
    assert await attempt(elector(leases, "a"))
    lease = leases.stored["lease"]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 10
    assert lease["spec"]["renewTime"].endswith("Z") and len(lease["spec"]["renewTime"]) == 27
    assert lease["spec"]["leaseTransitions"] == 0


async def test_a_held_lease_expires_a_lease_duration_after_the_standby_observed_it() -> None:
    leases, clock = Leases(), Clock()
    assert await attempt(elector(leases, "a"))
    # The holder's renewTime says it renewed long ago (its clock is behind): only our observation counts.
    leases.stored["lease"]["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"
    standby = elector(leases, "b", clock)
    assert not await attempt(standby)
    assert standby.observed and not standby.leading
    clock.now += 9.9
    assert not await attempt(standby)
    clock.now += 0.2
    assert await attempt(standby)
    assert leases.holder() == "b"
    assert leases.stored["lease"]["spec"]["leaseTransitions"] == 1


async def test_a_renewal_the_standby_observes_restarts_its_wait() -> None:
    leases, clock = Leases(), Clock()
    leader = elector(leases, "a", clock)
    standby = elector(leases, "b", clock)
    assert await attempt(leader)
    assert not await attempt(standby)
    clock.now += 8
    assert await attempt(leader)
    acquired = leases.stored["lease"]["spec"]["acquireTime"]
    clock.now += 1
    assert not await attempt(standby)  # the renewal is new to it: it waits 10 s from now
    clock.now += 9
    assert not await attempt(standby)
    clock.now += 1.1
    assert await attempt(standby)
    assert leases.stored["lease"]["spec"]["acquireTime"] != acquired


async def test_the_holder_renews_keeping_its_acquire_time() -> None:
    leases, clock = Leases(), Clock()
    leader = elector(leases, "a", clock)
    assert await attempt(leader)
    acquired = leases.stored["lease"]["spec"]["acquireTime"]
    clock.now += 30  # even past the duration: it is ours
    assert await attempt(leader)
    assert leases.stored["lease"]["spec"]["acquireTime"] == acquired
    assert leases.stored["lease"]["spec"]["leaseTransitions"] == 0


async def test_a_conflicting_update_loses_the_round() -> None:
    leases = Leases()
    assert await attempt(elector(leases, "a"))
    raced = elector(leases, "b")
    original = leases.update_lease

    async def someone_else_first(lease: dict[str, Any]) -> dict[str, Any]:
        leases.stored["lease"]["metadata"]["resourceVersion"] = "other"
        return await original(lease)

    leases.update_lease = someone_else_first  # type: ignore[method-assign]
    leases.stored["lease"]["spec"]["holderIdentity"] = ""  # free, so b tries to take it
    assert not await attempt(raced)
    assert not raced.leading


async def test_a_released_lease_is_taken_at_the_next_try() -> None:
    leases, clock = Leases(), Clock()
    leader = elector(leases, "a", clock)
    standby = elector(leases, "b", clock)
    await leader.acquire()
    assert not await attempt(standby)
    await leader.release()
    spec = leases.stored["lease"]["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert not leader.leading
    assert await attempt(standby)  # no clock movement needed
    assert leases.holder() == "b"


async def test_a_release_after_a_renewal_it_did_not_see_releases_the_latest_version() -> None:
    leases = Leases()
    leader, standby = elector(leases, "a"), elector(leases, "b")
    await leader.acquire()
    # A renewal this replica started lands after the copy it kept (a stop during a renewal).
    leases.stored["lease"]["metadata"]["resourceVersion"] = "renewed"
    await leader.release()
    assert leases.holder() == "" and leases.stored["lease"]["spec"]["leaseDurationSeconds"] == 1
    assert await attempt(standby)

    # Taken by another meanwhile: a stale release leaves it to its holder.
    leases = Leases()
    leader = elector(leases, "a")
    await leader.acquire()
    leases.stored["lease"]["spec"]["holderIdentity"] = "c"
    leases.stored["lease"]["metadata"]["resourceVersion"] = "taken"
    await leader.release()
    assert leases.holder() == "c" and not leader.leading


async def test_renewals_failing_for_the_deadline_lose_leadership() -> None:
    leases = Leases()
    leader = elector(leases, "a", retry_period=0.02, renew_deadline=0.2, lease_duration=1)
    await leader.acquire()
    leases.failing = True
    with pytest.raises(LeadershipLostError, match="lost leader lease default/lease"):
        await asyncio.wait_for(leader.keep(), timeout=5)
    assert not leader.leading
    assert leases.calls.count("get") >= 3  # it kept trying until the deadline


async def test_run_stops_the_work_when_leadership_is_lost() -> None:
    leases = Leases()
    leader = elector(leases, "a", retry_period=0.02, renew_deadline=0.2, lease_duration=1)
    stopped = asyncio.Event()

    async def work() -> None:
        leases.failing = True
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(leader.run(work), timeout=5)
    assert stopped.is_set()


async def test_cancelling_run_stops_the_work_then_releases_the_lease() -> None:
    leases = Leases()
    leader = elector(leases, "a", retry_period=0.02, renew_deadline=0.2, lease_duration=1)
    order: list[str] = []
    working = asyncio.Event()

    async def work() -> None:
        working.set()
        try:
            await asyncio.Event().wait()
        finally:
            order.append(f"work stopped, holder {leases.holder()!r}")

    task = asyncio.create_task(leader.run(work))
    await asyncio.wait_for(working.wait(), timeout=5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert order == ["work stopped, holder 'a'"]
    assert leases.holder() == ""


# --- two real controllers ----------------------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubernetesCluster]:
    async with load_cluster(str(control_plane.kubeconfig)) as cluster:
        yield cluster


@contextlib.asynccontextmanager
async def two_controllers(
    tmp_path: Path, env: WorkflowEnvironment, plane: ControlPlane
) -> AsyncIterator[tuple[str, dict[str, Component]]]:
    """Two controllers with default leader election timings, on a Lease of the test's own; one is named by
    `POD_NAME`, the other by its `<hostname>_<pid>`. Yields the Lease's name and the controllers by identity."""
    lease = f"leader-{uuid.uuid4().hex[:8]}"
    shared = {
        "NODEWRIGHT_KUBECONFIG": str(plane.kubeconfig),
        "NODEWRIGHT_TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "NODEWRIGHT_TASK_QUEUE": lease,
        "NODEWRIGHT_CLUSTER_NAME": lease,
        "NODEWRIGHT_LEADER_ELECTION_NAME": lease,
        "NODEWRIGHT_LEADER_ELECTION_NAMESPACE": NAMESPACE,
    }
    named = Component("controller", tmp_path / "named.log", {**shared, "POD_NAME": "controller-named"})
    unnamed = Component("controller", tmp_path / "unnamed.log", {**shared, "POD_NAME": None})
    try:
        named.start()
        unnamed.start()
        yield lease, {"controller-named": named, f"{socket.gethostname()}_{unnamed.pid}": unnamed}
    finally:
        named.stop()
        unnamed.stop()


async def holder(kube: KubernetesCluster, lease: str) -> str | None:
    found = await kube.get_lease(NAMESPACE, lease)
    return None if found is None else (found.get("spec") or {}).get("holderIdentity")


async def leader_and_standby(
    kube: KubernetesCluster, lease: str, controllers: dict[str, Component]
) -> tuple[Component, str, Component]:
    """Once one of the two controllers holds the Lease and both are ready: (leader, standby's id, standby)."""
    every = list(controllers.values())

    async def one_leads() -> str | None:
        found = await holder(kube, lease)
        return found if found in controllers else None

    await until(one_leads, 60, "one controller holds the Lease", *every)
    leader_id = await one_leads()
    assert leader_id is not None
    [(standby_id, standby)] = [(key, value) for key, value in controllers.items() if key != leader_id]

    async def both_ready() -> bool:
        return all([await component.ready() for component in every])

    await until(both_ready, 60, "both controllers ready (leader and standby)", *every)
    return controllers[leader_id], standby_id, standby


async def leads(component: Component, lease: str) -> bool:
    """Whether the process's `/metrics` says it holds the Lease (controller-runtime's gauge)."""
    answer = await component.get("/metrics", component.metrics_port)
    return answer is not None and f'leader_election_master_status{{name="{lease}"}} 1.0' in answer[1]


async def test_one_controller_leads_and_a_standby_takes_over_within_15_s_of_a_kill(
    tmp_path: Path, temporal_env: WorkflowEnvironment, control_plane: ControlPlane, kube: KubernetesCluster
) -> None:
    async with two_controllers(tmp_path, temporal_env, control_plane) as (lease, controllers):
        leader, standby_id, standby = await leader_and_standby(kube, lease, controllers)
        assert await leads(leader, lease) and not await leads(standby, lease)
        assert "successfully acquired lease" in leader.log()
        assert "attempting to acquire leader lease" in standby.log()
        assert "successfully acquired lease" not in standby.log()

        leader.signal(signal.SIGKILL)

        async def standby_holds() -> bool:
            return await holder(kube, lease) == standby_id

        held = await until(standby_holds, 60, "the standby holds the Lease", standby)

        async def standby_serves() -> bool:
            return await leads(standby, lease) and await standby.ready()

        serving = held + await until(standby_serves, 30, "the standby leads and is ready", standby)
        print(
            f"\nleader killed: the standby held the Lease after {held:.1f} s and served after {serving:.1f} s "
            "(lease 10 s, renew deadline 8 s, retry 2 s)"
        )
        assert held <= 15.0, f"the standby took {held:.1f} s to take over"


async def test_a_leader_stopped_with_sigterm_releases_the_lease_to_its_standby(
    tmp_path: Path, temporal_env: WorkflowEnvironment, control_plane: ControlPlane, kube: KubernetesCluster
) -> None:
    async with two_controllers(tmp_path, temporal_env, control_plane) as (lease, controllers):
        leader, standby_id, standby = await leader_and_standby(kube, lease, controllers)
        # Frozen, the standby cannot take the Lease in the moment between the release and our look at it.
        standby.signal(signal.SIGSTOP)
        try:
            leader.signal(signal.SIGTERM)
            assert await leader.wait(timeout=30) == 0, leader.log_tail()
            released = await kube.get_lease(NAMESPACE, lease)
            assert released is not None
            assert released["spec"]["holderIdentity"] == ""
            assert released["spec"]["leaseDurationSeconds"] == 1
            assert "released leader lease" in leader.log()
        finally:
            standby.signal(signal.SIGCONT)

        async def standby_holds() -> bool:
            return await holder(kube, lease) == standby_id

        took = await until(standby_holds, 30, "the standby holds the Lease", standby)
        print(f"\nleader stopped: the standby held the released Lease {took:.1f} s after it resumed")
        assert took < 10.0, "the standby waited for the Lease to expire: it was not released"


async def test_a_leader_whose_lease_is_taken_stops_with_exit_code_1(
    tmp_path: Path, temporal_env: WorkflowEnvironment, control_plane: ControlPlane, kube: KubernetesCluster
) -> None:
    lease = f"leader-{uuid.uuid4().hex[:8]}"
    controller = Component(
        "controller",
        tmp_path / "controller.log",
        {
            "NODEWRIGHT_KUBECONFIG": str(control_plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "NODEWRIGHT_TASK_QUEUE": lease,
            "NODEWRIGHT_CLUSTER_NAME": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAME": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAMESPACE": NAMESPACE,
            "NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS": "3",
            "NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS": "2",
            "NODEWRIGHT_LEADER_ELECTION_RETRY_SECONDS": "0.5",
            "POD_NAME": "controller-a",
        },
    ).start()
    try:

        async def leading() -> bool:
            return await holder(kube, lease) == "controller-a"

        await until(leading, 60, "the controller holds the Lease", controller)
        # Another replica, on the far side of a partition, takes the Lease: every renewal from now on fails.
        while True:
            current = await kube.get_lease(NAMESPACE, lease)
            assert current is not None
            current["spec"]["holderIdentity"] = "usurper"
            with contextlib.suppress(ConflictError):
                await kube.update_lease(current)
                break
        assert await controller.wait(timeout=30) == 1, controller.log_tail()
    finally:
        controller.stop()
    log = controller.log()
    assert "lost leader lease" in log and "released leader lease" not in log
    assert await holder(kube, lease) == "usurper"
