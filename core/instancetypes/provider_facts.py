"""What the AKS provider embeds about VM sizes, which the Resource SKUs API does not say: its known-SKU list (a
size missing from it is offered at the missing price) and its registry of supported GPU sizes (their
manufacturer and the OSes with a driver; a GPU size missing from it is not offered).

Both ship as package data (`data/provider-facts.json`, from the provider's `known_skus.yaml` and
`supported-gpus.yaml`; sources in `data/README.md`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

_DATA_PACKAGE = "core.instancetypes"
_FACTS_FILE = "data/provider-facts.json"


@dataclass(frozen=True, slots=True)
class RegisteredGpu:
    manufacturer: str
    """`nvidia` or `amd`."""
    os: frozenset[str]
    """`ubuntu`, `azurelinux`, `azurelinux3`, `windows`."""


def is_known_sku(name: str) -> bool:
    """Whether the provider's known-SKU list has the size (exact name, as the provider compares)."""
    return name in _facts()[0]


def registered_gpu(name: str) -> RegisteredGpu | None:
    """The provider's GPU registry entry for the size; it looks sizes up lower-cased and without `_promo`."""
    return _facts()[1].get(name.lower().replace("_promo", ""))


@cache
def _facts() -> tuple[frozenset[str], dict[str, RegisteredGpu]]:
    raw = json.loads(files(_DATA_PACKAGE).joinpath(_FACTS_FILE).read_text(encoding="utf-8"))
    gpus = {
        sku: RegisteredGpu(manufacturer=entry["manufacturer"], os=frozenset(entry["os"]))
        for sku, entry in raw["gpus"].items()
    }
    return frozenset(raw["known_skus"]), gpus
