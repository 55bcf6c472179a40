"""``fencedlease.redis_keys``: the public names of one lease name's Redis keys, exactly the layout
the scripts use, validated like every other prefix and key."""

from __future__ import annotations

import pytest

import fencedlease
from fencedlease import RedisKeys, ValidationError, redis_keys
from fencedlease._redis.keys import lease_keys


def test_the_keys_of_a_plain_name() -> None:
    assert redis_keys("my-app:locks", "order:42") == RedisKeys(
        base="my-app:locks:{order:42}",
        lease="my-app:locks:{order:42}",
        fence="my-app:locks:{order:42}:fence",
        waiters="my-app:locks:{order:42}:waiters",
        waiters_meta="my-app:locks:{order:42}:waiters:meta",
        handoff="my-app:locks:{order:42}:handoff",
        semaphore="my-app:locks:{order:42}:semaphore",
        semaphore_tokens="my-app:locks:{order:42}:semaphore:tokens",
        semaphore_fence="my-app:locks:{order:42}:semaphore:fence",
    )


def test_a_name_with_braces_and_percent_is_escaped_into_one_hash_tag() -> None:
    keys = redis_keys("p", "a{b}%c")
    assert keys.base == "p:{a%7Bb%7D%25c}"
    assert keys.fence == "p:{a%7Bb%7D%25c}:fence"
    assert keys.handoff == "p:{a%7Bb%7D%25c}:handoff"


@pytest.mark.parametrize("name", ["k", "order:42", "a{b}", "}{", "%7B", "ünï"])
def test_the_keys_are_those_the_acquire_and_release_scripts_are_given(name: str) -> None:
    keys = redis_keys("fencedlease", name)
    assert (keys.lease, keys.fence, keys.waiters, keys.waiters_meta) == lease_keys(
        "fencedlease", name
    )


@pytest.mark.parametrize(
    ("prefix", "key", "argument"),
    [
        ("", "k", "prefix"),
        ("a{b", "k", "prefix"),
        ("a}b", "k", "prefix"),
        (b"p", "k", "prefix"),
        ("p", "", "key"),
        ("p", None, "key"),
    ],
)
def test_a_bad_prefix_or_key_is_a_validation_error_naming_it(
    prefix: object, key: object, argument: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        redis_keys(prefix, key)  # type: ignore[arg-type]
    assert raised.value.argument == argument


def test_exported_from_the_package() -> None:
    assert {"RedisKeys", "redis_keys"} <= set(fencedlease.__all__)
    assert fencedlease.redis_keys is redis_keys
