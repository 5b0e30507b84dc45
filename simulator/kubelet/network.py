"""The pods' network: every pod in a network namespace of its own, on one bridge, with Service ClusterIPs served
by the process kubelet's proxy.

The bridge does not live in the host's namespace (which the machine's other users share) but in a namespace of
its own, the cluster's, held by a pause process like a pod's: there the bridge `nw0` has the gateway address
(the first of the pod CIDR), each Node one more address (its InternalIP), each pod one end of a veth pair (the
other end is the pod's `eth0`, its address taken from its Node's /24 of the pod CIDR, its default route the
gateway), and the whole Service CIDR is routed to the namespace itself (`ip route add local`), so that the
proxy (`simulator.kubelet.proxy`) can listen on any ClusterIP there. A pod reaches another pod directly over
the bridge, and a Service through the gateway. The cluster namespace has no route out: what a pod may reach of
the host (the API server, the ARM emulator) the kubelet forwards explicitly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from dataclasses import dataclass, field
from pathlib import Path

from simulator.kubelet.namespaces import netns_of
from simulator.kubelet.sandbox import READY

BRIDGE = "nw0"
POD_CIDR = ipaddress.IPv4Network("10.244.0.0/16")
SERVICE_CIDR = ipaddress.IPv4Network("10.0.0.0/16")
"""The local control plane's `--service-cluster-ip-range`."""


class NetworkError(RuntimeError):
    """A namespace, veth or address could not be made; the message quotes the command and its error."""


async def run_ip(netns: str, commands: list[str]) -> None:
    """`ip -batch` of `commands` inside network namespace `netns`."""
    process = await asyncio.create_subprocess_exec(
        "nsenter",
        f"--net={netns}",
        "ip",
        "-batch",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate("\n".join(commands).encode() + b"\n")
    if process.returncode != 0:
        raise NetworkError(
            f"ip -batch in {netns} ({'; '.join(commands)}): {output.decode(errors='replace').strip()}"
        )


async def start_pause(hostname: str, log: Path) -> asyncio.subprocess.Process:
    """A pause process (`simulator.kubelet.sandbox pause`) whose namespaces exist once this returns."""
    with log.open("ab") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "simulator.kubelet.sandbox",
            "pause",
            hostname,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    assert process.stdout is not None
    line = await process.stdout.readline()
    if line.decode().strip() != READY:
        await process.wait()
        raise NetworkError(f"the pause process for {hostname} exited ({process.returncode}): see {log}")
    return process


async def stop_pause(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


@dataclass
class ClusterNetwork:
    """The bridge's namespace, and the addresses it hands out to Nodes and pods."""

    directory: Path
    pod_cidr: ipaddress.IPv4Network = POD_CIDR
    service_cidr: ipaddress.IPv4Network = SERVICE_CIDR
    _pause: asyncio.subprocess.Process | None = None
    _nodes: list[str] = field(default_factory=list)
    _used: set[ipaddress.IPv4Address] = field(default_factory=set)
    _veths: int = 0

    @property
    def netns(self) -> str:
        assert self._pause is not None, "the cluster network is not started"
        return netns_of(self._pause.pid)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.pod_cidr.network_address + 1

    async def start(self) -> None:
        self._pause = await start_pause("cluster-network", self.directory / "pause.log")
        await run_ip(
            self.netns,
            [
                "link set lo up",
                f"link add {BRIDGE} type bridge",
                f"addr add {self.gateway}/{self.pod_cidr.prefixlen} dev {BRIDGE}",
                f"link set {BRIDGE} up",
                f"route add local {self.service_cidr} dev lo",
            ],
        )

    async def stop(self) -> None:
        if self._pause is not None:
            await stop_pause(self._pause)

    def node_subnet(self, node: str) -> ipaddress.IPv4Network:
        """The /24 of the pod CIDR a Node's pods take their addresses from (its spec.podCIDR); the first /24 is
        the gateway's."""
        if node not in self._nodes:
            self._nodes.append(node)
        index = self._nodes.index(node) + 1
        if index >= 2 ** (24 - self.pod_cidr.prefixlen):
            raise NetworkError(f"the pod CIDR {self.pod_cidr} has no /24 left for node {node}")
        return ipaddress.IPv4Network((int(self.pod_cidr.network_address) + index * 256, 24))

    async def add_node(self, node: str) -> ipaddress.IPv4Address:
        """The Node's InternalIP (the first address of its subnet), now an address of the bridge."""
        address = self.node_subnet(node).network_address + 1
        await run_ip(self.netns, [f"addr add {address}/{self.pod_cidr.prefixlen} dev {BRIDGE}"])
        return address

    async def attach(self, node: str, sandbox_pid: int) -> ipaddress.IPv4Address:
        """Give the pod of `sandbox_pid` an eth0 on the bridge with the next free address of its Node."""
        subnet = self.node_subnet(node)
        address = next(
            (host for host in list(subnet.hosts())[1:] if host not in self._used),
            None,
        )
        if address is None:
            raise NetworkError(f"node {node} has no pod address left in {subnet}")
        self._used.add(address)
        self._veths += 1
        veth = f"veth{self._veths}"
        try:
            await run_ip(
                self.netns,
                [
                    f"link add {veth} type veth peer name eth0 netns {sandbox_pid}",
                    f"link set {veth} master {BRIDGE}",
                    f"link set {veth} up",
                ],
            )
            await run_ip(
                netns_of(sandbox_pid),
                [
                    "link set lo up",
                    f"addr add {address}/{self.pod_cidr.prefixlen} dev eth0",
                    "link set eth0 up",
                    f"route add default via {self.gateway}",
                ],
            )
        except NetworkError:
            self._used.discard(address)
            raise
        return address

    def detach(self, address: ipaddress.IPv4Address) -> None:
        """Free a pod's address once its sandbox is gone (its veth pair went with its namespace)."""
        self._used.discard(address)
