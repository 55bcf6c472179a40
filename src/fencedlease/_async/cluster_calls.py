"""The calls on one cluster node that redis-py's two cluster clients make differently (their APIs
differ, not only by ``await``): written by hand on both faces, as the primitives are, and imported
by `fencedlease._async.cluster_nodes` and its generated sync namesake as ``.cluster_calls``."""

from __future__ import annotations

import redis.asyncio
from redis.asyncio.cluster import ClusterNode, PipelineCommand

from fencedlease._core.clock import mark_send, send_mark
from fencedlease._redis.scripts import AckedCall

__all__ = ["read_nodes", "read_slot_map", "send_acked"]


async def read_slot_map(cluster: redis.asyncio.RedisCluster) -> None:
    """Read the slot map if the
    client has not yet (an asyncio cluster client reads it on first use)."""
    await cluster.initialize()


async def send_acked(node: ClusterNode, source: bool, call: AckedCall) -> list[object]:
    """The script and its ``WAIT``
    sent together on one of ``node``'s connections (an asyncio cluster node is its own pool)."""
    if send_mark() is not None:
        mark_send()
    commands = [
        PipelineCommand(0, *call.command(source)),
        PipelineCommand(1, "WAIT", call.replicas, call.timeout_ms),
    ]
    await node.execute_pipeline(commands)
    return [command.result for command in commands]


async def read_nodes(node: ClusterNode) -> object:
    """``node``'s ``CLUSTER NODES``, as redis-py parses it (a dict of ``"host:port"`` to the
    node's fields), on one of its connections; the error in its place."""
    command = PipelineCommand(0, "CLUSTER NODES")
    await node.execute_pipeline([command])
    return command.result
