"""What a grant or a renewal of the Redis backend must pass to count on replicated Redis: the
replicas' acknowledgements (``WAIT`` after the script, `fencedlease._redis.replication`) and, over
Sentinel, the word of a majority of the configured sentinels (`AsyncPrimaryCheck`), with the
epoch floor of ``fencing="epoch"`` (`fencedlease._core.epochs`). A grant that does not count is
released again and refused with its reason. A base of
[`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend], which sets the attributes named here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis.asyncio

from fencedlease._core.epochs import floor
from fencedlease._core.errors import BackendError
from fencedlease._core.protocol import AcquireReply
from fencedlease._redis.keys import lease_keys
from fencedlease._redis.replication import GrantOptions, older_token
from fencedlease._redis.scripts import ACQUIRE, AckedCall, Script
from fencedlease._redis.wire import forget_primary, primary_ask, primary_reply

from .redis_eviction import AsyncEvictionReads
from .scripts import run_acked, run_script
from .sentinel import AsyncPrimaryCheck, AsyncSwitchWatcher

__all__ = ["AsyncConfirmedCalls"]


class AsyncConfirmedCalls(AsyncEvictionReads):
    """The confirmation of grants and renewals (see the module docstring); the backend sets the
    attributes and gives `release`."""

    prefix: str
    grants: GrantOptions
    on_primary_switch: Callable[[], object] | None
    _switches: AsyncSwitchWatcher
    _check: AsyncPrimaryCheck

    async def release(self, key: str, owner_token: str) -> bool:
        raise NotImplementedError

    def _primary_switched(self) -> None:
        hook = self.on_primary_switch
        if hook is not None:
            hook()

    async def _primary_moved(self) -> None:
        """The sentinels name another primary than a renewal ran on: the pool's idle
        connections are dropped (the next one asks the sentinels; one in use is dropped when
        given back, its address no longer the pool's) and every lease is renewed at once."""
        await self.client.connection_pool.disconnect(inuse_connections=False)
        self._primary_switched()

    async def _run(
        self,
        client: redis.asyncio.Redis,
        script: Script,
        keys: Sequence[str],
        args: Sequence[object],
    ) -> tuple[object, int | None]:
        """The script's reply, and the replicas' acks when ``replica_acks`` asks for them."""
        self._switches.start()  # Sentinel only: from the first command, in the caller's loop
        grants = self.grants
        if not grants.replica_acks:
            return await run_script(client, script, keys, args), None
        call = AckedCall(script, keys, args, grants.replica_acks, grants.replica_ack_timeout_ms)
        return await run_acked(client, call)

    async def _renewal(
        self,
        client: redis.asyncio.Redis,
        script: Script,
        keys: Sequence[str],
        args: Sequence[object],
    ) -> tuple[object, int | None, str | None]:
        """`_run` of a renewal script on ``client``, and None; on Sentinel, on one connection
        of the pool (`AsyncPrimaryCheck.run`), and why its renewals do not count (the sentinels
        name another primary, or none answered), or None when they do."""
        if not self._check.active:
            return (*await self._run(client, script, keys, args), None)
        (reply, acks), doubt = await self._check.run(
            lambda one: self._run(one, script, keys, args), self._primary_moved
        )
        return reply, acks, doubt

    def _unconfirmed(self, key: str, acks: int | None, doubt: str | None) -> BackendError:
        """The error of ``key``'s renewal that answered but does not count."""
        if doubt is not None:
            return BackendError(f"renew {key!r}: {doubt}")
        return self.grants.refusal(f"renew {key!r}", acks or 0)

    def _epochs(self) -> bool:
        """Whether grants take an epoch's floor and a majority's word: ``fencing="epoch"`` over
        Sentinel (elsewhere the epoch mode is the counter's: a plain Redis has no failover
        epoch). No I/O."""
        return self.grants.fencing == "epoch" and self._check.active

    async def _epoch_grant(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str]
    ) -> tuple[object, int | None, str | None]:
        """`_acquire_reply` over Sentinel with ``fencing="epoch"`` (`fencedlease._core.epochs`):
        the grant takes the floor of the epoch the majority of sentinels named last, on one
        connection (`AsyncPrimaryCheck.grant`); it does not count unless the majority, asked
        after it (and its ``WAIT``), names that connection's node at that epoch, and the token
        is of that epoch (a hand-off a release made with an older floor is not)."""
        keys = lease_keys(self.prefix, key)

        async def send(one: redis.asyncio.Redis, epoch: int) -> tuple[object, int | None]:
            mode = self.grants.mode_arg(floor(epoch))
            conn = one.connection
            if self.grants.replica_acks or conn is None:
                # the WAIT's pipeline may take another connection: every grant reads the id
                return await self._run(
                    one, ACQUIRE, keys, (owner_token, ttl_ms, mode, "primary", *queue)
                )
            # the id once per connection (`PrimaryReads`: no connection outlives a promotion
            # the sentinels make)
            ask = primary_ask(conn, trusted=True)
            try:
                reply, acks = await self._run(
                    one, ACQUIRE, keys, (owner_token, ttl_ms, mode, ask, *queue)
                )
            except BaseException:
                forget_primary(conn)  # an error: the next acquire on it reads the id again
                raise
            return primary_reply(conn, reply, ask == "primary", ttl_ms), acks

        (reply, acks), epoch, why = await self._check.grant(send, self._primary_moved)
        return reply, acks, why or older_token(reply, key, epoch)

    def _acked_grant_cut(self, error: BaseException) -> bool:
        """Whether ``error`` (an acquire's, mapped) cut a grant that waits for the replicas' or
        the majority's word after its script: the connection failed with the command maybe
        sent (the script may have run); a reply of Redis's (a script's error) is not a cut, nor
        a cluster's turning the call away (``busy``: a slot being migrated, which the acquire
        waits out; what an earlier try may have granted is released by its clean-up, as for any
        ``wrote="maybe"``). No I/O."""
        waits = self.grants.replica_acks > 0 or self._epochs()
        return (
            waits and isinstance(error, BackendError) and error.sent == "maybe" and not error.busy
        )

    async def _taken_back(
        self,
        key: str,
        owner_token: str,
        acks: int,
        doubt: str | None,
        primary_id: str | None = None,
    ) -> AcquireReply:
        """A grant of ``key`` that does not count, released again: the refusal that says why
        (``acks`` replicas acknowledged it, or ``doubt``).

        Raises:
            ReplicationError: the release failed too (the grant may stand: ``wrote="maybe"``).
        """
        what = f"acquire {key!r}"
        try:
            await self.release(key, owner_token)
        except BackendError as exc:
            raise self.grants.refusal(what, acks, wrote="maybe", doubt=doubt) from exc
        refused = self.grants.refusal(what, acks, doubt=doubt)
        return AcquireReply(False, 0, -2, refused=refused, primary_id=primary_id)

    def _floor(self) -> int:
        """The floor of a release's hand-off grant: that of the epoch the sentinels' majority
        named last (0 elsewhere, or before any grant). No I/O."""
        return floor(self._check.epoch or 0) if self._epochs() else 0
