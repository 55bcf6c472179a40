"""The caller's client made from a URL, its options checked at once, and the scrub of its
password from error messages (either face). The library's own clients beside the caller's pool
are `fencedlease._async.clients`'s (the sync face's generated from it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from fencedlease._core.errors import ValidationError
from fencedlease._core.redact import redact_secrets, redact_text, url_error

from .errors import RedisCallError, map_exceptions
from .options import check_connection_options, check_url_query

__all__ = ["client_redactor", "redis_client"]


class _PooledClient(Protocol):
    @property
    def connection_pool(self) -> Any: ...


_Client = TypeVar("_Client", bound=_PooledClient)


_UNEXPECTED_OPTION = re.compile(r"unexpected keyword argument '(\w+)'")
_URL_OPTION = re.compile(
    r"value for ['`](\w+)['`]"
)  # newer redis-py quotes the name '...', older `...`


def redis_client(factory: Callable[..., _Client], url: str, kwargs: dict[str, Any]) -> _Client:
    """``factory(url, **kwargs)`` (``Redis.from_url`` of either face), with every option checked
    now rather than at the first command: one connection object is built (no I/O) so that an
    option the connection class does not take (``?ssl_cert_reqs=`` on ``redis://``, a typo) or
    a value it refuses is a [`ValidationError`][fencedlease.ValidationError] naming it. redis-py's
    message is scrubbed of the URL's secrets (`fencedlease._core.redact.url_error`); its exception
    stays in ``__cause__`` only when it holds none of them."""
    check_url_query(url)
    try:
        with map_exceptions(RedisCallError):
            client = factory(url, **kwargs)
            pool = client.connection_pool
            pool.connection_class(**pool.connection_kwargs)
    except RedisCallError as exc:
        error = _unusable(url, exc.cause)
    except (ValueError, TypeError, LookupError) as exc:
        error = _unusable(url, exc)
    else:
        check_connection_options(pool.connection_kwargs)
        return client
    raise error  # here, with no exception holding the URL chained to it


def _unusable(url: str, exc: BaseException) -> ValidationError:
    """The error of a URL or an option redis-py refused with ``exc``."""
    message = str(exc)
    found = _UNEXPECTED_OPTION.search(message) or _URL_OPTION.search(message)
    argument = found.group(1) if found else "url"
    detail = message
    if isinstance(exc, TypeError) and found:
        detail = f"{argument} is not an option of {url.partition('://')[0]}:// connections"
    error = url_error(url, "not a usable Redis URL with these options", argument, detail)
    if redact_text(f"{exc!r} {message}", url) == f"{exc!r} {message}":
        error.__cause__ = exc  # it holds no secret of the URL: keep it for the traceback
    return error


def client_redactor(client: object) -> Callable[[str], str]:
    """A scrub of ``client``'s password (`fencedlease._core.redact.redact_secrets`) for the messages
    of its errors, which name its host, port or socket path: a password equal to one of them is
    not shown there. Either face; a client of one server (its pool's connection options) or of
    a cluster (its own); the identity for a client with no password."""
    secrets: list[str] = []
    for holder in (getattr(client, "connection_pool", None), client):
        options = getattr(holder, "connection_kwargs", None)
        password = options.get("password") if isinstance(options, dict) else None
        if isinstance(password, str) and password:
            secrets.append(password)
    return lambda text: redact_secrets(text, secrets) if secrets else text
