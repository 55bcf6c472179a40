"""Backends from URLs: one parser for :meth:`LeaseManager.from_url` and its asyncio twin.

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

Keyword arguments go to ``redis.Redis.from_url`` (``redis.asyncio.Redis.from_url``) for Redis URLs.
A Redis URL's query takes the options redis-py parses (``?db=``, ``?socket_timeout=``, ...) and
the string ones (``?client_name=``, ``?ssl_cert_reqs=``, ...); one redis-py would pass on as a raw
string where it takes an object or a bool (``?retry=``, ``?connection_class=``,
``?decode_responses=``) is refused: pass it as a keyword argument. For ``sqlite`` the only option
is ``busy_timeout_ms`` (also accepted as ``?busy_timeout_ms=n``); ``memory://`` takes none.

A URL may hold a password: every message, log line and report that shows one shows
:func:`redact_url` of it, and an error of redis-py's that echoes it is scrubbed with
:func:`redact_text`.
"""

from __future__ import annotations

import codecs
import functools
import inspect
import math
import re
import sys
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import parse_qs, parse_qsl, quote, quote_plus, unquote, unquote_plus, urlsplit

import redis

from ._backend import LeaseBackend
from ._clock import Clock
from ._errors import ValidationError
from ._redis_backend import RedisBackend
from ._validate import MAX_MS, check_clock, check_key, check_prefix
from .backends.memory import MemoryBackend
from .backends.sqlite import SqliteBackend

__all__ = [
    "REDIS_SCHEMES",
    "backend_from_url",
    "parse_backend_url",
    "redact_text",
    "redact_url",
    "redis_client",
    "sqlite_options",
]

REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
_SCHEMES = "redis://, rediss://, unix://, memory:// or sqlite:///<path>"
REDACTED = "***"


class _PooledClient(Protocol):
    @property
    def connection_pool(self) -> Any: ...


_Client = TypeVar("_Client", bound=_PooledClient)
# The names of query options and key=value DSN fields whose value is a secret (``password``,
# ``sslpassword``, ``passwd``, ``pwd``, ``secret``, ``token``, ``auth``...), then the ``=``.
_SECRET_FIELD = re.compile(
    r"(?i)(?<![a-z0-9_])([a-z_]*(?:pass|pwd|secret|token|auth)[a-z0-9_]*)(\s*)=(\s*)"
)


def _field_value_end(text: str, start: int, in_query: bool) -> int:
    """Where the value of a secret field starting at ``start`` ends (exclusive).

    In a URL query the value runs to the next ``&`` or ``#``. Otherwise it is a libpq
    ``key = value`` field: a value in single (or double) quotes runs to the closing quote, a
    backslash escaping the next character (``'s3cr3t \\' word'``); an unquoted one runs to the
    next whitespace, a backslash escaping the next character too (libpq's conninfo syntax). An
    unclosed quote runs to the end.
    """
    if in_query:
        ends = [i for i in (text.find("&", start), text.find("#", start)) if i >= 0]
        return min(ends, default=len(text))
    i, n = start, len(text)
    quote_char = text[i] if i < n and text[i] in "'\"" else ""
    if quote_char:
        i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if quote_char and c == quote_char:
            return i + 1
        if not quote_char and c.isspace():
            return i
        i += 1
    return n


def _secret_fields(text: str) -> list[tuple[int, int, str]]:
    """The secret fields of ``text``: ``(value_start, value_end, redacted)`` for each, where
    ``redacted`` is the field with ``***`` for its value (the spaces around ``=`` kept)."""
    fields = []
    query = text.find("?", text.find("://") + 1) if "://" in text else -1
    pos = 0
    while (found := _SECRET_FIELD.search(text, pos)) is not None:
        start = found.end()
        before = text[found.start() - 1] if found.start() > 0 else ""
        in_query = 0 <= query < found.start() and before in "?&;"
        end = _field_value_end(text, start, in_query)
        shown = f"{found.group(1)}{found.group(2)}={found.group(3)}{REDACTED}"
        fields.append((found.start(), end, shown))
        pos = max(end, found.end())
    return fields


def _redact_fields(text: str) -> str:
    parts, pos = [], 0
    for start, end, shown in _secret_fields(text):
        parts += [text[pos:start], shown]
        pos = end
    return "".join(parts) + text[pos:]


def _unescape(value: str) -> str:
    """A libpq field value as libpq reads it: the quotes dropped, backslash escapes undone."""
    if value[:1] in ("'", '"'):
        value = value[1:-1] if len(value) > 1 and value[-1] == value[0] else value[1:]
    return re.sub(r"\\(.)", r"\1", value, flags=re.S)


def redact_url(url: object) -> str:
    """``url`` as text with its secrets replaced by ``***``: the password of the userinfo
    (``redis://user:***@host/0``), the whole userinfo when it has no ``:`` (a lone word before
    ``@`` may be a password: ``redis://***@host``), and the value of a ``password=``
    (``sslpassword=``, ``secret=``, ``token=``...) query option (up to the next ``&``) or
    libpq key=value DSN field in any of libpq's forms: spaces around ``=``, a value in single
    quotes with backslash escapes (``password = 'a \\' b'``), an unquoted one up to the next
    whitespace (``password=ab;cd``).

    Never raises, and parses nothing it could fail on: when the text after ``://`` (or, with no
    ``://``, from the start) holds an ``@`` beyond the authority (a password with a ``/`` or an
    ``@`` in it, a malformed URL), everything up to the last ``@`` is replaced. Anything not a
    str is shown by its ``repr``. Shapes: ``str -> str``; a URL without secrets comes back
    unchanged.
    """
    text = url if isinstance(url, str) else repr(url)
    text = _redact_fields(text)
    at = text.rfind("@")
    if at < 0:
        return text
    sep = text.find("://")
    if sep < 0 or sep > at:
        return f"{REDACTED}{text[at:]}"
    start = sep + 3
    if text.startswith("/", start):
        return text  # no authority (sqlite:///a@b.db): an @ in a path is not a userinfo
    end = min((i for i in (text.find(c, start) for c in "/?#") if i >= 0), default=len(text))
    userinfo_end = text.rfind("@", start, end)
    if userinfo_end != at:  # none in the authority, or another later: ambiguous, hide it all
        return f"{text[:start]}{REDACTED}{text[at:]}"
    user, colon, _ = text[start:userinfo_end].partition(":")
    shown = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{text[:start]}{shown}{text[userinfo_end:]}"


def redact_text(text: object, url: object) -> str:
    """``text`` (an error message, a log line) with ``url`` and the secrets in it replaced as
    :func:`redact_url` does, wherever they occur: raw, percent-decoded (``+`` as a space too),
    percent-encoded, or as libpq reads a quoted DSN value. For messages of other libraries that
    may echo the URL or its password. Never raises: a ``text`` that is not a str is shown by its
    ``repr``."""
    if not isinstance(text, str):
        text = repr(text)
    if not isinstance(url, str) or not url:
        return text
    text = text.replace(url, redact_url(url))
    forms: set[str] = set()
    for secret in _secrets(url):
        for plain in (secret, unquote(secret), unquote_plus(secret), _unescape(secret)):
            forms.add(plain)
            forms.add(quote(plain, safe="", errors="surrogatepass"))
            forms.add(quote_plus(plain, safe="", errors="surrogatepass"))
    for form in sorted(forms, key=len, reverse=True):  # longest first: no partial leftovers
        if form:
            text = text.replace(form, REDACTED)
    return _redact_fields(text)


def _secrets(url: str) -> list[str]:
    """The secret strings of ``url``: the userinfo's password (or the whole userinfo when it has
    no ``:``) and the values of secret query and DSN fields (as written; quoted ones also
    unquoted)."""
    found = []
    for start, end, shown in _secret_fields(url):
        value = url[start + len(shown) - len(REDACTED) : end]
        found += [value, _unescape(value)]
    at = url.rfind("@")
    if at >= 0:
        sep = url.find("://")
        userinfo = url[sep + 3 if 0 <= sep < at else 0 : at]
        if not userinfo.startswith("/"):  # sqlite:///a@b.db: a path, no userinfo
            user, colon, password = userinfo.partition(":")
            found.append(password if colon else user)
    return [secret for secret in found if secret]


def _bad_url(url: str, message: str, argument: str = "url") -> ValidationError:
    return ValidationError(argument, f"{message}; got {redact_url(url)!r}")


def _scheme(url: object) -> str:
    text = check_key(url, "url")
    scheme, sep, _ = text.partition("://")
    if not sep:
        raise _bad_url(text, f"url must start with one of {_SCHEMES}")
    return scheme.lower()


def _check_memory(url: str, kwargs: dict[str, Any]) -> None:
    if url.partition("://")[2]:
        raise _bad_url(url, "a memory URL is exactly 'memory://'")
    for name in kwargs:
        raise ValidationError(name, f"memory:// takes no options; got {name}=")


def sqlite_options(url: str, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path and the :class:`SqliteBackend` keyword arguments a ``sqlite:///`` URL names.

    Raises:
        ValidationError: a host in the URL, no path, or an option other than ``busy_timeout_ms``.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _bad_url(url, f"not a usable SQLite URL ({exc})") from None
    if parts.netloc or not parts.path.startswith("/") or parts.fragment:
        raise _bad_url(
            url,
            "a SQLite URL is sqlite:///relative/path, sqlite:////absolute/path or"
            " sqlite:///:memory:",
        )
    try:
        path = unquote(parts.path[1:], errors="strict")
    except UnicodeDecodeError:
        raise _bad_url(url, "a SQLite path must percent-decode to UTF-8") from None
    if not path:
        raise _bad_url(url, "a SQLite URL needs a path after 'sqlite:///'")
    if "\x00" in path:
        raise _bad_url(url, "a SQLite path must not contain a NUL character")
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


_UNEXPECTED_OPTION = re.compile(r"unexpected keyword argument '(\w+)'")
_URL_OPTION = re.compile(r"value for '(\w+)'")


def redis_client(factory: Callable[..., _Client], url: str, kwargs: dict[str, Any]) -> _Client:
    """``factory(url, **kwargs)`` (``Redis.from_url`` of either face), with every option checked
    now rather than at the first command: one connection object is built (no I/O) so that an
    option the connection class does not take (``?ssl_cert_reqs=`` on ``redis://``, a typo) or
    a value it refuses is a :class:`ValidationError` naming it. redis-py's message is scrubbed of
    the URL's secrets; its exception stays in ``__cause__`` only when it holds none."""
    _check_url_query(url)
    try:
        client = factory(url, **kwargs)
        pool = client.connection_pool
        pool.connection_class(**pool.connection_kwargs)
    except (ValueError, TypeError, LookupError, redis.RedisError) as exc:
        message = str(exc)
        clean = redact_text(message, url)
        found = _UNEXPECTED_OPTION.search(message) or _URL_OPTION.search(message)
        argument = found.group(1) if found else "url"
        if isinstance(exc, TypeError) and found:
            clean = f"{argument} is not an option of {url.partition('://')[0]}:// connections"
        error = ValidationError(
            argument, f"{redact_url(url)!r} with these options is no usable Redis URL: {clean}"
        )
        raise error from (exc if clean == message else None)
    _check_connection_options(pool.connection_kwargs)
    return client


# Query options of a Redis URL whose value redis-py rightly keeps as the string given (the others
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


def _redis_parameters() -> frozenset[str]:
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


def _check_url_query(url: str) -> None:
    """Refuse a query option redis-py would pass on as a raw string where it takes an object
    (``?retry=1``, ``?connection_class=x``, ``?credential_provider=x``, ``?decode_responses=no``:
    a truthy string...): every parameter of redis-py's clients, pools and connections that is
    neither parsed by redis-py's URL parser nor a string option. Unknown names are left to
    :func:`redis_client`'s own check (it names them too).

    Raises:
        ValidationError: naming the option; its value is not shown (it may be a secret).
    """
    try:
        query = urlsplit(url).query
    except ValueError:
        return  # redis-py's parser reports the URL itself
    parsed = redis.connection.URL_QUERY_ARGUMENT_PARSERS
    known = _redis_parameters()
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


def _check_connection_options(options: dict[str, Any]) -> None:
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


def backend_from_url(url: str, *, prefix: str, clock: Clock, **kwargs: Any) -> LeaseBackend:
    """The :class:`LeaseBackend` a URL names (forms in the module docstring).

    The backend owns what it made (a Redis client, a SQLite connection): its ``close()`` closes
    them. ``clock`` dates expiry for ``memory://`` (its ``monotonic()``) and ``sqlite://`` (its
    ``time()``); Redis keeps its own time.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take
            (or a value redis-py would only refuse when it connects: a timeout that is not a
            finite positive number of seconds, an unknown encoding; a query option it would keep
            as a string where it takes an object or a bool), a bad ``prefix`` or
            ``clock``. A password in the URL shows as ``***`` in the message.
        BackendError: a SQLite database that cannot be opened.
    """
    kind, path, options = parse_backend_url(url, prefix, clock, kwargs)
    if kind == "redis":
        return RedisBackend(
            redis_client(redis.Redis.from_url, url, options), prefix, owns_client=True
        )
    if kind == "memory":
        return MemoryBackend(clock=clock)
    return SqliteBackend(path, prefix=prefix, clock=clock, **options)


def parse_backend_url(
    url: str, prefix: str, clock: Clock, kwargs: dict[str, Any]
) -> tuple[Literal["redis", "memory", "sqlite"], str, dict[str, Any]]:
    """What a URL names, for either face: ``(kind, path, options)``. ``path`` is the SQLite path
    (else the URL); ``options`` are the keyword arguments for the client or the backend. No I/O.

    Raises:
        ValidationError: an unknown scheme, a malformed URL, an option the scheme does not take,
            a bad ``prefix`` or ``clock``; a password in the URL shows as ``***``.
    """
    scheme = _scheme(url)
    check_prefix(prefix)
    check_clock(clock)
    if scheme in REDIS_SCHEMES:
        return "redis", url, kwargs
    if scheme == "memory":
        _check_memory(url, kwargs)
        return "memory", url, {}
    if scheme == "sqlite":
        path, options = sqlite_options(url, kwargs)
        return "sqlite", path, options
    raise _bad_url(url, f"url must start with one of {_SCHEMES}")
