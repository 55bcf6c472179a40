"""Connections of the library's own beside the caller's pool (sync; the asyncio twins are in
:mod:`fencedlease._redis.aio`)."""

from __future__ import annotations

import redis

__all__ = ["dedicated_client", "waits_for_connection"]


def dedicated_client(client: redis.Redis) -> redis.Redis:
    """A client on a pool of its own, for a connection that must not wait for, nor take one of,
    the caller's pool's connections (the hand-off listener's, the renewer's).

    The pool is made from the caller's ``connection_class`` and ``connection_kwargs`` (address,
    credentials, TLS, timeouts), so it reaches the same server the same way, and makes a
    connection only when first used. A pool of another kind (e.g. Sentinel's, whose connections
    find their server through it) is used as it is: ``client`` itself is returned.
    """
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        return client
    own = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    return redis.Redis(connection_pool=own)


def waits_for_connection(client: redis.Redis) -> bool:
    """Whether a command of ``client`` may wait for other callers to give a connection back: its
    pool is a ``BlockingConnectionPool`` and it has no connection of its own."""
    return client.connection is None and isinstance(
        client.connection_pool, redis.BlockingConnectionPool
    )
