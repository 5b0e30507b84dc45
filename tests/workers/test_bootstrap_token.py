"""The bootstrap token stays inside the launch (and the node reports the image it booted): the demo's system
(dev server, a real control plane of its own, the emulated Azure with its ARM and node agents, worker with the
real Azure provider, controller) rotates the token, launches nodes and deletes one, and neither the configured
token nor the rotated one is in any workflow history (payloads decoded), any log line of any logger at DEBUG,
or what the demo prints. So that the test can fail, the rotated token must be found where it belongs: in its
Secret and in the custom data the emulator stored for the VMs (with which their nodes joined by TLS bootstrap).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from activities.azure.names import NodeNames
from activities.kubeclient.cluster import KubernetesCluster
from workers.demo import record_histories, system
from workers.demo.walkthrough import EXAMPLES, DemoOptions
from workers.schedules import rotate_bootstrap_token_now
from workers.worker import connect

STEP_TIMEOUT = 60.0


class Capture(logging.Handler):
    """Every record of every logger, formatted with its exception."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


async def until(what: str, done: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not await done():
        assert time.monotonic() < deadline, f"not reached within {STEP_TIMEOUT} s: {what}"
        await asyncio.sleep(0.2)


async def running(kube: KubernetesCluster, app: str, count: int) -> bool:
    pods = await kube.list_pods("default", label_selector=f"app={app}")
    return len(pods) == count and all(pod.spec.node_name and pod.status.phase == "Running" for pod in pods)


def _decoded(data: str) -> str:
    try:
        return base64.b64decode(data).decode(errors="replace")
    except binascii.Error:
        return data


def payload_texts(document: Any) -> Iterator[str]:
    """The decoded `data` of every payload in a history's JSON."""
    if isinstance(document, dict):
        data = document.get("data")
        if isinstance(data, str) and "metadata" in document:
            yield _decoded(data)
        for value in document.values():
            yield from payload_texts(value)
    elif isinstance(document, list):
        for value in document:
            yield from payload_texts(value)


async def test_the_bootstrap_token_is_in_no_history_and_no_log_line(tmp_path: Path) -> None:
    capture = Capture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    out = io.StringIO()
    try:
        options = DemoOptions(seed=11, directory=tmp_path / "control-plane")
        async with system(options, out) as (temporal, aks):
            kube = aks.kube
            await rotate_bootstrap_token_now(await connect(temporal.target), options.cluster)
            rotated = ("kube-system", "bootstrap-token-nwrot1")

            async def made() -> bool:
                return await kube.read_secret(*rotated) is not None

            await until("the rotated token", made)
            for path in sorted(EXAMPLES.glob("*.yaml")):
                await kube.apply(path.read_text())
            await kube.scale("Deployment", "default", "inflate", 2)
            await until("inflate running", lambda: running(kube, "inflate", 2))
            await kube.scale("Deployment", "default", "inflate", 0)
            [claim, *_] = [claim for claim in await kube.list_nodeclaims() if claim.status.node_name]
            vm = NodeNames.of(claim.name).vm
            # The image of the examples' AKSNodeClass status that an arm64 size boots, on the NodeClaim and Node.
            assert (claim.status.image_id or "").endswith(
                "/images/2204gen2arm64containerd/versions/202512.18.0"
            )
            node = await kube.get_node(claim.status.node_name or "")
            assert node is not None
            assert node.metadata.labels["kubernetes.azure.com/node-image-version"] == (
                "AKSUbuntu-2204gen2arm64containerd-202512.18.0"
            )
            custom_data = await aks.emulator.custom_data(vm)
            await kube.delete_node(claim.status.node_name or "")

            async def gone() -> bool:
                return all(other.name != claim.name for other in await kube.list_nodeclaims())

            await until(f"NodeClaim {claim.name} deleted", gone)
            info = await aks.emulator.cluster_info()
            namespace, _, name = info.bootstrap_token_secret.partition("/")
            configured = await kube.read_secret(namespace, name)
            secret = await kube.read_secret(*rotated)
            await asyncio.sleep(1)  # the last activity results land in the histories
            histories = await record_histories(await connect(temporal.target), tmp_path / "histories")
    finally:
        root.removeHandler(capture)
        root.setLevel(level)

    assert secret is not None and configured is not None
    token_secret = secret.data["token-secret"]
    token = f"{secret.data['token-id']}.{token_secret}"
    assert token in base64.b64decode(custom_data).decode(), "the VM's custom data carries the rotated token"
    assert {path.name.split("-")[0] for path in histories} >= {
        "NodeClaim",
        "Provisioner",
        "BootstrapTokenRotation",
    }
    assert capture.lines, "logging was captured"

    texts = {f"log: {line}" for line in capture.lines} | {f"demo output: {out.getvalue()}"}
    for path in histories:
        raw = path.read_text()
        texts.add(f"{path.name}: {raw}")
        texts.update(f"{path.name} payload: {text}" for text in payload_texts(json.loads(raw)))
    secrets = (token_secret, configured.data["token-secret"], custom_data)
    leaks = [text[:300] for text in texts if any(secret in text for secret in secrets)]
    assert leaks == []
