"""What a Windows VM costs: the Windows meter when the Retail Prices API's was read, else the Linux price plus
the Windows Server license.

Azure bills a Windows VM (license type None, AKS's default) as the Linux VM plus a Windows Server license charged
per vCPU-hour. The Retail Prices API lists both as separate meters (the Windows one's product name ends in
` Windows`); the live price reader keeps both (`activities.azure.prices`), and a catalog refreshed from it holds
each size's Windows rate. The shipped catalogs hold Linux rates only, so without a live read the Windows rate is
derived: the Linux rate plus the license at

- USD 0.046 per vCPU-hour for every size but the B-series,
- USD 0.0046 per vCPU-hour for the burstable B-series,

the difference between the Windows and Linux pay-as-you-go meters of the 2,095 Windows rates the provider's price
table holds in 56 regions (`core/instancetypes/data/README.md` has the figures). Spot VMs are derived the same
way (the license is not discounted with the capacity): an upper bound of the Windows spot meter, which replaces
it once read. A cluster with Azure Hybrid Benefit (license type `Windows_Server`) brings its own license and pays
the Linux rate (`AzureCatalog.windows_license_included`).
"""

from __future__ import annotations

from core.instancetypes.catalog import AzureSku
from core.instancetypes.types import usd_to_micros

LICENSE_MICROS_PER_VCPU_HOUR = usd_to_micros("0.046")
"""The Windows Server license of a pay-as-you-go VM, per vCPU-hour."""
BURSTABLE_LICENSE_MICROS_PER_VCPU_HOUR = usd_to_micros("0.0046")
"""... of a burstable (B-series) VM."""
_BURSTABLE_PREFIX = "Standard_B"


def license_price(sku: AzureSku) -> int:
    """The Windows Server license of one VM of this size, micro-dollars per hour."""
    burstable = sku.name.startswith(_BURSTABLE_PREFIX)
    rate = BURSTABLE_LICENSE_MICROS_PER_VCPU_HOUR if burstable else LICENSE_MICROS_PER_VCPU_HOUR
    return rate * sku.vcpus


def windows_on_demand_price(sku: AzureSku) -> int | None:
    """The Windows pay-as-you-go price: the Windows meter read, else the Linux price plus the license; None when
    the size has no price at all."""
    return _windows_price(sku, sku.windows_on_demand_price_micros, sku.on_demand_price_micros)


def windows_spot_price(sku: AzureSku) -> int | None:
    """The Windows spot price: the Windows spot meter read, else the Linux spot price plus the license; None
    when the size has no spot price."""
    return _windows_price(sku, sku.windows_spot_price_micros, sku.spot_price_micros)


def _windows_price(sku: AzureSku, windows: int | None, linux: int | None) -> int | None:
    if windows is not None:
        return windows
    return None if linux is None else linux + license_price(sku)
