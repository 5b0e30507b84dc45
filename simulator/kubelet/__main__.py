"""`python -m simulator.kubelet`: run the process kubelet against a cluster (as root), until SIGTERM or SIGINT.

It prints `ready` on a line of its own once its Nodes are registered; its pods' logs are under
`<directory>/pods/<namespace>_<name>_<uid>/<container>/<restart>.log`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from simulator.kubeapi import KubeApi, load_kubeconfig
from simulator.kubelet.image import dockerfile_image
from simulator.kubelet.kubelet import Forward, ProcessKubelet
from simulator.kubelet.namespaces import HostUnsupportedError
from simulator.kubelet.nodes import NodeSpec

DEFAULT_IMAGE = "ghcr.io/nodewright/nodewright"
"""The chart's default `image.repository`."""


def _taint(text: str) -> dict[str, str]:
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY[=VALUE]:EFFECT")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog="python -m simulator.kubelet", description=__doc__)
    parse.add_argument("--kubeconfig", type=Path, required=True, help="an admin's kubeconfig")
    parse.add_argument(
        "--directory", type=Path, required=True, help="the kubelet's state: pods, logs, volumes"
    )
    parse.add_argument("--region", default="eastus", help="the Nodes' region (zones are <region>-1, -2, -3)")
    parse.add_argument("--nodes", type=int, default=3, help="how many Nodes, one zone after the other")
    parse.add_argument(
        "--taint", type=_taint, action="append", default=[], help="KEY[=VALUE]:EFFECT on every Node"
    )
    parse.add_argument(
        "--host-port",
        type=int,
        action="append",
        default=[],
        help="a port of the host's loopback every pod reaches",
    )
    parse.add_argument(
        "--forward", type=Forward.parse, action="append", default=[], help="LOCAL_PORT=NAMESPACE/SERVICE:PORT"
    )
    parse.add_argument(
        "--image", default=DEFAULT_IMAGE, help="the repository the Dockerfile's image is run as"
    )
    return parse


async def serve(args: argparse.Namespace) -> None:
    credential = load_kubeconfig(args.kubeconfig)
    server = urlsplit(credential.server)
    nodes = [
        NodeSpec(
            f"aks-system-{index}", f"{args.region}-{index % 3 + 1}", args.region, taints=tuple(args.taint)
        )
        for index in range(args.nodes)
    ]
    async with KubeApi(credential, user_agent="nodewright-process-kubelet") as api:
        kubelet = ProcessKubelet(
            api,
            args.directory,
            nodes,
            dockerfile_image(args.image),
            (server.hostname or "127.0.0.1", server.port or 443),
            args.host_port,
            args.forward,
        )
        running = asyncio.create_task(kubelet.run(lambda: print("ready", flush=True)))
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, running.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await running


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except HostUnsupportedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
