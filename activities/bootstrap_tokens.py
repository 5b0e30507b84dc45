"""The cluster's bootstrap tokens as Kubernetes holds them: how a launch finds the token it joins with, and the
rotation's two activities, which create the next token and delete the ones no joining node can use any more.

Every token Secret is read by name (the configured one, and the three of `core.bootstrap_tokens
.ROTATED_TOKEN_IDS`): the chart's RBAC lets nodewright get and delete those names and nothing else in kube-system,
and create Secrets there (which RBAC cannot limit to a name). A rotated token copies what the newest token may be
used for and the groups it joins as (`usage-bootstrap-*`, `auth-extra-groups`: on AKS, those AKS put on its own
token), and gets a fresh random secret; its Secret records its generation and the rotation that made it, so a
retried rotation finds it instead of making another.

Each token created or deleted is an event on its Secret (`BootstrapTokenRotated`, `BootstrapTokenDeleted`) and a
count (`nodewright_bootstrap_token_rotations_total`); the newest token's expiration is a gauge. A token's secret
stays in the Secret and in the rendered custom data: no result, error, log line or event names it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from temporalio import activity

from activities.kube import kube_event
from activities.metrics import Metrics, default_metrics
from activities.recent import READS_KEPT_SECONDS
from core.api.kube import Event, Secret
from core.bootstrap_token_messages import (
    DELETE_STALE_BOOTSTRAP_TOKENS,
    ROTATE_BOOTSTRAP_TOKEN,
    DeleteStaleInput,
    DeleteStaleResult,
    RotateInput,
    RotateResult,
    TokenRecord,
)
from core.bootstrap_tokens import (
    GENERATION_LABEL,
    KUBEADM_USAGES,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAMESPACE,
    ROTATED_TOKEN_IDS,
    ROTATION_ANNOTATION,
    USAGE_KEYS,
    Stale,
    TokenFacts,
    newest,
    plan_rotation,
    secret_name,
    stale_tokens,
)
from core.errors import ConflictError, InvalidError, TransientError

logger = logging.getLogger("nodewright.bootstrap")

ROTATED = "BootstrapTokenRotated"
DELETED = "BootstrapTokenDeleted"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")
_TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")
_TOKEN_SECRET = re.compile(r"^[a-z0-9]{16}$")
_ALPHABET = string.ascii_lowercase + string.digits

SecretReader = Callable[[tuple[str, str]], Awaitable[Secret | None]]
"""Reads the Secret (namespace, name): the cluster's, or a cache of its reads."""


def rotation_grace(registration_ttl_seconds: float, launch_timeout_seconds: float) -> float:
    """How long a replaced token must stay (seconds): a launch that read it a moment before it was replaced (or
    from the launches' read cache) may take the launch timeout to create its VM, whose node then has the
    registration TTL to join; after that its NodeClaim is deleted anyway."""
    return launch_timeout_seconds + registration_ttl_seconds + READS_KEPT_SECONDS


def parse_secret_reference(value: str) -> tuple[str, str]:
    """`<namespace>/<name>` as a pair; ValueError says what is wrong."""
    if not _SECRET_NAME.match(value):
        raise ValueError(f"{value!r} is not <namespace>/<name>, e.g. kube-system/bootstrap-token-abcdef")
    namespace, _, name = value.partition("/")
    return namespace, name


def token_from(secret: Mapping[str, str], where: str) -> str:
    """`<token-id>.<token-secret>` from a bootstrap token Secret's decoded data; `InvalidError` naming the key."""
    token_id, token_secret = secret.get("token-id", ""), secret.get("token-secret", "")
    if not _TOKEN_ID.match(token_id):
        raise InvalidError(f"Secret {where}: data.token-id is missing or not 6 of [a-z0-9]", code="Invalid")
    if not _TOKEN_SECRET.match(token_secret):
        raise InvalidError(
            f"Secret {where}: data.token-secret is missing or not 16 of [a-z0-9]", code="Invalid"
        )
    return f"{token_id}.{token_secret}"


def _expiration(data: Mapping[str, str], where: str) -> datetime | None:
    text = data.get("expiration")
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        # The API server holds such a token invalid, as a launch must.
        raise InvalidError(
            f"Secret {where}: data.expiration is not an RFC 3339 time", code="Invalid"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class HeldToken:
    """A token as its Secret holds it: the public facts, and the token itself (never shown)."""

    facts: TokenFacts
    where: str
    """`<namespace>/<name>` of its Secret."""
    uid: str
    usages: dict[str, str]
    value: str = field(repr=False)

    def record(self) -> TokenRecord:
        return TokenRecord(
            token_id=self.facts.token_id,
            generation=self.facts.generation,
            secret=self.where,
            expiration=self.facts.expiration,
        )


def held_token(secret: Secret, generation: int) -> HeldToken:
    where = f"{secret.metadata.namespace}/{secret.metadata.name}"
    value = token_from(secret.data, where)
    facts = TokenFacts(
        token_id=value.partition(".")[0],
        generation=generation,
        created=secret.metadata.creation_timestamp,
        expiration=_expiration(secret.data, where),
        rotation=secret.metadata.annotations.get(ROTATION_ANNOTATION, ""),
    )
    usages = {key: secret.data[key] for key in USAGE_KEYS if key in secret.data}
    return HeldToken(facts, where, secret.metadata.uid, usages, value)


def _generation(secret: Secret) -> int | None:
    """A rotated token's generation; None for a Secret nodewright did not make."""
    metadata = secret.metadata
    text = metadata.labels.get(GENERATION_LABEL, "")
    if metadata.labels.get(MANAGED_BY_LABEL) != MANAGED_BY or not text.isdigit() or int(text) < 1:
        return None
    return int(text)


async def read_tokens(read: SecretReader, seed: tuple[str, str], rotated: bool = True) -> list[HeldToken]:
    """The configured token (generation 0) if its Secret exists, and with `rotated` every rotated token (a Secret
    of a rotated token's name that nodewright did not make is left out: creating there fails, naming it)."""
    names = [seed, *((NAMESPACE, secret_name(token_id)) for token_id in ROTATED_TOKEN_IDS if rotated)]
    found = await asyncio.gather(*(read(name) for name in names))
    tokens = []
    for index, secret in enumerate(found):
        if secret is None:
            continue
        generation = 0 if index == 0 else _generation(secret)
        if generation is not None:
            tokens.append(held_token(secret, generation))
    return tokens


def launch_token(tokens: Sequence[HeldToken], now: datetime, seed: str) -> HeldToken:
    """The token a launch joins with: the newest that has not expired. `TransientError` (the launch is retried,
    and succeeds once a valid token exists) when there is none, naming the Secrets and why."""
    current = newest([token.facts for token in tokens], now)
    if current is not None:
        return next(token for token in tokens if token.facts == current)
    if not tokens:
        raise TransientError(f"the bootstrap token Secret {seed} does not exist", code="SecretNotFound")
    expired = ", ".join(
        f"{token.where} expired at {token.facts.expiration:%Y-%m-%dT%H:%M:%SZ}"
        for token in tokens
        if token.facts.expiration is not None
    )
    raise TransientError(f"no bootstrap token is valid: {expired}", code="TokenExpired")


def _random_secret() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(16))


def token_manifest(token: TokenFacts, usages: Mapping[str, str], value: str) -> dict[str, Any]:
    """The Secret of a rotated token, as kubeadm writes one (`stringData`), with its generation and rotation."""
    assert token.expiration is not None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token.name,
            "namespace": NAMESPACE,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, GENERATION_LABEL: str(token.generation)},
            "annotations": {ROTATION_ANNOTATION: token.rotation},
        },
        "type": TOKEN_TYPE,
        "stringData": {
            "description": f"nodewright's node bootstrap token, generation {token.generation}",
            "token-id": token.token_id,
            "token-secret": value,
            "expiration": token.expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            **usages,
        },
    }


class TokenCluster(Protocol):
    """What the rotation needs of the Kubernetes API (`KubernetesCluster` has it)."""

    async def read_secret(self, namespace: str, name: str) -> Secret | None: ...

    async def create_secret(self, secret: Mapping[str, Any]) -> Secret: ...

    async def delete_secret(self, namespace: str, name: str, uid: str) -> bool: ...

    async def record_event(self, event: Event) -> None: ...


class BootstrapTokenActivities:
    """The rotation's activities for the cluster whose configured token Secret is `seed` (`<namespace>/<name>`)."""

    def __init__(
        self,
        cluster: TokenCluster,
        seed: str,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cluster = cluster
        self.seed = seed
        self._seed = parse_secret_reference(seed)
        self.metrics = metrics or default_metrics()
        self.clock = clock

    async def tokens(self) -> list[HeldToken]:
        return await read_tokens(lambda key: self.cluster.read_secret(*key), self._seed)

    @activity.defn(name=ROTATE_BOOTSTRAP_TOKEN)
    async def rotate_bootstrap_token(self, request: RotateInput) -> RotateResult:
        """Delete the stale tokens, then create the next generation, unless this rotation made it already or the
        id it takes is still in use (then say how long to wait)."""
        tokens = await self.tokens()
        now = self.clock()
        grace = timedelta(seconds=request.grace_seconds)
        lifetime = timedelta(seconds=request.lifetime_seconds)
        plan = plan_rotation([token.facts for token in tokens], request.rotation, now, lifetime, grace)
        deleted = await self._delete(plan.delete, tokens)
        if plan.made is not None:
            made = next(token for token in tokens if token.facts == plan.made)
            self._expires(made.facts)
            return RotateResult(token=made.record(), deleted=deleted, reason=plan.reason)
        if plan.create is None:
            assert plan.wait_until is not None
            wait = (plan.wait_until - now).total_seconds()
            logger.info("bootstrap token rotation waits %.0f s: %s", wait, plan.reason)
            return RotateResult(wait_seconds=wait, deleted=deleted, reason=plan.reason)
        token = plan.create
        current = newest([held.facts for held in tokens], now)
        usages = next((held.usages for held in tokens if held.facts == current), None) or KUBEADM_USAGES
        try:
            created = await self.cluster.create_secret(token_manifest(token, usages, _random_secret()))
        except ConflictError:
            # Another rotation, or a Secret nodewright did not make: read again at the retry.
            raise TransientError(
                f"the bootstrap token Secret {NAMESPACE}/{token.name} exists already (not made by this rotation)",
                code="AlreadyExists",
            ) from None
        self.metrics.bootstrap_token_rotations.inc()
        self._expires(token)
        where = f"{NAMESPACE}/{token.name}"
        superseded = f"; {current.name} stays for nodes still joining with it" if current else ""
        message = (
            f"Created bootstrap token {token.token_id} (generation {token.generation}), valid until "
            f"{token.expiration:%Y-%m-%dT%H:%M:%SZ}: new nodes join with it{superseded}"
        )
        await self.cluster.record_event(
            kube_event("Secret", token.name, ROTATED, message, NAMESPACE, uid=created.metadata.uid)
        )
        logger.info("rotated the bootstrap token: %s", message)
        record = TokenRecord(
            token_id=token.token_id, generation=token.generation, secret=where, expiration=token.expiration
        )
        return RotateResult(token=record, created=True, deleted=deleted, reason=plan.reason)

    @activity.defn(name=DELETE_STALE_BOOTSTRAP_TOKENS)
    async def delete_stale_bootstrap_tokens(self, request: DeleteStaleInput) -> DeleteStaleResult:
        """Delete the rotated tokens no joining node can use any more."""
        tokens = await self.tokens()
        now = self.clock()
        facts = [token.facts for token in tokens]
        deleted = await self._delete(
            stale_tokens(facts, now, timedelta(seconds=request.grace_seconds)), tokens
        )
        current = newest(facts, now)
        if current is not None:
            self._expires(current)
        held = next((token for token in tokens if token.facts == current), None)
        return DeleteStaleResult(deleted=deleted, newest=held.record() if held else None)

    async def _delete(self, stale: Sequence[Stale], tokens: Sequence[HeldToken]) -> list[str]:
        """Delete each stale token's Secret if it is still the one read (a token made since in its place stays)."""
        deleted = []
        for item in stale:
            held = next(token for token in tokens if token.facts == item.token)
            if not await self.cluster.delete_secret(NAMESPACE, item.token.name, held.uid):
                continue
            deleted.append(held.where)
            message = f"Deleted bootstrap token {item.token.token_id} (generation {item.token.generation}): {item.reason}"
            await self.cluster.record_event(
                kube_event("Secret", item.token.name, DELETED, message, NAMESPACE, uid=held.uid)
            )
            logger.info("%s", message)
        return deleted

    def _expires(self, token: TokenFacts) -> None:
        expiration = token.expiration
        self.metrics.bootstrap_token_expiration.set(
            float("inf") if expiration is None else expiration.timestamp()
        )
