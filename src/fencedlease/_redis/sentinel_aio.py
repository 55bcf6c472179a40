"""The asyncio twins of `fencedlease._redis.sentinel`: the client a ``redis+sentinel://`` URL
names (``redis.asyncio.sentinel``) and the ``+switch-master`` watch, as a task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.asyncio.sentinel

from .._errors import ValidationError
from .._redact import redact_url
from .sentinel import (
    SWITCH_CHANNEL,
    client_options,
    parse_sentinel_url,
    sentinel_clients,
    switched_service,
)

__all__ = ["AsyncSwitchWatcher", "async_sentinel_client"]

log = logging.getLogger("fencedlease.aio")


def async_sentinel_client(url: str, kwargs: dict[str, Any]) -> redis.asyncio.Redis:
    """`fencedlease._redis.sentinel.sentinel_client` for ``redis.asyncio``. No I/O.

    Raises:
        ValidationError: a malformed URL, or an option redis-py does not take.
    """
    parsed = parse_sentinel_url(url)
    options = client_options(parsed, kwargs)
    sentinel_kwargs = options.pop("sentinel_kwargs", None)
    try:
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
            list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **options
        )
        client: redis.asyncio.Redis = sentinel.master_for(parsed.service, db=parsed.db)
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            "kwargs", f"{redact_url(url)!r} with these options is no usable Sentinel client: {exc}"
        ) from None
    return client


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
                async with sentinel.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(SWITCH_CHANNEL)
                    while True:
                        message = await pubsub.get_message(timeout=1.0)
                        if switched_service(message, service):
                            log.warning("fencedlease: +switch-master for %r", service)
                            await self.switched()
            except (redis.RedisError, OSError):
                await asyncio.sleep(0.2)  # the next sentinel

    async def close(self, *, sentinels: bool = True) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if sentinels:  # the sentinels' clients, when the client is ours
            for sentinel in self._sentinels:
                await sentinel.aclose()
