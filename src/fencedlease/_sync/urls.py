# GENERATED from src/fencedlease/_async/urls.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""Backends from URLs: [`backend_from_url`][fencedlease.aio.backend_from_url] (the URL
forms and their parsing are in `fencedlease._core.urls`)."""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import ClusterNode

from fencedlease._core.backend import LeaseBackend
from fencedlease._core.clock import Clock
from fencedlease._core.urls import parse_backend_url
from fencedlease._redis.clients import redis_client
from fencedlease._redis.cluster import cluster_client
from fencedlease.backends.memory import MemoryBackend
from fencedlease.backends.sqlite import SqliteBackend

from .cluster_backend import RedisClusterBackend
from .redis_backend import RedisBackend
from .sentinel import sentinel_client

__all__ = ["backend_from_url"]


def backend_from_url(url: str, *, prefix: str, clock: Clock, **kwargs: Any) -> LeaseBackend:
    """The [`LeaseBackend`][fencedlease.LeaseBackend] a URL names (forms in
    `fencedlease._core.urls`), the same URLs, options and errors on both faces.

    The backend owns what it made (a Redis client, a SQLite connection): its ``close()`` closes
    them. ``clock`` dates expiry for ``memory://`` (its ``monotonic()``) and ``sqlite://`` (its
    ``time()``); Redis keeps its own time. Redis: ``redis.Redis.from_url(url, **kwargs)``
    in an [`RedisBackend`][fencedlease.RedisBackend]; ``redis+cluster://``: a
    ``redis.RedisCluster`` of those start nodes (connecting at the first command) in an
    [`RedisClusterBackend`][fencedlease.RedisClusterBackend]; ``memory://``: an
    [`MemoryBackend`][fencedlease.backends.MemoryBackend]; ``sqlite:///...``: an
    [`SqliteBackend`][fencedlease.backends.SqliteBackend] (on the asyncio face the file
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
        client: redis.Redis = redis_client(redis.Redis.from_url, url, options)
        return RedisBackend(client, prefix, owns_client=True)
    if kind == "sentinel":
        return RedisBackend(sentinel_client(url, options), prefix, owns_client=True)
    if kind == "cluster":
        cluster = cluster_client(redis.RedisCluster, ClusterNode, url, options)
        return RedisClusterBackend(cluster, prefix, owns_client=True)
    if kind == "memory":
        return MemoryBackend(clock=clock)
    return SqliteBackend(path, prefix=prefix, clock=clock, **options)
