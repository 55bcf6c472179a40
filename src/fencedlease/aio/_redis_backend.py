"""The Redis backend (asyncio): the lease scripts over a ``redis.asyncio`` client.

The twin of `fencedlease._redis_backend`, sharing everything that is not I/O with it through
`fencedlease._redis`: key names, the scripts and their NOSCRIPT policy
(`fencedlease._redis.aio.run_script`), reply decoding and the error mapping.

Cancellation: a cancelled call leaves no half-read reply behind (redis-py drops a connection whose
read was interrupted), but the command may have run at Redis. The manager copes with that; this
class does not pretend otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio

from .._protocol import AcquireReply, InspectReply
from .._redis.aio import dedicated_client, run_script, waits_for_connection
from .._redis.errors import STORE_ERRORS, backend_errors, store_error
from .._redis.keys import fence_key, lease_key, lease_keys, renew_many_args
from .._redis.replies import (
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
)
from .._redis.scripts import ACQUIRE, INSPECT, RELEASE, RENEW, RENEW_MANY
from .._validate import check_prefix
from ._handoff import AsyncHandoff

__all__ = ["AsyncRedisBackend"]


class AsyncRedisBackend:
    """Leases in Redis under ``prefix``, over a ``redis.asyncio.Redis`` (layout in
    `fencedlease._redis.keys`); an [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend].

    ``decode_responses`` may be on or off. ``owns_client``: close the client in
    [`close`][fencedlease.aio.AsyncRedisBackend.close] (true when the manager built it from a URL).
    Every redis-py error is raised as [`BackendError`][fencedlease.BackendError] with the original
    in ``__cause__``. As in the sync twin,
    [`renew_many`][fencedlease.aio.AsyncRedisBackend.renew_many] runs on a connection of its own
    when the client's pool is a ``BlockingConnectionPool``, so renewals never queue behind the
    caller's commands.

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
            if waits_for_connection(client):
                client = dedicated_client(client)
            self._renewal_client = client
        return client

    def release_waiter(self) -> AsyncHandoff:
        """The manager's release waiter: the hand-off queue and its listener task
        (`AsyncHandoff`), so a release wakes the oldest waiter."""
        return AsyncHandoff(self.client, self.prefix)

    def fencing_scope(self, key: str) -> str:
        """The name of ``key``'s fencing counter, given to its leases
        ([`fencing_scope`][fencedlease.Lease.fencing_scope]):
        its Redis key, ``<prefix>:{<escaped key>}:fence``. No I/O."""
        return fence_key(self.prefix, key)

    async def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        try:
            reply = await run_script(
                self.client, ACQUIRE, lease_keys(self.prefix, key), (owner_token, ttl_ms)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"acquire {key!r}", exc)  # noqa: B904  (store_error sets the cause)
        return decode_acquire(reply, key)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        try:
            reply = await run_script(
                self.client, RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"renew {key!r}", exc)  # noqa: B904
        return decode_renew(reply, key)

    async def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        keys, args = renew_many_args(self.prefix, items)
        try:
            reply = await run_script(self._renewals(), RENEW_MANY, keys, args)
        except STORE_ERRORS as exc:
            raise store_error(f"renew {len(items)} leases", exc)  # noqa: B904
        return decode_renew_many(items, reply)

    async def release(self, key: str, owner_token: str) -> bool:
        try:
            reply = await run_script(
                self.client, RELEASE, lease_keys(self.prefix, key), (owner_token,)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"release {key!r}", exc)  # noqa: B904
        return decode_release(reply, key)

    async def inspect(self, key: str) -> InspectReply | None:
        keys = (lease_key(self.prefix, key), fence_key(self.prefix, key))
        with backend_errors(f"inspect {key!r}"):
            reply = await run_script(self.client, INSPECT, keys, ())
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
