"""The controller's guarantee that every NodeClaim a plan created has a lifecycle.

Karpenter reconciles each NodeClaim object it finds; in nodewright a NodeClaim is launched by the lifecycle
workflow its plan starts right after creating it. A plan attempt can stop between the two: its worker killed,
or the attempt given up by the server (its heartbeat late on a starved worker) while a retry already runs.
The retry starts the lifecycles of the NodeClaims created before it began, not of those the old attempt
created after. Such a NodeClaim would wait, unlaunched and with an empty status, forever: no lifecycle means
no launch timeout either.

So the controller looks at every NodeClaim that carries its lifecycle input (`nodewright.io/lifecycle`) and
has no Launched condition yet, `grace_seconds` after its creation (and once more after each controller start,
for the ones created before): when no lifecycle workflow was ever started for it, it starts one from that
input, logs "started the lifecycle of nodeclaim" and records an event. A NodeClaim already being deleted gets
its lifecycle with the delete request (signal-with-start), so it is cleaned up and its finalizer removed.
A lifecycle that ran and ended is never started again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.kube import kube_event
from activities.planning import LIFECYCLE_ANNOTATION
from core.api.nodeclaim import NodeClaim, NodeClaimConditionType
from core.cluster import ClusterAPI
from core.messages import DeletionRequested, LifecycleInput
from workflows.provisioner import nodeclaim_id

logger = logging.getLogger("nodewright.controller")

ADOPTED = "LifecycleStarted"
"""The event reason on a NodeClaim whose lifecycle the controller started."""

Starter = Callable[[LifecycleInput, DeletionRequested | None], Awaitable[None]]
"""Starts a lifecycle, with a delete request to deliver with the start (or None)."""


class LifecycleAdoption:
    def __init__(
        self,
        client: Client,
        cluster: ClusterAPI,
        start: Starter,
        deletion: Callable[[NodeClaim], DeletionRequested],
        grace_seconds: float = 30.0,
        check_seconds: float = 5.0,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.start = start
        self.deletion = deletion
        """What the lifecycle of a NodeClaim being deleted is told (the controller's `deletion_requested`)."""
        self.grace = timedelta(seconds=grace_seconds)
        """How long after its creation a NodeClaim's plan has to start its lifecycle."""
        self.check_seconds = check_seconds
        self._pending: dict[str, NodeClaim] = {}
        """NodeClaims not launched and not yet checked, by name (the last version seen)."""
        self._checked: set[str] = set()
        """NodeClaims whose lifecycle this process found or started."""

    def observe(self, claim: NodeClaim) -> None:
        """A NodeClaim the controller's watch added or changed (parsed once, by the controller)."""
        if claim.name in self._checked:
            return
        launched = any(c.type == NodeClaimConditionType.LAUNCHED for c in claim.status.conditions)
        if launched or LIFECYCLE_ANNOTATION not in claim.metadata.annotations:
            self._pending.pop(claim.name, None)
            return
        self._pending[claim.name] = claim

    def forget(self, name: str) -> None:
        """A NodeClaim the watch saw deleted."""
        self._pending.pop(name, None)
        self._checked.discard(name)

    def due(self, now: datetime) -> list[NodeClaim]:
        """The NodeClaims whose plan had `grace` to start their lifecycle, oldest first."""
        epoch = datetime.min.replace(tzinfo=UTC)
        return sorted(
            (
                claim
                for claim in self._pending.values()
                if (claim.metadata.creation_timestamp or epoch) + self.grace <= now
            ),
            key=lambda claim: claim.metadata.creation_timestamp or epoch,
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.check_seconds)
            for claim in self.due(datetime.now(UTC)):
                try:
                    await self.check(claim)
                except (RPCError, ValueError) as error:  # tried again at the next check
                    logger.warning("could not check the lifecycle of nodeclaim %s: %s", claim.name, error)

    async def check(self, claim: NodeClaim) -> bool:
        """Start `claim`'s lifecycle when none was ever started; True when this started it."""
        workflow_id = nodeclaim_id(claim.name)
        try:
            description = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
        else:
            self._settle(claim.name)
            if description.status is not WorkflowExecutionStatus.RUNNING:
                logger.warning(
                    "nodeclaim %s is not launched and its lifecycle %s ended (%s)",
                    claim.name,
                    workflow_id,
                    description.status.name if description.status else "unknown",
                )
            return False
        request = LifecycleInput.model_validate_json(claim.metadata.annotations[LIFECYCLE_ANNOTATION])
        deleting = claim.metadata.deletion_timestamp is not None
        await self.start(request, self.deletion(claim) if deleting else None)
        self._settle(claim.name)
        message = (
            f"Started the lifecycle of NodeClaim {claim.name}: the plan that created it stopped before starting it"
            + (" (it is being deleted: the lifecycle cleans it up)" if deleting else "")
        )
        logger.warning("started the lifecycle of nodeclaim NodeClaim=%s deleting=%s", claim.name, deleting)
        await self.cluster.record_event(
            kube_event(
                "NodeClaim", claim.name, ADOPTED, message, warning=True, uid=claim.metadata.uid or None
            )
        )
        return True

    def _settle(self, name: str) -> None:
        self._pending.pop(name, None)
        self._checked.add(name)
