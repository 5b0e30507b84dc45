"""What each NodePool costs per hour, as Karpenter's `karpenter_nodepools_cost_total` counts it: every NodeClaim
that carries the labels of a launched offering (NodePool, instance type, capacity type, zone), at that offering's
price among the NodePool's instance types (NodeOverlay price adjustments included), until the NodeClaim is gone.
A NodeClaim whose offering is not listed (a size no longer offered) counts nothing, as Karpenter's logs and
undercounts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from core import labels
from core.api.nodeclaim import NodeClaim
from core.disruption.candidates import offering_price
from core.instancetypes.types import InstanceType

OFFERING_LABELS = (labels.NODEPOOL, labels.INSTANCE_TYPE, labels.CAPACITY_TYPE, labels.ZONE)
"""What a NodeClaim must carry to be counted: its launch wrote them."""


def nodepool_costs(
    pools: Iterable[str],
    nodeclaims: Iterable[NodeClaim],
    instance_types: Mapping[str, Sequence[InstanceType]],
) -> dict[str, int]:
    """Each NodePool's hourly cost in micro-dollars (0 for one without NodeClaims)."""
    costs = dict.fromkeys(pools, 0)
    for claim in nodeclaims:
        if not all(claim.labels.get(key) for key in OFFERING_LABELS):
            continue
        pool = claim.labels[labels.NODEPOOL]
        name = claim.labels[labels.INSTANCE_TYPE]
        listed = next((it for it in instance_types.get(pool, ()) if it.name == name), None)
        price = offering_price(listed, claim.labels) if listed is not None else None
        costs[pool] = costs.get(pool, 0) + (price or 0)
    return costs
