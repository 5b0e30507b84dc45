"""`helm test`: the chart's test hook asks a ready controller for /readyz through a Service of its own; and the
install guide's sample `my-values.yaml` (docs/install.md) passes the chart's schema as written."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helm import REPOSITORY, REQUIRED_VALUES, Helm, container, deployments

INSTALL = REPOSITORY / "docs" / "install.md"
HOOK = "helm.sh/hook"


def readme_values() -> str:
    """The install guide's `my-values.yaml` block (its "Values"), as a user would copy it."""
    blocks = re.findall(
        r"```yaml\n(# my-values\.yaml\n.*?)```", INSTALL.read_text(encoding="utf-8"), re.DOTALL
    )
    assert len(blocks) == 1, "docs/install.md has one my-values.yaml sample"
    return str(blocks[0])


def test_the_install_guide_sample_values_lint_and_render(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "my-values.yaml"
    values.write_text(readme_values(), encoding="utf-8")
    done = helm.lint([values])
    assert "0 chart(s) failed" in done.stdout and "[ERROR]" not in done.stdout
    objects = helm.render([values])
    controller = container(deployments(objects)["controller"])
    assert controller["image"] == "myacr.azurecr.io/nodewright:0.1.0"


def test_helm_test_asks_the_ready_controllers_for_readyz(helm: Helm) -> None:
    objects = helm.render([REQUIRED_VALUES], "healthProbe.port=9091", "helmTest.timeoutSeconds=5", tests=True)
    hooks = [item for item in objects if HOOK in item["metadata"].get("annotations", {})]
    assert sorted(item["kind"] for item in hooks) == ["Pod", "Service"]
    assert all(item["metadata"]["annotations"][HOOK] == "test" for item in hooks)
    (service,) = [item for item in hooks if item["kind"] == "Service"]
    (pod,) = [item for item in hooks if item["kind"] == "Pod"]
    # The Service is made before the pod, and selects the controller pods, and only them.
    assert int(service["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    pod_labels = {
        component: deployment["spec"]["template"]["metadata"]["labels"]
        for component, deployment in deployments(objects).items()
    }
    selector = service["spec"]["selector"].items()
    assert selector <= pod_labels["controller"].items() and not selector <= pod_labels["worker"].items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9091, "targetPort": "http", "protocol": "TCP"}
    ]
    # The pod runs the chart's image, locked down as the Deployments' pods, and retries for the value's time.
    (test,) = pod["spec"]["containers"]
    controller = container(deployments(objects)["controller"])
    assert test["image"] == controller["image"]
    assert test["securityContext"] == controller["securityContext"]
    assert pod["spec"]["restartPolicy"] == "Never"
    env = {item["name"]: item["value"] for item in test["env"]}
    namespace = service["metadata"]["namespace"]
    assert env == {
        "READYZ_URL": f"http://{service['metadata']['name']}.{namespace}.svc:9091/readyz",
        "TIMEOUT_SECONDS": "5",
    }
    # `helm install` (and `helm template --skip-tests`) leaves them out.
    installed = helm.render([REQUIRED_VALUES])
    assert [item for item in installed if HOOK in item["metadata"].get("annotations", {})] == []


def test_helm_test_with_a_node_pool_asks_for_a_node_of_it_after_the_readiness_test(helm: Helm) -> None:
    objects = helm.render(
        [REQUIRED_VALUES], "helmTest.nodePool=general", "helmTest.nodeTimeoutSeconds=90", tests=True
    )
    hooks = {
        (item["kind"], item["metadata"]["name"]): item
        for item in objects
        if HOOK in item["metadata"].get("annotations", {})
    }
    name = "nodewright-test-node"
    assert set(hooks) == {
        ("Service", "nodewright-controller-health"),
        ("Pod", "nodewright-test-controller-ready"),
        ("ServiceAccount", name),
        ("Role", name),
        ("RoleBinding", name),
        ("Pod", f"{name}-ready"),
    }
    weight = {
        key: int(item["metadata"]["annotations"].get("helm.sh/hook-weight", 0)) for key, item in hooks.items()
    }
    # Its permissions exist before it runs, and it runs after the readiness test.
    assert (
        weight[("Role", name)]
        < weight[("Pod", "nodewright-test-controller-ready")]
        < weight[("Pod", f"{name}-ready")]
    )
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        policy = hooks[(kind, name)]["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
        assert set(policy.split(",")) == {"before-hook-creation", "hook-succeeded", "hook-failed"}
    (rule,) = hooks[("Role", name)]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]}
    assert hooks[("RoleBinding", name)]["subjects"][0]["name"] == name
    pod = hooks[("Pod", f"{name}-ready")]
    assert pod["spec"]["serviceAccountName"] == name and pod["spec"]["restartPolicy"] == "Never"
    # It runs on the release's own nodes, as the chart's image and user, and names the NodePool to try.
    controller = container(deployments(objects)["controller"])
    (test,) = pod["spec"]["containers"]
    assert test["image"] == controller["image"] and test["securityContext"] == controller["securityContext"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] == "DoesNotExist"
    env = {item["name"]: item.get("value") for item in test["env"]}
    assert (env["NODE_POOL"], env["TIMEOUT_SECONDS"], env["IMAGE"]) == ("general", "90", controller["image"])
    assert env["PROBE_NAME"] == f"{name}-probe"
    # Without a NodePool, no such test: a release without NodePools passes `helm test`.
    plain = helm.render([REQUIRED_VALUES], tests=True)
    assert not [item for item in plain if item["metadata"]["name"].startswith(name)]


class _Readyz(http.server.BaseHTTPRequestHandler):
    status = 200
    body = "ok"

    def do_GET(self) -> None:
        data = self.body.encode()
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def readyz() -> Iterator[tuple[str, type[_Readyz]]]:
    handler = type("Handler", (_Readyz,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/readyz", handler
    finally:
        server.shutdown()
        server.server_close()


def _run_hook(helm: Helm, url: str) -> subprocess.CompletedProcess[str]:
    """The test pod's program, run here against `url` with a short retry time."""
    objects = helm.render([REQUIRED_VALUES], tests=True)
    (pod,) = [item for item in objects if item["kind"] == "Pod"]
    (test,) = pod["spec"]["containers"]
    assert test["command"] == ["python", "-c"]
    env = {**os.environ, "READYZ_URL": url, "TIMEOUT_SECONDS": "0.5"}
    return subprocess.run(
        [sys.executable, "-c", test["args"][0]], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_hook_passes_when_a_controller_is_ready(helm: Helm, readyz: tuple[str, type[_Readyz]]) -> None:
    url, _ = readyz
    done = _run_hook(helm, url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{url}: 200 ok"


def test_the_hook_fails_saying_why_when_no_controller_is_ready(
    helm: Helm, readyz: tuple[str, type[_Readyz]]
) -> None:
    url, handler = readyz
    handler.status, handler.body = 503, "Temporal: connection refused"
    done = _run_hook(helm, url)
    assert done.returncode == 1
    assert done.stderr.strip() == f"{url}: not ready: 503 Temporal: connection refused"
    nobody = _run_hook(helm, "http://127.0.0.1:9/readyz")
    assert nobody.returncode == 1 and "no ready controller answered" in nobody.stderr
