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

from ._errors import BackendError
from ._handoff_sync import Handoff
from ._protocol import AcquireReply, InspectReply
from ._redis.cluster import finish_batch, group_failed, shard_bound_s, slot_groups
from ._redis.errors import backend_errors
from ._redis.keys import fence_key, lease_key, lease_keys, renew_many_args
from ._redis.replies import (
    decode_acquire,
    decode_inspect,
    decode_release,
    decode_renew,
    decode_renew_many,
)
from ._redis.scripts import ACQUIRE, INSPECT, RELEASE, RENEW, RENEW_MANY, run_script
from ._renewer import shutdown_pool
from ._threads import DaemonThreadPool
from ._validate import check_ms, check_prefix

__all__ = ["RedisClusterBackend"]

_Items = Sequence[tuple[str, str, int]]
_NodeReplies = tuple[list[int | BaseException], list[BaseException]]


class RedisClusterBackend:
    """Leases in a Redis Cluster under ``prefix``, over a ``redis.cluster.RedisCluster`` (the key
    layout of `fencedlease._redis.keys`: every key of a name in one hash slot); a
    [`LeaseBackend`][fencedlease.LeaseBackend].

    Each script runs on the primary of its name's slot; a renewal batch is split by slot, one
    ``renew_many.lua`` per slot, each node's slots in turn on a worker thread of that node's own
    (``fencedlease-cluster-<host:port>``), the nodes at once. ``shard_timeout_ms``: how long a
    batch waits for one node (None: a third of the batch's shortest TTL); a node that has not
    answered by then, or failed, fails only its own leases' renewals, with a
    [`BackendError`][fencedlease.BackendError] in their places. ``owns_client``: close the client
    in [`close`][fencedlease.RedisClusterBackend.close]. Every redis-py error,
    ``RedisClusterException`` and MOVED/ASK redirections redis-py gave up on included, is raised
    as a ``BackendError`` with the original in ``__cause__``. A waiter is woken by a release on
    any node (the hand-off's ``PUBLISH`` reaches every node of a cluster).

    Raises:
        ValidationError: ``prefix`` is not a non-empty str, or holds ``{`` or ``}`` (a brace would
            split a lease from its counter across slots); ``shard_timeout_ms`` is not an int >= 1.
    """

    def __init__(
        self,
        client: RedisCluster,
        prefix: str = "fencedlease",
        *,
        shard_timeout_ms: int | None = None,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._bound_ms = (
            None if shard_timeout_ms is None else check_ms("shard_timeout_ms", shard_timeout_ms, 1)
        )
        self._owns_client = owns_client
        self._lock = threading.Lock()
        self._workers: dict[str, DaemonThreadPool] = {}

    def release_waiter(self) -> Handoff:
        """The manager's release waiter: the hand-off queue and its listener thread."""
        return Handoff(self.client, self.prefix)  # type: ignore[arg-type]

    def fencing_scope(self, key: str) -> str:
        """``<prefix>:{<escaped key>}:fence``, the name of ``key``'s fencing counter. No I/O."""
        return fence_key(self.prefix, key)

    def acquire(self, key: str, owner_token: str, ttl_ms: int) -> AcquireReply:
        with backend_errors(f"acquire {key!r}"):
            reply = run_script(
                self.client, ACQUIRE, lease_keys(self.prefix, key), (owner_token, ttl_ms)
            )
        return decode_acquire(reply, key)

    def renew(self, key: str, owner_token: str, ttl_ms: int) -> int:
        with backend_errors(f"renew {key!r}"):
            reply = run_script(
                self.client, RENEW, (lease_key(self.prefix, key),), (owner_token, ttl_ms)
            )
        return decode_renew(reply, key)

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
        by_node: dict[str, list[list[int]]] = {}
        for slot, indices in slot_groups(self.prefix, items):
            by_node.setdefault(self._node_of(slot), []).append(indices)
        futures: dict[str, Future[_NodeReplies]] = {
            node: self._worker(node).submit(self._renew_node, items, groups)
            for node, groups in by_node.items()
        }
        done, _ = wait_futures(futures.values(), timeout=bound_s)
        results: list[int | BaseException | None] = [None] * len(items)
        failures: list[BaseException] = []
        for node, future in futures.items():
            indices = [i for group in by_node[node] for i in group]
            if future in done:
                values, failed = future.result()
            else:
                error = group_failed(len(indices), node, bound_s)
                values, failed = [error] * len(indices), [error]
            for index, value in zip(indices, values, strict=True):
                results[index] = value
            failures.extend(failed)
        return finish_batch(results, failures)

    def _node_of(self, slot: int) -> str:
        """The name of the node serving ``slot`` as the client knows it (``slot:<n>`` for a slot
        no node serves)."""
        try:
            return str(self.client.nodes_manager.get_node_from_slot(slot).name)
        except Exception:  # the slot is not covered: a group of its own
            return f"slot:{slot}"

    def _worker(self, node: str) -> DaemonThreadPool:
        with self._lock:
            pool = self._workers.get(node)
            if pool is None:
                pool = DaemonThreadPool(1, thread_name_prefix=f"fencedlease-cluster-{node}")
                self._workers[node] = pool
            return pool

    def _renew_node(self, items: _Items, groups: list[list[int]]) -> _NodeReplies:
        """The replies of one node's slots, in the order of ``groups``' indices, and the errors
        of the slots whose call failed (each in its leases' places)."""
        replies: list[int | BaseException] = []
        failed: list[BaseException] = []
        for indices in groups:
            batch = [items[i] for i in indices]
            keys, args = renew_many_args(self.prefix, batch)
            try:
                with backend_errors(f"renew {len(batch)} leases"):
                    reply = run_script(self.client, RENEW_MANY, keys, args)
            except BackendError as exc:
                replies.extend([exc] * len(batch))
                failed.append(exc)
                continue
            replies.extend(decode_renew_many(batch, reply))
        return replies, failed

    def release(self, key: str, owner_token: str) -> bool:
        with backend_errors(f"release {key!r}"):
            reply = run_script(self.client, RELEASE, lease_keys(self.prefix, key), (owner_token,))
        return decode_release(reply, key)

    def inspect(self, key: str) -> InspectReply | None:
        keys = (lease_key(self.prefix, key), fence_key(self.prefix, key))
        with backend_errors(f"inspect {key!r}"):
            reply = run_script(self.client, INSPECT, keys, ())
        return decode_inspect(reply, key)

    def force_release(self, key: str) -> bool:
        with backend_errors(f"force_release {key!r}"):
            return bool(self.client.delete(lease_key(self.prefix, key)))

    def close(self) -> None:
        """Stop the node workers (a thread still blocked on a hung node ends at the client's
        socket timeout) and close the client if the backend made it."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for pool in workers:
            shutdown_pool(pool, time.monotonic())
        if self._owns_client:
            with backend_errors("close"):
                self.client.close()
