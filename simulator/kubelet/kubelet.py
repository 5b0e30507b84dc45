"""The process kubelet: Nodes of a system pool that run the pods bound to them as processes of this machine.

It starts the pods' network (`simulator.kubelet.network`), registers its Nodes (`simulator.kubelet.nodes`), makes
the default StorageClass and provisions its claims (`simulator.kubelet.storage`), and then follows the API server:
every pod kube-scheduler binds to one of its Nodes gets a pod worker (`simulator.kubelet.pods`); every Service
and EndpointSlice goes to the Service proxy (`simulator.kubelet.proxy`) and into the pods' /etc/hosts. When it
stops, its pods' containers get SIGTERM, then SIGKILL, and its Nodes are deleted; if it is killed, its children
die with it (their parent-death signal) and the kernel removes the namespaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.kubeapi import KubeApi
from simulator.kubelet.image import LocalImage
from simulator.kubelet.informer import Informer
from simulator.kubelet.namespaces import check_host
from simulator.kubelet.network import ClusterNetwork
from simulator.kubelet.nodes import Nodes, NodeSpec
from simulator.kubelet.pods import PodRunner
from simulator.kubelet.proxy import ServiceProxy
from simulator.kubelet.storage import DirectoryProvisioner

logger = logging.getLogger("nodewright.kubelet")

Json = dict[str, Any]
STOP_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class Forward:
    """A port of the host's loopback that reaches a Service's port (`kubectl port-forward svc/...`)."""

    local_port: int
    namespace: str
    service: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Forward:
        """`LOCAL=NAMESPACE/SERVICE:PORT`."""
        local, _, target = text.partition("=")
        where, _, port = target.rpartition(":")
        namespace, _, service = where.partition("/")
        if not (local.isdigit() and port.isdigit() and namespace and service):
            raise ValueError(f"{text!r}: expected LOCAL_PORT=NAMESPACE/SERVICE:PORT")
        return cls(int(local), namespace, service, int(port))


class ProcessKubelet:
    def __init__(
        self,
        api: KubeApi,
        directory: Path,
        nodes: list[NodeSpec],
        image: LocalImage,
        api_server: tuple[str, int],
        host_ports: list[int] | None = None,
        forwards: list[Forward] | None = None,
    ) -> None:
        self.api = api
        self.directory = directory
        self.image = image
        self.host_ports = list(host_ports or [])
        self.forwards = list(forwards or [])
        self.network = ClusterNetwork(directory / "network")
        self.nodes = Nodes(api, nodes)
        self.proxy: ServiceProxy = ServiceProxy("", api_server)
        self.storage = DirectoryProvisioner(api, directory / "volumes")
        self.runners: dict[str, PodRunner] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._proxy_sync: asyncio.Task[None] | None = None
        self._proxy_pending = True

    async def run(self, ready: Callable[[], None] | None = None) -> None:
        """Run until cancelled; `ready` is called once the Nodes are registered and the informers synced."""
        check_host()
        # Root's alone, as /var/lib/kubelet is: the containers' launch files hold their environment (Secrets too).
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        (self.directory / "network").mkdir(exist_ok=True)
        await self.network.start()
        background: list[asyncio.Task[None]] = []
        try:
            self.proxy.cluster_netns = self.network.netns
            addresses = {name: str(await self.network.add_node(name)) for name in self.nodes.specs}
            cidrs = {name: str(self.network.node_subnet(name)) for name in self.nodes.specs}
            await self.nodes.register(addresses, cidrs)
            await self.storage.ensure_storage_class()
            informers = [
                Informer(self.api, "/api/v1/services", self._service_changed),
                Informer(
                    self.api,
                    "/apis/discovery.k8s.io/v1/endpointslices",
                    lambda name, item: _store(self.proxy.slices, name, item),
                ),
                Informer(
                    self.api,
                    "/api/v1/persistentvolumeclaims",
                    lambda _, item: self.storage.claim_changed(item),
                ),
                Informer(
                    self.api, "/api/v1/persistentvolumes", lambda _, item: self.storage.volume_changed(item)
                ),
            ]
            pods = Informer(self.api, "/api/v1/pods", self._pod_changed)
            background = [asyncio.create_task(informer.run()) for informer in [*informers, pods]]
            background.append(asyncio.create_task(self.nodes.heartbeat()))
            for informer in informers:
                await informer.synced.wait()
            await self._sync_proxy()
            servers = [
                await self.proxy.forward(item.local_port, item.namespace, item.service, item.port)
                for item in self.forwards
            ]
            await pods.synced.wait()
            logger.info("process kubelet: nodes %s ready", ", ".join(self.nodes.specs))
            if ready is not None:
                ready()
            try:
                await asyncio.Event().wait()
            finally:
                for server in servers:
                    server.close()
        finally:
            for task in background:
                task.cancel()
            await self._stop_pods()
            await self.storage.close()
            await self.proxy.close()
            await self.nodes.delete()
            await self.network.stop()

    async def _stop_pods(self) -> None:
        for runner in self.runners.values():
            runner.shutdown(STOP_GRACE_SECONDS)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    # --- what the informers see ----------------------------------------------------------------------------

    def _pod_changed(self, name: str, pod: Json | None) -> None:
        runner = next((r for r in self.runners.values() if f"{r.namespace}/{r.name}" == name), None)
        if pod is not None and runner is not None and runner.uid != pod["metadata"]["uid"]:
            runner.removed()  # a pod of the same name replaced it (a StatefulSet's)
            runner = None
        if pod is None:
            if runner is not None:
                runner.removed()
            return
        if runner is not None:
            runner.update(pod)
            return
        if pod["spec"].get("nodeName") not in self.nodes.specs or pod.get("status", {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            return
        runner = PodRunner(self, pod)
        runner.update(pod)
        self.runners[runner.uid] = runner
        task = asyncio.create_task(runner.run(), name=f"pod {name}")
        self._tasks[runner.uid] = task

        def done(_: asyncio.Task[None], uid: str = runner.uid) -> None:
            self.runners.pop(uid, None)
            self._tasks.pop(uid, None)

        task.add_done_callback(done)

    def _service_changed(self, name: str, service: Json | None) -> None:
        _store(self.proxy.services, name, service)
        for runner in self.runners.values():
            runner.write_hosts()
        self._schedule_proxy_sync()

    def _schedule_proxy_sync(self) -> None:
        self._proxy_pending = True
        if self._proxy_sync is None or self._proxy_sync.done():
            self._proxy_sync = asyncio.create_task(self._sync_proxy())

    async def _sync_proxy(self) -> None:
        while self._proxy_pending and self.proxy.cluster_netns:
            self._proxy_pending = False
            await self.proxy.sync()


def _store(table: dict[tuple[str, str], Json], name: str, item: Json | None) -> None:
    """An informer's change (`namespace/name`) in a table keyed by (namespace, name)."""
    namespace, _, short = name.partition("/")
    if item is None:
        table.pop((namespace, short), None)
    else:
        table[(namespace, short)] = item
