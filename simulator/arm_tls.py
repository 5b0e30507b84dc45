"""TLS for the ARM emulator: a throw-away certificate authority, a server certificate it signs, and the CA's
PEM file that clients trust.

azure-core refuses to send a bearer token over plain HTTP, so the emulator serves HTTPS. Clients verify it
properly against the CA file (`connection_verify=<ca.pem>` on the Azure SDK clients): nothing is switched off.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

CA_FILE_NAME = "arm-emulator-ca.pem"
DEFAULT_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """What an HTTPS server needs (its context) and what its clients need (the CA file to trust)."""

    ca_pem: Path
    server_context: ssl.SSLContext


def server_tls(directory: Path, hosts: tuple[str, ...] = DEFAULT_HOSTS) -> ServerTLS:
    """A new CA whose PEM is written to `directory`, and a server context with a certificate for `hosts`."""
    ca = trustme.CA(organization_name="nodewright ARM emulator")
    directory.mkdir(parents=True, exist_ok=True)
    ca_pem = directory / CA_FILE_NAME
    ca.cert_pem.write_to_path(str(ca_pem))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hosts).configure_cert(context)
    return ServerTLS(ca_pem=ca_pem, server_context=context)
