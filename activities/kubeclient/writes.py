"""Changes to NodeClaims, Nodes and Pods, and the status of nodewright's other kinds. Deleting or evicting something
that is already gone counts as done.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import random
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s

from activities.kubeclient.patches import JSON_PATCH, MERGE_PATCH, field_patch, precondition_failed
from activities.kubeclient.reads import Reads
from activities.kubeclient.resources import (
    CAPACITYBUFFER,
    CAPACITYWINDOW,
    NODE,
    NODECLAIM,
    NODECLASS,
    NODEOVERLAY,
    NODEPOOL,
    as_manifest,
)
from core.api.kube import Node
from core.api.meta import OwnerReference, Taint
from core.api.nodeclaim import NodeClaim
from core.errors import ConflictError, InvalidError, NotFoundError, PDBViolationError, ThrottledError


class Writes(Reads):
    """Changes to NodeClaims, Nodes, Pods and the status of nodewright's other kinds, each made so that nobody
    else's change is overwritten (see `activities.kubeclient.patches`)."""

    async def patch_nodeclass_status(self, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into the AKSNodeClass's status subresource; a NodeClass that is gone is left alone."""
        with contextlib.suppress(NotFoundError):
            await self._call(
                self._custom.patch_cluster_custom_object_status,
                *NODECLASS.custom,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
            )

    async def patch_status(
        self,
        kind: str,
        name: str,
        status: dict[str, Any],
        resource_version: str,
        namespace: str | None = None,
    ) -> bool:
        """A merge patch of the status subresource of a NodePool, AKSNodeClass, NodeOverlay, CapacityWindow or (in
        `namespace`) CapacityBuffer, with the resourceVersion as its precondition (none when it is empty: the
        fields patched are the caller's alone)."""
        resource = {r.kind: r for r in (NODEPOOL, NODECLASS, NODEOVERLAY, CAPACITYWINDOW, CAPACITYBUFFER)}[
            kind
        ]
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            if namespace is not None:
                group, version, plural = resource.custom
                await self._call(
                    self._custom.patch_namespaced_custom_object_status,
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                )
            else:
                await self._call(
                    self._custom.patch_cluster_custom_object_status,
                    *resource.custom,
                    name,
                    body,
                    _content_type=MERGE_PATCH,
                )
        except NotFoundError:
            return False
        except ConflictError as error:
            if error.code != "Conflict":
                raise
            return False
        return True

    async def create_nodeclaim(self, nodeclaim: NodeClaim) -> NodeClaim:
        """Create it, or return the existing one with the same name."""
        body = as_manifest(nodeclaim)
        for field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "generation"):
            body["metadata"].pop(field, None)
        for _ in range(self._conflict_retries):
            try:
                created = await self._call(self._custom.create_cluster_custom_object, *NODECLAIM.custom, body)
                if self.informer is not None:
                    # The next plan must see it (and the pods nominated to it) before its watch event comes.
                    self.informer.remember(NODECLAIM.kind, created)
                return NodeClaim.parse(self._remember(NODECLAIM.kind, created))
            except ConflictError as error:
                if error.code != "AlreadyExists":
                    raise
            existing = await self.get_nodeclaim(nodeclaim.name)
            if existing is not None:
                return existing
        raise ConflictError(f"NodeClaim {nodeclaim.name} kept appearing and disappearing")

    async def change_nodeclaim_status(
        self, name: str, change: Callable[[NodeClaim], None]
    ) -> NodeClaim | None:
        """Read-modify-write of the status: `change` edits a NodeClaim's status in place; the result replaces
        the status with the resourceVersion as a precondition, and on a conflict `change` is made again on the
        latest version. The first try starts from the version this client saw last, if any. When `change`
        changes nothing, nothing is written (a condition polled again costs no write). None when the NodeClaim
        is gone."""
        raw = self._recall(NODECLAIM.kind, name)
        for _ in range(self._conflict_retries):
            if raw is None:
                raw = await self._get(self._custom.get_cluster_custom_object, *NODECLAIM.custom, name)
                if raw is None:
                    return None
            claim = NodeClaim.parse(raw)
            before = claim.status.model_copy(deep=True)
            change(claim)
            if claim.status == before:
                self._remember(NODECLAIM.kind, raw)
                return claim
            try:
                replaced = await self._call(
                    self._custom.replace_cluster_custom_object_status,
                    *NODECLAIM.custom,
                    name,
                    as_manifest(claim),
                )
            except NotFoundError:
                return None
            except ConflictError as error:
                if error.code != "Conflict":
                    raise
                raw = None
                continue
            return NodeClaim.parse(self._remember(NODECLAIM.kind, replaced))
        raise ConflictError(f"NodeClaim {name} kept changing; gave up after {self._conflict_retries} tries")

    async def _read_modify_write(
        self,
        read: Callable[[], Any],
        patch: Callable[[dict[str, Any]], Any],
        change: Callable[[dict[str, Any]], dict[str, Any]],
        kind: str,
        name: str,
    ) -> dict[str, Any] | None:
        """`change` makes a merge patch (empty: nothing to do) from the latest version; it is sent as a JSON
        patch whose preconditions are the fields it changes as they were read (`field_patch`), and made again
        when one of them changed meanwhile. The first try starts from the version this client saw last, if
        any; when that needs no change, the latest is read to make sure. None when the object is gone."""
        recalled = self._recall(kind, name)
        for attempt in range(self._conflict_retries):
            try:
                current: dict[str, Any] = recalled if recalled is not None else await self._call(read)
                body = change(current)
                if not body and recalled is not None:
                    recalled = None
                    continue
                if not body:
                    return self._remember(kind, current)
                result: dict[str, Any] = await self._call(
                    patch, field_patch(current, body), _content_type=JSON_PATCH
                )
                self._written[(kind, name)] = self._clock()
                return self._remember(kind, result)
            except NotFoundError:
                return None
            except (ConflictError, InvalidError) as error:
                # A failed precondition: 409 for resourceVersion, 422 for a JSON patch test.
                if not precondition_failed(error):
                    raise
            if recalled is not None:  # only what this client remembered was out of date
                recalled = None
                continue
            await asyncio.sleep(random.uniform(0, min(1.0, 0.01 * 2**attempt)))
        raise ConflictError(f"{kind} {name} kept changing; gave up after {self._conflict_retries} tries")

    async def patch_nodeclaim_metadata(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
    ) -> NodeClaim | None:
        def change(current: dict[str, Any]) -> dict[str, Any]:
            metadata = current["metadata"]
            patch: dict[str, Any] = {}
            for field, wanted in (("labels", labels), ("annotations", annotations)):
                held = metadata.get(field) or {}
                if changed := {key: value for key, value in (wanted or {}).items() if held.get(key) != value}:
                    patch[field] = changed
            finalizers = metadata.get("finalizers") or []
            kept = [item for item in finalizers if item not in set(remove_finalizers or ())]
            if kept != finalizers:
                patch["finalizers"] = kept
            return {"metadata": patch} if patch else {}

        args = (*NODECLAIM.custom, name)
        raw = await self._read_modify_write(
            functools.partial(self._custom.get_cluster_custom_object, *args),
            functools.partial(self._custom.patch_cluster_custom_object, *args),
            change,
            NODECLAIM.kind,
            name,
        )
        return None if raw is None else NodeClaim.parse(raw)

    async def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> bool:
        """Set annotations on a NodePool or an AKSNodeClass (a merge patch of those keys alone); False when it
        is gone."""
        resource = {NODEPOOL.kind: NODEPOOL, NODECLASS.kind: NODECLASS}[kind]
        body = {"metadata": {"annotations": annotations}}
        patch = self._custom.patch_cluster_custom_object
        try:
            await self._call(patch, *resource.custom, name, body, _content_type=MERGE_PATCH)
        except NotFoundError:
            return False
        return True

    async def patch_node(
        self,
        name: str,
        labels: Mapping[str, str | None] | None = None,
        add_taints: builtins.list[Taint] | None = None,
        remove_taint_keys: builtins.list[str] | None = None,
        add_finalizers: builtins.list[str] | None = None,
        remove_finalizers: builtins.list[str] | None = None,
        unschedulable: bool | None = None,
        add_owner: OwnerReference | None = None,
    ) -> Node | None:
        """Change the node's labels, taints (removals first, so a key can be replaced), finalizers, cordon or
        owners (`add_owner`, unless one of its kind and uid is there); None when the node is gone."""

        def change(current: dict[str, Any]) -> dict[str, Any]:
            metadata, spec = current["metadata"], current.get("spec") or {}
            patch: dict[str, Any] = {}
            held = metadata.get("labels") or {}
            if changed := {key: value for key, value in (labels or {}).items() if held.get(key) != value}:
                patch.setdefault("metadata", {})["labels"] = changed
            taints = [
                taint
                for taint in spec.get("taints") or []
                if taint.get("key") not in (remove_taint_keys or ())
            ]
            for taint in add_taints or ():
                if not any(
                    (present.get("key"), present.get("effect")) == (taint.key, taint.effect)
                    for present in taints
                ):
                    taints.append(as_manifest(taint))
            if taints != (spec.get("taints") or []):
                patch.setdefault("spec", {})["taints"] = taints
            finalizers = metadata.get("finalizers") or []
            wanted = [item for item in finalizers if item not in set(remove_finalizers or ())]
            wanted += [item for item in add_finalizers or () if item not in wanted]
            if wanted != finalizers:
                patch.setdefault("metadata", {})["finalizers"] = wanted
            if unschedulable is not None and unschedulable != bool(spec.get("unschedulable")):
                patch.setdefault("spec", {})["unschedulable"] = unschedulable
            owners = metadata.get("ownerReferences") or []
            if add_owner is not None and not any(
                (owner.get("kind"), owner.get("uid")) == (add_owner.kind, add_owner.uid) for owner in owners
            ):
                patch.setdefault("metadata", {})["ownerReferences"] = [*owners, as_manifest(add_owner)]
            return patch

        raw = await self._read_modify_write(
            functools.partial(self._core.read_node, name),
            functools.partial(self._core.patch_node, name),
            change,
            NODE.kind,
            name,
        )
        return None if raw is None else Node.model_validate(raw)

    async def evict_pod(self, namespace: str, name: str) -> None:
        """Evict through the eviction API (policy/v1); `PDBViolationError` when a budget forbids it now. A pod
        already gone counts as evicted."""
        body = k8s.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        )
        try:
            await self._call(self._core.create_namespaced_pod_eviction, name, namespace, body)
        except NotFoundError:
            return
        except ThrottledError as error:
            # 429 with a DisruptionBudget cause; a 429 without one is the server shedding load.
            if error.code == "DisruptionBudget":
                raise PDBViolationError(str(error), code=error.code) from error
            raise

    async def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        await self._delete(
            self._core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_period_seconds
        )

    async def delete_node(self, name: str) -> None:
        self._forget(NODE.kind, name)
        await self._delete(self._core.delete_node, name)

    async def delete_nodeclaim(self, name: str) -> None:
        self._forget(NODECLAIM.kind, name)
        await self._delete(self._custom.delete_cluster_custom_object, *NODECLAIM.custom, name)
