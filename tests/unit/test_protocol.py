"""Key layout, script files and reply decoding: pure, shared by every face."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import pytest

from fencedlease._protocol import (
    ACQUIRE,
    INSPECT,
    RELEASE,
    RENEW,
    AcquireReply,
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    fence_key,
    lease_key,
    new_owner_token,
    owner_fingerprint,
)


def _hash_tag(key: str) -> str:
    """Redis Cluster's hash tag rule: the text between the first { and the next }."""
    start = key.find("{")
    if start == -1:
        return key
    end = key.find("}", start + 1)
    if end == -1 or end == start + 1:
        return key
    return key[start + 1 : end]


def test_layout() -> None:
    """The lease key is <prefix>:{<key>}; the counter <prefix>:{<key>}:fence."""
    assert lease_key("my-app:locks", "order:42") == "my-app:locks:{order:42}"
    assert fence_key("my-app:locks", "order:42") == "my-app:locks:{order:42}:fence"


@pytest.mark.parametrize("key", ["a", "{", "a}b", "{x}", "a\nb", "x}:fence", "{}"])
def test_lease_and_counter_share_a_slot(key: str) -> None:
    """Both keys have the same hash tag whatever braces the key holds (but a leading '}')."""
    assert _hash_tag(lease_key("p", key)) == _hash_tag(fence_key("p", key)) == key.split("}")[0]


def test_a_leading_brace_empties_the_hash_tag() -> None:
    """Documented limit: a key starting with '}' gives an empty tag, so on Redis Cluster its two
    keys hash apart (Cluster refuses the script with CROSSSLOT; single Redis is unaffected)."""
    assert _hash_tag(lease_key("p", "}x")) == "p:{}x}"
    assert _hash_tag(fence_key("p", "}x")) == "p:{}x}:fence"


def test_no_key_lands_on_another_keys_counter() -> None:
    """A lease key ends in '}' and a counter in ':fence', so they can never coincide."""
    assert lease_key("p", "a}:fence") != fence_key("p", "a")
    assert lease_key("p", "a}:fence") == "p:{a}:fence}"


def test_owner_tokens_are_128_random_bits() -> None:
    """Owner tokens are 32 hex characters and differ per call."""
    tokens = {new_owner_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in tokens)


def test_fingerprint_does_not_reveal_the_token() -> None:
    """The fingerprint is 16 hex chars of SHA-256, stable, and not a substring of the token."""
    token = "0123456789abcdef0123456789abcdef"
    assert owner_fingerprint(token) == hashlib.sha256(token.encode()).hexdigest()[:16]
    assert owner_fingerprint(token) not in token


def test_scripts_open_with_keys_argv_and_return_comments() -> None:
    """Every lease script documents KEYS, ARGV and its reply before any code."""
    for script in (ACQUIRE, RENEW, RELEASE, INSPECT):
        header = script.source.split("\nlocal ", 1)[0].split("\nreturn ", 1)[0]
        assert "KEYS[1]" in header, script.name
        assert "returns" in header, script.name
        assert len(script.sha) == 40


@pytest.mark.parametrize("wrap", [lambda v: v, lambda v: str(v).encode(), str])
def test_decode_acquire_any_encoding(wrap: Callable[[int], object]) -> None:
    """Acquire replies decode the same from ints, bytes and str."""
    f = wrap
    assert decode_acquire([f(1), f(7), f(1000)]) == AcquireReply(True, 7, 1000)
    assert decode_acquire([f(2), f(7), f(1000)]) == AcquireReply(True, 7, 1000, retried=True)
    assert decode_acquire([f(0), f(0), f(350)]) == AcquireReply(False, 0, 350)


@pytest.mark.parametrize("reply", [None, [1, 2], [9, 1, 1], "OK"])
def test_decode_acquire_refuses_other_shapes(reply: object) -> None:
    """A reply of another shape is an error, never 'acquired'."""
    with pytest.raises(ValueError, match="acquire"):
        decode_acquire(reply)


def test_decode_renew_and_release() -> None:
    """Renew gives the token or 0; release gives a bool, from ints or bytes."""
    assert decode_renew(12) == 12
    assert decode_renew(b"0") == 0
    assert decode_release(1) is True
    assert decode_release(0) is False


@pytest.mark.parametrize("value", [b"34:secret-owner", "34:secret-owner"])
def test_decode_inspect(value: object) -> None:
    """Inspect yields the token, TTL, counter and only a fingerprint of the owner."""
    info = decode_inspect([value, 900, b"35"])
    assert info is not None
    assert (info.fencing_token, info.ttl_ms, info.last_issued_token) == (34, 900, 35)
    assert info.owner_fingerprint == owner_fingerprint("secret-owner")
    assert decode_inspect([None, -2, b"35"]) is None


def test_owner_tokens_may_contain_colons() -> None:
    """A restored owner token with ':' still splits at the first colon after the token."""
    info = decode_inspect(["5:a:b:c", 10, "5"])
    assert info is not None
    assert info.owner_fingerprint == owner_fingerprint("a:b:c")
