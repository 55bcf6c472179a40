"""Running the library's Lua scripts (`fencedlease._redis.scripts`: their texts, the NOSCRIPT
policy, the fallback's primers and the replies' reading, decided there without I/O) on a client
of this face, and making sure a connection is made before a timed send.

One NOSCRIPT policy for every script: EVALSHA; after ``SCRIPT FLUSH``, a restart or a failover to a
fresh replica the ``NOSCRIPT`` reply is answered by one EVAL of the same source, which also puts it
back in Redis's script cache. There is no per-call ``SCRIPT LOAD`` or ``SCRIPT EXISTS``: each
operation is one command. Errors are left to the caller's `backend_errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio

from fencedlease._core.clock import mark_send, send_mark
from fencedlease._redis.errors import ScriptNotLoaded, map_exceptions
from fencedlease._redis.pool import connection_args, next_is_made
from fencedlease._redis.scripts import AckedCall, Script, acked_replies, eval_reply, primers, waited

from .primitives import shield

__all__ = ["connected", "run_acked", "run_script"]


async def run_script(
    client: redis.asyncio.Redis | redis.asyncio.RedisCluster,
    script: Script,
    keys: Sequence[str],
    args: Sequence[Any],
) -> Any:
    """Run ``script`` with ``keys`` and ``args`` on ``client``: EVALSHA, and on ``NOSCRIPT`` one
    EVAL of the source (see the module doc); the reply as redis-py gives it.

    Under `fencedlease._core.clock.marking_sends` (an acquire or a renewal batch, whose deadline
    counts from the send) the connection is made first (`connected`) and the send is marked
    right before the EVALSHA, and again right before the EVAL (the refused EVALSHA ran nothing):
    neither the connection's handshake nor the fallback's round trip eats into the lease's margin.

    Raises:
        redis.RedisError: whatever the command raised (map it with `backend_errors`).
    """
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
    """`run_script` of ``call``, followed by its ``WAIT replicas timeout_ms`` on the same
    connection in one round trip (a pipeline: ``WAIT`` counts the replicas that hold the writes
    of the connection it runs on, and Redis refuses it inside a script): the script's reply and
    the number of replicas that acknowledged. On ``NOSCRIPT`` the pair is sent again with EVAL
    (the refused EVALSHA ran nothing). Under `fencedlease._core.clock.marking_sends` each send is
    marked, as in `run_script`.

    Raises:
        redis.RedisError: the script's error (or the WAIT's, or the connection's).
    """
    if send_mark() is not None:
        await connected(client)
        mark_send()
    replies: list[Any] = await waited(client, False, *call).execute(raise_on_error=False)
    if ScriptNotLoaded.matches(replies[0]):
        mark_send()
        replies = await waited(client, True, *call).execute(raise_on_error=False)
    return acked_replies(replies)


async def connected(client: redis.asyncio.Redis | redis.asyncio.RedisCluster) -> None:
    """Make sure ``client``'s next command goes out on a connection already made: take one from its
    pool (redis-py connects it there, handshake included) and give it back, so the command that
    follows takes that same connection (the pool hands out the last one returned). A client with a
    connection of its own, or without a pool (a cluster client), is left as it is; so is one whose
    next connection is already made (`fencedlease._redis.pool.next_is_made`), at no cost.

    Raises:
        redis.RedisError: the connection could not be made (nothing was sent).
    """
    if not isinstance(client, redis.asyncio.Redis) or client.connection is not None:
        return
    pool = client.connection_pool
    if next_is_made(pool):
        return
    connection = await pool.get_connection(*connection_args(pool))  # type: ignore[no-untyped-call, unused-ignore]
    # Given back even if the caller is cancelled right here: a connection neither used nor
    # returned would stay open, out of the pool's sight, until the pool is closed.
    await shield(lambda: pool.release(connection))
