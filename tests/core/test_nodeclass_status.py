"""AKSNodeClass conditions as the AKS provider's status controller writes them, and its subnet ID checks."""

from __future__ import annotations

from datetime import UTC, datetime

from core.api.aksnodeclass import AKSNodeClass
from core.nodeclass_status import (
    SubnetID,
    images_problem,
    nodeclass_conditions,
    parse_subnet_id,
    subnet_id_problem,
    subnet_not_found,
)

NOW = datetime(2026, 1, 2, tzinfo=UTC)
NODE_RG = "MC_rg_cluster_eastus"


def subnet(rg: str, vnet: str, name: str, sub: str = "sub") -> str:
    return f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{name}"


MANAGED = subnet(NODE_RG, "aks-vnet-12345678", "aks-subnet")
BYO = subnet("net", "vnet", "nodes")


def test_subnet_ids_parse_case_insensitively_and_anything_else_does_not() -> None:
    upper = "/SUBSCRIPTIONS/s/RESOURCEGROUPS/rg/PROVIDERS/microsoft.network/VIRTUALNETWORKS/v/SUBNETS/n"
    assert parse_subnet_id(upper) == SubnetID("s", "rg", "v", "n")
    assert (
        parse_subnet_id("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v")
        is None
    )
    assert parse_subnet_id(BYO.replace("Microsoft.Network", "Microsoft.Compute")) is None


def test_subnet_id_problems_follow_the_provider() -> None:
    assert subnet_id_problem(MANAGED, MANAGED, NODE_RG) is None
    assert subnet_id_problem(subnet("net", "vnet", "pods"), BYO, NODE_RG) is None  # same BYO VNet
    assert subnet_id_problem("not-an-id", MANAGED, NODE_RG) == (
        "SubnetIDInvalid",
        "Failed to parse vnetSubnetID not-an-id",
    )
    custom = subnet(NODE_RG, "aks-vnet-12345678", "custom")
    assert subnet_id_problem(custom, MANAGED, NODE_RG) == (
        "SubnetIDInvalid",
        f"custom subnet cannot be in the same VNet as cluster managed VNet: {custom}",
    )
    other = subnet("net", "other-vnet", "nodes")
    assert subnet_id_problem(other, BYO, NODE_RG) == (
        "SubnetIDInvalid",
        f"vnetSubnetID does not match the cluster subscription, resource group, or virtual network: {other}",
    )


def test_a_nodeclass_whose_subnet_is_missing_is_not_ready_and_says_why() -> None:
    conditions = nodeclass_conditions([], 3, NOW, subnet_not_found(BYO), NOW)
    found = {c.type: (c.status.value, c.reason, c.message) for c in conditions}
    assert found["SubnetsReady"] == ("False", "SubnetNotFound", f"resource not found: {BYO}")
    assert found["Ready"] == ("False", "UnhealthyDependents", "SubnetsReady=False")
    for ready in ("ImagesReady", "KubernetesVersionReady", "ValidationSucceeded", "LocalDNSReady"):
        assert found[ready] == ("True", ready, "")
    assert all(c.observed_generation == 3 for c in conditions)
    assert conditions[-1].type == "Ready"


def test_a_nodeclass_with_its_subnet_is_ready_and_recomputing_changes_nothing() -> None:
    conditions = nodeclass_conditions([], 1, NOW, None, NOW)
    assert {c.type: c.status.value for c in conditions} == {
        "Ready": "True",
        "ImagesReady": "True",
        "KubernetesVersionReady": "True",
        "SubnetsReady": "True",
        "ValidationSucceeded": "True",
        "LocalDNSReady": "True",
    }
    assert nodeclass_conditions(conditions, 1, NOW, None, datetime(2027, 1, 1, tzinfo=UTC)) == conditions


def nodeclass(family: str, **status: object) -> AKSNodeClass:
    return AKSNodeClass.parse({"metadata": {"name": "n"}, "spec": {"imageFamily": family}, "status": status})


def test_a_windows_nodeclass_without_an_image_it_can_boot_has_images_not_ready() -> None:
    sig = images_problem(nodeclass("Windows2022"), "1.33.5", shared_gallery=False)
    assert sig is not None and sig[0] == "SIGRequiredForWindows"
    assert "AKSWindows images are published only in AKS's Shared Image Gallery" in sig[1]
    assert images_problem(nodeclass("Windows2022"), "1.33.5", shared_gallery=True) is None
    status_image = {"id": "/subscriptions/s/resourceGroups/AKS-Windows/providers/x/images/y/versions/z"}
    assert (
        images_problem(nodeclass("Windows2022", images=[status_image]), "1.33.5", shared_gallery=False)
        is None
    )
    assert images_problem(nodeclass("Ubuntu2204"), "1.33.5", shared_gallery=False) is None
    too_old = images_problem(
        nodeclass("Windows2025", kubernetesVersion="1.31.4"), "1.33.5", shared_gallery=True
    )
    assert too_old == (
        "ImagesNotFound",
        "AKSNodeClass n: image family Windows2025 needs Kubernetes 1.32 or later (the cluster runs 1.31)",
    )

    found = {
        c.type: (c.status.value, c.reason) for c in nodeclass_conditions([], 1, NOW, None, NOW, images=sig)
    }
    assert found["ImagesReady"] == ("False", "SIGRequiredForWindows")
    assert found["Ready"] == ("False", "UnhealthyDependents")


def test_prices_of_another_region_are_a_condition_outside_ready_that_goes_when_they_do() -> None:
    conditions = nodeclass_conditions([], 1, NOW, None, NOW, price_fallback="priced as eastus")
    fallback = next(c for c in conditions if c.type == "PricingFallback")
    assert (fallback.status.value, fallback.reason, fallback.message) == (
        "True",
        "RegionNotInPriceTable",
        "priced as eastus",
    )
    assert next(c for c in conditions if c.type == "Ready").status.value == "True"
    later = nodeclass_conditions(conditions, 1, NOW, None, datetime(2027, 1, 1, tzinfo=UTC))
    assert "PricingFallback" not in {c.type for c in later}


def test_a_windows_nodeclass_without_images_in_a_fallback_region_shows_both_conditions() -> None:
    sig = images_problem(nodeclass("Windows2022"), "1.33.5", shared_gallery=False)
    conditions = nodeclass_conditions([], 1, NOW, None, NOW, price_fallback="priced as eastus", images=sig)
    found = {c.type: (c.status.value, c.reason) for c in conditions}
    assert found["PricingFallback"] == ("True", "RegionNotInPriceTable")
    assert found["ImagesReady"] == ("False", "SIGRequiredForWindows")
    assert found["Ready"] == ("False", "UnhealthyDependents")  # the images, not the prices
