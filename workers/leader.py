"""Leader election for the controller: of its replicas, one watches the cluster and signals workflows, and the
others stand by to take over when it dies, as Karpenter's replicas do.

The lock is a `coordination.k8s.io/v1` Lease, with client-go's semantics: a replica acquires the Lease when it
is free, already its own, or expired, and the leader renews it every retry period. Expired means that nobody
changed it for `leaseDurationSeconds` as measured by *this* replica's monotonic clock since it last observed a
change, never by comparing the holder's timestamps with its own clock, so clock skew between nodes does not
matter. A leader that cannot renew for the renew deadline stops leading (and the process exits, so Kubernetes
restarts it); the deadline is shorter than the lease so it has stopped before anyone else may take over. On
SIGTERM the leader stops its work and then releases the Lease (holder emptied, duration 1 s, as client-go's
`ReleaseOnCancel`), so a standby takes over at its next try rather than after the lease expires.

Timings: 10 s lease, 8 s renew deadline, 2 s retry, not controller-runtime's 15/10/2 that Karpenter uses. When a
leader dies, a standby may have observed its last renewal up to one retry period late, judges the Lease expired
one lease duration after that observation, and takes it at its next try: retry + lease + retry = 14 s at worst,
within the 15 s nodewright promises for a takeover (15/10/2 would allow 19 s). Tries are not jittered (client-go
jitters acquisition by up to 1.2 retry periods), for the same bound.

Only get, create and update (with the resourceVersion as precondition; a 409 means another replica won) touch
the Lease, so the controller's Role needs no list, watch, patch or delete on leases.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from prometheus_client import REGISTRY, Gauge

from core.errors import CloudError, ConflictError
from workers.settings import Settings

logger = logging.getLogger("nodewright.leader")

MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. "
    "'name' is the string used to identify the lease.",
    ["name"],
    registry=REGISTRY,
)
"""client-go's leader election metric, as controller-runtime exposes it."""


class LeaseAPI(Protocol):
    """The three Lease calls leader election makes (`activities.kubeclient.cluster.KubernetesCluster` has them)."""

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]: ...

    async def update_lease(self, lease: dict[str, Any]) -> dict[str, Any]: ...


class LeadershipLostError(RuntimeError):
    """The leader could not renew its Lease within the renew deadline; it must stop leading."""


def default_identity() -> str:
    """Who holds the Lease: the pod's name (`POD_NAME`, from the downward API), else `<hostname>_<pid>`."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def micro_time(moment: datetime) -> str:
    """A `MicroTime` as the API server writes it: RFC 3339, UTC, six fractional digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Which Lease, who we are, and client-go's three durations (see the module docstring for the defaults)."""

    namespace: str
    name: str
    identity: str
    lease_duration: timedelta = timedelta(seconds=10)
    renew_deadline: timedelta = timedelta(seconds=8)
    retry_period: timedelta = timedelta(seconds=2)

    @classmethod
    def from_settings(cls, settings: Settings, identity: str | None = None) -> LeaderElectionConfig:
        return cls(
            namespace=settings.leader_election_namespace,
            name=settings.leader_election_name,
            identity=identity or default_identity(),
            lease_duration=timedelta(seconds=settings.leader_election_lease_seconds),
            renew_deadline=timedelta(seconds=settings.leader_election_renew_seconds),
            retry_period=timedelta(seconds=settings.leader_election_retry_seconds),
        )

    @property
    def lease(self) -> str:
        """`<namespace>/<name>`, as the log lines name it."""
        return f"{self.namespace}/{self.name}"


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    """What a change of the Lease's holder or renewal looks like (client-go compares the whole record)."""
    spec = lease.get("spec") or {}
    return tuple(
        spec.get(key)
        for key in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
    )


class LeaderElector:
    """Acquires, renews and releases one Lease for one identity; `run(work)` runs `work` only while leading."""

    def __init__(
        self,
        leases: LeaseAPI,
        config: LeaderElectionConfig,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.leases = leases
        self.config = config
        self.leading = False
        self.observed = False
        """Whether the Lease has been read at least once: a standby knows who leads (its readiness)."""
        self._clock = clock
        self._wall_clock = wall_clock
        self._lease: dict[str, Any] | None = None
        self._observed_record: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Wait until leading, then run `work` while renewing. A lost Lease cancels `work` and raises
        `LeadershipLostError`; cancelling `run` (SIGTERM) stops `work` first, then releases the Lease."""
        await self.acquire()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.keep())
                group.create_task(work())
        except* LeadershipLostError as lost:
            raise lost.exceptions[0] from None
        finally:
            await self.release()

    async def acquire(self) -> None:
        """Try every retry period until this replica holds the Lease."""
        logger.info("attempting to acquire leader lease %s...", self.config.lease)
        while not await self._try(self.config.retry_period):
            await asyncio.sleep(self.config.retry_period.total_seconds())
        self._lead(True)
        logger.info("successfully acquired lease %s", self.config.lease)

    async def keep(self) -> None:
        """Renew every retry period until cancelled; `LeadershipLostError` once no renewal has succeeded for the
        renew deadline (each try is cut short at the deadline: an API server that hangs counts as failing)."""
        deadline = self.config.renew_deadline.total_seconds()
        renewed = self._clock()
        while True:
            await asyncio.sleep(self.config.retry_period.total_seconds())
            left = deadline - (self._clock() - renewed)
            if left > 0 and await self._try(timedelta(seconds=left)):
                renewed = self._clock()
            elif self._clock() - renewed >= deadline:
                self._lead(False)
                logger.error("failed to renew lease %s: not renewed for %g s", self.config.lease, deadline)
                logger.error("lost leader lease")
                raise LeadershipLostError(
                    f"lost leader lease {self.config.lease}: not renewed for {deadline:g} s"
                )

    async def release(self) -> None:
        """Give the Lease up if this replica holds it: holder emptied and a 1 s duration, so the next replica
        to look takes it at once. A failure is logged: the Lease then expires as if this replica had died."""
        if not self.leading or self._lease is None:
            return
        self._lead(False)
        config = self.config
        stamp = micro_time(self._wall_clock())

        def released(lease: dict[str, Any]) -> dict[str, Any]:
            transitions = (lease.get("spec") or {}).get("leaseTransitions") or 0
            spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp}
            return {**lease, "spec": {**spec, "leaseTransitions": transitions}}

        try:
            async with asyncio.timeout(config.renew_deadline.total_seconds()):
                try:
                    self._lease = await self.leases.update_lease(released(self._lease))
                except ConflictError:
                    # A renewal landed after the copy this replica kept: release the latest, if it is still ours.
                    latest = await self.leases.get_lease(config.namespace, config.name)
                    if latest is None or (latest.get("spec") or {}).get("holderIdentity") != config.identity:
                        return
                    self._lease = await self.leases.update_lease(released(latest))
        except (CloudError, TimeoutError) as error:
            logger.warning("could not release lease %s: %s", config.lease, error or "timed out")
            return
        logger.info("released leader lease %s", self.config.lease)

    # --- one try -----------------------------------------------------------------------------------------

    async def _try(self, within: timedelta) -> bool:
        """One try to acquire or renew, cut short after `within`; whether this replica holds the Lease now."""
        try:
            async with asyncio.timeout(within.total_seconds()):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            logger.debug("acquiring or renewing lease %s took longer than %s", self.config.lease, within)
            return False
        except CloudError as error:
            # 409: another replica changed the Lease since we read it, so it won this round.
            logger.debug("could not acquire or renew lease %s: %s", self.config.lease, error)
            return False

    async def _try_acquire_or_renew(self) -> bool:
        config = self.config
        stamp = micro_time(self._wall_clock())
        current = await self.leases.get_lease(config.namespace, config.name)
        if current is None:
            mine = {"holderIdentity": config.identity, "acquireTime": stamp, "leaseTransitions": 0}
            created = await self.leases.create_lease(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": config.name, "namespace": config.namespace},
                    "spec": self._spec(mine, stamp),
                }
            )
            self._observe(created)
            return True
        self._observe(current)
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or config.lease_duration.total_seconds())
        if holder and holder != config.identity and self._clock() < self._observed_at + duration:
            return False
        ours = holder == config.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = {
            "holderIdentity": config.identity,
            "acquireTime": spec.get("acquireTime") if ours else stamp,
            "leaseTransitions": transitions if ours else transitions + 1,
        }
        updated = await self.leases.update_lease({**current, "spec": self._spec(mine, stamp)})
        self._observe(updated)
        return True

    def _spec(self, mine: dict[str, Any], stamp: str) -> dict[str, Any]:
        return {
            **mine,
            "leaseDurationSeconds": int(self.config.lease_duration.total_seconds()),
            "renewTime": stamp,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        self.observed = True
        record = _record(lease)
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = self._clock()

    def _lead(self, leading: bool) -> None:
        self.leading = leading
        MASTER_STATUS.labels(name=self.config.name).set(1 if leading else 0)
