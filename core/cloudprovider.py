"""The narrow interface between NodeClaim lifecycles and a cloud: create, get, list and delete instances.

Like Karpenter's CloudProvider, it is small on purpose: the simulated Azure, the ARM-backed Azure provider
and test fakes all implement it. Instance names derive from NodeClaim names, so a create that is retried or
replayed finds the instance it made instead of making a second one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from core.api.meta import Taint
from core.errors import CloudError


class LaunchRequest(BaseModel):
    """One instance to create, with the node identity its kubelet will register (labels and taints)."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The NodeClaim name; the instance name and every derived resource name come from it."""
    nodepool: str
    instance_type: str
    zone: str
    capacity_type: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    """Registered with the node: the NodePool's taints, its startup taints and `karpenter.sh/unregistered`."""
    tags: dict[str, str] = Field(default_factory=dict)


class InstanceState(StrEnum):
    CREATING = "Creating"
    RUNNING = "Running"
    DELETING = "Deleting"


class Instance(BaseModel):
    """An instance as the cloud reports it."""

    name: str
    provider_id: str
    instance_type: str
    zone: str
    capacity_type: str
    state: InstanceState = InstanceState.RUNNING
    tags: dict[str, str] = Field(default_factory=dict)
    created_at: datetime | None = None
    image_id: str = ""
    """The image the instance booted (the NodeClaim's `status.imageID`); empty when the cloud does not say."""


class CloudProvider(Protocol):
    """Instances for NodeClaims. Errors are the kinds in `core.errors`."""

    async def create(self, request: LaunchRequest) -> Instance:
        """Create the instance, or return it if one with this name exists. It may return while the instance is
        still being created (`InstanceState.CREATING`), as the AKS provider does; `create_failure` then says
        whether that create failed."""
        ...

    async def create_failure(self, name: str) -> CloudError | None:
        """Why the instance's create failed after `create` returned (or that it is gone); None while it is
        being created or once it is made."""
        ...

    async def get(self, name: str) -> Instance:
        """The instance with this name; `NotFoundError` when there is none."""
        ...

    async def list(self) -> list[Instance]:
        """Every instance this cluster owns (by tag)."""
        ...

    async def delete(self, name: str) -> None:
        """Delete the instance and what was made with it; an instance that is already gone counts as done."""
        ...
