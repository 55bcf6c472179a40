"""The Redis Cluster backend: the lease scripts over a redis-py ``RedisCluster``.

An addition on `fencedlease._redis`, not a copy of the standalone backend: the same scripts, key
names, reply decoding and error mapping; what differs is where a call goes. Every script but
``renew_many.lua`` runs with the keys of one name, which share one hash slot, so redis-py sends
it to that slot's primary (it computes the slot itself for EVALSHA, no ``COMMAND GETKEYS``). A
renewal batch is split by slot (`fencedlease._redis.cluster`), one call per slot, each node's
slots in turn and the nodes at once, each node given its bound; one node's failure or silence
fails its own leases' renewals only.

What the faces do differently per node (a worker thread or a task, a node's pipeline) is the
I/O of `fencedlease._async.cluster_nodes` and its twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from fencedlease._core.epochs import Majority, floor
from fencedlease._core.errors import BackendError
from fencedlease._redis.cluster import (
    AckedCall,
    NodeReplies,
    SlotWatch,
    by_node,
    check_shard_timeout,
    merge_nodes,
    node_name,
    shard_bound_s,
    short_renewals,
    slot_owner,
)
from fencedlease._redis.errors import Redirected, ScriptNotLoaded, backend_errors
from fencedlease._redis.eviction import policy_of
from fencedlease._redis.keys import lease_key, lease_keys, renew_many_args
from fencedlease._redis.replication import Fencing, older_token
from fencedlease._redis.replies import decode_release, decode_renew_many
from fencedlease._redis.scripts import ACQUIRE, RELEASE, RENEW_MANY, Script, acked_replies
from fencedlease._redis.sentinel import MAJORITY_BOUND_S

from .cluster_nodes import NodeWorkers, node_for, read_nodes, read_slot_map, send_acked
from .handoff_cluster import AsyncClusterHandoff
from .redis_backend import AsyncRedisBackend
from .scripts import run_script

__all__ = ["AsyncRedisClusterBackend"]

_Items = Sequence[tuple[str, str, int]]


class AsyncRedisClusterBackend(AsyncRedisBackend):
    """Leases in a Redis Cluster under ``prefix``, over a ``redis.asyncio.RedisCluster`` (the key
    layout of `fencedlease._redis.keys`: every key of a name in one hash slot); a lease backend
    ([`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend]): the Redis backend
    ([`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend]) with a batch renewal and a
    hand-off that know the cluster's shards.

    Each script runs on the primary of its name's slot; a renewal batch is split by slot, one
    ``renew_many.lua`` per slot, each node's slots in turn, the nodes at once (on the sync face
    each node on a worker thread of its own, ``fencedlease-cluster-<host:port>``; on the asyncio
    face a task per node). ``shard_timeout_ms``: how long a batch waits for one node (None: a
    third of the batch's shortest TTL); a node that has not answered by then, or failed, fails
    only its own leases' renewals, with a [`BackendError`][fencedlease.BackendError]
    (``timed_out`` for the silent node) in their places. ``owns_client``: close the client in
    [`close`][fencedlease.aio.AsyncRedisClusterBackend.close]. Every redis-py error,
    ``RedisClusterException`` and MOVED/ASK redirections redis-py gave up on included, is raised
    as a ``BackendError`` with the original in ``__cause__``. A release wakes its waiter by
    ``SPUBLISH`` on Redis 7+ (sharded pub/sub, heard on the slot's node), by ``PUBLISH`` on 6.2
    (heard on every node): `AsyncClusterHandoff`. The eviction check (as for the standalone
    backend) reads every primary's ``maxmemory-policy``, each evicting one warned about once.

    ``replica_acks``, ``replica_ack_timeout_ms`` (milliseconds) and ``fencing``: as for the
    standalone backend; the ``WAIT`` goes with each script on the connection of the node that
    runs it (one per slot of a renewal batch), counting that node's replicas. A node that answers
    MOVED (the slot has moved since the client read its map) ran nothing: the map is read again
    and the call sent once more, to the slot's new node.

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
        self.primary = SlotWatch(lambda key: key_slot(lease_key(self.prefix, key).encode()), client)
        self._bound_ms = check_shard_timeout(shard_timeout_ms)
        self._workers = NodeWorkers()
        self._slot_epochs: dict[int, int] = {}  # the epoch each slot's majority named last

    async def _run(
        self, client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> tuple[object, int | None]:
        """The script's reply, and with ``replica_acks`` the replicas' acks: the script and
        ``WAIT`` pipelined on one connection of the node serving ``keys[0]``'s slot (every key
        of a call shares it), so ``WAIT`` counts the replicas of the node that ran the script.
        MOVED: read the slot map, then once more on the slot's new node; NOSCRIPT: once more
        with EVAL (neither reply ran the script)."""
        grants = self.grants
        if not grants.replica_acks:
            return await run_script(self.cluster, script, keys, args), None
        call = AckedCall(script, keys, args, grants.replica_acks, grants.replica_ack_timeout_ms)
        await read_slot_map(self.cluster)
        node = self._node_of_key(keys[0])
        replies = await send_acked(node, False, call)
        if Redirected.matches(replies[0]):
            await self.cluster.nodes_manager.initialize()
            node = self._node_of_key(keys[0])
            replies = await send_acked(node, False, call)
        if ScriptNotLoaded.matches(replies[0]):
            replies = await send_acked(node, True, call)
        return acked_replies(replies)

    def _epochs(self) -> bool:
        """Whether grants take the floor of their slot's epoch and the cluster majority's word
        (``fencing="epoch"``). No I/O."""
        return self.grants.fencing == "epoch"

    async def _slot_majority(self, slot: int) -> Majority[str]:
        """What the primaries (the slot map's), asked at once (`MAJORITY_BOUND_S` each), say of
        the primary serving ``slot`` and its ``configEpoch``; the epoch named, if any, kept for
        the slot's next grants and hand-offs."""
        await read_slot_map(self.cluster)
        primaries = self.cluster.get_primaries()  # type: ignore[no-untyped-call, unused-ignore]
        calls = {node.name: partial(self._owner_seen, node, slot) for node in primaries}
        replies = await self._workers.run(calls, MAJORITY_BOUND_S)
        decided = Majority.decide(len(calls), list(replies.values()))
        if decided.named is not None:
            self._slot_epochs[slot] = decided.named.epoch
        return decided

    async def _owner_seen(self, node: ClusterNode, slot: int) -> tuple[str, int] | None:
        """``node``'s view of ``slot``'s primary and epoch (`slot_owner`); None when it fails."""
        try:
            with backend_errors("CLUSTER NODES"):
                view = await read_nodes(node)
        except BackendError:
            return None
        return slot_owner(view, slot)

    async def _epoch_grant(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str]
    ) -> tuple[object, int | None, str | None]:
        """``acquire.lua`` with the floor of its slot's epoch (the one the primaries' majority
        named last, asked first when not known yet), on the slot's primary, and why it does not
        count (None when it does): once it ran (and its ``WAIT``), a majority of the primaries
        must name that node the slot's primary at that epoch (`Majority.confirms`)."""
        keys = lease_keys(self.prefix, key)
        slot = key_slot(keys[0].encode())
        if slot not in self._slot_epochs:
            await self._slot_majority(slot)
        epoch = self._slot_epochs.get(slot, 0)
        await read_slot_map(self.cluster)
        ran_on = self._node_of_key(keys[0]).name
        args = (owner_token, ttl_ms, self.grants.mode_arg(floor(epoch)), "primary", *queue)
        reply, acks = await self._run(self.cluster, ACQUIRE, keys, args)
        why = (await self._slot_majority(slot)).confirms(ran_on, epoch)
        return reply, acks, why or older_token(reply, key, epoch)

    async def _memory_policies(self, client: object = None) -> dict[str, str | None]:
        """The ``maxmemory_policy`` field of ``INFO memory`` of every primary, by its
        ``host:port``, each asked in turn over the backend's client (``client`` is not used:
        the primaries are the cluster's). None where a reply has no such field."""
        await read_slot_map(self.cluster)
        return {
            node.name: policy_of(await self.cluster.info("memory", target_nodes=node))
            for node in self.cluster.get_primaries()  # type: ignore[no-untyped-call, unused-ignore]
        }

    def _node_of_key(self, key: str) -> ClusterNode:
        node = node_for(self.cluster, key)
        if node is None:  # a slot no node serves
            raise BackendError(f"no node serves the slot of {key!r}", sent="no", wrote="no")
        return node

    def release_waiter(self) -> AsyncClusterHandoff:
        """The manager's release waiter: the hand-off queue and its listener, on sharded pub/sub
        where the cluster has it (`AsyncClusterHandoff`)."""
        return AsyncClusterHandoff(self.client, self.prefix)

    async def release(self, key: str, owner_token: str) -> bool:
        # a hand-off grant's mode (its slot's floor with epoch tokens); SPUBLISH
        slot = key_slot(lease_key(self.prefix, key).encode())
        args = (owner_token, self.grants.mode_arg(floor(self._slot_epochs.get(slot, 0))), "shard")
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
        calls = {node: partial(self._renew_node, items, groups) for node, groups in nodes.items()}
        replies = await self._workers.run(calls, bound_s)
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

    async def close(self) -> None:
        """Stop the node workers (a sync worker still blocked on a hung node ends at the client's
        socket timeout) and close the client if the backend made it."""
        self._workers.close()
        await super().close()
