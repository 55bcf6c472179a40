"""The send of the commands the library packs (`fencedlease._redis.wire`): a packed renewal
batch, release or acquire on one of a redis-py client's pooled connections, written and read by
the library where ``hiredis`` is importable (`exchange`: `fencedlease._redis.lean`), else by
redis-py, with the same results, errors and timeouts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio

from fencedlease._core.clock import mark_send
from fencedlease._redis.errors import (
    CommandRefused,
    ConnectionLost,
    ScriptNotLoaded,
    map_exceptions,
    socket_failed,
)
from fencedlease._redis.lean import NOT_YET, READ_SIZE, fed, leftover, reader_for, reply_of
from fencedlease._redis.pool import connection_args
from fencedlease._redis.wire import PrimaryReads, always, forget_primary

from .primitives import read_bytes, redis_clock_s, send_bytes

__all__ = ["exchange", "packs_itself", "read_lean", "run_packed", "send_lean"]


def packs_itself(client: object) -> bool:
    """Whether a batch for ``client`` may go out packed (`run_packed`): a plain
    ``redis.asyncio.Redis`` on a pool (not one holding a connection of its own: its lock is
    redis-py's)."""
    return isinstance(client, redis.asyncio.Redis) and client.connection is None


async def run_packed(
    client: redis.asyncio.Redis,
    command: bytes | PrimaryReads,
    again: Callable[[], bool] = always,
) -> Any:
    """Send ``command`` (a `PackedRenewals.command`, a `PackedCalls.release`, or an acquire of
    `PrimaryReads`) on one of ``client``'s pooled connections and read its reply, marking the
    send (`fencedlease._core.clock.mark_send`) once the connection is made. A connection that breaks
    is dropped and the command sent once more on a new one (a pooled connection the server
    closed meanwhile; a renewal is safe to repeat, and so is an acquire: the owner token's second
    try finds the lease its own; a release that ran before its connection broke answers 0 the
    second time, and the lease is reported lost, as redis-py's own retry of a command would).
    It is sent once more only while ``again()`` is true: a manager closed meanwhile (its caller
    then closes the client, whose pool this is) makes no new connection that nobody would close.
    A call interrupted otherwise (on the asyncio face, cancelled) drops its connection: a reply
    may still be on its way.

    Raises:
        RedisCallError: the reply's error, `CommandRefused` (`ScriptNotLoaded` for ``NOSCRIPT``:
            the caller falls back to `fencedlease._redis.scripts.run_script`), or the
            connection's, `ConnectionLost`; another redis-py error as redis-py raised it.
    """
    pool: Any = client.connection_pool  # redis-py's pool methods carry no annotations
    for attempt in (1, 2):
        conn = await pool.get_connection(*connection_args(pool))
        try:
            with map_exceptions(ScriptNotLoaded, CommandRefused, ConnectionLost):
                packed = command if isinstance(command, bytes) else command.command(conn)
                mark_send()
                reply = await exchange(conn, packed)
                return reply if isinstance(command, bytes) else command.reply(conn, reply)
        except (ScriptNotLoaded, CommandRefused):
            forget_primary(conn)
            raise  # a reply: the connection is in step
        except ConnectionLost:
            # nowait on the asyncio face; the sync one reads no argument
            await conn.disconnect(True)
            if attempt == 2 or not again():
                raise
        except BaseException:
            await conn.disconnect(True)  # a reply may still be on its way: never reuse it
            raise
        finally:
            await pool.release(conn)
    raise AssertionError("unreachable")  # pragma: no cover


async def exchange(conn: Any, packed: bytes) -> Any:
    """Send ``packed`` (one command's RESP frame) on redis-py's connection ``conn`` (from its
    pool, in step) and read its reply: the library's own send and hiredis's reader where they
    apply (`fencedlease._redis.lean.reader_for`), else redis-py's ``send_packed_command`` and
    ``read_response``. Either way redis-py's health check runs first (a ``PING`` on a
    connection idle past ``health_check_interval``), each read waits at most the connection's
    ``socket_timeout``, and a failure is raised as redis-py raises it; the caller drops a
    connection whose reply was not read (`run_packed`).

    Raises:
        redis.ResponseError: an error reply (``NoScriptError`` for ``NOSCRIPT``).
        redis.ConnectionError: the connection broke, or the server closed it.
        redis.TimeoutError: no reply (or no room to write) within ``socket_timeout``.
    """
    reader = reader_for(conn)
    if reader is None:
        await conn.send_packed_command([packed])
        return await conn.read_response()
    await send_lean(conn, packed, check_health=True)
    return await read_lean(conn, reader)


async def send_lean(conn: Any, packed: bytes, *, check_health: bool) -> None:
    """`exchange`'s send on the lean path: redis-py's health check first where ``check_health``
    (a ``PING`` on a connection idle past ``health_check_interval``), then ``packed`` written on
    the connection's socket.

    Raises:
        redis.ConnectionError: the connection's error (redis-py's words).
        redis.TimeoutError: no room to write within ``socket_timeout``.
    """
    if check_health and conn.health_check_interval:
        await conn.check_health()
    try:
        await send_bytes(conn, packed)
    except OSError as exc:
        raise socket_failed(conn, exc, reading=False) from exc


async def read_lean(conn: Any, reader: Any) -> Any:
    """`exchange`'s read on the lean path: bytes read from ``conn`` and fed to ``reader``
    (`fencedlease._redis.lean.reader_for`) until it holds a reply, each read waiting at most
    the connection's ``socket_timeout``. A reply followed by bytes nobody asked for (the
    connection out of step) is answered and the connection closed.

    Raises:
        redis.ResponseError: an error reply (``NoScriptError`` for ``NOSCRIPT``).
        redis.ConnectionError: the connection broke, or the server closed it.
        redis.TimeoutError: nothing came within ``socket_timeout``.
    """
    reply = reply_of(reader)
    while reply is NOT_YET:
        try:
            data = await read_bytes(conn, READ_SIZE)
        except OSError as exc:
            raise socket_failed(conn, exc) from exc
        reply = fed(reader, data)
    if leftover(reader):
        await conn.disconnect()
    elif conn.health_check_interval:  # as redis-py's read: a connection just heard from
        conn.next_health_check = redis_clock_s() + conn.health_check_interval
    return reply
