"""The AKS provider's `nodeclass.status` reconcile as an activity: every AKSNodeClass gets the conditions
`core.nodeclass_status` computes, with its node subnet read from Azure, whether the worker's catalog is priced
with the fallback region's prices (`PricingFallback`), and `localDNSState`.

The status subresource is patched only when it would change, with the resourceVersion read as precondition (a
NodeClass changed meanwhile is left to the next run). Each subnet is read once per run however many NodeClasses
use it. One NodeClass that cannot be read or written never stops the others.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Protocol

from azure.core.exceptions import AzureError
from temporalio import activity

from activities.azure.errors import classify
from activities.azure.provider import AzureCloudProvider
from activities.heartbeat import heartbeats
from core.api.aksnodeclass import AKSNodeClass
from core.api.condition_set import conditions_json, readable_conditions
from core.api.nodepool import ConditionStatus
from core.errors import CloudError, NotFoundError
from core.messages import MaintenanceActivity, NodeClassStatusInput, NodeClassStatusResult
from core.nodeclass_status import (
    images_problem,
    nodeclass_conditions,
    parse_subnet_id,
    subnet_id_problem,
    subnet_not_found,
    subnet_unknown_error,
)

logger = logging.getLogger(__name__)


class NodeClassStore(Protocol):
    async def list_objects(self, kind: str) -> list[dict[str, Any]]: ...

    async def patch_status(
        self, kind: str, name: str, status: dict[str, Any], resource_version: str
    ) -> bool: ...


class NodeClassStatusActivities:
    def __init__(self, cluster: NodeClassStore, provider: AzureCloudProvider) -> None:
        self.cluster = cluster
        self.provider = provider

    @activity.defn(name=MaintenanceActivity.RECONCILE_NODECLASS_STATUS)
    @heartbeats
    async def reconcile_nodeclass_status(self, request: NodeClassStatusInput) -> NodeClassStatusResult:
        return await self.reconcile(datetime.now(UTC))

    async def reconcile(self, now: datetime, attempts: int = 3) -> NodeClassStatusResult:
        """Compute and write the status of every AKSNodeClass; one that another writer changed meanwhile (the
        controller's `localDNSState`, a user's edit) is read and computed again, up to `attempts` times."""
        result = NodeClassStatusResult()
        subnets: dict[str, tuple[str, str] | None] = {}
        pending: set[str] | None = None
        for _ in range(attempts):
            lost: set[str] = set()
            for raw in await self.cluster.list_objects("AKSNodeClass"):
                name = str((raw.get("metadata") or {}).get("name") or "")
                if pending is not None and name not in pending:
                    continue
                if pending is not None:  # computed again from the newer object
                    result.ready = [ready for ready in result.ready if ready != name]
                    result.not_ready.pop(name, None)
                try:
                    if not await self._reconcile(raw, now, subnets, result):
                        lost.add(name)
                except (CloudError, ValueError) as error:
                    result.failures.append(f"AKSNodeClass {name}: {error}")
                    logger.warning("could not reconcile the status of AKSNodeClass %s: %s", name, error)
            if not lost:
                break
            pending = lost
        return result

    async def _reconcile(
        self,
        raw: dict[str, Any],
        now: datetime,
        subnets: dict[str, tuple[str, str] | None],
        result: NodeClassStatusResult,
    ) -> bool:
        """False when the status could not be written because the object changed since it was read."""
        nodeclass = AKSNodeClass.parse(raw)
        metadata = raw.get("metadata") or {}
        settings = self.provider.settings
        subnet_id = nodeclass.spec.vnet_subnet_id or settings.subnet_id
        if subnet_id not in subnets:
            subnets[subnet_id] = await self._subnet_problem(subnet_id)
        created = nodeclass.metadata.creation_timestamp
        current = raw.get("status") or {}
        images = images_problem(
            nodeclass, settings.kubernetes_version, bool(settings.image_gallery_subscription_id)
        )
        conditions = nodeclass_conditions(
            readable_conditions(current),
            metadata.get("generation"),
            created,
            subnets[subnet_id],
            now,
            price_fallback=self.provider.catalogs.price_fallback(),
            images=images,
        )
        status: dict[str, Any] = {"conditions": conditions_json(conditions)}
        ready = next(c for c in conditions if c.type == "Ready")
        if ready.status is ConditionStatus.TRUE:
            result.ready.append(nodeclass.name)
        else:
            result.not_ready[nodeclass.name] = f"{ready.reason}: {ready.message}"
        unchanged = conditions_json(readable_conditions(current)) == status["conditions"]
        if unchanged:
            return True
        version = str(metadata.get("resourceVersion") or "")
        if not await self.cluster.patch_status("AKSNodeClass", nodeclass.name, status, version):
            return False
        result.written.append(nodeclass.name)
        return True

    async def _subnet_problem(self, subnet_id: str) -> tuple[str, str] | None:
        """Why the subnet cannot take nodes: its ID, or what Azure answers when it is read."""
        settings = self.provider.settings
        problem = subnet_id_problem(subnet_id, settings.subnet_id, settings.resource_group)
        subnet = parse_subnet_id(subnet_id)
        if problem is not None or subnet is None:
            return problem
        try:
            await self.provider.network.subnets.get(subnet.resource_group, subnet.vnet, subnet.subnet)
        except AzureError as error:
            failure = classify(error)
            if isinstance(failure, NotFoundError):
                return subnet_not_found(subnet_id)
            return subnet_unknown_error(str(failure))
        return None
