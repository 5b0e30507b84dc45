"""The process kubelet: what it gives a container (service links, $(VAR) expansion, the downward API, the image the
Dockerfile describes), what it refuses to run where, and, as root on a real control plane, pods that run as
processes: on their Nodes and addresses, reaching each other through a Service by its DNS name and the API
server with their service account, with Secret and ConfigMap values, a claim provisioned in their node's zone and
kept across pods, readiness from their probe, restarts with back-off, an image it cannot run, and graceful
deletion, all as `kubectl get pods` reports it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.kubelet import namespaces
from simulator.kubelet.fields import FieldUnsupported, field_value
from simulator.kubelet.image import dockerfile_image
from simulator.kubelet.kubelet import Forward
from simulator.kubelet.pods import expand, service_variables
from tests.cluster import eventually, process_kubelet
from workers.controlplane.run import ControlPlane

IMAGE = "ghcr.io/nodewright/nodewright:0.1.0"


def test_a_service_gives_the_docker_links_variables_a_kubelet_gives() -> None:
    service = {
        "metadata": {"name": "nodewright-temporal"},
        "spec": {
            "clusterIP": "10.0.4.5",
            "ports": [{"name": "grpc", "port": 7233}, {"name": "http-ui", "port": 8233}],
        },
    }
    headless = {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}
    env = service_variables([service, headless])
    assert env["NODEWRIGHT_TEMPORAL_SERVICE_HOST"] == "10.0.4.5"
    assert env["NODEWRIGHT_TEMPORAL_SERVICE_PORT"] == "7233"
    assert env["NODEWRIGHT_TEMPORAL_SERVICE_PORT_HTTP_UI"] == "8233"
    assert env["NODEWRIGHT_TEMPORAL_PORT"] == "tcp://10.0.4.5:7233"
    assert env["NODEWRIGHT_TEMPORAL_PORT_8233_TCP_ADDR"] == "10.0.4.5"
    assert not [name for name in env if name.startswith("PEERS_")]


def test_references_expand_as_kubernetes_expands_them() -> None:
    env = {"HOST": "temporal", "PORT": "7233"}
    assert expand("$(HOST):$(PORT)", env) == "temporal:7233"
    assert expand("$(MISSING) $$(HOST) $5", env) == "$(MISSING) $(HOST) $5"


def test_the_downward_api_reads_the_pods_own_fields() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}},
        "spec": {"nodeName": "aks-system-0", "serviceAccountName": "sa"},
        "status": {"podIP": "10.244.1.2", "podIPs": [{"ip": "10.244.1.2"}]},
    }
    assert field_value(pod, "metadata.namespace") == "ns"
    assert field_value(pod, "metadata.labels['app']") == "web"
    assert field_value(pod, "status.podIPs") == "10.244.1.2"
    assert field_value(pod, "status.hostIP") == ""
    with pytest.raises(FieldUnsupported, match=r"spec\.hostname"):
        field_value(pod, "spec.hostname")


def test_the_image_is_the_dockerfiles_from_this_virtualenv() -> None:
    image = dockerfile_image("ghcr.io/nodewright/nodewright")
    assert image.entrypoint == ("nodewright",)
    assert (image.uid, image.gid, image.environment["HOME"]) == (65532, 65532, "/tmp")
    assert image.environment["PATH"].startswith(f"{sys.prefix}/bin:")
    assert str(Path(sys.prefix).resolve()) in image.paths
    assert "nonroot:x:65532:65532::/tmp:/usr/sbin/nologin" in image.accounts("passwd").splitlines()
    assert image.runs(IMAGE) and image.runs("ghcr.io/nodewright/nodewright@sha256:ab")
    assert not image.runs("ghcr.io/nodewright/nodewright-other:1") and not image.runs("fluent-bit")


def test_a_forward_names_a_services_port() -> None:
    assert Forward.parse("7233=nodewright/nodewright-temporal:7233") == Forward(
        7233, "nodewright", "nodewright-temporal", 7233
    )
    with pytest.raises(ValueError, match="LOCAL_PORT=NAMESPACE/SERVICE:PORT"):
        Forward.parse("nodewright-temporal:7233")


def test_it_says_why_a_machine_cannot_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces.os, "geteuid", lambda: 1000)
    assert "needs root" in str(namespaces.unsupported_reason())
    monkeypatch.setattr(namespaces.os, "geteuid", lambda: 0)
    monkeypatch.setattr(namespaces.shutil, "which", lambda tool: None if tool == "ip" else "/usr/bin/" + tool)
    reason = namespaces.unsupported_reason()
    assert reason == "the process kubelet needs ip (iproute2 and util-linux) on PATH"
    with pytest.raises(namespaces.HostUnsupportedError, match="needs ip"):
        namespaces.check_host()


# --- pods as processes, as root ----------------------------------------------------------------------------

root = pytest.mark.skipif(
    namespaces.unsupported_reason() is not None,
    reason=f"cannot run pods here: {namespaces.unsupported_reason()}",
)


CHECK = """
import json, os, pathlib, socket, time, urllib.request
from kubernetes import client, config
for attempt in range(60):  # until the Service has a ready endpoint
    try:
        answer = urllib.request.urlopen("http://web/", timeout=5).status
        break
    except OSError:
        time.sleep(0.5)
config.load_incluster_config()
seen = {"web": answer, "api": client.VersionApi().get_code().git_version, "user": os.getuid(),
        "host": socket.gethostname(), "secret": os.environ["FROM_SECRET"], "config": os.environ["FROM_CONFIG"],
        "ip": os.environ["MY_IP"], "link": os.environ.get("WEB_SERVICE_HOST", "")}
pathlib.Path("/var/lib/check/seen.json").write_text(json.dumps(seen))
"""
"""The client: what it reached and was given, written to its claim."""
TERM = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(print('SIGTERM'))); time.sleep(600)"


def pod(namespace: str, name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A pod of the image's user with fsGroup; Never restarted unless `spec` says otherwise."""
    security = {"runAsUser": 65532, "runAsNonRoot": True, "fsGroup": 65532}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"securityContext": security, "restartPolicy": "Never", "containers": containers, **spec},
    }


def container(name: str, *command: str, image: str = IMAGE, **more: Any) -> dict[str, Any]:
    locked = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    return {"name": name, "image": image, "command": list(command), "securityContext": locked, **more}


def objects(namespace: str) -> list[dict[str, Any]]:
    def meta(name: str) -> dict[str, str]:
        return {"name": name, "namespace": namespace}

    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    web = container(
        "web", "python", "-m", "http.server", "8080", "--directory", "/tmp",
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}],
    )  # fmt: skip
    check = container(
        "check", "python", "-c", CHECK,
        env=[
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "FROM_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        volumeMounts=[{"name": "data", "mountPath": "/var/lib/check"}],
    )  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta("s"), "stringData": {"k": "from a secret"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c"), "data": {"k": "from a configmap"}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta("data"),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta("web"),
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
        pod(namespace, "web", [web], restartPolicy="Always", volumes=[{"name": "tmp", "emptyDir": {}}]),
        pod(namespace, "check", [check], volumes=claim),
        pod(
            namespace,
            "crash",
            [container("crash", "python", "-c", "raise SystemExit(3)")],
            restartPolicy="Always",
        ),
        pod(namespace, "elsewhere", [container("agent", "fluent-bit", image="fluent-bit")]),
        pod(namespace, "term", [container("term", "python", "-c", TERM)]),
    ]


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    yield "kubelet-test"
    control_plane.kubectl("delete", "namespace", "kubelet-test", "--ignore-not-found", "--wait=false")


@root
async def test_pods_run_as_processes_with_volumes_services_probes_restarts_and_deletion(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = control_plane
    logs = tmp_path / "kubelet" / "pods"

    def pods() -> dict[str, dict[str, Any]]:
        listed = plane.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout
        return {item["metadata"]["name"]: item for item in json.loads(listed)["items"]}

    def log(name: str, container: str) -> str:
        (directory,) = logs.glob(f"{namespace}_{name}_*")
        return (directory / container / "0.log").read_text()

    async with process_kubelet(plane, tmp_path / "kubelet", "--nodes", "2"):
        plane.kubectl("create", "namespace", namespace)
        plane.apply(objects(namespace))

        async def settled() -> dict[str, dict[str, Any]]:
            now = await asyncio.to_thread(pods)
            crash = now["crash"]["status"].get("containerStatuses") or [{}]
            done = now["check"]["status"].get("phase") == "Succeeded" and crash[0].get("restartCount", 0) >= 1
            return now if done else {}

        status = {
            name: item["status"] for name, item in (await eventually(settled, 120, "pods settled")).items()
        }
        web = status["web"]
        assert web["phase"] == "Running" and web["podIP"].startswith("10.244.")
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in web["conditions"])
        assert web["hostIP"] in ("10.244.1.1", "10.244.2.1")
        # Restarted at once, then backed off; the image it cannot run waits for a pull that never comes.
        crash = status["crash"]["containerStatuses"][0]
        assert crash["lastState"]["terminated"]["exitCode"] == 3
        waiting = status["elsewhere"]["containerStatuses"][0]["state"]["waiting"]
        assert (status["elsewhere"]["phase"], waiting["reason"]) == ("Pending", "ErrImagePull")
        # The client's claim outlives it: a pod of its own reads what the client saw.
        reader = container("read", "cat", "/var/lib/check/seen.json")
        reader["volumeMounts"] = [{"name": "data", "mountPath": "/var/lib/check", "readOnly": True}]
        plane.kubectl("delete", "pod", "check", "-n", namespace)
        claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        plane.apply([pod(namespace, "read", [reader], volumes=claim)])

        async def read() -> bool:
            return (await asyncio.to_thread(pods))["read"]["status"].get("phase") == "Succeeded"

        await eventually(read, 60, "the reader done")
        seen = json.loads(log("read", "read"))
        assert seen["web"] == 200 and seen["api"].startswith("v1.")
        assert (seen["user"], seen["host"]) == (65532, "check")
        assert (seen["secret"], seen["config"]) == ("from a secret", "from a configmap")
        assert seen["ip"] == status["check"]["podIP"] and seen["link"], seen
        volume = yaml.safe_load(plane.kubectl("get", "pvc", "data", "-n", namespace, "-o", "yaml").stdout)
        assert volume["status"]["phase"] == "Bound"
        # Graceful deletion: the container gets SIGTERM (and exits on it), then the object goes.
        plane.kubectl("delete", "pod", "term", "-n", namespace, "--timeout=60s")
        assert "term" not in await asyncio.to_thread(pods)
        assert log("term", "term").strip() == "SIGTERM"
        # The namespace goes with its pods and its claim, whose volume and directory the provisioner deletes.
        (directory,) = json.loads(plane.kubectl("get", "pv", "-o", "json").stdout)["items"]
        plane.kubectl("delete", "namespace", namespace, "--timeout=90s")

        async def reclaimed() -> bool:
            listed = await asyncio.to_thread(plane.kubectl, "get", "pv", "-o", "json")
            return not json.loads(listed.stdout)["items"]

        await eventually(reclaimed, 60, "the volume deleted")
        assert not Path(directory["spec"]["hostPath"]["path"]).exists()
