"""The options of a redis-py client made from a URL, checked before the first command.

redis-py parses some query options of a Redis URL (``redis.connection.URL_QUERY_ARGUMENT_PARSERS``)
and passes every other one on as the string given, and it takes keyword arguments as given; a
wrong value then escapes at the first connection, or later, as a ``TypeError`` or ``ValueError``
far from its cause. These checks name the option at ``from_url`` instead: a query option redis-py
would keep as a string where it takes an object or a bool (`check_url_query`), and the
bounds of the options it only uses when it connects (`check_connection_options`).
"""

from __future__ import annotations

import codecs
import functools
import inspect
import math
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis
from redis.backoff import EqualJitterBackoff

from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import redact_url
from fencedlease._core.validate import MAX_MS

__all__ = [
    "NODE_CONNECT_TIMEOUT_S",
    "NODE_SOCKET_TIMEOUT_S",
    "check_connection_options",
    "check_url_query",
    "jittered_retry",
    "redis_parameters",
    "with_node_timeouts",
]

#: How long a connection to one node of a replicated deployment (a sentinel, the primary, a
#: cluster node) may take to open, in seconds, unless the caller says (``socket_connect_timeout``).
#: A node cut off by a partition drops the packets: without a bound the connect waits for the
#: kernel to give up (about two minutes on Linux; redis-py 5 sets none, redis-py 8 five seconds)
#: while another node could answer: the next sentinel, the replica the cluster promoted.
NODE_CONNECT_TIMEOUT_S = 1.0
#: How long a read on such a connection may wait, in seconds, unless the caller says
#: (``socket_timeout``): redis-py 8's default, so that redis-py 5 (none: a connection to a node
#: gone silent waits forever) gives a silent node up as redis-py 8 does.
NODE_SOCKET_TIMEOUT_S = 5.0

# it parses: redis.connection.URL_QUERY_ARGUMENT_PARSERS).
_STRING_URL_OPTIONS = frozenset(
    {
        "username", "password", "client_name", "lib_name", "lib_version", "encoding",
        "encoding_errors", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs",
        "ssl_ca_path", "ssl_ca_data", "ssl_password", "ssl_ciphers", "ssl_ocsp_expected_cert",
        "host", "path", "unix_socket_path",
    }
)  # fmt: skip
# Parsed, but not into what the option takes: retry_on_error=x becomes ['x'], not exceptions.
_MISPARSED_URL_OPTIONS = frozenset({"retry_on_error"})


def redis_parameters() -> frozenset[str]:
    """The keyword parameters of redis-py's clients, pools and connections (the asyncio ones
    too when ``redis.asyncio`` is loaded: the sync face loads no asyncio)."""
    modules = [redis]
    if "redis.asyncio" in sys.modules:
        modules.append(sys.modules["redis.asyncio"])
    return _parameters_of(tuple(modules))


@functools.cache
def _parameters_of(modules: tuple[Any, ...]) -> frozenset[str]:
    names: set[str] = set()
    for module in modules:
        for name in (
            "Redis", "ConnectionPool", "BlockingConnectionPool", "Connection", "SSLConnection",
            "UnixDomainSocketConnection",
        ):  # fmt: skip
            targets = [
                getattr(module, name, None),
                getattr(module.connection, "AbstractConnection", None),
            ]
            for target in targets:
                if target is None:
                    continue
                try:
                    names.update(inspect.signature(target.__init__).parameters)
                except (TypeError, ValueError):  # pragma: no cover - a C or odd signature
                    continue
    return frozenset(names - {"self", "args", "kwargs"})


def check_url_query(url: str) -> None:
    """Refuse a query option redis-py would pass on as a raw string where it takes an object
    (``?retry=1``, ``?connection_class=x``, ``?credential_provider=x``, ``?decode_responses=no``:
    a truthy string...): every parameter of redis-py's clients, pools and connections that is
    neither parsed by redis-py's URL parser nor a string option. Unknown names are left to
    `fencedlease._redis.clients.redis_client`'s own check (it names them too).

    Raises:
        ValidationError: naming the option; its value is not shown (it may be a secret).
    """
    try:
        query = urlsplit(url).query
    except ValueError:
        return  # redis-py's parser reports the URL itself
    parsed = redis.connection.URL_QUERY_ARGUMENT_PARSERS
    known = redis_parameters()
    for name, values in parse_qs(query).items():
        if not values:
            continue
        if name in _MISPARSED_URL_OPTIONS or (
            name in known and name not in parsed and name not in _STRING_URL_OPTIONS
        ):
            raise ValidationError(
                name,
                f"{name} cannot be given in a Redis URL (redis-py would pass it on as a string"
                f" where it takes an object or a bool): pass {name}= as a keyword argument;"
                f" got {redact_url(url)!r}",
            )


# Options redis-py takes as given and only uses at the first connection, where a wrong one
# escapes as TypeError/ValueError/OverflowError: name -> whether 0 is allowed.
_SECONDS_OPTIONS = {
    "socket_timeout": False,
    "socket_connect_timeout": False,
    "health_check_interval": True,
}
_MAX_SECONDS = MAX_MS / 1000
# Integer options redis-py parses from a URL and only uses later (a socket_read_size of -1 fails
# in recv, a negative db at SELECT): name -> (least, most).
_INT_OPTIONS = {
    "socket_read_size": (1, 2**31 - 1),
    "db": (0, 2**31 - 1),
}


def with_node_timeouts(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (a replicated deployment's connection options) with `NODE_CONNECT_TIMEOUT_S`
    and `NODE_SOCKET_TIMEOUT_S` where they name no ``socket_connect_timeout`` /
    ``socket_timeout``, and so do their ``sentinel_kwargs`` if given (without them redis-py gives
    the sentinels the ``socket_*`` options of the primary's). Pure."""
    defaults = {
        "socket_connect_timeout": NODE_CONNECT_TIMEOUT_S,
        "socket_timeout": NODE_SOCKET_TIMEOUT_S,
    }
    bounded = {**defaults, **options}
    sentinels = options.get("sentinel_kwargs")
    if isinstance(sentinels, dict):
        bounded["sentinel_kwargs"] = {**defaults, **sentinels}
    return bounded


def check_connection_options(options: dict[str, Any]) -> None:
    """The connection options redis-py checks only when it connects: the seconds options are
    None or finite numbers in (0, MAX_MS / 1000] (``health_check_interval`` may be 0), the
    integer options (``socket_read_size``, ``db``) are within their bounds, and
    ``encoding`` / ``encoding_errors`` are names Python knows.

    Raises:
        ValidationError: naming the option.
    """
    for name, zero_ok in _SECONDS_OPTIONS.items():
        value = options.get(name)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= _MAX_SECONDS
            or (value == 0 and not zero_ok)
        ):
            low = "0 <=" if zero_ok else "0 <"
            raise ValidationError(
                name,
                f"{name} must be None or a number of seconds, {low} {name} <= {_MAX_SECONDS};"
                f" got {value!r}",
            )
    for name, (least, most) in _INT_OPTIONS.items():
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise ValidationError(
                name, f"{name} must be an int, {least} <= {name} <= {most}; got {value!r}"
            )
    for name, lookup in (("encoding", codecs.lookup), ("encoding_errors", codecs.lookup_error)):
        if name not in options:
            continue
        value = options[name]
        try:
            if not isinstance(value, str):
                raise TypeError(value)
            lookup(value)
        except (LookupError, TypeError, ValueError):  # ValueError: a NUL, a lone surrogate
            raise ValidationError(name, f"{name} must name a Python codec; got {value!r}") from None


def jittered_retry(retry_class: Callable[..., Any]) -> Callable[[int], Any]:
    """``n -> retry_class(EqualJitterBackoff(), n)``: a face's redis-py ``Retry`` (``retry_class``)
    of ``n`` retries with exponential backoff and equal jitter, which ``EqualJitterBackoff`` is
    in every redis-py the library supports (5.0.1 included)."""
    return lambda retries: retry_class(EqualJitterBackoff(), retries)
