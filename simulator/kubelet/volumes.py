"""A pod's volumes as directories of the process kubelet, made before its containers start, as a kubelet's volume
manager makes them: emptyDir, secret, configMap, downwardAPI, projected (the service account token from a
TokenRequest bound to the pod, the cluster CA from `kube-root-ca.crt`, the namespace: what the ServiceAccount
admission plugin mounts at /var/run/secrets/kubernetes.io/serviceaccount), persistentVolumeClaim (the bound
PersistentVolume's host directory) and hostPath.

With the pod's fsGroup, a volume's directories and files get that group, and the directories of writable
volumes are group-writable with the set-group-ID bit, so that a non-root container can write its PVC as on a
real node. A volume that cannot be made yet (a Secret that does not exist, a claim not bound) raises
`VolumeNotReady`, and the kubelet tries again; a kind of volume this kubelet does not make raises
`VolumeUnsupported`.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.kubeapi import KubeApi
from simulator.kubelet.fields import field_value

Json = dict[str, Any]
DEFAULT_MODE = 0o644
TOKEN_EXPIRATION_SECONDS = 3607


class VolumeNotReady(Exception):
    """The volume needs an object that is missing or not ready yet; the message names it."""


class VolumeUnsupported(Exception):
    """The process kubelet does not make this kind of volume; the message names the volume and its kind."""


async def _object(api: KubeApi, kind: str, namespace: str, name: str, optional: bool) -> Json | None:
    plural = {"Secret": "secrets", "ConfigMap": "configmaps"}[kind]
    found = await api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
    if found is None and not optional:
        raise VolumeNotReady(f'{kind.lower()} "{name}" not found')
    return found


def _data(kind: str, found: Json) -> dict[str, bytes]:
    if kind == "Secret":
        return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}
    data = {key: value.encode() for key, value in (found.get("data") or {}).items()}
    data |= {key: base64.b64decode(value) for key, value in (found.get("binaryData") or {}).items()}
    return data


def _items(
    source: Json, data: Mapping[str, bytes], default_mode: int, what: str
) -> dict[str, tuple[bytes, int]]:
    """The files of a secret or configMap source: every key, or the listed items (a listed key that is missing
    fails unless the source is optional)."""
    if not source.get("items"):
        return {key: (value, default_mode) for key, value in data.items()}
    files = {}
    for item in source["items"]:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise VolumeNotReady(f'{what} has no key "{item["key"]}"')
        files[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
    return files


async def _token(api: KubeApi, pod: Json, source: Json) -> bytes:
    """A service account token bound to the pod, from the TokenRequest API (as a kubelet asks for it)."""
    metadata = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    spec: Json = {
        "expirationSeconds": source.get("expirationSeconds", TOKEN_EXPIRATION_SECONDS),
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": metadata["name"],
            "uid": metadata["uid"],
        },
    }
    if source.get("audience"):
        spec["audiences"] = [source["audience"]]
    answer = await api.create(
        f"/api/v1/namespaces/{metadata['namespace']}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(answer["status"]["token"]).encode()


def _downward(pod: Json, items: list[Json], default_mode: int) -> dict[str, tuple[bytes, int]]:
    files = {}
    for item in items:
        if "fieldRef" not in item:
            raise VolumeUnsupported(f"downwardAPI item {item.get('path')}: only fieldRef is supported")
        files[item["path"]] = (
            field_value(pod, item["fieldRef"]["fieldPath"]).encode(),
            item.get("mode", default_mode),
        )
    return files


async def _projected(api: KubeApi, pod: Json, volume: Json) -> dict[str, tuple[bytes, int]]:
    projected = volume["projected"]
    mode = projected.get("defaultMode", DEFAULT_MODE)
    namespace = pod["metadata"]["namespace"]
    files: dict[str, tuple[bytes, int]] = {}
    for source in projected.get("sources") or []:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            files[token["path"]] = (await _token(api, pod, token), mode)
        elif "downwardAPI" in source:
            files |= _downward(pod, source["downwardAPI"].get("items") or [], mode)
        else:
            kind = "Secret" if "secret" in source else "ConfigMap" if "configMap" in source else None
            if kind is None:
                raise VolumeUnsupported(
                    f"volume {volume['name']}: projected source {sorted(source)} is not supported"
                )
            reference = source[kind[0].lower() + kind[1:]]
            found = await _object(api, kind, namespace, reference["name"], bool(reference.get("optional")))
            if found is not None:
                files |= _items(reference, _data(kind, found), mode, f'{kind.lower()} "{reference["name"]}"')
    return files


def _write(directory: Path, files: Mapping[str, tuple[bytes, int]], group: int | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, mode) in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if group is not None:
            os.chown(path, 0, group)
            mode |= 0o040 if mode & 0o400 else 0
        path.chmod(mode)


def _share_with_group(directory: Path, group: int) -> None:
    """fsGroup on a writable volume: its tree gets the group, its directories group rwx and set-group-ID."""
    for root, _, files in os.walk(directory):
        os.chown(root, -1, group)
        os.chmod(root, os.stat(root).st_mode | 0o2070)
        for name in files:
            path = os.path.join(root, name)
            os.chown(path, -1, group)
            os.chmod(path, os.stat(path).st_mode | 0o060)


async def _claim_directory(api: KubeApi, namespace: str, name: str) -> Path:
    claim = await api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
    if claim is None:
        raise VolumeNotReady(f'persistentvolumeclaim "{name}" not found')
    volume_name = claim["spec"].get("volumeName")
    if not volume_name or claim.get("status", {}).get("phase") != "Bound":
        raise VolumeNotReady(f'persistentvolumeclaim "{name}" is not bound')
    volume = await api.get(f"/api/v1/persistentvolumes/{volume_name}")
    if volume is None:
        raise VolumeNotReady(f'persistentvolume "{volume_name}" not found')
    source = volume["spec"].get("hostPath") or volume["spec"].get("local")
    if source is None:
        raise VolumeUnsupported(
            f'persistentvolume "{volume_name}": only hostPath and local volumes are supported'
        )
    path = Path(source["path"])
    path.mkdir(parents=True, exist_ok=True)
    return path


async def prepare(api: KubeApi, pod: Json, directory: Path) -> dict[str, Path]:
    """Make every volume of the pod under `directory`; each volume's host path (a directory) by name."""
    spec = pod["spec"]
    namespace = pod["metadata"]["namespace"]
    group = (spec.get("securityContext") or {}).get("fsGroup")
    paths: dict[str, Path] = {}
    for volume in spec.get("volumes") or []:
        name = volume["name"]
        path = directory / name
        if "emptyDir" in volume:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            if group is not None:
                _share_with_group(path, group)
        elif "secret" in volume or "configMap" in volume:
            kind, source = (
                ("Secret", volume["secret"]) if "secret" in volume else ("ConfigMap", volume["configMap"])
            )
            reference = source.get("secretName") or source.get("name")
            found = await _object(api, kind, namespace, reference, bool(source.get("optional")))
            data = _data(kind, found) if found is not None else {}
            mode = source.get("defaultMode", DEFAULT_MODE)
            _write(path, _items(source, data, mode, f'{kind.lower()} "{reference}"'), group)
        elif "projected" in volume:
            _write(path, await _projected(api, pod, volume), group)
        elif "downwardAPI" in volume:
            source = volume["downwardAPI"]
            _write(
                path,
                _downward(pod, source.get("items") or [], source.get("defaultMode", DEFAULT_MODE)),
                group,
            )
        elif "persistentVolumeClaim" in volume:
            path = await _claim_directory(api, namespace, volume["persistentVolumeClaim"]["claimName"])
            if group is not None:
                _share_with_group(path, group)
        elif "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
        else:
            kinds = sorted(key for key in volume if key != "name")
            raise VolumeUnsupported(
                f"volume {name}: {', '.join(kinds)} volumes are not supported by the process kubelet"
            )
        paths[name] = path
    return paths


def remove(directory: Path) -> None:
    """The pod's own volume directories (never a PersistentVolume's or a hostPath)."""
    shutil.rmtree(directory, ignore_errors=True)
