"""The hand-off on a Redis Cluster (asyncio): the twin of `fencedlease._sync.handoff_cluster` (which
says how it works), its listener a task over ``redis.asyncio.RedisCluster``'s pub/sub."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

import redis
from redis.exceptions import RedisError

from fencedlease._sync.handoff_cluster import SHARD_SLICE_S, sharded_pubsub

from .handoff import AsyncHandoff

__all__ = ["AsyncClusterHandoff"]

log = logging.getLogger("fencedlease.handoff")


@functools.cache
def _no_pubsub() -> None:
    """Say once per process why asyncio waiters on a cluster are not woken by a release."""
    log.info(
        "fencedlease: redis-py %s has no pub/sub on redis.asyncio.RedisCluster (newer ones"
        " have it): a waiter on a cluster polls every retry_delay_ms instead of being woken",
        redis.__version__,
    )


class AsyncClusterHandoff(AsyncHandoff):
    """[`AsyncHandoff`][fencedlease._async.handoff.AsyncHandoff] over a
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
        if not hasattr(self._client, "pubsub"):
            # an older redis-py (5.0.1) has no pub/sub on asyncio's RedisCluster: no listener, so a
            # waiter polls every retry_delay_ms; the task stays until aclose() cancels it.
            _no_pubsub()
            await asyncio.Event().wait()
        if self.sharded is None:
            client: Any = self._client
            try:
                info = await client.info("server", target_nodes=client.get_default_node())
                self.sharded = sharded_pubsub(info.get("redis_version"))
            except RedisError:
                self.sharded = False  # the plain listener works on every version
        await super()._run()

    async def _listen_round(
        self, pubsub: Any, subscribe: list[str], unsubscribe: list[str], timeout_s: float
    ) -> dict[str, Any] | None:
        """The plain round (`AsyncHandoff`), or on sharded pub/sub as the sync twin's
        (`fencedlease._sync.handoff_cluster.ClusterHandoff`)."""
        if not self.sharded:
            return await super()._listen_round(pubsub, subscribe, unsubscribe, timeout_s)
        if subscribe:
            await pubsub.ssubscribe(*subscribe)
        if unsubscribe:
            await pubsub.sunsubscribe(*unsubscribe)
        if pubsub.shard_channels:
            message: dict[str, Any] | None = await pubsub.get_sharded_message(
                timeout=min(timeout_s, SHARD_SLICE_S)
            )
            return message
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        self._wake.clear()
        return None
