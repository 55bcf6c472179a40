"""Backends from URLs for the asyncio face: :func:`async_backend_from_url`, the twin of
:func:`fencedlease._urls.backend_from_url` (the URL forms and their parsing are there)."""

from __future__ import annotations

from typing import Any

import redis.asyncio

from .._backend import AsyncLeaseBackend
from .._clock import Clock
from .._errors import ValidationError
from .._urls import REDIS_SCHEMES, SCHEMES, check_memory, scheme_of, sqlite_options
from .._validate import check_prefix
from ..backends.memory import AsyncMemoryBackend
from ..backends.sqlite_async import AsyncSqliteBackend
from ._redis_backend import AsyncRedisBackend

__all__ = ["async_backend_from_url"]


def async_backend_from_url(
    url: str, *, prefix: str, clock: Clock, **kwargs: Any
) -> AsyncLeaseBackend:
    """The :class:`AsyncLeaseBackend` a URL names: the asyncio twin of :func:`backend_from_url`,
    with the same URLs, options and errors. Makes no I/O (a SQLite file is opened on a worker
    thread at the first operation).

    Redis: ``redis.asyncio.Redis.from_url(url, **kwargs)`` in an
    :class:`~fencedlease.aio.AsyncRedisBackend`; ``memory://``: an :class:`AsyncMemoryBackend`;
    ``sqlite:///...``: an :class:`AsyncSqliteBackend`.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take,
            or a bad ``prefix``.
    """
    scheme = scheme_of(url)
    check_prefix(prefix)
    if scheme in REDIS_SCHEMES:
        try:
            client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url, **kwargs)
        except ValueError as exc:
            raise ValidationError("url", f"not a usable Redis URL: {exc}") from exc
        return AsyncRedisBackend(client, prefix, owns_client=True)
    if scheme == "memory":
        check_memory(url, kwargs)
        return AsyncMemoryBackend(clock=clock)
    if scheme == "sqlite":
        path, options = sqlite_options(url, kwargs)
        return AsyncSqliteBackend(path, prefix=prefix, clock=clock, **options)
    raise ValidationError("url", f"url must start with one of {SCHEMES}; got {url!r}")
