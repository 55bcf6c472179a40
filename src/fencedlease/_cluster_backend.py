"""The Redis Cluster backend (sync): the lease scripts over a ``redis.cluster.RedisCluster``.

The twin of `fencedlease.aio._cluster_backend` (which says how calls are routed); written by hand
rather than generated because the faces wait for the nodes differently: here each node's share of
a renewal batch runs on that node's own worker thread, so a node that hangs holds up no other
node's renewals, neither in this batch nor in the next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures

from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import MovedError

from . import _fork
from ._errors import BackendError
from ._handoff_cluster import ClusterHandoff
from ._redis.cluster import (
    NodeReplies,
    by_node,
    check_shard_timeout,
    merge_nodes,
    node_name,
    shard_bound_s,
    short_renewals,
)
from ._redis.errors import backend_errors
from ._redis.keys import lease_key, lease_keys, renew_many_args
from ._redis.replication import Fencing, PrimaryWatch
from ._redis.replies import decode_release, decode_renew_many
from ._redis.scripts import RELEASE, RENEW_MANY, Script, run_script
from ._redis_backend import RedisBackend
from ._renewer import shutdown_pool
from ._threads import DaemonThreadPool

__all__ = ["RedisClusterBackend"]

_Items = Sequence[tuple[str, str, int]]


class RedisClusterBackend(RedisBackend):
    """Leases in a Redis Cluster under ``prefix``, over a ``redis.cluster.RedisCluster`` (the key
    layout of `fencedlease._redis.keys`: every key of a name in one hash slot); a
    [`LeaseBackend`][fencedlease.LeaseBackend]. A [`RedisBackend`][fencedlease.RedisBackend] whose
    batch renewal and hand-off know the cluster's shards.

    Each script runs on the primary of its name's slot; a renewal batch is split by slot, one
    ``renew_many.lua`` per slot, each node's slots in turn on a worker thread of that node's own
    (``fencedlease-cluster-<host:port>``), the nodes at once. ``shard_timeout_ms``: how long a
    batch waits for one node (None: a third of the batch's shortest TTL); a node that has not
    answered by then, or failed, fails only its own leases' renewals, with a
    [`BackendError`][fencedlease.BackendError] in their places. ``owns_client``: close the client
    in [`close`][fencedlease.RedisClusterBackend.close]. Every redis-py error,
    ``RedisClusterException`` and MOVED/ASK redirections redis-py gave up on included, is raised
    as a ``BackendError`` with the original in ``__cause__``. A release wakes its waiter by
    ``SPUBLISH`` on Redis 7+ (sharded pub/sub, heard on the slot's node), by ``PUBLISH`` on 6.2
    (heard on every node): `fencedlease._handoff_cluster`.

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
        self._lock = threading.Lock()
        self._workers: dict[str, DaemonThreadPool] = {}
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child (see `fencedlease._fork`): forget the parent's node workers (their
        threads do not exist here); the next batch starts the child's own. No I/O."""
        self._lock = threading.Lock()
        self._workers = {}

    def _run(
        self, client: object, script: Script, keys: Sequence[str], args: Sequence[object]
    ) -> tuple[object, int | None]:
        """The script's reply, and with ``replica_acks`` the replicas' acks: the script and
        ``WAIT`` pipelined on one connection of the node serving ``keys[0]``'s slot (every key
        of a call shares it), so ``WAIT`` counts the replicas of the node that ran the script."""
        if not self.grants.replica_acks:
            return super()._run(self.cluster, script, keys, args)  # type: ignore[arg-type]
        node = self.cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
        try:
            return super()._run(node.redis_connection, script, keys, args)
        except MovedError:  # the slot moved: the script did not run; read the map, once more
            self.cluster.nodes_manager.initialize()
            node = self.cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            return super()._run(node.redis_connection, script, keys, args)

    def release_waiter(self) -> ClusterHandoff:
        """The manager's release waiter: the hand-off queue and its listener thread, on sharded
        pub/sub where the cluster has it (`fencedlease._handoff_cluster`)."""
        return ClusterHandoff(self.client, self.prefix)

    def release(self, key: str, owner_token: str) -> bool:
        args = (owner_token, self.grants.fencing, "shard")  # a hand-off grant's mode; SPUBLISH
        with backend_errors(f"release {key!r}"):
            reply = run_script(self.cluster, RELEASE, lease_keys(self.prefix, key), args)
        return decode_release(reply, key)

    def renew_many(self, items: _Items) -> list[int | BaseException]:
        """[`renew`][fencedlease.LeaseBackend.renew] for each item: one ``renew_many.lua`` per
        hash slot, each node's slots in turn on that node's worker, the nodes at once.

        Raises:
            BackendError: every call failed (the first error; else each failed call's error
                stands in its leases' places).
        """
        if not items:
            return []
        bound_s = shard_bound_s(items, self._bound_ms)
        nodes = by_node(self.prefix, items, self._node_of)
        futures: dict[str, Future[NodeReplies]] = {
            node: self._worker(node).submit(self._renew_node, items, groups)
            for node, groups in nodes.items()
        }
        done, _ = wait_futures(futures.values(), timeout=bound_s)
        replies = {node: f.result() if f in done else None for node, f in futures.items()}
        return merge_nodes(len(items), nodes, replies, bound_s)

    def _node_of(self, slot: int) -> str:
        return node_name(self.cluster, slot)

    def _worker(self, node: str) -> DaemonThreadPool:
        with self._lock:
            pool = self._workers.get(node)
            if pool is None:
                pool = DaemonThreadPool(1, thread_name_prefix=f"fencedlease-cluster-{node}")
                self._workers[node] = pool
            return pool

    def _renew_node(self, items: _Items, groups: list[list[int]]) -> NodeReplies:
        """One node's share: its slots' calls in turn (see `fencedlease._redis.cluster`)."""
        replies: list[int | BaseException] = []
        failed: list[BaseException] = []
        for indices in groups:
            batch = [items[i] for i in indices]
            keys, args = renew_many_args(self.prefix, batch)
            try:
                with backend_errors(f"renew {len(batch)} leases"):
                    reply, acks = self._run(self.cluster, RENEW_MANY, keys, args)
            except BackendError as exc:
                replies.extend([exc] * len(batch))
                failed.append(exc)
                continue
            replies.extend(
                short_renewals(self.grants, batch, decode_renew_many(batch, reply), acks)
            )
        return replies, failed

    def close(self) -> None:
        """Stop the node workers (a thread still blocked on a hung node ends at the client's
        socket timeout) and close the client if the backend made it."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for pool in workers:
            shutdown_pool(pool, time.monotonic())
        super().close()
