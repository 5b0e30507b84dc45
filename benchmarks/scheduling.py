"""Scheduling benchmark: Karpenter's diverse pod mix on its 400 synthetic instance types at 1,000, 5,000 and
20,000 pods, and the same mix on the real eastus catalog. Prints figures; asserts nothing.

Each run happens in a fresh process so that its peak memory (max RSS) is its own.

    python benchmarks/scheduling.py            # all runs, a table
    python benchmarks/scheduling.py --run synthetic 5000   # one run, JSON
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from karpenter_inputs import benchmark_nodepool, diverse_pods, fake_instance_types

from core.instancetypes.types import InstanceType
from core.resources import CPU, MEMORY
from core.scheduling.scheduler import Scheduler

RUNS = [("synthetic", 1000), ("synthetic", 5000), ("synthetic", 20000), ("eastus", 5000)]


def instance_types(catalog: str) -> list[InstanceType]:
    if catalog == "synthetic":
        return fake_instance_types(400)
    from core.instancetypes.azure import azure_instance_types
    from core.instancetypes.catalog import load_shipped_catalog

    return azure_instance_types(load_shipped_catalog(catalog))


def lower_bound_micros(types: list[InstanceType], requests: dict[str, int]) -> float:
    """For each resource, total requests times the cheapest price per unit of it; the largest of these."""
    bounds = []
    for name in (CPU, MEMORY):
        per_unit = min(
            offering.price_micros / it.allocatable()[name]
            for it in types
            for offering in it.offerings
            if offering.available and it.allocatable().get(name, 0) > 0
        )
        bounds.append(requests.get(name, 0) * per_unit)
    return max(bounds)


def run_one(catalog: str, count: int) -> dict[str, object]:
    types = instance_types(catalog)
    pods = diverse_pods(count)
    scheduler = Scheduler([benchmark_nodepool()], {"default": types})
    started = time.perf_counter()
    results = scheduler.solve(pods)
    elapsed = time.perf_counter() - started
    from core.api.kube import pod_requests

    totals: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod_requests(pod).items():
            totals[name] = totals.get(name, 0) + amount
    cost = results.total_price_micros
    bound = lower_bound_micros(types, totals)
    by_name = {it.name: it for it in types}
    allocatable: dict[str, int] = {}
    for claim in results.nodeclaims:
        if claim.instance_type is not None:
            for name, amount in by_name[claim.instance_type].allocatable().items():
                allocatable[name] = allocatable.get(name, 0) + amount
    return {
        "catalog": catalog,
        "instance_types": len(types),
        "pods": count,
        "seconds": round(elapsed, 3),
        "pods_per_second": round(count / elapsed),
        "nodes": len(results.nodeclaims),
        "unschedulable": len(results.unschedulable),
        "dollars_per_hour": round(cost / 1e6, 2),
        "cost_ratio_to_lower_bound": round(cost / bound, 3) if bound else None,
        "cpu_utilization": round(totals.get(CPU, 0) / allocatable[CPU], 3) if allocatable.get(CPU) else None,
        "memory_utilization": round(totals.get(MEMORY, 0) / allocatable[MEMORY], 3)
        if allocatable.get(MEMORY)
        else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run", nargs=2, metavar=("CATALOG", "PODS"), help="one run in this process, as JSON"
    )
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run_one(args.run[0], int(args.run[1]))))
        return
    header = (
        f"{'catalog':<10} {'types':>5} {'pods':>6} {'seconds':>8} {'pods/s':>7} {'nodes':>6} {'unsched':>7} "
    )
    header += f"{'$/hour':>9} {'cost/LB':>7} {'cpu use':>7} {'mem use':>7} {'peak MB':>7}"
    print(header)
    for catalog, count in RUNS:
        output = subprocess.run(
            [sys.executable, __file__, "--run", catalog, str(count)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(output)
        print(
            f"{row['catalog']:<10} {row['instance_types']:>5} {row['pods']:>6} {row['seconds']:>8} "
            f"{row['pods_per_second']:>7} {row['nodes']:>6} {row['unschedulable']:>7} "
            f"{row['dollars_per_hour']:>9} {row['cost_ratio_to_lower_bound']:>7} {row['cpu_utilization']:>7} "
            f"{row['memory_utilization']:>7} {row['peak_rss_mb']:>7}"
        )


if __name__ == "__main__":
    main()
