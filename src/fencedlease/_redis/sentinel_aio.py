"""The asyncio twins of `fencedlease._redis.sentinel`: the client a ``redis+sentinel://`` URL
names (``redis.asyncio.sentinel``), the ``+switch-master`` watch, as a task, and the check of
the primary a renewal batch ran on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.sentinel
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .errors import RedisCallError, map_exceptions
from .sentinel import (
    SWITCH_CHANNEL,
    SWITCH_POLL_S,
    Address,
    PrimaryCheckBase,
    client_options,
    connection_address,
    doubt,
    named_address,
    parse_sentinel_url,
    sentinel_clients,
    switched_service,
    unusable_sentinel,
)

__all__ = ["AsyncPrimaryCheck", "AsyncSwitchWatcher", "async_sentinel_client"]

log = logging.getLogger("fencedlease.aio")

T = TypeVar("T")


def async_sentinel_client(url: str, kwargs: dict[str, Any]) -> redis.asyncio.Redis:
    """`fencedlease._redis.sentinel.sentinel_client` for ``redis.asyncio``. No I/O.

    Raises:
        ValidationError: a malformed URL, or an option redis-py does not take.
    """
    parsed = parse_sentinel_url(url)
    options = client_options(parsed, kwargs)
    sentinel_kwargs = options.pop("sentinel_kwargs", None)
    try:
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **options
        )
        client: redis.asyncio.Redis = sentinel.master_for(parsed.service, db=parsed.db)
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        error = unusable_sentinel(url, exc)
    else:
        return client
    raise error  # here, with no exception holding the URL chained to it


class AsyncSwitchWatcher:
    """`fencedlease._redis.sentinel.SwitchWatcher` as a task of the running loop: started by
    `start` (from inside the loop; again after it ended), ended by `close`."""

    def __init__(self, client: redis.asyncio.Redis, on_switch: Callable[[], object]) -> None:
        self._client = client
        self._on_switch = on_switch
        self._sentinels = sentinel_clients(client)
        self._task: asyncio.Task[None] | None = None
        self.switches = 0

    @property
    def active(self) -> bool:
        return bool(self._sentinels)

    def start(self) -> None:
        if not self._sentinels or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="fencedlease-sentinel"
        )

    async def switched(self) -> None:
        """Apply a switch: drop the pool's connections, then ``on_switch()``."""
        self.switches += 1
        await self._client.connection_pool.disconnect()
        try:
            self._on_switch()
        except Exception:
            log.exception("fencedlease: on_switch after +switch-master failed")

    async def _run(self) -> None:
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        index = 0
        while True:
            sentinel = self._sentinels[index % len(self._sentinels)]
            index += 1
            try:
                with map_exceptions(RedisCallError):
                    async with sentinel.pubsub(ignore_subscribe_messages=True) as pubsub:
                        await pubsub.subscribe(SWITCH_CHANNEL)
                        while True:
                            message = await pubsub.get_message(timeout=SWITCH_POLL_S)
                            if switched_service(message, service):
                                log.warning("fencedlease: +switch-master for %r", service)
                                await self.switched()
            except (RedisCallError, OSError):
                await asyncio.sleep(SWITCH_POLL_S)  # the next sentinel

    async def close(self, *, sentinels: bool = True) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if sentinels:  # the sentinels' clients, when the client is ours
            for sentinel in self._sentinels:
                await sentinel.aclose()


def unretried(sentinel: Any) -> redis.asyncio.Redis:
    """`fencedlease._redis.sentinel.unretried` for ``redis.asyncio``. No I/O."""
    pool = sentinel.connection_pool
    kwargs = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
    own = redis.asyncio.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return redis.asyncio.Redis(connection_pool=own)


class AsyncPrimaryCheck(PrimaryCheckBase[redis.asyncio.Redis]):
    """`fencedlease._redis.sentinel.PrimaryCheck` for ``redis.asyncio``."""

    _client: redis.asyncio.Redis

    def __init__(self, client: redis.asyncio.Redis) -> None:
        super().__init__(client, unretried)

    async def named(self) -> Address | None:
        """The primary's address as the first sentinel that answers names it; None when none
        does."""
        self.checks += 1
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        for sentinel in self._asked:
            address = named_address(self._client, await self._ask(sentinel, service))
            if address is not None:
                return address
        return None

    @staticmethod
    async def _ask(sentinel: redis.asyncio.Redis, service: str) -> object:
        """``sentinel``'s ``SENTINEL GET-MASTER-ADDR-BY-NAME`` reply; None when it failed."""
        try:
            with map_exceptions(RedisCallError):
                return await sentinel.sentinel_get_master_addr_by_name(service)
        except (RedisCallError, OSError):
            return None

    async def _once(
        self, fn: Callable[[redis.asyncio.Redis], Awaitable[T]]
    ) -> tuple[T, Address, Address | None]:
        one = self._client.client()  # one connection of the pool, whose address is known
        try:
            await one.initialize()
            result = await fn(one)
            ran_on = connection_address(one.connection)
        finally:
            await asyncio.shield(one.aclose())  # the connection goes back even if cancelled
        return result, ran_on, await self.named()

    async def run(
        self,
        fn: Callable[[redis.asyncio.Redis], Awaitable[T]],
        switched: Callable[[], Awaitable[object]],
    ) -> tuple[T, str | None]:
        """`fencedlease._redis.sentinel.PrimaryCheck.run`, awaited.

        Raises:
            redis.RedisError: what ``fn`` raised, or the connection's error.
        """
        service = self._client.connection_pool.service_name  # type: ignore[attr-defined]
        result, ran_on, named = await self._once(fn)
        if named is None or named == ran_on:
            return result, doubt(ran_on, named, service)
        log.warning(
            "fencedlease: a renewal ran on %s:%s, the sentinels name %s:%s the primary of %r",
            *ran_on, *named, service,
        )  # fmt: skip
        await switched()
        result, ran_on, named = await self._once(fn)
        return result, doubt(ran_on, named, service)

    async def close(self) -> None:
        """Close the check's own sentinel clients."""
        for sentinel in self._asked:
            await sentinel.aclose()
            await sentinel.connection_pool.disconnect()
