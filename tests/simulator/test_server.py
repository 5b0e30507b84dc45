"""The HTTP surface of the simulated AKS: Kubernetes-style paths and selectors, merge patches and
subresources, errors on the wire, settings at run time, watch expiry, the `run` entry point, and its ARM served
over HTTPS, where a launch through the real Azure provider boots into a Node."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from core import labels
from core.api.kube import is_node_ready
from core.api.meta import Taint, TaintEffect
from core.cloudprovider import LaunchRequest
from core.errors import (
    CloudError,
    ConflictError,
    InsufficientCapacityError,
    InvalidError,
    NotFoundError,
    Offering,
    PDBViolationError,
    QuotaExceededError,
    ThrottledError,
    TransientError,
)
from simulator.client import SimulatorClient, decode_error
from simulator.server import SimulatorSettings, error_response, merge_patch, run
from simulator.server import serve as serve_simulator
from tests.simulator.conftest import Running, deployment, eventually, example_manifests, serve
from workers.azure import cloud_provider, emulator_config


async def request(sim: Running, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, sim.client.base_url + path, json=body) as response,
    ):
        return response.status, await response.json()


OFFERING = Offering("Standard_D2s_v5", "eastus-1", "spot")


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError("gone", code="ResourceNotFound"),
        ConflictError("changed", code="Conflict"),
        InvalidError("bad", code="InvalidParameter"),
        TransientError("later", code="InternalError"),
        InsufficientCapacityError("no room", OFFERING, code="AllocationFailed"),
        QuotaExceededError("no quota", OFFERING, scope="regional", code="OperationNotAllowed"),
        ThrottledError("slow down", 2.5, code="TooManyRequests"),
        PDBViolationError("budget", code="DisruptionBudget"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_typed_error_survives_the_wire(error: CloudError) -> None:
    response = error_response(error)
    assert response.text is not None
    decoded = decode_error(response.status, __import__("json").loads(response.text))
    assert type(decoded) is type(error)
    assert (str(decoded), decoded.code) == (str(error), error.code)
    assert getattr(decoded, "offering", None) == getattr(error, "offering", None)
    assert getattr(decoded, "scope", None) == getattr(error, "scope", None)
    assert getattr(decoded, "retry_after_seconds", None) == getattr(error, "retry_after_seconds", None)


def test_responses_without_our_json_are_classified_by_status() -> None:
    assert isinstance(decode_error(502, None), TransientError)
    assert isinstance(decode_error(404, "<html>"), NotFoundError)
    assert isinstance(decode_error(400, None), InvalidError)


def test_merge_patch_merges_objects_removes_nulls_and_replaces_the_rest() -> None:
    target = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "x"}]}}
    patch = {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"taints": []}}
    assert merge_patch(target, patch) == {
        "metadata": {"labels": {"b": "2", "c": "3"}},
        "spec": {"taints": []},
    }


async def test_unknown_paths_and_resources_are_json_not_found(sim: Running) -> None:
    for path in ("/nowhere", "/api/v1/configmaps", "/apis/karpenter.sh/v1/nodeclaims/missing"):
        status, body = await request(sim, "GET", path)
        assert (status, body["code"]) == (404, "NotFound"), path


async def test_lists_filter_by_namespace_labels_and_fields(sim: Running) -> None:
    client = sim.client
    other = deployment("api", 1) | {"metadata": {"name": "api", "namespace": "team"}}
    await client.apply([deployment("web", 2), other])

    assert len(await client.list_objects("Pod")) == 3
    assert len(await client.list_objects("Pod", namespace="team")) == 1
    assert len(await client.list_objects("Pod", label_selector="app=web")) == 2
    assert len(await client.list_objects("Pod", label_selector="app!=web,app")) == 1
    assert len(await client.list_objects("Pod", field_selector="metadata.namespace=team")) == 1
    assert len(await client.list_objects("Pod", field_selector="spec.nodeName=")) == 3
    status, body = await request(sim, "GET", "/apis/apps/v1/namespaces/default/deployments")
    assert status == 200 and body["kind"] == "DeploymentList" and int(body["metadata"]["resourceVersion"]) > 0


async def test_patch_merges_into_the_object_and_the_status_subresource_writes_only_status(
    sim: Running,
) -> None:
    await sim.client.apply(example_manifests())
    path = "/apis/karpenter.sh/v1/nodepools/default"
    status, patched = await request(sim, "PATCH", path, {"metadata": {"labels": {"team": "blue"}}})
    assert status == 200 and patched["metadata"]["labels"] == {"team": "blue"}
    assert patched["spec"]["limits"] == {"cpu": "1000"}

    status, body = await request(sim, "PATCH", path, {"spec": {"weight": 1000}})
    assert (status, body["code"]) == (422, "Invalid") and "weight" in body["message"]

    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    changed = patched | {"spec": {**patched["spec"], "weight": 5}, "status": {"conditions": [ready]}}
    status, written = await request(sim, "PUT", path + "/status", changed)
    assert status == 200 and "weight" not in written["spec"]
    assert [condition["type"] for condition in written["status"]["conditions"]] == ["Ready"]

    stale = patched | {"metadata": {**patched["metadata"], "labels": {}}}
    status, body = await request(sim, "PUT", path, stale)
    assert (status, body["code"]) == (409, "Conflict")


async def test_the_scale_subresource_reads_and_sets_replicas(sim: Running) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments/web/scale"
    await sim.client.apply([deployment("web", 2)])
    status, scale = await request(sim, "GET", path)
    assert (status, scale["kind"], scale["spec"]["replicas"]) == (200, "Scale", 2)
    status, scale = await request(sim, "PATCH", path, {"spec": {"replicas": 4}})
    assert scale["spec"]["replicas"] == 4 and len(await sim.client.list_pods()) == 4
    status, body = await request(sim, "PUT", path, {"spec": {"replicas": "many"}})
    assert (status, body["code"]) == (422, "Invalid")


async def test_settings_change_delays_at_run_time_but_not_the_cluster_identity(sim: Running) -> None:
    client = sim.client
    settings = await client.update_settings(
        {"kubelet": {"boot_delay": 2.5}, "arm": {"create_polls": 3}, "scheduler_interval": 0.1}
    )
    assert settings.kubelet.boot_delay.total_seconds() == 2.5
    assert sim.simulator.kubelet.settings.boot_delay.total_seconds() == 2.5
    assert sim.simulator.arm.settings.create_polls == 3
    assert (await client.settings()).scheduler_interval.total_seconds() == 0.1

    with pytest.raises(InvalidError, match=r"cluster_name cannot change"):
        await client.update_settings({"cluster_name": "other"})
    with pytest.raises(InvalidError, match=r"arm\.resource_group cannot change"):
        await client.update_settings({"arm": {"resource_group": "other"}})
    with pytest.raises(InvalidError, match=r"kubelet\.pod_ready_delay"):
        await client.update_settings({"kubelet": {"pod_ready_delay": "soon"}})


async def test_a_watch_from_a_version_the_server_no_longer_keeps_is_expired() -> None:
    settings = SimulatorSettings.instant()
    settings.history_limit = 4
    async with serve(settings) as sim:
        await sim.client.apply([deployment("web", 6)])
        with pytest.raises(ConflictError) as raised:
            await anext(sim.client.watch(0))
        assert raised.value.code == "Expired"


async def test_a_watch_survives_idle_periods_with_heartbeats() -> None:
    settings = SimulatorSettings.instant()
    settings.watch_heartbeat = timedelta(seconds=0.05)
    async with serve(settings) as sim:
        stream = sim.client.watch_kinds(0, kinds=["Deployment"])
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)
        assert not first.done()
        await sim.client.apply([deployment("web", 1)])
        event = await asyncio.wait_for(first, 5)
        assert (event.kind, event.name) == ("Deployment", "web")
        await stream.aclose()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_run_serves_until_cancelled() -> None:
    port = free_port()
    server = asyncio.create_task(run(SimulatorSettings.instant(), "127.0.0.1", port, arm_port=0))
    async with SimulatorClient(f"http://127.0.0.1:{port}") as client:
        await client.wait_until_ready(timeout=10)
        await client.apply([deployment("web", 1)])
        await eventually(client.list_pods)
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
        with pytest.raises(TransientError):
            await client.list_pods()


async def test_a_launch_through_the_azure_provider_boots_into_a_node_with_the_bootstrap_identity() -> None:
    async with serve_simulator(SimulatorSettings.instant(seed=3)) as url, SimulatorClient(url) as client:
        info = await client.cluster_info()
        assert info.arm_endpoint is not None and info.arm_endpoint.startswith("https://")
        assert info.arm_ca_file is not None and Path(info.arm_ca_file).is_file()
        await client.apply(example_manifests())
        taint = Taint(key="example.com/special", value="yes", effect=TaintEffect.NO_SCHEDULE)
        request = LaunchRequest(
            name="default-abcde",
            nodepool="default",
            instance_type="Standard_D4ps_v5",
            zone="eastus-2",
            capacity_type="on-demand",
            labels={labels.NODEPOOL: "default", labels.ARCH: "arm64"},
            taints=[taint],
        )
        async with cloud_provider(client, emulator_config(info, timedelta(0))) as cloud:
            instance = await cloud.create(request)

            node = await eventually(lambda: client.find_node_by_provider_id(instance.provider_id))
            assert node.metadata.name == "aks-default-abcde"
            assert node.spec.taints == [taint]
            assert node.metadata.labels[labels.ARCH] == "arm64"
            assert node.metadata.labels["kubernetes.azure.com/node-image-version"] == (
                "AKSUbuntu-2204gen2arm64containerd-202512.18.0"
            ), "the image of the AKSNodeClass status in deploy/examples"
            assert node.status.node_info is not None and node.status.node_info.kubelet_version == "v1.33.5"
            assert "2204gen2arm64containerd/versions/202512.18.0" in instance.image_id

            await cloud.delete("default-abcde")
            assert await cloud.list() == []

        async def not_ready() -> bool:
            current = await client.get_node("aks-default-abcde")
            return current is not None and not is_node_ready(current)

        await eventually(not_ready)
