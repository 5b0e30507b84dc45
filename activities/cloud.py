"""Cloud activities: launch and delete the instance behind a NodeClaim.

The launch activity computes the node's labels from the instance type (as the AKS provider writes them
into the kubelet's bootstrap), so the workflow only carries the offering it chose.
"""

from __future__ import annotations

from temporalio import activity

from activities.errors import as_application_error, launch_failure
from core import labels
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import CloudProvider, LaunchRequest
from core.errors import CloudError, NotFoundError
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import AzureCatalog
from core.messages import ActivityName, LaunchInput, LaunchResult
from core.resources import format_resources

UNREGISTERED = Taint(key=labels.UNREGISTERED_TAINT, effect=TaintEffect.NO_EXECUTE)
"""Every new node registers with it; registration removes it (Karpenter's contract with the bootstrap)."""


class CloudActivities:
    def __init__(self, cloud: CloudProvider, catalog: AzureCatalog) -> None:
        self.cloud = cloud
        self.types = {instance_type.name: instance_type for instance_type in azure_instance_types(catalog)}

    @activity.defn(name=ActivityName.LAUNCH_INSTANCE)
    async def launch_instance(self, request: LaunchInput) -> LaunchResult:
        offering = request.offering
        instance_type = self.types.get(offering.instance_type)
        chosen = (
            next(
                (
                    o
                    for o in instance_type.offerings
                    if (o.zone, o.capacity_type) == (offering.zone, offering.capacity_type)
                ),
                None,
            )
            if instance_type
            else None
        )
        if instance_type is None or chosen is None:
            raise as_application_error(NotFoundError(f"offering {offering} is not in the catalog"))
        launch = LaunchRequest(
            name=request.nodeclaim,
            nodepool=request.nodepool,
            instance_type=offering.instance_type,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            labels={**instance_type.node_labels(chosen), **request.labels},
            taints=[*request.taints, *request.startup_taints, UNREGISTERED],
            tags={
                labels.NODEPOOL.replace("/", "_"): request.nodepool,
                "karpenter.sh_nodeclaim": request.nodeclaim,
            },
        )
        try:
            instance = await self.cloud.create(launch)
        except CloudError as error:
            raise launch_failure(error, offering) from error
        return LaunchResult(
            name=instance.name,
            provider_id=instance.provider_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            capacity=format_resources(instance_type.capacity),
            allocatable=format_resources(instance_type.allocatable()),
        )

    @activity.defn(name=ActivityName.DELETE_INSTANCE)
    async def delete_instance(self, name: str) -> None:
        try:
            await self.cloud.delete(name)
        except NotFoundError:
            return
        except CloudError as error:
            raise as_application_error(error) from error
