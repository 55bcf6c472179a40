"""The hand-off on a Redis Cluster (asyncio): the twin of `fencedlease._handoff_cluster` (which
says how it works), its listener a task over ``redis.asyncio.RedisCluster``'s pub/sub."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from redis.exceptions import RedisError

from .._handoff import listener_died, listener_failed
from .._handoff_cluster import SHARD_SLICE_S, sharded_pubsub
from .._redis.errors import acl_denial
from .._redis.replies import text
from ._handoff import AsyncHandoff

__all__ = ["AsyncClusterHandoff"]


class AsyncClusterHandoff(AsyncHandoff):
    """[`AsyncHandoff`][fencedlease.aio._handoff.AsyncHandoff] over a
    ``redis.asyncio.RedisCluster``: sharded pub/sub on Redis 7+, the plain listener otherwise.
    ``sharded``: None until the listener has asked the cluster, then whether it listens sharded."""

    def _reset(self) -> None:
        super()._reset()
        self._wake = asyncio.Event()
        self.sharded: bool | None = None

    async def _poke(self) -> None:
        self._wake.set()
        if not self.sharded:
            await super()._poke()

    async def _run(self) -> None:
        if self.sharded is None:
            client: Any = self._client
            try:
                info = await client.info("server", target_nodes=client.get_default_node())
                self.sharded = sharded_pubsub(info.get("redis_version"))
            except RedisError:
                self.sharded = False  # the plain listener works on every version
        if not self.sharded:
            await super()._run()
            return
        await self._run_sharded()

    async def _run_sharded(self) -> None:
        client: Any = self._client
        pubsub = client.pubsub()
        channels = self._channels
        backoff_s, warned = 0.0, False
        try:
            while not self._closed:
                subscribe, unsubscribe, timeout_s = channels.plan(time.monotonic())
                try:
                    if subscribe:
                        await pubsub.ssubscribe(*subscribe)
                    if unsubscribe:
                        await pubsub.sunsubscribe(*unsubscribe)
                    message = None
                    if pubsub.shard_channels:
                        message = await pubsub.get_sharded_message(
                            timeout=min(timeout_s, SHARD_SLICE_S)
                        )
                    else:  # nothing to read: sleep until asked
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), timeout_s)
                        self._wake.clear()
                    backoff_s = 0.0
                except RedisError as exc:
                    warned = listener_failed(exc, acl_denial(exc), warned)
                    channels.lost_connection()
                    backoff_s = min(1.0, max(0.01, backoff_s * 2))
                    await asyncio.sleep(backoff_s)
                    continue
                if message is not None:
                    events = channels.on_message(message)
                    if events and text(message.get("type")) == "smessage":
                        self.notified += 1
                    for event in events:
                        event.set()
        except asyncio.CancelledError:
            raise  # aclose() stops it so
        except BaseException:
            listener_died()
            raise
        finally:
            with contextlib.suppress(RedisError):
                await asyncio.shield(pubsub.aclose())
