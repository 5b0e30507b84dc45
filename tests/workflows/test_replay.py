"""Replay: every recorded history (tests/histories/) must replay against today's workflow code.

A change that makes the workflows issue different commands for the same history (another activity, a timer,
another order) would break every workflow running in production when its worker is upgraded; the Replayer
finds it here. The variants below make such changes on purpose and must fail, which proves the check has teeth.
Each release's histories are in a directory named after its version (`RELEASES.toml`), and every release's set is
replayed, so the set grows with every version; histories recorded since the last release sit directly in
tests/histories/. Recording them is described in tests/histories/README.md.

The module holds no module-level I/O: the workflow sandbox re-imports it to run the variants.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

with workflow.unsafe.imports_passed_through():
    import pytest

    from core.messages import (
        ActivityName,
        CatalogRefreshInput,
        CatalogRefreshResult,
        DisruptionInput,
        DisruptionPassRecord,
        DisruptionStatus,
        GarbageCollectionInput,
        GarbageCollectionResult,
        LifecycleInput,
        LifecycleStatus,
        ProvisionerInput,
    )
    from workers.releases import HISTORIES, read_releases
    from workers.worker import WORKFLOWS as WORKER_WORKFLOWS
    from workflows.disruption import DisruptionWorkflow
    from workflows.maintenance import CatalogRefreshWorkflow, GarbageCollectionWorkflow
    from workflows.nodeclaim import NodeClaimWorkflow
    from workflows.provisioner import ProvisionerWorkflow

WORKFLOWS: tuple[type, ...] = tuple(WORKER_WORKFLOWS)
"""Every workflow a worker runs: a release's recording holds any of them."""
WORKFLOW_TYPES = (
    "Provisioner",
    "NodeClaim",
    "Disruption",
    "StaticNodePool",
    "CapacityWindow",
    "CatalogRefresh",
    "GarbageCollection",
    "NodeClassStatus",
)
"""The workflows the recorded histories must cover at least (a workflow added since the last release may have none
yet)."""


# ------------------------------------------------------------------------- deliberately non-deterministic code


@workflow.defn(name="NodeClaim")
class NodeClaimTimerBeforeLaunch(NodeClaimWorkflow):
    """Waits a second before launching: a timer where the history has the launch activity."""

    @workflow.run
    async def run(self, request: LifecycleInput) -> LifecycleStatus:
        return await super().run(request)

    async def _launch(self) -> bool:
        await workflow.sleep(timedelta(seconds=1))
        return await super()._launch()


@workflow.defn(name="NodeClaim")
class NodeClaimCleansUpBeforeLaunch(NodeClaimWorkflow):
    """Deletes any leftover instance before launching: another activity where the history has the launch."""

    @workflow.run
    async def run(self, request: LifecycleInput) -> LifecycleStatus:
        return await super().run(request)

    async def _launch(self) -> bool:
        await self._activity(ActivityName.DELETE_INSTANCE, self._claim.name)
        return await super()._launch()


@workflow.defn(name="Provisioner")
class ProvisionerTimerBeforePlanning(ProvisionerWorkflow):
    """Waits a second before planning: a timer where the history has the planning activity."""

    @workflow.run
    async def run(self, request: ProvisionerInput) -> None:
        await super().run(request)

    async def _provision(self, request: ProvisionerInput, pods: list[str], leaving: list[str]) -> None:
        await workflow.sleep(timedelta(seconds=1))
        await super()._provision(request, pods, leaving)


@workflow.defn(name="Provisioner")
class ProvisionerWithoutBatching(ProvisionerWorkflow):
    """Plans as soon as a pod arrives: the planning activity where the history has the batch window's timer."""

    @workflow.run
    async def run(self, request: ProvisionerInput) -> None:
        await super().run(request)

    async def _batch(self, request: ProvisionerInput) -> None:
        return None


@workflow.defn(name="Disruption")
class DisruptionPlansTwice(DisruptionWorkflow):
    """Plans every pass twice: a second planning activity where the history has the first one's successor."""

    @workflow.run
    async def run(self, request: DisruptionInput) -> DisruptionStatus:
        return await super().run(request)

    async def _plan(
        self, request: DisruptionInput, fingerprint: str, summary: str, repair: bool = False
    ) -> DisruptionPassRecord:
        await super()._plan(request, fingerprint, summary, repair)
        return await super()._plan(request, fingerprint, summary, repair)


@workflow.defn(name="CatalogRefresh")
class CatalogRefreshAfterATimer(CatalogRefreshWorkflow):
    """Waits a second before refreshing: a timer where the history has the refresh activity."""

    @workflow.run
    async def run(self, request: CatalogRefreshInput) -> CatalogRefreshResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(request)


@workflow.defn(name="GarbageCollection")
class GarbageCollectionAfterATimer(GarbageCollectionWorkflow):
    """Waits a second before collecting: a timer where the history has the collection activity."""

    @workflow.run
    async def run(self, request: GarbageCollectionInput) -> GarbageCollectionResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(request)


VARIANTS: dict[str, tuple[type, ...]] = {
    "NodeClaim": (NodeClaimTimerBeforeLaunch, NodeClaimCleansUpBeforeLaunch),
    "Provisioner": (ProvisionerTimerBeforePlanning, ProvisionerWithoutBatching),
    "Disruption": (DisruptionPlansTwice,),
    "CatalogRefresh": (CatalogRefreshAfterATimer,),
    "GarbageCollection": (GarbageCollectionAfterATimer,),
}


# ----------------------------------------------------------------------------------------------- histories


def history_files() -> list[Path]:
    """Every release's histories, and those recorded since the last release."""
    return sorted(HISTORIES.rglob("*.json"))


def case_id(path: Path) -> str:
    """`<release>/<file name without .json>`, or the bare name for a history recorded since the last release."""
    return str(path.relative_to(HISTORIES).with_suffix(""))


def workflow_type(path: Path) -> str:
    """The workflow type, from the file name `<type>-<id>-<run id prefix>.json` that `--record-histories` writes."""
    return path.name.partition("-")[0]


def load_history(path: Path) -> WorkflowHistory:
    """The history with a workflow id rebuilt from the file name (`nodeclaim-default-x` -> `nodeclaim/default-x`);
    the id only labels the replay, it cannot change a command."""
    recorded_id = path.stem.removeprefix(f"{workflow_type(path)}-").rpartition("-")[0]
    return WorkflowHistory.from_json(recorded_id.replace("-", "/", 1), path.read_text())


def replayer(*workflows: type) -> Replayer:
    """Every workflow in the SDK's sandbox, the NodeClaim lifecycle too (a worker runs it outside)."""
    return Replayer(
        workflows=list(workflows),
        data_converter=pydantic_data_converter,
        unsandboxed_workflow_runner=SandboxedWorkflowRunner(),
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per history (and per variant of its workflow), named after the file."""
    if "history" in metafunc.fixturenames:
        paths = history_files()
        metafunc.parametrize("history", paths, ids=[case_id(path) for path in paths])
    if "history_and_variant" in metafunc.fixturenames:
        cases = [
            (path, variant) for path in history_files() for variant in VARIANTS.get(workflow_type(path), ())
        ]
        metafunc.parametrize(
            "history_and_variant",
            cases,
            ids=[f"{case_id(path)}-{variant.__name__}" for path, variant in cases],
        )


# ------------------------------------------------------------------------------------------------------ tests


def test_histories_cover_every_workflow() -> None:
    """Without a history of each workflow, the cases below would pass by having nothing to replay."""
    recorded = {workflow_type(path) for path in history_files()}
    assert recorded >= set(WORKFLOW_TYPES), (
        f"{HISTORIES} should hold histories of {WORKFLOW_TYPES}, found {sorted(recorded)}; "
        "see tests/histories/README.md to record them"
    )


def test_every_release_has_its_histories() -> None:
    """Each release in RELEASES.toml recorded a set, and every directory of histories is a release's."""
    releases = read_releases()
    missing = [str(release) for release in releases if not any(release.histories.glob("*.json"))]
    assert not missing, f"no recorded histories for release(s) {missing}: see tests/histories/README.md"
    directories = {path.name for path in HISTORIES.iterdir() if path.is_dir()}
    assert directories <= {release.version for release in releases}, (
        f"{HISTORIES} has directories of versions RELEASES.toml does not list: "
        f"{sorted(directories - {release.version for release in releases})}"
    )


async def test_history_replays(history: Path) -> None:
    result = await replayer(*WORKFLOWS).replay_workflow(load_history(history))
    assert result.replay_failure is None


async def test_non_deterministic_change_fails_replay(history_and_variant: tuple[Path, type]) -> None:
    path, variant = history_and_variant
    others = [wf for wf in WORKFLOWS if not issubclass(variant, wf)]
    with pytest.raises(workflow.NondeterminismError):
        await replayer(variant, *others).replay_workflow(load_history(path))
