"""Objects of any kind through discovery and the dynamic client: server-side apply of manifests, scale, get,
list and delete, for the demo, tests and benchmarks, and lookups of kinds nodewright does not model.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError

from activities.kubeclient.connection import Connection
from activities.kubeclient.patches import JSON_PATCH, MERGE_PATCH, precondition_failed
from activities.kubeclient.resources import API_VERSIONS
from core.api.kube import DEFAULT_NAMESPACE
from core.api.manifests import ManifestError, load_yaml
from core.errors import CloudError, ConflictError, InvalidError, NotFoundError

FIELD_MANAGER = "nodewright"


class AnyObjects(Connection):
    """Objects of any kind, found by discovery through the dynamic client: server-side apply, scale, get, list
    and delete, for the demo and tests, and the lookups the other parts make of kinds they do not model."""

    def __init__(self, configuration: k8s.Configuration, **options: Any) -> None:
        super().__init__(configuration, **options)
        self._dynamic_client: DynamicClient | None = None
        self._dynamic_lock = threading.Lock()

    def _dynamic(self) -> DynamicClient:
        with self._dynamic_lock:
            if self._dynamic_client is None:
                self._dynamic_client = self._request(lambda: DynamicClient(self.api_client), "discovery")
            return self._dynamic_client

    def _resource(self, kind: str, api_version: str | None = None) -> Any:
        """The discovered resource of a kind (`apiVersion` defaults to the one nodewright uses for it)."""
        wanted = {"kind": kind}
        if api_version or kind in API_VERSIONS:
            wanted["api_version"] = api_version or API_VERSIONS[kind]
        try:
            return self._request(lambda: self._dynamic().resources.get(**wanted), f"discover {kind}")
        except ResourceNotFoundError:
            version = f" {wanted['api_version']}" if "api_version" in wanted else ""
            raise InvalidError(f"the API server at {self.server} serves no kind {kind}{version}") from None
        except ResourceNotUniqueError:
            raise InvalidError(f"kind {kind} is served by several API groups; give its apiVersion") from None

    async def apply(self, manifests: str | Iterable[Mapping[str, Any]]) -> builtins.list[str]:
        """Server-side apply (field manager "nodewright", conflicts forced) of YAML text or manifests, in order;
        one line per object, as kubectl prints it (`deployment.apps/web serverside-applied`). A document's
        `status` is applied too, through the status subresource (which `kubectl apply` leaves out), as the
        controller that owns it would write it. `InvalidError` listing every rejected object and why, after the
        others were applied."""
        try:
            documents = load_yaml(manifests, "manifests") if isinstance(manifests, str) else list(manifests)
        except ManifestError as error:
            raise InvalidError(str(error), code="Invalid") from None
        return await self._in_thread(self._apply_all, documents)

    def _apply_all(self, documents: builtins.list[Any]) -> builtins.list[str]:
        results: list[str] = []
        problems: list[str] = []
        for number, document in enumerate(documents, start=1):
            try:
                results.append(self._apply_one(document, number))
            except CloudError as error:
                problems.append(str(error))
        if problems:
            raise InvalidError("\n".join(problems), code="Invalid")
        return results

    def _apply_one(self, document: Any, number: int) -> str:
        if not isinstance(document, Mapping):
            raise InvalidError(
                f"document {number}: expected a Kubernetes object, not {type(document).__name__}"
            )
        kind, api_version = document.get("kind"), document.get("apiVersion")
        metadata = document.get("metadata") or {}
        name = metadata.get("name")
        label = f"{kind or f'document {number}'} {name or ''}".strip()
        if not kind or not api_version or not name:
            missing = [
                field
                for field, value in (("kind", kind), ("apiVersion", api_version), ("metadata.name", name))
                if not value
            ]
            raise InvalidError(f"{label}: {', '.join(missing)}: Field required")
        resource = self._resource(str(kind), str(api_version))
        namespace = (metadata.get("namespace") or DEFAULT_NAMESPACE) if resource.namespaced else None
        body = dict(document)
        if namespace:
            body["metadata"] = {**metadata, "namespace": namespace}

        def server_side_apply(target: Any, content: dict[str, Any], what: str) -> None:
            self._dynamic_call(
                "server_side_apply",
                lambda: target,
                what,
                body=content,
                name=name,
                namespace=namespace,
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

        try:
            server_side_apply(resource, body, f"apply {label}")
            status = document.get("status")
            if status and "status" in resource.subresources:
                # What a controller would write (e.g. the AKS image controller's AKSNodeClass images): the main
                # resource ignores status, so it goes through the status subresource.
                status_body = {
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": body["metadata"],
                    "status": status,
                }
                server_side_apply(
                    resource.subresources["status"], status_body, f"apply the status of {label}"
                )
        except (InvalidError, NotFoundError, ConflictError) as error:
            where = f"{namespace}/{name}" if namespace else name
            raise InvalidError(f"{kind} {where}: {error}", code=error.code) from None
        group = resource.group
        return f"{str(kind).lower()}{'.' + group if group else ''}/{name} serverside-applied"

    def _dynamic_call(self, verb: str, resource: Callable[[], Any], what: str, **options: Any) -> Any:
        """`verb` (get, patch, delete, server_side_apply) of the dynamic client on what `resource` discovers (on this
        thread, within the request), answered as decoded JSON."""

        def call() -> Any:
            target = resource()
            method = getattr(self._dynamic(), verb)
            return method(target, serialize=False, _request_timeout=self._timeout, **options)

        return self._decoded(call, what)

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        """Set the replicas of a Deployment, ReplicaSet or StatefulSet (through its scale subresource)."""
        await self._in_thread(
            self._dynamic_call,
            "patch",
            lambda: self._resource(kind).subresources["scale"],
            f"scale {kind} {namespace}/{name}",
            body={"spec": {"replicas": replicas}},
            name=name,
            namespace=namespace,
            content_type=MERGE_PATCH,
        )

    async def set_replicas(
        self, kind: str, api_version: str, name: str, namespace: str | None, expected: int, replicas: int
    ) -> bool:
        """Set `spec.replicas` of any object if it still holds `expected`; False when it changed meanwhile. One
        JSON patch whose test makes the change conditional, so a value someone wrote after we read is never
        overwritten."""
        path = "/spec/replicas"
        operations = [
            {"op": "test", "path": path, "value": expected},
            {"op": "replace", "path": path, "value": replicas},
        ]
        try:
            await self._in_thread(
                self._dynamic_call,
                "patch",
                lambda: self._resource(kind, api_version),
                f"set the replicas of {kind} {name}",
                body=operations,
                name=name,
                namespace=namespace,
                content_type=JSON_PATCH,
            )
        except (ConflictError, InvalidError) as error:
            if precondition_failed(error):
                return False
            raise
        return True

    async def get_object(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> dict[str, Any] | None:
        """Any object's manifest, or None."""
        try:
            result: dict[str, Any] = await self._in_thread(
                self._dynamic_call,
                "get",
                lambda: self._resource(kind, api_version),
                f"get {kind} {name}",
                name=name,
                namespace=namespace,
            )
        except NotFoundError:
            return None
        return result

    async def list_objects(
        self, kind: str, namespace: str | None = None, field_selector: str = "", label_selector: str = ""
    ) -> builtins.list[dict[str, Any]]:
        """Manifests of a kind, in one namespace or all, optionally filtered by field and label selectors."""
        body = await self._in_thread(
            self._dynamic_call,
            "get",
            lambda: self._resource(kind),
            f"list {kind}",
            namespace=namespace,
            field_selector=field_selector or None,
            label_selector=label_selector or None,
        )
        api_version = str(body.get("apiVersion") or "")
        return [{**item, "apiVersion": api_version, "kind": kind} for item in body.get("items") or ()]

    async def delete_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete (or, with finalizers, mark for deletion) any object; one already gone counts as done."""
        with contextlib.suppress(NotFoundError):
            await self._in_thread(
                self._dynamic_call,
                "delete",
                lambda: self._resource(kind),
                f"delete {kind} {name}",
                name=name,
                namespace=namespace,
            )
