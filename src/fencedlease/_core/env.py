"""A manager's configuration from environment variables, for either face's ``from_env``. No I/O.

The variables, their defaults and bounds are listed in
[`LeaseManager.from_env`][fencedlease.LeaseManager.from_env]; the bounds are `_NUMBERS`.

Numbers are non-negative integer strings of at most `MAX_DIGITS` ASCII digits (``"250"``, and
``"0250"``: leading zeros count as digits; not ``"+250"``, ``" 250"``, ``"250 "``, ``"2_50"``,
``"2.5e2"``), so that a value is never given to ``int()`` beyond Python's limit on the digits it
converts (a 5,000-digit string is refused like any other out of bounds). A bad or missing value
raises [`ValidationError`][fencedlease.ValidationError] whose ``argument`` is the variable's name; a
password in the URL shows as ``***``. The four Redis variables (``DB``, ``*_TIMEOUT_MS`` but the
shutdown one, ``MAX_RETRIES``) are refused with a ``memory://`` or ``sqlite://`` URL.

The variable set follows the usual shape of a lock provider configured from its environment (a URL,
a prefix, a database, connection and shutdown timeouts, retries and start-up attempts).
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import attrs

from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import redact_text
from fencedlease._core.urls import REDIS_URL_SCHEMES
from fencedlease._core.validate import MAX_MS, check_prefix

__all__ = [
    "DEFAULT_CONNECT_MAX_ATTEMPTS",
    "DEFAULT_SHUTDOWN_TIMEOUT_MS",
    "DEPRECATED_URL_VARIABLE",
    "ENV_PREFIX",
    "MAX_DIGITS",
    "URL_VARIABLE",
    "EnvConfig",
    "client_options",
    "manager_from_env",
    "naming_variables",
    "read_env",
    "url_from_env",
]

ENV_PREFIX = "FENCEDLEASE_"
URL_VARIABLE = ENV_PREFIX + "URL"
"""The one variable naming the store, for the library, the command line, the harness, the pytest
plugin and the tests."""
DEPRECATED_URL_VARIABLE = ENV_PREFIX + "REDIS_URL"
"""The name the harness, the plugin and the tests read before `URL_VARIABLE`; still read, with a
``DeprecationWarning``."""
DEFAULT_SHUTDOWN_TIMEOUT_MS = 5_000
DEFAULT_CONNECT_MAX_ATTEMPTS = 3
MAX_RETRIES = 1_000
MAX_DB = 2**31 - 1
#: The most digits a number variable may have: every bound has 10 at most, with room for zeros.
MAX_DIGITS = 20

_DIGITS = re.compile(r"[0-9]+\Z", re.ASCII)

# name (without the prefix) -> (least, most)
_NUMBERS: dict[str, tuple[int, int]] = {
    "DB": (0, MAX_DB),
    "CONNECT_TIMEOUT_MS": (1, MAX_MS),
    "SOCKET_TIMEOUT_MS": (1, MAX_MS),
    "SHUTDOWN_TIMEOUT_MS": (0, MAX_MS),
    "MAX_RETRIES": (0, MAX_RETRIES),
    "CONNECT_MAX_ATTEMPTS": (1, MAX_RETRIES),
}
_REDIS_ONLY = ("DB", "CONNECT_TIMEOUT_MS", "SOCKET_TIMEOUT_MS", "MAX_RETRIES")


@attrs.frozen
class EnvConfig:
    """What the ``FENCEDLEASE_*`` variables say (None: not set). Milliseconds as ints."""

    url: str
    prefix: str = "fencedlease"
    db: int | None = None
    connect_timeout_ms: int | None = None
    socket_timeout_ms: int | None = None
    max_retries: int | None = None
    shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS
    connect_max_attempts: int = DEFAULT_CONNECT_MAX_ATTEMPTS

    @property
    def is_redis(self) -> bool:
        """Whether the URL names a Redis server."""
        return self.url.partition("://")[0].lower() in REDIS_URL_SCHEMES

    def redis_options(self, make_retry: Callable[[int], Any]) -> dict[str, Any]:
        """The redis-py keyword arguments the variables set, as ``from_url`` passes them on:
        ``db``, ``socket_connect_timeout`` and ``socket_timeout`` (seconds), ``retry``
        (``make_retry(max_retries)``: the face's redis-py ``Retry``, made by the caller with
        exponential backoff and equal jitter, `fencedlease._redis.options.jittered_retry`).
        Empty when none is set."""
        options: dict[str, Any] = {}
        if self.db is not None:
            options["db"] = self.db
        if self.connect_timeout_ms is not None:
            options["socket_connect_timeout"] = self.connect_timeout_ms / 1000
        if self.socket_timeout_ms is not None:
            options["socket_timeout"] = self.socket_timeout_ms / 1000
        if self.max_retries is not None:
            options["retry"] = make_retry(self.max_retries)
        return options


def url_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The store's URL as ``environ`` (default ``os.environ``) names it: ``FENCEDLEASE_URL``, else
    the deprecated ``FENCEDLEASE_REDIS_URL``; None when neither is set to a non-empty string. The
    one reader of the variable: `LeaseManager.from_env`, the ``fencedlease`` commands, the
    harness, the pytest plugin and the tests all take the store from here.

    ``FENCEDLEASE_REDIS_URL`` alone is used, with a ``DeprecationWarning`` saying to set
    ``FENCEDLEASE_URL`` instead. Both set: ``FENCEDLEASE_URL`` wins; when the two differ a
    ``DeprecationWarning`` says which store is used and which ignored (passwords as ``***``),
    and when they are equal nothing is said (both may be set while programs move to the new
    name).

    Raises nothing.
    """
    return _url(os.environ if environ is None else environ, stacklevel=3)


def _url(environ: Mapping[str, str], stacklevel: int) -> str | None:
    url, old = environ.get(URL_VARIABLE) or None, environ.get(DEPRECATED_URL_VARIABLE) or None
    if old is None or old == url:
        return url
    if url is None:
        message = (
            f"{DEPRECATED_URL_VARIABLE} is deprecated: set {URL_VARIABLE} instead (the one"
            f" variable naming the store); {redact_text(old, old)!r} is used"
        )
    else:
        message = (
            f"{DEPRECATED_URL_VARIABLE} is deprecated and ignored: {URL_VARIABLE} is set too and"
            f" wins ({redact_text(url, url)!r} is used, not {redact_text(old, old)!r}); unset"
            f" {DEPRECATED_URL_VARIABLE}"
        )
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
    return old if url is None else url


def _number(environ: Mapping[str, str], name: str) -> int | None:
    variable = ENV_PREFIX + name
    raw = environ.get(variable)
    if raw is None:
        return None
    least, most = _NUMBERS[name]
    # The length first: int() refuses (ValueError) more digits than sys.get_int_max_str_digits().
    if len(raw) > MAX_DIGITS or not _DIGITS.match(raw) or not least <= int(raw) <= most:
        shown = raw if len(raw) <= 40 else f"{raw[:40]}... ({len(raw)} characters)"
        raise ValidationError(
            variable,
            f"{variable} must be an integer string of at most {MAX_DIGITS} digits,"
            f" {least} <= {variable} <= {most}; got {shown!r}",
        )
    return int(raw)


def _near_misses(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``FENCEDLEASE_*`` variables of ``environ`` that are no setting but look like one
    misspelt (``FENCEDLEASE_SOCKET_TIMEOUT`` for ``FENCEDLEASE_SOCKET_TIMEOUT_MS``), each with
    the setting it is closest to: a similarity ratio of at least 0.8 (``difflib``), so that
    variables of other tools sharing the prefix are not named."""
    known = ("URL", "REDIS_URL", "PREFIX", *_NUMBERS)
    found = []
    for variable in sorted(environ):
        name = variable[len(ENV_PREFIX) :] if variable.startswith(ENV_PREFIX) else None
        if name is None or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if close:
            found.append((variable, ENV_PREFIX + close[0]))
    return found


def _url_db(url: str) -> bool:
    """Whether a Redis URL names a database itself (``redis://h/3``, ``?db=3``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False  # from_url reports the URL itself
    in_path = parts.scheme.lower() != "unix" and parts.path.strip("/") != ""
    return in_path or "db" in parse_qs(parts.query)


def read_env(environ: Mapping[str, str] | None = None) -> EnvConfig:
    """The configuration in ``environ`` (default ``os.environ``); see the module docstring.

    A ``FENCEDLEASE_*`` variable that is no setting but close to one (a typo: ``..._TIMEOUT``
    for ``..._TIMEOUT_MS``) is named in a ``UserWarning`` with the setting it resembles: it is
    ignored, and a timeout the caller meant to set would silently keep its default. The URL is
    `url_from_env`'s (the deprecated ``FENCEDLEASE_REDIS_URL`` with a ``DeprecationWarning``).

    Raises:
        ValidationError: ``argument`` is the variable: missing or empty ``FENCEDLEASE_URL``, a
            number out of its bounds or not a digit string, a bad ``FENCEDLEASE_PREFIX``, a Redis
            variable with another store's URL, ``FENCEDLEASE_DB`` with a URL that names a
            database. A password in the URL shows as ``***``.
    """
    env = os.environ if environ is None else environ
    for variable, setting in _near_misses(env):
        warnings.warn(
            f"{variable} is not a fencedlease setting and is ignored; did you mean {setting}?",
            UserWarning,
            stacklevel=4,
        )
    url = _url(env, stacklevel=6)  # from_env's caller: read_env, manager_from_env, ..., from_env
    if url is None:
        raise ValidationError(
            URL_VARIABLE, f"{URL_VARIABLE} must be set to the store's URL (redis://...)"
        )
    prefix = env.get(ENV_PREFIX + "PREFIX")
    if prefix is not None:
        check_prefix(prefix, ENV_PREFIX + "PREFIX")
    numbers = {name: _number(env, name) for name in _NUMBERS}
    config = EnvConfig(
        url,
        prefix if prefix is not None else "fencedlease",
        numbers["DB"],
        numbers["CONNECT_TIMEOUT_MS"],
        numbers["SOCKET_TIMEOUT_MS"],
        numbers["MAX_RETRIES"],
        numbers["SHUTDOWN_TIMEOUT_MS"] if numbers["SHUTDOWN_TIMEOUT_MS"] is not None
        else DEFAULT_SHUTDOWN_TIMEOUT_MS,
        numbers["CONNECT_MAX_ATTEMPTS"] if numbers["CONNECT_MAX_ATTEMPTS"] is not None
        else DEFAULT_CONNECT_MAX_ATTEMPTS,
    )  # fmt: skip
    if not config.is_redis:
        for name in _REDIS_ONLY:
            if numbers[name] is not None:
                variable = ENV_PREFIX + name
                raise ValidationError(
                    variable,
                    f"{variable} applies to Redis URLs only; {ENV_PREFIX}URL is"
                    f" {redact_text(url, url)!r}",
                )
    elif config.db is not None and _url_db(url):
        raise ValidationError(
            ENV_PREFIX + "DB",
            f"{ENV_PREFIX}DB is set and {ENV_PREFIX}URL names a database too"
            f" ({redact_text(url, url)!r}): set one of them",
        )
    return config


def client_options(
    config: EnvConfig, kwargs: dict[str, Any], make_retry: Callable[[int], Any]
) -> dict[str, Any]:
    """The keyword arguments ``from_url`` gets: the variables' redis-py options
    (`EnvConfig.redis_options`) and the caller's ``kwargs``.

    Raises:
        ValidationError: a keyword argument sets an option a variable sets too (naming both).
    """
    options = config.redis_options(make_retry) if config.is_redis else {}
    for name in kwargs:
        if name in options:
            raise ValidationError(
                name, f"{name} is set both by a {ENV_PREFIX}* variable and as an argument"
            )
    return {**options, **kwargs}


@contextmanager
def naming_variables() -> Iterator[None]:
    """Re-raise a [`ValidationError`][fencedlease.ValidationError] about the URL or the prefix
    (from ``from_url``) as one naming the variable they came from; its message is kept."""
    try:
        yield
    except ValidationError as exc:
        variable = {"url": "URL", "prefix": "PREFIX"}.get(exc.argument)
        if variable is None:
            raise
        raise ValidationError(ENV_PREFIX + variable, f"{ENV_PREFIX}{variable}: {exc}") from None


_Made = TypeVar("_Made")


def manager_from_env(
    over_url: Callable[..., _Made],
    environ: Mapping[str, str] | None,
    kwargs: dict[str, Any],
    make_retry: Callable[[int], Any],
) -> tuple[_Made, EnvConfig]:
    """``over_url(url, prefix, options)`` as the variables of ``environ`` say (either face's
    ``from_env`` up to its start-up check), and the configuration read.

    Raises:
        ValidationError: as `read_env` and `client_options`; a URL or prefix the manager refuses,
            naming the variable.
    """
    config = read_env(environ)
    options = client_options(config, kwargs, make_retry)
    with naming_variables():
        return over_url(config.url, config.prefix, options), config
