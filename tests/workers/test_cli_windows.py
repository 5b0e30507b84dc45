"""`nodewright schedule` in a mixed cluster: Windows pods get a Windows NodeClaim of the Windows NodePool, priced at
the Windows rate, without the Linux-only DaemonSet's overhead; Linux pods stay on Linux NodeClaims."""

from __future__ import annotations

import json
from pathlib import Path

from core.quantity import parse_quantity
from tests.workers.test_cli import EXAMPLES, run, write


def test_windows_pods_get_windows_nodes_and_linux_pods_never_do(tmp_path: Path) -> None:
    for name in ("windows.yaml", "inflate.yaml"):
        write(tmp_path, name, (EXAMPLES / name).read_text().replace("replicas: 0", "replicas: 3"))
    for name in ("nodepool.yaml", "daemonset.yaml"):
        write(tmp_path, name, (EXAMPLES / name).read_text())

    code, out, err = run("schedule", "-o", "json", "-f", str(tmp_path))

    assert code == 0, err
    claims = json.loads(out)["nodeclaims"]
    windows = [claim for claim in claims if claim["nodepool"] == "windows"]
    assert windows and all("windows-web" in pod for claim in windows for pod in claim["pods"])
    for claim in windows:
        assert claim["labels"]["kubernetes.io/os"] == "windows"
        assert claim["labels"]["node.kubernetes.io/windows-build"] == "10.0.20348"
        assert claim["labels"]["kubernetes.io/arch"] == "amd64"
        assert claim["taints"] == [{"key": "os", "value": "windows", "effect": "NoSchedule"}]
        # Only the pods' own requests: the log-agent DaemonSet runs on Linux nodes only.
        assert claim["requests"]["cpu"] == str(len(claim["pods"]))
    linux = [claim for claim in claims if claim["nodepool"] == "default"]
    assert linux and all("windows-web" not in pod for claim in linux for pod in claim["pods"])
    assert all(claim["labels"]["kubernetes.io/os"] == "linux" for claim in linux)
    # A Linux NodeClaim holds the DaemonSet's 100m besides its pods' (inflate: 1 CPU, inflate-wide: 500m).
    for claim in linux:
        pods = sum(500 if "inflate-wide" in pod else 1000 for pod in claim["pods"])
        assert parse_quantity(claim["requests"]["cpu"]) * 1000 == pods + 100
