# GENERATED from src/fencedlease/_async/clients.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""Clients of this face the library makes beside the caller's (`dedicated_client`), and what a
caller's client may wait for (`waits_for_connection`). No I/O: a pool makes its connections when
first used. The clients made from a URL, either face, are `fencedlease._redis.clients`'s."""

from __future__ import annotations

import redis

__all__ = ["dedicated_client", "waits_for_connection"]


def dedicated_client(client: redis.Redis) -> redis.Redis:
    """A client on a pool of its own, for a connection that must not wait for, nor take one of,
    the caller's pool's connections (the hand-off listener's, the renewer's).

    The pool is made from the caller's ``connection_class`` and ``connection_kwargs`` (address,
    credentials, TLS, timeouts), so it reaches the same server the same way, and makes a
    connection only when first used. A pool of another kind (e.g. Sentinel's, whose connections
    find their server through it), or a cluster client (whose connections are per node), is used
    as it is: ``client`` itself is returned.
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None or type(pool) not in (
        redis.ConnectionPool,
        redis.BlockingConnectionPool,
    ):
        return client
    own = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    return redis.Redis(connection_pool=own)


def waits_for_connection(client: redis.Redis) -> bool:
    """Whether a command of ``client`` may wait for other callers to give a connection back: its
    pool is a ``BlockingConnectionPool`` and it has no connection of its own."""
    # a cluster client has neither: its nodes' pools are its own business
    return getattr(client, "connection", None) is None and isinstance(
        getattr(client, "connection_pool", None), redis.BlockingConnectionPool
    )
