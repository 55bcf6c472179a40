"""A redis-py connection's bytes written and read on the asyncio face, each bounded by the
connection's ``socket_timeout`` as redis-py's own send and read are (the lean path of the hot
commands, `fencedlease._async.wire`). Written by hand on both faces."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    from asyncio import timeout as _timeout
else:  # pragma: no cover - redis-py depends on it there
    from async_timeout import timeout as _timeout

__all__ = ["read_bytes", "redis_clock_s", "send_bytes"]

T = TypeVar("T")


def redis_clock_s() -> float:
    """The clock (seconds) redis-py's connections of this face time their health checks by
    (``next_health_check``): the event loop's on asyncio, ``time.monotonic`` on threads."""
    return asyncio.get_running_loop().time()


async def send_bytes(conn: Any, data: bytes) -> None:
    """Write ``data`` on redis-py's connection ``conn`` (made) and wait until its buffer drained,
    within the connection's ``socket_timeout`` (None: no bound), as redis-py's own send does.

    Raises:
        TimeoutError: not drained within ``socket_timeout``.
        OSError: the connection's.
    """
    conn._writer.write(data)
    await _bounded_by(conn.socket_timeout, conn._writer.drain())


async def read_bytes(conn: Any, size: int) -> bytes:
    """The next bytes (at most ``size``) on redis-py's connection ``conn`` (made), waited for
    within its ``socket_timeout`` (None: no bound); ``b""`` when the server closed it.

    Raises:
        TimeoutError: nothing came within ``socket_timeout``.
        OSError: the connection's.
    """
    return await _bounded_by(conn.socket_timeout, conn._reader.read(size))


async def _bounded_by(timeout_s: float | None, step: Awaitable[T]) -> T:
    if not timeout_s:
        return await step
    try:
        async with _timeout(timeout_s):
            return await step
    except asyncio.TimeoutError:  # not the built-in TimeoutError before Python 3.11
        raise TimeoutError from None
