"""The Redis backend (sync): the lease scripts over a redis-py client.

Scripts run by EVALSHA; after ``SCRIPT FLUSH`` or a restart the ``NOSCRIPT`` reply is answered by
one EVAL of the same source, which also puts it back in Redis's cache. There is no per-call
``SCRIPT LOAD`` or ``SCRIPT EXISTS``: acquire and release are one command each.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import NoScriptError, RedisError

from ._errors import BackendError
from ._protocol import (
    ACQUIRE,
    INSPECT,
    RELEASE,
    RENEW,
    AcquireReply,
    InspectReply,
    Script,
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    fence_key,
    lease_key,
)
from ._validate import check_prefix

__all__ = ["RedisBackend", "backend_errors", "queue_renewals", "sort_renew_replies"]


@contextmanager
def backend_errors(operation: str) -> Iterator[None]:
    """Raise any redis-py error inside as :class:`BackendError` naming ``operation``, cause kept."""
    try:
        yield
    except RedisError as exc:
        raise BackendError(f"{operation}: {type(exc).__name__}: {exc}") from exc


def queue_renewals(
    pipe: Any,
    prefix: str,
    items: Sequence[tuple[str, str, int]],
    pending: Sequence[int],
    *,
    by_source: bool,
) -> None:
    """Queue the renew script for ``items[i]`` for each ``i`` in ``pending`` on a redis-py pipeline
    (sync or asyncio: queueing is not I/O on either): EVALSHA, or EVAL of the source when
    ``by_source`` (the resend after NOSCRIPT)."""
    for index in pending:
        key, owner_token, ttl_ms = items[index]
        if by_source:
            pipe.eval(RENEW.source, 1, lease_key(prefix, key), owner_token, ttl_ms)
        else:
            pipe.evalsha(RENEW.sha, 1, lease_key(prefix, key), owner_token, ttl_ms)


def sort_renew_replies(
    items: Sequence[tuple[str, str, int]],
    pending: Sequence[int],
    replies: Sequence[Any],
    results: list[int | BaseException],
) -> list[int]:
    """File the replies of a renewal pipeline (``execute(raise_on_error=False)``, one per index in
    ``pending``) into ``results``: the decoded token, or a :class:`BackendError` with the Redis
    error in ``__cause__``. Returns the indices answered NOSCRIPT, to resend with EVAL."""
    retry: list[int] = []
    for index, reply in zip(pending, replies, strict=True):
        if isinstance(reply, NoScriptError):
            retry.append(index)
        elif isinstance(reply, RedisError):
            error = BackendError(f"renew {items[index][0]!r}: {reply}")
            error.__cause__ = reply
            results[index] = error
        else:
            results[index] = decode_renew(reply)
    return retry


class RedisBackend:
    """Leases in Redis under ``prefix`` (layout in :mod:`fencedlease._protocol`).

    ``client`` is a ``redis.Redis``; ``decode_responses`` may be on or off. ``owns_client``: close
    the client in :meth:`close` (true when the manager built it from a URL).
    """

    def __init__(
        self, client: redis.Redis, prefix: str = "fencedlease", *, owns_client: bool = False
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._owns_client = owns_client

    def _run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        client = self.client
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(script.source, len(keys), *keys, *args)

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        prefix = self.prefix
        with backend_errors(f"acquire {key!r}"):
            reply = self._run(
                ACQUIRE, (lease_key(prefix, key), fence_key(prefix, key)), (owner_token, ttl_ms)
            )
        return decode_acquire(reply)

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        with backend_errors(f"renew {key!r}"):
            reply = self._run(RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms))
        return decode_renew(reply)

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        results: list[int | BaseException] = [0] * len(items)
        pending = list(range(len(items)))
        with backend_errors(f"renew {len(items)} leases"):
            for attempt in range(2):
                pipe = self.client.pipeline(transaction=False)
                queue_renewals(pipe, self.prefix, items, pending, by_source=attempt > 0)
                replies = pipe.execute(raise_on_error=False)
                pending = sort_renew_replies(items, pending, replies, results)
                if not pending:
                    break
        return results

    def release(self, key: str, owner_token: str) -> bool:
        with backend_errors(f"release {key!r}"):
            reply = self._run(RELEASE, (lease_key(self.prefix, key),), (owner_token,))
        return decode_release(reply)

    def inspect(self, key: str) -> InspectReply | None:
        prefix = self.prefix
        with backend_errors(f"inspect {key!r}"):
            reply = self._run(INSPECT, (lease_key(prefix, key), fence_key(prefix, key)), ())
        return decode_inspect(reply)

    def force_release(self, key: str) -> bool:
        with backend_errors(f"force_release {key!r}"):
            return bool(self.client.delete(lease_key(self.prefix, key)))

    def close(self) -> None:
        if self._owns_client:
            with backend_errors("close"):
                self.client.close()
