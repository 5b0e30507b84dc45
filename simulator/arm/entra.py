"""Microsoft Entra ID as far as the worker's credentials need it, served by the ARM emulator, and the bearer check
ARM makes with what it issued.

- `POST /{tenant}/oauth2/v2.0/token` (form-encoded, `grant_type=client_credentials`, `scope=<audience>/.default`)
  signs in an application registered with `Directory.register`: with its client secret (`client_secret`), with a
  client assertion signed by its certificate's private key (`client_assertion`, a JWT whose header names the
  certificate by its SHA-256 thumbprint, `x5t#S256`, and whose `aud` is this endpoint's URL), or with a federated
  token (a JWT of a federated credential's issuer, for its subject and audience `api://AzureADTokenExchange`, as
  AKS workload identity presents a projected ServiceAccount token), checked against the key its `kid` names in the
  JSON Web Key Set the issuer published (`Directory.publish_issuer`, as Entra ID reads an OIDC issuer's
  `jwks_uri`).
- `GET /metadata/identity/oauth2/token?api-version=...&resource=<audience>[&client_id=...]` with `Metadata: true`
  is IMDS's managed identity token, for an identity assigned with `Directory.assign_managed_identity`.

Each answers as Entra ID and IMDS do (`access_token`, `expires_in`, ...; errors with their `AADSTS` codes), for
the audience of the cloud the emulator plays (`ArmSettings.cloud`). Once anything is registered, ARM accepts only
the bearer tokens issued here for that audience (401 `InvalidAuthenticationToken` otherwise, or
`InvalidAuthenticationTokenAudience`). Every token request is recorded (`Directory.requests`) with the host it
was sent to, never with its secret or assertion.

`sign_jwt` makes the tokens a test's issuer (the cluster's OIDC issuer) would sign, and `jwks` the key set it would
publish; the keys are `cryptography`'s.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from core.clouds import AzureCloud

TOKEN_PATH = "/{tenant}/oauth2/v2.0/token"
IMDS_TOKEN_PATH = "/metadata/identity/oauth2/token"
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_LIFETIME_SECONDS = 3599


@dataclass(frozen=True, slots=True)
class Federation:
    """A federated identity credential: tokens of `issuer` for `subject` sign the application in."""

    issuer: str
    subject: str
    audience: str = TOKEN_EXCHANGE_AUDIENCE


@dataclass(frozen=True, slots=True)
class Application:
    """An application (service principal) of a tenant, with the credentials it may sign in with."""

    tenant_id: str
    client_id: str
    secret: str | None = field(default=None, repr=False)
    certificate: x509.Certificate | None = None
    federation: Federation | None = None


@dataclass(frozen=True, slots=True)
class Issued:
    client_id: str
    audience: str
    grant: str
    """`client_secret`, `client_certificate`, `federated_token` or `managed_identity`."""


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One token request as the emulator saw it (never its secret or assertion)."""

    host: str
    path: str
    client_id: str
    scope: str
    """The scope asked for (IMDS: the resource)."""
    grant: str
    status: int


class TokenError(Exception):
    def __init__(self, status: int, error: str, code: int, description: str) -> None:
        super().__init__(description)
        self.status, self.error, self.code, self.description = status, error, code, description

    def response(self) -> web.Response:
        return web.json_response(
            {
                "error": self.error,
                "error_description": f"AADSTS{self.code}: {self.description}",
                "error_codes": [self.code],
            },
            status=self.status,
        )


class Directory:
    """The tenants' applications and managed identities, the tokens issued to them, and the requests made."""

    def __init__(self, cloud: AzureCloud) -> None:
        self.cloud = cloud
        self.applications: dict[str, Application] = {}
        self.managed_identities: set[str] = set()
        """Client ids of the managed identities assigned to the node; `system` is the system-assigned one."""
        self.issued: dict[str, Issued] = {}
        self.requests: list[TokenRequest] = []
        self.issuer_keys: dict[str, dict[str, rsa.RSAPublicKey]] = {}
        """The OIDC issuers' signing keys by their key id, as each issuer's JWKS lists them."""

    @property
    def enforced(self) -> bool:
        """Whether ARM accepts only tokens issued here (once anything can sign in)."""
        return bool(self.applications or self.managed_identities)

    def register(self, application: Application) -> None:
        self.applications[application.client_id] = application

    def publish_issuer(self, issuer: str, key_set: Mapping[str, Any]) -> None:
        """What Entra ID reads from an OIDC issuer's discovery document: its JSON Web Key Set (RSA keys only)."""
        self.issuer_keys[issuer] = {
            str(key["kid"]): rsa.RSAPublicNumbers(_integer(key["e"]), _integer(key["n"])).public_key()
            for key in key_set.get("keys") or []
            if key.get("kty") == "RSA" and key.get("kid")
        }

    def assign_managed_identity(self, client_id: str | None = None) -> None:
        """Assign the node a user-assigned managed identity (`client_id`), or its system-assigned one."""
        self.managed_identities.add(client_id or "system")

    def check_bearer(self, token: str) -> tuple[str, str] | None:
        """ARM's check of a bearer token: None when it may call ARM, else the error code and message."""
        issued = self.issued.get(token)
        if issued is None:
            return "InvalidAuthenticationToken", "The access token is invalid."
        if issued.audience.rstrip("/") != self.cloud.audience:
            return (
                "InvalidAuthenticationTokenAudience",
                f"The access token has been obtained for wrong audience or resource '{issued.audience}'. It "
                f"should exactly match with one of the allowed audiences '{self.cloud.audience}/'.",
            )
        return None

    def routes(self) -> list[web.RouteDef]:
        return [web.post(TOKEN_PATH, self._token), web.get(IMDS_TOKEN_PATH, self._imds_token)]

    def _issue(self, client_id: str, audience: str, grant: str) -> str:
        token = secrets.token_urlsafe(32)
        self.issued[token] = Issued(client_id, audience, grant)
        return token

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        tenant = request.match_info["tenant"]
        client_id, scope = str(form.get("client_id", "")), str(form.get("scope", ""))
        grant = "unknown"
        try:
            application = self._application(tenant, client_id)
            if form.get("grant_type") != "client_credentials":
                raise TokenError(
                    400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type."
                )
            audience = self._audience(scope.removesuffix(".default"))
            grant = self._authenticate(application, form, f"https://{request.host}{request.path}")
        except TokenError as error:
            self.requests.append(
                TokenRequest(request.host, request.path, client_id, scope, grant, error.status)
            )
            return error.response()
        self.requests.append(TokenRequest(request.host, request.path, client_id, scope, grant, 200))
        token = self._issue(client_id, audience, grant)
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": TOKEN_LIFETIME_SECONDS,
                "ext_expires_in": TOKEN_LIFETIME_SECONDS,
                "access_token": token,
            }
        )

    def _application(self, tenant: str, client_id: str) -> Application:
        application = self.applications.get(client_id)
        if application is None or application.tenant_id != tenant:
            raise TokenError(
                400,
                "unauthorized_client",
                700016,
                f"Application with identifier '{client_id}' was not found in the directory '{tenant}'.",
            )
        return application

    def _audience(self, resource: str) -> str:
        if resource.rstrip("/") != self.cloud.audience:
            raise TokenError(
                400,
                "invalid_scope",
                500011,
                f"The resource principal named {resource} was not found in the tenant. ({self.cloud.name} "
                f"signs in for {self.cloud.audience})",
            )
        return resource

    def _authenticate(self, application: Application, form: Mapping[str, Any], token_url: str) -> str:
        secret = form.get("client_secret")
        assertion = form.get("client_assertion")
        if secret is not None:
            if application.secret is None or not secrets.compare_digest(str(secret), application.secret):
                raise TokenError(401, "invalid_client", 7000215, "Invalid client secret provided.")
            return "client_secret"
        if assertion is None or form.get("client_assertion_type") != JWT_BEARER:
            raise TokenError(
                401, "invalid_client", 7000218, "The request body must contain a client secret or assertion."
            )
        header, claims = _unverified(str(assertion))
        if "x5t#S256" in header or "x5t" in header:
            self._check_certificate_assertion(application, str(assertion), header, claims, token_url)
            return "client_certificate"
        self._check_federated_token(application, str(assertion), header, claims)
        return "federated_token"

    def _check_certificate_assertion(
        self,
        application: Application,
        assertion: str,
        header: Mapping[str, Any],
        claims: Mapping[str, Any],
        url: str,
    ) -> None:
        certificate = application.certificate
        presented = str(header.get("x5t#S256", "")).rstrip("=")
        if certificate is None or presented != thumbprint(certificate):
            raise TokenError(
                401,
                "invalid_client",
                700027,
                "The certificate with identifier used to sign the client assertion is not registered on application.",
            )
        public_key = certificate.public_key()
        assert isinstance(public_key, rsa.RSAPublicKey)
        if not verify_jwt(assertion, public_key):
            raise TokenError(401, "invalid_client", 700027, "Client assertion failed signature validation.")
        if (claims.get("aud"), claims.get("iss"), claims.get("sub")) != (
            url,
            application.client_id,
            application.client_id,
        ):
            raise TokenError(
                401,
                "invalid_client",
                700021,
                "Client assertion application identifier or audience does not match.",
            )
        _check_lifetime(claims)

    def _check_federated_token(
        self, application: Application, token: str, header: Mapping[str, Any], claims: Mapping[str, Any]
    ) -> None:
        federation = application.federation
        if federation is None or claims.get("iss") != federation.issuer:
            raise TokenError(401, "invalid_client", 700211, _no_federation("issuer", claims.get("iss")))
        keys = self.issuer_keys.get(federation.issuer)
        if keys is None:
            raise TokenError(
                401,
                "invalid_client",
                50166,
                f"Request to External OIDC endpoint failed: no key set published by '{federation.issuer}'.",
            )
        key = keys.get(str(header.get("kid")))
        if key is None or not verify_jwt(token, key):
            raise TokenError(401, "invalid_client", 700027, "Client assertion failed signature validation.")
        audiences = claims.get("aud")
        if federation.audience not in (audiences if isinstance(audiences, list) else [audiences]):
            raise TokenError(401, "invalid_client", 700212, _no_federation("audience", audiences))
        if claims.get("sub") != federation.subject:
            raise TokenError(401, "invalid_client", 700213, _no_federation("subject", claims.get("sub")))
        _check_lifetime(claims)

    async def _imds_token(self, request: web.Request) -> web.Response:
        resource = request.query.get("resource", "")
        wanted = request.query.get("client_id") or "system"
        problem: tuple[str, str] | None = None
        audience = ""
        if request.headers.get("Metadata", "").lower() != "true":
            problem = ("invalid_request", "Required metadata header not specified")
        elif wanted not in self.managed_identities:
            problem = ("invalid_request", "Identity not found")
        else:
            try:
                audience = self._audience(resource)
            except TokenError as error:
                problem = ("invalid_resource", error.description)
        status = 200 if problem is None else 400
        self.requests.append(
            TokenRequest(request.host, request.path, wanted, resource, "managed_identity", status)
        )
        if problem is not None:
            return web.json_response({"error": problem[0], "error_description": problem[1]}, status=status)
        now = int(time.time())
        token = self._issue(wanted, audience, "managed_identity")
        return web.json_response(
            {
                "access_token": token,
                "client_id": wanted,
                "expires_in": str(TOKEN_LIFETIME_SECONDS),
                "expires_on": str(now + TOKEN_LIFETIME_SECONDS),
                "ext_expires_in": str(TOKEN_LIFETIME_SECONDS),
                "not_before": str(now),
                "resource": resource,
                "token_type": "Bearer",
            }
        )


def _no_federation(claim: str, value: object) -> str:
    return f"No matching federated identity record found for presented assertion {claim} '{value}'."


def thumbprint(certificate: x509.Certificate) -> str:
    """The certificate's `x5t#S256`: the base64url SHA-256 of its DER form (unpadded; clients may pad it)."""
    digest = hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sign_jwt(claims: Mapping[str, Any], key: rsa.RSAPrivateKey, kid: str = "issuer-key") -> str:
    """An RS256 JWT of `claims` (what an OIDC issuer such as a cluster's signs)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = f"{_encode(header)}.{_encode(claims)}".encode()
    signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode()}.{_b64(signature)}"


def jwks(keys: Mapping[str, rsa.RSAPublicKey]) -> dict[str, Any]:
    """The JSON Web Key Set an issuer publishes for its RSA signing keys, by key id."""
    return {
        "keys": [
            {
                "kty": "RSA",
                "use": "sig",
                "alg": "RS256",
                "kid": kid,
                "n": _b64(_bytes(key.public_numbers().n)),
                "e": _b64(_bytes(key.public_numbers().e)),
            }
            for kid, key in keys.items()
        ]
    }


def verify_jwt(token: str, key: rsa.RSAPublicKey) -> bool:
    """Whether the JWT's signature (RS256 or PS256, as its header says) is the key's."""
    try:
        header_part, claims_part, signature_part = token.split(".")
        header = json.loads(_unb64(header_part))
        signature = _unb64(signature_part)
    except ValueError:
        return False
    signing_input = f"{header_part}.{claims_part}".encode()
    algorithm = header.get("alg")
    pad: padding.AsymmetricPadding
    if algorithm == "RS256":
        pad = padding.PKCS1v15()
    elif algorithm == "PS256":
        pad = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=hashes.SHA256.digest_size)
    else:
        return False
    try:
        key.verify(signature, signing_input, pad, hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        header_part, claims_part, _ = token.split(".")
        header, claims = json.loads(_unb64(header_part)), json.loads(_unb64(claims_part))
    except ValueError:
        raise TokenError(401, "invalid_client", 50027, "JWT token is invalid or malformed.") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError(401, "invalid_client", 50027, "JWT token is invalid or malformed.")
    return header, claims


def _check_lifetime(claims: Mapping[str, Any]) -> None:
    expires = claims.get("exp")
    if not isinstance(expires, int | float) or expires < time.time():
        raise TokenError(
            401, "invalid_client", 700024, "Client assertion is not within its valid time range."
        )


def _encode(value: Mapping[str, Any]) -> str:
    return _b64(json.dumps(value, separators=(",", ":")).encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _bytes(number: int) -> bytes:
    return number.to_bytes((number.bit_length() + 7) // 8, "big")


def _integer(text: str) -> int:
    """A JWK's base64url big-endian integer (`n`, `e`)."""
    return int.from_bytes(_unb64(text), "big")
