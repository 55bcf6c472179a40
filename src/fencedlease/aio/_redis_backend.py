"""The Redis backend (asyncio): the lease scripts over a ``redis.asyncio`` client.

The twin of :mod:`fencedlease._redis_backend`, sharing everything that is not I/O with it: key
names, scripts and reply decoding (:mod:`fencedlease._protocol`, the batch renewal's arguments and
replies included) and the error mapping (:func:`~fencedlease._redis_backend.backend_errors`).
Scripts run by EVALSHA; a ``NOSCRIPT`` reply is answered by one EVAL of the same source.

Cancellation: a cancelled call leaves no half-read reply behind (redis-py drops a connection whose
read was interrupted), but the command may have run at Redis. The manager copes with that; this
class does not pretend otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from .._handoff import async_dedicated_client, async_waits_for_connection
from .._protocol import (
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
from .._redis_backend import backend_errors
from .._validate import check_prefix

__all__ = ["AsyncRedisBackend"]


class AsyncRedisBackend:
    """Leases in Redis under ``prefix``, over a ``redis.asyncio.Redis`` (layout in
    :mod:`fencedlease._protocol`); an :class:`~fencedlease.AsyncLeaseBackend`.

    ``decode_responses`` may be on or off. ``owns_client``: close the client in :meth:`close`
    (true when the manager built it from a URL). Every redis-py error is raised as
    :class:`~fencedlease.BackendError` with the original in ``__cause__``. As in the sync twin,
    :meth:`renew_many` runs on a connection of its own when the client's pool is a
    ``BlockingConnectionPool``, so renewals never queue behind the caller's commands.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}``.
    """

    def __init__(
        self, client: redis.asyncio.Redis, prefix: str = "fencedlease", *, owns_client: bool = False
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._owns_client = owns_client
        self._renewal_client: redis.asyncio.Redis | None = None

    def _renewals(self) -> redis.asyncio.Redis:
        """The client renewals go through (see the class docstring)."""
        client = self._renewal_client
        if client is None:
            client = self.client
            if async_waits_for_connection(client):
                client = async_dedicated_client(client)
            self._renewal_client = client
        return client

    async def _run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        client: redis.asyncio.Redis | None = None,
    ) -> Any:
        client = self.client if client is None else client
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(script.source, len(keys), *keys, *args)

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        prefix = self.prefix
        with backend_errors(f"acquire {key!r}"):
            reply = await self._run(ACQUIRE, lease_keys(prefix, key), (owner_token, ttl_ms))
        return decode_acquire(reply, key)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        with backend_errors(f"renew {key!r}"):
            reply = await self._run(RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms))
        return decode_renew(reply, key)

    async def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        keys, args = renew_many_args(self.prefix, items)
        with backend_errors(f"renew {len(items)} leases"):
            reply = await self._run(RENEW_MANY, keys, args, self._renewals())
        return decode_renew_many(items, reply)

    async def release(self, key: str, owner_token: str) -> bool:
        with backend_errors(f"release {key!r}"):
            reply = await self._run(RELEASE, lease_keys(self.prefix, key), (owner_token,))
        return decode_release(reply, key)

    async def inspect(self, key: str) -> InspectReply | None:
        prefix = self.prefix
        with backend_errors(f"inspect {key!r}"):
            reply = await self._run(INSPECT, (lease_key(prefix, key), fence_key(prefix, key)), ())
        return decode_inspect(reply, key)

    async def force_release(self, key: str) -> bool:
        with backend_errors(f"force_release {key!r}"):
            return bool(await self.client.delete(lease_key(self.prefix, key)))

    async def close(self) -> None:
        renewals, self._renewal_client = self._renewal_client, None
        if renewals is not None and renewals is not self.client:
            with backend_errors("close"):
                await renewals.connection_pool.disconnect()
        if self._owns_client:
            with backend_errors("close"):
                await self.client.aclose()
