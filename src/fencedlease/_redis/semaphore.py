"""The Redis slot store of semaphores (sync face): ``semaphore_*.lua`` over a
[`RedisBackend`][fencedlease.RedisBackend]'s client and prefix. The steps are those of
`fencedlease._semaphore_stores`; the asyncio twin is `fencedlease.aio._semaphore_stores`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis

from .._backend import RenewItem
from .._errors import BackendError
from .._protocol import AcquireReply
from .cluster import finish_batch, slot_groups
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

__all__ = ["RedisSlots", "decode_count", "merge_calls", "renew_args", "renew_calls"]


def renew_args(prefix: str, items: Sequence[RenewItem]) -> tuple[list[str], list[object]]:
    """KEYS and ARGV of ``semaphore_renew_many.lua`` for ``(name, owner_token, ttl_ms)`` items
    (both faces)."""
    keys: list[str] = []
    args: list[object] = []
    for name, owner_token, ttl_ms in items:
        keys.extend(semaphore_keys(prefix, name)[:2])
        args.extend((owner_token, ttl_ms))
    return keys, args


def renew_calls(prefix: str, items: Sequence[RenewItem], client: object) -> list[list[int]]:
    """The indices of ``items`` each ``semaphore_renew_many.lua`` call carries (both faces): all
    in one on a Redis server; one call per hash slot on a cluster (``client`` has a
    ``nodes_manager``), whose scripts' keys must share a slot. A semaphore's keys share its
    name's hash tag as a lease's do, so `slot_groups` places them. Pure."""
    if getattr(client, "nodes_manager", None) is None:
        return [list(range(len(items)))]
    return [indices for _, indices in slot_groups(prefix, items)]


def merge_calls(
    count: int,
    calls: Sequence[list[int]],
    outcomes: Sequence[list[int | BaseException] | BackendError],
) -> list[int | BaseException]:
    """The batch's ``count`` replies in order from each call's outcome (its decoded replies, or
    the error that stands in its slots' places).

    Raises:
        BackendError: every call failed (the first call's error), as one round trip would.
    """
    results: list[int | BaseException | None] = [None] * count
    failures: list[BaseException] = []
    for indices, outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, BackendError):
            failures.append(outcome)
            outcome = [outcome] * len(indices)
        for index, value in zip(indices, outcome, strict=True):
            results[index] = value
    return finish_batch(results, failures)


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
        client = self._renewals()
        calls = renew_calls(self._prefix, items, client)
        outcomes: list[list[int | BaseException] | BackendError] = []
        for indices in calls:
            batch = [items[i] for i in indices]
            keys, args = renew_args(self._prefix, batch)
            try:
                with backend_errors(f"semaphore renew {len(batch)} slots"):
                    reply = run_script(client, SEMAPHORE_RENEW_MANY, keys, args)
            except BackendError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(decode_renew_many(batch, reply))
        return merge_calls(len(items), calls, outcomes)

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
