"""Cloud activities: delete the instance behind a NodeClaim (launching is a lifecycle step, activities/lifecycle.py)."""

from __future__ import annotations

from temporalio import activity

from activities.errors import as_application_error
from core.cloudprovider import CloudProvider
from core.errors import CloudError, NotFoundError
from core.messages import ActivityName


class CloudActivities:
    def __init__(self, cloud: CloudProvider) -> None:
        self.cloud = cloud

    @activity.defn(name=ActivityName.DELETE_INSTANCE)
    async def delete_instance(self, name: str) -> None:
        try:
            await self.cloud.delete(name)
        except NotFoundError:
            return
        except CloudError as error:
            raise as_application_error(error) from error
