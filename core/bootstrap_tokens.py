"""Bootstrap token rotation, decided: which token a launch joins with, what a rotation creates, and when an old
token may go.

A new node joins the cluster by TLS bootstrap with the token its VM's custom data carries. The token Secret the
cluster is configured with (`NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET`) is generation 0; each rotation adds the next
generation as `kube-system/bootstrap-token-<id>`, its id one of the fixed `ROTATED_TOKEN_IDS` (so that the
chart's RBAC can name every Secret nodewright reads or deletes: RBAC matches names, never labels or prefixes).
A launch joins with the newest token that has not expired. A token stops being the newest when a newer one is
made; a VM launched a moment before still has to finish its TLS bootstrap with it, for up to the grace
(`rotation_grace`: the launch timeout, the registration TTL and the launches' read cache), so only then may it
go. The configured token is never deleted: it is the user's (on AKS, AKS's own), and other node pools may use it.

Everything here is public: a token's id (Kubernetes calls it public), generation and times. Its secret never
enters this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

NAMESPACE = "kube-system"
"""Where the API server's bootstrap token authenticator reads token Secrets."""
ROTATED_TOKEN_IDS = ("nwrot0", "nwrot1", "nwrot2")
"""The ids of rotated tokens, in turn by generation. Three: with a period at least the grace (the default), a
rotation finds the slot it takes free; a rotation triggered by hand while two are in use waits for the oldest."""
GENERATION_LABEL = "nodewright.io/bootstrap-token-generation"
"""On a rotated token's Secret: its generation (`kubectl get secrets -L` shows it)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "nodewright"
ROTATION_ANNOTATION = "nodewright.io/bootstrap-token-rotation"
"""On a rotated token's Secret: the rotation (workflow run) that made it, so a retried rotation finds its token."""
USAGE_KEYS = ("usage-bootstrap-authentication", "usage-bootstrap-signing", "auth-extra-groups")
"""What a rotated token copies from the newest token: what it may be used for, and the groups it joins as."""
KUBEADM_USAGES = {
    "usage-bootstrap-authentication": "true",
    "usage-bootstrap-signing": "true",
    "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
}
"""What kubeadm puts on a node bootstrap token (`kubeadm token create`), for a rotation with no token to copy."""


def secret_name(token_id: str) -> str:
    """The name the bootstrap token authenticator requires of a token's Secret."""
    return f"bootstrap-token-{token_id}"


def rotated_id(generation: int) -> str:
    """The id a rotated token of this generation (1 and up) takes."""
    return ROTATED_TOKEN_IDS[generation % len(ROTATED_TOKEN_IDS)]


def token_lifetime(period: timedelta, grace: timedelta) -> timedelta:
    """How long a rotated token is valid: two rotation periods (kubeadm's 24 hours at the default 12), and at
    least one period plus the grace, so that a token outlives its time as the newest and the nodes joining with
    it even when the rotation after it fails."""
    return period + max(period, grace)


@dataclass(frozen=True, slots=True)
class TokenFacts:
    """A bootstrap token's public facts."""

    token_id: str
    generation: int
    """0 for the configured token; 1 and up for rotated ones."""
    created: datetime | None = None
    expiration: datetime | None = None
    """None: it never expires."""
    rotation: str = ""
    """The rotation that made it (empty for the configured token)."""

    @property
    def name(self) -> str:
        return secret_name(self.token_id)

    def expired(self, now: datetime) -> bool:
        return self.expiration is not None and self.expiration <= now


def newest(tokens: Iterable[TokenFacts], now: datetime) -> TokenFacts | None:
    """The token a launch joins with: the highest generation that has not expired (None: no valid token)."""
    return max(
        (token for token in tokens if not token.expired(now)), key=lambda t: t.generation, default=None
    )


def superseded_at(token: TokenFacts, tokens: Iterable[TokenFacts]) -> datetime | None:
    """When a newer token was first made (launches read the newer one from then on), or None."""
    return min(
        (t.created for t in tokens if t.generation > token.generation and t.created is not None),
        default=None,
    )


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Stale:
    """A rotated token no launch or joining node can use any more, and why."""

    token: TokenFacts
    reason: str


def stale_tokens(tokens: Sequence[TokenFacts], now: datetime, grace: timedelta) -> list[Stale]:
    """The rotated tokens that may be deleted now: expired, or superseded for longer than the grace. The newest
    valid token and the configured one stay."""
    current = newest(tokens, now)
    found = []
    for token in tokens:
        if token.generation == 0 or token == current:
            continue
        since = superseded_at(token, tokens)
        if token.expired(now):
            assert token.expiration is not None
            found.append(Stale(token, f"it expired at {_iso(token.expiration)}"))
        elif since is not None and since + grace <= now:
            found.append(
                Stale(
                    token,
                    f"a newer token replaced it at {_iso(since)}, and the {grace.total_seconds():g} s that a node "
                    "launched with it has to join have passed",
                )
            )
    return found


def in_use_until(token: TokenFacts, tokens: Sequence[TokenFacts], grace: timedelta) -> datetime | None:
    """Until when a node may still join with the token: its expiration, or the grace after a newer token replaced
    it, whichever comes first (None: the newest, never expiring)."""
    since = superseded_at(token, tokens)
    ends = [moment for moment in (since + grace if since else None, token.expiration) if moment is not None]
    return min(ends, default=None)


@dataclass(frozen=True, slots=True)
class RotationPlan:
    """What one rotation does now: delete the stale tokens, then create the next one (`create`), or find the one
    an earlier attempt of the same rotation created (`made`), or wait until the slot the next one takes is free
    (`wait_until`)."""

    delete: tuple[Stale, ...]
    create: TokenFacts | None = None
    made: TokenFacts | None = None
    wait_until: datetime | None = None
    reason: str = ""


def plan_rotation(
    tokens: Sequence[TokenFacts], rotation: str, now: datetime, lifetime: timedelta, grace: timedelta
) -> RotationPlan:
    """The rotation `rotation` at `now`, given every token that exists (the configured one and the rotated ones)."""
    stale = tuple(stale_tokens(tokens, now, grace))
    made = next((token for token in tokens if rotation and token.rotation == rotation), None)
    if made is not None:
        return RotationPlan(stale, made=made, reason=f"this rotation made {made.name} already")
    generation = max((token.generation for token in tokens), default=0) + 1
    token_id = rotated_id(generation)
    going = {item.token for item in stale}
    occupant = next(
        (t for t in tokens if t.generation > 0 and t.token_id == token_id and t not in going),
        None,
    )
    if occupant is not None:
        until = in_use_until(occupant, tokens, grace)
        assert until is not None, "a rotated token that is not the newest was superseded"
        return RotationPlan(
            stale,
            wait_until=until,
            reason=f"{occupant.name} (generation {occupant.generation}) may be in use by joining nodes until "
            f"{_iso(until)}; generation {generation} takes its id then",
        )
    token = TokenFacts(token_id, generation, now, now + lifetime, rotation)
    return RotationPlan(
        stale,
        create=token,
        reason=f"generation {generation} as {token.name}, valid until {_iso(now + lifetime)}",
    )
