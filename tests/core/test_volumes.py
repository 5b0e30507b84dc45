"""Which VolumeAttachments a terminating node waits for (Karpenter's volume-detachment rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.api.kube import Pod, VolumeAttachment
from core.volumes import blocking_attachments, claim_names, is_drainable, listed

NOW = datetime(2026, 11, 26, 4, 0, tzinfo=UTC)


def a_pod(**metadata: Any) -> Pod:
    spec = metadata.pop("spec", {})
    return Pod.model_validate({"metadata": {"name": "web", "namespace": "default", **metadata}, "spec": spec})


def attachment(name: str, volume: str | None) -> VolumeAttachment:
    source = {"persistentVolumeName": volume} if volume else {"inlineVolumeSpec": {}}
    return VolumeAttachment.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"attacher": "disk.csi.azure.com", "nodeName": "n", "source": source},
        }
    )


def test_pods_the_drain_does_not_wait_for_are_not_drainable() -> None:
    assert is_drainable(a_pod(), NOW)
    tolerant = a_pod(spec={"tolerations": [{"operator": "Exists"}]})
    static = a_pod(ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}])
    stuck = a_pod(deletionTimestamp=(NOW - timedelta(minutes=2)).isoformat())
    leaving = a_pod(deletionTimestamp=(NOW - timedelta(seconds=30)).isoformat())
    assert not any(is_drainable(pod, NOW) for pod in (tolerant, static, stuck))
    assert is_drainable(leaving, NOW)


def test_claims_come_from_named_and_generic_ephemeral_volumes() -> None:
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "config", "configMap": {"name": "web"}},
    ]
    assert claim_names(a_pod(spec={"volumes": volumes})) == ["data-web-0", "web-scratch"]


def test_only_persistent_volumes_not_kept_by_staying_pods_block() -> None:
    attachments = [attachment("a", "pv-a"), attachment("kept", "pv-kept"), attachment("inline", None)]
    assert [a.metadata.name for a in blocking_attachments(attachments, {"pv-kept"})] == ["a"]


def test_long_lists_name_the_first_five() -> None:
    assert listed(["a", "b"]) == "a, b"
    assert listed([str(n) for n in range(7)]) == "0, 1, 2, 3, 4 and 2 other(s)"
