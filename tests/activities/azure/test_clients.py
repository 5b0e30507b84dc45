"""The provider as the worker builds it against an emulator: its SDK clients trust the emulator's CA and keep
their connections (a CA path handed to azure-core would make a new TLS connection for every request)."""

from __future__ import annotations

from datetime import timedelta

from activities.azure.clients import ArmEndpoint, azure_cloud_provider
from activities.azure.provider import AzureSettings
from core.api.kube import Secret
from core.cloudprovider import LaunchRequest
from simulator.arm import serve_arm

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
GROUP = "MC_nodewright_nodewright_eastus"


class SecretOnly:
    """The cluster as the bootstrap reads it; no NodePools, so launches use the defaults."""

    async def read_secret(self, namespace: str, name: str) -> Secret | None:
        if name != "bootstrap-token-abcdef":
            return None
        return Secret(data={"token-id": "abcdef", "token-secret": "0123456789abcdef"})

    async def get_nodepool(self, name: str) -> None:
        return None


async def test_launches_reuse_a_few_verified_connections() -> None:
    settings = AzureSettings(
        subscription_id=SUBSCRIPTION,
        resource_group=GROUP,
        location="eastus",
        cluster_name="c",
        subnet_id=f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network/"
        "virtualNetworks/v/subnets/s",
        kubernetes_version="1.33.5",
        node_image_version="202512.18.0",
        ssh_public_key="ssh-ed25519 AAAA test",
        cluster_endpoint="api",
        bootstrap_token_secret="kube-system/bootstrap-token-abcdef",
        poll_interval=timedelta(0),
    )
    async with serve_arm() as arm:
        endpoint = ArmEndpoint(arm.url, str(arm.ca_pem))
        async with azure_cloud_provider(SecretOnly(), settings, arm.credential(), endpoint) as cloud:  # type: ignore[arg-type]
            for index in range(5):
                request = LaunchRequest(
                    name=f"default-{index}",
                    nodepool="default",
                    instance_type="Standard_D2s_v5",
                    zone="eastus-1",
                    capacity_type="on-demand",
                )
                await cloud.create(request)
            assert [instance.name for instance in await cloud.list()] == [f"default-{i}" for i in range(5)]

    requests = list(arm.state.requests)
    assert len(requests) >= 25, "NIC and VM creates and their polls"
    assert len({record.client_port for record in requests}) <= 2, "one connection per client, kept alive"
