"""CapacityBuffers in disruption: a node holding a buffer's virtual pods is not empty (emptiness keeps it with
Karpenter's "has buffer pods"), and consolidation takes it only if the virtual pods find room elsewhere."""

from __future__ import annotations

from typing import Any

from core.api.capacitybuffer import CapacityBuffer
from core.api.kube import PodTemplate
from core.disruption.commands import BlockReason, Method
from tests.core.disruption.fixtures import (
    MOST_EXPENSIVE,
    blocked,
    bound,
    cluster,
    disrupted,
    node_pair,
    nodepool,
    plan,
)


def with_buffer(snapshot: Any, cpu: str, replicas: int) -> Any:
    snapshot.podtemplates.append(
        PodTemplate.model_validate(
            {
                "metadata": {"name": "chunk", "namespace": "default"},
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
                },
            }
        )
    )
    snapshot.capacitybuffers.append(
        CapacityBuffer.parse(
            {
                "apiVersion": "autoscaling.x-k8s.io/v1beta1",
                "kind": "CapacityBuffer",
                "metadata": {"name": "room", "namespace": "default"},
                "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": replicas},
            }
        )
    )
    return snapshot


def test_a_node_holding_buffer_room_is_kept_and_the_other_empty_node_goes() -> None:
    snapshot = with_buffer(
        cluster([nodepool()], [node_pair("a"), node_pair("b"), node_pair("c")], [bound("c", cpu="30")]),
        cpu="20",
        replicas=1,
    )
    result = plan(snapshot, [MOST_EXPENSIVE])
    assert [command.method for command in result.commands] == [Method.EMPTINESS]
    (gone,) = disrupted(result)
    assert len(gone) == 1 and gone[0] in ("a", "b")
    holder = "b" if gone[0] == "a" else "a"
    reasons = blocked(result, holder).reasons
    assert (reasons[0].code, reasons[0].message) == (
        BlockReason.BUFFER_PODS,
        f'Node "{holder}" has buffer pods (kept for CapacityBuffer default/room)',
    )
    (report,) = result.buffers
    assert report["buffer"] == "default/room" and report["ready"] is True
    assert report["pods"] == {"default/capacity-buffer-room-1": f"node/{holder}"}
    assert result.to_json()["buffers"] == [report]


def test_without_a_buffer_both_empty_nodes_go() -> None:
    snapshot = cluster([nodepool()], [node_pair("a"), node_pair("b"), node_pair("c")], [bound("c", cpu="30")])
    result = plan(snapshot, [MOST_EXPENSIVE])
    assert disrupted(result) == [["a", "b"]]
    assert "buffers" not in result.to_json()


def test_consolidation_takes_a_node_holding_buffer_room_only_by_moving_the_room() -> None:
    # The chunk (20 CPUs) went to the empty node a; beside c's pod (10 of 64) it fits too: a can go, not as
    # empty, but by consolidation moving its virtual pod to c.
    snapshot = with_buffer(
        cluster([nodepool()], [node_pair("a"), node_pair("c")], [bound("c", cpu="10")]), cpu="20", replicas=1
    )
    result = plan(snapshot, [MOST_EXPENSIVE])
    assert result.buffers[0]["pods"] == {"default/capacity-buffer-room-1": "node/a"}
    (command,) = result.commands
    assert command.method is Method.SINGLE_NODE_CONSOLIDATION and disrupted(result) == [["a"]]
    assert [(move.pod, move.destination) for move in command.pods_moved] == [
        ("default/capacity-buffer-room-1", "c")
    ]


def test_consolidation_keeps_a_node_whose_buffer_room_fits_nowhere_else() -> None:
    snapshot = with_buffer(
        cluster([nodepool()], [node_pair("a"), node_pair("c")], [bound("c", cpu="50")]), cpu="20", replicas=1
    )
    result = plan(snapshot, [MOST_EXPENSIVE])
    assert result.commands == ()
    assert BlockReason.BUFFER_PODS in [reason.code for reason in blocked(result, "a").reasons]


def test_the_unconsolidatable_event_says_karpenters_sentence() -> None:
    from core.messages import KeptNode, KeptReason
    from workflows.disruption import kept_event

    message = 'Node "a" has buffer pods (kept for CapacityBuffer default/room)'
    kept = KeptNode(
        node="a", reasons=[KeptReason(method="emptiness", code=BlockReason.BUFFER_PODS, message=message)]
    )
    assert kept_event(kept) == ("Unconsolidatable", 'Node "a" has buffer pods')
