"""Backends from URLs for the asyncio face:
[`async_backend_from_url`][fencedlease.aio.async_backend_from_url], the twin of
`fencedlease._urls.backend_from_url` (the URL forms and their parsing are there)."""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.cluster import ClusterNode

from fencedlease._core.backend import AsyncLeaseBackend
from fencedlease._core.clock import Clock

from .._redis.clients import redis_client
from .._redis.cluster import cluster_client
from .._redis.sentinel_aio import async_sentinel_client
from .._urls import parse_backend_url
from ..backends.memory import AsyncMemoryBackend
from ..backends.sqlite_async import AsyncSqliteBackend
from ._cluster_backend import AsyncRedisClusterBackend
from ._redis_backend import AsyncRedisBackend

__all__ = ["async_backend_from_url"]


def async_backend_from_url(
    url: str, *, prefix: str, clock: Clock, **kwargs: Any
) -> AsyncLeaseBackend:
    """The [`AsyncLeaseBackend`][fencedlease.AsyncLeaseBackend] a URL names: the asyncio twin of
    `fencedlease._urls.backend_from_url`, with the same URLs, options and errors. Makes no
    I/O (a SQLite file is opened on a worker thread at the first operation).

    Redis: ``redis.asyncio.Redis.from_url(url, **kwargs)`` in an
    [`AsyncRedisBackend`][fencedlease.aio.AsyncRedisBackend]; ``redis+cluster://``: a
    ``redis.asyncio.RedisCluster`` of those start nodes (connecting at the first command) in an
    [`AsyncRedisClusterBackend`][fencedlease.aio.AsyncRedisClusterBackend]; ``memory://``: an
    [`AsyncMemoryBackend`][fencedlease.backends.AsyncMemoryBackend]; ``sqlite:///...``: an
    [`AsyncSqliteBackend`][fencedlease.backends.AsyncSqliteBackend].

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take
            (or a value redis-py would only refuse when it connects), a bad ``prefix`` or
            ``clock``. A password in the URL shows as ``***`` in the message.
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
