"""A bearer token credential for the async Azure SDK clients that talk to the emulator (azure-core ships none)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from azure.core.credentials import AccessToken, AccessTokenInfo, TokenRequestOptions

DEFAULT_TOKEN = "arm-emulator-token"


class StaticTokenCredential:
    """An async token credential that always hands out the same bearer token (azure-core ships none).

    Works with every async Azure SDK client; `scopes` records what the clients asked for.
    """

    def __init__(self, token: str = DEFAULT_TOKEN, lifetime: timedelta = timedelta(hours=1)) -> None:
        self.token = token
        self.lifetime = lifetime
        self.scopes: list[str] = []
        self.closed = False

    def _expires_on(self) -> int:
        return int(time.time() + self.lifetime.total_seconds())

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.scopes.extend(scopes)
        return AccessToken(self.token, self._expires_on())

    async def get_token_info(
        self, *scopes: str, options: TokenRequestOptions | None = None
    ) -> AccessTokenInfo:
        self.scopes.extend(scopes)
        return AccessTokenInfo(self.token, self._expires_on())

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> StaticTokenCredential:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
