"""The planner's switches a user flips on the command line, shared by `nodewright schedule`, `plan-disruption`
(`workers.cli`) and `consolidate` (`workers.consolidate`): each defaults to None, which keeps the process setting
or feature gate."""

from __future__ import annotations

import argparse

from core.features import MinValuesPolicy


def add_spot_to_spot_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spot-to-spot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="allow spot-to-spot consolidation (default: the SpotToSpotConsolidation gate of FEATURE_GATES, off)",
    )


def add_repack_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repack",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after Karpenter's consolidation, re-home pods onto a cheaper set of nodes (default: "
        "NODEWRIGHT_REPACK_ENABLED, on); --no-repack plans as Karpenter alone",
    )


def add_min_values_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-values-policy",
        choices=[policy.value for policy in MinValuesPolicy],
        default=None,
        help="Karpenter's MIN_VALUES_POLICY (default: that variable, else Strict)",
    )
