"""What `nodewright demo --keep-running` tells a user to paste into another shell."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

from workers.demo import explore_exports
from workers.demo.walkthrough import DemoOptions


def test_the_exports_put_kubectl_and_nodewright_on_the_path(tmp_path: Path) -> None:
    kubectl_dir = tmp_path / "bin dir"
    kubectl_dir.mkdir()
    kubectl = kubectl_dir / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    exports = explore_exports(tmp_path / "kubeconfig", kubectl_dir, "127.0.0.1:7233", DemoOptions())
    script = "\n".join([*exports, "command -v kubectl", "command -v nodewright", 'echo "$KUBECONFIG"'])
    done = subprocess.run(
        ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True
    )
    found_kubectl, found_nodewright, kubeconfig = done.stdout.splitlines()
    assert found_kubectl == str(kubectl)
    assert Path(found_nodewright) == Path(sysconfig.get_path("scripts")) / "nodewright"
    assert kubeconfig == str(tmp_path / "kubeconfig")
    assert "NODEWRIGHT_TEMPORAL_ADDRESS=127.0.0.1:7233" in exports[1]
