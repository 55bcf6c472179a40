"""Redis Sentinel's I/O (the URL, the checks and the replies' reading, without I/O, are
`fencedlease._redis.sentinel`'s; see its module doc for why): the client a ``redis+sentinel://``
URL names, the ``+switch-master`` watch (`AsyncSwitchWatcher`) and the check of the primary a
renewal batch ran on (`AsyncPrimaryCheck`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.sentinel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from fencedlease._core.epochs import Majority
from fencedlease._redis.errors import RedisCallError, map_exceptions
from fencedlease._redis.sentinel import (
    MAJORITY_BOUND_S,
    SWITCH_CHANNEL,
    SWITCH_POLL_S,
    Address,
    client_options,
    connection_address,
    doubt,
    master_epoch,
    parse_sentinel_url,
    sentinel_clients,
    switched_service,
    unusable_sentinel,
)

from .primitives import LOG_NAME, Background, Event, NodeWorkers, shield

__all__ = ["AsyncPrimaryCheck", "AsyncSwitchWatcher", "async_sentinel_client", "unretried"]

log = logging.getLogger(LOG_NAME)

T = TypeVar("T")


def async_sentinel_client(url: str, kwargs: dict[str, Any]) -> redis.asyncio.Redis:
    """The client of the primary a ``redis+sentinel://`` URL names:
    ``Sentinel(sentinels, sentinel_kwargs=..., **kwargs).master_for(service, db=db)``. No I/O.

    Raises:
        ValidationError: a malformed URL, or an option redis-py does not take (named).
    """
    parsed = parse_sentinel_url(url)
    options = client_options(parsed, kwargs)
    sentinel_kwargs = options.pop("sentinel_kwargs", None)
    try:
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **options
        )
        client: redis.asyncio.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            parsed.service, db=parsed.db
        )
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)  # a wrong option fails here, not later
    except (TypeError, ValueError) as exc:
        error = unusable_sentinel(url, exc)
    else:
        return client
    raise error  # here, with no exception holding the URL chained to it


class AsyncSwitchWatcher:
    """Subscribed to ``+switch-master`` on the sentinels of a ``master_for`` client (one at a
    time: the next when one fails), off the caller's path (`Background`: a daemon thread or a
    task of the running loop). On the event of the client's service it drops every connection
    of the client's pool and calls ``on_switch()`` (an exception it raises is logged). Started by
    `start` (again after it ended, or in a child after ``os.fork``), stopped by `close`; nothing
    for another client."""

    def __init__(self, client: redis.asyncio.Redis, on_switch: Callable[[], object]) -> None:
        self._client = client
        self._on_switch = on_switch
        self._sentinels = sentinel_clients(client)
        self._stop = Event()
        self._background = Background("fencedlease-sentinel")
        self.switches = 0

    @property
    def active(self) -> bool:
        return bool(self._sentinels)

    def start(self) -> None:
        if self._sentinels:
            self._stop = Event()  # a new one: an asyncio event serves the loop it first waited on
            self._background.start(self._run)

    async def switched(self) -> None:
        """Apply a switch: drop the pool's connections, then ``on_switch()``."""
        self.switches += 1
        # Only the idle connections: one in use (a WAIT on the old primary, a read on another
        # thread) would have its socket cut under its reader; the pool drops it when it is given
        # back, its address no longer the primary's (``owns_connection``).
        await self._client.connection_pool.disconnect(inuse_connections=False)
        try:
            self._on_switch()
        except Exception:
            log.exception("fencedlease: on_switch after +switch-master failed")

    async def _run(self) -> None:
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        index = 0
        while not self._stop.is_set():
            sentinel = self._sentinels[index % len(self._sentinels)]
            index += 1
            try:
                with map_exceptions(RedisCallError):
                    await self._watch(sentinel, service)
            except (RedisCallError, OSError):
                await self._stop.wait(SWITCH_POLL_S)  # the next sentinel

    async def _watch(self, sentinel: Any, service: str) -> None:
        """Read ``sentinel``'s ``+switch-master`` events until stopped, applying ``service``'s."""
        async with sentinel.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(SWITCH_CHANNEL)
            while not self._stop.is_set():
                message = await pubsub.get_message(timeout=SWITCH_POLL_S)
                if switched_service(message, service):
                    log.warning("fencedlease: +switch-master for %r", service)
                    await self.switched()

    async def close(self, *, sentinels: bool = True) -> None:
        """Stop the watch and wait for it (`Background.stop`); with ``sentinels``, when the
        client is the library's, close the sentinels' clients too."""
        self._stop.set()
        await self._background.stop()
        if sentinels:
            for sentinel in self._sentinels:
                await sentinel.aclose()


def unretried(sentinel: Any) -> redis.asyncio.Redis:
    """A client of the sentinel ``sentinel`` on a pool of its own, made from its options, that
    tries each command once: asked after a renewal, a sentinel that does not answer is skipped
    for the next one, not retried with backoff for seconds. No I/O."""
    pool = sentinel.connection_pool
    kwargs = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
    own = redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.asyncio.Redis(connection_pool=own)


class AsyncPrimaryCheck:
    """Whether a grant or a renewal batch ran on the primary a majority of the sentinels name,
    for a ``master_for`` client (`active`; nothing to check for another client).

    `run` runs a renewal batch on one connection of the client's pool, then asks every
    configured sentinel at once ``SENTINEL MASTER`` (`majority`, each bounded by
    `MAJORITY_BOUND_S`): the batch counts only when a majority of the configured sentinels
    name the address it ran on, with one epoch (`fencedlease._core.epochs.Majority`). A deposed
    primary stays a writable master for seconds after a failover, and a holder that missed
    ``+switch-master``, or whose only reachable sentinel is a minority one still naming the old
    primary, would go on renewing there while the new primary hands its key to another. `grant`
    does the same for an acquire, with the floor of the epoch the majority named last, and says
    why it does not count when the majority, asked after it, names another node or epoch. Each
    sentinel is asked on a client of the check's own (`unretried`, made now, not on first use:
    two renewals may check at once), closed by `close`.

    With ``replica_acks`` the script and its ``WAIT`` go out as a pipeline, which redis-py
    gives a connection of the pool's own choosing, maybe not ``one``'s: the address checked is
    then ``one``'s. The ``WAIT`` covers that case: a renewal a deposed primary answered gets no
    replica's acknowledgement there and does not count either."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._sentinels = sentinel_clients(client)
        self._asked = [unretried(sentinel) for sentinel in self._sentinels]
        self._workers = NodeWorkers()
        self.checks = 0  #: how many times the sentinels were asked
        #: The epoch the majority named last (None: not asked yet): the floor of the next grant.
        self.epoch: int | None = None

    @property
    def active(self) -> bool:
        """Whether there is anything to check (a ``master_for`` client)."""
        return bool(self._sentinels)

    async def majority(self) -> Majority[Address]:
        """What the configured sentinels, asked at once, say of the primary (a sentinel that
        fails or has not answered within `MAJORITY_BOUND_S` counts against); the epoch it names,
        if any, kept in `epoch`."""
        self.checks += 1
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        calls = {
            f"sentinel-{index}": partial(self._ask, sentinel, service)
            for index, sentinel in enumerate(self._asked)
        }
        replies = await self._workers.run(calls, MAJORITY_BOUND_S)
        decided = Majority.decide(len(self._asked), list(replies.values()))
        if decided.named is not None:
            self.epoch = decided.named.epoch
        return decided

    async def _ask(self, sentinel: redis.asyncio.Redis, service: str) -> tuple[Address, int] | None:
        """``sentinel``'s primary and ``config-epoch`` for ``service``; None when it failed."""
        try:
            with map_exceptions(RedisCallError):
                reply = await sentinel.sentinel_master(service)
        except (RedisCallError, OSError):
            return None
        return master_epoch(self._client, reply)

    async def _once(
        self, fn: Callable[[redis.asyncio.Redis], Awaitable[T]]
    ) -> tuple[T, Address, Majority[Address]]:
        # one connection of the pool, whose address is known
        one = self._client.client()  # type: ignore[no-untyped-call, unused-ignore]
        try:
            # redis.asyncio's single-connection client takes its connection at its first command
            # (or here), the sync one when made (it has no ``initialize``): either way ``one`` has
            # it before ``fn``, whose pipeline may take another.
            initialize = getattr(one, "initialize", None)
            if initialize is not None:
                await initialize()
            result = await fn(one)
            ran_on = connection_address(one.connection)
        finally:
            await shield(one.aclose)  # the connection goes back even if cancelled
        return result, ran_on, await self.majority()

    async def run(
        self,
        fn: Callable[[redis.asyncio.Redis], Awaitable[T]],
        switched: Callable[[], Awaitable[object]],
    ) -> tuple[T, str | None]:
        """``fn(one)``'s result, ``one`` a client on a single connection of the pool, and None
        when a majority of the sentinels confirm the primary it ran on; else why not (see
        `doubt`). When the majority names another address, ``switched()`` is called (it drops
        the pool's idle connections, so the next one asks the sentinels; the backend's also
        renews every lease at once) and ``fn`` runs once more, on a new connection, checked
        again.

        Raises:
            redis.RedisError: what ``fn`` raised, or the connection's error.
        """
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        result, ran_on, decided = await self._once(fn)
        named = decided.named
        if named is None or named.address == ran_on:
            return result, doubt(ran_on, decided, service)
        log.warning(
            "fencedlease: a renewal ran on %s:%s, the sentinels name %s:%s the primary of %r",
            *ran_on, *named.address, service,
        )  # fmt: skip
        await switched()
        result, ran_on, decided = await self._once(fn)
        return result, doubt(ran_on, decided, service)

    async def grant(
        self,
        fn: Callable[[redis.asyncio.Redis, int], Awaitable[T]],
        switched: Callable[[], Awaitable[object]],
    ) -> tuple[T, int, str | None]:
        """``fn(one, epoch)``'s result (``one`` as for `run`; ``epoch`` the one the majority
        named last, asked first when not known yet), that epoch, and why the grant does not
        count (None when it does): once ``fn`` ran, the majority must name the address it ran
        on at that same epoch (`Majority.confirms`). When it names another address,
        ``switched()`` is called (the next grant goes there).

        Raises:
            redis.RedisError: what ``fn`` raised, or the connection's error.
        """
        if self.epoch is None:
            await self.majority()
        epoch = self.epoch or 0
        result, ran_on, decided = await self._once(lambda one: fn(one, epoch))
        why = decided.confirms(ran_on, epoch)
        if decided.named is not None and decided.named.address != ran_on:
            await switched()
        return result, epoch, why

    async def close(self) -> None:
        """Close the check's own sentinel clients and its workers."""
        self._workers.close()
        for sentinel in self._asked:
            await sentinel.aclose()
            await sentinel.connection_pool.disconnect()
