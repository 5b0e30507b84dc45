"""Nodes, NodeClaims, Pods and the objects around them, read one by one."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Mapping
from typing import Any

from activities.kubeclient.connection import Connection
from activities.kubeclient.resources import NODE, NODECLAIM, NODECLASS, NODEPOOL, POD, VOLUME_ATTACHMENT
from core.api.aksnodeclass import AKSNodeClass
from core.api.kube import Node, PersistentVolumeClaim, Pod, VolumeAttachment
from core.api.nodeclaim import NodeClaim
from core.api.nodepool import NodePool


class Reads(Connection):
    """Nodes, NodeClaims, Pods and what they need read one by one: from what this client remembers or its
    informer holds where that is safe, else from the API server."""

    def node_seen(self, name: str) -> Node | None:
        raw = self._just_written(NODE.kind, name)
        if raw is None and self.informer is not None:
            raw = self.informer.get(NODE.kind, name)  # the informer's own copy: parsed, never written from
        return None if raw is None else Node.model_validate(raw)

    async def get_node(self, name: str) -> Node | None:
        raw = await self._get(self._core.read_node, name)
        return None if raw is None else Node.model_validate(self._remember(NODE.kind, raw))

    async def find_node_by_provider_id(self, provider_id: str) -> Node | None:
        # Nodes support no field selector on spec.providerID. Most clouds name the Node after the instance
        # (on Azure the VM, `.../virtualMachines/aks-default-abcde`): try that name first, so a lookup is one
        # GET, not a LIST of every Node (which made registering N nodes cost N LISTs of N Nodes).
        guess = provider_id.rstrip("/").rpartition("/")[2].lower()
        if guess:
            # The worker's informer usually holds the Node by the time its lifecycle looks (the controller's signal
            # that woke it came from a watch too). Its copy may lag: the write that follows tests the fields it
            # changes, so a stale one costs a second try, never someone else's change.
            held = self.informer.get(NODE.kind, guess) if self.informer is not None else None
            if held is not None and (held.get("spec") or {}).get("providerID") == provider_id:
                return Node.model_validate(self._remember(NODE.kind, copy.deepcopy(held)))
            node = await self.get_node(guess)
            if node is not None and node.spec.provider_id == provider_id:
                return node

        # Not under that name (or not yet there): the informer's Nodes when it follows them, so that each
        # lifecycle waiting for its Node does not LIST every Node; else a LIST.
        def matches(item: Mapping[str, Any]) -> bool:
            return (item.get("spec") or {}).get("providerID") == provider_id

        found = self.informer.matching(NODE.kind, matches) if self.informer is not None else None
        if found is None:
            found = [item for item in await self._list(NODE) if matches(item)]
        return Node.model_validate(found[0]) if found else None

    async def get_nodeclaim(self, name: str, *, cached: bool = False) -> NodeClaim | None:
        held = self.informer.get(NODECLAIM.kind, name) if cached and self.informer is not None else None
        if held is not None:  # the informer's own copy: never a write's starting point (`_remember`)
            return NodeClaim.parse(held)
        raw = await self._get(self._custom.get_cluster_custom_object, *NODECLAIM.custom, name)
        return None if raw is None else NodeClaim.parse(self._remember(NODECLAIM.kind, raw))

    async def list_pods_on_node(self, node_name: str) -> builtins.list[Pod]:
        items = await self._list(POD, field_selector=f"spec.nodeName={node_name}")
        return [Pod.model_validate(item) for item in items]

    async def list_volume_attachments(self, node_name: str) -> builtins.list[VolumeAttachment]:
        """The VolumeAttachments of a node (the API has no field selector for it: all are listed)."""
        items = await self._list(VOLUME_ATTACHMENT)
        attachments = [VolumeAttachment.model_validate(item) for item in items]
        return [attachment for attachment in attachments if attachment.spec.node_name == node_name]

    async def get_persistent_volume_claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        raw = await self._get(self._core.read_namespaced_persistent_volume_claim, name, namespace)
        return None if raw is None else PersistentVolumeClaim.model_validate(raw)

    async def get_nodepool(self, name: str) -> NodePool | None:
        raw = await self._get(self._custom.get_cluster_custom_object, *NODEPOOL.custom, name)
        return None if raw is None else NodePool.parse(raw)

    async def get_nodeclass(self, name: str) -> AKSNodeClass | None:
        raw = await self._get(self._custom.get_cluster_custom_object, *NODECLASS.custom, name)
        return None if raw is None else AKSNodeClass.parse(raw)

    async def list_nodes(self) -> builtins.list[Node]:
        return [Node.model_validate(item) for item in await self._list(NODE)]

    async def list_nodeclaims(self) -> builtins.list[NodeClaim]:
        return [NodeClaim.parse(item) for item in await self._list(NODECLAIM)]

    async def list_pods(self, namespace: str | None = None, label_selector: str = "") -> builtins.list[Pod]:
        items = await self._list(POD, namespace, label_selector=label_selector)
        return [Pod.model_validate(item) for item in items]
