"""Connections between the pods' network and the rest, as kube-proxy and a port-forward would make them, in
userspace: a listening socket where the connection arrives, and a copy of the bytes both ways to where it goes.

- Services: for every TCP port of every ClusterIP Service, the proxy listens on ClusterIP:port in the cluster's
  namespace (where the whole Service CIDR is local) and relays each connection to one of the Service's ready
  endpoints, from its EndpointSlices (kube-controller-manager's, from the pods' readiness and addresses that the
  kubelet reports), picked at random. A Service with no ready endpoint refuses the connection. The API server
  runs on the host's loopback, outside the pods' network, so `default/kubernetes` (whose endpoints the local
  API server does not publish) is relayed there.
- Host ports: a port of the host's loopback that pods must reach at the same address (the ARM emulator, whose
  URL and certificate name 127.0.0.1) is served on the loopback of every pod's namespace.
- Forwards: a port of the host's loopback that reaches a Service (`kubectl port-forward svc/...`, which needs
  the kubelet's streaming API that this kubelet does not serve).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from simulator.kubelet.namespaces import socket_in

logger = logging.getLogger("nodewright.kubelet.proxy")

Json = dict[str, Any]
Target = tuple[str | None, str, int]
"""Where a connection goes: a network namespace (None: the host's), an address and a port."""
KUBERNETES_SERVICE = ("default", "kubernetes")
_CHUNK = 65536


async def listen(
    netns: str | None, host: str, port: int, target: Callable[[], Awaitable[Target | None]]
) -> asyncio.Server:
    """Accept on host:port in `netns` and relay each connection to what `target()` says then (None: refuse)."""
    sock = socket_in(netns, socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))

    async def relay_to_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            where = await target()
            if where is None:
                return
            try:
                upstream_reader, upstream_writer = await connect(*where)
            except OSError:
                return
            await relay(reader, writer, upstream_reader, upstream_writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_server(relay_to_target, sock=sock)


async def connect(
    netns: str | None, host: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection made from network namespace `netns`."""
    sock = socket_in(netns, socket.AF_INET)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both sides have finished sending (each end's EOF is passed on)."""

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(_CHUNK):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except OSError:
            sink.close()

    try:
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
    finally:
        upstream_writer.close()
        with contextlib.suppress(OSError):
            await upstream_writer.wait_closed()


@dataclass(frozen=True)
class ServicePort:
    namespace: str
    service: str
    name: str


class ServiceProxy:
    """The Services' ClusterIPs, served in the cluster's network namespace from what the informers saw."""

    def __init__(self, cluster_netns: str, api_server: tuple[str, int]) -> None:
        self.cluster_netns = cluster_netns
        self.api_server = api_server
        self.services: dict[tuple[str, str], Json] = {}
        self.slices: dict[tuple[str, str], Json] = {}
        self._listeners: dict[tuple[str, int], tuple[ServicePort, asyncio.Server]] = {}
        self._lock = asyncio.Lock()

    def cluster_ip(self, namespace: str, name: str) -> str | None:
        service = self.services.get((namespace, name))
        ip = (service or {}).get("spec", {}).get("clusterIP")
        return ip if ip and ip != "None" else None

    def endpoints(self, port: ServicePort) -> list[tuple[str, int]]:
        """The ready endpoints of a Service port: address and port, from its EndpointSlices."""
        found = []
        for (namespace, _), item in self.slices.items():
            labels = item.get("metadata", {}).get("labels", {})
            if namespace != port.namespace or labels.get("kubernetes.io/service-name") != port.service:
                continue
            numbers = [
                entry.get("port")
                for entry in item.get("ports") or []
                if (entry.get("name") or "") == port.name
            ]
            for endpoint in item.get("endpoints") or []:
                if endpoint.get("conditions", {}).get("ready") is False:
                    continue
                found += [(endpoint["addresses"][0], number) for number in numbers if number]
        return found

    async def target(self, port: ServicePort) -> Target | None:
        if (port.namespace, port.service) == KUBERNETES_SERVICE:
            return (None, *self.api_server)
        choices = self.endpoints(port)
        return (self.cluster_netns, *random.choice(choices)) if choices else None

    async def sync(self) -> None:
        """Listen on every ClusterIP port of the Services seen, and on nothing else."""
        async with self._lock:
            wanted: dict[tuple[str, int], ServicePort] = {}
            for (namespace, name), service in self.services.items():
                spec = service.get("spec", {})
                ip = self.cluster_ip(namespace, name)
                if ip is None:
                    continue
                for entry in spec.get("ports") or []:
                    if entry.get("protocol", "TCP") == "TCP":
                        wanted[(ip, entry["port"])] = ServicePort(namespace, name, entry.get("name") or "")
            for key in [key for key in self._listeners if wanted.get(key) != self._listeners[key][0]]:
                _, server = self._listeners.pop(key)
                server.close()
            for key, port in wanted.items():
                if key in self._listeners:
                    continue
                try:
                    server = await listen(
                        self.cluster_netns, key[0], key[1], lambda port=port: self.target(port)
                    )
                except OSError as error:
                    logger.warning(
                        "cannot serve Service %s/%s on %s:%d: %s", port.namespace, port.service, *key, error
                    )
                    continue
                self._listeners[key] = (port, server)

    async def forward(self, local_port: int, namespace: str, service: str, port: int) -> asyncio.Server:
        """Serve the Service's port on the host's loopback at `local_port`, as `kubectl port-forward` would."""

        async def target() -> Target | None:
            ip = self.cluster_ip(namespace, service)
            return (self.cluster_netns, ip, port) if ip else None

        return await listen(None, "127.0.0.1", local_port, target)

    async def close(self) -> None:
        for _, server in self._listeners.values():
            server.close()
        self._listeners.clear()


async def serve_host_ports(pod_netns: str, ports: list[int]) -> list[asyncio.Server]:
    """The host's loopback ports, served at the same ports on the loopback of a pod's namespace."""
    servers = []
    for port in ports:

        async def host(port: int = port) -> Target:
            return (None, "127.0.0.1", port)

        servers.append(await listen(pod_netns, "127.0.0.1", port, host))
    return servers
