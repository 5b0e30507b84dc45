"""Azure's clouds: the public cloud and the sovereign ones, each with its own Resource Manager, Entra ID authority
and token audience, and the Retail Prices API in the public cloud only.

One setting picks all of them together (`NODEWRIGHT_AZURE_CLOUD`, the AKS provider's `ARM_CLOUD`), by the names the
provider accepts (cloud-provider-azure's environment names, case-insensitive): `AzurePublicCloud` (or
`AzureCloud`), `AzureUSGovernment` (or `AzureUSGovernmentCloud`) and `AzureChinaCloud`. The endpoints and
audiences are the provider's (cloud-provider-azure's `ResourceManagerEndpoint`, `ActiveDirectoryEndpoint` and
`TokenAudience`); as the provider does, only the public cloud reads live prices.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AzureCloud:
    name: str
    """The provider's name for it, e.g. `AzureUSGovernment`."""
    resource_manager: str
    """The ARM endpoint, e.g. `https://management.usgovcloudapi.net`."""
    authority_host: str
    """The Entra ID authority host tokens come from, e.g. `login.microsoftonline.us`."""
    audience: str
    """The token audience of ARM in this cloud."""
    retail_prices: str | None
    """The Retail Prices API; None where the provider reads no live prices."""

    @property
    def scope(self) -> str:
        """The token scope for ARM (`<audience>/.default`)."""
        return f"{self.audience}/.default"

    @property
    def host_names(self) -> tuple[str, ...]:
        """The host names its clients call: ARM, the authority and the Retail Prices API (when it has one)."""
        hosts = [_host(self.resource_manager), self.authority_host]
        if self.retail_prices is not None:
            hosts.append(_host(self.retail_prices))
        return tuple(hosts)


AZURE_PUBLIC_CLOUD = AzureCloud(
    name="AzurePublicCloud",
    resource_manager="https://management.azure.com",
    authority_host="login.microsoftonline.com",
    audience="https://management.azure.com",
    retail_prices="https://prices.azure.com/api/retail/prices",
)
AZURE_US_GOVERNMENT = AzureCloud(
    name="AzureUSGovernment",
    resource_manager="https://management.usgovcloudapi.net",
    authority_host="login.microsoftonline.us",
    audience="https://management.usgovcloudapi.net",
    retail_prices=None,
)
AZURE_CHINA_CLOUD = AzureCloud(
    name="AzureChinaCloud",
    resource_manager="https://management.chinacloudapi.cn",
    authority_host="login.chinacloudapi.cn",
    audience="https://management.chinacloudapi.cn",
    retail_prices=None,
)

_NAMES = {
    "azurepubliccloud": AZURE_PUBLIC_CLOUD,
    "azurecloud": AZURE_PUBLIC_CLOUD,
    "azureusgovernment": AZURE_US_GOVERNMENT,
    "azureusgovernmentcloud": AZURE_US_GOVERNMENT,
    "azurechinacloud": AZURE_CHINA_CLOUD,
}
CLOUD_NAMES = (
    "AzurePublicCloud",
    "AzureCloud",
    "AzureUSGovernment",
    "AzureUSGovernmentCloud",
    "AzureChinaCloud",
)
"""Every name accepted, as written in the provider's table."""


class UnknownCloudError(ValueError):
    """A cloud name nobody knows."""


def cloud_named(name: str) -> AzureCloud:
    """The cloud of a name the provider accepts (case and surrounding spaces do not matter)."""
    found = _NAMES.get(name.strip().lower())
    if found is None:
        raise UnknownCloudError(f"unknown Azure cloud {name!r}; expected one of {', '.join(CLOUD_NAMES)}")
    return found


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]
