"""The Redis backend: the lease scripts over a redis-py client.

Everything Redis-specific that is not this class's own I/O lives in `fencedlease._redis`: key
names, the scripts and their one NOSCRIPT policy, reply decoding and the error mapping, shared
with the hand-off and [`RedisFencedResource`][fencedlease.RedisFencedResource].

Cancellation (asyncio face): a cancelled call leaves no half-read reply behind (redis-py drops a
connection whose read was interrupted), but the command may have run at Redis. The manager copes
with that; this class does not pretend otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import redis.asyncio

from fencedlease._core.protocol import AcquireReply, GrantExtras, InspectReply
from fencedlease._core.validate import check_prefix
from fencedlease._redis.errors import (
    STORE_ERRORS,
    ScriptNotLoaded,
    backend_errors,
    map_exceptions,
    store_error,
)
from fencedlease._redis.eviction import EvictionCheck
from fencedlease._redis.keys import (
    fence_key,
    grant_args,
    grant_key,
    lease_key,
    lease_keys,
    renew_many_args,
)
from fencedlease._redis.replication import Fencing, GrantOptions, PrimaryWatch
from fencedlease._redis.replies import (
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
)
from fencedlease._redis.scripts import (
    ACQUIRE,
    FORCE_RELEASE,
    INSPECT,
    RELEASE,
    RENEW,
    RENEW_MANY,
)
from fencedlease._redis.wire import PackedCalls, PackedRenewals

from .clients import dedicated_client, waits_for_connection
from .handoff import AsyncHandoff
from .primitives import Background
from .redis_confirm import AsyncConfirmedCalls
from .scripts import run_script
from .sentinel import AsyncPrimaryCheck, AsyncSwitchWatcher
from .wire import packs_itself, run_packed

__all__ = ["AsyncRedisBackend"]


class AsyncRedisBackend(AsyncConfirmedCalls):
    """Leases in Redis under ``prefix`` (layout in `fencedlease._redis.keys`).

    ``client`` is a ``redis.asyncio.Redis``; ``decode_responses`` may be on or off.
    ``owns_client``: close the client in [`close`][fencedlease.aio.AsyncRedisBackend.close] (true
    when the manager built it from a URL). Every redis-py error is raised as
    [`BackendError`][fencedlease.BackendError] with the original in ``__cause__``.

    [`renew_many`][fencedlease.aio.AsyncRedisBackend.renew_many] (the background renewal) runs on
    a connection of its own when ``client``'s pool is a ``BlockingConnectionPool``: there it would
    wait behind every command already queued for a connection (a burst of acquires or releases),
    long enough for leases to lapse. The connection is made on the first renewal and closed by
    [`close`][fencedlease.aio.AsyncRedisBackend.close].

    Replication (`fencedlease._redis.replication`): with ``replica_acks=n`` every acquire and
    renewal is followed by ``WAIT n replica_ack_timeout_ms`` on the same connection, in the same
    round trip; a grant fewer replicas acknowledged is released again and answered as not
    acquired (``refused``: a [`ReplicationError`][fencedlease.ReplicationError]), a renewal
    they did not acknowledge raises it (the lease's deadline does not move). ``fencing="clock"``:
    tokens are ``max(counter + 1, Redis TIME in microseconds)``, so they stay above every earlier
    grant's after a failover rolled the counter back. ``primary``: the primary's replication id
    as the acquires saw it, and how many times it changed.

    Eviction (`fencedlease._redis.eviction`): the first acquire the store answers (granted or
    not) is followed by one ``INFO memory``, once per backend; a ``maxmemory-policy`` other than
    ``noeviction`` is warned about once
    ([`UnsafeRedisWarning`][fencedlease.UnsafeRedisWarning], and logged on ``fencedlease``).
    A refused ``INFO`` (an ACL) skips the check, a failed one leaves it to the next acquire;
    neither fails the acquire. ``eviction``: that check's state.

    Sentinel: over a client of ``Sentinel.master_for`` (or a ``redis+sentinel://`` URL) the
    backend subscribes to ``+switch-master`` on the sentinels from its first acquire or renewal;
    on the event it drops the pool's connections and calls ``on_primary_switch()`` (the manager
    renews every lease at once there). A renewal (a batch, or one lease's) moves deadlines only
    if a majority of the configured sentinels, asked after it ran, name the address it ran on as
    the primary (`AsyncPrimaryCheck`); otherwise each lease it renewed is answered with a
    [`BackendError`][fencedlease.BackendError] saying so. With ``fencing="epoch"`` a grant takes
    the floor of the sentinels' epoch and is checked the same way (`fencedlease._core.epochs`);
    one the majority does not confirm is released and refused with a
    [`ReplicationError`][fencedlease.ReplicationError]. See `fencedlease._redis.sentinel`.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}``;
            ``replica_acks`` not an int in 0..2,147,483,647, ``replica_ack_timeout_ms`` not an
            int in 1..2,147,483,647, ``fencing`` not ``"counter"``, ``"clock"`` or ``"epoch"``.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        prefix: str = "fencedlease",
        *,
        owns_client: bool = False,
        replica_acks: int = 0,
        replica_ack_timeout_ms: int = 100,
        fencing: Fencing = "counter",
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self.grants = GrantOptions.checked(replica_acks, replica_ack_timeout_ms, fencing)
        self.primary = PrimaryWatch()
        self.eviction = EvictionCheck()
        self._eviction_read = Background("fencedlease-eviction-check")
        self.on_primary_switch: Callable[[], object] | None = None
        self._switches = AsyncSwitchWatcher(client, self._primary_switched)
        self._check = AsyncPrimaryCheck(client)
        self._owns_client = owns_client
        self._renewal_client: redis.asyncio.Redis | None = None
        self._packer: PackedRenewals | None = None
        self._calls: PackedCalls | None = None
        self._closed = False  # by close(): no command is sent once more after it

    def _renewals(self) -> redis.asyncio.Redis:
        """The client renewals go through (see the class docstring)."""
        client = self._renewal_client
        if client is None:
            client = self.client
            if waits_for_connection(client):
                client = dedicated_client(client)
            self._renewal_client = client
            encoder = cast(Any, client).get_encoder()  # untyped on the asyncio face
            self._packer = PackedRenewals(RENEW_MANY, self.prefix, encoder.encode)
        return client

    async def _renew_many_reply(
        self, items: Sequence[tuple[str, str, int]]
    ) -> tuple[object, int | None, str | None]:
        """``renew_many.lua``'s reply for ``items``, the replicas' acks, and why its renewals do
        not count (`_renewal`; None when they do): the batch packed by `PackedRenewals` and sent
        as it is, unless a ``WAIT`` goes with it, the client holds a connection of its own or
        the sentinels are asked about the connection it ran on (then as `_run` sends any
        script, as after a ``NOSCRIPT``)."""
        client = self._renewals()
        if self._check.active:
            keys, args = renew_many_args(self.prefix, items)
            return await self._renewal(client, RENEW_MANY, keys, args)
        if self._packer is not None and not self.grants.replica_acks and packs_itself(client):
            self._switches.start()
            try:
                with map_exceptions(ScriptNotLoaded):
                    command = self._packer.command(items)
                    return await run_packed(client, command, self._open), None, None
            except ScriptNotLoaded:
                pass  # the script cache was flushed: EVALSHA, NOSCRIPT, EVAL, as for any script
        keys, args = renew_many_args(self.prefix, items)
        return (*await self._run(client, RENEW_MANY, keys, args), None)

    def release_waiter(self) -> AsyncHandoff:
        """The manager's release waiter: the hand-off queue and its listener
        (`AsyncHandoff`), so a release wakes the oldest waiter, which takes the lease from the
        message when `_takes_grants` says so (the primary it names noted in ``primary``)."""
        return AsyncHandoff(
            self.client, self.prefix, direct=self._takes_grants, primary=self.primary
        )

    def _takes_grants(self) -> bool:
        """Whether a woken waiter takes a hand-off from its message, with no claim round trip
        (see `fencedlease._handoff`): not with ``replica_acks`` (the claim's ``WAIT`` is what
        acknowledges the grant) nor over Sentinel (where the primary is checked, the claim is
        kept). No I/O."""
        return not self.grants.replica_acks and not self._check.active

    def fencing_scope(self, key: str) -> str:
        """The name of ``key``'s fencing counter, given to its leases
        ([`fencing_scope`][fencedlease.Lease.fencing_scope]):
        its Redis key, ``<prefix>:{<escaped key>}:fence``. No I/O."""
        return fence_key(self.prefix, key)

    async def _acquire_reply(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str]
    ) -> tuple[object, int | None, str | None]:
        """``acquire.lua``'s reply, with the primary's replication id, the replicas' acks, and
        why the grant does not count (`_epoch_grant`; None when it does): the id read once per
        connection, and by every grant but over Sentinel (`PrimaryReads`), unless a ``WAIT``
        goes with it or the client holds a connection of its own (then every acquire reads
        it)."""
        if self._epochs():
            return await self._epoch_grant(key, owner_token, ttl_ms, queue)
        if not self.grants.replica_acks and packs_itself(self.client):
            self._switches.start()
            fencing = self.grants.mode_arg(0)
            trusted = self._check.active  # Sentinel: no connection outlives a promotion
            reads = self._packed().acquire(
                key, owner_token, ttl_ms, fencing, queue, trusted=trusted
            )
            try:
                with map_exceptions(ScriptNotLoaded):
                    return await run_packed(self.client, reads, self._open), None, None
            except ScriptNotLoaded:
                pass  # the script cache was flushed: EVALSHA, NOSCRIPT, EVAL, as for any script
        keys, args = lease_keys(self.prefix, key), (owner_token, ttl_ms, self.grants.mode_arg(0))
        return (*await self._run(self.client, ACQUIRE, keys, (*args, "primary", *queue)), None)

    def _packed(self) -> PackedCalls:
        """The packer of this backend's acquires and releases (made on first use). No I/O."""
        calls = self._calls
        if calls is None:
            encoder = cast(Any, self.client).get_encoder()  # untyped on the asyncio face
            calls = self._calls = PackedCalls(ACQUIRE, RELEASE, self.prefix, encoder.encode)
        return calls

    async def acquire(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str] = ()
    ) -> AcquireReply:
        # queue: the hand-off's queueing arguments of a caller that waits when refused
        # (AsyncHandoff.queue_args: wait_ms, grace_ms, listener id, flag), which the same script
        # then queues: no queueing round trip follows.
        return await self.acquire_with_extras(key, owner_token, ttl_ms, None, queue)

    async def acquire_with_extras(
        self,
        key: str,
        owner_token: str,
        ttl_ms: int,
        extras: GrantExtras | None,
        queue: Sequence[str] = (),
    ) -> AcquireReply:
        """`acquire`, the grant storing ``extras`` (its metadata and lock-delay; None: none) in
        the same script (`grant_args`; see `fencedlease._core.backend`)."""
        what = f"acquire {key!r}"
        queue = grant_args(queue, extras)
        try:
            reply, acks, doubt = await self._acquire_reply(key, owner_token, ttl_ms, queue)
        except STORE_ERRORS as exc:
            error = store_error(what, exc)
            if not self._acked_grant_cut(error):
                raise error  # noqa: B904  (store_error sets the cause)
            # The connection broke before the WAIT (or the majority) answered: the
            # grant may stand on a primary a failover is deposing. Take it back, say why.
            return await self._taken_back(
                key, owner_token, 0, f"cut before it was confirmed: {error}"
            )
        decoded = decode_acquire(reply, key)
        self.primary.seen(decoded, key)
        self.answered()
        if not decoded.acquired or (doubt is None and not self.grants.short(acks)):
            return decoded
        # Too few replicas hold the grant (a failover could lose it), or the majority does not
        # confirm it (its token may repeat one a newer primary hands out): take it back.
        return await self._taken_back(key, owner_token, acks or 0, doubt, decoded.primary_id)

    async def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        try:
            reply, acks, doubt = await self._renewal(
                self.client, RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms)
            )
        except STORE_ERRORS as exc:
            raise store_error(f"renew {key!r}", exc)  # noqa: B904
        token = decode_renew(reply, key)
        if token and (doubt is not None or self.grants.short(acks)):
            raise self._unconfirmed(key, acks, doubt)
        return token

    async def renew_many(self, items: Sequence[tuple[str, str, int]]) -> list[int | BaseException]:
        try:
            reply, acks, doubt = await self._renew_many_reply(items)
        except STORE_ERRORS as exc:
            raise store_error(f"renew {len(items)} leases", exc)  # noqa: B904
        results = decode_renew_many(items, reply)
        if doubt is None and not self.grants.short(acks):
            return results
        return [
            self._unconfirmed(key, acks, doubt)
            if isinstance(result, int) and result > 0
            else result
            for (key, _, _), result in zip(items, results, strict=True)
        ]

    async def _release_reply(self, key: str, owner_token: str) -> object:
        """``release.lua``'s reply: packed by `PackedCalls` on a pooled connection, else (a
        client holding a connection of its own, a ``NOSCRIPT``) as `run_script` sends it."""
        packed = self.packed_release(key, owner_token)
        if packed is not None:
            try:
                with map_exceptions(ScriptNotLoaded):
                    return await run_packed(self.client, packed, self._open)
            except ScriptNotLoaded:
                pass  # the script cache was flushed: EVALSHA, NOSCRIPT, EVAL, as for any script
        keys, modes = lease_keys(self.prefix, key), self.grants.mode_args(self._floor())
        return await run_script(self.client, RELEASE, keys, (owner_token, *modes))

    def packed_release(self, key: str, owner_token: str) -> bytes | None:
        """``release.lua``'s ``EVALSHA`` for ``key`` and ``owner_token`` as one RESP frame
        (`PackedCalls`), the fencing mode of a hand-off grant with it, or None where a release
        does not go out packed (a client holding a connection of its own). No I/O."""
        if not packs_itself(self.client):
            return None
        return self._packed().release(key, owner_token, self.grants.mode_args(self._floor()))

    async def release(self, key: str, owner_token: str) -> bool:
        try:
            reply = await self._release_reply(key, owner_token)
        except STORE_ERRORS as exc:
            raise store_error(f"release {key!r}", exc)  # noqa: B904
        return decode_release(reply, key)

    async def inspect(self, key: str) -> InspectReply | None:
        keys = (lease_key(self.prefix, key), fence_key(self.prefix, key))
        with backend_errors(f"inspect {key!r}"):
            reply = await run_script(self.client, INSPECT, keys, ())
        return decode_inspect(reply, key)

    async def force_release(self, key: str) -> bool:
        keys = (lease_key(self.prefix, key), grant_key(self.prefix, key))
        with backend_errors(f"force_release {key!r}"):
            return bool(await run_script(self.client, FORCE_RELEASE, keys, ()))

    def _open(self) -> bool:
        """Whether `close` has not been called: a command whose connection broke is sent once
        more only then (`run_packed`)."""
        return not self._closed

    async def close(self) -> None:
        self._closed = True
        await self._eviction_read.stop()
        await self._switches.close(sentinels=self._owns_client)
        await self._check.close()
        renewals, self._renewal_client = self._renewal_client, None
        if renewals is not None and renewals is not self.client:
            with backend_errors("close"):
                await renewals.connection_pool.disconnect()
        if self._owns_client:
            with backend_errors("close"):
                await self.client.aclose()
