"""The kubelet model, step by step on a fake clock, over VMs in the ARM emulator's state: registration with the
identity the bootstrap carries (and only with the cluster's token), Ready, startup taints removed, VMs that
never register, NotReady when the VM goes, and pods starting on Ready nodes."""

from __future__ import annotations

import base64
import logging
from datetime import timedelta

import pytest

from activities.azure.names import provider_id as azure_provider_id
from core import labels
from core.api.kube import Node, PodPhase, is_node_ready
from core.api.kube import is_pod_ready as is_ready
from core.api.meta import Taint, TaintEffect
from core.resources import format_resources
from simulator.arm import ArmSettings, ArmState
from simulator.kubelet import (
    STARTUP_TAINTS_TAG,
    Kubelet,
    KubeletSettings,
    provider_id,
    shipped_instance_types,
)
from simulator.state import NODE, POD, ClusterState
from tests.simulator.conftest import (
    IMAGE_VERSION,
    UNREGISTERED,
    FakeClock,
    create_vm,
    delete_vm,
    deployment,
    launch_request,
    nodeclaim,
    stored,
)

TOKEN = "abcdef.0123456789abcdef"
NODE_NAME = "aks-default-abcde"

STARTUP = Taint(key="node.cilium.io/agent-not-ready", value="true", effect=TaintEffect.NO_EXECUTE)
BOOT, REGISTER, READY, STARTUP_DELAY, POD_READY = 2.0, 3.0, 1.0, 4.0, 0.5


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.state = ClusterState()
        self.arm = ArmState(ArmSettings(), clock=self.clock)
        self.kubelet = Kubelet(
            self.state,
            self.arm,
            KubeletSettings(
                boot_delay=timedelta(seconds=BOOT),
                registration_delay=timedelta(seconds=REGISTER),
                node_ready_delay=timedelta(seconds=READY),
                startup_taint_delay=timedelta(seconds=STARTUP_DELAY),
                pod_ready_delay=timedelta(seconds=POD_READY),
            ),
            "nodewright",
            lambda: frozenset({TOKEN}),
        )
        self.kubelet.step(self.clock.now)

    def launch(self, **request: object) -> None:
        """A VM made as the provider makes it, with the cluster's token; the kubelet sees it at once."""
        create_vm(self.arm, launch_request(**request), TOKEN)  # type: ignore[arg-type]
        self.at(0)

    def at(self, seconds_later: float) -> float | None:
        """Move the clock and run the kubelet; when the kubelet wants to run next."""
        return self.kubelet.step(self.clock.advance(seconds_later))

    def node(self, name: str = NODE_NAME) -> Node | None:
        node: Node | None = self.state.get(NODE.name, name)
        return node


def test_a_running_vm_registers_its_node_with_the_identity_of_the_request() -> None:
    h = Harness()
    h.state.apply([nodeclaim("default-abcde")])
    identity = {labels.INSTANCE_TYPE: "Standard_D4s_v5", labels.ZONE: "eastus-1", labels.ARCH: "amd64"}
    h.launch(taints=[UNREGISTERED, STARTUP], node_labels={"team": "blue", **identity})

    h.at(BOOT)
    assert h.at(REGISTER - 0.1) == h.clock.now + 0.1
    assert h.node() is None
    h.at(0.1)
    node = h.node()
    assert node is not None
    assert node.spec.provider_id == azure_provider_id(
        h.arm.settings.subscription_id, h.arm.settings.resource_group, NODE_NAME
    )
    assert node.spec.taints == [UNREGISTERED, STARTUP]
    assert node.metadata.labels["team"] == "blue"
    assert node.metadata.labels[labels.NODEPOOL] == "default"
    assert node.metadata.labels[labels.HOSTNAME] == NODE_NAME
    assert node.metadata.labels[labels.INSTANCE_TYPE] == "Standard_D4s_v5"
    assert node.metadata.labels[labels.ZONE] == "eastus-1"
    assert node.metadata.labels[labels.ARCH] == "amd64"
    assert node.metadata.labels["kubernetes.azure.com/node-image-version"] == IMAGE_VERSION
    assert node.status.node_info is not None and node.status.node_info.kubelet_version == "v1.33.5"
    instance_type = shipped_instance_types("eastus")["Standard_D4s_v5"]
    assert node.status.allocatable == format_resources(instance_type.allocatable())
    assert node.status.capacity == format_resources(instance_type.capacity)
    assert not is_node_ready(node)


def test_the_simulated_provider_id_is_the_azure_providers() -> None:
    args = ("00000000-0000-0000-0000-0000000000aa", "MC_Group_Cluster_eastus", "aks-default-x")
    assert provider_id(*args) == azure_provider_id(*args)


def test_a_vm_still_being_created_does_not_boot() -> None:
    h = Harness()
    create_vm(h.arm, launch_request(), TOKEN, finish=False)
    assert h.at(BOOT + REGISTER) is None
    assert h.state.nodes() == []


@pytest.mark.parametrize(
    "custom_data",
    [
        base64.b64encode(b"#!/bin/bash\nexport TLS_BOOTSTRAP_TOKEN=zzzzzz.zzzzzzzzzzzzzzzz\n").decode(),
        base64.b64encode(b"#!/bin/bash\necho no bootstrap here\n").decode(),
    ],
    ids=["another-token", "no-token"],
)
def test_a_vm_without_the_clusters_token_never_registers(
    custom_data: str, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness()
    create_vm(h.arm, launch_request(), TOKEN, custom_data=custom_data)
    with caplog.at_level(logging.WARNING, logger="simulator.kubelet"):
        h.at(0)
        assert h.at(BOOT + REGISTER) is None
    assert h.state.nodes() == []
    assert "aks-default-abcde" in caplog.text and "zzzzzz" not in caplog.text


def test_a_vm_of_another_cluster_gets_no_node_here() -> None:
    h = Harness()
    create_vm(h.arm, launch_request(), TOKEN, cluster="someone-else")
    h.at(0)
    h.at(BOOT + REGISTER)
    assert h.state.nodes() == []


def test_the_node_turns_ready_and_then_loses_its_startup_taints() -> None:
    h = Harness()
    h.state.apply([nodeclaim("default-abcde", startup_taints=[STARTUP])])
    h.launch(taints=[UNREGISTERED, STARTUP])
    h.at(BOOT)
    h.at(REGISTER)

    h.at(READY)
    node = h.node()
    assert node is not None and is_node_ready(node)
    assert node.spec.taints == [UNREGISTERED, STARTUP]

    h.at(STARTUP_DELAY)
    node = h.node()
    assert node is not None
    assert node.spec.taints == [UNREGISTERED], (
        "the startup taint goes; karpenter.sh/unregistered is the lifecycle's"
    )


def test_startup_taints_can_be_named_by_a_tag_when_there_is_no_nodeclaim() -> None:
    h = Harness()
    h.launch(taints=[STARTUP], tags={STARTUP_TAINTS_TAG: STARTUP.key})
    for delay in (BOOT, REGISTER, READY, STARTUP_DELAY):
        h.at(delay)
    node = h.node()
    assert node is not None and node.spec.taints == []


def test_with_zero_delays_everything_happens_in_one_step() -> None:
    h = Harness()
    h.kubelet.settings = KubeletSettings(
        boot_delay=timedelta(0),
        registration_delay=timedelta(0),
        node_ready_delay=timedelta(0),
        startup_taint_delay=timedelta(0),
    )
    create_vm(h.arm, launch_request(taints=[STARTUP], tags={STARTUP_TAINTS_TAG: STARTUP.key}), TOKEN)
    assert h.at(0) is None
    node = h.node()
    assert node is not None and is_node_ready(node) and node.spec.taints == []


def test_a_vm_that_never_registers_gets_no_node() -> None:
    h = Harness()
    h.kubelet.never_register(NODE_NAME)
    h.launch()
    h.at(BOOT)
    assert h.at(REGISTER * 100) is None
    assert h.state.nodes() == []


def test_deleting_the_vm_makes_the_node_not_ready_but_leaves_it() -> None:
    h = Harness()
    h.launch()
    for delay in (BOOT, REGISTER, READY):
        h.at(delay)
    delete_vm(h.arm, "default-abcde")
    h.at(0)
    node = h.node()
    assert node is not None and not is_node_ready(node)
    assert [(c.status, c.reason) for c in node.status.conditions if c.type == "Ready"] == [
        ("Unknown", "NodeStatusUnknown")
    ]
    assert h.arm.vm(NODE_NAME) is None and h.node() is not None

    h.state.delete(NODE.name, NODE_NAME)
    h.at(REGISTER)
    assert h.state.nodes() == []


def test_bound_pods_run_once_their_node_is_ready_and_the_pod_delay_has_passed() -> None:
    h = Harness()
    h.state.apply([deployment("web", 1)])
    h.launch(taints=[])
    h.at(BOOT)
    h.at(REGISTER)
    pod = h.state.pods()[0]
    h.state.bind("default", pod.metadata.name, NODE_NAME)

    h.at(0)
    assert not is_ready(h.state.pods()[0]), "the node is not Ready yet"
    h.at(READY)
    assert h.at(POD_READY / 2) == h.clock.now + POD_READY / 2
    h.at(POD_READY / 2)
    running = stored(h.state, POD.name, pod.metadata.name, "default")
    assert running.status.phase == PodPhase.RUNNING and is_ready(running)
