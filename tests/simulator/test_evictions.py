"""Spot evictions in the ARM emulator: the real SDK's `simulate_eviction`, the Scheduled Events document a VM
reads from IMDS, the eviction at `NotBefore` (on a clock of the test's own, and in real time), approval through
IMDS, and VMs that vanish with no notice."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from core.errors import InvalidError, NotFoundError
from simulator.aks_client import AksEmulatorClient
from simulator.arm import ArmSettings, ArmState, ResourceType, serve_arm, start_arm
from simulator.arm.imds import SCHEDULED_EVENTS_API_VERSION, SCHEDULED_EVENTS_PATH
from tests.simulator.test_arm import Azure, Clock, clients, create_vm, emulator_session, requests_for

RFC1123 = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")


@pytest_asyncio.fixture
async def azure() -> AsyncIterator[Azure]:
    async with serve_arm() as arm, clients(arm) as connected:
        yield connected


@pytest_asyncio.fixture
async def clocked(tmp_path: Path) -> AsyncIterator[tuple[Azure, Clock]]:
    """An emulator on the test's clock, which evicts only when the test says (`evict_due`)."""
    clock = Clock()
    arm = await start_arm(ArmState(ArmSettings(), wall_clock=clock), tmp_path)
    assert arm.evictor is not None
    arm.evictor.cancel()
    try:
        async with clients(arm) as connected:
            yield connected, clock
    finally:
        await arm.close()


def control(azure: Azure) -> AksEmulatorClient:
    return AksEmulatorClient(azure.arm.url, azure.arm.ca_pem)


async def eventually_gone(azure: Azure, name: str, timeout: float = 10.0) -> datetime:
    """When the VM was seen gone (polled every 20 ms)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while azure.state.vm(name) is not None:
        assert loop.time() < deadline, f"VM {name} still there after {timeout} s"
        await asyncio.sleep(0.02)
    return datetime.now(UTC)


async def test_simulate_eviction_through_the_sdk_posts_a_preempt_event(azure: Azure) -> None:
    await create_vm(azure, "aks-spot", spot=True)

    before = datetime.now(UTC)
    assert await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-spot") is None
    assert requests_for(azure.state, "POST", "virtualMachines", "aks-spot")[0].status == 204

    async with control(azure) as client:
        document = await client.scheduled_events("aks-spot")
    assert set(document) == {"DocumentIncarnation", "Events"}
    assert document["DocumentIncarnation"] == 1
    [event] = document["Events"]
    assert set(event) == {
        "EventId",
        "EventType",
        "ResourceType",
        "Resources",
        "EventStatus",
        "NotBefore",
        "Description",
        "EventSource",
        "DurationInSeconds",
    }
    assert str(uuid.UUID(event["EventId"])).upper() == event["EventId"]
    assert (event["EventType"], event["ResourceType"], event["Resources"]) == (
        "Preempt",
        "VirtualMachine",
        ["aks-spot"],
    )
    assert (event["EventStatus"], event["EventSource"], event["DurationInSeconds"]) == (
        "Scheduled",
        "Platform",
        -1,
    )
    assert event["Description"]
    assert RFC1123.match(event["NotBefore"]), event["NotBefore"]
    not_before = parsedate_to_datetime(event["NotBefore"])
    assert before + timedelta(seconds=30) <= not_before <= datetime.now(UTC) + timedelta(seconds=31)

    # Asking again changes nothing; the VM is still there until its deadline.
    await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-spot")
    async with control(azure) as client:
        assert await client.scheduled_events("aks-spot") == document
    assert (await azure.compute.virtual_machines.get(azure.rg, "aks-spot")).provisioning_state == "Succeeded"


async def test_only_spot_vms_that_are_deleted_on_eviction_can_be_evicted(azure: Azure) -> None:
    await create_vm(azure, "aks-regular")
    with pytest.raises(ResourceExistsError) as refused:
        await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-regular")
    assert refused.value.status_code == 409
    assert refused.value.error is not None and refused.value.error.code == "OperationNotAllowed"
    assert "not a Spot virtual machine" in refused.value.error.message

    nic = await azure.network.network_interfaces.get(azure.rg, "aks-regular")
    body = {
        "location": "eastus",
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
            "networkProfile": {"networkInterfaces": [{"id": nic.id}]},
            "priority": "Spot",
            "evictionPolicy": "Deallocate",
        },
    }
    await (
        await azure.compute.virtual_machines.begin_create_or_update(azure.rg, "aks-deallocated", body)
    ).result()
    with pytest.raises(ResourceExistsError) as deallocate:
        await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-deallocated")
    assert deallocate.value.error is not None and "does not emulate" in deallocate.value.error.message

    with pytest.raises(ResourceNotFoundError):
        await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-nothing")
    async with control(azure) as client:
        assert (await client.scheduled_events("aks-regular"))["Events"] == []
        with pytest.raises(InvalidError, match="not a Spot"):
            await client.evict("aks-regular")
    assert azure.state.counters.vms_evicted == 0


async def test_the_vm_is_deleted_at_not_before_on_the_emulators_clock(clocked: tuple[Azure, Clock]) -> None:
    azure, clock = clocked
    await create_vm(azure, "aks-spot", spot=True)
    disk = azure.state.vm("aks-spot").body["properties"]["storageProfile"]["osDisk"]["name"]  # type: ignore[union-attr]

    await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-spot")
    document = azure.state.scheduled_events("aks-spot")
    # 30 s from 14:00:00.25, rounded up to the whole second the event shows.
    assert document["Events"][0]["NotBefore"] == "Tue, 24 Nov 2026 14:00:31 GMT"
    assert azure.state.next_eviction() == datetime(2026, 11, 24, 14, 0, 31, tzinfo=UTC)

    clock.now += timedelta(seconds=30.5)
    assert azure.state.evict_due() == []
    assert azure.state.vm("aks-spot") is not None

    clock.now += timedelta(seconds=0.25)
    assert azure.state.evict_due() == ["aks-spot"]
    # Deleted as evictionPolicy Delete does: the NIC and the OS disk follow their deleteOption (Delete).
    with pytest.raises(ResourceNotFoundError):
        await azure.compute.virtual_machines.get(azure.rg, "aks-spot")
    assert azure.state.nic("aks-spot") is None
    assert azure.state.disk(disk) is None
    counters = azure.state.counters
    assert (counters.vms_evicted, counters.vms_deleted, counters.nics_deleted, counters.disks_deleted) == (
        1,
        1,
        1,
        1,
    )
    assert azure.state.next_eviction() is None
    assert azure.state.evict_due() == []


async def test_an_eviction_in_real_time_with_a_shrunk_notice(azure: Azure) -> None:
    azure.state.settings.eviction_notice = timedelta(seconds=1)
    await create_vm(azure, "aks-spot", spot=True)

    await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-spot")
    not_before = parsedate_to_datetime(azure.state.scheduled_events("aks-spot")["Events"][0]["NotBefore"])

    gone = await eventually_gone(azure, "aks-spot")
    assert not_before <= gone < not_before + timedelta(seconds=5)
    assert azure.state.counters.vms_evicted == 1
    assert azure.state.resources(ResourceType.NETWORK_INTERFACE) == []


async def test_imds_rules_and_approving_an_event_starts_it(azure: Azure) -> None:
    await create_vm(azure, "aks-spot", spot=True)
    url = azure.arm.url + SCHEDULED_EVENTS_PATH
    query = {"vm": "aks-spot", "api-version": SCHEDULED_EVENTS_API_VERSION}
    async with emulator_session(azure.arm) as session:
        async with session.get(url, params=query) as response:
            assert response.status == 400
            assert await response.json() == {"error": "Bad request. Required metadata header not specified"}
        async with session.get(url, params={"vm": "aks-spot"}, headers={"Metadata": "true"}) as response:
            assert response.status == 400
            assert "api-version" in (await response.json())["error"]
        async with session.get(
            url, params={**query, "vm": "aks-none"}, headers={"Metadata": "true"}
        ) as response:
            assert response.status == 404
        async with session.get(url, params=query, headers={"Metadata": "true"}) as response:
            assert await response.json() == {"DocumentIncarnation": 0, "Events": []}

    async with control(azure) as client:
        event = await client.evict("aks-spot", notice=timedelta(minutes=10))
        assert event.not_before >= datetime.now(UTC) + timedelta(minutes=9)
        with pytest.raises(InvalidError, match="No scheduled event"):
            await client.start_events("aks-spot", "00000000-0000-0000-0000-000000000000")
        await client.start_events("aks-spot", event.id)

        await eventually_gone(azure, "aks-spot", timeout=5)
        with pytest.raises(NotFoundError):
            await client.scheduled_events("aks-spot")
    assert azure.state.counters.vms_evicted == 1


async def test_approval_shows_the_event_started(clocked: tuple[Azure, Clock]) -> None:
    azure, clock = clocked
    await create_vm(azure, "aks-spot", spot=True)
    async with control(azure) as client:
        event = await client.evict("aks-spot", notice=timedelta(seconds=45))
        assert event.not_before == datetime(2026, 11, 24, 14, 0, 46, tzinfo=UTC)
        clock.now += timedelta(seconds=5)
        await client.start_events("aks-spot", event.id.lower())
        document = await client.scheduled_events("aks-spot")
    assert document["DocumentIncarnation"] == 2
    [started] = document["Events"]
    assert (started["EventId"], started["EventStatus"], started["NotBefore"]) == (event.id, "Started", "")
    assert azure.state.evict_due() == ["aks-spot"]


async def test_a_vm_deleted_or_made_again_before_its_deadline_is_not_evicted(
    clocked: tuple[Azure, Clock],
) -> None:
    azure, clock = clocked
    await create_vm(azure, "aks-spot", spot=True)
    await azure.compute.virtual_machines.simulate_eviction(azure.rg, "aks-spot")
    await (await azure.compute.virtual_machines.begin_delete(azure.rg, "aks-spot")).result()
    await create_vm(azure, "aks-spot", spot=True)
    assert azure.state.scheduled_events("aks-spot") == {"DocumentIncarnation": 0, "Events": []}

    clock.now += timedelta(minutes=5)
    assert azure.state.evict_due() == []
    assert azure.state.vm("aks-spot") is not None
    assert azure.state.counters.vms_evicted == 0


async def test_a_vanished_vm_is_gone_at_once(azure: Azure) -> None:
    await create_vm(azure, "aks-a")
    async with control(azure) as client:
        await client.vanish("aks-a")
        with pytest.raises(NotFoundError):
            await client.vanish("aks-a")
        counters = await client.counters()
    with pytest.raises(ResourceNotFoundError):
        await azure.compute.virtual_machines.get(azure.rg, "aks-a")
    assert azure.state.nic("aks-a") is None
    assert (counters.vms_vanished, counters.vms_deleted, counters.vms_evicted) == (1, 1, 0)


async def test_the_evict_hook_checks_its_input(azure: Azure) -> None:
    async with emulator_session(azure.arm) as session:
        bad: list[dict[str, Any]] = [
            {},
            {"vm": "aks-a", "noticeSeconds": -1},
            {"vm": "aks-a", "noticeSeconds": "x"},
        ]
        for body in bad:
            async with session.post(f"{azure.arm.url}/_emulator/evict", json=body) as response:
                assert response.status == 400, body
