# GENERATED from src/fencedlease/_async/handoff_cluster.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The hand-off on a Redis Cluster: sharded pub/sub where the cluster has it.

On Redis 7 and later a release in a cluster wakes its waiter by ``SPUBLISH`` on the name's channel
(``release.lua`` with ``'shard'``), which only the nodes of the channel's shard carry, instead of a
``PUBLISH`` every node of the cluster relays; the listener ``SSUBSCRIBE``s each channel on its
slot's node (redis-py's cluster pub/sub keeps a connection per node, and moves a channel when its
slot moves). On Redis 6.2, which has no sharded pub/sub, the release falls back to ``PUBLISH`` and
the listener is the plain one of `handoff` (one connection on any node hears releases from every
node). Polling stays the fallback in both, as on a single Redis.

Which of the two is decided once per listener, by the version its cluster reports
(`fencedlease._redis.cluster.sharded_pubsub`).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import redis

from fencedlease._redis.cluster import SHARD_SLICE_S, sharded_pubsub
from fencedlease._redis.errors import RedisCallError, map_exceptions

from .handoff import Handoff
from .primitives import Event

__all__ = ["ClusterHandoff"]

log = logging.getLogger("fencedlease.handoff")


@functools.cache
def _no_pubsub() -> None:
    """Say once per process why waiters on a cluster are not woken by a release."""
    log.info(
        "fencedlease: redis-py %s has no pub/sub on redis.RedisCluster (newer ones"
        " have it): a waiter on a cluster polls every retry_delay_ms instead of being woken",
        redis.__version__,
    )


class ClusterHandoff(Handoff):
    """[`Handoff`][fencedlease._sync.handoff.Handoff] over a
    ``redis.RedisCluster``: the listener uses sharded pub/sub on Redis 7+ (see the module),
    the plain listener otherwise. ``sharded``: None until the listener has asked the cluster, then
    whether it listens sharded."""

    def _reset(self) -> None:
        super()._reset()
        self._wake = Event()
        self.sharded: bool | None = None

    def _poke(self) -> None:
        self._wake.set()
        if not self.sharded:
            super()._poke()

    def _run(self) -> None:
        if not hasattr(self._client, "pubsub"):
            # an older redis-py (5.0.1) has no pub/sub on the asyncio RedisCluster: no listener,
            # so a waiter polls every retry_delay_ms; the listener stays until close() stops it.
            _no_pubsub()
            Event().wait(None)
        if self.sharded is None:
            client: Any = self._client
            try:
                with map_exceptions(RedisCallError):
                    info = client.info("server", target_nodes=client.get_default_node())
                self.sharded = sharded_pubsub(info.get("redis_version"))
            except RedisCallError:
                self.sharded = False  # the plain listener works on every version
        super()._run()

    def _listen_round(
        self, pubsub: Any, subscribe: list[str], unsubscribe: list[str], timeout_s: float
    ) -> dict[str, Any] | None:
        """The plain round (`Handoff`), or on sharded pub/sub: ``SSUBSCRIBE``/``SUNSUBSCRIBE``
        (redis-py sends each channel to its slot's node), then one read of the nodes' messages
        for `SHARD_SLICE_S` at most; with no channel to read, a sleep until a waiter asks."""
        if not self.sharded:
            return super()._listen_round(pubsub, subscribe, unsubscribe, timeout_s)
        if subscribe:
            pubsub.ssubscribe(*subscribe)
        if unsubscribe:
            pubsub.sunsubscribe(*unsubscribe)
        if pubsub.shard_channels:
            message: dict[str, Any] | None = pubsub.get_sharded_message(
                timeout=min(timeout_s, SHARD_SLICE_S)
            )
            return message
        if self._wake.wait(timeout_s):
            self._wake.clear()
        return None
