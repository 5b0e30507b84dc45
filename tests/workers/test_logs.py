"""Log formats: Karpenter's text lines (unchanged), and one JSON object per line with zap's field names, the
Karpenter fields flat; a real controller started with `--log-format json` writes nothing else."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.workers.component import Component, until
from workers.controlplane.run import ControlPlane
from workers.logs import setup_logging
from workers.settings import LogFormat

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FIELDS = {
    "NodeClaim": "default-x8k2p",
    "provider-id": "azure:///subscriptions/0/resourceGroups/mc/providers/Microsoft.Compute/virtualMachines/aks-x",
    "instance-type": "Standard_D4s_v5",
    "requests": {"cpu": "3100m", "memory": "3200Mi"},
}


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers, root.level = handlers, level


def logged(log_format: LogFormat) -> list[str]:
    stream = io.StringIO()
    setup_logging(stream, log_format=log_format)
    # The logger under workflow.logger, as a workflow logs a Karpenter decision (outside of a workflow).
    logging.getLogger("temporalio.workflow").info("launched nodeclaim", extra={"karpenter": FIELDS})
    logging.getLogger("nodewright.leader").warning("could not release lease %s: %s", "default/x", "timed out")
    try:
        raise ValueError("quota exceeded for family DSv5")
    except ValueError:
        logging.getLogger("nodewright.controller").exception("ignoring Node aks-x")
    return stream.getvalue().splitlines()


def test_json_lines_carry_level_time_logger_message_and_the_karpenter_fields(restore_logging: None) -> None:
    launched, warning, failure, *_ = (json.loads(line) for line in logged(LogFormat.JSON))
    assert list(launched)[:4] == ["level", "time", "logger", "message"]
    assert launched["level"] == "info" and TIME.match(launched["time"])
    assert launched["logger"] == "temporalio.workflow"
    assert launched["message"] == "launched nodeclaim"
    assert {key: launched[key] for key in FIELDS} == FIELDS
    assert warning["level"] == "warn" and warning["logger"] == "nodewright.leader"
    assert warning["message"] == "could not release lease default/x: timed out"
    assert failure["level"] == "error" and failure["message"] == "ignoring Node aks-x"
    assert failure["error"] == "quota exceeded for family DSv5"
    assert "ValueError" in failure["stacktrace"]


def test_text_lines_are_karpenters(restore_logging: None) -> None:
    launched, warning, failure, *_ = logged(LogFormat.TEXT)
    assert re.fullmatch(
        r"\S+Z INFO launched nodeclaim NodeClaim=default-x8k2p provider-id=azure:///\S+/aks-x "
        r"instance-type=Standard_D4s_v5 requests=\{cpu: 3100m, memory: 3200Mi\}",
        launched,
    )
    assert warning.endswith(" WARNING could not release lease default/x: timed out")
    assert failure.endswith(' ERROR ignoring Node aks-x error="quota exceeded for family DSv5"')


@activity.defn(name="create_vm")
async def refused_vm() -> None:
    raise RuntimeError("OperationNotAllowed: quota exceeded for family DSv5")


@workflow.defn(name="LaunchForTheLogTest", sandboxed=False)  # this module imports the control plane
class LaunchOnce:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            refused_vm,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


@pytest.mark.parametrize("log_format", [LogFormat.TEXT, LogFormat.JSON])
async def test_an_activity_failure_names_the_activity_its_workflow_and_the_error(
    restore_logging: None, temporal_env: WorkflowEnvironment, log_format: LogFormat
) -> None:
    """The SDK's own line for a failed activity says neither which nor why in its message."""
    stream = io.StringIO()
    setup_logging(stream, log_format=log_format)
    task_queue = workflow_id = f"log-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_env.client, task_queue=task_queue, workflows=[LaunchOnce], activities=[refused_vm]
    ):
        with pytest.raises(WorkflowFailureError):
            await temporal_env.client.execute_workflow(LaunchOnce.run, id=workflow_id, task_queue=task_queue)
    line = next(line for line in stream.getvalue().splitlines() if "Completing activity as failed" in line)
    if log_format is LogFormat.JSON:
        entry = json.loads(line)
        assert entry["level"] == "warn" and entry["activity"] == "create_vm" and entry["attempt"] == 1
        assert entry["workflow"] == "LaunchForTheLogTest" and entry["workflow-id"] == workflow_id
        assert entry["error"] == "OperationNotAllowed: quota exceeded for family DSv5"
    else:
        assert line.endswith(
            f" WARNING Completing activity as failed activity=create_vm attempt=1 workflow=LaunchForTheLogTest "
            f'workflow-id={workflow_id} error="OperationNotAllowed: quota exceeded for family DSv5"'
        )


async def test_a_controller_with_log_format_json_writes_only_json_lines(
    tmp_path: Path, temporal_env: WorkflowEnvironment, control_plane: ControlPlane
) -> None:
    lease = f"logs-{uuid.uuid4().hex[:8]}"
    controller = Component(
        "controller",
        tmp_path / "controller.log",
        {
            "NODEWRIGHT_KUBECONFIG": str(control_plane.kubeconfig),
            "NODEWRIGHT_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "NODEWRIGHT_CLUSTER_NAME": lease,
            "NODEWRIGHT_TASK_QUEUE": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAME": lease,
            "NODEWRIGHT_LEADER_ELECTION_NAMESPACE": "default",
            "NODEWRIGHT_LOG_FORMAT": "text",  # the flag wins
        },
        args=("--log-format", "json"),
    ).start()
    try:
        await until(controller.ready, 60, "the controller ready", controller)
        controller.signal(signal.SIGTERM)
        assert await controller.wait(timeout=30) == 0
    finally:
        controller.stop()
    lines = [json.loads(line) for line in controller.log().splitlines()]
    messages = [line["message"] for line in lines]
    assert f"successfully acquired lease default/{lease}" in messages
    assert f"released leader lease default/{lease}" in messages
    assert all(
        line["level"] in {"debug", "info", "warn", "error"} and TIME.match(line["time"]) for line in lines
    )
