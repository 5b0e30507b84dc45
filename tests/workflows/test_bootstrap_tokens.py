"""The bootstrap token rotation on the dev server against the real control plane: each run creates the next token
at once (the API server authenticates it, with the usages and groups of the configured one, and launches render
it), keeps the one it replaced for the grace and deletes it after; a run whose id is still in use waits for it;
and a rotation whose create is retried after it landed makes no second token."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry
from temporalio.client import Client, ScheduleActionStartWorkflow, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.azure.bootstrap import ClusterBootstrap
from activities.bootstrap_tokens import BootstrapTokenActivities
from activities.kubeclient.cluster import KubernetesCluster
from activities.metrics import Metrics
from core.api.kube import Secret
from core.bootstrap_token_messages import BootstrapTokenRotationInput, BootstrapTokenRotationResult
from core.bootstrap_tokens import GENERATION_LABEL, NAMESPACE
from core.errors import TransientError
from simulator.kubeapi import KubeApi, KubeCredential
from tests.activities.azure.test_bootstrap import request
from tests.cluster import eventually
from tests.workflows.conftest import TIMER, step_summaries
from workers.schedules import bootstrap_token_rotation, ensure_bootstrap_token_rotation
from workers.simulated_aks import SimulatedAks
from workflows.bootstrap_tokens import BootstrapTokenRotationWorkflow, bootstrap_token_rotation_id

GRACE = 3.0
PERIOD = 3600.0


@dataclass
class Rotation:
    client: Client
    task_queue: str
    kube: KubernetesCluster
    seed: str
    aks: SimulatedAks
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry()))

    @contextlib.asynccontextmanager
    async def serving(self, cluster: Any) -> AsyncIterator[None]:
        """A worker of the rotation whose activities act on `cluster`."""
        activities = BootstrapTokenActivities(cluster, self.seed, self.metrics)
        async with Worker(
            self.client,
            task_queue=self.task_queue,
            workflows=[BootstrapTokenRotationWorkflow],
            activities=[activities.rotate_bootstrap_token, activities.delete_stale_bootstrap_tokens],
        ):
            yield

    async def start(self) -> WorkflowHandle[Any, BootstrapTokenRotationResult]:
        return await self.client.start_workflow(
            BootstrapTokenRotationWorkflow.run,
            BootstrapTokenRotationInput(cluster="c", period_seconds=PERIOD, grace_seconds=GRACE),
            id=f"{bootstrap_token_rotation_id('c')}-{uuid.uuid4().hex[:8]}",
            task_queue=self.task_queue,
        )

    async def tokens(self) -> dict[int, Secret]:
        """The rotated tokens' Secrets by generation."""
        found = {}
        for item in await self.kube.list_objects("Secret", NAMESPACE, label_selector=GENERATION_LABEL):
            secret = await self.kube.read_secret(NAMESPACE, item["metadata"]["name"])
            if secret is not None:
                found[int(secret.metadata.labels[GENERATION_LABEL])] = secret
        return found

    async def generation(self, number: int) -> Secret:
        async def made() -> Secret | None:
            return (await self.tokens()).get(number)

        return await eventually(made, timeout=15, what=f"generation {number}")


class CreateLosesItsAnswer:
    """The cluster, except that the first create of a Secret lands and then fails, as when the worker dies
    between the API server's answer and the activity's."""

    def __init__(self, kube: KubernetesCluster) -> None:
        self.kube = kube
        self.creates = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    async def create_secret(self, secret: Any) -> Secret:
        self.creates += 1
        created = await self.kube.create_secret(secret)
        if self.creates == 1:
            raise TransientError("the connection dropped after the create", code="ConnectionError")
        return created


@pytest_asyncio.fixture
async def rotation(temporal_env: WorkflowEnvironment, task_queue: str, aks: SimulatedAks) -> Rotation:
    return Rotation(temporal_env.client, task_queue, aks.kube, aks.azure.settings.bootstrap_token_secret, aks)


async def whoami(rotation: Rotation, secret: Secret) -> dict[str, Any]:
    """What the API server makes of the token: a SelfSubjectReview's user."""
    token = f"{secret.data['token-id']}.{secret.data['token-secret']}"
    credential = KubeCredential(
        rotation.aks.plane.server, rotation.aks.plane.ca_file.read_text(), token=token
    )
    async with KubeApi(credential) as api:
        review = await api.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    user: dict[str, Any] = review["status"]["userInfo"]
    return user


async def test_each_rotation_creates_the_next_token_at_once_and_deletes_the_replaced_one_after_the_grace(
    rotation: Rotation,
) -> None:
    namespace, name = rotation.seed.split("/")
    seed = await rotation.kube.read_secret(namespace, name)
    assert seed is not None
    bootstrap = ClusterBootstrap(rotation.kube, rotation.seed, "api", keep_seconds=0)

    async with rotation.serving(rotation.kube):
        first = await rotation.start()
        one = await rotation.generation(1)
        before = datetime.now(UTC)
        assert one.type == "bootstrap.kubernetes.io/token" and one.metadata.name == "bootstrap-token-nwrot1"
        for key in ("usage-bootstrap-authentication", "usage-bootstrap-signing", "auth-extra-groups"):
            assert one.data[key] == seed.data[key], f"{key} as the configured token has it"
        expiration = datetime.fromisoformat(one.data["expiration"])
        assert abs(expiration - (before + timedelta(seconds=2 * PERIOD))) < timedelta(seconds=30)
        user = await whoami(rotation, one)
        assert user["username"] == "system:bootstrap:nwrot1"
        assert set(user["groups"]) >= {"system:bootstrappers", seed.data["auth-extra-groups"]}
        assert f"TLS_BOOTSTRAP_TOKEN=nwrot1.{one.data['token-secret']}" in await bootstrap(request())

        second = await rotation.start()
        two = await rotation.generation(2)
        assert f"TLS_BOOTSTRAP_TOKEN=nwrot2.{two.data['token-secret']}" in await bootstrap(request())
        assert 1 in await rotation.tokens(), "the replaced token stays while nodes may still join with it"
        third = await rotation.start()
        await rotation.generation(3)
        fourth = await rotation.start()
        four = await rotation.generation(4)
        results = await asyncio.gather(first.result(), second.result(), third.result(), fourth.result())

    assert four.metadata.name == "bootstrap-token-nwrot1"
    assert any(
        step == TIMER and "may be in use by joining nodes" in summary
        for step, summary in await step_summaries(rotation.client, fourth)
    ), "generation 4 waited for nwrot1 to be free"
    assert set(await rotation.tokens()) == {4}
    assert [result.token.generation for result in results] == [1, 2, 3, 4]
    deleted = sorted(item for result in results for item in result.deleted)
    assert deleted == sorted(f"{NAMESPACE}/bootstrap-token-nwrot{n % 3}" for n in (1, 2, 3))
    assert await rotation.kube.read_secret(namespace, name) is not None, (
        "the configured token is never deleted"
    )
    assert rotation.metrics.bootstrap_token_rotations._value.get() == 4
    assert (
        rotation.metrics.bootstrap_token_expiration._value.get()
        == datetime.fromisoformat(four.data["expiration"]).timestamp()
    )
    events = {
        (event["reason"], event["regarding"]["name"])
        for event in await rotation.kube.list_objects("Event", NAMESPACE)
        if event["regarding"].get("uid") in {one.metadata.uid, two.metadata.uid}
    }
    assert events == {
        ("BootstrapTokenRotated", "bootstrap-token-nwrot1"),
        ("BootstrapTokenDeleted", "bootstrap-token-nwrot1"),
        ("BootstrapTokenRotated", "bootstrap-token-nwrot2"),
        ("BootstrapTokenDeleted", "bootstrap-token-nwrot2"),
    }


async def test_a_rotation_whose_create_is_retried_after_it_landed_makes_one_token(rotation: Rotation) -> None:
    lossy = CreateLosesItsAnswer(rotation.kube)
    async with rotation.serving(lossy):
        result = await (await rotation.start()).result()

    assert lossy.creates == 1 and result.token.generation == 1
    assert set(await rotation.tokens()) == {1}
    assert rotation.metrics.bootstrap_token_rotations._value.get() == 0, (
        "the attempt that created it lost its answer, and its count; the retry found the token"
    )


async def test_the_schedule_runs_every_period_and_goes_when_rotation_is_turned_off(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    client, cluster = temporal_env.client, f"c-{uuid.uuid4().hex[:8]}"
    assert bootstrap_token_rotation(cluster, 0, 900, 300) is None, "a period of 0 turns rotation off"
    rotation = bootstrap_token_rotation(cluster, 3600, 900, 300)
    assert rotation is not None and rotation.grace_seconds == 900 + 300 + 2

    await ensure_bootstrap_token_rotation(client, cluster, task_queue, rotation)
    handle = client.get_schedule_handle(bootstrap_token_rotation_id(cluster))
    schedule = (await handle.describe()).schedule
    assert [interval.every for interval in schedule.spec.intervals] == [timedelta(hours=1)]
    assert isinstance(schedule.action, ScheduleActionStartWorkflow)
    assert schedule.action.workflow == "BootstrapTokenRotation"

    await ensure_bootstrap_token_rotation(client, cluster, task_queue, None)
    with pytest.raises(RPCError):
        await handle.describe()
    await ensure_bootstrap_token_rotation(client, cluster, task_queue, None)  # none left to delete: no error
