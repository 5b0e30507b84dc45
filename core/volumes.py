"""Which VolumeAttachments a terminating node waits for before its instance is deleted (Karpenter's
volume-detachment step of node termination).

Once a node is drained, the attach-detach controller detaches the volumes of the pods that left and deletes
their VolumeAttachments; deleting the instance before that can leave a volume attached to a VM that is going
away. Karpenter waits for every VolumeAttachment of the node except those that cannot be waited for: of
volumes that are not PersistentVolumes, and of PersistentVolumes that a pod Karpenter does not drain still
uses (a pod tolerating the `karpenter.sh/disrupted` taint, a static pod, a pod stuck terminating for over a
minute). Once the terminationGracePeriod deadline has passed, the wait ends whatever is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from core import labels
from core.api.kube import Pod, VolumeAttachment, tolerates
from core.api.meta import Taint, TaintEffect
from core.cron import as_utc

STUCK_TERMINATING_AFTER = timedelta(minutes=1)
"""A pod still there this long after its deletion timestamp is stuck: nothing waits for it any more."""
DISRUPTED = Taint(key=labels.DISRUPTED_TAINT, effect=TaintEffect.NO_SCHEDULE)
"""Karpenter's taint on a node being disrupted: pods that tolerate it stay with the node."""


def is_stuck_terminating(pod: Pod, now: datetime) -> bool:
    deleted = pod.metadata.deletion_timestamp
    return deleted is not None and as_utc(now) - as_utc(deleted) > STUCK_TERMINATING_AFTER


def is_static_pod(pod: Pod) -> bool:
    """A mirror pod of a static pod: the kubelet owns it and the API server cannot delete it."""
    return any(owner.kind == "Node" and owner.api_version == "v1" for owner in pod.metadata.owner_references)


def is_drainable(pod: Pod, now: datetime) -> bool:
    """Karpenter's drainable pod: one the drain waits for (finished pods included, as in Karpenter's check)."""
    return (
        not tolerates(pod.spec.tolerations or [], DISRUPTED)
        and not is_stuck_terminating(pod, now)
        and not is_static_pod(pod)
    )


def claim_names(pod: Pod) -> list[str]:
    """The PersistentVolumeClaims the pod's volumes use: named ones, and generic ephemeral volumes' claims
    (`<pod>-<volume>`, as Kubernetes names them)."""
    names: list[str] = []
    for volume in pod.spec.volumes:
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping) and claim.get("claimName"):
            names.append(str(claim["claimName"]))
        elif volume.get("ephemeral") is not None and volume.get("name"):
            names.append(f"{pod.metadata.name}-{volume['name']}")
    return names


def blocking_attachments(
    attachments: Iterable[VolumeAttachment], kept_volumes: Iterable[str]
) -> list[VolumeAttachment]:
    """The attachments termination waits for: those of PersistentVolumes, except the volumes of pods that
    are not drained (`kept_volumes`, PersistentVolume names)."""
    kept = set(kept_volumes)
    return [
        attachment
        for attachment in attachments
        if (volume := attachment.spec.source.persistent_volume_name) is not None and volume not in kept
    ]


def listed(names: list[str], most: int = 5) -> str:
    """Names as Karpenter lists them in a message: the first few, then "and N other(s)"."""
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} other(s)" if len(names) > most else shown
