"""`python -m simulator`: serve the emulated AKS on its own, next to a running control plane.

The control plane's admin kubeconfig tells where the API server is and which CA signs it (the CA nodes trust);
it is also the credential of the cluster's add-ons.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from simulator.aks import AksSettings, serve_aks
from simulator.kubeapi import load_kubeconfig

DEFAULT_PORT = 8182
CLUSTER_CA_FILE = "cluster-ca.pem"


async def serve(
    settings: AksSettings,
    kubeconfig: Path,
    bootstrap_token_secret: str,
    host: str,
    port: int,
    ca_dir: Path | None,
) -> None:
    """Serve until cancelled."""
    credential = load_kubeconfig(kubeconfig)
    with contextlib.ExitStack() as stack:
        directory = ca_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="emulated-aks-")))
        directory.mkdir(parents=True, exist_ok=True)
        ca_file = directory / CLUSTER_CA_FILE
        ca_file.write_text(credential.ca_pem)
        async with serve_aks(
            settings,
            api_server=credential.server,
            ca_file=ca_file,
            bootstrap_token_secret=bootstrap_token_secret,
            addon_kubeconfig=kubeconfig,
            ca_dir=directory,
            host=host,
            port=port,
        ) as aks:
            logging.getLogger(__name__).info("cluster info: %s", aks.info.model_dump_json(exclude_none=True))
            await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator", description="Serve the emulated AKS.")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="the control plane's admin kubeconfig")
    parser.add_argument(
        "--bootstrap-token-secret", required=True, help="<namespace>/<name> of the bootstrap token Secret"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the ARM emulator's (HTTPS)")
    parser.add_argument("--ca-dir", type=Path, help="where the ARM emulator's CA certificate goes")
    parser.add_argument("--cluster-name", default=AksSettings().cluster_name)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--region", default="eastus", help="the Azure region it plays (any; default eastus)")
    parser.add_argument(
        "--instant", action="store_true", help="no boot, registration or startup-taint delays"
    )
    args = parser.parse_args(argv)
    settings = AksSettings.instant(args.seed) if args.instant else AksSettings(seed=args.seed)
    settings.cluster_name = args.cluster_name
    settings.arm.region = args.region
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(settings, args.kubeconfig, args.bootstrap_token_secret, args.host, args.port, args.ca_dir)
        )


if __name__ == "__main__":
    main()
