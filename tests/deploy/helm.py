"""The chart as Helm sees it: the built helm binary with a throwaway home, rendering and linting the chart."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workers.controlplane.build import KUBERNETES_VERSION

REPOSITORY = Path(__file__).parents[2]
CHART = REPOSITORY / "deploy" / "charts" / "nodewright"
HERE = Path(__file__).parent
REQUIRED_VALUES = HERE / "values-required.yaml"
"""Only the values nodewright cannot run without: with them, the chart's defaults render."""
FULL_VALUES = HERE / "values-full.yaml"
"""Every option set."""
FULL_EMBEDDED_VALUES = HERE / "values-full-embedded.yaml"
"""Over the full values: the embedded Temporal instead of Temporal Cloud."""
VALUE_SETS = {
    "default": (REQUIRED_VALUES,),
    "full": (FULL_VALUES,),
    "full-embedded": (FULL_VALUES, FULL_EMBEDDED_VALUES),
}


class HelmError(AssertionError):
    """helm exited with an error; the message carries its command and output."""


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path
    """Helm's cache, config and data go here, never to the user's home."""

    def run(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        env.pop("KUBECONFIG", None)
        done = subprocess.run(
            [str(self.binary), *args], input=input, env=env, capture_output=True, text=True, timeout=180
        )
        if check and done.returncode != 0:
            raise HelmError(f"helm {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def template(
        self,
        values: Sequence[Path],
        *sets: str,
        release: str = "nodewright",
        namespace: str = "nodewright",
        flags: Sequence[str] = (),
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """`helm template` of the chart; `--kube-version` because a helm built with `go install` assumes 1.20."""
        args = [
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--kube-version",
            KUBERNETES_VERSION,
        ]
        args += flags
        for path in values:
            args += ["--values", str(path)]
        for assignment in sets:
            args += ["--set", assignment]
        return self.run(*args, check=check)

    def render(
        self, values: Sequence[Path], *sets: str, namespace: str = "nodewright", tests: bool = False
    ) -> list[dict[str, Any]]:
        """The objects `helm template` renders: what `helm install` creates, and with `tests` the `helm test`
        hooks too."""
        flags = [] if tests else ["--skip-tests"]
        return documents(self.template(values, *sets, namespace=namespace, flags=flags).stdout)

    def lint(
        self, values: Sequence[Path], *sets: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        args = ["lint", str(CHART), "--strict", "--kube-version", KUBERNETES_VERSION]
        for path in values:
            args += ["--values", str(path)]
        for assignment in sets:
            args += ["--set", assignment]
        return self.run(*args, check=check)


def documents(text: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(text) if document]


def deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Deployments by component (controller, worker)."""
    return {
        item["metadata"]["labels"]["app.kubernetes.io/component"]: item
        for item in objects
        if item["kind"] == "Deployment"
    }


def workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Deployments and the embedded Temporal's StatefulSet by component (controller, worker, temporal)."""
    return {
        item["metadata"]["labels"]["app.kubernetes.io/component"]: item
        for item in objects
        if item["kind"] in ("Deployment", "StatefulSet")
    }


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def environment(deployment: dict[str, Any]) -> dict[str, Any]:
    """A container's env by name: the value, or the valueFrom source."""
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container(deployment)["env"]}
