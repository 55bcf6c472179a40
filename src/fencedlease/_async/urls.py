"""Backends from URLs: [`async_backend_from_url`][fencedlease.aio.async_backend_from_url] (the URL
forms and their parsing are in `fencedlease._core.urls`)."""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.cluster import ClusterNode

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.urls import parse_backend_url
from fencedlease._redis.clients import redis_client
from fencedlease._redis.cluster import cluster_client
from fencedlease.backends.memory import AsyncMemoryBackend
from fencedlease.backends.sqlite_async import AsyncSqliteBackend

from .cluster_backend import AsyncRedisClusterBackend
from .redis_backend import AsyncRedisBackend
from .sentinel import async_sentinel_client

__all__ = ["async_backend_from_url"]


def async_backend_from_url(
    url: str, *, prefix: str, clock: Clock, **kwargs: Any
) -> AsyncLeaseBackend:
    """The [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend] a URL names (forms in
    `fencedlease._core.urls`), the same URLs, options and errors on both faces.

    The backend owns what it made (a Redis client, a SQLite connection): its ``close()`` closes
    them. ``clock`` dates expiry for ``memory://`` (its ``monotonic()``) and ``sqlite://`` (its
    ``time()``); Redis keeps its own time. Redis: ``redis.asyncio.Redis.from_url(url, **kwargs)``
    in an [`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend]; ``redis+cluster://``: a
    ``redis.asyncio.RedisCluster`` of those start nodes (connecting at the first command) in an
    [`AsyncRedisClusterBackend`][fencedlease.aio.AsyncRedisClusterBackend]; ``memory://``: an
    [`AsyncMemoryBackend`][fencedlease.backends.AsyncMemoryBackend]; ``sqlite:///...``: an
    [`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend] (on the asyncio face the file
    is opened on a worker thread at the first operation, on the sync face here).

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take
            (or a value redis-py would only refuse when it connects: a timeout that is not a
            finite positive number of seconds, an unknown encoding; a query option it would keep
            as a string where it takes an object or a bool), a Redis URL with an ``@`` after a
            ``/``, ``?`` or ``#``, a bad ``prefix`` or ``clock``. A password in the URL shows as
            ``***`` in the message, no piece of it of 3 characters or more is left there, and no
            exception holding it is chained to the error.
        BackendError: a SQLite database that cannot be opened (sync face).
    """
    kind, path, options = parse_backend_url(url, prefix, clock, kwargs)
    if kind == "redis":
        client: redis.asyncio.Redis = redis_client(redis.asyncio.Redis.from_url, url, options)
        return AsyncRedisBackend(client, prefix, owns_client=True)
    if kind == "sentinel":
        return AsyncRedisBackend(async_sentinel_client(url, options), prefix, owns_client=True)
    if kind == "cluster":
        cluster = cluster_client(redis.asyncio.RedisCluster, ClusterNode, url, options)
        return AsyncRedisClusterBackend(cluster, prefix, owns_client=True)
    if kind == "memory":
        return AsyncMemoryBackend(clock=clock)
    return AsyncSqliteBackend(path, prefix=prefix, clock=clock, **options)
