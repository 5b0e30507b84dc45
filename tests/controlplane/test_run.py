"""One process of the control plane killed and started again, as the chaos benchmark does: same ports, same
state."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.controlplane.run import ControlPlaneError, control_plane


def test_etcd_and_the_api_server_killed_and_started_again_keep_the_cluster(tmp_path: Path) -> None:
    with control_plane(tmp_path / "plane") as plane:
        plane.kubectl("create", "configmap", "kept", "-n", "default")
        for name in ("etcd", "kube-apiserver"):
            plane.kill_process(name)
            assert plane.processes[name].poll() is not None
        with pytest.raises(ControlPlaneError, match="kwok is running"):
            plane.start_process("kwok")

        plane.start_process("etcd")
        plane.start_process("kube-apiserver")  # returns once it is ready

        assert plane.kubectl("get", "configmap", "kept", "-n", "default", "-o", "name").stdout.strip() == (
            "configmap/kept"
        )
