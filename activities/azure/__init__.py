"""The Azure cloud provider: NodeClaims' VMs and NICs through the async Azure management SDKs.

`provider` holds the CloudProvider and its settings, `vm` the request bodies, `names` the deterministic
resource names and provider IDs, `errors` the classification of Azure failures, and `unavailable` the
unavailable-offerings cache that capacity and quota failures fill.
"""

from activities.azure.provider import AzureCloudProvider, AzureSettings, AzureSettingsError
from activities.azure.unavailable import UnavailableOfferings

__all__ = ["AzureCloudProvider", "AzureSettings", "AzureSettingsError", "UnavailableOfferings"]
