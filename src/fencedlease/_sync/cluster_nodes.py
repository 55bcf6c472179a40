# GENERATED from src/fencedlease/_async/cluster_nodes.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""What the Redis Cluster backend does per node: each node's share of a renewal batch run at once
with the others (`NodeWorkers`, a task per call or a worker thread per node, from
``.primitives``), a script and its ``WAIT`` on one node's connection (`send_acked`), the slot map
read before a node is chosen (`read_slot_map`), and the node that serves a key (`node_for`). Only
I/O: every decision (grouping by slot, what a MOVED or a silent node means, the bound) is made in
`fencedlease._sync.cluster_backend` and `fencedlease._redis.cluster`; what differs between
redis-py's two cluster clients is in ``.cluster_calls``, hand-written on each face.
"""

from __future__ import annotations

from redis.cluster import ClusterNode, RedisCluster

from .cluster_calls import read_nodes, read_slot_map, send_acked
from .primitives import NodeWorkers

__all__ = ["NodeWorkers", "node_for", "read_nodes", "read_slot_map", "send_acked"]


def node_for(cluster: RedisCluster, key: str) -> ClusterNode | None:
    """The primary serving ``key``'s slot in the client's slot map.

    Raises:
        redis.exceptions.SlotNotCoveredError: no node serves it.
    """
    node: ClusterNode | None = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call, unused-ignore]
    return node
