"""Resource lists as integers: CPU in millicores, every other resource in whole units (bytes, pods, GPUs).

One representation for requests, capacity, allocatable and limits keeps arithmetic exact and cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from core.quantity import format_bytes, format_millis, to_milli, to_units

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
NODES = "nodes"
"""The pseudo-resource of NodePool limits that counts nodes."""

Resources = dict[str, int]


def parse_resources(raw: Mapping[str, str | int | float] | None) -> Resources:
    """Convert a Kubernetes ResourceList into integers (raises `QuantityError` on a bad quantity)."""
    if not raw:
        return {}
    return {name: to_milli(value) if name == CPU else to_units(value) for name, value in raw.items()}


def merge(*lists: Mapping[str, int]) -> Resources:
    """Sum resource lists."""
    total: Resources = {}
    for resources in lists:
        for name, amount in resources.items():
            total[name] = total.get(name, 0) + amount
    return total


def subtract(minuend: Mapping[str, int], subtrahend: Mapping[str, int]) -> Resources:
    """`minuend - subtrahend`, keeping every name of either side."""
    result = dict(minuend)
    for name, amount in subtrahend.items():
        result[name] = result.get(name, 0) - amount
    return result


def max_each(lists: Iterable[Mapping[str, int]]) -> Resources:
    """The largest amount of each resource across lists."""
    result: Resources = {}
    for resources in lists:
        for name, amount in resources.items():
            if amount > result.get(name, amount - 1):
                result[name] = amount
    return result


def min_each(lists: Sequence[Mapping[str, int]]) -> Resources:
    """The smallest amount of each resource across lists (a resource missing from one counts as zero)."""
    names: set[str] = set().union(*lists) if lists else set()
    return {name: min(resources.get(name, 0) for resources in lists) for name in names}


def format_amount(name: str, amount: int) -> str:
    """One amount as Kubernetes would print it."""
    if name == CPU:
        return format_millis(amount)
    if name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith("hugepages-"):
        return format_bytes(amount)
    return str(amount)


def format_resources(resources: Mapping[str, int]) -> dict[str, str]:
    """A resource list as Kubernetes quantity strings, names sorted."""
    return {name: format_amount(name, resources[name]) for name in sorted(resources)}
