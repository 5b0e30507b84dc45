"""What the bootstrap token rotation's Temporal Schedule, its workflow (`workflows/bootstrap_tokens.py`) and its
two activities say to each other: one typed object per input and result. None carries a token's secret: a
token's id, generation and expiration are public (`core.bootstrap_tokens`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

ROTATE_BOOTSTRAP_TOKEN = "rotate_bootstrap_token"
"""The activity that deletes the stale tokens and creates the next generation (or finds the one it created)."""
DELETE_STALE_BOOTSTRAP_TOKENS = "delete_stale_bootstrap_tokens"
"""The activity that deletes the rotated tokens no joining node can use any more."""
ROTATION_PERIOD_SECONDS = 12 * 3600.0
"""Between rotations: half of kubeadm's 24-hour token lifetime, so each token is the newest for 12 hours and
valid for 12 more (a rotation that fails leaves half a day to notice)."""


class BootstrapTokenRotationInput(BaseModel):
    """The Schedule's action: one rotation of the cluster's bootstrap token."""

    cluster: str
    period_seconds: float = Field(default=ROTATION_PERIOD_SECONDS, gt=0)
    """The Schedule's interval, which sets the new token's lifetime (`core.bootstrap_tokens.token_lifetime`)."""
    grace_seconds: float = Field(ge=0)
    """How long a replaced token stays for nodes still joining with it (`activities.bootstrap_tokens
    .rotation_grace`: launch timeout, registration TTL and the launches' read cache)."""
    activity_timeout_seconds: float = 60.0


class RotateInput(BaseModel):
    cluster: str
    rotation: str
    """The rotation (its workflow run id), recorded on the token it creates: a retry finds it there."""
    lifetime_seconds: float
    grace_seconds: float


class TokenRecord(BaseModel):
    """A bootstrap token's public facts, as a workflow's history shows them."""

    token_id: str
    generation: int
    secret: str
    """`<namespace>/<name>` of its Secret."""
    expiration: datetime | None = None


class RotateResult(BaseModel):
    """What one attempt at a rotation did: the token it created (or an earlier attempt did), or how long it must
    wait for the id the next generation takes; and the stale tokens it deleted on the way."""

    token: TokenRecord | None = None
    created: bool = False
    """Whether this attempt created `token` (False: an earlier attempt of the same rotation had)."""
    wait_seconds: float | None = None
    deleted: list[str] = Field(default_factory=list)
    reason: str = ""


class DeleteStaleInput(BaseModel):
    cluster: str
    grace_seconds: float


class DeleteStaleResult(BaseModel):
    deleted: list[str] = Field(default_factory=list)
    """`<namespace>/<name>` of each token Secret deleted."""
    newest: TokenRecord | None = None
    """The token launches join with now."""


class BootstrapTokenRotationResult(BaseModel):
    """A rotation's outcome: the token it made, and the tokens deleted by the time it ended."""

    token: TokenRecord
    deleted: list[str] = Field(default_factory=list)
