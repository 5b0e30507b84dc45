"""`python -m simulator`: serve the simulated AKS on its own (the `nodewright` CLI wires the same entry point)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from simulator.server import DEFAULT_ARM_PORT, DEFAULT_PORT, SimulatorSettings, run


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator", description="Serve the simulated AKS.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--arm-port", type=int, default=DEFAULT_ARM_PORT, help="the ARM emulator's (HTTPS)")
    parser.add_argument("--ca-dir", type=Path, help="where the ARM emulator's CA certificate goes")
    parser.add_argument("--cluster-name", default=SimulatorSettings().cluster_name)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--instant", action="store_true", help="no boot, registration or readiness delays")
    args = parser.parse_args(argv)
    settings = SimulatorSettings.instant(args.seed) if args.instant else SimulatorSettings(seed=args.seed)
    settings.cluster_name = args.cluster_name
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(settings, args.host, args.port, args.arm_port, args.ca_dir))


if __name__ == "__main__":
    main()
