"""The AzureCloudProvider as a worker runs it: the async SDK clients on one credential, pointed at the ARM of
the worker's cloud (`core.clouds`) or at an ARM emulator, asking for tokens of that cloud's scope, the bootstrap
and AKSNodeClass lookups over the cluster, and heartbeats into the activity.

The caller passes the credential (`activities.azure.credentials`, or a static one against an emulator). Against
an emulator, its CA file goes into one TLS context on one connection pool (`azure_session`) that the SDK
clients, the credential and the Retail Prices client share: given as `connection_verify=<path>`, azure-core
would build a new context for every request, and aiohttp, which pools connections per context, would open (and
keep) a new TLS connection for every request, hundreds of megabytes for a few hundred launches. The same pool
takes a resolver, which tests use to serve a cloud's host names from the emulator.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.pipeline.transport import AioHttpTransport
from azure.mgmt.compute.aio import ComputeManagementClient
from azure.mgmt.network.aio import NetworkManagementClient
from temporalio import activity

from activities.azure.bootstrap import ClusterBootstrap
from activities.azure.nodeclass import ClusterNodeClasses
from activities.azure.prices import PriceSettings, RetailPricesClient
from activities.azure.provider import AzureCloudProvider, AzureSettings
from activities.azure.windows import ClusterWindowsAdmin
from activities.catalog_source import CatalogSource
from core.clouds import AZURE_PUBLIC_CLOUD, AzureCloud
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


def transport(session: aiohttp.ClientSession | None) -> AioHttpTransport | None:
    """A transport over the shared connection pool, for one client or credential (None: the SDK's own)."""
    return None if session is None else AioHttpTransport(session=session, session_owner=False)


@contextlib.asynccontextmanager
async def azure_cloud_provider(
    cluster: ClusterAPI,
    settings: AzureSettings,
    credential: AsyncTokenCredential,
    endpoint: ArmEndpoint | None = None,
    catalog: AzureCatalog | CatalogSource | None = None,
    *,
    rotated_tokens: bool = True,
    cloud: AzureCloud = AZURE_PUBLIC_CLOUD,
    session: aiohttp.ClientSession | None = None,
    prices: PriceSettings | None = None,
) -> AsyncIterator[AzureCloudProvider]:
    """The provider for the block; its clients (and their connections) close afterwards. Launches join with the
    newest of the configured and (with `rotated_tokens`) the rotated bootstrap tokens. `session` is the pool to
    share (else one is opened for an emulator's CA); `prices` where its catalog refresh reads live prices (the
    cloud's Retail Prices API by default)."""
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(azure_session(endpoint.ca_file if endpoint else None))
        options: dict[str, Any] = {
            "base_url": endpoint.url if endpoint is not None else cloud.resource_manager,
            "credential_scopes": [cloud.scope],
        }

        def with_transport() -> dict[str, Any]:
            """Each client's own transport, over the shared connection pool when there is one."""
            own = transport(session)
            return options if own is None else {**options, "transport": own}

        compute = await stack.enter_async_context(
            ComputeManagementClient(credential, settings.subscription_id, **with_transport())
        )
        network = await stack.enter_async_context(
            NetworkManagementClient(credential, settings.subscription_id, **with_transport())
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
            windows_admin=ClusterWindowsAdmin(cluster, settings.windows_admin_secret),
            retail_prices=RetailPricesClient(prices or PriceSettings(url=cloud.retail_prices), session),
        )


@contextlib.asynccontextmanager
async def azure_session(
    ca_file: str | None = None, resolver: AbstractResolver | None = None
) -> AsyncIterator[aiohttp.ClientSession | None]:
    """A connection pool that trusts `ca_file` (an emulator's CA) and resolves names with `resolver`, when either
    is given; else None, and each client keeps the SDK's own."""
    if not ca_file and resolver is None:
        yield None
        return
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    connector = aiohttp.TCPConnector(ssl=context, resolver=resolver)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session
