"""The Redis slot store of semaphores (sync face): ``semaphore_*.lua`` over a
[`RedisBackend`][fencedlease.RedisBackend]'s client and prefix. The steps are those of
`fencedlease._semaphore_stores`; the asyncio twin is `fencedlease.aio._semaphore_stores`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis

from .._backend import RenewItem
from .._protocol import AcquireReply
from .errors import backend_errors
from .keys import semaphore_keys
from .replies import decode_acquire, decode_renew_many, parse_token
from .scripts import (
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_CLEAR,
    SEMAPHORE_COUNT,
    SEMAPHORE_RELEASE,
    SEMAPHORE_RENEW_MANY,
    run_script,
)

__all__ = ["RedisSlots", "decode_count", "renew_args"]


def renew_args(prefix: str, items: Sequence[RenewItem]) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of ``semaphore_renew_many.lua`` for ``(name, owner_token, ttl_ms)`` items
    (both faces)."""
    keys: list[str] = []
    args: list[object] = []
    for name, owner_token, ttl_ms in items:
        keys.extend(semaphore_keys(prefix, name)[:2])
        args.extend((owner_token, ttl_ms))
    return keys, args


def decode_count(reply: object, name: str) -> int:
    """``semaphore_count.lua``'s reply, a count 0..2**63-1.

    Raises:
        BackendError: any other reply."""
    return parse_token(reply, f"semaphore count {name!r}", minimum=0)


class RedisSlots:
    """Slots in Redis through a [`RedisBackend`][fencedlease.RedisBackend]'s ``client`` and
    ``prefix`` (keys ``<prefix>:{<name>}:semaphore``, ``...:semaphore:tokens``,
    ``...:semaphore:fence``); renewals go through ``renewals()``, the backend's renewal client."""

    def __init__(
        self, client: redis.Redis, renewals: Callable[[], redis.Redis], prefix: str
    ) -> None:
        self._client = client
        self._renewals = renewals
        self._prefix = prefix

    def fencing_scope(self, name: str) -> str:
        return semaphore_keys(self._prefix, name)[2]

    def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        keys = semaphore_keys(self._prefix, name)
        with backend_errors(f"semaphore acquire {name!r}"):
            reply = run_script(self._client, SEMAPHORE_ACQUIRE, keys, (owner_token, ttl_ms, limit))
        return decode_acquire(reply, name)

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        keys, args = renew_args(self._prefix, items)
        with backend_errors(f"semaphore renew {len(items)} slots"):
            reply = run_script(self._renewals(), SEMAPHORE_RENEW_MANY, keys, args)
        return decode_renew_many(items, reply)

    def release(self, name: str, owner_token: str) -> bool:
        keys = semaphore_keys(self._prefix, name)[:2]
        with backend_errors(f"semaphore release {name!r}"):
            reply = run_script(self._client, SEMAPHORE_RELEASE, keys, (owner_token,))
        return decode_count(reply, name) == 1

    def count(self, name: str) -> int:
        keys = semaphore_keys(self._prefix, name)[:1]
        with backend_errors(f"semaphore count {name!r}"):
            return decode_count(run_script(self._client, SEMAPHORE_COUNT, keys, ()), name)

    def clear(self, name: str) -> bool:
        keys = semaphore_keys(self._prefix, name)[:2]
        with backend_errors(f"semaphore clear {name!r}"):
            return decode_count(run_script(self._client, SEMAPHORE_CLEAR, keys, ()), name) > 0
