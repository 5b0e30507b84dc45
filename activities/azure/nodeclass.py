"""The AKSNodeClass a launch builds its VM from: the one its NodePool references, read from the cluster.

The provider reads the whole object, spec and status, because the image and Kubernetes version come from the
status that the AKS provider's image controller keeps (`status.images`, `status.kubernetesVersion`).
"""

from __future__ import annotations

from activities.recent import READS_KEPT_SECONDS, Recent
from core.api.aksnodeclass import AKSNodeClass
from core.api.nodepool import SUPPORTED_NODECLASS
from core.cloudprovider import LaunchRequest
from core.cluster import ClusterAPI
from core.errors import InvalidError, TransientError


class ClusterNodeClasses:
    """The provider's `NodeClassLookup` over a ClusterAPI."""

    def __init__(self, cluster: ClusterAPI, keep_seconds: float = READS_KEPT_SECONDS) -> None:
        self._nodepool = Recent(lambda name: cluster.get_nodepool(name), keep_seconds)
        self._nodeclass = Recent(lambda name: cluster.get_nodeclass(name), keep_seconds)

    async def __call__(self, request: LaunchRequest) -> AKSNodeClass | None:
        """The launch's AKSNodeClass (`of_nodepool`)."""
        return await self.of_nodepool(request.nodepool)

    async def of_nodepool(self, name: str) -> AKSNodeClass | None:
        """The NodePool's AKSNodeClass; None for a NodePool not in the cluster (its launches get the defaults).

        A reference to another kind is an `InvalidError`; a missing AKSNodeClass a `TransientError` (the
        launch succeeds once it exists, as Karpenter waits for a NodeClass). Both are read once every
        `keep_seconds` for all launches (`Recent`).
        """
        nodepool = await self._nodepool(name)
        if nodepool is None:
            return None
        reference = nodepool.spec.template.spec.node_class_ref
        if not reference.is_managed:
            raise InvalidError(
                f"NodePool {name}: spec.template.spec.nodeClassRef is a {reference.group}/"
                f"{reference.kind}, not a {'/'.join(SUPPORTED_NODECLASS)}",
                code="InvalidNodeClassRef",
            )
        nodeclass = await self._nodeclass(reference.name)
        if nodeclass is None:
            raise TransientError(
                f"AKSNodeClass {reference.name} (of NodePool {name}) not found",
                code="NodeClassNotFound",
            )
        return nodeclass
