"""Leases, for leader election (`workers.leader`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from activities.kubeclient.connection import Connection
from activities.kubeclient.resources import LEASE, namespaced


class Leases(Connection):
    """Leases, for leader election."""

    # Only get, create and update (a replace with the resourceVersion read as its precondition), so the
    # controller's Role on leases needs no list, watch, patch or delete. The requests go through the custom
    # objects API, whose paths are those of any grouped resource: the Lease stays raw JSON (the generated
    # V1Lease model would rewrite its MicroTime fields in a format the API server does not always accept).

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The `coordination.k8s.io/v1` Lease, or None."""
        return await self._get(self._custom.get_namespaced_custom_object, *namespaced(LEASE, namespace), name)

    async def create_lease(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease; `ConflictError` (AlreadyExists) when someone else created it first."""
        namespace = lease["metadata"]["namespace"]
        created: dict[str, Any] = await self._call(
            self._custom.create_namespaced_custom_object, *namespaced(LEASE, namespace), dict(lease)
        )
        return created

    async def update_lease(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the Lease; `ConflictError` (Conflict) when it changed since its `resourceVersion` was read."""
        metadata = lease["metadata"]
        replaced: dict[str, Any] = await self._call(
            self._custom.replace_namespaced_custom_object,
            *namespaced(LEASE, metadata["namespace"]),
            metadata["name"],
            dict(lease),
        )
        return replaced
