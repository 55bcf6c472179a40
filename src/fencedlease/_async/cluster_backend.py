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
)
from fencedlease._redis.cluster_majority import (
    ClusterView,
    SlotTable,
    renewal_doubt,
    renewed_slots,
    settled,
    unconfirmed_renewals,
)
from fencedlease._redis.errors import Redirected, ScriptNotLoaded, backend_errors
from fencedlease._redis.eviction import policy_of
from fencedlease._redis.keys import lease_key, lease_keys, renew_many_args
from fencedlease._redis.replication import Fencing, older_token
from fencedlease._redis.replies import decode_release, decode_renew_many
from fencedlease._redis.scripts import ACQUIRE, RELEASE, RENEW_MANY, Script, acked_replies
from fencedlease._redis.sentinel import MAJORITY_BOUND_S

from .cluster_nodes import NodeWorkers, node_for, read_nodes, read_slot_map, send_acked
from .cluster_views import AsyncSharedViews
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
        self._voters = NodeWorkers()  # the view's reads: never behind a node's renewals
        # a read ends within MAJORITY_BOUND_S (and the slot map's first read): twice that is a
        # read that will not end
        self._views = AsyncSharedViews(self._read_view, 2 * MAJORITY_BOUND_S)
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
        """Whether grants take the floor of their slot's epoch and grants and renewals the
        cluster majority's word (``fencing="epoch"``). No I/O."""
        return self.grants.fencing == "epoch"

    async def _read_view(self) -> ClusterView:
        """Every primary of the slot map asked at once for its ``CLUSTER NODES`` (each bounded by
        `MAJORITY_BOUND_S`, on a worker of the view's own: a read never waits behind a node's
        renewals), each reply parsed once; a primary that fails or is silent counts against. The
        read ends as soon as a majority answered alike (`settled`): a stalled primary costs no
        call its bound."""
        await read_slot_map(self.cluster)
        primaries = self.cluster.get_primaries()  # type: ignore[no-untyped-call, unused-ignore]
        calls = {node.name: partial(self._table_of, node) for node in primaries}
        replies = await self._voters.run_until(
            calls, MAJORITY_BOUND_S, partial(settled, len(calls))
        )
        return ClusterView(len(calls), list(replies.values()))

    async def _table_of(self, node: ClusterNode) -> SlotTable | None:
        """``node``'s ``CLUSTER NODES`` as a `SlotTable`; None when it fails."""
        try:
            with backend_errors("CLUSTER NODES"):
                return SlotTable.of(await read_nodes(node))
        except BackendError:
            return None

    async def _slot_majority(self, slot: int, mark: int) -> Majority[str]:
        """What the primaries' majority says of ``slot``'s primary and its ``configEpoch``, in a
        view read that started after ``mark`` (`AsyncSharedViews.after`: one read for every
        call waiting at once); the epoch named, if any, kept for the slot's next calls."""
        return self._noted((await self._views.after(mark)).majority(slot), slot)

    def _noted(self, decided: Majority[str], slot: int) -> Majority[str]:
        if decided.named is not None:
            self._slot_epochs[slot] = decided.named.epoch
        return decided

    def _doubt(
        self, decided: Majority[str], slot: int, ran_on: str, epoch: int | None
    ) -> str | None:
        """Why calls on ``slot`` that ran on ``ran_on`` with the slot's ``epoch`` of before do
        not count, from ``decided`` (`renewal_doubt`); the epoch it names kept. No I/O."""
        return renewal_doubt(self._noted(decided, slot), ran_on, epoch)

    async def _slot_epoch(self, slot: int) -> int:
        """The epoch the majority named last for ``slot`` (from the newest view, read first
        when there is none): a grant's floor. A stale one is safe: the grant is then not
        confirmed (`Majority.confirms`)."""
        if slot not in self._slot_epochs:
            latest = self._views.latest
            if latest is None:
                await self._slot_majority(slot, self._views.mark())
            else:
                self._noted(latest.majority(slot), slot)
        return self._slot_epochs.get(slot, 0)

    async def _confirm(self, slot: int, ran_on: str, epoch: int | None, mark: int) -> str | None:
        """Why calls on ``slot`` that ran on ``ran_on`` before ``mark`` was taken do not count
        (`_doubt`, in a view read after ``mark``); None when they do. The slot map follows the
        majority (`_follow`)."""
        decided = await self._slot_majority(slot, mark)
        await self._follow(decided, slot)
        return self._doubt(decided, slot, ran_on, epoch)

    async def _follow(self, decided: Majority[str], slot: int) -> None:
        """Read the slot map again when the majority names another primary for ``slot`` than
        the client's map does (a deposed primary answers on: the client would go on calling
        it), so that the next call goes where the majority names; not when the map already
        names it (redis-py read it again after a MOVED or a failed node)."""
        named = decided.named
        if named is not None and named.address != self._node_of(slot):
            await self.cluster.nodes_manager.initialize()

    async def _epoch_grant(
        self, key: str, owner_token: str, ttl_ms: int, queue: Sequence[str]
    ) -> tuple[object, int | None, str | None]:
        """``acquire.lua`` with the floor of its slot's epoch (`_slot_epoch`), on the slot's
        primary, and why it does not count (None when it does): a majority of the primaries, in
        a view read that started once the script and its ``WAIT`` had returned, must name that
        node the slot's primary at that epoch (`Majority.confirms`)."""
        keys = lease_keys(self.prefix, key)
        slot = key_slot(keys[0].encode())
        epoch = await self._slot_epoch(slot)
        await read_slot_map(self.cluster)
        ran_on = self._node_of_key(keys[0]).name
        args = (owner_token, ttl_ms, self.grants.mode_arg(floor(epoch)), "primary", *queue)
        reply, acks = await self._run(self.cluster, ACQUIRE, keys, args)
        why = await self._confirm(slot, ran_on, epoch, self._views.mark())
        return reply, acks, why or older_token(reply, key, epoch)

    async def _renewal(
        self, client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> tuple[object, int | None, str | None]:
        """`_run` of a renewal script on ``keys[0]``'s slot, and with ``fencing="epoch"`` why
        it does not count (`_confirm`; None when it does)."""
        if not self._epochs():
            return (*await self._run(client, script, keys, args), None)
        slot = key_slot(keys[0].encode())
        epoch = self._slot_epochs.get(slot)
        await read_slot_map(self.cluster)
        ran_on = self._node_of_key(keys[0]).name
        reply, acks = await self._run(client, script, keys, args)
        return reply, acks, await self._confirm(slot, ran_on, epoch, self._views.mark())

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
        epochs = dict(self._slot_epochs)  # each slot's, before any of its renewals is sent
        replies = await self._workers.run(calls, bound_s)
        results = merge_nodes(len(items), nodes, replies, bound_s)
        if not self._epochs():
            return results
        # One view for the whole batch, read once every node's calls returned (or were given
        # up on), shared with the grants confirming meanwhile: one read per tick, not per lease.
        renewed = renewed_slots(self.prefix, items, nodes, results)
        view = await self._views.after(self._views.mark())
        doubts = {
            (node, slot): self._doubt(view.majority(slot), slot, node, epochs.get(slot))
            for node, slot in renewed
        }
        for slot in {slot for _, slot in renewed}:
            await self._follow(view.majority(slot), slot)
        return unconfirmed_renewals(items, renewed, results, doubts)

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
        self._voters.close()
        await super().close()
