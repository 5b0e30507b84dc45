"""Secrets: read (base64-decoded), created, deleted only while still the one created."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from activities.kubeclient.connection import Connection
from core.api.kube import Secret
from core.errors import ConflictError, InvalidError, NotFoundError


class Secrets(Connection):
    """Secrets (bootstrap tokens), whose values are never logged."""

    async def read_secret(self, namespace: str, name: str) -> Secret | None:
        """The Secret with its data base64-decoded; `InvalidError` (naming the Secret and key, never a value) when
        a value is not text."""
        raw = await self._get(self._core.read_namespaced_secret, name, namespace)
        if raw is None:
            return None
        data = {}
        for key, value in (raw.get("data") or {}).items():
            try:
                data[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise InvalidError(
                    f"Secret {namespace}/{name}: data.{key} is not base64-encoded text", code="Invalid"
                ) from None
        return Secret.model_validate({**raw, "data": data})

    async def create_secret(self, secret: Mapping[str, Any]) -> Secret:
        """Create the Secret (`stringData` is stored base64-encoded, as the API server does); `ConflictError`
        (AlreadyExists) when one of its name exists."""
        namespace = secret["metadata"]["namespace"]
        created: dict[str, Any] = await self._call(
            self._core.create_namespaced_secret, namespace, dict(secret)
        )
        return Secret.model_validate({**created, "data": {}})

    async def delete_secret(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the Secret if it is still the one with this uid; False when it is gone or was replaced by
        another of the same name (which is left alone)."""
        try:
            await self._call(
                self._core.delete_namespaced_secret, name, namespace, body={"preconditions": {"uid": uid}}
            )
        except (NotFoundError, ConflictError):
            return False
        return True
