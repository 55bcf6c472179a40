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
from collections.abc import Sequence

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.crc import key_slot
from redis.exceptions import MovedError, NoScriptError

from .._clock import mark_send, send_mark
from .._errors import BackendError
from .._redis.aio import run_script
from .._redis.cluster import (
    NodeReplies,
    by_node,
    check_shard_timeout,
    merge_nodes,
    node_name,
    shard_bound_s,
    short_renewals,
)
from .._redis.errors import backend_errors
from .._redis.keys import lease_key, lease_keys, renew_many_args
from .._redis.replication import Fencing, PrimaryWatch
from .._redis.replies import decode_release, decode_renew_many
from .._redis.scripts import RELEASE, RENEW_MANY, Script, acked_replies
from ._handoff_cluster import AsyncClusterHandoff
from ._redis_backend import AsyncRedisBackend

__all__ = ["AsyncRedisClusterBackend"]

_Items = Sequence[tuple[str, str, int]]


class AsyncRedisClusterBackend(AsyncRedisBackend):
    """Leases in a Redis Cluster under ``prefix``, over a ``redis.asyncio.RedisCluster`` (the key
    layout of `fencedlease._redis.keys`: every key of a name in one hash slot); an
    [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend], the asyncio twin of
    [`RedisClusterBackend`][fencedlease.RedisClusterBackend]. An
    [`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend] whose batch renewal and hand-off
    know the cluster's shards.

    ``shard_timeout_ms``: how long a renewal batch waits for one node (None: a third of the
    batch's shortest TTL); a node that has not answered by then fails only its own leases'
    renewals, with a [`BackendError`][fencedlease.BackendError] (``timed_out``). ``owns_client``:
    close the client in [`close`][fencedlease.aio.AsyncRedisBackend.close]. Every redis-py
    error, ``RedisClusterException`` and MOVED/ASK redirections redis-py gave up on included, is
    raised as a ``BackendError`` with the original in ``__cause__``. A release wakes its waiter by
    ``SPUBLISH`` on Redis 7+ (sharded pub/sub, heard on the slot's node), by ``PUBLISH`` on 6.2
    (heard on every node): `fencedlease.aio._handoff_cluster`.

    ``replica_acks``, ``replica_ack_timeout_ms`` (milliseconds) and ``fencing``: as for the
    standalone backend; the ``WAIT`` goes with each script on the connection of the node that
    runs it (one per slot of a renewal batch), counting that node's replicas.

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}`` (a brace would
            split a lease from its counter across slots); ``shard_timeout_ms`` is not an int >= 1;
            ``replica_acks``, ``replica_ack_timeout_ms`` or ``fencing`` as for the standalone
            backend.
    """

    def __init__(
        self,
        client: RedisCluster,
        prefix: str = "fencedlease",
        *,
        shard_timeout_ms: int | None = None,
        owns_client: bool = False,
        replica_acks: int = 0,
        replica_ack_timeout_ms: int = 100,
        fencing: Fencing = "counter",
    ) -> None:
        super().__init__(
            client,  # type: ignore[arg-type]
            prefix,
            owns_client=owns_client,
            replica_acks=replica_acks,
            replica_ack_timeout_ms=replica_ack_timeout_ms,
            fencing=fencing,
        )
        self.cluster = client
        self.primary = PrimaryWatch(lambda key: key_slot(lease_key(self.prefix, key).encode()))
        self._bound_ms = check_shard_timeout(shard_timeout_ms)

    async def _run(
        self, client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> tuple[object, int | None]:
        """The script's reply, and with ``replica_acks`` the replicas' acks: the script and
        ``WAIT`` pipelined on one connection of the node serving ``keys[0]``'s slot (every key
        of a call shares it), so ``WAIT`` counts the replicas of the node that ran the script."""
        grants = self.grants
        if not grants.replica_acks:
            return await run_script(self.cluster, script, keys, args), None
        await self.cluster.initialize()  # the slot map, read once
        node = self._node_of_key(keys[0])
        replies = await _acked_on(node, False, script, keys, args, grants.replica_acks,
                                  grants.replica_ack_timeout_ms)  # fmt: skip
        if isinstance(replies[0], MovedError):  # the slot moved, the script did not run
            await self.cluster.nodes_manager.initialize()  # read the map; once more
            node = self._node_of_key(keys[0])
            replies = await _acked_on(node, False, script, keys, args, grants.replica_acks,
                                      grants.replica_ack_timeout_ms)  # fmt: skip
        if isinstance(replies[0], NoScriptError):
            replies = await _acked_on(node, True, script, keys, args, grants.replica_acks,
                                      grants.replica_ack_timeout_ms)  # fmt: skip
        return acked_replies(replies)

    def _node_of_key(self, key: str) -> ClusterNode:
        node = self.cluster.get_node_from_key(key)
        if node is None:  # a slot no node serves
            raise BackendError(f"no node serves the slot of {key!r}", sent="no", wrote="no")
        return node

    def release_waiter(self) -> AsyncClusterHandoff:
        """The manager's release waiter: the hand-off queue and its listener task, on sharded
        pub/sub where the cluster has it (`fencedlease.aio._handoff_cluster`)."""
        return AsyncClusterHandoff(self.client, self.prefix)

    async def release(self, key: str, owner_token: str) -> bool:
        args = (owner_token, self.grants.fencing, "shard")  # a hand-off grant's mode; SPUBLISH
        with backend_errors(f"release {key!r}"):
            reply = await run_script(self.cluster, RELEASE, lease_keys(self.prefix, key), args)
        return decode_release(reply, key)

    async def renew_many(self, items: _Items) -> list[int | BaseException]:
        """[`renew`][fencedlease.AsyncLeaseBackend.renew] for each item: one ``renew_many.lua``
        per hash slot, each node's slots in turn, the nodes at once (see the class).

        Raises:
            BackendError: every call failed (the first error; else each failed call's error
                stands in its leases' places).
        """
        if not items:
            return []
        bound_s = shard_bound_s(items, self._bound_ms)
        nodes = by_node(self.prefix, items, self._node_of)
        tasks = {
            node: asyncio.ensure_future(self._renew_node(items, groups))
            for node, groups in nodes.items()
        }
        done, pending = await asyncio.wait(tasks.values(), timeout=bound_s)
        for task in pending:
            task.cancel()
        replies = {node: task.result() if task in done else None for node, task in tasks.items()}
        return merge_nodes(len(items), nodes, replies, bound_s)

    def _node_of(self, slot: int) -> str:
        return node_name(self.cluster, slot)

    async def _renew_node(self, items: _Items, groups: list[list[int]]) -> NodeReplies:
        """One node's share: its slots' calls in turn (see `fencedlease._redis.cluster`)."""
        replies: list[int | BaseException] = []
        failed: list[BaseException] = []
        for indices in groups:
            batch = [items[i] for i in indices]
            keys, args = renew_many_args(self.prefix, batch)
            try:
                with backend_errors(f"renew {len(batch)} leases"):
                    reply, acks = await self._run(self.cluster, RENEW_MANY, keys, args)
            except BackendError as exc:
                replies.extend([exc] * len(batch))
                failed.append(exc)
                continue
            replies.extend(
                short_renewals(self.grants, batch, decode_renew_many(batch, reply), acks)
            )
        return replies, failed


async def _acked_on(
    node: ClusterNode,
    source: bool,
    script: Script,
    keys: Sequence[str],
    args: Sequence[object],
    replicas: int,
    timeout_ms: int,
) -> list[object]:
    """``script`` (EVALSHA, or EVAL of its source when ``source``) and ``WAIT replicas
    timeout_ms`` sent together on one of ``node``'s connections; each reply or the error in its
    place (a connection error raises)."""
    if send_mark() is not None:
        mark_send()
    head = ("EVAL", script.source) if source else ("EVALSHA", script.sha)
    commands = [
        PipelineCommand(0, *head, len(keys), *keys, *args),
        PipelineCommand(1, "WAIT", replicas, timeout_ms),
    ]
    await node.execute_pipeline(commands)
    return [command.result for command in commands]
