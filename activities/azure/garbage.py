"""Garbage collection of the cluster's Azure resources and NodeClaims, as Karpenter and the AKS provider do it.

Four collections in one pass:
- **Instances** (the provider's `instance.garbagecollection`): a VM tagged for this cluster and a NodePool,
  older than the grace period, that no NodeClaim claims (by providerID, or by name while its launch is still
  running) is deleted with its NIC and disk, then its Node if one registered.
- **NICs** (`networkinterface.garbagecollection`): a NIC tagged for this cluster and a NodePool that belongs
  to no listed VM and no NodeClaim (`aks-<name>`), and is attached to nothing, is deleted: what failed
  launches and half-finished deletes leave behind.
- **Nodes**: a Node of ours (it carries the `karpenter.sh/nodepool` label, or its providerID is a VM of this
  cluster's resource group) that no NodeClaim claims (by providerID, Node name, or the VM name its name gives)
  and whose VM is not in the cloud list, older than the grace period, is deleted, and the termination finalizer
  released (no lifecycle is left to release it): what Karpenter's owner references leave to the Kubernetes
  garbage collector. A Node whose VM is listed is left to the instance collection.
- **NodeClaims** (core's `nodeclaim.garbagecollection`): a launched NodeClaim (it has a providerID) whose VM
  is not in the cloud list and whose Node is not Ready is deleted; its lifecycle then terminates it (the
  NodeClaim is annotated `nodewright.io/termination-reason: GarbageCollected` first, so the lifecycle says why).

The cloud is listed between two reads of the NodeClaims, as Karpenter orders its reads: a VM or NIC is only
judged against NodeClaims read after it was listed (so a launch that just began is not mistaken for a leak),
and a NodeClaim only against a cloud list taken after it was read (so a VM launched meanwhile is not missed).
Resources without both the cluster tag and the NodePool tag are never listed, so never touched. Deletions run
in parallel; one that fails never stops the others (the next run tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from azure.mgmt.network.models import NetworkInterface
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.azure.names import PREFIX, NodeNames, provider_id, vm_name_from_provider_id
from activities.azure.provider import AzureCloudProvider
from activities.azure.vm import CLUSTER_TAG, NODEPOOL_TAG
from activities.heartbeat import heartbeats
from activities.logs import karpenter_log
from activities.planning import concurrently
from core import labels
from core.api.kube import Node, is_node_ready
from core.api.nodeclaim import NodeClaim
from core.cloudprovider import Instance, InstanceState
from core.cluster import ClusterAPI
from core.errors import CloudError, InvalidError
from core.messages import (
    TERMINATION_REASON_ANNOTATION,
    GarbageCollectionInput,
    GarbageCollectionResult,
    MaintenanceActivity,
    TerminationReason,
)

logger = logging.getLogger(__name__)

PARALLEL_DELETIONS = 100
"""Deletions in flight at once, as the provider's collectors run them."""


def _karpenter_owned(tags: dict[str, str] | None, cluster: str) -> bool:
    """Tagged for this cluster and a NodePool, as every VM and NIC a NodeClaim launch makes is."""
    tags = tags or {}
    return tags.get(CLUSTER_TAG) == cluster and NODEPOOL_TAG in tags


class GarbageCollectionActivities:
    """Deletes leaked VMs and NICs of the cluster, and NodeClaims whose VM is gone."""

    def __init__(
        self,
        cluster: ClusterAPI,
        provider: AzureCloudProvider,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cluster = cluster
        self.provider = provider
        self._clock = clock

    @activity.defn(name=MaintenanceActivity.COLLECT_GARBAGE)
    @heartbeats
    async def collect_garbage(self, request: GarbageCollectionInput) -> GarbageCollectionResult:
        """One pass of the three collections; listing failures fail the activity (Temporal retries it)."""
        cluster_name = self.provider.settings.cluster_name
        if request.cluster != cluster_name:
            # A schedule of another cluster reached this worker: collecting would judge that cluster's
            # NodeClaims against this cluster's VMs.
            raise ApplicationError(
                f"GarbageCollectionInput.cluster {request.cluster!r} is not this worker's cluster "
                f"{cluster_name!r}",
                non_retryable=True,
            )
        claims_before = (await self.cluster.snapshot(fresh=True)).nodeclaims
        listed = await self.provider.list()
        instances = [instance for instance in listed if _karpenter_owned(instance.tags, cluster_name)]
        nics = [nic for nic in await self.provider.list_nics() if _karpenter_owned(nic.tags, cluster_name)]
        after = await self.cluster.snapshot(fresh=True)
        result = GarbageCollectionResult()
        grace = timedelta(seconds=request.grace_seconds)
        await self._collect_instances(
            instances, [*claims_before, *after.nodeclaims], after.nodes, grace, result
        )
        await self._collect_nics(nics, instances, after.nodeclaims, result)
        await self._collect_nodes(after.nodes, listed, [*claims_before, *after.nodeclaims], grace, result)
        await self._collect_nodeclaims(claims_before, instances, after.nodes, result)
        for names in (result.instances, result.nodes, result.nics, result.nodeclaims, result.failures):
            names.sort()
        return result

    async def _collect_instances(
        self,
        instances: list[Instance],
        claims: list[NodeClaim],
        nodes: list[Node],
        grace: timedelta,
        result: GarbageCollectionResult,
    ) -> None:
        claimed_ids = {claim.provider_id.lower() for claim in claims if claim.provider_id}
        claimed_names = {claim.name for claim in claims}
        now = self._clock()
        leaked = [
            instance
            for instance in instances
            if instance.state is not InstanceState.DELETING
            and instance.provider_id.lower() not in claimed_ids
            and instance.name not in claimed_names
            # Without a creation time the grace period cannot be honoured; leave it rather than risk it.
            and instance.created_at is not None
            and now - instance.created_at > grace
        ]

        async def collect(instance: Instance) -> None:
            try:
                if NodeNames.of(instance.name).vm != vm_name_from_provider_id(instance.provider_id):
                    raise InvalidError(
                        f"VM of {instance.provider_id} is not named after NodeClaim {instance.name}"
                    )
                await self.provider.delete(instance.name)
            except CloudError as error:
                result.failures.append(f"deleting the VM of {instance.provider_id}: {error}")
                return
            result.instances.append(instance.name)
            karpenter_log(logger, "garbage collected cloudprovider instance", providerID=instance.provider_id)
            for node in nodes:
                if node.spec.provider_id.lower() == instance.provider_id.lower():
                    await self._delete_node(node, instance.provider_id, result)

        await concurrently([collect(instance) for instance in leaked], PARALLEL_DELETIONS)

    async def _delete_node(self, node: Node, provider_id: str, result: GarbageCollectionResult) -> None:
        """Delete a Node no NodeClaim claims, and release its termination finalizer: no lifecycle will."""
        try:
            await self.cluster.delete_node(node.metadata.name)
            if labels.TERMINATION_FINALIZER in node.metadata.finalizers:
                await self.cluster.patch_node(
                    node.metadata.name, remove_finalizers=[labels.TERMINATION_FINALIZER]
                )
        except Exception as error:  # the cluster API's errors are its own; any of them is one failure here
            result.failures.append(f"deleting Node {node.metadata.name}: {error}")
            return
        result.nodes.append(node.metadata.name)
        karpenter_log(logger, "garbage collected node", providerID=provider_id, Node=node.metadata.name)

    def _ours(self, node: Node) -> bool:
        """Whether a Node is one of ours: a NodePool's, or on a VM of this cluster's resource group."""
        if labels.NODEPOOL in node.metadata.labels:
            return True
        settings = self.provider.settings
        ours = provider_id(settings.subscription_id, settings.resource_group, PREFIX).lower()
        return node.spec.provider_id.lower().startswith(ours)

    async def _collect_nodes(
        self,
        nodes: list[Node],
        listed: list[Instance],
        claims: list[NodeClaim],
        grace: timedelta,
        result: GarbageCollectionResult,
    ) -> None:
        in_cloud = {instance.provider_id.lower() for instance in listed}
        claimed_ids = {claim.provider_id.lower() for claim in claims if claim.provider_id}
        claimed_nodes = {claim.status.node_name for claim in claims if claim.status.node_name}
        claimed_vms = {f"{PREFIX}{claim.name}".lower() for claim in claims}
        now = self._clock()

        def orphaned(node: Node) -> bool:
            provider = node.spec.provider_id.lower()
            created = node.metadata.creation_timestamp
            return (
                self._ours(node)
                and provider not in in_cloud
                and provider not in claimed_ids
                and node.metadata.name not in claimed_nodes
                and provider.rpartition("/")[2] not in claimed_vms
                # A Node that just registered may belong to a NodeClaim read before it was made.
                and created is not None
                and now - created > grace
            )

        await concurrently(
            [self._delete_node(node, node.spec.provider_id, result) for node in nodes if orphaned(node)],
            PARALLEL_DELETIONS,
        )

    async def _collect_nics(
        self,
        nics: list[NetworkInterface],
        instances: list[Instance],
        claims: list[NodeClaim],
        result: GarbageCollectionResult,
    ) -> None:
        keep = {vm_name_from_provider_id(instance.provider_id) for instance in instances}
        for claim in claims:
            try:
                keep.add(NodeNames.of(claim.name).nic)
            except CloudError:
                continue  # a name Azure refuses never got a NIC
        orphans = [
            nic.name
            for nic in nics
            if nic.name
            and nic.name not in keep
            and (nic.properties is None or nic.properties.virtual_machine is None)
        ]

        async def collect(name: str) -> None:
            try:
                await self.provider.delete_nic(name)
            except CloudError as error:
                result.failures.append(f"deleting NIC {name}: {error}")
                return
            result.nics.append(name)
            karpenter_log(logger, "garbage collected NIC", nicName=name)

        await concurrently([collect(name) for name in orphans], PARALLEL_DELETIONS)

    async def _collect_nodeclaims(
        self,
        claims: list[NodeClaim],
        instances: list[Instance],
        nodes: list[Node],
        result: GarbageCollectionResult,
    ) -> None:
        in_cloud = {instance.provider_id.lower() for instance in instances}
        ready = {node.spec.provider_id.lower() for node in nodes if is_node_ready(node)}
        gone = [
            claim
            for claim in claims
            if claim.provider_id
            and claim.metadata.deletion_timestamp is None
            and claim.provider_id.lower() not in in_cloud
            and claim.provider_id.lower() not in ready
        ]

        async def collect(claim: NodeClaim) -> None:
            try:
                # Says why on the NodeClaim, so the controller can tell its lifecycle.
                reason = {TERMINATION_REASON_ANNOTATION: TerminationReason.GARBAGE_COLLECTED.value}
                await self.cluster.patch_nodeclaim_metadata(claim.name, annotations=reason)
                await self.cluster.delete_nodeclaim(claim.name)
            except Exception as error:  # as for Nodes: one failure, reported, the others go on
                result.failures.append(f"deleting NodeClaim {claim.name}: {error}")
                return
            result.nodeclaims.append(claim.name)
            karpenter_log(
                logger,
                "garbage collecting nodeclaim with no cloudprovider representation",
                NodeClaim=claim.name,
                **{"provider-id": claim.provider_id, "nodepool": claim.nodepool_name or ""},
            )

        await concurrently([collect(claim) for claim in gone], PARALLEL_DELETIONS)
