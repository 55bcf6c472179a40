# GENERATED from src/fencedlease/aio/_cluster_calls.py by `python scripts/unasync.py`: do not edit.
# Edit that source, then run it again (CI runs it with --check, failing while stale).
"""The calls of the Redis Cluster backend that both faces make alike: a release on its name's
slot, and one node's share of a renewal batch (how a batch is split and merged:
`fencedlease._redis.cluster`). How the nodes are waited for differs (a worker thread per node
here, tasks on the asyncio face), so the backends themselves are written by hand. Generated from
`fencedlease.aio._cluster_calls` (``scripts/unasync.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.cluster import RedisCluster

from ._errors import BackendError
from ._redis.cluster import NodeReplies, by_node, node_name, shard_bound_s
from ._redis.errors import backend_errors
from ._redis.keys import lease_keys, renew_many_args
from ._redis.replies import decode_release, decode_renew_many
from ._redis.scripts import RELEASE, RENEW_MANY, run_script

__all__ = ["Items", "release_on_slot", "renew_node", "split_by_node"]

Items = Sequence[tuple[str, str, int]]
"""A renewal batch: ``(key, owner_token, ttl_ms)`` a lease."""


def split_by_node(
    cluster: RedisCluster, prefix: str, items: Items, bound_ms: int | None
) -> tuple[float, dict[str, list[list[int]]]]:
    """How long the batch ``items`` waits for one node, in seconds (`shard_bound_s`), and its
    slot groups by the node that serves them (`by_node`, ``host:port`` as `node_name` says). No
    I/O."""
    nodes = by_node(prefix, items, lambda slot: node_name(cluster, slot))
    return shard_bound_s(items, bound_ms), nodes


def release_on_slot(
    cluster: RedisCluster, prefix: str, fencing: str, key: str, owner_token: str
) -> bool:
    """Release ``key`` held with ``owner_token`` on the primary of its slot, waking its waiter by
    ``SPUBLISH`` where the cluster has it (``fencing``: the grants' mode). True when released.

    Raises:
        BackendError: the store failed (the redis-py error in ``__cause__``).
    """
    args = (owner_token, fencing, "shard")  # a hand-off grant's mode; SPUBLISH
    with backend_errors(f"release {key!r}"):
        reply = run_script(cluster, RELEASE, lease_keys(prefix, key), args)
    return decode_release(reply, key)


def renew_node(
    cluster: RedisCluster, prefix: str, items: Items, groups: list[list[int]]
) -> NodeReplies:
    """One node's share of a renewal batch: ``groups`` (the indices into ``items`` of each of its
    slots) in turn, one ``renew_many.lua`` a slot. A failed call's ``BackendError`` stands in
    its leases' places and among the node's failures; it stops no other slot's call."""
    replies: list[int | BaseException] = []
    failed: list[BaseException] = []
    for indices in groups:
        batch = [items[i] for i in indices]
        keys, args = renew_many_args(prefix, batch)
        try:
            with backend_errors(f"renew {len(batch)} leases"):
                reply = run_script(cluster, RENEW_MANY, keys, args)
        except BackendError as exc:
            replies.extend([exc] * len(batch))
            failed.append(exc)
            continue
        replies.extend(decode_renew_many(batch, reply))
    return replies, failed
