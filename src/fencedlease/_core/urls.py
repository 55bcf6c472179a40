"""Backends from URLs: one parser for [`LeaseManager.from_url`][fencedlease.LeaseManager.from_url]
and its asyncio twin.

Accepted URLs:

```
redis://[[user]:password@]host[:port][/db]     a Redis over TCP (redis-py's own URL syntax)
rediss://...                                   the same over TLS
unix://[[user]:password@]/path/to/socket[?db=n] a Redis on a Unix socket
redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]
                                               the primary of a Sentinel service
redis+cluster://host:port[,host:port...][/]    a Redis Cluster, from these start nodes
rediss+cluster://...                           the same over TLS
memory://                                      a new in-process MemoryBackend
sqlite:///relative/path.db                     a SQLite file, relative to the working directory
sqlite:////absolute/path.db                    a SQLite file, absolute path (four slashes)
sqlite:///:memory:                             a private in-memory SQLite database
```

The SQLite forms follow SQLAlchemy's: what follows ``sqlite:///`` is the path as given, so an
absolute path brings its own leading slash. ``sqlite:///:memory:`` is accepted: it lives and dies
with the backend, one process only, like ``memory://`` but through the SQL code path (useful to test
it without a file). Every ``memory://`` URL makes a new, empty store: two managers made from
``memory://`` do not share leases (pass one [`MemoryBackend`][fencedlease.MemoryBackend] object to
both for that).

Keyword arguments go to ``redis.Redis.from_url`` (``redis.asyncio.Redis.from_url``) for Redis URLs.
A Redis URL's query takes the options redis-py parses (``?db=``, ``?socket_timeout=``, ...) and
the string ones (``?client_name=``, ``?ssl_cert_reqs=``, ...); one redis-py would pass on as a raw
string where it takes an object or a bool (``?retry=``, ``?connection_class=``,
``?decode_responses=``) is refused: pass it as a keyword argument. For ``sqlite`` the only option
is ``busy_timeout_ms`` (also accepted as ``?busy_timeout_ms=n``); ``memory://`` takes none.

A URL may hold a password: every message, log line and report that shows one shows
[`redact_url`][fencedlease.redact_url] of it, and every message about it (redis-py's included) is
scrubbed with [`redact_text`][fencedlease.redact_text], which leaves no piece of the password of
3 characters or more (`fencedlease._core.redact`); no exception holding the URL is chained to a
[`ValidationError`][fencedlease.ValidationError] about it. A Redis URL with an ``@`` after a ``/``,
``?`` or ``#`` is refused: it is a password with a raw ``/``, ``?`` or ``#`` (which redis-py would
read as a host and a port made of the password's first part) or an ``@`` in a path or a query, and
the two cannot be told apart; percent-encoded (``%2F``, ``%3F``, ``%23``, ``%40``) either is read
as meant. A Redis client is made by
`fencedlease._redis.clients.redis_client`, which checks its options at once
(`fencedlease._redis.options`).
"""

from __future__ import annotations

from typing import Any, Final, Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from fencedlease._core.clock import Clock
from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import ambiguous_url, url_error
from fencedlease._core.validate import check_clock, check_key, check_prefix

__all__ = [
    "CLUSTER_SCHEMES",
    "REDIS_SCHEMES",
    "REDIS_URL_SCHEMES",
    "SENTINEL_SCHEME",
    "cluster_url_options",
    "parse_backend_url",
    "sqlite_options",
]

REDIS_SCHEMES: Final = frozenset({"redis", "rediss", "unix"})
"""The URL schemes of one Redis server (redis-py's own URLs)."""
SENTINEL_SCHEME: Final = "redis+sentinel"
"""The URL scheme of a Sentinel service's primary."""
CLUSTER_SCHEMES: Final = frozenset({"redis+cluster", "rediss+cluster"})
"""The URL schemes of a Redis Cluster (``rediss+cluster``: over TLS)."""
REDIS_URL_SCHEMES: Final = frozenset({*REDIS_SCHEMES, SENTINEL_SCHEME, *CLUSTER_SCHEMES})
"""Every scheme of a URL that names a Redis server, a Sentinel service or a Redis Cluster."""
_SCHEMES = (
    "redis://, rediss://, unix://, redis+sentinel://, redis+cluster://, memory:// or"
    " sqlite:///<path>"
)


_AMBIGUOUS = (
    "url has an '@' after a '/', '?' or '#': percent-encode a '/', '?' or '#' in the password"
    " (%2F, %3F, %23) or an '@' in the path or the query (%40)"
)


def _scheme(url: object) -> str:
    text = check_key(url, "url")
    scheme, sep, _ = text.partition("://")
    if not sep:
        raise url_error(text, f"url must start with one of {_SCHEMES}")
    return scheme.lower()


def _check_memory(url: str, kwargs: dict[str, Any]) -> None:
    if url.partition("://")[2]:
        raise url_error(url, "a memory URL is exactly 'memory://'")
    for name in kwargs:
        raise ValidationError(name, f"memory:// takes no options; got {name}=")


def sqlite_options(url: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path and the [`SqliteBackend`][fencedlease.SqliteBackend] keyword arguments a
    ``sqlite:///`` URL names.

    Raises:
        ValidationError: a host in the URL, no path, or an option other than ``busy_timeout_ms``.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        unusable = f"not a usable SQLite URL ({exc})"
    else:
        unusable = ""
    if unusable:  # raised here, with no exception holding the URL chained to it
        raise url_error(url, unusable)
    if parts.netloc or not parts.path.startswith("/") or parts.fragment:
        raise url_error(
            url,
            "a SQLite URL is sqlite:///relative/path, sqlite:////absolute/path or"
            " sqlite:///:memory:",
        )
    try:
        path = unquote(parts.path[1:], errors="strict")
    except UnicodeDecodeError:
        raise url_error(url, "a SQLite path must percent-decode to UTF-8") from None
    if not path:
        raise url_error(url, "a SQLite URL needs a path after 'sqlite:///'")
    if "\x00" in path:
        raise url_error(url, "a SQLite path must not contain a NUL character")
    options: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name != "busy_timeout_ms":
            raise ValidationError(name, f"sqlite:// takes only busy_timeout_ms; got {name!r}=")
        # ASCII digits only: str.isdigit() admits '١٢' and '²', which int() reads or rejects.
        if not (value.isascii() and value.isdigit()):
            raise ValidationError(
                "busy_timeout_ms",
                f"busy_timeout_ms must be an int of milliseconds (ASCII digits); got {value!r}",
            )
        options[name] = int(value)
    for name, value in kwargs.items():
        if name != "busy_timeout_ms":
            raise ValidationError(name, f"sqlite:// takes only busy_timeout_ms; got {name!r}=")
        if name in options:
            raise ValidationError(name, f"{name} is given both in the URL and as an argument")
        options[name] = value
    return path, options


def cluster_url_options(url: str, kwargs: dict[str, Any]) -> tuple[list[tuple[str, int]], str]:
    """The start nodes of ``redis+cluster://[[user]:password@]host:port[,host:port...][/][?opt=v]``
    and the single-node URL whose credentials and query redis-py parses as for ``redis://``
    (``rediss://`` for ``rediss+cluster``). No I/O.

    Raises:
        ValidationError: no host, a port that is not a number, a database other than 0 (a
            cluster has only database 0); the URL shows with its password as ``***``.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed '[': the message names no part of the URL
        unusable = f"not a usable Redis Cluster URL ({exc})"
    else:
        unusable = ""
    if unusable:  # raised here, with no exception holding the URL chained to it
        raise url_error(url, unusable)
    scheme = parts.scheme.lower().partition("+")[0]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for entry in hosts.split(","):
        host, sep, port = entry.rpartition(":")
        if not sep:
            host, port = entry, "6379"
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise url_error(url, "a Redis Cluster URL is redis+cluster://host:port[,host:port...]")
        nodes.append((host.strip("[]"), int(port)))
    if parts.path not in ("", "/", "/0"):
        raise url_error(url, "a Redis Cluster has only database 0")
    for name in ("host", "port", "startup_nodes", "db"):
        if name in kwargs:
            raise ValidationError(name, f"{name} is given by a redis+cluster:// URL itself")
    credentials = f"{userinfo}@" if userinfo else ""
    first = f"{quote(nodes[0][0], safe='.:')}:{nodes[0][1]}"
    single = f"{scheme}://{credentials}{first}/0" + (f"?{parts.query}" if parts.query else "")
    return nodes, single


def parse_backend_url(
    url: str, prefix: str, clock: Clock, kwargs: dict[str, Any]
) -> tuple[Literal["redis", "sentinel", "cluster", "memory", "sqlite"], str, dict[str, Any]]:
    """What a URL names, for either face: ``(kind, path, options)``. ``path`` is the SQLite path
    (else the URL); ``options`` are the keyword arguments for the client or the backend. No I/O.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take,
            a bad ``prefix`` or ``clock``; a password in the URL shows as ``***``.
    """
    scheme = _scheme(url)
    check_prefix(prefix)
    check_clock(clock)
    if scheme in REDIS_URL_SCHEMES and ambiguous_url(url):
        raise url_error(url, _AMBIGUOUS)
    if scheme in REDIS_SCHEMES:
        return "redis", url, kwargs
    if scheme == SENTINEL_SCHEME:
        return "sentinel", url, kwargs
    if scheme in CLUSTER_SCHEMES:
        cluster_url_options(url, kwargs)
        return "cluster", url, kwargs
    if scheme == "memory":
        _check_memory(url, kwargs)
        return "memory", url, {}
    if scheme == "sqlite":
        path, options = sqlite_options(url, kwargs)
        return "sqlite", path, options
    raise url_error(url, f"url must start with one of {_SCHEMES}")
