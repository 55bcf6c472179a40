"""The sequential model of the fencing rule, and the pure rule held to it.

Shared by every store's property test (in-memory, SQLite, PostgreSQL, Redis): what a store accepts,
for any sequence of accesses, must equal what :func:`model_refusal` says, and a refusal must be a
:class:`LeaseKeyMismatchError` exactly when the model refuses for the key.

Tokens are drawn near one of three bases per example: 0, 2**53 (where a double can no longer tell
2**53 from 2**53 + 1) and 2**63 - 1 (the largest token), so every store is held to the rule at the
edges where a number type would round or overflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease import LeaseKeyMismatchError, StaleTokenError
from fencedlease._core.fencing import MAX_FENCING_TOKEN, FenceState, decide
from fencedlease._core.fencing_access import coerce_access

OWNERS = ["a" * 32, "b" * 32, "c" * 32]
LEASE_KEYS = ["orders", "order:42"]


@attrs.define
class FakeLease:
    """What fencing sees of a Lease: key, owner_token (secret) and fencing_token."""

    key: str
    owner_token: str = attrs.field(repr=False)
    fencing_token: int | None


def lease(token: int | None, owner: int = 0, key: int | str = 0) -> FakeLease:
    return FakeLease(LEASE_KEYS[key] if isinstance(key, int) else key, OWNERS[owner], token)


# token, lease index (None: a bare int), strict, lease key index
Access = tuple[int, int | None, bool, int]
# token, lease index, lease key index (None for a bare int)
Accepted = tuple[int, int | None, int | None]


def model_refusal(
    history: list[Accepted], token: int, who: int | None, strict: bool, key: int
) -> str | None:
    """The model, stated over the history of accepted accesses rather than a state: ``None``
    (accept) or why not. A lease is refused if a lease of another key was accepted (``"key"``);
    then any access is refused if a larger token was accepted (``"older"``), or an equal one under
    strict (``"strict"``), or an equal one from a different known lease (``"duplicate"``)."""
    if who is not None:
        for _, seen_who, seen_key in history:
            if seen_who is not None and seen_key != key:
                return "key"
    if any(seen > token for seen, _, _ in history):
        return "older"
    for seen, seen_who, _ in history:
        if seen == token and strict:
            return "strict"
        if seen == token and who is not None and seen_who is not None and seen_who != who:
            return "duplicate"
    return None


def model_accepts(
    history: list[Accepted], token: int, who: int | None, strict: bool, key: int = 0
) -> bool:
    return model_refusal(history, token, who, strict, key) is None


def largest(history: list[Accepted]) -> int | None:
    return max((t for t, _, _ in history), default=None)


BASES = [0, 2**53 - 3, MAX_FENCING_TOKEN - 6]

accesses = st.sampled_from(BASES).flatmap(
    lambda base: st.lists(
        st.tuples(
            st.integers(1, 6).map(lambda i: base + i),
            st.one_of(st.none(), st.integers(0, 2)),
            st.booleans(),
            st.integers(0, 1),
        ),
        max_size=40,
    )
)


def present(who: int | None, token: int, key: int = 0) -> int | FakeLease:
    return token if who is None else lease(token, owner=who, key=key)


def attempt(access: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, int | None]:
    """One fenced access: ``(True, None)`` if accepted, ``(False, last_token)`` if refused."""
    try:
        access(*args, **kwargs)
    except StaleTokenError as exc:
        return False, exc.last_token
    return True, None


def check_against_model(
    access: Callable[[int | FakeLease, bool], object], accesses: list[Access]
) -> list[Accepted]:
    """Run ``accesses`` through ``access(token_or_lease, strict)`` and hold each outcome to the
    model: accepted or refused as it says, a refusal naming the largest accepted token, and a
    :class:`LeaseKeyMismatchError` exactly for a refusal of the key (naming both keys). Returns the
    history of accepted accesses."""
    history: list[Accepted] = []
    for token, who, strict, key in accesses:
        expected = model_refusal(history, token, who, strict, key)
        refusal: StaleTokenError | None = None
        try:
            access(present(who, token, key), strict)
        except StaleTokenError as exc:
            refusal = exc
        if refusal is None:
            assert expected is None, (history, token, who, strict, key, expected)
            history.append((token, who, None if who is None else key))
            continue
        assert expected is not None, (history, token, who, strict, key)
        assert refusal.token == token
        assert refusal.last_token == largest(history)
        assert isinstance(refusal, LeaseKeyMismatchError) == (expected == "key"), expected
        if isinstance(refusal, LeaseKeyMismatchError):
            assert (refusal.presented_key, refusal.lease_key) == (
                LEASE_KEYS[key],
                LEASE_KEYS[1 - key],
            )
    return history


@settings(max_examples=300, deadline=None)
@given(accesses=accesses)
def test_decide_accepts_what_the_model_accepts(accesses: list[Access]) -> None:
    """The pure rule, with strict chosen per access, agrees with the model, reason included."""
    state: FenceState | None = None
    history: list[Accepted] = []
    for token, who, strict, key in accesses:
        access = coerce_access(present(who, token, key))
        outcome = decide(state, access, strict=strict)
        expected = model_refusal(history, token, who, strict, key)
        if isinstance(outcome, FenceState):
            assert expected is None
            state = outcome
            history.append((token, who, None if who is None else key))
        else:
            assert outcome == expected
    assert (None if state is None else state.token) == largest(history)
