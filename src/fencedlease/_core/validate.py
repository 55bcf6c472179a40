"""Argument validation: pure functions shared by every face and backend.

Every duration is an ``int`` of milliseconds, as Redis ``PX`` takes it. ``bool`` is refused even
though it is an ``int`` subclass (``ttl_ms=True`` is a bug, not one millisecond), and so are
``float`` (``0.5``, NaN), ``None`` and strings. The upper bound 2,147,483,647 is the largest timer
most runtimes accept, and keeps every value well inside Redis's own limits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Final, Literal, NamedTuple

from fencedlease._core.errors import ValidationError
from fencedlease._core.protocol import PLAIN_GRANT, GrantExtras

__all__ = [
    "MAX_MS",
    "MAX_SEMAPHORE_LIMIT",
    "ArgumentTypeError",
    "HoldArgs",
    "check_acquire",
    "check_async_fn",
    "check_backend",
    "check_callback",
    "check_clock",
    "check_heartbeat_ms",
    "check_hold",
    "check_key",
    "check_lease_args",
    "check_limit",
    "check_ms",
    "check_prefix",
    "check_strict",
    "check_sync_fn",
    "is_coroutine_callable",
]

#: The methods every lease backend has, on either face (see :mod:`fencedlease._core.backend`).
BACKEND_METHODS = ("acquire", "renew", "renew_many", "release", "inspect", "force_release", "close")


class ArgumentTypeError(ValidationError, TypeError):
    """An argument of the wrong kind of object (a sync client or function for the asyncio face,
    and the reverse): a [`ValidationError`][fencedlease.ValidationError] that is also a
    ``TypeError``, as Python's own type errors are."""


MAX_MS = 2_147_483_647


def check_ms(argument: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) with ``minimum <= value <= MAX_MS``.

    Raises:
        ValidationError: naming ``argument`` and the bound, otherwise.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(
            argument,
            f"{argument} must be an int of milliseconds, {minimum} <= {argument} <= {MAX_MS};"
            f" got {value!r} ({type(value).__name__})",
        )
    if not minimum <= value <= MAX_MS:
        raise ValidationError(
            argument,
            f"{argument} must be between {minimum} and {MAX_MS} milliseconds; got {value}",
        )
    # An int subclass (an IntEnum member) becomes its plain value: redis-py would send its repr.
    return int(value)


def check_heartbeat_ms(value: object, ttl_ms: int) -> int | Literal[False]:
    """Resolve the renewal interval for a lease of ``ttl_ms``.

    ``None`` gives the default ``max(1, ttl_ms // 4)``: three renewals in a row can fail before the
    lease could lapse. ``False`` turns renewal off. An explicit value must be an ``int`` with
    ``1 <= heartbeat_ms <= ttl_ms // 2``: above half the TTL the first renewal can arrive at or
    after expiry, and the lease lapses before it is ever renewed.

    Raises:
        ValidationError: for any other value.
    """
    if value is None:
        return max(1, ttl_ms // 4)
    if value is False:
        return False
    heartbeat = check_ms("heartbeat_ms", value, 1)
    if heartbeat > ttl_ms // 2:
        raise ValidationError(
            "heartbeat_ms",
            f"heartbeat_ms must be at most half of ttl_ms ({ttl_ms // 2}); got {heartbeat}",
        )
    return heartbeat


def check_key(value: object, argument: str = "key") -> str:
    """Return ``value`` if it is a non-empty ``str`` (any characters, braces and newlines included).

    Raises:
        ValidationError: for an empty string or a non-string.
    """
    if not isinstance(value, str):
        raise ValidationError(argument, f"{argument} must be a str; got {type(value).__name__}")
    if not value:
        raise ValidationError(argument, f"{argument} must be a non-empty str")
    if value.isascii():  # the common case, checked without encoding
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from os.fsdecode
        raise ValidationError(
            argument, f"{argument} must be encodable as UTF-8; {exc.reason} at index {exc.start}"
        ) from None
    return value


def check_lease_args(key: object, owner_token: object, ttl_ms: object) -> tuple[str, str, int]:
    """Validate what a backend's acquire and renew take (every item of a ``renew_many`` too):
    ``key`` and ``owner_token`` non-empty ``str``, ``ttl_ms`` an int in 1..MAX_MS; return them.

    Raises:
        ValidationError: naming the first argument that is not.
    """
    return check_key(key), check_key(owner_token, "owner_token"), check_ms("ttl_ms", ttl_ms, 1)


def check_prefix(value: object, argument: str = "prefix") -> str:
    """Return ``value`` if it is a non-empty ``str`` with no ``{`` or ``}``.

    A brace in a prefix would open or end the Redis Cluster hash tag of every key under it, and
    let two different ``(prefix, key)`` pairs name one Redis key (see
    `fencedlease._core.protocol` for the layout); a key may hold braces, since it is escaped.

    Raises:
        ValidationError: otherwise.
    """
    prefix = check_key(value, argument)
    if "{" in prefix or "}" in prefix:
        raise ValidationError(
            argument, f"{argument} must not contain '{{' or '}}' (they delimit the hash tag)"
        )
    return prefix


def check_strict(strict: object) -> bool:
    """Return ``strict`` if it is a ``bool``; raise [`ValidationError`][fencedlease.ValidationError]
    naming it otherwise (``strict="no"`` would be true)."""
    if not isinstance(strict, bool):
        raise ValidationError("strict", f"strict must be a bool, not {type(strict).__name__}")
    return strict


def check_acquire(
    key: object, ttl_ms: object, wait_ms: object, retry_delay_ms: object
) -> tuple[str, int, int, int]:
    """Validate the arguments every acquire takes (both faces): ``key`` non-empty, ``ttl_ms`` in
    1..MAX_MS, ``wait_ms`` in 0..MAX_MS, ``retry_delay_ms`` in 1..MAX_MS; return them as plain
    values.

    Raises:
        ValidationError: naming the first argument out of bounds.
    """
    return (
        check_key(key),
        check_ms("ttl_ms", ttl_ms, 1),
        check_ms("wait_ms", wait_ms, 0),
        check_ms("retry_delay_ms", retry_delay_ms, 1),
    )


class HoldArgs(NamedTuple):
    """The arguments of one ``hold``/``with_lease``, checked (see `check_hold`); ``heartbeat`` is
    the resolved renewal interval in milliseconds, or False for none; ``extras`` what the grant
    stores beside the lease (`fencedlease._core.extras.check_extras`)."""

    key: str
    ttl_ms: int
    wait_ms: int
    retry_delay_ms: int
    heartbeat: int | Literal[False]
    on_renew_error: Callable[[BaseException], object] | None
    extras: GrantExtras = PLAIN_GRANT


def check_hold(
    key: object,
    ttl_ms: object,
    wait_ms: object,
    retry_delay_ms: object,
    heartbeat_ms: object,
    on_renew_error: object,
    extras: GrantExtras = PLAIN_GRANT,
) -> HoldArgs:
    """Validate the arguments of ``hold``/``with_lease`` (both faces): those of `check_acquire`,
    then ``heartbeat_ms`` (`check_heartbeat_ms`), then ``on_renew_error`` (callable or None);
    ``extras`` already checked (`fencedlease._core.extras.check_extras`).

    Raises:
        ValidationError: naming the first argument out of bounds.
    """
    key, ttl, wait, retry = check_acquire(key, ttl_ms, wait_ms, retry_delay_ms)
    heartbeat = check_heartbeat_ms(heartbeat_ms, ttl)
    hook = check_callback(on_renew_error, "on_renew_error")
    return HoldArgs(key, ttl, wait, retry, heartbeat, hook, extras)


def check_callback(value: object, argument: str) -> Callable[..., object] | None:
    """Return ``value`` if it is None or callable.

    Raises:
        ValidationError: naming ``argument``, otherwise.
    """
    if value is not None and not callable(value):
        raise ValidationError(
            argument, f"{argument} must be callable or None; got {type(value).__name__}"
        )
    return value


def is_coroutine_callable(value: object) -> bool:
    """Whether calling ``value`` makes a coroutine as far as can be told without calling it: an
    ``async def`` function or method, a `functools.partial` of one, or an object whose
    ``__call__`` is one."""
    if inspect.iscoroutinefunction(value):
        return True
    call = getattr(type(value), "__call__", None)  # noqa: B004  (the class's, not a method's)
    return not inspect.isroutine(value) and inspect.iscoroutinefunction(call)


def check_sync_fn(fn: object) -> Callable[..., object]:
    """``fn`` for the sync face's ``with_lease``: callable, and not an ``async def`` function
    (calling one would only make a coroutine, never run it).

    Raises:
        ValidationError: ``fn`` is not callable; an `ArgumentTypeError` when it is a
            coroutine function (``AsyncLeaseManager.with_lease`` awaits those).
    """
    if not callable(fn):
        raise ValidationError("fn", f"fn must be callable; got {type(fn).__name__}")
    if is_coroutine_callable(fn):
        raise ArgumentTypeError(
            "fn",
            "fn is an async function: LeaseManager.with_lease would never await it; use"
            " fencedlease.aio.AsyncLeaseManager.with_lease",
        )
    return fn


def check_async_fn(fn: object) -> Callable[..., object]:
    """``fn`` for the asyncio face's ``with_lease``: callable (an ``async def`` function, or any
    callable that returns an awaitable; the latter is checked once called).

    Raises:
        ValidationError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise ValidationError("fn", f"fn must be callable; got {type(fn).__name__}")
    return fn


def check_clock(clock: object) -> None:
    """``clock`` must have callable ``monotonic()`` and ``time()`` (see
    [`Clock`][fencedlease.Clock]).

    Raises:
        ValidationError: naming ``clock``, otherwise.
    """
    for name in ("monotonic", "time"):
        if not callable(getattr(clock, name, None)):
            raise ValidationError(
                "clock",
                f"clock must have callable monotonic() and time(); {type(clock).__name__}"
                f" has no {name}()",
            )


def check_backend(client: object, *, asyncio: bool, sync_classes: tuple[type, ...] = ()) -> None:
    """``client`` (neither redis-py client, already told apart by the caller) must be a lease
    backend of the face's kind: every method of `BACKEND_METHODS`; for the sync face an
    ``acquire`` that is not ``async def``; for the asyncio face none of ``sync_classes`` (the
    library's sync backends).

    Raises:
        ValidationError: naming ``client``: not a backend; an `ArgumentTypeError` for a
            backend of the other face.
    """
    if not asyncio and type(client).__module__.startswith("redis.asyncio"):
        raise ArgumentTypeError(
            "client",
            "LeaseManager needs a redis.Redis; a redis.asyncio client goes to"
            " fencedlease.aio.AsyncLeaseManager",
        )
    missing = [name for name in BACKEND_METHODS if not callable(getattr(client, name, None))]
    if missing:
        face = "a redis.asyncio.Redis" if asyncio else "a redis.Redis"
        raise ValidationError(
            "client",
            f"client must be {face} or a lease backend; {type(client).__name__} has no"
            f" {', '.join(missing)}",
        )
    # Certain cases only: an async def acquire for the sync face; one of the library's sync
    # backends for the asyncio face (a plain acquire elsewhere may return an awaitable).
    if (
        isinstance(client, sync_classes)
        if asyncio
        else is_coroutine_callable(getattr(client, "acquire"))  # noqa: B009
    ):
        other = "LeaseManager" if asyncio else "fencedlease.aio.AsyncLeaseManager"
        raise ArgumentTypeError(
            "client",
            f"client {type(client).__name__} is a backend for the other face; it goes to {other}",
        )


MAX_SEMAPHORE_LIMIT: Final = 10_000
"""The largest ``limit`` of a semaphore: every grant scans and purges the slot set, so it stays
small."""


def check_limit(limit: object) -> int:
    """``limit`` as an int in 1..`MAX_SEMAPHORE_LIMIT`.

    Raises:
        ValidationError: anything else (``bool`` included), naming ``limit`` and the bound.
    """
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_SEMAPHORE_LIMIT
    ):
        raise ValidationError(
            "limit", f"limit must be an int, 1 <= limit <= {MAX_SEMAPHORE_LIMIT}; got {limit!r}"
        )
    return int(limit)
