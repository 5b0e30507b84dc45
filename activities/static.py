"""The static NodePool activity: read one static pool, decide one scale step (`core.static_capacity`), carry it out.

Scaling up creates NodeClaims as the provisioner does (the NodeClaim of an empty node of the pool, its lifecycle
started from here so a retried step finds and starts what an earlier attempt created); scaling down deletes the
chosen NodeClaims, whose lifecycles then drain and terminate them as for any deletion.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio import activity

from activities.heartbeat import heartbeating
from activities.logs import karpenter_log
from activities.metrics import CreatedReason
from activities.planning import (
    PLAN_LABEL,
    PlanningActivities,
    concurrently,
    create_nodeclaim,
    lifecycle_nodeclaim,
    nodeclaim_suffix,
    planned,
    resume_attempt,
)
from core.api.manifests import Manifests
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import DisruptionReason, NodePool
from core.messages import TERMINATION_REASON_ANNOTATION, LifecycleInput, LifecycleSettings, TerminationReason
from core.static_capacity import REPLACEMENT_ANNOTATION, StaticStep, plan_pool, static_template
from core.static_messages import RECONCILE_STATIC_NODEPOOL, StaticStepInput, StaticStepResult

logger = logging.getLogger(__name__)


class StaticActivities(PlanningActivities):
    """Keeps static NodePools at their replicas; shares the planning activities' catalog and lifecycle starter."""

    @activity.defn(name=RECONCILE_STATIC_NODEPOOL)
    async def reconcile_static_nodepool(self, request: StaticStepInput) -> StaticStepResult:
        async with heartbeating():
            return await self._reconcile(request)

    async def _reconcile(self, request: StaticStepInput) -> StaticStepResult:
        manifests = await self.cluster.snapshot()
        pool = next((p for p in manifests.nodepools if p.name == request.nodepool), None)
        if pool is None or not pool.is_static or pool.metadata.deletion_timestamp is not None:
            return StaticStepResult(found=False, reason=f"NodePool {request.nodepool} is gone or not static")
        run, attempt, key = await resume_attempt(manifests, request.step, self.start_lifecycle)
        if not pool.status.is_true("Ready"):
            # As Karpenter's static provisioning: only a Ready NodePool (valid, its AKSNodeClass ready) launches;
            # the controller signals again when it turns Ready.
            ready = pool.status.condition("Ready")
            why = f"{ready.reason}: {ready.message}" if ready is not None else "no Ready condition yet"
            return StaticStepResult(reason=f"NodePool {pool.name} is not Ready ({why}), waiting")
        step = plan_pool(manifests, pool, datetime.now(UTC))
        result = StaticStepResult(
            current=step.current, desired=step.desired, limited=step.limited, reason=step.reason
        )
        await self._drift(step)
        result.deleted = list(step.finish)
        if step.delete:
            await self._delete(step, request.why)
            result.deleted += list(step.delete)
        elif step.create:
            result.created, refusal = await self._create(request, manifests, pool, step, key, run, attempt)
            if refusal:
                result.reason = f"{step.reason}; none launchable: {refusal}"
        elif step.limited:
            karpenter_log(logger, "nodepool node limit reached", NodePool=pool.name)
        return result

    async def _drift(self, step: StaticStep) -> None:
        """Drifted NodeClaims whose replacement is ready go (terminated as Drifted); those whose replacement is gone
        are running again."""

        async def finish(name: str) -> None:
            annotations = {TERMINATION_REASON_ANNOTATION: TerminationReason.DRIFTED.value}
            await self.cluster.patch_nodeclaim_metadata(name, annotations=annotations)
            await self.cluster.delete_nodeclaim(name)
            karpenter_log(
                logger, "deleting nodeclaim", NodePool=step.nodepool, NodeClaim=name, reason="drifted"
            )

        async def unmark(name: str) -> None:
            await self.cluster.patch_nodeclaim_metadata(name, annotations={REPLACEMENT_ANNOTATION: ""})

        await concurrently([finish(name) for name in step.finish] + [unmark(name) for name in step.unmark])

    async def _delete(self, step: StaticStep, why: str) -> None:
        karpenter_log(
            logger,
            "deprovisioning nodeclaims to satisfy replica count",
            NodePool=step.nodepool,
            current=step.current,
            desired=step.desired,
            **{"deprovision-count": len(step.delete)},
            reason=why,
        )

        async def delete(name: str) -> None:
            await self.cluster.delete_nodeclaim(name)
            karpenter_log(logger, "deleting nodeclaim", NodePool=step.nodepool, NodeClaim=name)

        await concurrently([delete(name) for name in step.delete])

    async def _create(
        self,
        request: StaticStepInput,
        manifests: Manifests,
        pool: NodePool,
        step: StaticStep,
        key: str,
        run: str,
        attempt: int,
    ) -> tuple[list[str], str]:
        """The NodeClaims created, or why none could be."""
        template = await asyncio.to_thread(static_template, manifests, pool, self._provider(frozenset()))
        if template.claim is None:
            karpenter_log(
                logger, "could not create static nodeclaims", NodePool=pool.name, error=template.reason
            )
            return [], template.reason
        if step.replace:
            karpenter_log(
                logger,
                "disrupting node(s)",
                NodePool=pool.name,
                reason="drifted",
                command=f"drifted/replace, terminating {len(step.replace)} nodeclaim(s) ({', '.join(step.replace)})",
            )
        else:
            karpenter_log(
                logger,
                "provisioning nodeclaims to satisfy replica count",
                NodePool=pool.name,
                current=step.current,
                desired=step.desired,
                **{"provision-count": step.create},
                reason=request.why,
            )
        lifecycles = []
        for index in range(step.create):
            name = f"{pool.name}-{nodeclaim_suffix(run, request.step, attempt, index)}"
            decision = planned(
                template.claim, pool, name, request.max_launch_candidates, 0, template.left_out
            )
            first = decision.launch_candidates[0]
            decision.reason = (
                f"static NodePool {pool.name} holds {step.desired} node(s): the cheapest of "
                f"{len(template.claim.instance_type_options)} instance type(s) for an empty node, "
                f"{first.instance_type} {first.capacity_type} in {first.zone}"
            )
            lifecycle = LifecycleInput(
                cluster=request.cluster,
                nodeclaim=decision,
                settings=request.lifecycle or LifecycleSettings(),
                provisioner_workflow_id=request.provisioner_workflow_id or None,
            )
            nodeclaim = lifecycle_nodeclaim(lifecycle, pool, template.claim.requirements)
            nodeclaim.metadata.labels[PLAN_LABEL] = key
            lifecycles.append((nodeclaim, lifecycle))

        async def create(nodeclaim: NodeClaim, lifecycle: LifecycleInput) -> None:
            await create_nodeclaim(self.cluster, nodeclaim, lifecycle.nodeclaim, logger)
            created_reason = (
                DisruptionReason.DRIFTED.value.lower() if step.replace else CreatedReason.PROVISIONED
            )
            self.metrics.nodeclaim_created(created_reason, pool.name, False)

        await concurrently([create(nodeclaim, lifecycle) for nodeclaim, lifecycle in lifecycles])
        # Each drifted NodeClaim names its replacement: pending disruption until that one is initialized.
        await concurrently(
            [
                self.cluster.patch_nodeclaim_metadata(
                    drifted, annotations={REPLACEMENT_ANNOTATION: nodeclaim.name}
                )
                for drifted, (nodeclaim, _) in zip(step.replace, lifecycles, strict=False)
            ]
        )
        await concurrently([self.start_lifecycle(lifecycle) for _, lifecycle in lifecycles])
        return [nodeclaim.name for nodeclaim, _ in lifecycles], ""
