"""Just enough of a Kubernetes API client for what runs on a node: a few REST calls over HTTPS, verified against
the cluster CA, as a bearer token (a bootstrap token, an add-on's token) or a client certificate (the node's
own, from TLS bootstrap).

A node image carries no Kubernetes client library, and the node agent must speak as the node itself, so this
is plain aiohttp. Errors are `KubeApiError` with the HTTP status and the `Status` reason and message the API
server sent; `retrying` repeats a call on the transient ones (connection failures, 429, 5xx) a bounded number
of times with jittered backoff. Nothing here logs a request, and error messages never carry a credential.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote

import aiohttp
import yaml
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

Json = dict[str, Any]
T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
USER_AGENT = "nodewright-node-agent"
"""The API server names the field manager of a write after it (`metadata.managedFields[].manager`)."""


class KubeApiError(Exception):
    """An API server's refusal (`status` >= 400) or a request that got no answer (`status` 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth trying again: no answer, throttled, or a server error."""
        return self.status == 0 or self.status == 429 or self.status >= 500


@dataclass(frozen=True, slots=True)
class KubeCredential:
    """Where the API server is, the CA that signs its certificate, and who to be: a bearer token or a client
    certificate and key (files)."""

    server: str
    ca_pem: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    cert_file: Path | None = None
    key_file: Path | None = None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca_pem)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def load_kubeconfig(path: Path) -> KubeCredential:
    """The current context of a kubeconfig file: the server, its CA (inline or a file), and a token or a client
    certificate and key given as files."""
    config = yaml.safe_load(path.read_text()) or {}
    contexts = {item["name"]: item.get("context") or {} for item in config.get("contexts") or []}
    context = contexts.get(config.get("current-context", ""))
    if context is None:
        raise ValueError(f"{path}: no current context")
    clusters = {item["name"]: item.get("cluster") or {} for item in config.get("clusters") or []}
    users = {item["name"]: item.get("user") or {} for item in config.get("users") or []}
    cluster, user = clusters.get(context.get("cluster", "")), users.get(context.get("user", ""), {})
    if cluster is None or not cluster.get("server"):
        raise ValueError(f"{path}: the current context names no cluster with a server")
    if "certificate-authority-data" in cluster:
        ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
    elif "certificate-authority" in cluster:
        ca_pem = (path.parent / cluster["certificate-authority"]).read_text()
    else:
        raise ValueError(f"{path}: the cluster has no certificate authority")
    token = user.get("token")
    if token is None and "tokenFile" in user:
        token = (path.parent / user["tokenFile"]).read_text().strip()
    cert, key = user.get("client-certificate"), user.get("client-key")
    if token is None and (cert is None or key is None):
        raise ValueError(f"{path}: the user has neither a token nor a client certificate file and key file")
    return KubeCredential(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=ca_pem,
        token=token,
        cert_file=path.parent / cert if token is None and cert else None,
        key_file=path.parent / key if token is None and key else None,
    )


class KubeApi:
    """REST calls to one API server as one identity. Close it when done (or use it as an async context
    manager)."""

    def __init__(
        self,
        credential: KubeCredential,
        timeout: timedelta = timedelta(seconds=10),
        user_agent: str = USER_AGENT,
    ) -> None:
        self.credential = credential
        self.user_agent = user_agent
        self._timeout = aiohttp.ClientTimeout(total=timeout.total_seconds())
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        # Made on first use, inside the event loop that uses it.
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self.credential.ssl_context())
            headers = {"User-Agent": self.user_agent, **self.credential.headers()}
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=headers)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Json:
        """One call; the JSON answer (of a JSON media type `accept` names), or `KubeApiError`."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": accept}
        try:
            async with self._http().request(
                method, self.credential.server + path, data=data, headers=headers
            ) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise KubeApiError(0, type(error).__name__, str(error) or "no answer") from None
        try:
            answer = json.loads(raw) if raw.strip() else {}
        except ValueError:
            answer = {}
        if status >= 400:
            details = answer if isinstance(answer, dict) else {}
            raise KubeApiError(
                status,
                str(details.get("reason") or "Error"),
                str(details.get("message") or raw[:200].decode(errors="replace") or f"HTTP {status}"),
            )
        return answer if isinstance(answer, dict) else {"value": answer}

    async def get(self, path: str) -> Json | None:
        """The object, or None when it does not exist."""
        try:
            return await self.request("GET", path)
        except KubeApiError as error:
            if error.status == 404:
                return None
            raise

    async def create(self, path: str, body: Mapping[str, Any]) -> Json:
        return await self.request("POST", path, body)

    async def watch(self, path: str, params: Mapping[str, str], seconds: float) -> AsyncIterator[Json]:
        """The events of a watch of `path` (a collection) with these parameters, for at most `seconds`, as a
        kubelet watches its own Node; ends when the server ends it. `KubeApiError` if it cannot start."""
        query = {**params, "watch": "true", "timeoutSeconds": str(max(1, int(seconds)))}
        timeout = aiohttp.ClientTimeout(total=seconds + 5)
        try:
            async with self._http().get(
                self.credential.server + path, params=query, timeout=timeout
            ) as response:
                if response.status >= 400:
                    raise KubeApiError(response.status, "Error", f"watch of {path}: HTTP {response.status}")
                async for line in response.content:
                    if line.strip():
                        yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError) as error:
            raise KubeApiError(0, type(error).__name__, str(error) or "no answer") from None

    async def patch(self, path: str, body: Mapping[str, Any], content_type: str = MERGE_PATCH) -> Json:
        return await self.request("PATCH", path, body, content_type=content_type)


def node_path(name: str, subresource: str = "") -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}" + (f"/{subresource}" if subresource else "")


async def retrying(call: Callable[[], Awaitable[T]], attempts: int, max_wait: timedelta) -> T:
    """`call()`, again after transient errors (jittered exponential backoff up to `max_wait`), at most
    `attempts` times; the last error is raised."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(lambda error: isinstance(error, KubeApiError) and error.transient),
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_random_exponential(multiplier=0.05, max=max_wait.total_seconds()),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity either returns or raises")
