"""The asyncio twins of :func:`~fencedlease._redis.scripts.run_script` and
:mod:`fencedlease._redis.clients`, over ``redis.asyncio``: the same policy, awaited."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from .scripts import Script

__all__ = ["dedicated_client", "run_script", "waits_for_connection"]


async def run_script(
    client: redis.asyncio.Redis, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """:func:`fencedlease._redis.scripts.run_script`, awaited: EVALSHA, one EVAL on NOSCRIPT."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await client.eval(script.source, len(keys), *keys, *args)


def dedicated_client(client: redis.asyncio.Redis) -> redis.asyncio.Redis:
    """:func:`fencedlease._redis.clients.dedicated_client` for ``redis.asyncio``."""
    pool = client.connection_pool
    if type(pool) not in (redis.asyncio.ConnectionPool, redis.asyncio.BlockingConnectionPool):
        return client
    own = redis.asyncio.ConnectionPool(
        connection_class=pool.connection_class, **pool.connection_kwargs
    )
    return redis.asyncio.Redis(connection_pool=own)


def waits_for_connection(client: redis.asyncio.Redis) -> bool:
    """:func:`fencedlease._redis.clients.waits_for_connection` for ``redis.asyncio``."""
    return client.connection is None and isinstance(
        client.connection_pool, redis.asyncio.BlockingConnectionPool
    )
