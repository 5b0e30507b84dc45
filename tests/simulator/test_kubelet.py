"""The kubelet model, step by step on a fake clock: registration with the request's identity, Ready, startup
taints removed, VMs that never register, NotReady when the VM goes, and pods starting on Ready nodes."""

from __future__ import annotations

from datetime import timedelta

from core import labels
from core.api.kube import Node, PodPhase, is_node_ready
from core.api.kube import is_pod_ready as is_ready
from core.api.meta import Taint, TaintEffect
from core.resources import format_resources
from simulator.compute import Compute, ComputeSettings, Fault, FaultType, shipped_instance_types
from simulator.kubelet import STARTUP_TAINTS_TAG, Kubelet, KubeletSettings
from simulator.state import NODE, POD, ClusterState
from tests.simulator.conftest import UNREGISTERED, FakeClock, deployment, launch_request, nodeclaim, stored

STARTUP = Taint(key="node.cilium.io/agent-not-ready", value="true", effect=TaintEffect.NO_EXECUTE)
BOOT, REGISTER, READY, STARTUP_DELAY, POD_READY = 2.0, 3.0, 1.0, 4.0, 0.5


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.state = ClusterState()
        self.compute = Compute(
            ComputeSettings(boot_delay=timedelta(seconds=BOOT), delete_delay=timedelta(seconds=1)),
            shipped_instance_types("eastus"),
            clock=self.clock,
        )
        self.kubelet = Kubelet(
            self.state,
            self.compute,
            KubeletSettings(
                registration_delay=timedelta(seconds=REGISTER),
                node_ready_delay=timedelta(seconds=READY),
                startup_taint_delay=timedelta(seconds=STARTUP_DELAY),
                pod_ready_delay=timedelta(seconds=POD_READY),
            ),
        )

    def at(self, seconds_later: float) -> float | None:
        """Move the clock and run the cloud and the kubelet; when the kubelet wants to run next."""
        now = self.clock.advance(seconds_later)
        self.compute.advance(now)
        return self.kubelet.step(now)

    def node(self, name: str = "default-abcde") -> Node | None:
        node: Node | None = self.state.get(NODE.name, name)
        return node


def test_a_running_vm_registers_its_node_with_the_identity_of_the_request() -> None:
    h = Harness()
    h.state.apply([nodeclaim("default-abcde")])
    request = launch_request(taints=[UNREGISTERED, STARTUP], node_labels={"team": "blue"})
    instance = h.compute.create(request)

    h.at(BOOT)
    assert h.at(REGISTER - 0.1) == h.clock.now + 0.1
    assert h.node() is None
    h.at(0.1)
    node = h.node()
    assert node is not None
    assert node.spec.provider_id == instance.provider_id
    assert node.spec.taints == [UNREGISTERED, STARTUP]
    assert node.metadata.labels["team"] == "blue"
    assert node.metadata.labels[labels.NODEPOOL] == "default"
    assert node.metadata.labels[labels.HOSTNAME] == "default-abcde"
    assert node.metadata.labels[labels.INSTANCE_TYPE] == "Standard_D4s_v5"
    assert node.metadata.labels[labels.ZONE] == "eastus-1"
    assert node.metadata.labels[labels.CAPACITY_TYPE] == "on-demand"
    assert node.metadata.labels[labels.ARCH] == "amd64"
    instance_type = shipped_instance_types("eastus")["Standard_D4s_v5"]
    assert node.status.allocatable == format_resources(instance_type.allocatable())
    assert node.status.capacity == format_resources(instance_type.capacity)
    assert not is_node_ready(node)


def test_the_node_turns_ready_and_then_loses_its_startup_taints() -> None:
    h = Harness()
    h.state.apply([nodeclaim("default-abcde", startup_taints=[STARTUP])])
    h.compute.create(launch_request(taints=[UNREGISTERED, STARTUP]))
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
    h.compute.create(launch_request(taints=[STARTUP], tags={STARTUP_TAINTS_TAG: STARTUP.key}))
    for delay in (BOOT, REGISTER, READY, STARTUP_DELAY):
        h.at(delay)
    node = h.node()
    assert node is not None and node.spec.taints == []


def test_with_zero_delays_everything_happens_in_one_step() -> None:
    h = Harness()
    h.kubelet.settings = KubeletSettings(
        registration_delay=timedelta(0), node_ready_delay=timedelta(0), startup_taint_delay=timedelta(0)
    )
    h.compute.create(launch_request(taints=[STARTUP], tags={STARTUP_TAINTS_TAG: STARTUP.key}))
    assert h.at(BOOT) is None
    node = h.node()
    assert node is not None and is_node_ready(node) and node.spec.taints == []


def test_a_vm_that_never_registers_gets_no_node() -> None:
    h = Harness()
    h.compute.add_fault(Fault(type=FaultType.NEVER_REGISTER))
    h.compute.create(launch_request())
    h.at(BOOT)
    assert h.at(REGISTER * 100) is None
    assert h.state.nodes() == []


def test_deleting_the_vm_makes_the_node_not_ready_but_leaves_it() -> None:
    h = Harness()
    h.compute.create(launch_request())
    for delay in (BOOT, REGISTER, READY):
        h.at(delay)
    h.compute.delete("default-abcde")
    h.at(0)
    node = h.node()
    assert node is not None and not is_node_ready(node)
    assert [(c.status, c.reason) for c in node.status.conditions if c.type == "Ready"] == [
        ("Unknown", "NodeStatusUnknown")
    ]
    h.at(1.0)
    assert h.compute.machines() == [] and h.node() is not None

    h.state.delete(NODE.name, "default-abcde")
    h.at(REGISTER)
    assert h.state.nodes() == []


def test_bound_pods_run_once_their_node_is_ready_and_the_pod_delay_has_passed() -> None:
    h = Harness()
    h.state.apply([deployment("web", 1)])
    h.compute.create(launch_request(taints=[]))
    h.at(BOOT)
    h.at(REGISTER)
    pod = h.state.pods()[0]
    h.state.bind("default", pod.metadata.name, "default-abcde")

    h.at(0)
    assert not is_ready(h.state.pods()[0]), "the node is not Ready yet"
    h.at(READY)
    assert h.at(POD_READY / 2) == h.clock.now + POD_READY / 2
    h.at(POD_READY / 2)
    running = stored(h.state, POD.name, pod.metadata.name, "default")
    assert running.status.phase == PodPhase.RUNNING and is_ready(running)
