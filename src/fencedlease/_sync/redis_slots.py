# GENERATED from src/fencedlease/_async/redis_slots.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The Redis slot store of semaphores: ``semaphore_*.lua`` over the client and prefix of a Redis
backend ([`RedisBackend`][fencedlease.RedisBackend]). What each step sends
and how its reply reads is decided once, without I/O, by
`fencedlease._redis.semaphore.SlotCalls`; this store only runs the steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from fencedlease._core.backend import RenewItem
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.errors import backend_errors
from fencedlease._redis.semaphore import SlotCall, SlotCalls, merge_calls, renew_calls

from .redis_backend import RedisBackend
from .scripts import run_script

__all__ = ["RedisSlots"]

T = TypeVar("T")


class RedisSlots:
    """Slots in Redis through ``backend``'s client and prefix (the steps: `SlotCalls`); renewals
    go through the backend's renewal client, and each acquire the store answered is followed by
    the backend's eviction check (``answered()``)."""

    def __init__(self, backend: RedisBackend) -> None:
        self._client = backend.client
        self._renewals = backend._renewals
        self._answered = backend.answered
        self._calls = SlotCalls(backend.prefix)

    def _run(self, call: SlotCall[T]) -> T:
        client = self._renewals() if call.renewal else self._client
        with backend_errors(call.what):
            reply = run_script(client, call.script, call.keys, call.args)
        return call.decode(reply)

    def fencing_scope(self, name: str) -> str:
        return self._calls.fencing_scope(name)

    def acquire(self, name: str, owner_token: str, ttl_ms: int, limit: int) -> AcquireReply:
        reply = self._run(self._calls.acquire(name, owner_token, ttl_ms, limit))
        self._answered()  # the backend's eviction check, once
        return reply

    def renew_many(self, items: Sequence[RenewItem]) -> list[int | BaseException]:
        calls = renew_calls(self._calls.prefix, items, self._renewals())
        outcomes: list[list[int | BaseException] | BackendError] = []
        for indices in calls:  # one on a server; one per hash slot on a cluster
            batch = [items[i] for i in indices]
            try:
                replies = self._run(self._calls.renew_many(batch))
            except BackendError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(replies)
        return merge_calls(len(items), calls, outcomes)

    def release(self, name: str, owner_token: str) -> bool:
        return self._run(self._calls.release(name, owner_token))

    def count(self, name: str) -> int:
        return self._run(self._calls.count(name))

    def clear(self, name: str) -> bool:
        return self._run(self._calls.clear(name))
