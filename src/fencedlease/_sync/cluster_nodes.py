"""What the sync Redis Cluster backend does per node, where the asyncio face uses tasks: each
node's share of a renewal batch on a worker thread of that node's own (`NodeWorkers`), a script
and its ``WAIT`` on one node's connection (`send_acked`), and the slot map (`read_slot_map`).
Only I/O: every decision is made once for both faces, in the backend generated from
`fencedlease._async.cluster_backend` and in `fencedlease._redis.cluster`. The asyncio twin is
`fencedlease._async.cluster_nodes`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TypeVar

from redis.cluster import ClusterNode, RedisCluster

from fencedlease._core import fork as _fork
from fencedlease._core.clock import mark_send, send_mark
from fencedlease._core.threads import DaemonThreadPool, shutdown_pool
from fencedlease._redis.cluster import AckedCall
from fencedlease._redis.scripts import waited

from .scripts import connected

__all__ = ["NodeWorkers", "node_for", "read_slot_map", "send_acked"]

R = TypeVar("R")


class NodeWorkers:
    """Runs each node's share of a renewal batch on that node's own worker thread
    (``fencedlease-cluster-<host:port>``), the nodes at once: a node that hangs holds up no other
    node's renewals, neither in this batch nor in the next. In a forked child the parent's
    workers are forgotten (`fencedlease._core.fork`) and the child's next batch starts its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, DaemonThreadPool] = {}
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        """Forget the parent's workers (their threads do not exist here). No I/O."""
        self._lock = threading.Lock()
        self._workers = {}

    def run(self, calls: Mapping[str, Callable[[], R]], timeout_s: float) -> dict[str, R | None]:
        """Each node's ``call()`` on its worker, at once; its result, or None for a node whose
        call was not done within ``timeout_s`` seconds (it runs on, its reply unused).

        Raises:
            Exception: what a call that finished in time raised.
        """
        futures: dict[str, Future[R]] = {
            node: self._worker(node).submit(call) for node, call in calls.items()
        }
        done, _ = wait_futures(futures.values(), timeout=timeout_s)
        return {node: f.result() if f in done else None for node, f in futures.items()}

    def _worker(self, node: str) -> DaemonThreadPool:
        with self._lock:
            pool = self._workers.get(node)
            if pool is None:
                pool = DaemonThreadPool(1, thread_name_prefix=f"fencedlease-cluster-{node}")
                self._workers[node] = pool
            return pool

    def close(self) -> None:
        """Stop the workers (a thread still blocked on a hung node ends at the client's socket
        timeout)."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for pool in workers:
            shutdown_pool(pool, time.monotonic())


def node_for(cluster: RedisCluster, key: str) -> ClusterNode | None:
    """The primary serving ``key``'s slot in the client's slot map.

    Raises:
        redis.exceptions.SlotNotCoveredError: no node serves it.
    """
    node: ClusterNode | None = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
    return node


def read_slot_map(cluster: RedisCluster) -> None:
    """Nothing to read: a sync client read the slot map when it was made."""


def send_acked(node: ClusterNode, source: bool, call: AckedCall) -> list[object]:
    """``call``'s script (EVALSHA, or EVAL of its source when ``source``) and its ``WAIT`` in one
    pipeline on ``node``'s client; each reply or the error in its place (a connection error
    raises)."""
    client = node.redis_connection
    if send_mark() is not None:
        connected(client)
        mark_send()
    replies: list[object] = waited(client, source, *call).execute(raise_on_error=False)
    return replies
