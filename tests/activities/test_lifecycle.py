"""The launch activity against a cloud that fails: a passing error marks the NodeClaim as Karpenter does while it
retries (Launched=Unknown, LaunchFailed), and never over the verdict its lifecycle already wrote."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.kube import apply_condition, nodeclaim_object
from activities.lifecycle import LifecycleActivities
from core.cloudprovider import Instance, LaunchRequest
from core.errors import CredentialError, InvalidError, TransientError
from core.instancetypes.catalog import load_shipped_catalog
from core.messages import ConditionUpdate, LaunchInput, OfferingChoice, PlannedNodeClaim
from tests.cluster import activity_environment, events
from workers.simulated_aks import SimulatedAks

OFFERING = OfferingChoice(
    instance_type="Standard_D2s_v5", zone="eastus-1", capacity_type="on-demand", price_micros=1
)


class FailingCloud:
    """Every create fails with the given error."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def create(self, request: LaunchRequest) -> Instance:
        raise self.error


async def launched(aks: SimulatedAks, name: str) -> tuple[str, str, str] | None:
    claim = await aks.kube.get_nodeclaim(name)
    condition = claim.status.condition("Launched") if claim is not None else None
    return None if condition is None else (condition.status, condition.reason, condition.message)


async def test_a_retried_launch_is_launched_unknown_but_never_over_a_verdict(aks: SimulatedAks) -> None:
    name = "default-retried"
    claim = PlannedNodeClaim(name=name, nodepool="default", launch_candidates=[OFFERING], labels={})
    await aks.kube.create_nodeclaim(nodeclaim_object(claim, "default", []))
    cloud = FailingCloud(TransientError("InternalServerError: try again", code="InternalServerError"))
    activities = LifecycleActivities(aks.kube, cloud, load_shipped_catalog("eastus"))  # type: ignore[arg-type]
    request = LaunchInput(nodeclaim=name, nodepool="default", offering=OFFERING)

    with pytest.raises(ApplicationError) as raised:
        await activity_environment().run(activities.launch_nodeclaim, request)
    assert not raised.value.non_retryable
    assert await launched(aks, name) == ("Unknown", "LaunchFailed", "InternalServerError: try again")

    verdict = ConditionUpdate(
        name=name, type="Launched", status="False", reason="LaunchTimeout", message="late"
    )
    await apply_condition(aks.kube, verdict)
    with pytest.raises(ApplicationError):  # an attempt that outlived the lifecycle's timeout
        await activity_environment().run(activities.launch_nodeclaim, request)
    assert await launched(aks, name) == ("False", "LaunchTimeout", "late")

    # A request no retry mends is the lifecycle's to record: the activity only says so.
    activities.cloud = FailingCloud(InvalidError("InvalidParameter: bad image", code="InvalidParameter"))  # type: ignore[assignment]
    with pytest.raises(ApplicationError) as raised:
        await activity_environment().run(activities.launch_nodeclaim, request)
    assert (raised.value.type, raised.value.non_retryable) == ("Invalid", True)


async def test_a_refused_identity_is_retried_with_a_warning_on_the_nodeclaim(aks: SimulatedAks) -> None:
    """Not the request's fault nor the offering's: the launch is retried (until the lifecycle's launch timeout)
    while the NodeClaim says why, and no offering is ruled out."""
    name = "default-refused"
    claim = PlannedNodeClaim(name=name, nodepool="default", launch_candidates=[OFFERING], labels={})
    await aks.kube.create_nodeclaim(nodeclaim_object(claim, "default", []))
    refused = (
        "AADSTS7000222: service principal c1 (client secret) could not sign in: Microsoft Entra ID error "
        "'(invalid_client) AADSTS7000222: The provided client secret keys for app 'c1' are expired.'"
    )
    cloud = FailingCloud(CredentialError(refused, code="AADSTS7000222"))
    activities = LifecycleActivities(aks.kube, cloud, load_shipped_catalog("eastus"))  # type: ignore[arg-type]
    request = LaunchInput(nodeclaim=name, nodepool="default", offering=OFFERING)

    with pytest.raises(ApplicationError) as raised:
        await activity_environment().run(activities.launch_nodeclaim, request)
    assert (raised.value.type, raised.value.non_retryable, raised.value.details) == ("Credential", False, ())
    assert await launched(aks, name) == ("Unknown", "LaunchFailed", refused)
    [warning] = await events(aks.kube, "CredentialRefused", {name})
    assert warning["type"] == "Warning"
    assert warning["note"] == f"Azure refused the worker's identity, retrying: {refused}"
