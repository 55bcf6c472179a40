"""The sequential model of the fencing rule, and the pure rule held to it.

Shared by every store's property test (in-memory, SQLite, PostgreSQL, Redis): what a store accepts,
for any sequence of accesses, must equal what :func:`model_accepts` says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from fencedlease import StaleTokenError
from fencedlease._fencing import FenceState, coerce_access, decide

OWNERS = ["a" * 32, "b" * 32, "c" * 32]


@attrs.define
class FakeLease:
    """What fencing sees of a Lease: key, owner_token (secret) and fencing_token."""

    key: str
    owner_token: str = attrs.field(repr=False)
    fencing_token: int | None


def lease(token: int | None, owner: int = 0) -> FakeLease:
    return FakeLease("orders", OWNERS[owner], token)


Access = tuple[int, int | None, bool]  # token, lease index (None: a bare int), strict


def model_accepts(
    history: list[tuple[int, int | None]], token: int, who: int | None, strict: bool
) -> bool:
    """The model, stated over the history of accepted accesses rather than a state: refuse if a
    larger token was accepted, or an equal one under strict, or an equal one from a different known
    lease (a duplicate grant)."""
    for seen, seen_who in history:
        if seen > token:
            return False
        if seen == token and strict:
            return False
        if seen == token and who is not None and seen_who is not None and seen_who != who:
            return False
    return True


accesses = st.lists(
    st.tuples(st.integers(0, 6), st.one_of(st.none(), st.integers(0, 2)), st.booleans()),
    max_size=40,
)


def present(who: int | None, token: int) -> int | FakeLease:
    return token if who is None else lease(token, owner=who)


def attempt(access: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, int | None]:
    """One fenced access: ``(True, None)`` if accepted, ``(False, last_token)`` if refused."""
    try:
        access(*args, **kwargs)
    except StaleTokenError as exc:
        return False, exc.last_token
    return True, None


@settings(max_examples=300, deadline=None)
@given(accesses=accesses)
def test_decide_accepts_what_the_model_accepts(accesses: list[Access]) -> None:
    """The pure rule, with strict chosen per access, agrees with the model."""
    state: FenceState | None = None
    history: list[tuple[int, int | None]] = []
    for token, who, strict in accesses:
        access = coerce_access(present(who, token))
        outcome = decide(state, access, strict=strict)
        assert isinstance(outcome, FenceState) == model_accepts(history, token, who, strict)
        if isinstance(outcome, FenceState):
            state = outcome
            history.append((token, who))
