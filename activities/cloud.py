"""Cloud activities: delete the instance behind a NodeClaim (launching is a lifecycle step, activities/lifecycle.py)."""

from __future__ import annotations

from temporalio import activity

from activities.errors import as_application_error
from activities.kube import mark_nodeclaim
from core.cloudprovider import CloudProvider
from core.cluster import ClusterAPI
from core.errors import CloudError, NotFoundError
from core.messages import ActivityName


class CloudActivities:
    def __init__(self, cloud: CloudProvider, cluster: ClusterAPI | None = None) -> None:
        self.cloud = cloud
        self.cluster = cluster
        """Where the NodeClaim's InstanceTerminating condition is written (nowhere without one)."""

    @activity.defn(name=ActivityName.DELETE_INSTANCE)
    async def delete_instance(self, name: str) -> None:
        """Delete the NodeClaim's instance; a launched NodeClaim then says so (`InstanceTerminating=True`)."""
        try:
            await self.cloud.delete(name)
        except NotFoundError:
            pass
        except CloudError as error:
            raise as_application_error(error) from error
        if self.cluster is not None:
            await mark_nodeclaim(self.cluster, name, "InstanceTerminating", "True", launched_only=True)
