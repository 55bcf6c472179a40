"""Argument validation: pure functions shared by every face and backend.

Every duration is an ``int`` of milliseconds, as Redis ``PX`` takes it. ``bool`` is refused even
though it is an ``int`` subclass (``ttl_ms=True`` is a bug, not one millisecond), and so are
``float`` (``0.5``, NaN), ``None`` and strings. The upper bound 2,147,483,647 is the largest timer
most runtimes accept, and keeps every value well inside Redis's own limits.
"""

from __future__ import annotations

from typing import Literal

from ._errors import ValidationError

__all__ = [
    "MAX_MS",
    "check_acquire",
    "check_heartbeat_ms",
    "check_key",
    "check_ms",
    "check_prefix",
]

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
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from os.fsdecode
        raise ValidationError(
            argument, f"{argument} must be encodable as UTF-8; {exc.reason} at index {exc.start}"
        ) from None
    return value


def check_prefix(value: object, argument: str = "prefix") -> str:
    """Return ``value`` if it is a non-empty ``str`` with no ``{`` or ``}``.

    A brace in a prefix would open or end the Redis Cluster hash tag of every key under it, and
    let two different ``(prefix, key)`` pairs name one Redis key (see
    :mod:`fencedlease._protocol` for the layout); a key may hold braces, since it is escaped.

    Raises:
        ValidationError: otherwise.
    """
    prefix = check_key(value, argument)
    if "{" in prefix or "}" in prefix:
        raise ValidationError(
            argument, f"{argument} must not contain '{{' or '}}' (they delimit the hash tag)"
        )
    return prefix


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
