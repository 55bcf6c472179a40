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

from ._acl import acl_denial
from ._errors import BackendError
from ._protocol import (
    ACQUIRE,
    INSPECT,
    RELEASE,
    RENEW,
    RENEW_MANY,
    AcquireReply,
    InspectReply,
    Script,
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
    fence_key,
    lease_key,
    lease_keys,
    renew_many_args,
)
from ._validate import check_prefix

__all__ = [
    "RedisBackend",
    "backend_errors",
    "dedicated_client",
    "waits_for_connection",
]


@contextmanager
def backend_errors(operation: str) -> Iterator[None]:
    """Raise any redis-py error inside as :class:`BackendError` naming ``operation``, cause kept;
    so too a reply a ``decode_responses=True`` client cannot decode (a key holding bytes that are
    not UTF-8: redis-py drops that connection). A refusal by the Redis ACL names the refused
    command (:func:`fencedlease._acl.acl_denial`)."""
    try:
        yield
    except RedisError as exc:
        denied = acl_denial(exc)
        detail = f"{denied}: " if denied else ""
        raise BackendError(f"{operation}: {detail}{type(exc).__name__}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise BackendError(
            f"{operation}: a reply is not UTF-8 (the client decodes responses): {exc.reason}"
        ) from exc


def dedicated_client(client: redis.Redis) -> redis.Redis:
    """A client on a pool of its own, for a connection that must not wait for, nor take one of,
    the caller's pool's connections (the hand-off listener's, the renewer's).

    The pool is made from the caller's ``connection_class`` and ``connection_kwargs`` (address,
    credentials, TLS, timeouts), so it reaches the same server the same way, and makes a
    connection only when first used. A pool of another kind (e.g. Sentinel's, whose connections
    find their server through it) is used as it is: ``client`` itself is returned.
    """
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    own = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    return redis.Redis(connection_pool=own)


def waits_for_connection(client: redis.Redis) -> bool:
    """Whether a command of ``client`` may wait for other callers to give a connection back: its
    pool is a ``BlockingConnectionPool`` and it has no connection of its own."""
    return client.connection is None and isinstance(
        client.connection_pool, redis.BlockingConnectionPool
    )


class RedisBackend:
    """Leases in Redis under ``prefix`` (layout in :mod:`fencedlease._protocol`).

    ``client`` is a ``redis.Redis``; ``decode_responses`` may be on or off. ``owns_client``: close
    the client in :meth:`close` (true when the manager built it from a URL).

    :meth:`renew_many` (the background renewal) runs on a connection of its own when ``client``'s
    pool is a ``BlockingConnectionPool``: there it would wait behind every command already queued
    for a connection (a burst of acquires or releases), long enough for leases to lapse. The
    connection is made on the first renewal and closed by :meth:`close`.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}``.
    """

    def __init__(
        self, client: redis.Redis, prefix: str = "fencedlease", *, owns_client: bool = False
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._owns_client = owns_client
        self._renewal_client: redis.Redis | None = None

    def _renewals(self) -> redis.Redis:
        """The client renewals go through (see the class docstring)."""
        client = self._renewal_client
        if client is None:
            client = self.client
            if waits_for_connection(client):
                client = dedicated_client(client)
            self._renewal_client = client
        return client

    def _run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        client: redis.Redis | None = None,
    ) -> Any:
        client = self.client if client is None else client
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(script.source, len(keys), *keys, *args)

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        prefix = self.prefix
        with backend_errors(f"acquire {key!r}"):
            reply = self._run(ACQUIRE, lease_keys(prefix, key), (owner_token, ttl_ms))
        return decode_acquire(reply, key)

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        with backend_errors(f"renew {key!r}"):
            reply = self._run(RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms))
        return decode_renew(reply, key)

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        keys, args = renew_many_args(self.prefix, items)
        with backend_errors(f"renew {len(items)} leases"):
            reply = self._run(RENEW_MANY, keys, args, self._renewals())
        return decode_renew_many(items, reply)

    def release(self, key: str, owner_token: str) -> bool:
        with backend_errors(f"release {key!r}"):
            reply = self._run(RELEASE, lease_keys(self.prefix, key), (owner_token,))
        return decode_release(reply, key)

    def inspect(self, key: str) -> InspectReply | None:
        prefix = self.prefix
        with backend_errors(f"inspect {key!r}"):
            reply = self._run(INSPECT, (lease_key(prefix, key), fence_key(prefix, key)), ())
        return decode_inspect(reply, key)

    def force_release(self, key: str) -> bool:
        with backend_errors(f"force_release {key!r}"):
            return bool(self.client.delete(lease_key(self.prefix, key)))

    def close(self) -> None:
        renewals, self._renewal_client = self._renewal_client, None
        if renewals is not None and renewals is not self.client:
            with backend_errors("close"):
                renewals.connection_pool.disconnect()
        if self._owns_client:
            with backend_errors("close"):
                self.client.close()
