"""The calls on one cluster node that redis-py's two cluster clients make differently (their APIs
differ, not only by ``await``): written by hand on both faces, as the primitives are, and imported
by `fencedlease._sync.cluster_nodes` (generated) as ``.cluster_calls``."""

from __future__ import annotations

from redis.cluster import ClusterNode, RedisCluster

from fencedlease._core.clock import mark_send, send_mark
from fencedlease._redis.scripts import AckedCall, waited

from .scripts import connected

__all__ = ["read_nodes", "read_slot_map", "send_acked"]


def read_slot_map(cluster: RedisCluster) -> None:
    """Read the slot map if the client has not yet: nothing to read for a sync client, which read
    it when it was made (the asyncio face's reads it on first use)."""


def send_acked(node: ClusterNode, source: bool, call: AckedCall) -> list[object]:
    """``call``'s script (EVALSHA, or EVAL of its source when ``source``) and its ``WAIT`` in one
    pipeline on ``node``'s client; each reply or the error in its place (a connection error
    raises). Under `fencedlease._core.clock.marking_sends` the connection is made first and the
    send marked (the asyncio face's reads it on first use)."""
    client = node.redis_connection
    if send_mark() is not None:
        connected(client)
        mark_send()
    replies: list[object] = waited(client, source, *call).execute(raise_on_error=False)
    return replies


def read_nodes(node: ClusterNode) -> object:
    """``node``'s ``CLUSTER NODES``, as redis-py parses it (a dict of ``"host:port"`` to the
    node's fields), on ``node``'s client."""
    return node.redis_connection.cluster("NODES")
