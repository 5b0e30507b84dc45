"""Writes that overwrite nobody else's change. Changes to a Node or a NodeClaim's metadata are read-modify-write:
a JSON patch whose tests are the fields it changes as they were read (`field_patch`), which the API server checks
as a precondition (422 or 409 on a concurrent change, then re-read and retry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import CloudError, ConflictError

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def field_patch(current: Mapping[str, Any], merge: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A two-level merge patch (`{"metadata": {"labels": {...}, "finalizers": [...]}, "spec": {...}}`) made
    from `current`, as a JSON patch that holds only if what it changes is still as read: each label or
    annotation is set or removed on its own, and each other field is tested to be as read before it is
    replaced. Kubelet heartbeats and other writers' fields no longer make it fail, as a resourceVersion
    precondition on the whole object did. A field that was absent cannot be tested: then the
    resourceVersion is."""
    operations: list[dict[str, Any]] = []
    whole_object = False
    for section, fields in merge.items():
        held_section = current.get(section) or {}
        for field, value in fields.items():
            path = _pointer(section, field)
            held = held_section.get(field)
            if isinstance(value, dict) and isinstance(held, dict):
                for key, item in value.items():
                    if item is None:
                        if key in held:
                            operations.append({"op": "remove", "path": _pointer(section, field, key)})
                    else:
                        operations.append({"op": "add", "path": _pointer(section, field, key), "value": item})
            elif field in held_section:
                operations.append({"op": "test", "path": path, "value": held})
                operations.append({"op": "replace", "path": path, "value": value})
            else:
                whole_object = True
                operations.append({"op": "add", "path": path, "value": value})
    if whole_object:
        version = current["metadata"]["resourceVersion"]
        operations.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
    return operations


FAILED_TEST = "the server rejected our request due to an error in our request"
"""The API server's whole answer (422, reason Invalid, no details) to a JSON patch whose test failed; an
object it finds invalid is answered with the field and the rule instead."""


def precondition_failed(error: CloudError) -> bool:
    if isinstance(error, ConflictError):
        return error.code == "Conflict"
    return error.code == "Invalid" and str(error) == FAILED_TEST
