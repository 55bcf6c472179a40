"""redis-py errors as [`BackendError`][fencedlease.BackendError], classified; ACL refusals named.

Every Redis error the library meets goes through `backend_error` (or the
`backend_errors` block around a call), once for every face and every Redis client kind. It
sets the classification the pure core reads ([`BackendError.sent`][fencedlease.BackendError.sent],
[`wrote`][fencedlease.BackendError.wrote], [`timed_out`][fencedlease.BackendError.timed_out]), so no
other module looks at redis-py's exception types:

``sent="no"``: the store was never reached, so the command cannot have run: an exhausted
connection pool (``MaxConnectionsError``, or a ``BlockingConnectionPool`` whose wait timed out: a
plain ``ConnectionError("No connection available.")``), or a connection that was never
established (refused, a unix socket path that does not exist, a host name that does not resolve,
or a connect that timed out).

``sent="maybe"``: a command may have run although no reply came (a connection reset, or a
timeout after sending), so only an idempotent retry is safe: for acquire, the same owner token.
``timed_out`` tells a timeout (Redis may be stalled) from a dropped connection.

``wrote="maybe"``: the command may have changed the store, so whatever it may have granted must be
released with the same owner token: ``sent="maybe"``, and an error reply from inside a running
script: Redis does not roll a script back, so a command that failed after an earlier write of the
script (a command an ACL denies, an out-of-memory refusal, a key of another type the script did
not check) leaves that write in place. ``wrote="no"``: a lease script's own refusal (its message
starts with `SCRIPT_REFUSAL`; every script checks its keys before
its first write), a refusal before the script ran (``NOSCRIPT``; ``NOPERM`` for ``EVALSHA``
itself, whose message names no script), a command that never left, and an error that is not
Redis's.

Where a module must tell one redis-py error from another (``NOSCRIPT``: send the script's source;
an error reply to ``INFO``: skip the check; any error of a best-effort call: log it), it runs the
call inside `map_exceptions` and catches the library's own kinds (`RedisCallError`,
`ScriptNotLoaded`, `CommandRefused`, `Redirected`), as httpcore maps its backends' errors: this
module is the only one that names redis-py's exception classes.

A Redis Cluster client's own errors (``RedisClusterException``, which is no ``RedisError``: slot
map unreadable, a slot no node serves; ``ClusterError``: redirections exhausted, ``CLUSTERDOWN``;
a MOVED, ASK or TRYAGAIN it passed on) are ``sent="maybe"``, ``wrote="maybe"``: the client retries
on other nodes and after dropped connections, so an earlier try may have run. Their messages are
cut before any echo of the command's arguments (an owner token is a secret). ``TRYAGAIN`` and
exhausted redirections are also ``busy`` (a slot being migrated: an acquire waits it out within its
``wait_ms``).

One limit: a client whose own retry policy (redis-py's ``retry=``) resends a command on a new
connection reports only its last try; if an earlier try landed and the last was refused, the grant
it made lapses at its TTL instead of being released (an unused grant, never a second holder).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import ClassVar, Final

from redis.exceptions import (
    AskError,
    ClusterError,
    InvalidResponse,
    MaxConnectionsError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fencedlease._core.errors import BackendError, FencedLeaseError, Sent, Wrote

from .acl_refusals import describe_refusal

__all__ = [
    "PROTOCOL_ERROR",
    "SCRIPT_REFUSAL",
    "STORE_ERRORS",
    "CommandRefused",
    "ConnectionLost",
    "Redirected",
    "RedisCallError",
    "ScriptNotLoaded",
    "TimedOut",
    "acl_denial",
    "backend_error",
    "backend_errors",
    "chain_texts",
    "classify",
    "map_exceptions",
    "socket_failed",
    "store_error",
    "without_secrets",
]

SCRIPT_REFUSAL: Final = "fencedlease "
"""How every error a lease script returns itself begins (after Redis's ``ERR``): such a script
checked its keys and refused before its first write, so it wrote nothing."""

# Where a redis-py cluster message starts echoing the command's arguments (owner tokens).
_ECHOED_ARGS: Final = re.compile(r"(?i)\b(?:in )?command:|\bargs\b")

_NOT_A_CLUSTER_CLIENT: Final = (
    "the server is a Redis Cluster node: use a redis+cluster:// URL or a RedisCluster client"
)

_NOT_SENT: Final = frozenset({"No connection available.", "Too many connections"})
"""The messages of redis-py's ``ConnectionError`` when the pool had no connection to give: a
``BlockingConnectionPool`` that timed out waiting (sync and asyncio), or an exhausted
``ConnectionPool`` before ``MaxConnectionsError`` existed."""

# The OS errors that only a connect can raise: the command was never written anywhere.
_CONNECT_ERRORS = (ConnectionRefusedError, FileNotFoundError, socket.gaierror)


# -- redis-py's exception classes, mapped in one place ---------------------------------------------


class RedisCallError(Exception):
    """A redis-py error raised inside `map_exceptions`, as the library's own type: the modules
    outside this one catch these, never redis-py's classes (httpcore's ``map_exceptions``).

    ``cause`` is redis-py's exception, also in ``__cause__``; ``str()`` is its text, so a message
    or a log line built from it reads as before. `store_error`, `backend_error` and `acl_denial`
    read ``cause``. This class maps every ``redis.RedisError``; its subclasses map one kind."""

    source: ClassVar[type[BaseException]] = RedisError
    """The redis-py class this one stands for."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.cause = cause

    def __str__(self) -> str:
        return str(self.cause)

    @classmethod
    def matches(cls, value: object) -> bool:
        """Whether ``value`` (an exception, or a reply a pipeline returned in place of a result)
        is redis-py's error of this kind."""
        return isinstance(value, cls.source)


class ScriptNotLoaded(RedisCallError):
    """``NOSCRIPT``: the server's script cache lacks the script (flushed, or a new server): send
    its source with ``EVAL``."""

    source = NoScriptError


class CommandRefused(RedisCallError):
    """An error reply (``ResponseError``): an ACL's ``NOPERM``, a managed service's renamed
    command, a script's error."""

    source = ResponseError


class ConnectionLost(RedisCallError):
    """redis-py's ``ConnectionError``: the connection broke, or could not be made."""

    source = RedisConnectionError


class TimedOut(RedisCallError):
    """redis-py's ``TimeoutError``: no reply within the socket's timeout."""

    source = RedisTimeoutError


class Redirected(RedisCallError):
    """``MOVED``: the key's slot is served by another cluster node (the slot map is stale)."""

    source = MovedError


def map_exceptions(*kinds: type[RedisCallError]) -> _Mapping:
    """A context manager: it raises a redis-py error inside as the first of ``kinds`` it
    `matches` (``from`` it); any other exception, redis-py's unlisted ones included, passes
    through unchanged. A plain object, not a generator: it wraps calls on the hot path (a
    script's ``EVALSHA``).

    Raises:
        RedisCallError: the matched kind, redis-py's exception in ``cause`` and ``__cause__``.
    """
    return _Mapping(kinds)


class _Mapping:
    __slots__ = ("_kinds",)

    def __init__(self, kinds: tuple[type[RedisCallError], ...]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, RedisError):
            for kind in self._kinds:
                if kind.matches(exc):
                    raise kind(exc) from exc


# -- the lean path's failures, as redis-py words them (fencedlease._redis.lean) --------------------
PROTOCOL_ERROR: Final = InvalidResponse  # hiredis's error for bytes that are not RESP


def socket_failed(conn: object, exc: OSError | None, reading: bool = True) -> Exception:
    """redis-py's exception, in its words, for ``exc`` from a read (``reading``) or a write of
    ``conn``'s socket (None: closed by the server): ``TimeoutError`` if none in time."""
    if exc is None:
        return RedisConnectionError("Connection closed by server.")
    if not reading:
        if isinstance(exc, TimeoutError):
            return RedisTimeoutError("Timeout writing to socket")
        errno, message = ("UNKNOWN", exc.args[0]) if len(exc.args) == 1 else exc.args[:2]
        return RedisConnectionError(f"Error {errno} while writing to socket. {message}.")
    host_error = getattr(conn, "_host_error", None)
    where = host_error() if host_error is not None else "socket"
    if isinstance(exc, (TimeoutError, BlockingIOError, ssl.SSLWantReadError)):  # none in time
        return RedisTimeoutError(f"Timeout reading from {where}")
    return RedisConnectionError(f"Error while reading from {where} : {exc.args}")


def _unwrapped(exc: BaseException) -> BaseException:
    return exc.cause if isinstance(exc, RedisCallError) else exc


def _never_sent(cause: BaseException) -> bool:
    if isinstance(cause, MaxConnectionsError):
        return True
    if not isinstance(cause, (RedisConnectionError, RedisTimeoutError)):
        return False
    if (
        isinstance(cause, RedisConnectionError)
        and len(cause.args) == 1
        and cause.args[0] in _NOT_SENT
    ):
        return True
    if isinstance(cause, RedisTimeoutError) and str(cause).startswith("Timeout connecting"):
        return True  # redis-py's connect timeout (both faces); reads say "Timeout reading"
    seen: set[int] = set()
    error: BaseException | None = cause
    while error is not None and id(error) not in seen:  # redis-py raises inside the OS error
        seen.add(id(error))
        if isinstance(error, _CONNECT_ERRORS):
            return True
        error = error.__cause__ or error.__context__
    return False


def classify(cause: BaseException) -> tuple[Sent, Wrote, bool]:
    """``(sent, wrote, timed_out)`` of a call that failed with ``cause`` (see the module doc);
    an error that is not redis-py's: ``("yes", "no", False)``."""
    if _never_sent(cause):
        return "no", "no", False
    if isinstance(cause, (RedisClusterException, ClusterError, AskError, TryAgainError)):
        return "maybe", "maybe", False
    if isinstance(cause, (RedisConnectionError, RedisTimeoutError)):
        return "maybe", "maybe", isinstance(cause, RedisTimeoutError)
    if not isinstance(cause, ResponseError) or isinstance(cause, NoScriptError):
        return "yes", "no", False
    message = str(cause)
    if isinstance(cause, NoPermissionError) and "script" not in message:
        return "yes", "no", False
    return "yes", ("no" if message.startswith(SCRIPT_REFUSAL) else "maybe"), False


def backend_error(operation: str, cause: BaseException) -> BackendError:
    """``cause`` (a redis-py error, or a reply a ``decode_responses=True`` client cannot decode)
    as the [`BackendError`][fencedlease.BackendError] to raise ``from`` it: the message names
    ``operation`` and, for a refusal by the Redis ACL, the refused command (`acl_denial`);
    classified by `classify`. The caller sets ``__cause__`` by ``raise ... from cause``; a
    `RedisCallError` is read as the redis-py error it stands for."""
    cause = _unwrapped(cause)
    if isinstance(cause, UnicodeDecodeError):
        message = (
            f"{operation}: a reply is not UTF-8 (the client decodes responses): {cause.reason}"
        )
    elif isinstance(cause, RedisClusterException):
        said = str(cause).split("\n", 1)[0]
        said = _ECHOED_ARGS.split(said, 1)[0].rstrip(" :.")
        message = f"{operation}: {type(cause).__name__}: {said}"
    else:
        denied = acl_denial(cause) if isinstance(cause, RedisError) else None
        detail = f"{denied}: " if denied else ""
        message = f"{operation}: {detail}{type(cause).__name__}: {cause}"
        if isinstance(cause, MovedError) or (  # a cluster client follows MOVED: this is not one
            # (an older redis-py, 5.0.1 among them, parses a plain client's MOVED as such)
            type(cause) is ResponseError and str(cause).startswith("MOVED ")
        ):
            message += f" ({_NOT_A_CLUSTER_CLIENT})"
    sent, wrote, timed_out = classify(cause)
    return BackendError(message, sent=sent, wrote=wrote, timed_out=timed_out, busy=_busy(cause))


def _busy(cause: BaseException) -> bool:
    """Whether a cluster turned the call away for a while (`BackendError.busy`): ``TRYAGAIN``
    (a slot being migrated, the call's keys split between its two nodes, or some missing on
    the importing one), or redis-py's redirections exhausted ("TTL exhausted": every try of the
    last call was redirected or told to try again, as for the whole of a slot's migration)."""
    if isinstance(cause, TryAgainError):
        return True
    return type(cause) is ClusterError and str(cause).startswith("TTL exhausted")


STORE_ERRORS: Final = (
    RedisError,
    RedisCallError,
    RedisClusterException,
    UnicodeDecodeError,
    ValueError,
    TypeError,
    OSError,
)
"""What a call into redis-py may raise that `store_error` maps: catch these (a plain
``try``/``except``, which costs nothing until one is raised) and ``raise store_error(...)``."""


def store_error(operation: str, exc: BaseException) -> BaseException:
    """What to raise for ``exc`` (one of `STORE_ERRORS`) from a redis-py call named by
    ``operation``, the message built only now: the library's own errors (a ``ValidationError`` is
    a ``ValueError``) unchanged; a redis-py error, or a reply a ``decode_responses=True`` client
    cannot decode (a key holding bytes that are not UTF-8: redis-py drops that connection), as
    `backend_error`; a ``ValueError``/``TypeError``/``OSError`` redis-py raised from a setting it
    did not check (a client made with ``socket_read_size=-1`` fails in recv, after the command was
    sent) as a [`BackendError`][fencedlease.BackendError] that may have run. The error to raise
    has ``exc`` in ``__cause__`` (set here: ``raise store_error(op, exc)`` keeps it); for a
    `RedisCallError`, the redis-py error it stands for, read as if it had not been mapped."""
    exc = _unwrapped(exc)
    if isinstance(exc, FencedLeaseError):
        return exc
    if isinstance(exc, (RedisError, RedisClusterException, UnicodeDecodeError)):
        error = backend_error(operation, exc)
    else:
        error = BackendError(
            f"{operation}: {type(exc).__name__}: {exc}", sent="maybe", wrote="maybe"
        )
    error.__cause__ = exc  # as ``raise error from exc`` sets it
    error.__suppress_context__ = True
    return error


@contextmanager
def backend_errors(operation: str) -> Iterator[None]:
    """Raise any of `STORE_ERRORS` inside as `store_error` maps it. For calls off the hot path;
    a lease operation uses ``try``/``except STORE_ERRORS`` and builds its message only on error."""
    try:
        yield
    except STORE_ERRORS as exc:
        raise store_error(operation, exc)  # noqa: B904  (the cause is set by store_error)


# -- an error's texts: a secret kept out, an ACL refusal named -------------------------------------


def chain_texts(exc: BaseException) -> list[str]:
    """What a traceback of ``exc`` shows of it and of every exception chained to it
    (``__cause__``, ``__context__``): each one's ``repr`` and ``str``."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [repr(current), str(current)]
        pending += [current.__cause__, current.__context__]
    return texts


def without_secrets(error: BackendError, redact: Callable[[str], str]) -> BackendError:
    """``error`` itself when ``redact`` (a scrub of a URL's or a client's secrets) changes no
    text of it or of its chain (`chain_texts`); else a `BackendError` of the same ``sent``,
    ``wrote`` and ``timed_out`` with the redacted message and nothing chained: a host or a
    socket path that holds a piece of the password (one equal to the host, a URL redis-py read
    wrongly) is not shown, at the cost of the store's own exception."""
    if all(redact(text) == text for text in chain_texts(error)):
        return error
    return BackendError(
        redact(str(error)), sent=error.sent, wrote=error.wrote, timed_out=error.timed_out
    )


def acl_denial(exc: BaseException) -> str | None:
    """What the Redis ACL refused, in words naming the command, or None if ``exc`` is no ACL
    refusal: a ``NOPERM`` reply (a command, a key or a channel refused) or the error of a refused
    ``redis.call`` inside a script, read by `fencedlease._redis.acl_refusals.describe_refusal`.
    """
    exc = _unwrapped(exc)
    return describe_refusal(str(exc), noperm=isinstance(exc, NoPermissionError))
