"""Dynamic provisioning for the process kubelet's pods: a default StorageClass and the external provisioner behind
it, whose volumes are directories of this machine.

The StorageClass `default` binds like AKS's own default class (an Azure managed disk): WaitForFirstConsumer, so
kube-scheduler picks the pod's node first and annotates the claim with it; kube-controller-manager's volume
binder then hands the claim to this provisioner (`volume.kubernetes.io/storage-provisioner`), which creates a
PersistentVolume for it (a hostPath directory, pinned to the zone of the chosen node as a zonal disk is) and
the binder binds the two. A released volume of this provisioner is deleted with its directory (reclaim policy
Delete). Being a directory, the volume would survive any node of this machine; the zone pin keeps the placement
honest to Azure's: a pod that loses its node can only come back in that zone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path
from typing import Any

from simulator.kubeapi import KubeApi, KubeApiError, node_path

logger = logging.getLogger("nodewright.kubelet.storage")

Json = dict[str, Any]
PROVISIONER = "simulator.nodewright.io/directory"
STORAGE_CLASS = "default"
ZONE_LABEL = "topology.kubernetes.io/zone"
_PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)
_SELECTED_NODE = "volume.kubernetes.io/selected-node"
_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_class() -> Json:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


class DirectoryProvisioner:
    def __init__(self, api: KubeApi, directory: Path) -> None:
        self.api = api
        self.directory = directory
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def ensure_storage_class(self) -> None:
        with contextlib.suppress(KubeApiError):
            await self.api.create("/apis/storage.k8s.io/v1/storageclasses", storage_class())

    def claim_changed(self, claim: Json | None) -> None:
        if claim is None or claim["spec"].get("volumeName") or claim["metadata"].get("deletionTimestamp"):
            return
        annotations = claim["metadata"].get("annotations") or {}
        if PROVISIONER not in {annotations.get(key) for key in _PROVISIONER_ANNOTATIONS}:
            return
        self._spawn(claim["metadata"]["uid"], self._provision(claim))

    def volume_changed(self, volume: Json | None) -> None:
        if (
            volume is None
            or (volume["metadata"].get("annotations") or {}).get(_PROVISIONED_BY) != PROVISIONER
        ):
            return
        if (
            volume.get("status", {}).get("phase") == "Released"
            and volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
        ):
            self._spawn(volume["metadata"]["name"], self._reclaim(volume))

    def _spawn(self, key: str, work: Any) -> None:
        if key in self._busy:
            work.close()
            return
        self._busy.add(key)
        task = asyncio.create_task(work)
        self._tasks.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._busy.discard(key)
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.warning("provisioner: %s: %s", key, task.exception())

        task.add_done_callback(done)

    async def _provision(self, claim: Json) -> None:
        metadata, spec = claim["metadata"], claim["spec"]
        name = f"pvc-{metadata['uid']}"
        path = self.directory / name
        path.mkdir(parents=True, exist_ok=True)
        volume: Json = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {_PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.get("storageClassName") or STORAGE_CLASS,
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": metadata["namespace"],
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                },
                "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            },
        }
        selected = (metadata.get("annotations") or {}).get(_SELECTED_NODE)
        node = await self.api.get(node_path(selected)) if selected else None
        zone = ((node or {}).get("metadata", {}).get("labels") or {}).get(ZONE_LABEL)
        if zone:
            term = {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}
            volume["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        try:
            await self.api.create("/api/v1/persistentvolumes", volume)
        except KubeApiError as error:
            if error.status != 409:
                raise
        logger.info(
            "provisioned %s for claim %s/%s in %s", name, metadata["namespace"], metadata["name"], path
        )

    async def _reclaim(self, volume: Json) -> None:
        name = volume["metadata"]["name"]
        path = Path((volume["spec"].get("hostPath") or {}).get("path", ""))
        if path.parent == self.directory:
            await asyncio.to_thread(shutil.rmtree, path, True)
        with contextlib.suppress(KubeApiError):
            await self.api.request("DELETE", f"/api/v1/persistentvolumes/{name}")

    async def close(self) -> None:
        """Stop provisioning, and remove the StorageClass (claims made afterwards wait for another)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(KubeApiError):
            await self.api.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{STORAGE_CLASS}")
