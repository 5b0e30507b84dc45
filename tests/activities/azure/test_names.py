"""Names and provider IDs of a NodeClaim's Azure resources."""

from __future__ import annotations

import pytest

from activities.azure.names import NodeNames, nodeclaim_of, provider_id, vm_name_from_provider_id
from core.errors import InvalidError

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"


def test_vm_nic_and_disk_are_named_after_the_nodeclaim() -> None:
    names = NodeNames.of("default-2jf98")

    assert (names.vm, names.nic, names.os_disk) == ("aks-default-2jf98",) * 3
    assert nodeclaim_of(names.vm) == "default-2jf98"


@pytest.mark.parametrize("nodeclaim", ["x" * 61, "Default-abc", "default_abc", "default-"])
def test_a_name_azure_would_refuse_is_an_invalid_request(nodeclaim: str) -> None:
    with pytest.raises(InvalidError, match="VM name"):
        NodeNames.of(nodeclaim)


def test_the_longest_accepted_name_fills_the_azure_limit() -> None:
    assert len(NodeNames.of("x" * 60).vm) == 64


def test_provider_id_lower_cases_only_the_resource_group() -> None:
    value = provider_id(SUBSCRIPTION, "MC_Group_Cluster_eastus", "aks-default-2jf98")

    assert value == (
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/mc_group_cluster_eastus"
        "/providers/Microsoft.Compute/virtualMachines/aks-default-2jf98"
    )
    assert vm_name_from_provider_id(value) == "aks-default-2jf98"


@pytest.mark.parametrize(
    "value",
    [
        "aws:///us-east-1a/i-0123",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/x",
        "",
    ],
)
def test_other_provider_ids_are_refused(value: str) -> None:
    with pytest.raises(InvalidError, match="not an Azure VM provider ID"):
        vm_name_from_provider_id(value)
