# GENERATED from src/fencedlease/_async/wire.py by `python scripts/unasync.py`:
# do not edit. Edit that source, then run it again (CI runs it with --check, failing while
# stale).
"""The send of the commands the library packs (`fencedlease._redis.wire`): a packed renewal
batch, release or acquire on one of a redis-py client's pooled connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from fencedlease._core.clock import mark_send
from fencedlease._redis.errors import (
    CommandRefused,
    ConnectionLost,
    ScriptNotLoaded,
    map_exceptions,
)
from fencedlease._redis.pool import connection_args
from fencedlease._redis.wire import PrimaryReads, always, forget_primary

__all__ = ["packs_itself", "run_packed"]


def packs_itself(client: object) -> bool:
    """Whether a batch for ``client`` may go out packed (`run_packed`): a plain
    ``redis.Redis`` on a pool (not one holding a connection of its own: its lock is
    redis-py's)."""
    return isinstance(client, redis.Redis) and client.connection is None


def run_packed(
    client: redis.Redis,
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
        conn = pool.get_connection(*connection_args(pool))
        try:
            with map_exceptions(ScriptNotLoaded, CommandRefused, ConnectionLost):
                packed = command if isinstance(command, bytes) else command.command(conn)
                mark_send()
                conn.send_packed_command([packed])
                reply = conn.read_response()
                return reply if isinstance(command, bytes) else command.reply(conn, reply)
        except (ScriptNotLoaded, CommandRefused):
            forget_primary(conn)
            raise  # a reply: the connection is in step
        except ConnectionLost:
            # nowait on the asyncio face; the sync one reads no argument
            conn.disconnect(True)
            if attempt == 2 or not again():
                raise
        except BaseException:
            conn.disconnect(True)  # a reply may still be on its way: never reuse it
            raise
        finally:
            pool.release(conn)
    raise AssertionError("unreachable")  # pragma: no cover
