"""The uncontended path's shortcuts answer exactly as the checked paths they skip: the acquire
reply's fast decoding, the store errors mapped without a context manager, the cached key names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from fencedlease import BackendError, ValidationError
from fencedlease._core.protocol import MAX_FENCING_TOKEN, new_owner_token
from fencedlease._redis.errors import STORE_ERRORS, store_error
from fencedlease._redis.keys import fence_key, key_base, lease_keys
from fencedlease._redis.replies import _decode_acquire, decode_acquire

_token = st.one_of(
    st.integers(min_value=-5, max_value=MAX_FENCING_TOKEN + 5).map(str),
    st.integers(min_value=0, max_value=MAX_FENCING_TOKEN + 5).map(lambda n: str(n).encode()),
    st.text(max_size=21),
    st.binary(max_size=21),
    st.sampled_from(["0", "007", b"01", "\u0661\u0662", "+1", " 1", "9" * 20]),
)


@given(status=st.sampled_from([0, 1, 2, 3, True, "1"]), token=_token, ttl=st.integers(-2, 10**6))
def test_the_fast_acquire_decoding_answers_as_the_checked_one(
    status: object, token: object, ttl: int
) -> None:
    reply = [status, token, ttl]
    try:
        checked: object = _decode_acquire(reply, "k")
    except BackendError as exc:
        checked = ("raised", str(exc))
    try:
        fast: object = decode_acquire(reply, "k")
    except BackendError as exc:
        fast = ("raised", str(exc))
    assert fast == checked


def test_a_store_error_is_mapped_with_its_cause_and_the_librarys_own_pass_through() -> None:
    cause = RedisConnectionError("reset")
    assert isinstance(cause, STORE_ERRORS)
    error = store_error("acquire 'k'", cause)
    assert isinstance(error, BackendError)
    assert str(error) == "acquire 'k': ConnectionError: reset"
    assert error.__cause__ is cause
    assert error.__suppress_context__
    assert (error.sent, error.wrote) == ("maybe", "maybe")
    own = ValidationError("ttl_ms", "ttl_ms must be an int")
    assert store_error("acquire 'k'", own) is own
    assert own.__cause__ is None
    odd = OSError("socket_read_size")
    mapped = store_error("release 'k'", odd)
    assert isinstance(mapped, BackendError)
    assert (str(mapped), mapped.__cause__) == ("release 'k': OSError: socket_read_size", odd)


@pytest.mark.parametrize("name", ["k", "a{b}%", "é"])
def test_cached_key_names_are_the_built_ones(name: str) -> None:
    base = key_base("p", name)
    assert lease_keys("p", name) == (
        base,
        base + ":fence",
        base + ":waiters",
        base + ":waiters:meta",
    )
    assert lease_keys("p", name) is lease_keys("p", name)  # built once
    assert fence_key("p", name) == base + ":fence"


def test_owner_tokens_are_32_hex_characters_and_distinct() -> None:
    tokens = {new_owner_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in tokens)
