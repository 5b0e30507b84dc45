"""The AzureCloudProvider as a worker runs it: the async SDK clients on one credential, pointed at Azure or at
an ARM emulator, the bootstrap and AKSNodeClass lookups over the cluster, and heartbeats into the activity.

On Azure the credential is `DefaultAzureCredential` (workload identity in the cluster, from `AZURE_CLIENT_ID`,
`AZURE_TENANT_ID` and `AZURE_FEDERATED_TOKEN_FILE`); against an emulator the caller passes a static one and the
emulator's endpoint and CA file, which the clients verify the emulator's certificate against. The CA goes into
one TLS context on one connection pool that both clients share: given as `connection_verify=<path>`, azure-core
would build a new context for every request, and aiohttp, which pools connections per context, would open (and
keep) a new TLS connection for every request, hundreds of megabytes for a few hundred launches.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.pipeline.transport import AioHttpTransport
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio import activity

from activities.azure.bootstrap import ClusterBootstrap
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.provider import AzureCloudProvider, AzureSettings
from activities.catalog_source import CatalogSource
from core.cluster import ClusterAPI
from core.instancetypes.catalog import AzureCatalog


@dataclass(frozen=True, slots=True)
class ArmEndpoint:
    """Where ARM is when it is not Azure's (an emulator), and the CA certificate that signs its certificate."""

    url: str
    ca_file: str | None = None


def activity_heartbeat(detail: str) -> None:
    """Heartbeat the running activity; outside one (a test calling the provider directly) do nothing."""
    with contextlib.suppress(RuntimeError):
        activity.heartbeat(detail)


@contextlib.asynccontextmanager
async def azure_cloud_provider(
    cluster: ClusterAPI,
    settings: AzureSettings,
    credential: AsyncTokenCredential,
    endpoint: ArmEndpoint | None = None,
    catalog: AzureCatalog | CatalogSource | None = None,
    rotated_tokens: bool = True,
) -> AsyncIterator[AzureCloudProvider]:
    """The provider for the block; its clients (and their connections) close afterwards. Launches join with the
    newest of the configured and (with `rotated_tokens`) the rotated bootstrap tokens."""
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(_session(endpoint))

        def options() -> dict[str, object]:
            """Each client's own transport, over the shared connection pool when there is one."""
            found: dict[str, object] = {}
            if endpoint is not None:
                found["base_url"] = endpoint.url
            if session is not None:
                found["transport"] = AioHttpTransport(session=session, session_owner=False)
            return found

        compute = await stack.enter_async_context(
            ComputeManagementClient(credential, settings.subscription_id, **options())
        )
        network = await stack.enter_async_context(
            NetworkManagementClient(credential, settings.subscription_id, **options())
        )
        yield AzureCloudProvider(
            compute,
            network,
            settings,
            ClusterBootstrap(
                cluster, settings.bootstrap_token_secret, settings.cluster_endpoint, rotated=rotated_tokens
            ),
            catalog=catalog,
            node_class=ClusterNodeClasses(cluster),
            heartbeat=activity_heartbeat,
        )


@contextlib.asynccontextmanager
async def _session(endpoint: ArmEndpoint | None) -> AsyncIterator[aiohttp.ClientSession | None]:
    """A connection pool that trusts the emulator's CA, when there is one to trust; else the SDK's own."""
    if endpoint is None or not endpoint.ca_file:
        yield None
        return
    context = ssl.create_default_context(cafile=endpoint.ca_file)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        yield session
