"""What a Windows node needs beyond a Linux one: a computer name Windows accepts, the admin account AKS gives
every Windows node, and the CustomScriptExtension that runs its bootstrap.

- Windows computer names are at most 15 characters. The VM keeps the provider's name (`aks-<nodeclaim>`,
  the idempotency key); its computer name, which the kubelet registers the Node under, is that name when it
  fits, else `aks` + a 6-character hash of the NodePool part of the NodeClaim name + `-` + the NodeClaim's
  suffix (`aksk3x9qa-x7k2p`), so nodes of one NodePool share a prefix and each NodeClaim keeps its own.
- Windows VMs need an admin user name and password (AKS takes them from the cluster's `windowsProfile`). They
  come from a Secret the operator names (`NODEWRIGHT_WINDOWS_ADMIN_SECRET`, `<namespace>/<name>`), of type
  `kubernetes.io/basic-auth` (keys `username` and `password`), read at each launch like the bootstrap token; a
  name or password AKS would refuse is reported naming the Secret and the key, never the value.
- On Windows the custom data is only a file (`C:\\AzureData\\CustomData.bin`): AKS runs it with a
  CustomScriptExtension (publisher `Microsoft.Compute`, type `CustomScriptExtension`, version 1.10) whose
  protected command copies it to a `.ps1`, runs it, and fails unless the bootstrap wrote 0 into
  `C:\\AzureData\\provision.complete`. The launch adds that extension once the VM is made.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from activities.bootstrap_tokens import parse_secret_reference
from activities.recent import READS_KEPT_SECONDS, Recent
from core.cluster import ClusterAPI
from core.errors import InvalidError, TransientError

MAX_COMPUTER_NAME_LENGTH = 15
"""Windows' limit on computer names (NetBIOS)."""
_HASH_LENGTH = 6
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"

BOOTSTRAP_EXTENSION = "cse-agent-karpenter"
"""The extension's name, as the AKS provider names the CSE it installs."""
EXTENSION_PUBLISHER = "Microsoft.Compute"
EXTENSION_TYPE = "CustomScriptExtension"
EXTENSION_VERSION = "1.10"
CUSTOM_DATA_FILE = "%SYSTEMDRIVE%\\AzureData\\CustomData.bin"
"""Where Azure puts a Windows VM's custom data."""
SETUP_SCRIPT = "%SYSTEMDRIVE%\\AzureData\\CustomDataSetupScript.ps1"
RESULT_FILE = "%SYSTEMDRIVE%\\AzureData\\provision.complete"
LOG_FILE = "%SYSTEMDRIVE%\\AzureData\\CustomDataSetupScript.log"

LICENSE_NONE = "None"
LICENSE_WINDOWS_SERVER = "Windows_Server"
"""AKS's Windows license types: None (the license is paid with the VM), or Windows_Server (Azure Hybrid Benefit)."""

_RESERVED_USERNAMES = frozenset(
    {
        "administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123", "a",
        "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root",
        "server", "sql", "support", "support_388945a0", "sys", "test2", "test3", "user4", "user5",
    }
)  # fmt: skip
"""Admin user names Azure refuses on Windows VMs."""
_USERNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,18}[A-Za-z0-9_-]$|^[A-Za-z0-9_]$")
MIN_PASSWORD_LENGTH = 14
MAX_PASSWORD_LENGTH = 123
"""AKS's bounds on the Windows admin password (`windowsProfile.adminPassword`)."""


def _hash(text: str, length: int) -> str:
    number = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    digits = []
    for _ in range(length):
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(digits)


def computer_name(vm_name: str, nodeclaim: str) -> str:
    """The Windows computer name (the Node's name) of a NodeClaim's VM; see the module."""
    if len(vm_name) <= MAX_COMPUTER_NAME_LENGTH:
        return vm_name
    prefix, _, suffix = nodeclaim.rpartition("-")
    short = f"aks{_hash(prefix, _HASH_LENGTH)}-{suffix}"
    if prefix and suffix and len(short) <= MAX_COMPUTER_NAME_LENGTH:
        return short
    return "aks" + _hash(nodeclaim, MAX_COMPUTER_NAME_LENGTH - 3)


def bootstrap_command() -> str:
    """The extension's command: run the custom data as a PowerShell script, and fail as the bootstrap did."""
    return (
        'powershell.exe -ExecutionPolicy Unrestricted -Command "'
        f"if (!(Test-Path {CUSTOM_DATA_FILE})) {{ throw 'no custom data: {CUSTOM_DATA_FILE}' }}; "
        f"Copy-Item {CUSTOM_DATA_FILE} {SETUP_SCRIPT} -Force; "
        f"& {SETUP_SCRIPT} -CSEResultFilePath {RESULT_FILE} *>> {LOG_FILE}; "
        f"if ((Get-Content {RESULT_FILE}) -ne '0') {{ throw (Get-Content {RESULT_FILE}) }}"
        '"'
    )


def runs_custom_data(extension: Mapping[str, object]) -> bool:
    """Whether an extension's properties (publisher, type and protected command) run a Windows VM's custom
    data the way `bootstrap_command` does."""
    protected = extension.get("protectedSettings")
    command = protected.get("commandToExecute") if isinstance(protected, Mapping) else None
    return (
        extension.get("publisher") == EXTENSION_PUBLISHER
        and extension.get("type") == EXTENSION_TYPE
        and isinstance(command, str)
        and "CustomData.bin" in command
    )


def extension_body(location: str, tags: Mapping[str, str]) -> dict[str, object]:
    """The CustomScriptExtension that runs a Windows node's bootstrap (its command carries no secret: the token
    is in the custom data)."""
    return {
        "location": location,
        "tags": dict(tags),
        "properties": {
            "publisher": EXTENSION_PUBLISHER,
            "type": EXTENSION_TYPE,
            "typeHandlerVersion": EXTENSION_VERSION,
            "autoUpgradeMinorVersion": True,
            "settings": {},
            "protectedSettings": {"commandToExecute": bootstrap_command()},
        },
    }


@dataclass(frozen=True, slots=True)
class WindowsAdmin:
    """A Windows node's admin account. `password` is sent to Azure, never shown (`repr` leaves it out)."""

    username: str
    password: str = field(repr=False)


def admin_from(secret: Mapping[str, str], where: str) -> WindowsAdmin:
    """The admin account of a `kubernetes.io/basic-auth` Secret's decoded data; `InvalidError` naming the Secret and
    the key, never the value, for what AKS would refuse."""
    username, password = secret.get("username", ""), secret.get("password", "")
    if not _USERNAME.match(username) or username.lower() in _RESERVED_USERNAMES:
        raise InvalidError(
            f"Secret {where}: data.username is missing, longer than 20 characters, or a name Azure reserves "
            "(administrator, admin, ...)",
            code="InvalidWindowsAdmin",
        )
    classes = sum(
        (
            any(c.islower() for c in password),
            any(c.isupper() for c in password),
            any(c.isdigit() for c in password),
            any(not c.isalnum() for c in password),
        )
    )
    if not MIN_PASSWORD_LENGTH <= len(password) <= MAX_PASSWORD_LENGTH or classes < 3:
        raise InvalidError(
            f"Secret {where}: data.password must be {MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH} characters with "
            "3 of: a lower-case letter, an upper-case letter, a digit, a special character",
            code="InvalidWindowsAdmin",
        )
    return WindowsAdmin(username, password)


class ClusterWindowsAdmin:
    """The Windows admin account from the operator's Secret, read once every `keep_seconds` for all launches."""

    def __init__(
        self, cluster: ClusterAPI, secret: str | None, keep_seconds: float = READS_KEPT_SECONDS
    ) -> None:
        self._where = parse_secret_reference(secret) if secret else None
        self._secret = Recent(lambda key: cluster.read_secret(*key), keep_seconds)

    async def __call__(self) -> WindowsAdmin:
        if self._where is None:
            raise InvalidError(
                "Windows nodes need an admin account: set NODEWRIGHT_WINDOWS_ADMIN_SECRET to <namespace>/<name> "
                "of a kubernetes.io/basic-auth Secret (keys username and password)",
                code="WindowsAdminNotSet",
            )
        where = "/".join(self._where)
        secret = await self._secret(self._where)
        if secret is None:
            raise TransientError(f"the Windows admin Secret {where} does not exist", code="SecretNotFound")
        return admin_from(secret.data, where)
