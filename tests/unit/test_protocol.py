"""Key layout, script files and reply decoding: pure, shared by every face."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from importlib import resources

import pytest

from fencedlease._core.errors import BackendError, ValidationError
from fencedlease._core.protocol import AcquireReply, new_owner_token, owner_fingerprint
from fencedlease._core.validate import check_prefix
from fencedlease._redis.keys import (
    escape_name,
    fence_key,
    handoff_channel,
    lease_key,
    resource_keys,
    waiters_key,
    waiters_meta_key,
)
from fencedlease._redis.replies import decode_acquire, decode_inspect, decode_release, decode_renew
from fencedlease._redis.scripts import ACQUIRE, ENQUEUE, INSPECT, RELEASE, RENEW, SHARED_HERE


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
    """The lease key is <prefix>:{<key>}; the counter <prefix>:{<key>}:fence; and so on."""
    assert lease_key("my-app:locks", "order:42") == "my-app:locks:{order:42}"
    assert fence_key("my-app:locks", "order:42") == "my-app:locks:{order:42}:fence"
    assert waiters_key("p", "k") == "p:{k}:waiters"
    assert waiters_meta_key("p", "k") == "p:{k}:waiters:meta"
    assert handoff_channel("p", "k") == "p:{k}:handoff"
    assert resource_keys("p", "k") == ("p:{k}:resource:fence", "p:{k}:resource")


_NAMES = ["a", "{", "}", "a}b", "{x}", "a\nb", "x}:fence", "{}", "}x", "x}:{y", "%7D", "%", "é"]


@pytest.mark.parametrize("key", _NAMES)
def test_every_key_of_a_name_shares_one_slot(key: str) -> None:
    """Every key of a name has one non-empty hash tag, whatever braces it holds: the lease, its
    counter, the hand-off queue and a fenced resource of that name share one Cluster slot."""
    keys = [
        lease_key("p", key),
        fence_key("p", key),
        waiters_key("p", key),
        waiters_meta_key("p", key),
        *resource_keys("p", key),
    ]
    assert {_hash_tag(k) for k in keys} == {escape_name(key)}
    assert escape_name(key) != ""


def test_names_are_escaped() -> None:
    """%, { and } are percent-encoded; everything else is kept as it is."""
    assert escape_name("x}:{y%") == "x%7D:%7By%25"
    assert lease_key("p", "x}:{y") == "p:{x%7D:%7By}"


@pytest.mark.parametrize("prefix", ["p", "a:b", "p:{", "p:}", "{p}"])
def test_a_braced_prefix_is_refused(prefix: str) -> None:
    """A brace in a prefix would open or end the hash tag: refused, naming the argument."""
    if "{" in prefix or "}" in prefix:
        with pytest.raises(ValidationError, match="prefix must not contain") as info:
            check_prefix(prefix)
        assert info.value.argument == "prefix"
    else:
        assert check_prefix(prefix) == prefix


def test_no_two_names_or_roles_share_a_redis_key() -> None:
    """Two different (prefix, name) pairs never give one key, and no role's key is another's."""
    prefixes = ["p", "p:", "p:x", "q"]
    seen: dict[str, tuple[str, str, str]] = {}
    for prefix in prefixes:
        for name in [*_NAMES, "x", "{x}:fence", "a:b", "x}:fence}"]:
            roles = {
                "lease": lease_key(prefix, name),
                "fence": fence_key(prefix, name),
                "waiters": waiters_key(prefix, name),
                "meta": waiters_meta_key(prefix, name),
                "channel": handoff_channel(prefix, name),
                "resource:fence": resource_keys(prefix, name)[0],
                "resource": resource_keys(prefix, name)[1],
            }
            for role, redis_key in roles.items():
                assert redis_key not in seen, (redis_key, seen.get(redis_key), (prefix, name, role))
                seen[redis_key] = (prefix, name, role)


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
    """Every lease script documents KEYS, ARGV and its reply before any code (in its own file:
    the shared definitions it uses, from lease_common.lua, come first in the source sent)."""
    folder = resources.files("fencedlease").joinpath("scripts")
    for script in (ACQUIRE, RENEW, RELEASE, INSPECT, ENQUEUE):
        own = folder.joinpath(f"{script.name}.lua").read_text("utf-8")
        assert own.split(f"\n{SHARED_HERE}\n")[0] in script.source
        header = own.split("\nlocal ", 1)[0].split("\nreturn ", 1)[0]
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
    """A reply of another shape is the library's error, never 'acquired'."""
    with pytest.raises(BackendError, match="acquire"):
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
