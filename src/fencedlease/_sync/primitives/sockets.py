"""A redis-py connection's bytes written and read on the sync face, each bounded by the
connection's ``socket_timeout`` as redis-py's own send and read are (the lean path of the hot
commands, `fencedlease._sync.wire`). Written by hand on both faces."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["read_bytes", "redis_clock_s", "send_bytes"]


def redis_clock_s() -> float:
    """The clock (seconds) redis-py's connections of this face time their health checks by
    (``next_health_check``): the event loop's on asyncio, ``time.monotonic`` on threads."""
    return time.monotonic()


def send_bytes(conn: Any, data: bytes) -> None:
    """Write ``data`` on redis-py's connection ``conn`` (made): its socket's ``sendall``, bounded
    by the connection's ``socket_timeout`` (set on the socket by redis-py), as redis-py's own
    send is.

    Raises:
        TimeoutError: not written within ``socket_timeout``.
        OSError: the connection's.
    """
    conn._sock.sendall(data)


def read_bytes(conn: Any, size: int) -> bytes:
    """The next bytes (at most ``size``) on redis-py's connection ``conn`` (made), waited for
    within its ``socket_timeout`` (set on the socket by redis-py; None: no bound); ``b""`` when
    the server closed it.

    Raises:
        TimeoutError: nothing came within ``socket_timeout``.
        OSError: the connection's.
    """
    data: bytes = conn._sock.recv(size)
    return data
