"""The asyncio twins of `run_script` and
`fencedlease._redis.clients`, over ``redis.asyncio``: the same policy, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis.asyncio.cluster import ClusterNode, PipelineCommand

from fencedlease._core.clock import mark_send, send_mark

from .errors import ScriptNotLoaded, map_exceptions
from .pool import connection_args
from .scripts import AckedCall, Script, acked_replies, eval_reply, primers, waited

__all__ = [
    "connected",
    "dedicated_client",
    "read_slot_map",
    "run_acked",
    "run_script",
    "send_acked",
    "waits_for_connection",
]


async def run_script(
    client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
    script: Script,
    keys: Sequence[str],
    args: Sequence[Any],
) -> Any:
    """`fencedlease._redis.scripts.run_script`, awaited: EVALSHA, one EVAL on NOSCRIPT; under
    `fencedlease._core.clock.marking_sends`, the connection made first and each send marked."""
    if send_mark() is not None:
        await connected(client)
        mark_send()
    try:
        with map_exceptions(ScriptNotLoaded):
            return await client.evalsha(script.sha, len(keys), *keys, *args)
    except ScriptNotLoaded:
        mark_send()
        primes = primers(script, keys)
        if not primes or not isinstance(client, redis.asyncio.Redis):
            return await client.eval(script.source, len(keys), *keys, *args)
        pipe = client.pipeline(transaction=False)
        pipe.eval(script.source, len(keys), *keys, *args)
        for other, other_keys, other_args in primes:
            pipe.eval(other.source, len(other_keys), *other_keys, *other_args)
        return eval_reply(await pipe.execute(raise_on_error=False))


async def run_acked(client: redis.asyncio.Redis, call: AckedCall) -> tuple[Any, int]:
    """`fencedlease._redis.scripts.run_acked`, awaited: the script and ``WAIT`` in one pipeline
    on one connection; the script's reply and the replicas' acknowledgements."""
    if send_mark() is not None:
        await connected(client)
        mark_send()
    replies: list[Any] = await waited(client, False, *call).execute(raise_on_error=False)
    if ScriptNotLoaded.matches(replies[0]):
        mark_send()
        replies = await waited(client, True, *call).execute(raise_on_error=False)
    return acked_replies(replies)


async def connected(client: redis.asyncio.Redis | redis.asyncio.RedisCluster) -> None:
    """`fencedlease._redis.scripts.connected` for ``redis.asyncio``: a connection of the
    pool made (redis-py connects what its pool hands out) and given back before the command;
    a cluster client is left as it is."""
    if not isinstance(client, redis.asyncio.Redis) or client.connection is not None:
        return
    pool = client.connection_pool
    idle = getattr(pool, "_available_connections", None)  # see the sync twin
    if idle and getattr(idle[-1], "is_connected", False):
        return
    connection = await pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call, unused-ignore]
    # Given back even if the caller is cancelled right here: a connection neither used nor
    # returned would stay open, out of the pool's sight, until the pool is closed.
    await asyncio.shield(pool.release(connection))


def dedicated_client(client: redis.asyncio.Redis) -> redis.asyncio.Redis:
    """`fencedlease._redis.clients.dedicated_client` for ``redis.asyncio``."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or type(pool) not in (
        redis.asyncio.ConnectionPool,
        redis.asyncio.BlockingConnectionPool,
    ):
        return client
    own = redis.asyncio.ConnectionPool(
        connection_class=pool.connection_class, **pool.connection_kwargs
    )
    return redis.asyncio.Redis(connection_pool=own)


def waits_for_connection(client: redis.asyncio.Redis) -> bool:
    """`fencedlease._redis.clients.waits_for_connection` for ``redis.asyncio``."""
    # a cluster client has neither: its nodes' pools are its own business
    return getattr(client, "connection", None) is None and isinstance(
        getattr(client, "connection_pool", None), redis.asyncio.BlockingConnectionPool
    )


async def read_slot_map(cluster: redis.asyncio.RedisCluster) -> None:
    """`fencedlease._redis.cluster.read_slot_map` for ``redis.asyncio``: read the slot map if the
    client has not yet (an asyncio cluster client reads it on first use)."""
    await cluster.initialize()


async def send_acked(node: ClusterNode, source: bool, call: AckedCall) -> list[object]:
    """`fencedlease._redis.cluster.send_acked` for ``redis.asyncio``: the script and its ``WAIT``
    sent together on one of ``node``'s connections (an asyncio cluster node is its own pool)."""
    if send_mark() is not None:
        mark_send()
    commands = [
        PipelineCommand(0, *call.command(source)),
        PipelineCommand(1, "WAIT", call.replicas, call.timeout_ms),
    ]
    await node.execute_pipeline(commands)
    return [command.result for command in commands]
