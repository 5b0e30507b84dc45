"""Only core/scheduling reaches into the simulation: other code asks `Scheduler` (`solve`, `removals`) and
never reads the engine's or Topology's private state. The import of the engine module itself is forbidden by
an import-linter contract (pyproject.toml); private attributes are found by reading the source."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("core", "activities", "workflows", "workers", "simulator", "benchmarks")
PRIVATE = re.compile(r"\b_Simulation\b|\btopology\._[a-z]|\b_sim\.|\b_Trials\b")


def test_no_module_outside_core_scheduling_touches_simulation_or_topology_internals() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "core" / "scheduling"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if PRIVATE.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_check_finds_what_it_looks_for() -> None:
    assert PRIVATE.search("groups = self.topology._groups.values()")
    assert PRIVATE.search("class _Trials(_Simulation):")
    assert not PRIVATE.search("groups = self.topology.selecting(pod)")
