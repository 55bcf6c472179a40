# GENERATED from src/fencedlease/aio/_redis_backend.py by `python scripts/unasync.py`: do not edit.
# Edit that source, then run it again (CI runs it with --check, failing while stale).
"""The Redis backend (sync): the lease scripts over a redis-py client.

Everything Redis-specific that is not this class's own I/O lives in `fencedlease._redis`: key
names, the scripts and their one NOSCRIPT policy, reply decoding and the error mapping, shared
with the asyncio twin (`fencedlease.aio._redis_backend`), the hand-off and
[`RedisFencedResource`][fencedlease.RedisFencedResource].
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from ._handoff_sync import Handoff
from ._protocol import AcquireReply, InspectReply
from ._redis.clients import dedicated_client, waits_for_connection
from ._redis.errors import STORE_ERRORS, backend_errors, store_error
from ._redis.keys import fence_key, lease_key, lease_keys, renew_many_args
from ._redis.replies import (
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
)
from ._redis.scripts import ACQUIRE, INSPECT, RELEASE, RENEW, RENEW_MANY, run_script
from ._validate import check_prefix

__all__ = ["RedisBackend"]


class RedisBackend:
    """Leases in Redis under ``prefix`` (layout in `fencedlease._redis.keys`).

    ``client`` is a ``redis.Redis``; ``decode_responses`` may be on or off. ``owns_client``: close
    the client in [`close`][fencedlease.RedisBackend.close] (true when the manager built it from a
    URL). Every redis-py error is raised as [`BackendError`][fencedlease.BackendError] with the
    original in ``__cause__``.

    [`renew_many`][fencedlease.RedisBackend.renew_many] (the background renewal) runs on a
    connection of its own when ``client``'s pool is a ``BlockingConnectionPool``: there it would
    wait behind every command already queued for a connection (a burst of acquires or releases),
    long enough for leases to lapse. The connection is made on the first renewal and closed by
    [`close`][fencedlease.RedisBackend.close].

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

    def release_waiter(self) -> Handoff:
        """The manager's release waiter: the hand-off queue and its listener
        (`Handoff`), so a release wakes the oldest waiter."""
        return Handoff(self.client, self.prefix)

    def fencing_scope(self, key: str) -> str:
        """The name of ``key``'s fencing counter, given to its leases
        ([`fencing_scope`][fencedlease.Lease.fencing_scope]):
        its Redis key, ``<prefix>:{<escaped key>}:fence``. No I/O."""
        return fence_key(self.prefix, key)

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        try:
            reply = run_script(
                self.client, ACQUIRE, lease_keys(self.prefix, key), (owner_token, ttl_ms)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"acquire {key!r}", exc)  # noqa: B904  (store_error sets the cause)
        return decode_acquire(reply, key)

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        try:
            reply = run_script(
                self.client, RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"renew {key!r}", exc)  # noqa: B904
        return decode_renew(reply, key)

    def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        keys, args = renew_many_args(self.prefix, items)
        try:
            reply = run_script(self._renewals(), RENEW_MANY, keys, args)
        except STORE_ERRORS as exc:
            raise store_error(f"renew {len(items)} leases", exc)  # noqa: B904
        return decode_renew_many(items, reply)

    def release(self, key: str, owner_token: str) -> bool:
        try:
            reply = run_script(self.client, RELEASE, lease_keys(self.prefix, key), (owner_token,))
        except STORE_ERRORS as exc:
            raise store_error(f"release {key!r}", exc)  # noqa: B904
        return decode_release(reply, key)

    def inspect(self, key: str) -> InspectReply | None:
        keys = (lease_key(self.prefix, key), fence_key(self.prefix, key))
        with backend_errors(f"inspect {key!r}"):
            reply = run_script(self.client, INSPECT, keys, ())
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
