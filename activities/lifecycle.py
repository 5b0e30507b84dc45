"""The NodeClaim lifecycle's steps as three activities: launch, register, initialize.

Each step does its cloud or cluster work and writes the NodeClaim's condition in the same activity, so a
lifecycle reaches Initialized with three activities: fewer round trips through Temporal, which is what bounds
how many NodeClaims per second one worker and server can bring up.
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.azure.nodeclass import ClusterNodeClasses
from activities.catalog_source import CatalogSource
from activities.errors import as_application_error, launch_failure
from activities.heartbeat import heartbeating
from activities.kube import apply_condition, kube_event, node_state, register_node
from activities.metrics import Metrics, default_metrics
from core import labels, summaries
from core.api.meta import Taint, TaintEffect
from core.api.nodeclaim import (
    CREDENTIAL_REFUSED,
    INSUFFICIENT_CAPACITY_ERROR,
    LAUNCH_FAILED,
    NODE_NOT_FOUND,
    NodeClaim,
)
from core.cloudprovider import CloudProvider, InstanceState, LaunchRequest
from core.cluster import ClusterAPI
from core.errors import OFFERING_ERROR_KINDS, CloudError, CredentialError, ErrorKind, NotFoundError
from core.instancetypes.azure import azure_instance_types
from core.instancetypes.catalog import AzureCatalog
from core.instancetypes.types import InstanceType
from core.messages import (
    ActivityName,
    ConditionUpdate,
    InitializeInput,
    LaunchInput,
    LaunchResult,
    NodeState,
    OfferingChoice,
    RegisterInput,
)
from core.resources import format_resources
from core.scheduling.snapshot import azure_provider

logger = logging.getLogger(__name__)

UNREGISTERED = Taint(key=labels.UNREGISTERED_TAINT, effect=TaintEffect.NO_EXECUTE)
"""Every new node registers with it; registration removes it (Karpenter's contract with the bootstrap)."""


def not_registered(nodeclaim: str) -> ConditionUpdate:
    """Karpenter's Registered condition while the NodeClaim's Node has not registered."""
    return ConditionUpdate(
        name=nodeclaim,
        type="Registered",
        status="Unknown",
        reason=NODE_NOT_FOUND,
        message="Node not registered with cluster",
    )


class LifecycleActivities:
    def __init__(
        self,
        cluster: ClusterAPI,
        cloud: CloudProvider,
        catalog: AzureCatalog | CatalogSource,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.cloud = cloud
        self.metrics = metrics or default_metrics()
        self.catalogs = CatalogSource.of(catalog)
        """Read at every launch, so a refreshed catalog takes effect at the next one."""
        self._types = self.catalogs.derived(
            lambda catalog: {
                instance_type.name: instance_type for instance_type in azure_instance_types(catalog)
            }
        )
        self._providers = self.catalogs.derived(azure_provider)
        self._nodeclasses = ClusterNodeClasses(cluster)

    @property
    def types(self) -> dict[str, InstanceType]:
        """The instance types of the current catalog by name."""
        return self._types()

    async def _nodepool_types(self, nodepool: str) -> dict[str, InstanceType]:
        """The instance types of the NodePool's AKSNodeClass, as planning built them (its maxPods in the
        capacity, its FIPS label); the defaults when the AKSNodeClass cannot be read, which the launch then
        reports."""
        try:
            nodeclass = await self._nodeclasses.of_nodepool(nodepool)
        except CloudError:
            nodeclass = None
        return {instance_type.name: instance_type for instance_type in self._providers()(nodeclass)}

    @activity.defn(name=ActivityName.LAUNCH_NODECLAIM)
    async def launch_nodeclaim(self, request: LaunchInput) -> LaunchResult:
        """Create the instance for one offering and record it on the NodeClaim (Launched, providerID, capacity)."""
        offering = request.offering
        instance_type = (await self._nodepool_types(request.nodepool)).get(offering.instance_type)
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
            tags={"karpenter.sh_nodepool": request.nodepool, "karpenter.sh_nodeclaim": request.nodeclaim},
        )
        await self._still_wanted(request.nodeclaim)
        try:
            async with heartbeating():  # a worker that dies mid-launch is noticed in a heartbeat timeout
                instance = await self.cloud.create(launch)
        except CloudError as error:
            failure = launch_failure(error, offering)
            if not failure.non_retryable:
                await self._launch_failing(request.nodeclaim, str(error))
            if isinstance(error, CredentialError):
                await self._tell_credential_refused(request.nodeclaim, error)
            await self._tell_offering_failed(request.nodeclaim, offering, failure)
            raise failure from error
        result = LaunchResult(
            name=instance.name,
            provider_id=instance.provider_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            capacity=format_resources(instance_type.capacity),
            allocatable=format_resources(instance_type.allocatable()),
            creating=instance.state is InstanceState.CREATING,
        )
        # Still being created: registration has nothing to look for yet, so its first word goes in this write
        # (as Karpenter's reconcile writes Launched and Registered in one status patch).
        unregistered = [not_registered(request.nodeclaim)] if result.creating else []
        await apply_condition(
            self.cluster,
            ConditionUpdate(
                name=request.nodeclaim,
                type="Launched",
                status="True",
                provider_id=result.provider_id,
                capacity=result.capacity,
                allocatable=result.allocatable,
                image_id=instance.image_id or None,
                # Every label the instance type and offering pin (the Node's own), under the NodeClaim's own
                # labels, which win (Karpenter's PopulateNodeClaimDetails; the AKS provider's resolved labels).
                labels={
                    **instance_type.node_labels(chosen),
                    labels.INSTANCE_TYPE: result.instance_type,
                    labels.ZONE: result.zone,
                    labels.CAPACITY_TYPE: result.capacity_type,
                    **request.labels,
                },
                also=unregistered,
            ),
        )
        return result

    async def _still_wanted(self, name: str) -> None:
        """Make nothing for a NodeClaim that is gone or being deleted (Karpenter launches only a NodeClaim that is
        not): a retried attempt may run after its lifecycle was told to terminate, or after the termination
        deleted the instance, and must not make it again. The worker's informer answers when it holds the
        NodeClaim alive; gone or deleting there, the server confirms (the informer may be behind)."""
        claim = await self.cluster.get_nodeclaim(name, cached=True)
        if claim is None or claim.metadata.deletion_timestamp is not None:
            claim = await self.cluster.get_nodeclaim(name)
        if claim is None or claim.metadata.deletion_timestamp is not None:
            state = "gone" if claim is None else "being deleted"
            raise ApplicationError(
                f"NodeClaim {name} is {state}: not launching",
                type=ErrorKind.NODECLAIM_DELETED,
                non_retryable=True,
            )

    async def _launch_failing(self, nodeclaim: str, message: str) -> None:
        """Karpenter's `Launched=Unknown` with reason `LaunchFailed` while a launch is retried (until its timeout);
        never over a verdict (an attempt that outlived its timeout must not undo the lifecycle's Launched=False).
        Best effort: the launch's own error is what counts."""
        update = ConditionUpdate(
            name=nodeclaim, type="Launched", status="Unknown", reason=LAUNCH_FAILED, message=message
        )

        def decided(claim: NodeClaim) -> bool:
            launched = claim.status.condition("Launched")
            return launched is not None and launched.status != "Unknown"

        try:
            await apply_condition(self.cluster, update, unless=decided)
        except Exception as error:
            logger.warning("could not record the failed launch on NodeClaim %s: %s", nodeclaim, error)

    async def _tell_credential_refused(self, nodeclaim: str, error: CredentialError) -> None:
        """Azure refused the worker's identity: a warning on the NodeClaim saying so, with Azure's code and words
        (which name the credential), while the launch is retried; repeats count on the same Event. Best effort."""
        message = f"Azure refused the worker's identity, retrying: {summaries.truncated(str(error))}"
        await self.cluster.record_event(
            kube_event("NodeClaim", nodeclaim, CREDENTIAL_REFUSED, message, warning=True)
        )

    async def _tell_offering_failed(
        self, nodeclaim: str, offering: OfferingChoice, failure: ApplicationError
    ) -> None:
        """An offering without capacity or quota: Karpenter's `InsufficientCapacityError` warning on the NodeClaim,
        naming the offering (the lifecycle then launches its next offering, where Karpenter deletes the NodeClaim
        and plans again). Best effort, as every event is (`ClusterAPI.record_event`)."""
        if failure.type not in OFFERING_ERROR_KINDS:
            return
        detail = summaries.truncated(f"{summaries.offering_text(offering)}: {failure.message}")
        message = f"NodeClaim {nodeclaim} event: {detail}"
        await self.cluster.record_event(
            kube_event("NodeClaim", nodeclaim, INSUFFICIENT_CAPACITY_ERROR, message, warning=True)
        )

    @activity.defn(name=ActivityName.REGISTER_NODECLAIM)
    async def register_nodeclaim(self, request: RegisterInput) -> str | None:
        """Find the Node with the NodeClaim's providerID and register it; None while there is none yet."""
        found = (
            await self.cluster.get_node(request.node)
            if request.node is not None
            else await self.cluster.find_node_by_provider_id(request.provider_id)
        )
        node = found.metadata.name if found is not None else request.node
        # The NodeClaim, for the Node's owner reference (gone: the Node is registered without one, and the
        # lifecycle hears of the deletion). Its uid never changes, so the worker's informer answers when it holds
        # it (the NodeClaim was created before its launch); this lifecycle removes the finalizer that keeps it.
        claim = (
            await self.cluster.get_nodeclaim(request.nodeclaim, cached=True) if found is not None else None
        )
        if found is None and request.launched is not None:
            await self._raise_if_create_failed(request.nodeclaim, request.launched)
        if (
            found is None
            or node is None
            or not await register_node(self.cluster, node, request.labels, claim)
        ):
            await apply_condition(self.cluster, not_registered(request.nodeclaim))
            return None
        if labels.REGISTERED not in found.metadata.labels:  # this call registered it: a retry won't count
            self.metrics.node_created(found, request.labels.get(labels.NODEPOOL, ""))
        await apply_condition(
            self.cluster,
            ConditionUpdate(name=request.nodeclaim, type="Registered", status="True", node_name=node),
        )
        return node

    async def _raise_if_create_failed(self, nodeclaim: str, launched: OfferingChoice) -> None:
        """The launch returned while its instance was being created: if that create failed since (or the
        instance is gone), fail this look for good with the launch's error, as a launch that failed would."""
        failure = await self.cloud.create_failure(nodeclaim)
        if failure is None:
            return
        logger.warning("the instance of NodeClaim %s failed after its launch: %s", nodeclaim, failure)
        error = launch_failure(failure, launched)
        await self._tell_offering_failed(nodeclaim, launched, error)
        raise ApplicationError(error.message, *error.details, type=error.type, non_retryable=True)

    @activity.defn(name=ActivityName.INITIALIZE_NODECLAIM)
    async def initialize_nodeclaim(self, request: InitializeInput) -> NodeState:
        """Mark the node and NodeClaim initialized once it is Ready with its startup taints and Kubernetes'
        not-ready taints gone (so kube-scheduler can bind the pods nominated to it), as Karpenter does."""
        state = await node_state(self.cluster, request)
        waiting = (
            state.startup_taints_remaining or state.ephemeral_taints_remaining or state.missing_resources
        )
        if state.exists and not state.deleting and state.ready and not waiting:
            await self.cluster.patch_node(request.node, labels={labels.INITIALIZED: "true"})
            await apply_condition(
                self.cluster, ConditionUpdate(name=request.nodeclaim, type="Initialized", status="True")
            )
            state.initialized = True
        elif state.exists and not state.deleting and state.waiting_reason:
            unknown = ConditionUpdate(
                name=request.nodeclaim,
                type="Initialized",
                status="Unknown",
                reason=state.waiting_reason,
                message=state.waiting_message,
            )
            await apply_condition(self.cluster, unknown)
        return state
