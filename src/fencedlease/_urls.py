"""Backends from URLs: the parser of :meth:`LeaseManager.from_url` (its asyncio twin,
:func:`fencedlease.aio.async_backend_from_url`, takes the same URLs).

Accepted URLs::

    redis://[[user]:password@]host[:port][/db]     a Redis over TCP (redis-py's own URL syntax)
    rediss://...                                   the same over TLS
    unix://[[user]:password@]/path/to/socket[?db=n] a Redis on a Unix socket
    memory://                                      a new in-process MemoryBackend
    sqlite:///relative/path.db                     a SQLite file, relative to the working directory
    sqlite:////absolute/path.db                    a SQLite file, absolute path (four slashes)
    sqlite:///:memory:                             a private in-memory SQLite database

The SQLite forms follow SQLAlchemy's: what follows ``sqlite:///`` is the path as given, so an
absolute path brings its own leading slash. ``sqlite:///:memory:`` is accepted: it lives and dies
with the backend, one process only, like ``memory://`` but through the SQL code path (useful to test
it without a file). Every ``memory://`` URL makes a new, empty store: two managers made from
``memory://`` do not share leases (pass one :class:`MemoryBackend` object to both for that).

Keyword arguments go to ``redis.Redis.from_url`` (``redis.asyncio.Redis.from_url``) for Redis URLs;
for ``sqlite`` the only one is ``busy_timeout_ms`` (also accepted as ``?busy_timeout_ms=n``);
``memory://`` takes none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import redis

from ._backend import LeaseBackend
from ._clock import Clock
from ._errors import ValidationError
from ._redis_backend import RedisBackend
from ._validate import check_key, check_prefix
from .backends.memory import MemoryBackend
from .backends.sqlite import SqliteBackend

__all__ = [
    "REDIS_SCHEMES",
    "SCHEMES",
    "backend_from_url",
    "check_memory",
    "parse_backend_url",
    "redis_client",
    "scheme_of",
    "sqlite_options",
]

REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
SCHEMES = "redis://, rediss://, unix://, memory:// or sqlite:///<path>"


def scheme_of(url: object) -> str:
    text = check_key(url, "url")
    scheme, sep, _ = text.partition("://")
    if not sep:
        raise ValidationError("url", f"url must start with one of {SCHEMES}; got {text!r}")
    return scheme.lower()


def check_memory(url: str, kwargs: dict[str, Any]) -> None:
    parts = urlsplit(url)
    if parts.netloc or parts.path or parts.query or parts.fragment:
        raise ValidationError("url", f"a memory URL is exactly 'memory://'; got {url!r}")
    for name in kwargs:
        raise ValidationError(name, f"memory:// takes no options; got {name}=")


def sqlite_options(url: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path and the :class:`SqliteBackend` keyword arguments a ``sqlite:///`` URL names.

    Raises:
        ValidationError: a host in the URL, no path, or an option other than ``busy_timeout_ms``.
    """
    parts = urlsplit(url)
    if parts.netloc or not parts.path.startswith("/") or parts.fragment:
        raise ValidationError(
            "url",
            "a SQLite URL is sqlite:///relative/path, sqlite:////absolute/path or"
            f" sqlite:///:memory:; got {url!r}",
        )
    path = unquote(parts.path[1:])
    if not path:
        raise ValidationError("url", f"a SQLite URL needs a path after 'sqlite:///'; got {url!r}")
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name != "busy_timeout_ms":
            raise ValidationError(name, f"sqlite:// takes only busy_timeout_ms; got {name}=")
        if not value.isdigit():
            raise ValidationError(
                "busy_timeout_ms", f"busy_timeout_ms must be an int of milliseconds; got {value!r}"
            )
        options[name] = int(value)
    for name, value in kwargs.items():
        if name != "busy_timeout_ms":
            raise ValidationError(name, f"sqlite:// takes only busy_timeout_ms; got {name}=")
        if name in options:
            raise ValidationError(name, f"{name} is given both in the URL and as an argument")
        options[name] = value
    return path, options


def parse_backend_url(
    url: str, prefix: str, kwargs: dict[str, Any]
) -> tuple[Literal["redis", "memory", "sqlite"], str, dict[str, Any]]:
    """What a URL names, for either face: ``(kind, path, options)``. ``path`` is the SQLite path
    (else the URL); ``options`` are the keyword arguments for the client or the backend.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take,
            or a bad ``prefix``.
    """
    scheme = scheme_of(url)
    check_prefix(prefix)
    if scheme in REDIS_SCHEMES:
        return "redis", url, kwargs
    if scheme == "memory":
        check_memory(url, kwargs)
        return "memory", url, {}
    if scheme == "sqlite":
        path, options = sqlite_options(url, kwargs)
        return "sqlite", path, options
    raise ValidationError("url", f"url must start with one of {SCHEMES}; got {url!r}")


ClientT = TypeVar("ClientT")


def redis_client(from_url: Callable[..., ClientT], url: str, options: dict[str, Any]) -> ClientT:
    """``from_url(url, **options)``: ``redis.Redis.from_url`` or ``redis.asyncio.Redis.from_url``.

    Raises:
        ValidationError: redis-py cannot use the URL.
    """
    try:
        client = from_url(url, **options)
    except ValueError as exc:
        raise ValidationError("url", f"not a usable Redis URL: {exc}") from exc
    return client


def backend_from_url(url: str, *, prefix: str, clock: Clock, **kwargs: Any) -> LeaseBackend:
    """The :class:`LeaseBackend` a URL names (forms in the module docstring).

    The backend owns what it made (a Redis client, a SQLite connection): its ``close()`` closes
    them. ``clock`` dates expiry for ``memory://`` (its ``monotonic()``) and ``sqlite://`` (its
    ``time()``); Redis keeps its own time.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take,
            or a bad ``prefix``.
        BackendError: a SQLite database that cannot be opened.
    """
    kind, path, options = parse_backend_url(url, prefix, kwargs)
    if kind == "redis":
        return RedisBackend(
            redis_client(redis.Redis.from_url, url, options), prefix, owns_client=True
        )
    if kind == "memory":
        return MemoryBackend(clock=clock)
    return SqliteBackend(path, prefix=prefix, clock=clock, **options)
