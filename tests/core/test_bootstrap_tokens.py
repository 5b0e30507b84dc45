"""Bootstrap token rotation's decisions: the newest valid token is the one launches join with, a rotation makes
the next generation in its turn (once, however often it is retried), and an old token goes only once no node
launched with it can still be joining; over any sequence of rotations, no token a launch read is deleted within
the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from core.bootstrap_tokens import (
    ROTATED_TOKEN_IDS,
    TokenFacts,
    newest,
    plan_rotation,
    rotated_id,
    stale_tokens,
    token_lifetime,
)

T0 = datetime(2026, 5, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
GRACE = timedelta(minutes=20)
LIFETIME = token_lifetime(12 * HOUR, GRACE)
SEED = TokenFacts("abcdef", 0, created=T0 - HOUR)


def rotated(generation: int, created: datetime, rotation: str = "") -> TokenFacts:
    return TokenFacts(
        rotated_id(generation), generation, created, created + LIFETIME, rotation or f"r{generation}"
    )


def test_a_token_lives_two_periods_and_at_least_a_period_and_the_grace() -> None:
    assert token_lifetime(12 * HOUR, GRACE) == 24 * HOUR, "kubeadm's 24 h at the default period"
    assert token_lifetime(timedelta(minutes=5), GRACE) == timedelta(minutes=25)


def test_launches_join_with_the_newest_token_that_has_not_expired() -> None:
    first, second = rotated(1, T0), rotated(2, T0 + 12 * HOUR)
    assert newest([SEED], T0) == SEED
    assert newest([SEED, first, second], T0 + 13 * HOUR) == second
    assert newest([SEED, first], T0 + LIFETIME) == SEED, "the rotated one expired: the configured one is left"
    expired_seed = TokenFacts("abcdef", 0, expiration=T0)
    assert newest([expired_seed], T0) is None


def test_the_first_rotation_makes_generation_1_from_the_configured_token() -> None:
    plan = plan_rotation([SEED], "run-a", T0, LIFETIME, GRACE)
    assert plan.create == TokenFacts("nwrot1", 1, T0, T0 + 24 * HOUR, "run-a")
    assert plan.delete == () and plan.wait_until is None and plan.made is None


def test_a_retried_rotation_finds_the_token_it_made_instead_of_making_another() -> None:
    made = rotated(1, T0, "run-a")
    plan = plan_rotation([SEED, made], "run-a", T0 + timedelta(seconds=5), LIFETIME, GRACE)
    assert plan.made == made and plan.create is None
    assert plan_rotation([SEED, made], "run-b", T0, LIFETIME, GRACE).create == TokenFacts(
        "nwrot2", 2, T0, T0 + LIFETIME, "run-b"
    )


def test_an_old_token_goes_only_once_the_grace_after_its_replacement_passed_and_the_seed_never() -> None:
    first, second = rotated(1, T0), rotated(2, T0 + HOUR)
    tokens = [SEED, first, second]
    assert stale_tokens(tokens, T0 + HOUR + GRACE - timedelta(seconds=1), GRACE) == []
    [stale] = stale_tokens(tokens, T0 + HOUR + GRACE, GRACE)
    assert stale.token == first and "replaced it at 2026-05-01T01:00:00Z" in stale.reason
    assert [s.token for s in stale_tokens(tokens, T0 + 24 * HOUR, GRACE)] == [first]
    assert [s.token for s in stale_tokens(tokens, T0 + 26 * HOUR, GRACE)] == [first, second], (
        "both expired; the configured one stays"
    )


def test_an_expired_token_goes_at_once() -> None:
    first, second = rotated(1, T0), rotated(2, T0 + LIFETIME - timedelta(seconds=1))
    [stale] = stale_tokens([SEED, first, second], T0 + LIFETIME, GRACE)
    assert stale.token == first and stale.reason == "it expired at 2026-05-02T00:00:00Z"


def test_a_rotation_waits_while_the_id_it_takes_is_still_in_use() -> None:
    tokens = [
        SEED,
        rotated(1, T0),
        rotated(2, T0 + timedelta(minutes=1)),
        rotated(3, T0 + timedelta(minutes=2)),
    ]
    now = T0 + timedelta(minutes=3)
    plan = plan_rotation(tokens, "run-4", now, LIFETIME, GRACE)
    assert plan.create is None and plan.wait_until == T0 + timedelta(minutes=1) + GRACE, (
        "generation 4 takes nwrot1, where generation 1 may serve joining nodes until the grace after generation 2"
    )
    later = plan_rotation(tokens, "run-4", plan.wait_until, LIFETIME, GRACE)
    assert [s.token.generation for s in later.delete] == [1]
    assert later.create is not None and later.create.token_id == "nwrot1" and later.create.generation == 4


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=90), min_size=1, max_size=12),
    reads=st.lists(st.integers(min_value=0, max_value=900), max_size=20),
)
def test_no_token_a_launch_read_is_deleted_within_the_grace(gaps: list[int], reads: list[int]) -> None:
    """Rotations every 0 to 90 minutes (a 60-minute period, with triggers by hand), each run planned until it
    creates, and launches reading the newest token at any minute: a token is deleted only the grace after the
    last read of it, and no two existing tokens share an id."""
    period, grace = timedelta(minutes=60), timedelta(minutes=20)
    lifetime = token_lifetime(period, grace)
    tokens = [SEED]
    deleted: dict[TokenFacts, datetime] = {}
    last_read: dict[TokenFacts, datetime] = {}
    moments = sorted(
        [(T0 + timedelta(minutes=sum(gaps[: i + 1])), "rotate", f"run-{i}") for i in range(len(gaps))]
        + [(T0 + timedelta(minutes=minute), "read", "") for minute in reads]
    )
    for now, what, rotation in moments:
        if what == "read":
            token = newest(tokens, now)
            if token is not None:
                last_read[token] = now
            continue
        while True:
            plan = plan_rotation(tokens, rotation, now, lifetime, grace)
            for stale in plan.delete:
                tokens.remove(stale.token)
                deleted[stale.token] = now
            if plan.wait_until is None:
                break
            assert plan.wait_until > now
            now = plan.wait_until
        if plan.create is not None:
            tokens.append(plan.create)
        ids = [token.token_id for token in tokens if token.generation > 0]
        assert len(ids) == len(set(ids)) <= len(ROTATED_TOKEN_IDS)
    for token, when in deleted.items():
        assert token.generation > 0
        if token in last_read:
            assert when >= last_read[token] + grace or token.expired(when)
