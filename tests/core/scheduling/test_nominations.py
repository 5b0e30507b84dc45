"""Pods nominated to an in-flight NodeClaim wait for it: held while it fits them and is neither deleted nor
Initialized, planned again otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.api.kube import pod_key
from core.api.nodeclaim import NodeClaim
from core.scheduling.nominations import (
    NOMINATED_PODS_ANNOTATION,
    NOMINATION_WINDOW,
    hold,
    nominated_pods_value,
)
from tests.builders import node, pod, taint

INITIALIZED = "2024-01-02T00:00:00Z"
NOW = datetime(2024, 1, 2, tzinfo=UTC)


def claim(name: str, pods: list[str], *, deleting: bool = False, initialized: bool = False) -> NodeClaim:
    metadata: dict[str, Any] = {
        "name": name,
        "annotations": {NOMINATED_PODS_ANNOTATION: nominated_pods_value(pods)},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    conditions = (
        [
            {
                "type": "Initialized",
                "status": "True",
                "reason": "Initialized",
                "lastTransitionTime": INITIALIZED,
            }
        ]
        if initialized
        else []
    )
    return NodeClaim.parse(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": metadata,
            "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            },
            "status": {"conditions": conditions},
        }
    )


def test_nominated_pods_are_held_by_their_in_flight_nodeclaim() -> None:
    a, b, new = pod(cpu="1"), pod(cpu="1"), pod(cpu="1")
    launching = node("default-abcde", cpu=4, initialized=False)
    pending, nodes, held = hold(
        [a, b, new], [launching], [claim("default-abcde", [pod_key(a), pod_key(b)])], NOW
    )
    assert pending == [new] and held == [a, b]
    assert nodes[0].pods == (a, b)


def test_pods_that_no_longer_fit_are_planned_again() -> None:
    # Launched smaller than planned (or something else took its room): the first that fit stay.
    a, b = pod(cpu="2"), pod(cpu="2")
    launching = node("default-abcde", cpu=3, initialized=False)
    pending, nodes, held = hold([a, b], [launching], [claim("default-abcde", [pod_key(a), pod_key(b)])], NOW)
    assert pending == [b] and held == [a] and nodes[0].pods == (a,)


def test_a_deleting_nodeclaim_holds_nothing_and_an_initialized_one_only_for_the_window() -> None:
    a, b = pod(cpu="1"), pod(cpu="1")
    nodes = [node("gone", initialized=False), node("ready")]
    claims = [claim("gone", [pod_key(a)], deleting=True), claim("ready", [pod_key(b)], initialized=True)]
    # Just Initialized: kube-scheduler has yet to bind b there.
    pending, _, held = hold([a, b], nodes, claims, NOW + timedelta(seconds=1))
    assert pending == [a] and held == [b]
    pending, after, held = hold([a, b], nodes, claims, NOW + NOMINATION_WINDOW)
    assert pending == [a, b] and held == [] and after == nodes


def test_a_registered_node_not_yet_initialized_is_taken_without_the_taints_it_will_lose() -> None:
    new = pod(cpu="1")
    passing = [taint("node.kubernetes.io/not-ready"), taint("karpenter.sh/unregistered", effect="NoExecute")]
    registered = node("aks-default-abcde", cpu=4, initialized=False, taints=[*passing, taint("team", "a")])
    coming = claim("default-abcde", [])
    coming.status.node_name = "aks-default-abcde"
    _, [after], _ = hold([new], [registered], [coming], NOW)
    assert [t.key for t in after.taints] == ["team"]  # its own taint stays; the passing ones do not count
