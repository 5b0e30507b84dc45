"""The demo in any Azure region (`nodewright demo --region westeurope`).

`deploy/examples/` is written for eastus, the default region: `inflate` is pinned to zone `eastus-2`. In another
region the demo applies a copy whose eastus zones are the region's own (`eastus-2` becomes `westeurope-2`; in a
region without availability zones, the regional zone `0`), so that every step places its pods there, and says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from core import labels
from core.instancetypes.azure import REGIONAL_ZONE
from core.instancetypes.regions import normalize_region, priced_regions, region_zones

EXAMPLES_REGION = "eastus"
"""The region whose zones `deploy/examples/` names."""
_ZONE = re.compile(rf"\b{EXAMPLES_REGION}-(\d+)\b")


class UnknownDemoRegionError(ValueError):
    """A region the demo cannot play: neither the shipped price table nor the shipped region list has it."""


def demo_region(region: str) -> str:
    """The region as ARM names it (`West Europe` -> `westeurope`), when the shipped price table or region list knows
    it; `UnknownDemoRegionError` otherwise."""
    key = normalize_region(region)
    if key not in priced_regions() and not region_zones(key):
        raise UnknownDemoRegionError(
            f"--region {region}: not an Azure public region of the shipped price table "
            f"({', '.join(priced_regions())})"
        )
    return key


def regional_zone(zone: str, region: str) -> str:
    """An eastus zone label as the region's: the same logical zone (its first when it has fewer), or the regional
    zone `0` in a region without availability zones; any other value is left as it is."""
    found = _ZONE.fullmatch(zone)
    if found is None:
        return zone
    zones = region_zones(region)
    if not zones:
        return REGIONAL_ZONE
    logical = found.group(1) if found.group(1) in zones else zones[0]
    return f"{region}-{logical}"


def regional_examples(source: Path, region: str, directory: Path) -> Path:
    """`source`'s manifests with their eastus zones made the region's, written to `directory` (the source itself
    in eastus)."""
    if region == EXAMPLES_REGION:
        return source
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.yaml")):
        text = _ZONE.sub(lambda found: regional_zone(found.group(0), region), path.read_text())
        (directory / path.name).write_text(text)
    return directory


def pinned_zone(examples: Path, deployment: str = "inflate") -> str:
    """The zone a Deployment of the examples selects by its node selector ("" when it selects none)."""
    for path in sorted(examples.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if (
                document
                and document.get("kind") == "Deployment"
                and document["metadata"]["name"] == deployment
            ):
                selector = document["spec"]["template"]["spec"].get("nodeSelector") or {}
                return str(selector.get(labels.ZONE, ""))
    return ""
