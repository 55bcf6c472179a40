"""The Redis Cluster backend (asyncio): the lease scripts over a ``redis.asyncio.RedisCluster``.

An addition on `fencedlease._redis`, not a copy of the standalone backend: the same scripts, key
names, reply decoding and error mapping; what differs is where a call goes. Every script but
``renew_many.lua`` runs with the keys of one name, which share one hash slot, so redis-py sends
it to that slot's primary (it computes the slot itself for EVALSHA, no ``COMMAND GETKEYS``). A
renewal batch is split by slot (`fencedlease._redis.cluster`), one call per slot, each node's
slots in turn and the nodes at once, each node given its bound; one node's failure or silence
fails its own leases' renewals only.
"""

from __future__ import annotations

import asyncio

from redis.asyncio.cluster import RedisCluster

from .._redis.cluster import NodeReplies, check_shard_timeout, merge_nodes
from ._cluster_calls import Items, release_on_slot, renew_node, split_by_node
from ._handoff_cluster import AsyncClusterHandoff
from ._redis_backend import AsyncRedisBackend

__all__ = ["AsyncRedisClusterBackend"]


class AsyncRedisClusterBackend(AsyncRedisBackend):
    """The asyncio twin of [`RedisClusterBackend`][fencedlease.RedisClusterBackend]: an
    [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend] over a ``redis.asyncio.RedisCluster``,
    an [`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend] whose batch renewal and hand-off
    know the cluster's shards (every key of a name in one hash slot, `fencedlease._redis.keys`).

    ``shard_timeout_ms``, ``owns_client`` (close the client in
    [`close`][fencedlease.aio.AsyncRedisBackend.close]), the errors (a
    [`BackendError`][fencedlease.BackendError] with the redis-py error in ``__cause__``; a node
    that has not answered in time fails only its own leases' renewals) and the release's wake-up
    (`fencedlease.aio._handoff_cluster`): as for the sync twin.

    Raises:
        ValidationError: as [`RedisClusterBackend`][fencedlease.RedisClusterBackend].
    """

    def __init__(
        self,
        client: RedisCluster,
        prefix: str = "fencedlease",
        *,
        shard_timeout_ms: int | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, prefix, owns_client=owns_client)  # type: ignore[arg-type]
        self.cluster = client
        self._bound_ms = check_shard_timeout(shard_timeout_ms)

    def release_waiter(self) -> AsyncClusterHandoff:
        """The manager's release waiter: the hand-off queue and its listener task, on sharded
        pub/sub where the cluster has it (`fencedlease.aio._handoff_cluster`)."""
        return AsyncClusterHandoff(self.client, self.prefix)

    async def release(self, key: str, owner_token: str) -> bool:
        return await release_on_slot(
            self.cluster, self.prefix, self.grants.fencing, key, owner_token
        )

    async def renew_many(self, items: Items) -> list[int | BaseException]:
        """[`renew`][fencedlease.AsyncLeaseBackend.renew] for each item: one ``renew_many.lua``
        per hash slot, each node's slots in turn, the nodes at once (see the class).

        Raises:
            BackendError: every call failed (the first error; else each failed call's error
                stands in its leases' places).
        """
        if not items:
            return []
        bound_s, nodes = split_by_node(self.cluster, self.prefix, items, self._bound_ms)
        tasks = {
            node: asyncio.ensure_future(self._renew_node(items, groups))
            for node, groups in nodes.items()
        }
        done, pending = await asyncio.wait(tasks.values(), timeout=bound_s)
        for task in pending:
            task.cancel()
        replies = {node: task.result() if task in done else None for node, task in tasks.items()}
        return merge_nodes(len(items), nodes, replies, bound_s)

    async def _renew_node(self, items: Items, groups: list[list[int]]) -> NodeReplies:
        """One node's share (`renew_node`)."""
        return await renew_node(self.cluster, self.prefix, items, groups)
