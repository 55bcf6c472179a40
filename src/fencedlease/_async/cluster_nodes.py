"""What the asyncio Redis Cluster backend does per node, where the sync face uses threads: each
node's share of a renewal batch as a task (`NodeWorkers`), a script and its ``WAIT`` on one
node's connection (`send_acked`), and the slot map read before a node is chosen
(`read_slot_map`). Only I/O: every decision (grouping by slot, what a MOVED or a silent node
means, the bound) is made once for both faces, in `fencedlease._async.cluster_backend` (the sync
backend is generated from it) and `fencedlease._redis.cluster`. The sync twin is
`fencedlease._sync.cluster_nodes`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster

from fencedlease._core.clock import mark_send, send_mark
from fencedlease._redis.cluster import AckedCall

__all__ = ["NodeWorkers", "node_for", "read_slot_map", "send_acked"]

R = TypeVar("R")


class NodeWorkers:
    """Runs each node's share of a renewal batch as a task of its own, the nodes at once."""

    async def run(
        self, calls: Mapping[str, Callable[[], Awaitable[R]]], timeout_s: float
    ) -> dict[str, R | None]:
        """Each node's ``call()`` at once; its result, or None for a node whose call was not done
        within ``timeout_s`` seconds (that task is cancelled).

        Raises:
            Exception: what a call that finished in time raised.
        """
        tasks = {node: asyncio.ensure_future(call()) for node, call in calls.items()}
        done, pending = await asyncio.wait(tasks.values(), timeout=timeout_s)
        for task in pending:
            task.cancel()
        return {node: task.result() if task in done else None for node, task in tasks.items()}

    def close(self) -> None:
        """Nothing to stop: a batch's tasks end with it."""


def node_for(cluster: RedisCluster, key: str) -> ClusterNode | None:
    """The primary serving ``key``'s slot in the client's slot map (None: no node serves it)."""
    return cluster.get_node_from_key(key)


async def read_slot_map(cluster: RedisCluster) -> None:
    """Read the slot map if the client has not yet (an asyncio client reads it on first use)."""
    await cluster.initialize()


async def send_acked(node: ClusterNode, source: bool, call: AckedCall) -> list[object]:
    """``call``'s script (EVALSHA, or EVAL of its source when ``source``) and its ``WAIT`` sent
    together on one of ``node``'s connections; each reply or the error in its place (a
    connection error raises)."""
    if send_mark() is not None:
        mark_send()
    commands = [
        PipelineCommand(0, *call.command(source)),
        PipelineCommand(1, "WAIT", call.replicas, call.timeout_ms),
    ]
    await node.execute_pipeline(commands)
    return [command.result for command in commands]
