"""The image and the chart agree with the code: the Dockerfile's entrypoint is the `nodewright` CLI and its user is
the chart's non-root user; every command line the chart renders is one the CLI accepts; every NODEWRIGHT_*
variable the chart sets is one the code reads, and the environment it renders loads as settings.

The image itself cannot be built here (no container daemon), so these read the Dockerfile as text."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.kubelet.image import final_stage, instructions
from tests.deploy.helm import CHART, REPOSITORY, VALUE_SETS, Helm, container, environment, workloads
from workers.azure import (
    ARM_CA_FILE_VARIABLE,
    ARM_ENDPOINT_VARIABLE,
    AZURE_VARIABLES,
    CLOUD_VARIABLE,
    CREDENTIAL_VARIABLE,
    POLL_VARIABLE,
    REGION_VARIABLE,
    TOKEN_FILE_VARIABLE,
    WORKLOAD_IDENTITY_VARIABLES,
    load_azure,
)
from workers.cli import build_parser
from workers.settings import ENV_PREFIX, TLS_FILE_FIELDS, Settings, env_var, load_settings

DOCKERFILE = REPOSITORY / "Dockerfile"


def test_the_images_entrypoint_is_the_nodewright_cli() -> None:
    (entrypoint,) = [arguments for keyword, arguments in final_stage(DOCKERFILE) if keyword == "ENTRYPOINT"]
    # The exec (JSON) form: no shell between the kubelet's SIGTERM and the process.
    assert json.loads(entrypoint) == ["nodewright"]
    assert 'nodewright = "workers.cli:main"' in (REPOSITORY / "pyproject.toml").read_text(encoding="utf-8")


def test_the_image_runs_as_the_charts_non_root_user() -> None:
    users = [arguments for keyword, arguments in final_stage(DOCKERFILE) if keyword == "USER"]
    assert users, "the final stage sets no USER: the image would run as root"
    user, _, group = users[-1].partition(":")
    # Numeric, so that the kubelet can check runAsNonRoot without reading the image's /etc/passwd.
    assert user.isdigit() and int(user) != 0 and (not group or (group.isdigit() and int(group) != 0))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert defaults["podSecurityContext"]["runAsUser"] == int(user)
    assert defaults["podSecurityContext"]["runAsNonRoot"] is True


def test_the_image_installs_only_the_runtime_dependencies_and_keeps_bytecode() -> None:
    steps = final_stage(DOCKERFILE)
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "[dev]" not in text and ".[" not in text, "the image must not install the dev extras"
    assert "compileall" in text, "the root filesystem is read-only: bytecode must be compiled at build time"
    assert not any("PYTHONDONTWRITEBYTECODE" in arguments for keyword, arguments in steps if keyword == "ENV")
    assert instructions(DOCKERFILE)[0] == ("FROM", "python:3.11-slim AS build")
    assert steps[0][1].startswith("python:3.11-slim")


def rendered_deployments(helm: Helm, value_set: str) -> dict[str, dict[str, Any]]:
    """The Deployments, and the StatefulSet of the embedded Temporal when there is one, by component."""
    return workloads(helm.render(VALUE_SETS[value_set]))


COMMANDS = {"temporal": "dev-server"}
"""The nodewright command of a component, where it is not the component's name (or its first part)."""


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_command_line_the_chart_renders_is_one_the_cli_accepts(helm: Helm, value_set: str) -> None:
    rendered = rendered_deployments(helm, value_set)
    split = ["worker-activities"] if value_set.startswith("full") else []  # the full values split the workers
    embedded = ["temporal"] if value_set != "full" else []  # the full values use Temporal Cloud
    assert sorted(rendered) == sorted(["controller", "worker", *split, *embedded])
    for component, deployment in rendered.items():
        spec = container(deployment)
        assert "command" not in spec, "the chart must run the image's entrypoint, `nodewright`"
        args = [str(arg) for arg in spec["args"]]
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                parsed = build_parser().parse_args(args)
        except SystemExit:
            pytest.fail(
                f"the chart ({value_set} values) runs `nodewright {shlex.join(args)}` in the {component}, "
                f"which the CLI rejects:\n{errors.getvalue()}"
            )
        assert parsed.command == COMMANDS.get(component, component.partition("-")[0])


def variables_the_code_reads() -> set[str]:
    """Every NODEWRIGHT_* name: the Settings fields, and the Azure provider's variables."""
    names = {env_var(field) for field in Settings.model_fields}
    azure = [
        *AZURE_VARIABLES.values(),
        REGION_VARIABLE,
        POLL_VARIABLE,
        ARM_ENDPOINT_VARIABLE,
        ARM_CA_FILE_VARIABLE,
        CLOUD_VARIABLE,
        CREDENTIAL_VARIABLE,
    ]
    return names | {ENV_PREFIX + name for name in azure}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_nodewright_variable_the_chart_sets_is_one_the_code_reads(helm: Helm, value_set: str) -> None:
    known = variables_the_code_reads()
    unknown = {
        component: sorted(
            name for name in environment(deployment) if name.startswith(ENV_PREFIX) and name not in known
        )
        for component, deployment in rendered_deployments(helm, value_set).items()
    }
    assert set(unknown) >= {"controller", "worker"}
    assert not any(unknown.values()), f"the chart sets variables no code reads (misspelt?): {unknown}"


def literal_environment(deployment: dict[str, Any]) -> dict[str, str]:
    """The container's variables as the kubelet would set them; downward-API and Secret values made up."""
    made_up = {"fieldRef": "nodewright-system", "secretKeyRef": "an-api-key"}
    values = {}
    for name, value in environment(deployment).items():
        values[name] = value if isinstance(value, str) else made_up[next(iter(value))]
    return values


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_rendered_environment_loads_as_settings(
    helm: Helm, value_set: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    worker = rendered_deployments(helm, value_set)["worker"]
    env = literal_environment(worker)
    # What the workload identity webhook adds to the pod.
    env |= {name: "injected" for name in WORKLOAD_IDENTITY_VARIABLES}
    token = tmp_path / "azure-identity-token"  # the projected token is a file the kubelet mounts
    token.write_text("eyJ...")
    env[TOKEN_FILE_VARIABLE] = str(token)
    # The TLS files are read at start; the Secret's volume is mounted in a pod, so stand in for it here.
    for name in TLS_FILE_FIELDS:
        if env.get(env_var(name)):
            stand_in = tmp_path / Path(env[env_var(name)]).name
            stand_in.write_text("-----PEM-----")
            env[env_var(name)] = str(stand_in)
    for name in {*variables_the_code_reads(), *env}:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    azure = load_azure(settings, env)
    assert settings.cluster_name == azure.settings.cluster_name == env["NODEWRIGHT_CLUSTER_NAME"]
    assert settings.temporal_address == env["NODEWRIGHT_TEMPORAL_ADDRESS"]
    assert azure.endpoint is None, "the chart talks to Azure, never to an emulator"
