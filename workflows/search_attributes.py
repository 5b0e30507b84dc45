"""The typed search attributes our workflows publish, so the Temporal UI and `list_workflows` can find a history.

One Keyword each, named as DESIGN.md names them: a query such as `NodeClaim="default-abc12"` or
`NodePool="general" AND Phase="Registering"` finds the workflows behind a NodeClaim. Servers must know the
names before a workflow upserts them: the dev server registers `ALL` at start, and `nodewright worker`
registers them on any other Temporal (workers/temporal_server.py).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

NODEPOOL = SearchAttributeKey.for_keyword("NodePool")
NODECLAIM = SearchAttributeKey.for_keyword("NodeClaim")
INSTANCE_TYPE = SearchAttributeKey.for_keyword("InstanceType")
ZONE = SearchAttributeKey.for_keyword("Zone")
CAPACITY_TYPE = SearchAttributeKey.for_keyword("CapacityType")
PHASE = SearchAttributeKey.for_keyword("Phase")
DISRUPTION_REASON = SearchAttributeKey.for_keyword("DisruptionReason")
DECISION = SearchAttributeKey.for_keyword("Decision")

ALL: tuple[SearchAttributeKey[str], ...] = (
    NODEPOOL,
    NODECLAIM,
    INSTANCE_TYPE,
    ZONE,
    CAPACITY_TYPE,
    PHASE,
    DISRUPTION_REASON,
    DECISION,
)


def lifecycle_start(nodeclaim: str, nodepool: str, phase: str) -> TypedSearchAttributes:
    """What a NodeClaim's lifecycle is started with, so that its first workflow task has nothing to upsert."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(NODECLAIM, nodeclaim),
            SearchAttributePair(NODEPOOL, nodepool),
            SearchAttributePair(PHASE, phase),
        ]
    )
