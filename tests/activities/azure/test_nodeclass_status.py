"""The AKSNodeClass status reconcile against a store that another writer changes under it."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from activities.azure.nodeclass_status import NodeClassStatusActivities
from activities.catalog_source import CatalogSource

SUBNET = "/subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Network/virtualNetworks/aks-vnet/subnets/aks-subnet"


class RacingStore:
    """An AKSNodeClass whose first status patch loses to another writer (the controller's localDNSState)."""

    def __init__(self) -> None:
        self.version = 1
        self.status: dict[str, Any] = {}
        self.patches: list[str] = []

    async def list_objects(self, kind: str) -> list[dict[str, Any]]:
        metadata = {"name": "default", "generation": 1, "resourceVersion": str(self.version)}
        metadata["creationTimestamp"] = "2026-11-26T00:00:00Z"
        return [{"kind": kind, "metadata": metadata, "spec": {}, "status": dict(self.status)}]

    async def patch_status(self, kind: str, name: str, status: dict[str, Any], resource_version: str) -> bool:
        self.patches.append(resource_version)
        if len(self.patches) == 1:
            self.version += 1  # someone else wrote first
            self.status["localDNSState"] = "Disabled"
            return False
        if resource_version != str(self.version):
            return False
        self.status.update(status)
        self.version += 1
        return True


def provider_in(region: str) -> Any:
    async def subnet(*_: str) -> None:
        return None

    return SimpleNamespace(
        settings=SimpleNamespace(
            subnet_id=SUBNET,
            resource_group="MC_rg",
            kubernetes_version="1.33.5",
            image_gallery_subscription_id=None,
        ),
        network=SimpleNamespace(subnets=SimpleNamespace(get=subnet)),
        catalogs=CatalogSource.shipped(region),
    )


async def test_a_status_that_changed_meanwhile_is_read_and_written_again() -> None:
    provider = provider_in("eastus")
    store = RacingStore()
    result = await NodeClassStatusActivities(store, provider).reconcile(datetime.now(UTC))
    assert store.patches == ["1", "2"]
    assert result.written == ["default"] and result.ready == ["default"]
    assert store.status["localDNSState"] == "Disabled"
    ready = next(c for c in store.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


async def test_prices_of_the_fallback_region_show_as_a_condition_until_live_prices_replace_them() -> None:
    provider = provider_in("usgovvirginia")
    store = RacingStore()
    activities = NodeClassStatusActivities(store, provider)
    await activities.reconcile(datetime.now(UTC))
    conditions = {c["type"]: c for c in store.status["conditions"]}
    fallback = conditions["PricingFallback"]
    assert (fallback["status"], fallback["reason"]) == ("True", "RegionNotInPriceTable")
    assert fallback["message"] == (
        "the shipped price table has no prices for usgovvirginia: instance types are priced with the eastus "
        "prices (the AKS provider's fallback) until prices are read from the Retail Prices API"
    )
    assert conditions["Ready"]["status"] == "True"  # launches go on

    catalogs: CatalogSource = provider.catalogs
    catalogs.replace(catalogs.current, None, datetime.now(UTC))
    await activities.reconcile(datetime.now(UTC))
    assert "PricingFallback" not in {c["type"] for c in store.status["conditions"]}
