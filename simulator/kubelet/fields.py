"""The downward API: a pod's own fields as a container's environment or a volume's files, by `fieldPath`."""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class FieldUnsupported(Exception):
    """A fieldPath the downward API does not offer; the message names it."""


def field_value(pod: Json, path: str) -> str:
    """The value of `path` (`metadata.name`, `status.podIP`, `metadata.labels['app']`, ...) in the pod; "" for
    one the pod does not have yet."""
    metadata, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    if match := _SUBSCRIPT.match(path):
        return str((metadata.get(match[1]) or {}).get(match[2], ""))
    values = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(item["ip"] for item in status.get("hostIPs") or []),
        "status.podIPs": ",".join(item["ip"] for item in status.get("podIPs") or []),
    }
    if path not in values:
        raise FieldUnsupported(f"fieldPath {path} is not supported")
    return str(values[path] or "")
